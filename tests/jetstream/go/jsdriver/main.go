// jsdriver: nats.go's JetStream and KV API against a server; prints one JSON object per step and
// {"ev":"done"} at the end (or {"ev":"error",...} and exit 1). Usage: jsdriver <url>
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
)

func emit(ev string, kv ...interface{}) {
	m := map[string]interface{}{"ev": ev}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	b, _ := json.Marshal(m)
	fmt.Println(string(b))
}

func fail(step string, err error) {
	emit("error", "step", step, "err", err.Error())
	os.Exit(1)
}

func main() {
	go func() { time.Sleep(25 * time.Second); emit("error", "step", "watchdog"); os.Exit(2) }()
	nc, err := nats.Connect(os.Args[1])
	if err != nil {
		fail("connect", err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		fail("jetstream", err)
	}
	si, err := js.AddStream(&nats.StreamConfig{Name: "GO", Subjects: []string{"go.>"}, MaxMsgsPerSubject: 10})
	if err != nil {
		fail("add_stream", err)
	}
	emit("stream", "name", si.Config.Name, "storage", si.Config.Storage.String())
	for i := 0; i < 5; i++ {
		ack, err := js.Publish("go.a", []byte(fmt.Sprintf("m%d", i)), nats.MsgId(fmt.Sprintf("id%d", i)))
		if err != nil {
			fail("publish", err)
		}
		emit("puback", "seq", ack.Sequence, "dup", ack.Duplicate)
	}
	ack, err := js.Publish("go.a", []byte("again"), nats.MsgId("id0"))
	if err != nil {
		fail("publish_dup", err)
	}
	emit("puback", "seq", ack.Sequence, "dup", ack.Duplicate)
	if _, err := js.Publish("go.a", []byte("x"), nats.ExpectLastSequence(99)); err == nil {
		fail("expect_last_seq", fmt.Errorf("accepted"))
	} else if apiErr, ok := err.(nats.JetStreamError); ok {
		emit("expected_error", "code", apiErr.APIError().ErrorCode)
	}

	sub, err := js.PullSubscribe("go.a", "pull")
	if err != nil {
		fail("pull_subscribe", err)
	}
	msgs, err := sub.Fetch(3, nats.MaxWait(2*time.Second))
	if err != nil {
		fail("fetch", err)
	}
	for _, m := range msgs {
		meta, _ := m.Metadata()
		emit("pulled", "data", string(m.Data), "stream_seq", meta.Sequence.Stream, "pending", meta.NumPending)
		if err := m.AckSync(); err != nil {
			fail("ack", err)
		}
	}
	ci, err := js.ConsumerInfo("GO", "pull")
	if err != nil {
		fail("consumer_info", err)
	}
	emit("consumer", "ack_floor", ci.AckFloor.Stream, "num_pending", ci.NumPending)

	psub, err := js.SubscribeSync("go.a", nats.OrderedConsumer())
	if err != nil {
		fail("ordered", err)
	}
	for i := 0; i < 5; i++ {
		m, err := psub.NextMsg(2 * time.Second)
		if err != nil {
			fail("ordered_next", err)
		}
		emit("ordered", "data", string(m.Data))
	}

	kv, err := js.CreateKeyValue(&nats.KeyValueConfig{Bucket: "GOKV", History: 3})
	if err != nil {
		fail("create_kv", err)
	}
	if _, err := kv.Put("k1", []byte("v1")); err != nil {
		fail("kv_put", err)
	}
	rev, err := kv.Update("k1", []byte("v2"), 1)
	if err != nil {
		fail("kv_update", err)
	}
	if _, err := kv.Create("k1", []byte("no")); err == nil {
		fail("kv_create_existing", fmt.Errorf("accepted"))
	}
	kv.Put("k2", []byte("x"))
	if err := kv.Delete("k2"); err != nil {
		fail("kv_delete", err)
	}
	e, err := kv.Get("k1")
	if err != nil {
		fail("kv_get", err)
	}
	emit("kv_get", "value", string(e.Value()), "revision", e.Revision(), "update_rev", rev)
	if _, err := kv.Get("k2"); err != nats.ErrKeyNotFound {
		fail("kv_get_deleted", fmt.Errorf("got %v", err))
	}
	keys, err := kv.Keys()
	if err != nil {
		fail("kv_keys", err)
	}
	sort.Strings(keys)
	emit("kv_keys", "keys", keys)
	hist, err := kv.History("k1")
	if err != nil {
		fail("kv_history", err)
	}
	emit("kv_history", "n", len(hist))
	w, err := kv.WatchAll()
	if err != nil {
		fail("kv_watch", err)
	}
	n := 0
	for upd := range w.Updates() {
		if upd == nil {
			break
		}
		n++
	}
	emit("kv_watch_initial", "n", n)
	kv.Put("k3", []byte("live"))
	select {
	case upd := <-w.Updates():
		emit("kv_watch_live", "key", upd.Key(), "value", string(upd.Value()))
	case <-time.After(2 * time.Second):
		fail("kv_watch_live", fmt.Errorf("timeout"))
	}
	w.Stop()
	objectStore(js)
	emit("done")
}

// objectStore: a multi-MiB object put and read back, a link to it, a rename, list, delete and status.
func objectStore(js nats.JetStreamContext) {
	obs, err := js.CreateObjectStore(&nats.ObjectStoreConfig{Bucket: "GOOBJ"})
	if err != nil {
		fail("create_obj", err)
	}
	data := make([]byte, 2*1024*1024+5)
	for i := range data {
		data[i] = byte(i * 7 % 251)
	}
	info, err := obs.PutBytes("big", data)
	if err != nil {
		fail("obj_put", err)
	}
	emit("obj_put", "size", info.Size, "chunks", info.Chunks, "digest", info.Digest)
	back, err := obs.GetBytes("big")
	if err != nil {
		fail("obj_get", err)
	}
	emit("obj_get", "same", bytes.Equal(back, data))
	if _, err := obs.AddLink("lnk", info); err != nil {
		fail("obj_link", err)
	}
	linked, err := obs.GetBytes("lnk")
	if err != nil {
		fail("obj_get_link", err)
	}
	emit("obj_get_link", "same", bytes.Equal(linked, data))
	if err := obs.UpdateMeta("big", &nats.ObjectMeta{Name: "renamed", Description: "r"}); err != nil {
		fail("obj_rename", err)
	}
	list, err := obs.List()
	if err != nil {
		fail("obj_list", err)
	}
	names := []string{}
	for _, o := range list {
		names = append(names, o.Name)
	}
	sort.Strings(names)
	emit("obj_list", "names", names)
	if err := obs.Delete("renamed"); err != nil {
		fail("obj_delete", err)
	}
	if _, err := obs.GetBytes("renamed"); err != nats.ErrObjectNotFound {
		fail("obj_get_deleted", fmt.Errorf("got %v", err))
	}
	st, err := obs.Status()
	if err != nil {
		fail("obj_status", err)
	}
	emit("obj_status", "size", st.Size(), "sealed", st.Sealed())
}
