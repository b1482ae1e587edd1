package main

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// runRespond answers count requests: the reply carries "re:" + the request payload, the request's
// headers, plus X-Responder and X-Reply-To (the inbox the requester used).
func runRespond(url string, args []string) error {
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
		emit(msgEvent("request", m))
		reply := nats.NewMsg(m.Reply)
		for k, vs := range m.Header {
			for _, v := range vs {
				reply.Header.Add(k, v)
			}
		}
		reply.Header.Set("X-Responder", "go")
		reply.Header.Set("X-Reply-To", m.Reply)
		reply.Data = append([]byte("re:"), m.Data...)
		if err := nc.PublishMsg(reply); err != nil {
			return err
		}
	}
	return nc.Flush()
}

// runRequest sends count requests (with headers) in the old style (a fresh inbox subscription per
// request) or the new style (one muxed wildcard inbox) and prints each reply.
func runRequest(url string, args []string) error {
	subject, count, style := args[0], atoi(args[1]), args[2]
	opts := []nats.Option{}
	if style == "old" {
		opts = append(opts, nats.UseOldRequestStyle())
	}
	nc, err := connect(url, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	for i := 0; i < count; i++ {
		req := nats.NewMsg(subject)
		req.Header = headersFor(i, "go")
		req.Data = payload(i)
		resp, err := nc.RequestMsg(req, wait)
		if err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		emit(msgEvent("reply", resp))
	}
	return nil
}

// runNoResponders requests a subject nobody listens on, in both request styles.
func runNoResponders(url string, args []string) error {
	subject := args[0]
	for _, style := range []string{"new", "old"} {
		opts := []nats.Option{}
		if style == "old" {
			opts = append(opts, nats.UseOldRequestStyle())
		}
		nc, err := connect(url, opts...)
		if err != nil {
			return err
		}
		_, err = nc.Request(subject, []byte("anyone?"), wait)
		nc.Close()
		result := "ok"
		if errors.Is(err, nats.ErrNoResponders) {
			result = "no_responders"
		} else if err != nil {
			result = err.Error()
		}
		emit(map[string]any{"ev": "noresp", "style": style, "result": result})
	}
	return nil
}
