// Command natsbench is the broker benchmark's nats.go load generator: one process runs a whole row,
// every client on its own connection, and prints one JSON object with the row's figures on stdout.
//
// Scenarios (-scenario):
//
//	pubsub  -pubs P -subs S [-queue] -count N -size B -subjects K [-stagger D]
//	        P publishers share N messages, each cycling through bench.0 .. bench.K-1 (K=1: bench.s);
//	        S subscribers on bench.* (bench.s when K=1), one queue group when -queue. With -stagger D,
//	        publisher i connects D*i after the first one starts and publishes N/P messages at once.
//	reqrep  -requesters R -count N -size B
//	        R requesters, each on its own connection, share N requests, one in flight each (nats.go's
//	        Request: a fresh reply subject per request); one responder on bench.req.
//	mixed   -count N -subjects K -requesters R
//	        all at once: 2 publishers of 16 B over bench.0..K-1 (N/2 each) and 1 of 256 B over
//	        orders.0..99.new (N/4); bench.* plain, bench.* queue group of 2, orders.> plain; R requesters
//	        on svc.echo (N/100 requests in all) with one responder.
//
// Timestamps are Unix nanoseconds. Rates are end to end: messages delivered / (first publish -> last
// message received); the publish rate (until each publisher's Flush returns) is reported separately.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// idle ends a row whose deliveries stop short of the expected count (a server dropping messages).
const idle = 5 * time.Second

var (
	url        = flag.String("url", "nats://127.0.0.1:4222", "server URL")
	scenario   = flag.String("scenario", "pubsub", "pubsub | reqrep | mixed")
	pubs       = flag.Int("pubs", 1, "publishers")
	subs       = flag.Int("subs", 1, "subscribers")
	queue      = flag.Bool("queue", false, "subscribers form one queue group")
	count      = flag.Int("count", 100000, "messages (or requests) in all")
	size       = flag.Int("size", 16, "payload bytes")
	nsubjects  = flag.Int("subjects", 1000, "interleaved subjects bench.0 .. bench.K-1 (1: bench.s)")
	stagger    = flag.Duration("stagger", 0, "publisher i connects stagger*i after the first starts")
	requesters = flag.Int("requesters", 16, "concurrent requesters")
	watchdog   = flag.Duration("watchdog", 300*time.Second, "abort the row after this long")
)

type pubSpec struct {
	subjects []string
	count    int
	size     int
	delay    time.Duration
}

type subSpec struct {
	subject string
	queue   string
	members int
}

// pubResult is one publisher's outcome: its connect time (or error) and when it sent and flushed.
type pubResult struct {
	ConnectMs float64 `json:"connect_ms"`
	Error     string  `json:"error,omitempty"`
	Sent      int     `json:"sent"`
	T0        int64   `json:"t0"`
	T1        int64   `json:"t1"`
}

func subjects(prefix string, k int, suffix string) []string {
	if k <= 1 {
		return []string{prefix + "s" + suffix}
	}
	out := make([]string, k)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d%s", prefix, i, suffix)
	}
	return out
}

// matches is NATS subject matching for the patterns the scenarios use (`*` one token, `>` the rest).
func matches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(p) == len(s)
}

func connect(name string) (*nats.Conn, time.Duration, error) {
	t := time.Now()
	nc, err := nats.Connect(*url, nats.Name(name)) // nats.go defaults: 2 s connect timeout
	return nc, time.Since(t), err
}

func publish(i int, spec pubSpec, start time.Time, out *pubResult) {
	time.Sleep(time.Until(start.Add(spec.delay)))
	nc, took, err := connect(fmt.Sprintf("bench-pub-%d", i))
	out.ConnectMs = float64(took.Microseconds()) / 1000
	if err != nil {
		out.Error = err.Error()
		return
	}
	defer nc.Close()
	data := make([]byte, spec.size)
	for j := range data {
		data[j] = 'x'
	}
	out.T0 = time.Now().UnixNano()
	k := len(spec.subjects)
	for j := 0; j < spec.count; j++ {
		if err := nc.Publish(spec.subjects[(i+j)%k], data); err != nil {
			out.Error = err.Error()
			break
		}
		out.Sent++
	}
	if err := nc.FlushTimeout(*watchdog); err != nil && out.Error == "" {
		out.Error = err.Error()
	}
	out.T1 = time.Now().UnixNano()
}

// counter counts one subscriber's messages and the time of its last one.
type counter struct {
	n    atomic.Int64
	last atomic.Int64
}

