"""Delivery-level differential (issue 16): random mixes of connections, users with subscribe-deny rules,
echo and header settings, auto-unsubscribes and traffic; every connection must receive exactly the bytes
nats-server sends it (the deliveries of one message to several subscriptions of one connection compared
as a set, see test_differential_fuzz._canonical). This is the one delivery policy checked against the
reference, rule by rule, on whatever path (interpreted or compiled) the server runs."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.robust.test_differential_fuzz import _canonical
from tests.servers import ServerProcess, start_server

CONF = """
authorization {
  users = [
    {user: plain, password: p}
    {user: deny, password: d, permissions: {subscribe: {allow: [">"], deny: ["a.secret", "b.>"]}}}
    {user: reply, password: r, permissions: {publish: {allow: ["a.>"]}, allow_responses: true}}
  ]
}
"""
SUB_SUBJECTS = [b"a.*", b"a.>", b">", b"b.*", b"a.secret", b"a.ok", b"*.x", b"b"]
PUB_SUBJECTS = [b"a.secret", b"a.ok", b"a.x", b"b.x", b"b", b"c.x"]
USERS = {b"plain": b"p", b"deny": b"d", b"reply": b"r"}


@dataclass(frozen=True)
class Receiver:
    user: bytes
    echo: bool
    headers: bool
    subs: tuple[tuple[bytes, int], ...]  # (subject, auto-unsubscribe after; 0 = never)


receiver = st.builds(
    Receiver,
    st.sampled_from(list(USERS)),
    st.booleans(),
    st.booleans(),
    st.lists(
        st.tuples(st.sampled_from(SUB_SUBJECTS), st.sampled_from([0, 0, 1, 2])), min_size=1, max_size=3
    ).map(tuple),
)
message = st.tuples(
    st.sampled_from(PUB_SUBJECTS),
    st.sampled_from([b"", b"_INBOX.r1", b"a.reply"]),
    st.sampled_from([None, b"NATS/1.0\r\nK: v\r\n\r\n"]),
    st.binary(max_size=6),
)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    conf = Path(tmp_path_factory.mktemp("delivery")) / "users.conf"
    conf.write_text(CONF)
    ours, ref = start_server("pynatsd", ["-c", str(conf)]), start_server("nats-server", ["-c", str(conf)])
    yield ours, ref
    ours.stop()
    ref.stop()


def _open(port: int, user: bytes, echo: bool, headers: bool) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    buf = b""
    while b"\r\n" not in buf:
        buf += sock.recv(4096)
    connect = b'{"verbose":false,"user":"%s","pass":"%s","echo":%s,"headers":%s,"no_responders":false}' % (
        user,
        USERS[user],
        b"true" if echo else b"false",
        b"true" if headers else b"false",
    )
    sock.sendall(b"CONNECT " + connect + b"\r\n")
    return sock


def _pongs(out: bytes) -> int:
    """PONG lines in `out`, not counting payloads (a message's payload may well be `PONG`)."""
    count = pos = 0
    while (nl := out.find(b"\n", pos)) >= 0:
        line = out[pos : nl + 1]
        pos = nl + 1
        if line == b"PONG\r\n":
            count += 1
        elif line.startswith((b"MSG ", b"HMSG ")):
            pos += int(line.split()[-1]) + 2  # the payload and its CRLF
    return count


def _until_pong(sock: socket.socket, pongs: int = 1) -> bytes:
    out = b""
    deadline = time.monotonic() + 5
    while _pongs(out) < pongs and time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            break
        out += chunk
    return out


def _run(port: int, receivers: list[Receiver], publisher: Receiver, messages: list[tuple]) -> list[bytes]:
    socks = [_open(port, r.user, r.echo, r.headers) for r in [*receivers, publisher]]
    try:
        outputs = []
        for sock, r in zip(socks, [*receivers, publisher], strict=True):
            ops = b"".join(
                b"SUB %s %d\r\n" % (subject, i) + (b"UNSUB %d %d\r\n" % (i, after) if after else b"")
                for i, (subject, after) in enumerate(r.subs, 1)
            )
            sock.sendall(ops + b"PING\r\n")
            outputs.append(_until_pong(sock))
        pubs = []
        for subject, reply, headers, payload in messages:
            r = b" " + reply if reply else b""
            if headers is None or not publisher.headers:
                pubs.append(b"PUB %s%s %d\r\n%s\r\n" % (subject, r, len(payload), payload))
            else:
                total = len(headers) + len(payload)
                pubs.append(
                    b"HPUB %s%s %d %d\r\n%s%s\r\n" % (subject, r, len(headers), total, headers, payload)
                )
        socks[-1].sendall(b"".join(pubs) + b"PING\r\n")
        outputs[-1] += _until_pong(socks[-1])
        for i, sock in enumerate(socks[:-1]):
            sock.sendall(b"PING\r\n")
            outputs[i] += _until_pong(sock)
        return outputs
    finally:
        for sock in socks:
            sock.close()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(receiver, min_size=1, max_size=3), receiver, st.lists(message, min_size=1, max_size=10))
def test_every_connection_gets_what_nats_server_sends_it(
    servers: tuple[ServerProcess, ServerProcess],
    receivers: list[Receiver],
    publisher: Receiver,
    messages: list[tuple],
) -> None:
    ours, ref = servers
    got = _run(ours.port, receivers, publisher, messages)
    want = _run(ref.port, receivers, publisher, messages)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert _canonical(a) == _canonical(b), (i, receivers, publisher, messages, a, b)
