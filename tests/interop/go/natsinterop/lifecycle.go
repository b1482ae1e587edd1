package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// await returns an error when ch does not fire within the scenario wait bound.
func await(ch <-chan struct{}, what string) error {
	select {
	case <-ch:
		return nil
	case <-time.After(wait):
		return errors.New("timed out waiting for " + what)
	}
}

// runDrain lets a slow async handler fall behind, then drains the connection: every message already
// delivered must still be processed before the connection closes.
func runDrain(url string, args []string) error {
	subject, count := args[0], atoi(args[1])
	closed := make(chan struct{})
	nc, err := connect(url, nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		return err
	}
	defer nc.Close()
	var processed atomic.Int64
	if _, err := nc.Subscribe(subject, func(*nats.Msg) {
		time.Sleep(time.Millisecond)
		processed.Add(1)
	}); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	pub, err := connect(url)
	if err != nil {
		return err
	}
	defer pub.Close()
	for i := 0; i < count; i++ {
		if err := pub.Publish(subject, []byte(fmt.Sprint(i))); err != nil {
			return err
		}
	}
	if err := pub.Flush(); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	atDrain := processed.Load()
	if err := nc.Drain(); err != nil {
		return err
	}
	if err := await(closed, "close after drain"); err != nil {
		return err
	}
	afterErr := nc.Publish(subject, []byte("late"))
	emit(map[string]any{
		"ev": "drain", "processed": processed.Load(), "processed_at_drain": atDrain, "closed": nc.IsClosed(),
		"publish_after": fmt.Sprint(afterErr),
	})
	return nil
}

// runReconnect survives a broker restart on the same port: publishes made while disconnected are
// buffered by the client and delivered (through the restarted broker) to its own subscription.
// Protocol with the harness: "ready" -> harness stops the broker -> "disconnected", "buffered" ->
// harness restarts the broker -> "reconnected", then the messages.
func runReconnect(url string, args []string) error {
	subject, count := args[0], atoi(args[1])
	disconnected := make(chan struct{}, 1)
	reconnected := make(chan struct{}, 1)
	nc, err := connect(url,
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.ReconnectJitter(0, 0),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { signal(disconnected) }),
		nats.ReconnectHandler(func(*nats.Conn) { signal(reconnected) }),
	)
	if err != nil {
		return err
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	emit(map[string]any{"ev": "ready"})
	if err := await(disconnected, "disconnect"); err != nil {
		return err
	}
	emit(map[string]any{"ev": "disconnected"})
	for i := 0; i < count; i++ {
		if err := nc.Publish(subject, []byte(fmt.Sprint(i))); err != nil {
			return err
		}
	}
	buffered, err := nc.Buffered()
	if err != nil {
		return err
	}
	emit(map[string]any{"ev": "buffered", "bytes": buffered})
	if err := await(reconnected, "reconnect"); err != nil {
		return err
	}
	emit(map[string]any{"ev": "reconnected", "reconnects": nc.Stats().Reconnects})
	seqs := []string{}
	for i := 0; i < count; i++ {
		m, err := sub.NextMsg(wait)
		if err != nil {
			return fmt.Errorf("after %d messages: %w", i, err)
		}
		seqs = append(seqs, string(m.Data))
	}
	emit(map[string]any{"ev": "delivered", "seqs": seqs})
	return nil
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// runSlow blocks an async handler so the subscription's pending limit (5 messages) overflows; the
// client must report ErrSlowConsumer through its error handler and count the dropped messages.
func runSlow(url string, args []string) error {
	subject := args[0]
	reported := make(chan struct{}, 1)
	nc, err := connect(url, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrSlowConsumer) {
			signal(reported)
		}
	}))
	if err != nil {
		return err
	}
	defer nc.Close()
	release := make(chan struct{})
	sub, err := nc.Subscribe(subject, func(*nats.Msg) { <-release })
	if err != nil {
		return err
	}
	if err := sub.SetPendingLimits(5, 1<<20); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	pub, err := connect(url)
	if err != nil {
		return err
	}
	defer pub.Close()
	const count = 50
	for i := 0; i < count; i++ {
		if err := pub.Publish(subject, []byte(fmt.Sprint(i))); err != nil {
			return err
		}
	}
	if err := pub.Flush(); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	err = await(reported, "slow consumer error")
	close(release)
	if err != nil {
		return err
	}
	dropped, err := sub.Dropped()
	if err != nil {
		return err
	}
	emit(map[string]any{"ev": "slow", "reported": true, "dropped": dropped, "published": count})
	return nil
}

// runLameDuck waits (after "ready") for the server's lame duck mode notice, an async INFO with ldm.
// Losing the connection first is a failure: in lame duck mode the server keeps clients for a grace period.
func runLameDuck(url string, args []string) error {
	notice, lost := make(chan struct{}, 1), make(chan struct{}, 1)
	nc, err := connect(url,
		nats.LameDuckModeHandler(func(*nats.Conn) { signal(notice) }),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { signal(lost) }),
	)
	if err != nil {
		return err
	}
	defer nc.Close()
	emit(map[string]any{"ev": "ready"})
	select {
	case <-notice:
	case <-lost:
		return errors.New("disconnected before any lame duck mode notice")
	case <-time.After(wait):
		return errors.New("timed out waiting for the lame duck mode notice")
	}
	emit(map[string]any{"ev": "lame_duck"})
	return nil
}

// runFailover stays connected to a cluster that grows and shrinks around it: it reports each reconnect
// ("reconnected" with the URL now used) and, for each stdin line "servers", the servers it learnt of
// from the cluster (INFO connect_urls). Stdin "quit" or its end finishes the run.
func runFailover(url string, args []string) error {
	nc, err := connect(url,
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectJitter(0, 0),
		nats.ReconnectHandler(func(c *nats.Conn) {
			emit(map[string]any{"ev": "reconnected", "url": c.ConnectedUrl()})
		}),
	)
	if err != nil {
		return err
	}
	defer nc.Close()
	emit(map[string]any{"ev": "ready"})
	stdin := bufio.NewReader(os.Stdin)
	for {
		line, err := stdin.ReadString('\n')
		command := strings.TrimSpace(line)
		if err != nil || command == "quit" {
			return nil
		}
		if command == "servers" {
			emit(map[string]any{"ev": "servers", "urls": nc.DiscoveredServers()})
		}
	}
}
