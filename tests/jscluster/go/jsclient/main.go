// Command jsclient drives JetStream with the official Go client (nats.go) through one server and prints
// one JSON object with what it saw, for tests/jscluster to compare across layouts.
//
// Usage: jsclient <url> <tag> <replicas>
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

const wait = 10 * time.Second

type result struct {
	Seqs     []uint64 `json:"seqs"`
	Replicas int      `json:"replicas"`
	Ordered  []int    `json:"ordered"`
	Work     []int    `json:"work"`
	Watched  []string `json:"watched"`
	Direct   string   `json:"direct"`
	KvValue  string   `json:"kv_value"`
}

func fail(err error) {
	fmt.Println(`{"error":` + strconv.Quote(err.Error()) + `}`)
	os.Exit(1)
}

func main() {
	go func() { time.Sleep(60 * time.Second); fail(fmt.Errorf("watchdog")) }()
	url, tag := os.Args[1], os.Args[2]
	replicas, _ := strconv.Atoi(os.Args[3])
	nc, err := nats.Connect(url)
	if err != nil {
		fail(err)
	}
	defer nc.Close()
	js, err := nc.JetStream(nats.MaxWait(wait))
	if err != nil {
		fail(err)
	}
	var res result
	info, err := js.AddStream(&nats.StreamConfig{Name: "GO" + tag, Subjects: []string{"go" + tag + ".>"},
		Replicas: replicas, AllowDirect: true})
	if err != nil {
		fail(fmt.Errorf("add stream: %w", err))
	}
	res.Replicas = info.Config.Replicas
	for i := 0; i < 50; i++ {
		ack, err := js.Publish(fmt.Sprintf("go%s.%d", tag, i%3), []byte(strconv.Itoa(i)))
		if err != nil {
			fail(fmt.Errorf("publish: %w", err))
		}
		res.Seqs = append(res.Seqs, ack.Sequence)
	}
	ordered, err := js.SubscribeSync("go"+tag+".>", nats.OrderedConsumer())
	if err != nil {
		fail(fmt.Errorf("ordered: %w", err))
	}
	for i := 0; i < 50; i++ {
		m, err := ordered.NextMsg(wait)
		if err != nil {
			fail(fmt.Errorf("ordered next: %w", err))
		}
		n, _ := strconv.Atoi(string(m.Data))
		res.Ordered = append(res.Ordered, n)
	}
	ordered.Unsubscribe()

	if _, err := js.AddStream(&nats.StreamConfig{Name: "GOWQ" + tag, Subjects: []string{"gowq" + tag + ".>"},
		Replicas: replicas, Retention: nats.WorkQueuePolicy}); err != nil {
		fail(fmt.Errorf("add work queue: %w", err))
	}
	for i := 0; i < 30; i++ {
		if _, err := js.Publish("gowq"+tag+".job", []byte(strconv.Itoa(i))); err != nil {
			fail(err)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		sub, err := js.PullSubscribe("gowq"+tag+".>", "workers", nats.BindStream("GOWQ"+tag))
		if err != nil {
			fail(fmt.Errorf("pull subscribe: %w", err))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				done := len(res.Work) >= 30
				mu.Unlock()
				if done {
					return
				}
				msgs, _ := sub.Fetch(4, nats.MaxWait(time.Second))
				for _, m := range msgs {
					n, _ := strconv.Atoi(string(m.Data))
					mu.Lock()
					res.Work = append(res.Work, n)
					mu.Unlock()
					m.AckSync()
				}
			}
		}()
	}
	wg.Wait()
	sort.Ints(res.Work)

	kv, err := js.CreateKeyValue(&nats.KeyValueConfig{Bucket: "gokv" + tag, Replicas: replicas, History: 3})
	if err != nil {
		fail(fmt.Errorf("kv: %w", err))
	}
	watcher, err := kv.Watch("k.*")
	if err != nil {
		fail(err)
	}
	if e := <-watcher.Updates(); e != nil {
		fail(fmt.Errorf("expected the end of the initial values"))
	}
	kv.Put("k.1", []byte("one"))
	kv.Put("k.2", []byte("two"))
	for i := 0; i < 2; i++ {
		select {
		case e := <-watcher.Updates():
			res.Watched = append(res.Watched, e.Key()+"="+string(e.Value()))
		case <-time.After(wait):
			fail(fmt.Errorf("watch"))
		}
	}
	watcher.Stop()
	entry, err := kv.Get("k.2")
	if err != nil {
		fail(err)
	}
	res.KvValue = string(entry.Value())
	msg, err := js.GetMsg("GO"+tag, 7, nats.DirectGet())
	if err != nil {
		fail(fmt.Errorf("direct get: %w", err))
	}
	res.Direct = msg.Subject + " " + string(msg.Data)
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
}