func subscribe(specs []subSpec) ([]*nats.Conn, []*counter, error) {
	var conns []*nats.Conn
	var counters []*counter
	for g, spec := range specs {
		for m := 0; m < spec.members; m++ {
			nc, _, err := connect(fmt.Sprintf("bench-sub-%d-%d", g, m))
			if err != nil {
				return conns, counters, err
			}
			conns = append(conns, nc)
			c := &counter{}
			counters = append(counters, c)
			cb := func(*nats.Msg) {
				c.n.Add(1)
				c.last.Store(time.Now().UnixNano())
			}
			var sub *nats.Subscription
			if spec.queue != "" {
				sub, err = nc.QueueSubscribe(spec.subject, spec.queue, cb)
			} else {
				sub, err = nc.Subscribe(spec.subject, cb)
			}
			if err != nil {
				return conns, counters, err
			}
			if err := sub.SetPendingLimits(-1, -1); err != nil {
				return conns, counters, err
			}
			if err := nc.Flush(); err != nil {
				return conns, counters, err
			}
		}
	}
	return conns, counters, nil
}

// expected counts the deliveries the sent messages owe the subscriber groups.
func expected(pspecs []pubSpec, presults []pubResult, sspecs []subSpec) int64 {
	var total int64
	for i, p := range pspecs {
		k := len(p.subjects)
		for g := range sspecs {
			per := int64(0)
			for j := 0; j < k && j < presults[i].Sent; j++ {
				if matches(sspecs[g].subject, p.subjects[(i+j)%k]) {
					per += int64((presults[i].Sent - j + k - 1) / k)
				}
			}
			if sspecs[g].queue == "" {
				per *= int64(sspecs[g].members)
			}
			total += per
		}
	}
	return total
}

// requests runs r requesters sharing n requests to subject, one in flight each; returns RTTs in ns.
func requests(subject string, r, n, size int) ([]int64, int, int64, int64) {
	var mu sync.Mutex
	var rtts []int64
	var errs atomic.Int64
	var wg sync.WaitGroup
	data := make([]byte, size)
	t0 := time.Now()
	for i := 0; i < r; i++ {
		share := n / r
		if i < n%r {
			share++
		}
		wg.Add(1)
		go func(i, share int) {
			defer wg.Done()
			nc, _, err := connect(fmt.Sprintf("bench-req-%d", i))
			if err != nil {
				errs.Add(int64(share))
				return
			}
			defer nc.Close()
			mine := make([]int64, 0, share)
			for j := 0; j < share; j++ {
				t := time.Now()
				if _, err := nc.Request(subject, data, 5*time.Second); err != nil {
					errs.Add(1)
					continue
				}
				mine = append(mine, int64(time.Since(t)))
			}
			mu.Lock()
			rtts = append(rtts, mine...)
			mu.Unlock()
		}(i, share)
	}
	wg.Wait()
	return rtts, int(errs.Load()), t0.UnixNano(), time.Now().UnixNano()
}

func responder(subject string, size int) (*nats.Conn, error) {
	nc, _, err := connect("bench-responder")
	if err != nil {
		return nil, err
	}
	reply := make([]byte, size)
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(reply) })
	if err != nil {
		return nc, err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nc, err
	}
	return nc, nc.Flush()
}

