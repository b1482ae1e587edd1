"""Differential fuzz: random op sequences over one raw connection must get byte-identical frames from pynatsd
and from the real nats-server (INFO lines excluded; the deliveries of one message to several subscriptions are
compared as a set, since nats-server's own order among them is unspecified)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.servers import ServerProcess, nats_server_binary, start_server

SUBJECTS = [b"a", b"a.b", b"a.*", b"a.>", b"b"]
PUB_SUBJECTS = [b"a", b"a.b", b"b", b"a.c"]

op = st.one_of(
    st.builds(lambda s, i: b"SUB %s %d\r\n" % (s, i), st.sampled_from(SUBJECTS), st.integers(1, 4)),
    st.builds(lambda i: b"UNSUB %d\r\n" % i, st.integers(1, 4)),
    st.builds(lambda i, m: b"UNSUB %d %d\r\n" % (i, m), st.integers(1, 4), st.integers(1, 3)),
    st.builds(
        lambda s, r, p: b"PUB %s%s %d\r\n%s\r\n" % (s, b" " + r if r else b"", len(p), p),
        st.sampled_from(PUB_SUBJECTS),
        st.sampled_from([b"", b"rep", b"_INBOX.x"]),
        st.binary(max_size=8),
    ),
    st.just(b"PING\r\n"),
)
tail = st.sampled_from(
    [b"", b"FOO\r\n", b"PUB a 3\r\nabcd\r\n", b"SUB\r\n", b"PUB a x\r\n", b"SUB a.. 9\r\n"]
)


def _exchange(port: int, data: bytes) -> bytes:
    """Send `data` then PING; return everything received until PONG for it, or the close."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        buf = b""
        while b"\r\n" not in buf:
            buf += sock.recv(4096)
        sock.sendall(data + b"PING\r\nSUB zz.end 99\r\nPUB zz.end 3\r\nend\r\n")
        out = buf.split(b"\r\n", 1)[1]
        deadline = time.monotonic() + 5
        while not out.endswith(b"MSG zz.end 99 3\r\nend\r\n") and time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except (ConnectionError, TimeoutError):
                break
            if not chunk:
                break
            out += chunk
        return out


def _frames(out: bytes) -> list[bytes]:
    """Split server output into frames (a MSG or HMSG frame keeps its payload)."""
    frames, pos = [], 0
    while pos < len(out):
        end = out.find(b"\r\n", pos)
        if end < 0:
            frames.append(out[pos:])
            break
        line = out[pos : end + 2]
        pos = end + 2
        if line.startswith((b"MSG ", b"HMSG ")):
            size = int(line.split()[-1])
            line += out[pos : pos + size + 2]
            pos += size + 2
        frames.append(line)
    return frames


def _canonical(out: bytes) -> list[bytes]:
    """Frames with each run of deliveries of one message (same subject, reply and payload) sorted by sid.

    nats-server keeps the subscriptions of one trie node in a Go map, so the order in which one published
    message reaches several subscriptions of a connection is unspecified; the set is what must match.
    """
    frames = _frames(out)
    keyed: list[tuple[bytes, bytes]] = []
    for frame in frames:
        if frame.startswith((b"MSG ", b"HMSG ")):
            head, _, payload = frame.partition(b"\r\n")
            parts = head.split()
            key = b" ".join([parts[1], *parts[3:]]) + b"\r\n" + payload
            keyed.append((key, frame))
        else:
            keyed.append((b"", frame))
    result: list[bytes] = []
    i = 0
    while i < len(keyed):
        j = i + 1
        if keyed[i][0]:
            while j < len(keyed) and keyed[j][0] == keyed[i][0]:
                j += 1
        result.extend(sorted(frame for _, frame in keyed[i:j]))
        i = j
    return result


