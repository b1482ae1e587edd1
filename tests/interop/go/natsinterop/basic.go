package main

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// runConnect checks connect options: name, echo off vs on, header support and server INFO values.
// A no-echo connection and an echo connection each publish once, then a third connection publishes a
// sentinel; every message arrives before the sentinel, so "seen" lists are complete without timing.
func runConnect(url string, args []string) error {
	subject := args[0]
	noEcho, err := connect(url, nats.Name("interop-go-noecho"), nats.NoEcho())
	if err != nil {
		return err
	}
	defer noEcho.Close()
	echo, err := connect(url, nats.Name("interop-go-echo"))
	if err != nil {
		return err
	}
	defer echo.Close()
	other, err := connect(url)
	if err != nil {
		return err
	}
	defer other.Close()
	subs := map[string]*nats.Subscription{}
	for name, nc := range map[string]*nats.Conn{"noecho": noEcho, "echo": echo} {
		sub, err := nc.SubscribeSync(subject)
		if err != nil {
			return err
		}
		if err := nc.Flush(); err != nil {
			return err
		}
		subs[name] = sub
	}
	for _, p := range []struct {
		nc   *nats.Conn
		data string
	}{{noEcho, "from-noecho"}, {echo, "from-echo"}, {other, "sentinel"}} {
		if err := p.nc.Publish(subject, []byte(p.data)); err != nil {
			return err
		}
		if err := p.nc.Flush(); err != nil {
			return err
		}
	}
	seen := map[string][]string{}
	for name, sub := range subs {
		seen[name] = []string{}
		for {
			m, err := sub.NextMsg(wait)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			seen[name] = append(seen[name], string(m.Data))
			if string(m.Data) == "sentinel" {
				break
			}
		}
	}
	cid, err := noEcho.GetClientID()
	if err != nil {
		return err
	}
	emit(map[string]any{
		"ev": "connect", "headers": noEcho.HeadersSupported(), "max_payload": noEcho.MaxPayload(),
		"server_version": noEcho.ConnectedServerVersion(), "client_id": cid,
		"noecho_seen": seen["noecho"], "echo_seen": seen["echo"],
	})
	// The harness inspects /connz while the connections are open, then releases us.
	emit(map[string]any{"ev": "ready"})
	waitStdin()
	return nil
}

// runPubSub publishes count payloads of assorted sizes to its own subscription and prints them.
func runPubSub(url string, args []string) error {
	subject, count := args[0], atoi(args[1])
	nc, err := connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		return err
	}
	for i := 0; i < count; i++ {
		if err := nc.Publish(subject, payload(i)); err != nil {
			return err
		}
	}
	for i := 0; i < count; i++ {
		m, err := sub.NextMsg(wait)
		if err != nil {
			return err
		}
		emit(msgEvent("msg", m))
	}
	return nil
}

// wildcardPatterns are subscribed under the prefix; wildcardSubjects are published under it.
var wildcardPatterns = []string{"*", ">", "a.*", "*.c", "a.>"}
var wildcardSubjects = []string{"a", "a.b", "x.c", "a.b.c", "a.c"}

// runWildcards prints, for each pattern, every message it received (after a flush all are queued).
func runWildcards(url string, args []string) error {
	prefix := args[0]
	nc, err := connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	subs := make([]*nats.Subscription, len(wildcardPatterns))
	for i, p := range wildcardPatterns {
		if subs[i], err = nc.SubscribeSync(prefix + "." + p); err != nil {
			return err
		}
	}
	for _, s := range wildcardSubjects {
		if err := nc.Publish(prefix+"."+s, []byte(s)); err != nil {
			return err
		}
	}
	// The bare prefix matches none of the patterns ('>' needs at least one more token).
	if err := nc.Publish(prefix, []byte("bare")); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	for i, sub := range subs {
		msgs, err := drainPending(sub)
		if err != nil {
			return err
		}
		got := []string{}
		for _, m := range msgs {
			got = append(got, m.Subject)
		}
		emit(map[string]any{"ev": "wildcard", "pattern": wildcardPatterns[i], "subjects": got})
	}
	return nil
}

