package main

import (
	"bytes"
	"fmt"
	"strconv"
)

// burstPayload is message i of a burst: origin letter, 8-digit sequence, ':' and i%100 padding bytes.
func burstPayload(origin string, i int) []byte {
	return append([]byte(fmt.Sprintf("%s%08d:", origin, i)), bytes.Repeat([]byte("x"), i%100)...)
}

// runBurst publishes count small messages as fast as the client pipelines them, flushing once.
func runBurst(url string, args []string) error {
	subject, count := args[0], atoi(args[1])
	nc, err := connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	for i := 0; i < count; i++ {
		if err := nc.Publish(subject, burstPayload("g", i)); err != nil {
			return err
		}
	}
	return nc.Flush()
}

// runTally receives count burst messages (from any origins) and checks each origin's sequence arrives
// complete, in order and intact.
func runTally(url string, args []string) error {
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
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	emit(map[string]any{"ev": "ready"})
	next := map[string]int{}
	bad, firstBad := 0, ""
	for n := 0; n < count; n++ {
		m, err := sub.NextMsg(wait)
		if err != nil {
			return fmt.Errorf("after %d messages: %w", n, err)
		}
		origin := string(m.Data[:1])
		seq, err := strconv.Atoi(string(m.Data[1:9]))
		if err != nil || seq != next[origin] || !bytes.Equal(m.Data, burstPayload(origin, seq)) {
			bad++
			if firstBad == "" {
				firstBad = fmt.Sprintf("message %d: %q (expected %s seq %d)", n, m.Data, origin, next[origin])
			}
		}
		next[origin] = seq + 1
	}
	emit(map[string]any{"ev": "tally", "received": count, "bad": bad, "first_bad": firstBad, "next": next})
	return nil
}
