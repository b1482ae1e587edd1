package main

import "github.com/nats-io/nats.go"

// runPub publishes count messages with the spec headers and payloads, for other clients to check.
func runPub(url string, args []string) error {
	subject, count := args[0], atoi(args[1])
	nc, err := connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	for i := 0; i < count; i++ {
		m := nats.NewMsg(subject)
		m.Header = headersFor(i, "go")
		m.Data = payload(i)
		if err := nc.PublishMsg(m); err != nil {
			return err
		}
	}
	return nc.Flush()
}

// runSub prints "ready" once subscribed, then the next count messages as they arrive.
func runSub(url string, args []string) error {
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
	if err := nc.Flush(); err != nil {
		return err
	}
	emit(map[string]any{"ev": "ready"})
	for i := 0; i < count; i++ {
		m, err := sub.NextMsg(wait)
		if err != nil {
			return err
		}
		emit(msgEvent("msg", m))
	}
	return nil
}
