"""Consumers end to end through nats-py: pull, push, ordered, acks, redelivery, deliver policies."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from datetime import UTC, datetime

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js import api
from nats.js.errors import BadRequestError, NotFoundError

from tests.jetstream.conftest import JsServer


async def fill(nc: Client, n: int, stream: str = "S", subject: str = "s.x") -> None:
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=[subject.split(".")[0] + ".>"])
    for i in range(n):
        await js.publish(subject, b"m%d" % i)


async def test_pull_fetch_ack_and_info(nc: Client) -> None:
    await fill(nc, 5)
    js = nc.jetstream()
    psub = await js.pull_subscribe("s.x", "worker")
    msgs = await psub.fetch(3)
    assert [m.data for m in msgs] == [b"m0", b"m1", b"m2"]
    meta = msgs[0].metadata
    assert (meta.sequence.stream, meta.sequence.consumer, meta.num_pending, meta.num_delivered) == (
        1,
        1,
        4,
        1,
    )
    for m in msgs:
        await m.ack()
    await nc.flush()
    ci = await js.consumer_info("S", "worker")
    assert (ci.num_ack_pending, ci.num_pending, ci.ack_floor.stream_seq, ci.delivered.stream_seq) == (
        0,
        2,
        3,
        3,
    )
    rest = await psub.fetch(5, timeout=0.5)
    assert [m.data for m in rest] == [b"m3", b"m4"]
    assert await js.delete_consumer("S", "worker")
    with pytest.raises(NotFoundError):
        await js.consumer_info("S", "worker")


async def test_pull_status_headers(nc: Client) -> None:
    await fill(nc, 1)
    js = nc.jetstream()
    await js.add_consumer("S", durable_name="c", ack_policy=api.AckPolicy.EXPLICIT)
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    nxt = "$JS.API.CONSUMER.MSG.NEXT.S.c"
    await nc.publish(nxt, json.dumps({"batch": 2, "no_wait": True}).encode(), reply=inbox)
    first = await sub.next_msg(1)
    assert first.subject == "s.x" and first.reply.startswith("$JS.ACK.S.c.1.1.1.")
    status = await sub.next_msg(1)
    assert status.headers == {"Status": "404", "Description": "No Messages"}
    await nc.publish(nxt, json.dumps({"batch": 3, "expires": 100_000_000}).encode(), reply=inbox)
    timeout = await sub.next_msg(2)
    assert timeout.headers is not None and timeout.headers["Status"] == "408"
    assert timeout.headers["Nats-Pending-Messages"] == "3"
    await js.publish("s.x", b"big" * 10)
    await nc.publish(nxt, json.dumps({"batch": 1, "max_bytes": 4, "no_wait": True}).encode(), reply=inbox)
    too_big = await sub.next_msg(1)
    assert too_big.headers is not None and too_big.headers["Status"] == "409"
    hb_req = {"batch": 1, "expires": 1_000_000_000, "idle_heartbeat": 100_000_000}
    await js.delete_consumer("S", "c")
    await js.add_consumer(
        "S", durable_name="c2", ack_policy=api.AckPolicy.EXPLICIT, deliver_policy=api.DeliverPolicy.NEW
    )
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.c2", json.dumps(hb_req).encode(), reply=inbox)
    hb = await sub.next_msg(1)
    assert hb.headers is not None and hb.headers["Status"] == "100"


async def test_nak_term_ack_wait_and_max_deliver(nc: Client) -> None:
    await fill(nc, 3)
    js = nc.jetstream()
    psub = await js.pull_subscribe("s.x", "w", config=api.ConsumerConfig(ack_wait=0.3, max_deliver=2))
    a, b, _ = await psub.fetch(3)
    await a.nak()
    await b.term()
    # c is left unacked: redelivered after ack_wait.
    again = await psub.fetch(2, timeout=2)
    if len(again) == 1:  # the nak'ed one comes at once, the other after ack_wait
        again += await psub.fetch(1, timeout=2)
    assert sorted(m.data for m in again) == [b"m0", b"m2"]
    assert all(m.metadata.num_delivered == 2 for m in again)
    # max_deliver=2 reached: nothing comes back any more.
    with pytest.raises(NatsTimeout):
        await psub.fetch(1, timeout=0.8)


async def test_nak_with_delay_and_in_progress(nc: Client) -> None:
    await fill(nc, 1)
    js = nc.jetstream()
    psub = await js.pull_subscribe("s.x", "w", config=api.ConsumerConfig(ack_wait=0.4))
    (m,) = await psub.fetch(1)
    await m.in_progress()
    await m.nak(delay=0.3)
    with pytest.raises(NatsTimeout):
        await psub.fetch(1, timeout=0.15)
    (m2,) = await psub.fetch(1, timeout=2)
    assert m2.data == b"m0" and m2.metadata.num_delivered == 2
    await m2.ack_sync()


async def test_ack_all_and_max_ack_pending(nc: Client) -> None:
    await fill(nc, 6)
    js = nc.jetstream()
    cfg = api.ConsumerConfig(ack_policy=api.AckPolicy.ALL, max_ack_pending=3)
    psub = await js.pull_subscribe("s.x", "w", config=cfg)
    msgs = await psub.fetch(6, timeout=0.5)
    assert len(msgs) == 3  # max_ack_pending
    await msgs[-1].ack()
    await nc.flush()
    ci = await js.consumer_info("S", "w")
    assert (ci.num_ack_pending, ci.ack_floor.stream_seq) == (0, 3)
    assert len(await psub.fetch(6, timeout=0.5)) == 3


@pytest.mark.parametrize(
    ("policy", "extra", "expected"),
    [
        (api.DeliverPolicy.ALL, {}, [b"m0", b"m1", b"m2", b"m3"]),
        (api.DeliverPolicy.LAST, {}, [b"m3"]),
        (api.DeliverPolicy.BY_START_SEQUENCE, {"opt_start_seq": 3}, [b"m2", b"m3"]),
        (api.DeliverPolicy.LAST_PER_SUBJECT, {}, [b"m2", b"m3"]),
    ],
)
async def test_deliver_policies(
    nc: Client, policy: api.DeliverPolicy, extra: dict[str, int], expected: list[bytes]
) -> None:
    js = nc.jetstream()
    await js.add_stream(name="D", subjects=["d.*"])
    for i in range(4):
        await js.publish(f"d.{i % 2}", b"m%d" % i)
    cfg = api.ConsumerConfig(deliver_policy=policy, **extra)  # type: ignore[arg-type]
    psub = await js.pull_subscribe("d.*", "c", config=cfg)
    got = await psub.fetch(10, timeout=0.5)
    assert [m.data for m in got] == expected


async def test_deliver_new_and_by_time(nc: Client) -> None:
    await fill(nc, 2)
    js = nc.jetstream()
    new = await js.pull_subscribe(
        "s.x", "new", config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.NEW)
    )
    await asyncio.sleep(0.01)
    since = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    await asyncio.sleep(0.01)
    await js.publish("s.x", b"later")
    assert [m.data for m in await new.fetch(5, timeout=0.5)] == [b"later"]
    cfg = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.BY_START_TIME, opt_start_time=since)
    by_time = await js.pull_subscribe("s.x", "bytime", config=cfg)
    assert [m.data for m in await by_time.fetch(5, timeout=0.5)] == [b"later"]


async def test_push_consumer_and_queue_group(nc: Client) -> None:
    await fill(nc, 4)
    js = nc.jetstream()
    sub = await js.subscribe("s.x", durable="pd")
    got = [await sub.next_msg(2) for _ in range(4)]
    assert [m.data for m in got] == [b"m0", b"m1", b"m2", b"m3"]
    for m in got:
        await m.ack()
    seen: list[bytes] = []
    done = asyncio.Event()

    async def cb(msg: Msg) -> None:
        seen.append(msg.data)
        if len(seen) == 4:
            done.set()

    await js.subscribe("s.x", "grp", cb=cb)
    await js.subscribe("s.x", "grp", cb=cb)
    await asyncio.wait_for(done.wait(), 3)
    assert sorted(seen) == [b"m0", b"m1", b"m2", b"m3"]


async def test_ordered_consumer_flow_control(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="O", subjects=["o"])
    n = 600  # past the flow-control window more than once
    for i in range(n):
        await js.publish("o", b"%d" % i)
    osub = await js.subscribe("o", ordered_consumer=True)
    got = [int((await osub.next_msg(2)).data) for _ in range(n)]
    assert got == list(range(n))


async def test_push_idle_heartbeat(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="H", subjects=["h"])
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await js.add_consumer(
        "H",
        durable_name="hb",
        deliver_subject=inbox,
        idle_heartbeat=0.1,
        flow_control=True,
        ack_policy=api.AckPolicy.EXPLICIT,
    )
    hb = await sub.next_msg(2)
    assert hb.headers is not None and hb.headers["Status"] == "100"
    assert hb.headers["Nats-Last-Consumer"] == "0"


async def test_durable_consumer_survives_restart(js_server: JsServer) -> None:
    nc = await js_server.connect()
    await fill(nc, 5)
    js = nc.jetstream()
    psub = await js.pull_subscribe("s.x", "dur")
    for m in await psub.fetch(3):
        await m.ack_sync()
    await js_server.restart()
    nc = await js_server.connect()
    js = nc.jetstream()
    ci = await js.consumer_info("S", "dur")
    assert ci.ack_floor.stream_seq == 3
    psub = await js.pull_subscribe("s.x", "dur")
    assert [m.data for m in await psub.fetch(5, timeout=0.5)] == [b"m3", b"m4"]


async def test_ephemeral_inactive_threshold(nc: Client) -> None:
    await fill(nc, 1)
    js = nc.jetstream()
    ci = await js.add_consumer("S", inactive_threshold=0.2, ack_policy=api.AckPolicy.EXPLICIT)
    for _ in range(40):
        await asyncio.sleep(0.05)
        if ci.name not in await js.consumers_info("S") and not [c for c in await js.consumers_info("S")]:
            break
    assert await js.consumers_info("S") == []


async def test_workqueue_and_interest_retention(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="WQ", subjects=["wq.*"], retention=api.RetentionPolicy.WORK_QUEUE)
    for i in range(3):
        await js.publish("wq.a", b"%d" % i)
    psub = await js.pull_subscribe("wq.a", "w", stream="WQ")
    for m in await psub.fetch(3):
        await m.ack_sync()
    assert (await js.stream_info("WQ")).state.messages == 0
    with pytest.raises(BadRequestError):  # a second unfiltered consumer on a work queue is refused
        await js.add_consumer("WQ", durable_name="other", ack_policy=api.AckPolicy.EXPLICIT)
    await js.add_stream(name="INT", subjects=["int"], retention=api.RetentionPolicy.INTEREST)
    await js.publish("int", b"nobody")  # no consumer: not kept
    assert (await js.stream_info("INT")).state.messages == 0
    a = await js.pull_subscribe("int", "a", stream="INT")
    b = await js.pull_subscribe("int", "b", stream="INT")
    await js.publish("int", b"both")
    (ma,) = await a.fetch(1)
    await ma.ack_sync()
    assert (await js.stream_info("INT")).state.messages == 1
    (mb,) = await b.fetch(1)
    await mb.ack_sync()
    assert (await js.stream_info("INT")).state.messages == 0


async def test_replay_original(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="RP", subjects=["rp"])
    await js.publish("rp", b"a")
    await asyncio.sleep(0.6)
    await js.publish("rp", b"b")
    cfg = api.ConsumerConfig(replay_policy=api.ReplayPolicy.ORIGINAL)
    psub = await js.pull_subscribe("rp", "r", config=cfg)
    (first,) = await psub.fetch(1)
    with pytest.raises(NatsTimeout):  # "b" is held back as long as the publisher paused
        await psub.fetch(1, timeout=0.1)
    (second,) = await psub.fetch(1, timeout=3)
    assert (first.data, second.data) == (b"a", b"b")


async def test_ack_all_mid_batch_on_an_interest_stream(nc: Client) -> None:
    # AckAll settles a run at once (the floor moved once): the messages up to the acked one leave the
    # stream (its only consumer is done with them), the rest stay pending until the next AckAll.
    js = nc.jetstream()
    await js.add_stream(name="WQA", subjects=["wqa.*"], retention=api.RetentionPolicy.INTEREST)
    cfg = api.ConsumerConfig(ack_policy=api.AckPolicy.ALL)
    psub = await js.pull_subscribe("wqa.a", "w", stream="WQA", config=cfg)  # first: interest keeps them
    for i in range(5):
        await js.publish("wqa.a", b"%d" % i)
    msgs = await psub.fetch(5)
    await msgs[2].ack_sync()
    ci = await js.consumer_info("WQA", "w")
    assert (ci.num_ack_pending, ci.ack_floor.stream_seq, ci.ack_floor.consumer_seq) == (2, 3, 3)
    assert (await js.stream_info("WQA")).state.messages == 2
    await msgs[4].ack_sync()
    ci = await js.consumer_info("WQA", "w")
    assert (ci.num_ack_pending, ci.ack_floor.stream_seq, ci.ack_floor.consumer_seq) == (0, 5, 5)
    assert (await js.stream_info("WQA")).state.messages == 0


async def test_updating_a_literal_filter_to_a_wildcard(nc: Client) -> None:
    # The consumer reads by the new filter: a literal one looks up its subject's own sequence list, a
    # wildcard one walks the stream (the update used to keep the literal lookup, and found nothing).
    await fill(nc, 2, subject="s.a")
    js = nc.jetstream()
    for i in range(2):
        await js.publish("s.b", b"b%d" % i)
    await js.add_consumer("S", durable_name="f", ack_policy=api.AckPolicy.EXPLICIT, filter_subject="s.a")
    await js.add_consumer("S", durable_name="f", ack_policy=api.AckPolicy.EXPLICIT, filter_subject="s.*")
    psub = await js.pull_subscribe_bind("f", stream="S")
    assert [m.data for m in await psub.fetch(4, timeout=1)] == [b"m0", b"m1", b"b0", b"b1"]


async def test_push_consumer_waits_for_a_subscriber_without_polling(js_server: JsServer) -> None:
    # Messages for a push consumer nobody subscribes to wait; the subject space calls the consumer back at
    # the subscription that receives its deliver subject (here a wildcard one), as nats-server's interest
    # notifications do: no timer looks again and again meanwhile.
    nc = await js_server.connect()
    js = nc.jetstream()
    await fill(nc, 3)
    await js.add_consumer(
        "S", durable_name="late", deliver_subject="push.late", ack_policy=api.AckPolicy.NONE
    )
    await asyncio.sleep(0.3)
    assert js_server.server is not None
    sublist = js_server.server.sublist_for("$G")
    assert b"push.late" in sublist._awaited  # the consumer is registered, once
    assert len(sublist._awaited[b"push.late"]) == 1
    sub = await nc.subscribe("push.*")
    got = [await sub.next_msg(2) for _ in range(3)]
    assert [m.data for m in got] == [b"m0", b"m1", b"m2"]
    assert b"push.late" not in sublist._awaited
    await sub.unsubscribe()
    await nc.flush()
    await js.publish("s.x", b"m3")  # nobody again: registered again, and forgotten with the consumer
    await asyncio.sleep(0.1)
    assert len(sublist._awaited[b"push.late"]) == 1
    await js.delete_consumer("S", "late")
    assert b"push.late" not in sublist._awaited


async def test_pull_batch_stops_when_its_requester_stops_listening(nc: Client) -> None:
    # The requester's interest is checked before each message of a batch (kept between messages while no
    # subscription comes or goes): an inbox that auto-unsubscribes after 3 of a batch of 10 gets 3, and the
    # other 7 wait for the next request rather than go to nobody.
    await fill(nc, 10)
    js = nc.jetstream()
    await js.add_consumer("S", durable_name="w", ack_policy=api.AckPolicy.EXPLICIT)
    got: list[bytes] = []

    async def take(msg: Msg) -> None:
        got.append(msg.data)

    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=take)
    await sub.unsubscribe(limit=3)  # UNSUB <sid> 3: the server removes it after the third
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.w", b'{"batch":10}', reply=inbox)
    await nc.flush()
    ci = await js.consumer_info("S", "w")
    assert (ci.delivered.consumer_seq, ci.num_ack_pending, ci.num_pending) == (3, 3, 7)
    psub = await js.pull_subscribe_bind("w", stream="S")
    assert [m.data for m in await psub.fetch(7, timeout=1)] == [b"m%d" % i for i in range(3, 10)]
    assert got == [b"m0", b"m1", b"m2"]


class _RecordingTransport(asyncio.Transport):
    """A connection's transport, its writes recorded (each as one bytes) and passed on."""

    def __init__(self, inner: asyncio.Transport) -> None:
        super().__init__()
        self.inner = inner
        self.writes: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))
        self.inner.write(data)

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        pieces = [bytes(piece) for piece in list_of_data]
        self.writes.append(b"".join(pieces))
        self.inner.writelines(pieces)

    def get_write_buffer_size(self) -> int:
        return self.inner.get_write_buffer_size()


async def test_a_pull_batch_is_written_first_message_first(js_server: JsServer, nc: Client) -> None:
    # The batch's first message is written at once and the rest once built (one write each), not the whole
    # batch a turn later: nats-py's fetch waits on the first byte. All delivered, in order, exactly once.
    await fill(nc, 12)
    js = nc.jetstream()
    psub = await js.pull_subscribe("s.x", "w", config=api.ConsumerConfig(ack_policy=api.AckPolicy.ALL))
    assert js_server.server is not None
    (conn,) = [c for c in js_server.server.clients.values() if c.out is not None]
    out = conn.out
    assert out is not None
    recorder = _RecordingTransport(out.transport)
    out.transport = recorder
    try:
        first = await psub.fetch(10)
        await first[-1].ack()
        rest = await psub.fetch(5, timeout=0.5)  # the 2 left, then the stream's end
    finally:
        out.transport = recorder.inner
    assert [m.data for m in first + rest] == [b"m%d" % i for i in range(12)]
    batches = [w.count(b"MSG s.x ") for w in recorder.writes if b"MSG s.x " in w]
    assert batches == [1, 9, 1, 1]