func percentiles(rtts []int64, out map[string]any) {
	sort.Slice(rtts, func(a, b int) bool { return rtts[a] < rtts[b] })
	for _, p := range []struct {
		name string
		q    float64
	}{{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}} {
		v := 0.0
		if len(rtts) > 0 {
			v = float64(rtts[min(len(rtts)-1, int(p.q*float64(len(rtts))))]) / 1000
		}
		out[p.name] = v
	}
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

// pubsub runs the publisher and subscriber groups (and, when r > 0, r requesters of rn requests on
// svc.echo) and fills out with the row's figures.
func pubsub(pspecs []pubSpec, sspecs []subSpec, r, rn int, out map[string]any) error {
	conns, counters, err := subscribe(sspecs)
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	if err != nil {
		return err
	}
	var reqDone chan map[string]any
	if r > 0 {
		rc, err := responder("svc.echo", 16)
		if rc != nil {
			defer rc.Close()
		}
		if err != nil {
			return err
		}
		reqDone = make(chan map[string]any, 1)
		go func() {
			rtts, errs, t0, t1 := requests("svc.echo", r, rn, 16)
			res := map[string]any{"requests": len(rtts), "request_errors": errs}
			res["request_rate"] = float64(len(rtts)) / (float64(t1-t0) / 1e9)
			percentiles(rtts, res)
			reqDone <- res
		}()
	}
	results := make([]pubResult, len(pspecs))
	var wg sync.WaitGroup
	start := time.Now()
	for i := range pspecs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			publish(i, pspecs[i], start, &results[i])
		}(i)
	}
	wg.Wait()
	want := expected(pspecs, results, sspecs)
	var delivered int64
	lastProgress, seen := time.Now(), int64(-1)
	for len(counters) > 0 {
		delivered = 0
		for _, c := range counters {
			delivered += c.n.Load()
		}
		if delivered >= want {
			break
		}
		if delivered != seen {
			seen, lastProgress = delivered, time.Now()
		} else if time.Since(lastProgress) > idle {
			break
		}
		time.Sleep(time.Millisecond)
	}
	var t0, tPub, tLast int64
	sent, failures := 0, 0
	for _, p := range results {
		if p.Error != "" {
			failures++
		}
		if p.T0 != 0 && (t0 == 0 || p.T0 < t0) {
			t0 = p.T0
		}
		if p.T1 > tPub {
			tPub = p.T1
		}
		sent += p.Sent
	}
	for _, c := range counters {
		if l := c.last.Load(); l > tLast {
			tLast = l
		}
	}
	out["publishers"] = results
	out["connect_failures"] = failures
	out["sent"] = sent
	out["expected"] = want
	out["delivered"] = delivered
	if tPub > t0 && t0 > 0 {
		out["pub_rate"] = float64(sent) / (float64(tPub-t0) / 1e9)
	}
	if len(counters) == 0 {
		out["rate"] = out["pub_rate"]
	} else if tLast > t0 && t0 > 0 {
		out["rate"] = float64(delivered) / (float64(tLast-t0) / 1e9)
	}
	if reqDone != nil {
		for k, v := range <-reqDone {
			out[k] = v
		}
	}
	return nil
}

func run() (map[string]any, error) {
	out := map[string]any{"scenario": *scenario, "nats_go": nats.Version}
	switch *scenario {
	case "pubsub":
		bench := subjects("bench.", *nsubjects, "")
		var pspecs []pubSpec
		for i := 0; i < *pubs; i++ {
			share := *count / *pubs
			if i < *count%*pubs {
				share++
			}
			pspecs = append(pspecs, pubSpec{bench, share, *size, *stagger * time.Duration(i)})
		}
		var sspecs []subSpec
		if *subs > 0 {
			subject := "bench.*"
			if *nsubjects <= 1 {
				subject = "bench.s"
			}
			if *queue {
				sspecs = []subSpec{{subject, "q", *subs}}
			} else {
				sspecs = []subSpec{{subject, "", *subs}}
			}
		}
		return out, pubsub(pspecs, sspecs, 0, 0, out)
	case "mixed":
		bench := subjects("bench.", *nsubjects, "")
		pspecs := []pubSpec{
			{bench, *count / 2, 16, 0},
			{bench, *count / 2, 16, 0},
			{subjects("orders.", 100, ".new"), *count / 4, 256, 0},
		}
		sspecs := []subSpec{{"bench.*", "", 1}, {"bench.*", "mq", 2}, {"orders.>", "", 1}}
		return out, pubsub(pspecs, sspecs, *requesters, max(*count/100, *requesters), out)
	case "reqrep":
		rc, err := responder("bench.req", *size)
		if rc != nil {
			defer rc.Close()
		}
		if err != nil {
			return out, err
		}
		rtts, errs, t0, t1 := requests("bench.req", *requesters, *count, *size)
		out["n"], out["request_errors"] = len(rtts), errs
		out["rate"] = float64(len(rtts)) / (float64(t1-t0) / 1e9)
		percentiles(rtts, out)
		return out, nil
	}
	return out, fmt.Errorf("unknown scenario %q", *scenario)
}

func max(a, b int) int {
	if a > b {
		return a
	}
	return b
}

func main() {
	flag.Parse()
	time.AfterFunc(*watchdog, func() {
		fmt.Fprintln(os.Stderr, "natsbench: watchdog")
		os.Exit(2)
	})
	out, err := run()
	if err != nil {
		out["error"] = err.Error()
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	if err != nil {
		os.Exit(1)
	}
}
