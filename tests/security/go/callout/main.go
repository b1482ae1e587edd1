// Command callout is an auth-callout service and a client, both written with the Go NATS libraries (nats.go,
// nkeys, x/crypto's NaCl box): the service answers the server's authorization requests on
// $SYS.REQ.USER.AUTH with user JWTs it builds and signs itself (the packaged jwt library predates the
// callout claims), then nats.go clients log in through it. It prints one JSON object with what they saw,
// for tests/security/test_auth_callout_go.py to compare between servers.
//
// Usage: callout -url URL -issuer SEED [-xkey SEED] [-signer SEED -placement ACCOUNT] [-service-creds FILE
// -client-creds FILE] (config mode: the service connects as auth/pwd, the callout's auth user; operator mode:
// with its credentials, and the clients present theirs, a sentinel, with their user and password).
// alice/secret gets into the placement account, publishing and subscribing on allowed.> and _INBOX.> only;
// anyone else is refused with a reason.
package main

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/nacl/box"
)

const (
	calloutSubject = "$SYS.REQ.USER.AUTH"
	xkeyHeader     = "Nats-Server-Xkey"
	xkeyVersion    = "xkv1"
	wait           = 10 * time.Second
)

func fail(err error) {
	fmt.Println(`{"error":` + strconv.Quote(err.Error()) + `}`)
	os.Exit(1)
}

// --- xkeys (curve25519 nkeys), which the packaged nkeys 0.3.0 does not have ---