def test_canonical_sorts_only_runs_of_one_message() -> None:
    a = b"MSG a 2 1\r\nx\r\nMSG a 1 1\r\nx\r\nPONG\r\nMSG a 3 1\r\ny\r\nMSG a 1 1\r\nx\r\n"
    b = b"MSG a 1 1\r\nx\r\nMSG a 2 1\r\nx\r\nPONG\r\nMSG a 3 1\r\ny\r\nMSG a 1 1\r\nx\r\n"
    assert _canonical(a) == _canonical(b)
    assert _canonical(a) != _canonical(b"MSG a 2 1\r\nx\r\nPONG\r\nMSG a 1 1\r\nx\r\n")
    assert _canonical(b"MSG a 1 1\r\nx\r\nMSG b 1 1\r\nx\r\n") != _canonical(
        b"MSG b 1 1\r\nx\r\nMSG a 1 1\r\nx\r\n"
    )


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[ServerProcess, ServerProcess]]:
    if nats_server_binary() is None:
        pytest.fail("nats-server is required for the differential fuzz")
    ours, ref = start_server("pynatsd"), start_server("nats-server")
    yield ours, ref
    ours.stop()
    ref.stop()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from([b'{"verbose":false}', b'{"verbose":true}', b'{"verbose":true,"pedantic":true}']),
    st.lists(op, max_size=12),
    tail,
)
def test_differential(
    servers: tuple[ServerProcess, ServerProcess], connect: bytes, ops: list[bytes], bad: bytes
) -> None:
    data = b"CONNECT " + connect + b"\r\n" + b"".join(ops) + bad
    ours, ref = servers
    got, want = _exchange(ours.port, data), _exchange(ref.port, data)
    assert _canonical(got) == _canonical(want), (data, got, want)


# Back-to-back PUBs to one subject, with pedantic off as client libraries connect, with what batch paths
# once special-cased (auto-unsubscribe, several subscriptions on the one connection, a payload holding
# `PUB subject `). One queue subscription only, so delivery is deterministic.
run_op = st.one_of(
    st.builds(lambda s, i: b"SUB %s %d\r\n" % (s, i), st.sampled_from(SUBJECTS), st.integers(1, 4)),
    st.builds(lambda s: b"SUB %s q 5\r\n" % s, st.sampled_from(SUBJECTS)),
    st.builds(lambda i, m: b"UNSUB %d %d\r\n" % (i, m), st.integers(1, 5), st.integers(1, 6)),
    st.builds(
        # `zeros`: every other size spelled with a leading zero (same payload size, longer frame).
        lambda s, r, payloads, zeros: b"".join(
            b"PUB %s%s %s%d\r\n%s\r\n" % (s, b" " + r if r else b"", b"0" * (zeros and i % 2), len(p), p)
            for i, p in enumerate(payloads)
        ),
        st.sampled_from(PUB_SUBJECTS),
        st.sampled_from([b"", b"rep"]),
        st.one_of(
            st.builds(lambda p, k: [p] * k, st.binary(max_size=6), st.integers(2, 8)),
            st.lists(st.sampled_from([b"", b"x", b"xy", b"PUB a ", b"PUB a.b "]), min_size=2, max_size=8),
            # Large payloads, framed by slicing rather than replace(), some holding PUB lines.
            st.builds(
                lambda p, k: [(p * 300)[:300]] * k,
                st.sampled_from([b"x", b"PUB a ", b"PUB a.b 3\r\n"]),
                st.integers(2, 4),
            ),
        ),
        st.booleans(),
    ),
    # Interleaved subjects: one frame per subject in turn, repeated.
    st.builds(
        lambda subjects, payload, k: (
            b"".join(b"PUB %s %d\r\n%s\r\n" % (s, len(payload), payload) for s in subjects) * k
        ),
        st.lists(st.sampled_from(PUB_SUBJECTS), min_size=2, max_size=6),
        st.sampled_from([b"", b"x", b"PUB a ", b"PUB a.b 1\r\n", (b"PUB a " * 50)[:250]]),
        st.integers(1, 5),
    ),
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(run_op, max_size=10))
def test_differential_runs(servers: tuple[ServerProcess, ServerProcess], ops: list[bytes]) -> None:
    data = b'CONNECT {"verbose":false,"pedantic":false}\r\n' + b"".join(ops)
    ours, ref = servers
    got, want = _exchange(ours.port, data), _exchange(ref.port, data)
    assert _canonical(got) == _canonical(want), (data, got, want)
