// Command natsinterop drives one NATS scenario with the official Go client (nats.go) and prints one JSON
// object per line on stdout, so the pytest suite in tests/interop can check the results.
//
// Usage: natsinterop <scenario> <url> [args...]; see the scenarios map for each one's arguments.
package main

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// watchdog bounds every run: no scenario may hang the test suite.
const watchdog = 25 * time.Second

// failoverWatchdog bounds the failover scenario, which lasts while nodes start and stop around it.
const failoverWatchdog = 90 * time.Second

// wait is the upper bound for any single expected event (a message, a reply, a reconnect).
const wait = 10 * time.Second

type scenario func(url string, args []string) error

var scenarios = map[string]scenario{
	"connect":   runConnect,   // url subject
	"pubsub":    runPubSub,    // url subject count
	"wildcards": runWildcards, // url prefix
	"queue":     runQueue,     // url subject count
	"autounsub": runAutoUnsub, // url subject max count
	"flush":     runFlush,     // url
	"respond":   runRespond,   // url subject count
	"request":   runRequest,   // url subject count old|new
	"noresp":    runNoResponders,
	"drain":     runDrain,     // url subject count
	"reconnect": runReconnect, // url subject count
	"slow":      runSlow,      // url subject
	"auth":      runAuth,      // url user|token|creds good bad
	"tls":       runTLS,       // url cafile subject
	"mtls":      runMutualTLS, // url cafile certfile keyfile
	"pub":       runPub,       // url subject count
	"sub":       runSub,       // url subject count
	"burst":     runBurst,     // url subject count
	"tally":     runTally,     // url subject count
	"noheaders": runNoHeaders, // url subject
	"ldm":       runLameDuck,  // url
	"failover":  runFailover,  // url (then stdin: servers | quit)
}

func main() {
	if len(os.Args) < 3 {
		fail("usage: natsinterop <scenario> <url> [args...]")
	}
	run, ok := scenarios[os.Args[1]]
	if !ok {
		fail("unknown scenario " + os.Args[1])
	}
	limit := watchdog
	if os.Args[1] == "failover" {
		limit = failoverWatchdog
	}
	time.AfterFunc(limit, func() { fail("watchdog: scenario did not finish in time") })
	if err := run(os.Args[2], os.Args[3:]); err != nil {
		fail(err.Error())
	}
	emit(map[string]any{"ev": "done"})
}

func emit(v map[string]any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(b))
}

func fail(msg string) {
	emit(map[string]any{"ev": "error", "msg": msg})
	os.Exit(1)
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fail("bad number " + s)
	}
	return n
}

// waitStdin blocks until the test harness writes a line (or closes stdin).
func waitStdin() {
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}

// payloadSizes and payload mirror tests/interop/spec.py: message i has size payloadSizes[i%len] and
// byte j equal to (i + 7*j) % 256, so CR, LF and NUL bytes appear inside payloads.
var payloadSizes = []int{0, 1, 2, 10, 127, 128, 1000, 4095, 4096, 65536}

func payload(i int) []byte {
	b := make([]byte, payloadSizes[i%len(payloadSizes)])
	for j := range b {
		b[j] = byte((i + 7*j) % 256)
	}
	return b
}

// headersFor mirrors spec.headers(i, "go"): repeated keys, inner spaces, colons and case are all kept.
func headersFor(i int, origin string) nats.Header {
	h := nats.Header{}
	h.Add("X-Seq", strconv.Itoa(i))
	h.Add("X-Multi", "one")
	h.Add("X-Multi", "two")
	h.Add("X-Spaces", "a  b c")
	h.Add("X-Colon", "k:v:w")
	h.Add("x-lower", "MiXeD")
	h.Add("X-Origin", origin)
	return h
}

// headerPairs lists headers as [key, value] pairs, keys sorted, values in wire order.
func headerPairs(h nats.Header) [][2]string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	pairs := [][2]string{}
	for _, k := range keys {
		for _, v := range h[k] {
			pairs = append(pairs, [2]string{k, v})
		}
	}
	return pairs
}

func msgEvent(ev string, m *nats.Msg) map[string]any {
	return map[string]any{
		"ev": ev, "subject": m.Subject, "reply": m.Reply, "data": hex.EncodeToString(m.Data),
		"hdr": headerPairs(m.Header),
	}
}

func connect(url string, opts ...nats.Option) (*nats.Conn, error) {
	base := []nats.Option{nats.Name("interop-go"), nats.Timeout(5 * time.Second)}
	return nats.Connect(url, append(base, opts...)...)
}

// drainPending reads exactly the messages already queued on a sync subscription (after a Flush every
// message the server sent before its PONG is queued).
func drainPending(sub *nats.Subscription) ([]*nats.Msg, error) {
	n, _, err := sub.Pending()
	if err != nil {
		return nil, err
	}
	msgs := make([]*nats.Msg, 0, n)
	for i := 0; i < n; i++ {
		m, err := sub.NextMsg(wait)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}
