"""InternalClient: server-side subscribers and publishers reached through the one delivery policy, seen
by real nats-py clients over real sockets."""

from __future__ import annotations

import asyncio

import nats

from pynatsd.broker.delivery import Message, publish
from pynatsd.broker.internal import InternalClient
from pynatsd.server import Server


async def test_an_internal_service_answers_client_requests(server: Server, url: str) -> None:
    service = InternalClient(server, name="echo")
    seen: list[tuple[bytes, bytes | None, bytes | None, bytes]] = []

    def on_request(subject: bytes, reply: bytes | None, headers: bytes | None, payload: bytes) -> None:
        seen.append((subject, reply, headers, payload))
        assert reply is not None
        # Publishing from a callback: it runs after the request's delivery, never inside it.
        service.publish(reply, None, b"NATS/1.0\r\nX-From: echo\r\n\r\n", payload.upper())

    service.subscribe(b"svc.>", on_request)
    nc = await nats.connect(url)
    try:
        response = await nc.request("svc.echo", b"hello", timeout=2)
        assert response.data == b"HELLO"
        assert response.headers == {"X-From": "echo"}
        assert seen[0][0] == b"svc.echo" and seen[0][3] == b"hello"
    finally:
        await nc.close()
    service.close()


async def test_internal_publishes_reach_clients_and_internal_subscribers(server: Server, url: str) -> None:
    client_side = InternalClient(server)
    got: list[bytes] = []
    client_side.subscribe(b"events.*", lambda s, r, h, p: got.append(s + b"=" + p), queue=b"workers")
    nc = await nats.connect(url)
    received: asyncio.Queue[bytes] = asyncio.Queue()

    async def on_msg(msg: nats.aio.msg.Msg) -> None:
        await received.put(msg.data)

    await nc.subscribe("events.>", cb=on_msg)
    await nc.flush()
    publisher = InternalClient(server)
    assert publisher.publish(b"events.a", None, None, b"1")
    assert await asyncio.wait_for(received.get(), 2) == b"1"
    await nc.publish("events.b", b"2")
    await nc.flush()
    assert await asyncio.wait_for(received.get(), 2) == b"2"
    await asyncio.sleep(0.05)
    assert got == [b"events.a=1", b"events.b=2"]
    await nc.close()
    publisher.close()
    client_side.close()


async def test_internal_subscriptions_are_kept_apart_by_account(server: Server) -> None:
    other = InternalClient(server, account="OTHER")
    got: list[bytes] = []
    other.subscribe(b"x", lambda s, r, h, p: got.append(p))
    assert not InternalClient(server).publish(b"x", None, None, b"global")
    assert InternalClient(server, account="OTHER").publish(b"x", None, None, b"mine")
    await asyncio.sleep(0.05)
    assert got == [b"mine"]


async def test_publish_many_keeps_order_and_the_delivery_rules(server: Server, url: str) -> None:
    """A run reaches a client inbox in order, and the rules apply to each of its messages: an internal
    receiver gets all three, a subscription capped at two (UNSUB sid 2) exactly two, on the server's side too
    (the cap removes it mid-run: the run's match is made anew)."""
    frames: list[tuple[bytes | None, bytes]] = [
        (None, b"a"),
        (b"NATS/1.0\r\nK: 1\r\n\r\n", b"b"),
        (b"NATS/1.0 204 EOB\r\n\r\n", b""),
    ]
    publisher = InternalClient(server)
    nc = await nats.connect(url)
    try:
        sub = await nc.subscribe("batch.one")
        await nc.flush()
        publisher.publish_many(b"batch.one", frames)
        got = [await sub.next_msg(2) for _ in frames]
        assert [(m.data, m.headers) for m in got[:2]] == [(b"a", None), (b"b", {"K": "1"})]
        assert got[2].data == b"" and got[2].headers is not None  # the status frame, after the others
        inner: list[bytes] = []
        other = InternalClient(server)
        other.subscribe(b"batch.two", lambda s, r, h, p: inner.append(p))
        capped = await nc.subscribe("batch.two")
        await capped.unsubscribe(limit=2)  # UNSUB sid 2 (nats-py's max_msgs= alone stays client-side)
        await nc.flush()
        (conn,) = [c for c in server.clients.values() if b"batch.two" in {s.subject for s in c.subs.values()}]
        sent = conn.out_msgs
        publisher.publish_many(b"batch.two", frames)
        assert [(await capped.next_msg(2)).data for _ in range(2)] == [b"a", b"b"]
        assert conn.out_msgs - sent == 2  # what the server sent (nats-py would drop a third itself)
        await asyncio.sleep(0.05)
        assert inner == [b"a", b"b", b""]
        other.close()
    finally:
        await nc.close()
        publisher.close()


