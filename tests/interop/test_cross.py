"""Clients talking to each other through the broker: Go, C, nats-py and a raw socket, byte for byte."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from tests.interop.drivers import Driver
from tests.interop.spec import header_pairs, parse_header_block, payload, python_headers
from tests.servers import ServerProcess
from tests.wire import WireClient, strip_info

COUNT = 10  # every payload size of the spec once, 64 KiB included


@dataclass
class RawMsg:
    subject: str
    reply: str
    header_block: bytes
    payload: bytes


class RawSubscriber:
    """A protocol-level subscriber: sees the exact header block bytes the broker forwards."""

    def __init__(self, server: ServerProcess, subject: str) -> None:
        self.wire = WireClient(server.port)
        connect = {"verbose": False, "pedantic": False, "headers": True, "protocol": 1, "name": "raw"}
        out, closed = self.wire.exchange(f"CONNECT {json.dumps(connect)}\r\nSUB {subject} 1\r\n".encode())
        assert not closed and out == b"", out

    def collect(self) -> list[RawMsg]:
        """Everything delivered so far (a PING round trip guarantees it has all arrived)."""
        data, closed = self.wire.exchange(b"")
        assert not closed
        data = strip_info(data)  # the async INFO that follows the first PONG (protocol 1)
        msgs = []
        while data:
            line, _, data = data.partition(b"\r\n")
            op, *args = line.split(b" ")
            assert op in (b"MSG", b"HMSG"), line
            has_reply = len(args) == (5 if op == b"HMSG" else 4)
            subject, reply = args[0].decode(), (args[2].decode() if has_reply else "")
            hdr_len = int(args[-2]) if op == b"HMSG" else 0
            total = int(args[-1])
            body, data = data[:total], data[total + 2 :]
            msgs.append(RawMsg(subject, reply, body[:hdr_len], body[hdr_len:]))
        return msgs

    def close(self) -> None:
        self.wire.close()


@pytest.fixture
def raw_sub(server: ServerProcess, subject: str) -> Iterator[RawSubscriber]:
    sub = RawSubscriber(server, subject)
    yield sub
    sub.close()


@pytest.fixture
async def py_client(server: ServerProcess) -> AsyncIterator[NatsClient]:
    nc = await nats.connect(server.url, name="interop-python", allow_reconnect=False)
    yield nc
    await nc.close()


def go_header_block(i: int) -> bytes:
    """nats.go writes headers with net/http's Header.Write: keys sorted, one line per value."""
    lines = [f"{k}: {v}\r\n" for k, v in header_pairs(i, "go")]
    return b"NATS/1.0\r\n" + "".join(lines).encode() + b"\r\n"


def last_values(pairs: list[list[str]]) -> dict[str, str]:
    """nats-py exposes headers as a dict: for a repeated key the last value wins."""
    return {k: v for k, v in pairs}


async def next_msgs(sub: Any, count: int) -> list[Msg]:
    return [await sub.next_msg(timeout=10) for _ in range(count)]


@pytest.mark.parametrize("publisher", ["go", "c"])
async def test_client_publisher_to_all_subscribers(
    request: pytest.FixtureRequest,
    publisher: str,
    go_driver: Driver,
    c_driver: Driver,
    server: ServerProcess,
    subject: str,
    py_client: NatsClient,
    raw_sub: RawSubscriber,
) -> None:
    """Go or C publishes headers + payloads; Go, C, nats-py and raw subscribers get identical bytes."""
    drivers = {"go": go_driver, "c": c_driver}
    other = "c" if publisher == "go" else "go"
    listener = drivers[other].start("sub", server.url, subject, COUNT)
    try:
        listener.expect("ready")
        py_sub = await py_client.subscribe(subject)
        await py_client.flush()
        await asyncio.to_thread(drivers[publisher].run, "pub", server.url, subject, COUNT)
        py_msgs = await next_msgs(py_sub, COUNT)
        driver_msgs = [listener.expect("msg") for _ in range(COUNT)]
        listener.finish()
    finally:
        listener.kill()
    raw_msgs = raw_sub.collect()
    assert len(raw_msgs) == COUNT
    for i in range(COUNT):
        expected_pairs = header_pairs(i, publisher)
        raw = raw_msgs[i]
        assert (raw.subject, raw.payload) == (subject, payload(i))
        status, pairs = parse_header_block(raw.header_block)
        assert status == b"NATS/1.0"
        assert sorted(pairs, key=lambda kv: kv[0]) == expected_pairs
        if publisher == "go":
            assert raw.header_block == go_header_block(i)
        got = driver_msgs[i]
        assert bytes.fromhex(got["data"]) == payload(i)
        assert got["hdr"] == expected_pairs
        assert py_msgs[i].data == payload(i)
        assert py_msgs[i].headers == last_values(expected_pairs)


