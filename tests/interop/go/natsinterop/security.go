package main

import (
	"crypto/tls"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
)

// tlsVersions names the versions a client may negotiate (tls.VersionName needs Go 1.21).
var tlsVersions = map[uint16]string{tls.VersionTLS12: "TLS 1.2", tls.VersionTLS13: "TLS 1.3"}

// roundTrip publishes one message to its own subscription and checks it comes back.
func roundTrip(nc *nats.Conn, subject string) error {
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := nc.Publish(subject, []byte("secret")); err != nil {
		return err
	}
	m, err := sub.NextMsg(wait)
	if err != nil {
		return err
	}
	if string(m.Data) != "secret" {
		return fmt.Errorf("round trip got %q", m.Data)
	}
	return nil
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// credential turns "user:pass" (mode user), "token" (mode token) or a creds file path (mode creds: a
// user JWT and its nkey seed) into a connect option.
func credential(mode, cred string) nats.Option {
	switch mode {
	case "user":
		user, pass, _ := strings.Cut(cred, ":")
		return nats.UserInfo(user, pass)
	case "creds":
		return nats.UserCredentials(cred)
	}
	return nats.Token(cred)
}

// runAuth connects with good credentials (and does a round trip), with bad ones and with none.
func runAuth(url string, args []string) error {
	mode, good, bad := args[0], args[1], args[2]
	nc, err := connect(url, credential(mode, good))
	result := errText(err)
	if err == nil {
		result = errText(roundTrip(nc, "interop.auth"))
		nc.Close()
	}
	emit(map[string]any{"ev": "auth", "case": "good", "result": result})
	for name, opts := range map[string][]nats.Option{"bad": {credential(mode, bad)}, "none": nil} {
		nc, err := connect(url, append(opts, nats.NoReconnect())...)
		if err == nil {
			nc.Close()
		}
		emit(map[string]any{"ev": "auth", "case": name, "result": errText(err)})
	}
	return nil
}

// runTLS connects over TLS trusting the test CA (round trip included), then without trusting it.
func runTLS(url string, args []string) error {
	caFile := args[0]
	nc, err := connect(url, nats.RootCAs(caFile))
	result, version := errText(err), ""
	if err == nil {
		result = errText(roundTrip(nc, "interop.tls"))
		if state, err := nc.TLSConnectionState(); err == nil {
			version = tlsVersions[state.Version]
		}
		nc.Close()
	}
	emit(map[string]any{"ev": "tls", "case": "trusted", "result": result, "version": version})
	nc, err = connect(url, nats.NoReconnect())
	if err == nil {
		nc.Close()
	}
	emit(map[string]any{"ev": "tls", "case": "untrusted", "result": errText(err)})
	return nil
}

// runMutualTLS connects with a client certificate (round trip included), then with none.
func runMutualTLS(url string, args []string) error {
	caFile, certFile, keyFile := args[0], args[1], args[2]
	nc, err := connect(url, nats.RootCAs(caFile), nats.ClientCert(certFile, keyFile), nats.NoReconnect())
	result := errText(err)
	if err == nil {
		result = errText(roundTrip(nc, "interop.mtls"))
		nc.Close()
	}
	emit(map[string]any{"ev": "mtls", "case": "with_cert", "result": result})
	nc, err = connect(url, nats.RootCAs(caFile), nats.NoReconnect())
	if err == nil {
		err = roundTrip(nc, "interop.mtls")
		nc.Close()
	}
	emit(map[string]any{"ev": "mtls", "case": "without_cert", "result": errText(err)})
	return nil
}