const curvePrefix = 23 << 3 // base32 'X'
const seedPrefix = 18 << 3  // base32 'S'

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// crc16 is the CRC-16/XMODEM checksum nkeys appends to every encoded key.
func crc16(data []byte) uint16 {
	var crc uint16
	for _, b := range data {
		crc ^= uint16(b) << 8
		for i := 0; i < 8; i++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// decodeChecked base32-decodes an nkey and checks its length and checksum; returns the bytes before it.
func decodeChecked(text string, size int) ([]byte, error) {
	raw, err := b32.DecodeString(text)
	if err != nil || len(raw) != size+2 {
		return nil, errors.New("invalid xkey encoding")
	}
	body := raw[:size]
	if crc16(body) != uint16(raw[size])|uint16(raw[size+1])<<8 {
		return nil, errors.New("invalid xkey checksum")
	}
	return body, nil
}

func xkeyPublic(text string) (*[32]byte, error) {
	body, err := decodeChecked(text, 33)
	if err != nil {
		return nil, err
	}
	if body[0] != curvePrefix {
		return nil, errors.New("not a curve public key")
	}
	var key [32]byte
	copy(key[:], body[1:])
	return &key, nil
}

func xkeyPrivate(seed string) (*[32]byte, error) {
	body, err := decodeChecked(seed, 34)
	if err != nil {
		return nil, err
	}
	if body[0] != seedPrefix|curvePrefix>>5 || body[1] != (curvePrefix&31)<<3 {
		return nil, errors.New("not a curve seed")
	}
	var key [32]byte
	copy(key[:], body[2:])
	return &key, nil
}

func seal(data []byte, recipient, private *[32]byte) []byte {
	var nonce [24]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		fail(err)
	}
	return box.Seal(append([]byte(xkeyVersion), nonce[:]...), data, &nonce, recipient, private)
}

func open(data []byte, sender, private *[32]byte) ([]byte, error) {
	if len(data) <= len(xkeyVersion)+24 || !strings.HasPrefix(string(data), xkeyVersion) {
		return nil, errors.New("not a sealed message")
	}
	var nonce [24]byte
	copy(nonce[:], data[len(xkeyVersion):])
	opened, ok := box.Open(nil, data[len(xkeyVersion)+24:], &nonce, sender, private)
	if !ok {
		return nil, errors.New("could not open the request")
	}
	return opened, nil
}

// --- JWTs (ed25519-nkey, as the jwt library writes v2 claims) ---

var b64 = base64.RawURLEncoding

func issue(signer nkeys.KeyPair, subject, kind string, nats map[string]any, claims map[string]any) string {
	issuer, err := signer.PublicKey()
	if err != nil {
		fail(err)
	}
	jti := make([]byte, 16)
	if _, err := rand.Read(jti); err != nil {
		fail(err)
	}
	nats["type"], nats["version"] = kind, 2
	payload := map[string]any{"jti": b64.EncodeToString(jti), "iat": time.Now().Unix(), "iss": issuer,
		"sub": subject, "nats": nats}
	for k, v := range claims {
		payload[k] = v
	}
	body, err := json.Marshal(payload)
	if err != nil {
		fail(err)
	}
	signed := b64.EncodeToString([]byte(`{"typ":"JWT","alg":"ed25519-nkey"}`)) + "." + b64.EncodeToString(body)
	sig, err := signer.Sign([]byte(signed))
	if err != nil {
		fail(err)
	}
	return signed + "." + b64.EncodeToString(sig)
}

type request struct {
	raw      map[string]any
	Issuer   string `json:"iss"`
	Audience string `json:"aud"`
	Subject  string `json:"sub"`
	Nats     struct {
		Type     string `json:"type"`
		UserNkey string `json:"user_nkey"`
		ServerID struct {
			ID   string `json:"id"`
			XKey string `json:"xkey"`
		} `json:"server_id"`
		ConnectOpts struct {
			User string `json:"user"`
			Pass string `json:"pass"`
		} `json:"connect_opts"`
		ClientInfo struct {
			User    string   `json:"user"`
			Kind    string   `json:"kind"`
			NameTag string   `json:"name_tag"`
			Tags    []string `json:"tags"`
		} `json:"client_info"`
	} `json:"nats"`
}

// verify decodes a JWT signed by the server (its id is its public nkey) and checks that signature.
func verify(token string) (*request, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, errors.New("not a JWT")
	}
	body, err := b64.DecodeString(parts[1])
	if err != nil {
		return nil, err
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil {
		return nil, err
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(body, &req.raw); err != nil {
		return nil, err
	}
	server, err := nkeys.FromPublicKey(req.Issuer)
	if err != nil {
		return nil, err
	}
	if err := server.Verify([]byte(parts[0]+"."+parts[1]), sig); err != nil {
		return nil, err
	}
	if req.Nats.Type != "authorization_request" || req.Nats.ServerID.ID != req.Issuer {
		return nil, errors.New("not an authorization request from its server")
	}
	return &req, nil
}

// seen is what the service noted about one request.
type seen struct {
	User       string   `json:"user"`
	ClientUser string   `json:"client_user"`
	Kind       string   `json:"kind"`
	Sealed     bool     `json:"sealed"`
	ServerXKey bool     `json:"server_xkey"`
	NameTag    string   `json:"name_tag,omitempty"` // a JWT client's: its user JWT's name
	Tags       []string `json:"tags,omitempty"`     // and its tags
	Shape      []string `json:"shape"`
}

// shape lists the key paths of a decoded JSON value with their JSON types, sorted: what a service can rely
// on finding in a request.
func shape(value any, path string, out []string) []string {
	switch v := value.(type) {
	case map[string]any:
		for key, inner := range v {
			out = shape(inner, path+"."+key, out)
		}
		return out
	case []any:
		return append(out, path+":array")
	case string:
		return append(out, path+":string")
	case float64:
		return append(out, path+":number")
	case bool:
		return append(out, path+":bool")
	}
	return append(out, path+":null")
}

type service struct {
	issuer    nkeys.KeyPair // signs the responses
	signer    nkeys.KeyPair // signs the user JWTs (operator mode: an account the callout may place users in)
	private   *[32]byte     // the service's xkey, nil for plain requests
	placement string        // the user JWTs' audience: config mode names the account, operator mode its key
	mu        sync.Mutex
	seen      []seen
	errs      []string
}

func (s *service) handle(msg *nats.Msg) {
	if err := s.answer(msg); err != nil {
		s.mu.Lock()
		s.errs = append(s.errs, err.Error())
		s.mu.Unlock()
	}
}

func (s *service) answer(msg *nats.Msg) error {
	data := msg.Data
	serverXKey := msg.Header.Get(xkeyHeader)
	var serverPublic *[32]byte
	if serverXKey != "" {
		if s.private == nil {
			return errors.New("a sealed request for a service without an xkey")
		}
		var err error
		if serverPublic, err = xkeyPublic(serverXKey); err != nil {
			return err
		}
		if data, err = open(data, serverPublic, s.private); err != nil {
			return err
		}
	}
	req, err := verify(string(data))
	if err != nil {
		return err
	}
	if issuer, _ := s.issuer.PublicKey(); req.Subject != issuer || req.Audience != "nats-authorization-request" {
		return fmt.Errorf("a request about %q for %q", req.Subject, req.Audience)
	}
	opts := req.Nats.ConnectOpts
	keys := shape(req.raw, "", nil)
	sort.Strings(keys)
	s.mu.Lock()
	s.seen = append(s.seen, seen{opts.User, req.Nats.ClientInfo.User, req.Nats.ClientInfo.Kind,
		serverXKey != "", req.Nats.ServerID.XKey != "", req.Nats.ClientInfo.NameTag,
		req.Nats.ClientInfo.Tags, keys})
	s.mu.Unlock()
	answer := map[string]any{}
	if opts.User == "alice" && opts.Pass == "secret" {
		allowed := []string{"allowed.>", "_INBOX.>"}
		permissions := map[string]any{"pub": map[string]any{"allow": allowed},
			"sub": map[string]any{"allow": allowed}, "subs": -1, "data": -1, "payload": -1}
		answer["jwt"] = issue(s.signer, req.Nats.UserNkey, "user", permissions,
			map[string]any{"name": opts.User, "aud": s.placement})
	} else {
		answer["error"] = "no entry for " + opts.User
	}
	response := []byte(issue(s.issuer, req.Nats.UserNkey, "authorization_response", answer,
		map[string]any{"aud": req.Nats.ServerID.ID}))
	if serverPublic != nil {
		response = seal(response, serverPublic, s.private)
	}
	return msg.Respond(response)
}

// login is what a nats.go client logging in as user/password saw.
type login struct {
	Connect string   `json:"connect"` // the error nats.Connect returned, "" when connected
	Echo    string   `json:"echo"`    // what came back on allowed.>
	Errors  []string `json:"errors"`  // what the error handler got, in order
	Request string   `json:"request"` // a request/reply on allowed.> through the user's inbox
}

func logIn(url, user, password string, presented ...nats.Option) login {
	var out login
	var mu sync.Mutex
	got := make(chan struct{}, 8)
	options := append([]nats.Option{nats.UserInfo(user, password), nats.NoReconnect(), nats.Timeout(wait),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			out.Errors = append(out.Errors, err.Error())
			mu.Unlock()
			got <- struct{}{}
		})}, presented...)
	nc, err := nats.Connect(url, options...)
	if err != nil {
		out.Connect = err.Error()
		return out
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("allowed.>")
	if err != nil {
		fail(err)
	}
	responder, err := nc.Subscribe("allowed.service", func(m *nats.Msg) { _ = m.Respond([]byte("served")) })
	if err != nil {
		fail(err)
	}
	defer responder.Unsubscribe()
	if err := nc.Publish("allowed.one", []byte("in")); err != nil {
		fail(err)
	}
	msg, err := sub.NextMsg(wait)
	if err != nil {
		fail(err)
	}
	out.Echo = string(msg.Data)
	reply, err := nc.Request("allowed.service", []byte("ask"), wait)
	if err != nil {
		fail(err)
	}
	out.Request = string(reply.Data)
	for _, step := range []func() error{
		func() error { return nc.Publish("elsewhere", []byte("out")) },
		func() error { _, err := nc.SubscribeSync("elsewhere.>"); return err },
	} {
		if err := step(); err != nil {
			fail(err)
		}
		if err := nc.Flush(); err != nil {
			fail(err)
		}
		select {
		case <-got:
		case <-time.After(wait):
			fail(errors.New("no permissions violation reported"))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return out
}

func main() {
	go func() { time.Sleep(30 * time.Second); fail(errors.New("watchdog")) }()
	url := flag.String("url", "", "the server's URL")
	issuerSeed := flag.String("issuer", "", "the seed of the account key signing the responses")
	signerSeed := flag.String("signer", "", "the seed of the account key signing the user JWTs (default: -issuer)")
	placement := flag.String("placement", "APP", "the account the user JWTs place their users in")
	xkeySeed := flag.String("xkey", "", "the seed of the service's xkey (none: plain requests only)")
	serviceCreds := flag.String("service-creds", "", "the service's credentials (default: user auth/pwd)")
	clientCreds := flag.String("client-creds", "", "credentials the clients present with their user/password")
	flag.Parse()
	issuer, err := nkeys.FromSeed([]byte(*issuerSeed))
	if err != nil {
		fail(err)
	}
	svc := &service{issuer: issuer, signer: issuer, placement: *placement}
	if *signerSeed != "" {
		if svc.signer, err = nkeys.FromSeed([]byte(*signerSeed)); err != nil {
			fail(err)
		}
	}
	if *xkeySeed != "" {
		if svc.private, err = xkeyPrivate(*xkeySeed); err != nil {
			fail(err)
		}
	}
	login := []nats.Option{nats.NoReconnect()}
	if *serviceCreds != "" {
		login = append(login, nats.UserCredentials(*serviceCreds))
	} else {
		login = append(login, nats.UserInfo("auth", "pwd"))
	}
	nc, err := nats.Connect(*url, login...)
	if err != nil {
		fail(err)
	}
	defer nc.Close()
	if _, err := nc.Subscribe(calloutSubject, svc.handle); err != nil {
		fail(err)
	}
	if err := nc.Flush(); err != nil {
		fail(err)
	}
	var presented []nats.Option
	if *clientCreds != "" {
		presented = append(presented, nats.UserCredentials(*clientCreds))
	}
	result := map[string]any{
		"alice": logIn(*url, "alice", "secret", presented...),
		"bob":   logIn(*url, "bob", "wrong", presented...),
	}
	svc.mu.Lock()
	result["seen"], result["service_errors"] = svc.seen, svc.errs
	svc.mu.Unlock()
	out, err := json.Marshal(result)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(out))
}
