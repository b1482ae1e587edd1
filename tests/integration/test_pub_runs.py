"""Runs of identical PUB lines (a shape batch paths once special-cased) delivered across connections:
every message of a run reaches each plain subscriber in order and exactly one queue-group member, framed
byte for byte as a single PUB would be, whatever the lengths of the members' sids."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.servers import ServerProcess, start_server
from tests.wire import WireClient

# pedantic off, as client libraries send it (nats-server's default is on, which takes the per-message path)
V0 = b'CONNECT {"verbose":false,"pedantic":false}\r\n'
N = 3000


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    started = start_server("pynatsd")
    yield started
    started.stop()
    assert "Traceback" not in started.log(), started.log()


def subscriber(server: ServerProcess, line: bytes) -> WireClient:
    client = WireClient(server.port)
    client.send(V0 + line + b"PING\r\n")
    client.read_until(b"PONG\r\n")
    return client


def drain(client: WireClient) -> bytes:
    client.send(b"PING\r\n")
    data, closed = client.read_until(b"PONG\r\n", timeout=20)
    assert not closed
    return data[: -len(b"PONG\r\n")]


@pytest.mark.parametrize("reply", [b"", b" _INBOX.r"])
def test_a_run_reaches_plain_subscribers_in_order_and_one_member_per_message(
    server: ServerProcess, reply: bytes
) -> None:
    plain = subscriber(server, b"SUB runs.x 5\r\n")
    members = [subscriber(server, b"SUB runs.* grp " + sid + b"\r\n") for sid in (b"1", b"22", b"333")]
    publisher = subscriber(server, b"")
    try:
        check_run(plain, members, publisher, reply)
    finally:
        for client in (plain, *members, publisher):
            client.close()


def check_run(plain: WireClient, members: list[WireClient], publisher: WireClient, reply: bytes) -> None:
    payloads = [b"%06d" % i for i in range(N)]  # one size, so one control line for the whole run
    publisher.send(b"".join(b"PUB runs.x" + reply + b" 6\r\n" + p + b"\r\n" for p in payloads) + b"PING\r\n")
    publisher.read_until(b"PONG\r\n", timeout=20)

    expected = b"".join(b"MSG runs.x 5" + reply + b" 6\r\n" + p + b"\r\n" for p in payloads)
    assert drain(plain) == expected
    seen: list[bytes] = []
    for sid, member in zip((b"1", b"22", b"333"), members, strict=True):
        data = drain(member)
        frame = re.compile(rb"MSG runs\.x " + sid + re.escape(reply) + rb" 6\r\n(\d{6})\r\n")
        got = frame.findall(data)
        assert frame.sub(b"", data) == b"", data[:200]  # nothing but well-formed frames
        assert got == sorted(got)  # each member sees its share in publish order
        seen += got
    assert sorted(seen) == payloads  # every message to exactly one member


def test_a_run_with_varying_sizes_reaches_a_plain_subscriber_and_a_queue_group(server: ServerProcess) -> None:
    """One subject, payload sizes varying (and holding `PUB runs.y ` now and then): the plain subscriber
    gets the stream byte for byte, the queue group (per-message path: sizes differ) each message once."""
    plain = subscriber(server, b"SUB runs.y 3\r\n")
    member = subscriber(server, b"SUB runs.y g 4\r\n")
    publisher = subscriber(server, b"")
    try:
        payloads = [b"x" * (i % 7) if i % 50 else b"PUB runs.y %d" % i for i in range(N)]
        publisher.send(b"".join(b"PUB runs.y %d\r\n%s\r\n" % (len(p), p) for p in payloads) + b"PING\r\n")
        publisher.read_until(b"PONG\r\n", timeout=20)
        framed = [b"%d\r\n%s\r\n" % (len(p), p) for p in payloads]
        assert drain(plain) == b"".join(b"MSG runs.y 3 " + f for f in framed)
        assert drain(member) == b"".join(b"MSG runs.y 4 " + f for f in framed)
    finally:
        for client in (plain, member, publisher):
            client.close()


def test_a_run_of_large_payloads_holding_its_own_prefix_is_framed_exactly(server: ServerProcess) -> None:
    """Large payloads take the sliced framing (no search of the payloads): payloads that hold `PUB runs.z `
    and whole PUB lines still reach a plain subscriber and a queue group byte for byte."""
    plain = subscriber(server, b"SUB runs.z 7\r\n")
    members = [subscriber(server, b"SUB runs.z q " + sid + b"\r\n") for sid in (b"1", b"22")]
    publisher = subscriber(server, b"")
    try:
        size = 1024
        payloads = [(b"PUB runs.z %d\r\n" % i + b"PUB runs.z " * 100)[:size] for i in range(500)]
        publisher.send(b"".join(b"PUB runs.z %d\r\n%s\r\n" % (size, p) for p in payloads) + b"PING\r\n")
        publisher.read_until(b"PONG\r\n", timeout=20)
        assert drain(plain) == b"".join(b"MSG runs.z 7 %d\r\n%s\r\n" % (size, p) for p in payloads)
        got = []
        for sid, member in zip((b"1", b"22"), members, strict=True):
            data = drain(member)
            frame = re.compile(rb"MSG runs\.z " + sid + rb" 1024\r\n(.{1024})\r\n", re.DOTALL)
            assert frame.sub(b"", data) == b""
            got += frame.findall(data)
        assert sorted(got) == sorted(payloads)
    finally:
        for client in (plain, *members, publisher):
            client.close()


def test_a_run_whose_sizes_are_spelled_differently_reaches_a_queue_group_intact(
    server: ServerProcess,
) -> None:
    """`PUB s 2` then `PUB s 02`: same payload size, different frame lengths. The queue group must not
    cut frames at fixed offsets."""
    member = subscriber(server, b"SUB runs.w q 9\r\n")
    publisher = subscriber(server, b"")
    try:
        # The size goes out as sent (`02`), as nats-server forwards it.
        tails = [b"%s\r\n%02d\r\n" % (b"02" if i % 3 else b"2", i % 100) for i in range(300)]
        publisher.send(b"".join(b"PUB runs.w " + tail for tail in tails) + b"PING\r\n")
        publisher.read_until(b"PONG\r\n", timeout=20)
        assert drain(member) == b"".join(b"MSG runs.w 9 " + tail for tail in tails)
    finally:
        for client in (member, publisher):
            client.close()


@pytest.mark.parametrize("size", [3, 300])
def test_interleaved_subjects_reach_each_subscriber_with_its_own_frames_in_order(
    server: ServerProcess, size: int
) -> None:
    """A publisher cycling through three subjects: subscribers on one subject, on another, on
    all of them (wildcard) each get exactly their messages, in publish order, framed
    byte for byte as single PUBs would be; payloads hold other subjects' PUB lines."""
    only_a = subscriber(server, b"SUB mix.a 1\r\n")
    only_b = subscriber(server, b"SUB mix.b 22\r\n")
    every = subscriber(server, b"SUB mix.* 333\r\n")
    publisher = subscriber(server, b"")
    try:
        subjects = [b"mix.a", b"mix.b", b"mix.c"]
        frames = [
            (subjects[i % 3], (b"%05d PUB mix.b 1\r\n" % i + b"PUB mix.a " * 40)[:size]) for i in range(3000)
        ]
        publisher.send(b"".join(b"PUB %s %d\r\n%s\r\n" % (s, size, p) for s, p in frames) + b"PING\r\n")
        publisher.read_until(b"PONG\r\n", timeout=20)

        def expected(sid: bytes, wanted: set[bytes]) -> bytes:
            return b"".join(b"MSG %s %s %d\r\n%s\r\n" % (s, sid, size, p) for s, p in frames if s in wanted)

        assert drain(only_a) == expected(b"1", {b"mix.a"})
        assert drain(only_b) == expected(b"22", {b"mix.b"})
        assert drain(every) == expected(b"333", set(subjects))
    finally:
        for client in (only_a, only_b, every, publisher):
            client.close()
