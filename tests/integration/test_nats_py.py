"""End to end with the real nats-py client over loopback, against an in-process pynatsd."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import MaxPayloadError, NoRespondersError

from pynatsd.server import Server
from tests.integration.conftest import MakeServer


@pytest.fixture
async def nc(url: str) -> AsyncIterator[Client]:
    client = await nats.connect(url, max_reconnect_attempts=0)
    yield client
    if not client.is_closed:
        await client.close()


async def collect(client: Client, subject: str, queue: str = "") -> list[Msg]:
    got: list[Msg] = []

    async def cb(msg: Msg) -> None:
        got.append(msg)

    await client.subscribe(subject, queue=queue, cb=cb)
    return got


async def wait_for(predicate: object, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():  # type: ignore[operator]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


async def test_info_is_what_clients_expect(nc: Client, server: Server) -> None:
    info = nc._server_info
    assert info["server_id"] == server.server_id and len(info["server_id"]) == 56
    assert info["server_id"].startswith("N")
    assert info["proto"] == 1 and info["headers"] is True and info["max_payload"] == 1048576
    assert info["version"].startswith("2.") and info["client_ip"] == "127.0.0.1"
    assert info["port"] == server.port and info["host"] == "127.0.0.1"
    assert isinstance(info["client_id"], int) and "pynatsd_version" in info


async def test_pub_sub_roundtrip(nc: Client) -> None:
    got = await collect(nc, "greet")
    for i in range(100):
        await nc.publish("greet", b"hello %d" % i)
    await nc.flush()
    await wait_for(lambda: len(got) == 100)
    assert [m.data for m in got] == [b"hello %d" % i for i in range(100)]
    assert all(m.subject == "greet" for m in got)


async def test_wildcards(nc: Client) -> None:
    star = await collect(nc, "a.*.c")
    full = await collect(nc, "a.>")
    for subject in ("a.b.c", "a.x.c", "a.b", "a.b.c.d", "a", "b.b.c"):
        await nc.publish(subject, subject.encode())
    await nc.flush()
    await wait_for(lambda: len(star) == 2 and len(full) == 4)
    await asyncio.sleep(0.05)
    assert sorted(m.subject for m in star) == ["a.b.c", "a.x.c"]
    assert sorted(m.subject for m in full) == ["a.b", "a.b.c", "a.b.c.d", "a.x.c"]


async def test_queue_group_delivers_each_message_once(nc: Client, url: str) -> None:
    others = [await nats.connect(url) for _ in range(3)]
    try:
        groups = [await collect(c, "work", queue="workers") for c in [nc, *others]]
        plain = await collect(others[0], "work")
        for c in others:
            await c.flush()
        for i in range(400):
            await nc.publish("work", b"%d" % i)
        await nc.flush()
        await wait_for(lambda: sum(len(g) for g in groups) == 400 and len(plain) == 400)
        await asyncio.sleep(0.05)
        seen = Counter(m.data for g in groups for m in g)
        assert len(seen) == 400 and set(seen.values()) == {1}
        assert all(len(g) > 30 for g in groups), [len(g) for g in groups]  # spread randomly
    finally:
        for c in others:
            await c.close()


async def test_request_reply_new_and_old_style(nc: Client, url: str) -> None:
    responder = await nats.connect(url)
    try:

        async def handler(msg: Msg) -> None:
            await msg.respond(b"re:" + msg.data)

        await responder.subscribe("svc", cb=handler)
        await responder.flush()
        assert (await nc.request("svc", b"new", timeout=2)).data == b"re:new"
        assert (await nc.request("svc", b"old", timeout=2, old_style=True)).data == b"re:old"
    finally:
        await responder.close()


async def test_headers_roundtrip_and_stripped_for_headerless_receivers(nc: Client, server: Server) -> None:
    from tests.wire import WireClient

    got = await collect(nc, "h")
    await nc.flush()
    loop = asyncio.get_running_loop()
    # A raw subscriber that did not negotiate headers receives MSG with the payload only.
    raw = await loop.run_in_executor(None, WireClient, server.port)
    try:
        await loop.run_in_executor(None, raw.exchange, b'CONNECT {"verbose":false}\r\nSUB h 7\r\n')
        await nc.publish("h", b"body", headers={"X-Key": "v1", "Other": "two"})
        await nc.flush()
        await wait_for(lambda: len(got) == 1)
        assert got[0].data == b"body" and got[0].headers == {"X-Key": "v1", "Other": "two"}
        line = await loop.run_in_executor(None, raw.read_line)
        assert line == b"MSG h 7 4\r\n"
        assert await loop.run_in_executor(None, raw.read_line) == b"body\r\n"
    finally:
        raw.close()


async def test_no_responders(nc: Client) -> None:
    with pytest.raises(NoRespondersError):
        await nc.request("nobody.home", b"x", timeout=2)


async def test_auto_unsubscribe(nc: Client) -> None:
    got: list[Msg] = []

    async def cb(msg: Msg) -> None:
        got.append(msg)

    sub = await nc.subscribe("auto", cb=cb)
    await sub.unsubscribe(limit=3)
    for i in range(10):
        await nc.publish("auto", b"%d" % i)
    await nc.flush()
    await asyncio.sleep(0.1)
    assert [m.data for m in got] == [b"0", b"1", b"2"]


async def test_auto_unsubscribe_removes_from_index(nc: Client, server: Server) -> None:
    sub = await nc.subscribe("once")
    await sub.unsubscribe(limit=1)
    await nc.publish("once", b"a")
    await nc.publish("once", b"b")
    await nc.flush()
    msg = await sub.next_msg(timeout=2)
    assert msg.data == b"a"
    await wait_for(lambda: len(server.sublist) == 0)


async def test_drain(nc: Client, url: str) -> None:
    pub = await nats.connect(url)
    try:
        got = await collect(nc, "drain.me")
        await nc.flush()
        for i in range(50):
            await pub.publish("drain.me", b"%d" % i)
        await pub.flush()
        await nc.drain()
        assert len(got) == 50
        assert nc.is_closed
    finally:
        await pub.close()


async def test_flush_roundtrip(nc: Client) -> None:
    for _ in range(5):
        await nc.flush(timeout=2)


async def test_no_echo(url: str) -> None:
    client = await nats.connect(url, no_echo=True)
    other = await nats.connect(url)
    try:
        own = await collect(client, "echo")
        theirs = await collect(other, "echo")
        await other.flush()
        await client.publish("echo", b"x")
        await client.flush()
        await wait_for(lambda: len(theirs) == 1)
        await asyncio.sleep(0.05)
        assert own == []
    finally:
        await client.close()
        await other.close()


async def test_max_payload_is_enforced_by_client_and_server(make_server: MakeServer) -> None:
    server = await make_server(max_payload=1024)
    client = await nats.connect(f"nats://127.0.0.1:{server.port}")
    try:
        assert client.max_payload == 1024
        with pytest.raises(MaxPayloadError):
            await client.publish("big", b"x" * 1025)
        await client.publish("ok", b"x" * 1024)
        await client.flush()
    finally:
        await client.close()


async def test_slow_consumer_is_cut_off_while_fast_one_keeps_receiving(make_server: MakeServer) -> None:
    from tests.wire import WireClient

    server = await make_server(max_pending=256 * 1024)
    url = f"nats://127.0.0.1:{server.port}"
    loop = asyncio.get_running_loop()
    fast = await nats.connect(url)
    pub = await nats.connect(url)
    # The slow consumer subscribes and then never reads its socket.
    slow = await loop.run_in_executor(None, WireClient, server.port)
    try:
        await loop.run_in_executor(None, slow.exchange, b'CONNECT {"verbose":false}\r\nSUB firehose 1\r\n')
        fast_got = await collect(fast, "firehose")
        await fast.flush()
        payload = b"x" * 1000
        # 20 MB: far more than the kernel's loopback buffers and max_pending together.
        for i in range(20_000):
            await pub.publish("firehose", payload)
            if i % 500 == 0:
                await pub.flush()
        await pub.flush()
        await wait_for(lambda: len(fast_got) == 20_000, timeout=30)
        await wait_for(lambda: server.stats.slow_consumers == 1)
        assert [c.close_reason for c in server.closed_clients] == ["Slow Consumer (Pending Bytes)"]
        assert len(server.clients) == 2
        assert fast.is_connected and pub.is_connected
    finally:
        slow.close()
        await fast.close()
        await pub.close()