async def test_publish_many_counts_every_message_of_a_run(server: Server, url: str) -> None:
    """A run to one plain receiver (delivery.publish_run) is counted as `publish` counts each message: the
    receiver's out_msgs/out_bytes, its subscription's delivered, the fan-out histogram.
    Two receivers of the subject each get every message, in order."""
    frames: list[tuple[bytes | None, bytes]] = [(None, b"%d" % i) for i in range(50)]
    frames.append((b"NATS/1.0\r\nK: v\r\n\r\n", b"end"))
    publisher = InternalClient(server)
    first, second = await nats.connect(url), await nats.connect(url)
    try:
        one = await first.subscribe("run.one")
        await first.flush()
        (conn,) = [c for c in server.clients.values() if b"run.one" in {s.subject for s in c.subs.values()}]
        before_msgs, before_bytes = conn.out_msgs, conn.out_bytes
        single_before = server.fanout.counts[1].n
        publisher.publish_many(b"run.one", frames)
        got = [await one.next_msg(2) for _ in frames]
        assert [m.data for m in got] == [p for _, p in frames] and got[-1].headers == {"K": "v"}
        assert conn.out_msgs - before_msgs == len(frames)
        assert conn.out_bytes - before_bytes == sum(len(p) + len(h or b"") for h, p in frames)
        (sub,) = [s for s in conn.subs.values() if s.subject == b"run.one"]
        assert sub.delivered == len(frames)
        assert server.fanout.counts[1].n - single_before == len(frames)
        both = [await nc.subscribe("run.two") for nc in (first, second)]
        for nc in (first, second):
            await nc.flush()
        publisher.publish_many(b"run.two", frames)
        for s in both:
            assert [(await s.next_msg(2)).data for _ in frames] == [p for _, p in frames]
    finally:
        await first.close()
        await second.close()
        publisher.close()


async def test_a_message_only_internal_subscribers_take_is_never_framed(server: Server, url: str) -> None:
    # The MSG/HMSG frame is built at the first receiver that writes it out: a JetStream publish (taken by
    # the stream's internal client only) skips three copies of its payload. With a socket receiver too,
    # that receiver gets the frame exactly as before.
    stream_side = InternalClient(server)
    got: list[tuple[bytes | None, bytes]] = []
    stream_side.subscribe(b"orders.*", lambda s, r, h, p: got.append((h, p)))
    sublist, fanout = server.sublist_for("$G"), server.fanout.counts
    headers = b"NATS/1.0\r\nNats-Msg-Id: 1\r\n\r\n"
    msg = Message(None)

    def publish_order() -> bool:
        sizes = b"%d %d" % (len(headers), len(headers) + 3)
        msg.set(b"orders.1", b"_INBOX.ack", sizes, headers, b"abc", b"MSG orders.1 ")
        return publish(sublist, msg, fanout)

    assert publish_order()
    assert not msg.framed and msg.tail == b"" and msg.htail == b""

    nc = await nats.connect(url)
    try:
        sub = await nc.subscribe("orders.>")
        await nc.flush()
        assert publish_order()
        assert msg.framed
        seen = await sub.next_msg(timeout=2)
        assert (seen.subject, seen.reply, seen.headers, seen.data) == (
            "orders.1",
            "_INBOX.ack",
            {"Nats-Msg-Id": "1"},
            b"abc",
        )
    finally:
        await nc.close()
    await asyncio.sleep(0.05)
    assert got == [(headers, b"abc")] * 2
    stream_side.close()