// runQueue spreads count messages over three queue members and one plain subscriber.
func runQueue(url string, args []string) error {
	subject, count := args[0], atoi(args[1])
	nc, err := connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	var subs []*nats.Subscription
	for i := 0; i < 3; i++ {
		sub, err := nc.QueueSubscribeSync(subject, "workers")
		if err != nil {
			return err
		}
		subs = append(subs, sub)
	}
	plain, err := nc.SubscribeSync(subject)
	if err != nil {
		return err
	}
	subs = append(subs, plain)
	for i := 0; i < count; i++ {
		if err := nc.Publish(subject, []byte(fmt.Sprint(i))); err != nil {
			return err
		}
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	for i, sub := range subs {
		msgs, err := drainPending(sub)
		if err != nil {
			return err
		}
		seqs := []string{}
		for _, m := range msgs {
			seqs = append(seqs, string(m.Data))
		}
		member := fmt.Sprintf("q%d", i)
		if sub == plain {
			member = "plain"
		}
		emit(map[string]any{"ev": "queue", "member": member, "seqs": seqs})
	}
	return nil
}

// runAutoUnsub subscribes with an auto-unsubscribe limit of max and receives on its own connection, so
// the connection's in_msgs counts what the server actually sent (the client drops extras silently).
func runAutoUnsub(url string, args []string) error {
	subject, max, count := args[0], atoi(args[1]), atoi(args[2])
	nc, err := connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	pub, err := connect(url)
	if err != nil {
		return err
	}
	defer pub.Close()
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		return err
	}
	if err := sub.AutoUnsubscribe(max); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	for i := 0; i < count; i++ {
		if err := pub.Publish(subject, []byte(fmt.Sprint(i))); err != nil {
			return err
		}
	}
	if err := pub.Flush(); err != nil {
		return err
	}
	// A flush on the receiving side guarantees everything the server routed to us has been read.
	if err := nc.Flush(); err != nil {
		return err
	}
	received := []string{}
	for len(received) < max && len(received) < count {
		m, err := sub.NextMsg(wait)
		if err != nil {
			return err
		}
		received = append(received, string(m.Data))
	}
	// One more read must fail at once: the limit is reached and the subscription is gone.
	_, extra := sub.NextMsg(wait)
	emit(map[string]any{
		"ev": "autounsub", "received": received, "in_msgs": nc.Stats().InMsgs, "valid": sub.IsValid(),
		"client_subs": nc.NumSubscriptions(), "extra_err": fmt.Sprint(extra),
	})
	return nil
}

// runFlush checks Flush, FlushTimeout and RTT.
func runFlush(url string, args []string) error {
	nc, err := connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	for i := 0; i < 100; i++ {
		if err := nc.Publish("interop.flush", []byte("x")); err != nil {
			return err
		}
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		return err
	}
	rtt, err := nc.RTT()
	if err != nil {
		return err
	}
	buffered, err := nc.Buffered()
	if err != nil {
		return err
	}
	emit(map[string]any{"ev": "flush", "rtt_ns": rtt.Nanoseconds(), "buffered": buffered, "out_msgs": nc.Stats().OutMsgs})
	return nil
}

// runNoHeaders runs against a server started with no_header_support: the client must see that headers
// are unsupported, refuse a message with headers, and still deliver plain messages.
func runNoHeaders(url string, args []string) error {
	subject := args[0]
	nc, err := connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	m := nats.NewMsg(subject)
	m.Header.Set("X-Test", "1")
	hdrErr := nc.PublishMsg(m)
	emit(map[string]any{
		"ev": "noheaders", "headers": nc.HeadersSupported(), "publish_with_headers": errText(hdrErr),
		"round_trip": errText(roundTrip(nc, subject)),
	})
	return nil
}