async def test_python_publisher_to_go_and_c(
    go_driver: Driver,
    c_driver: Driver,
    server: ServerProcess,
    subject: str,
    py_client: NatsClient,
    raw_sub: RawSubscriber,
) -> None:
    """nats-py publishes; Go, C and the raw subscriber see exactly what nats-py encoded."""
    listeners = [d.start("sub", server.url, subject, COUNT) for d in (go_driver, c_driver)]
    try:
        for listener in listeners:
            listener.expect("ready")
        for i in range(COUNT):
            await py_client.publish(subject, payload(i), headers=python_headers(i))
        await py_client.flush()
        received = [[listener.expect("msg") for _ in range(COUNT)] for listener in listeners]
        for listener in listeners:
            listener.finish()
    finally:
        for listener in listeners:
            listener.kill()
    raw_msgs = raw_sub.collect()
    for i in range(COUNT):
        headers = python_headers(i)
        block = "NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        assert raw_msgs[i].header_block == block.encode()
        assert raw_msgs[i].payload == payload(i)
        for msgs in received:
            assert bytes.fromhex(msgs[i]["data"]) == payload(i)
            assert msgs[i]["hdr"] == sorted([k, v] for k, v in headers.items())


def reply_pairs(i: int, requester: str, responder: str, inbox: str, via_python: bool) -> list[list[str]]:
    """Headers of reply i: the request's, plus the responder's own (a dict round trip if nats-py answered)."""
    pairs = header_pairs(i, requester)
    if via_python:
        pairs = [[k, v] for k, v in last_values(pairs).items()]
    pairs += [["X-Reply-To", inbox], ["X-Responder", responder]]
    return sorted(pairs, key=lambda kv: kv[0])


async def python_responder(nc: NatsClient, subject: str) -> Any:
    """nats-py mirror of the drivers' `respond` scenario."""

    async def answer(msg: Msg) -> None:
        headers = dict(msg.headers or {})
        headers.update({"X-Responder": "python", "X-Reply-To": msg.reply})
        await nc.publish(msg.reply, b"re:" + msg.data, headers=headers)

    sub = await nc.subscribe(subject, cb=answer)
    await nc.flush()
    return sub


@pytest.mark.parametrize(
    ("requester", "responder"),
    [("c", "go"), ("go", "c"), ("go", "python"), ("c", "python")],
)
@pytest.mark.parametrize("style", ["old", "new"])
async def test_request_reply_across_clients(
    requester: str,
    responder: str,
    style: str,
    go_driver: Driver,
    c_driver: Driver,
    server: ServerProcess,
    subject: str,
    py_client: NatsClient,
) -> None:
    """A requester in one client, a responder in another: replies carry the request bytes back."""
    drivers = {"go": go_driver, "c": c_driver}
    count = 6
    serving = None
    if responder == "python":
        await python_responder(py_client, subject)
    else:
        serving = drivers[responder].start("respond", server.url, subject, count)
        serving.expect("ready")
    try:
        replies = await asyncio.to_thread(
            drivers[requester].run, "request", server.url, subject, count, style
        )
        if serving:
            serving.finish()
    finally:
        if serving:
            serving.kill()
    assert len(replies) == count
    for i, reply in enumerate(replies):
        assert bytes.fromhex(reply["data"]) == b"re:" + payload(i)
        inbox = reply["subject"]
        assert inbox.startswith("_INBOX.")
        assert reply["hdr"] == reply_pairs(i, requester, responder, inbox, responder == "python")


@pytest.mark.parametrize("responder", ["go", "c"])
async def test_python_requester(
    responder: str,
    go_driver: Driver,
    c_driver: Driver,
    server: ServerProcess,
    subject: str,
    py_client: NatsClient,
) -> None:
    """nats-py requests (new-style muxed inbox) answered by the Go and C responders."""
    count = 4
    serving = {"go": go_driver, "c": c_driver}[responder].start("respond", server.url, subject, count)
    try:
        serving.expect("ready")
        for i in range(count):
            reply = await py_client.request(subject, payload(i), timeout=10, headers=python_headers(i))
            assert reply.data == b"re:" + payload(i)
            assert reply.headers is not None
            assert reply.headers["X-Responder"] == responder
            assert reply.headers["X-Reply-To"].startswith("_INBOX.")
            for key, value in python_headers(i).items():
                assert reply.headers[key] == value
        serving.finish()
    finally:
        serving.kill()


async def test_burst_order_across_clients(
    go_driver: Driver, c_driver: Driver, server: ServerProcess, subject: str
) -> None:
    """Go and C each pipeline 20,000 small messages at once; Go and C subscribers get all 40,000, each
    publisher's stream complete, in order and intact (the broker parses and frames under real batching)."""
    per_publisher = 20_000
    drivers = (go_driver, c_driver)
    tallies = [d.start("tally", server.url, subject, 2 * per_publisher) for d in drivers]
    try:
        for tally in tallies:
            tally.expect("ready")
        await asyncio.gather(
            *(asyncio.to_thread(d.run, "burst", server.url, subject, per_publisher) for d in drivers)
        )
        results = [tally.expect("tally", timeout=25) for tally in tallies]
        for tally in tallies:
            tally.finish()
    finally:
        for tally in tallies:
            tally.kill()
    for result in results:
        assert result["received"] == 2 * per_publisher
        assert (result["bad"], result["first_bad"]) == (0, ""), result
