"""Runs of identical PUB lines (the PUBRUN fast path) delivered across connections: every message of a
run reaches each plain subscriber in order and exactly one queue-group member, framed byte for byte as a
single PUB would be, whatever the lengths of the members' sids."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.servers import ServerProcess, start_server
from tests.wire import WireClient

V0 = b'CONNECT {"verbose":false}\r\n'
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
    for client in (plain, *members, publisher):
        client.close()
