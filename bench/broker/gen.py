"""Raw-protocol load generator for the broker benchmark: one OS process per client, no per-message Python.

Publishers `sendall` a pre-encoded batch of identical PUB frames until their count is reached, then
PING/PONG (the server has read everything). Subscribers `recv_into` a 1 MiB buffer and count `MSG `
occurrences with `bytearray.count` (C speed; the payload is all `x`, so nothing else matches), including
an occurrence split across two reads; they stop when they hold their expected count, or, when the count
is unknown (queue groups, lossy runs), after a PING whose PONG arrives behind every queued MSG. The
request/reply pair uses fixed-length frames too, so no side parses anything per message.

Every worker reports through `results` a tuple `(role, index, data)`; workers synchronise on `ready`
(a queue: one item per worker once it is subscribed/connected) and the `go`/`done` events.
"""

from __future__ import annotations

import socket
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from typing import Any

CONNECT = b'CONNECT {"verbose":false,"pedantic":false,"headers":false,"echo":true}\r\n'
BATCH_BYTES = 64 * 1024
RECV_BYTES = 1 << 20
TIMEOUT = 120.0


def connect(port: int) -> socket.socket:
    """A client socket past INFO and CONNECT."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    while b"\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed before INFO")
        buf += chunk
    s.sendall(CONNECT)
    return s


def ping(s: socket.socket) -> None:
    """Round trip a PING: everything sent before it has been processed by the server."""
    s.sendall(b"PING\r\n")
    buf = b""
    while b"PONG\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed while waiting for PONG")
        buf = buf[-8:] + chunk


def pub_frame(subject: str, size: int, reply: str = "") -> bytes:
    sp = f" {reply}" if reply else ""
    return f"PUB {subject}{sp} {size}\r\n".encode() + b"x" * size + b"\r\n"


def msg_frame_len(subject: str, sid: str, size: int, reply: str = "") -> int:
    sp = f" {reply}" if reply else ""
    return len(f"MSG {subject} {sid}{sp} {size}\r\n") + size + 2


def publisher(
    port: int,
    subject: str,
    count: int,
    size: int,
    idx: int,
    ready: Queue[Any],
    go: Event,
    results: Queue[Any],
    mixed: bool = False,
) -> None:
    s = connect(port)
    ping(s)
    # mixed: subjects alternate (`subject`, `subject` + "2"), so no two consecutive PUBs share a subject.
    frames = [pub_frame(subject + ("2" if i else ""), size) for i in range(2 if mixed else 1)]
    unit = b"".join(frames)
    per = max(1, BATCH_BYTES // len(unit)) * len(frames)  # messages per batch
    batch = unit * (per // len(frames))
    rest = count % per
    tail = unit * (rest // len(frames)) + b"".join(frames[: rest % len(frames)])
    ready.put(idx)
    go.wait(TIMEOUT)
    t0 = time.monotonic()
    for _ in range(count // per):
        s.sendall(batch)
    s.sendall(tail)
    ping(s)
    t1 = time.monotonic()
    results.put(("pub", idx, (t0, t1, count)))
    s.close()


def subscriber(
    port: int,
    subject: str,
    queue: str,
    expected: int,
    idx: int,
    ready: Queue[Any],
    done: Event,
    results: Queue[Any],
) -> None:
    """Count MSG frames; report (count, time of the last read that brought one)."""
    s = connect(port)
    s.sendall(f"SUB {subject} {queue + ' ' if queue else ''}1\r\n".encode())
    ping(s)
    ready.put(idx)
    s.settimeout(0.05)
    buf = bytearray(RECV_BYTES)
    count, last, tail, pinged = 0, 0.0, b"", False
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            n = s.recv_into(buf)
        except TimeoutError:
            n = -1
        if n == 0:
            break
        if n > 0:
            # An occurrence that ends within this read's first 3 bytes started in the stream's last 3.
            got = buf.count(b"MSG ", 0, n) + (tail[-3:] + bytes(buf[: min(n, 3)])).count(b"MSG ")
            tail = (tail + bytes(buf[max(0, n - 6) : n]))[-6:]
            if got:
                count += got
                last = time.monotonic()
            if expected and count >= expected:
                break
            if pinged and tail == b"PONG\r\n":
                break
        if done.is_set() and not pinged:
            s.sendall(b"PING\r\n")
            pinged = True
        if time.monotonic() > deadline:
            break
    results.put(("sub", idx, (count, last)))
    s.close()


def stalled_subscriber(
    port: int, subject: str, idx: int, ready: Queue[Any], done: Event, results: Queue[Any]
) -> None:
    """Subscribe, then stop reading until `done`; report whether the server closed the connection."""
    s = connect(port)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    s.sendall(f"SUB {subject} 1\r\n".encode())
    ping(s)
    ready.put(idx)
    done.wait(TIMEOUT)
    # Drain what the kernel holds: EOF or a reset within a few seconds means the server dropped us.
    s.settimeout(2.0)
    closed, received = False, 0
    try:
        while True:
            chunk = s.recv(RECV_BYTES)
            if not chunk:
                closed = True
                break
            received += len(chunk)
    except TimeoutError:
        pass
    except OSError:
        closed = True
    results.put(("stalled", idx, (closed, received)))
    s.close()


def idle_subscriptions(port: int, n: int, idx: int, ready: Queue[Any], done: Event) -> None:
    """`n` subscriptions on subjects nothing publishes to (1 in 10 with a wildcard), held until `done`."""
    s = connect(port)
    lines = []
    for i in range(n):
        if i % 20 == 0:
            subject = f"idle.{i}.*"
        elif i % 20 == 1:
            subject = f"idle.*.{i}.>"
        else:
            subject = f"idle.{i % 1000}.leaf{i}"
        lines.append(f"SUB {subject} {i + 1}\r\n".encode())
    s.sendall(b"".join(lines))
    ping(s)
    ready.put(idx)
    done.wait(TIMEOUT)
    s.close()


def _strip_pings(s: socket.socket, buf: bytes) -> bytes:
    """Answer and drop server PINGs at the head of `buf` (the server's RTT probe)."""
    while buf.startswith(b"PING\r\n"):
        s.sendall(b"PONG\r\n")
        buf = buf[6:]
    return buf


def responder(port: int, size: int, idx: int, ready: Queue[Any], done: Event) -> None:
    """Answer every request on `bench.req` with a fixed reply to `bench.inbox`."""
    s = connect(port)
    s.sendall(b"SUB bench.req 1\r\n")
    ping(s)
    ready.put(idx)
    frame = msg_frame_len("bench.req", "1", size, "bench.inbox")
    reply = pub_frame("bench.inbox", size)
    s.settimeout(0.1)
    buf = b""
    while not done.is_set():
        try:
            chunk = s.recv(RECV_BYTES)
        except TimeoutError:
            continue
        if not chunk:
            break
        buf = _strip_pings(s, buf + chunk)
        k = len(buf) // frame
        if k:
            buf = buf[k * frame :]
            s.sendall(reply * k)
    s.close()


def requester(
    port: int, size: int, count: int, idx: int, ready: Queue[Any], go: Event, results: Queue[Any]
) -> None:
    """`count` requests, one in flight; report the round-trip times in ns (after a short warm-up)."""
    s = connect(port)
    s.sendall(b"SUB bench.inbox 1\r\n")
    ping(s)
    ready.put(idx)
    go.wait(TIMEOUT)
    request = pub_frame("bench.req", size, "bench.inbox")
    frame = msg_frame_len("bench.inbox", "1", size)
    warm = min(100, count)
    rtts = []
    buf = b""
    for i in range(warm + count):
        t0 = time.perf_counter_ns()
        s.sendall(request)
        while len(buf) < frame:
            chunk = s.recv(RECV_BYTES)
            if not chunk:
                raise ConnectionError("server closed")
            buf = _strip_pings(s, buf + chunk)
        rtt = time.perf_counter_ns() - t0
        buf = buf[frame:]
        if i >= warm:
            rtts.append(rtt)
    results.put(("req", idx, rtts))
    s.close()


# -- the generator's own ceiling: the same clients against stand-ins that do no broker work ----------
INFO_LINE = b'INFO {"server_id":"stand-in","max_payload":1048576} \r\n'


def sink(listener: socket.socket) -> None:
    """Accept one client; read and discard everything, answering its PINGs: a publisher's ceiling."""
    conn, _ = listener.accept()
    conn.sendall(INFO_LINE)
    buf = bytearray(RECV_BYTES)
    tail = b""
    while True:
        n = conn.recv_into(buf)
        if n == 0:
            break
        # A publisher PINGs only when it waits for the answer: the stream then ends with the PING.
        tail = (tail + bytes(buf[max(0, n - 6) : n]))[-6:]
        if tail == b"PING\r\n":
            conn.sendall(b"PONG\r\n")
    conn.close()


def source(listener: socket.socket, subject: str, count: int, size: int, go: Event) -> None:
    """Accept one subscriber, answer its PING, then on `go` write `count` MSG frames as fast as it can:
    a subscriber's ceiling."""
    conn, _ = listener.accept()
    conn.sendall(INFO_LINE)
    buf = b""
    while b"PING\r\n" not in buf:
        buf += conn.recv(65536)
    conn.sendall(b"PONG\r\n")
    frame = f"MSG {subject} 1 {size}\r\n".encode() + b"x" * size + b"\r\n"
    per = max(1, BATCH_BYTES // len(frame))
    batch = frame * per
    go.wait(TIMEOUT)
    try:
        for _ in range(count // per):
            conn.sendall(batch)
        conn.sendall(frame * (count % per))
        conn.recv(1)  # until the subscriber hangs up
    except OSError:
        pass
    conn.close()
