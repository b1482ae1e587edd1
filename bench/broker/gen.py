"""Raw-protocol load generator for the broker benchmark: one OS process per client, no per-message Python.

Publishers `sendall` a pre-encoded batch of PUB frames (one subject, or a cycle through several: the
realistic rows' 1,000 interleaved subjects) until their count is reached, then PING/PONG (the server has
read everything); a late publisher connects `delay` s after the start, within a 2 s handshake timeout.
Subscribers `recv_into` a 1 MiB buffer and count `MSG ` occurrences with `bytearray.count` (C speed; the
payload is all `x`, so nothing else matches), including an occurrence split across two reads; they stop
when they hold their expected count, or, when the count is unknown (queue groups, lossy runs), after a
PING whose PONG arrives behind every queued MSG (on another node of a cluster, routed messages can still
follow that PONG: a subscriber short of a known count then waits for a quiet second). The request/reply
pairs use fixed-length frames too (fresh inboxes `_INBOX.<rr>.<seq>` keep that length), so no side parses
anything per message. `probe` samples the latency other clients see while a row runs.

Every worker reports through `results` a tuple `(role, index, data)`; workers synchronise on `ready`
(a queue: one item per worker once it is subscribed/connected) and the `go`/`done` events.
"""

from __future__ import annotations

import collections
import selectors
import socket
import threading
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from typing import Any

CONNECT = b'CONNECT {"verbose":false,"pedantic":false,"headers":false,"echo":true}\r\n'
BATCH_BYTES = 64 * 1024
RECV_BYTES = 1 << 20
TIMEOUT = 120.0
CONNECT_TIMEOUT = 2.0  # nats.go's default
SETTLE = 1.0  # quiet time that ends a subscriber short of its count after its final PONG


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


def connect_timed(port: int, timeout: float) -> tuple[socket.socket | None, float, str]:
    """Connect and PING within `timeout` s: (socket or None, seconds to the PONG, error)."""
    t = time.perf_counter()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        s.settimeout(max(0.001, timeout - (time.perf_counter() - t)))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        while b"\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed before INFO")
            buf += chunk
        s.sendall(CONNECT)
        ping(s)
        if time.perf_counter() - t > timeout:  # each read had time left; the handshake as a whole not
            s.close()
            raise TimeoutError(f"no PONG within {timeout} s")
    except OSError as e:
        return None, time.perf_counter() - t, f"{type(e).__name__}: {e}"
    return s, time.perf_counter() - t, ""


def pub_frame(subject: str, size: int, reply: str = "") -> bytes:
    sp = f" {reply}" if reply else ""
    return f"PUB {subject}{sp} {size}\r\n".encode() + b"x" * size + b"\r\n"


def msg_frame_len(subject: str, sid: str, size: int, reply: str = "") -> int:
    sp = f" {reply}" if reply else ""
    return len(f"MSG {subject} {sid}{sp} {size}\r\n") + size + 2


def publisher(
    port: int,
    subjects: list[str],
    count: int,
    size: int,
    idx: int,
    ready: Queue[Any],
    go: Event,
    results: Queue[Any],
    delay: float | None = None,
) -> None:
    """Publish `count` messages cycling through `subjects`; report (t0, t1, sent, connect ms, error).

    With `delay`, connect only `delay` s after `go` (a publisher joining a running flood), giving up
    after nats.go's 2 s connect timeout; otherwise connect before `ready`.
    """
    frames = [pub_frame(subject, size) for subject in subjects]
    unit = b"".join(frames)
    per = max(1, BATCH_BYTES // len(unit)) * len(frames)  # messages per batch
    batch = unit * (per // len(frames))
    rest = count % per
    tail = unit * (rest // len(frames)) + b"".join(frames[: rest % len(frames)])
    if delay is None:
        s, took, error = connect_timed(port, TIMEOUT)
        ready.put(idx)
        go.wait(TIMEOUT)
    else:
        ready.put(idx)
        go.wait(TIMEOUT)
        time.sleep(delay)
        s, took, error = connect_timed(port, CONNECT_TIMEOUT)
    if s is None:
        results.put(("pub", idx, (0.0, 0.0, 0, took * 1e3, error)))
        return
    s.settimeout(TIMEOUT)
    t0 = time.monotonic()
    for _ in range(count // per):
        s.sendall(batch)
    s.sendall(tail)
    ping(s)
    t1 = time.monotonic()
    results.put(("pub", idx, (t0, t1, count, took * 1e3, "")))
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
    count, last, tail, pinged, settling = 0, 0.0, b"", False, 0.0
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
                if not expected:
                    break
                # Short of a known count at the PONG: messages may still be crossing a route from the
                # publishers' node; stop once none has come for SETTLE seconds.
                settling = time.monotonic()
        if settling and time.monotonic() - max(settling, last) > SETTLE:
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


# Fresh inboxes: request i of requester r replies to _INBOX.<rr>.<iiiiiiii>, so every frame keeps its length.
INBOX = "_INBOX.{:02d}.{:08d}"


def _strip_pings(s: socket.socket, buf: bytes) -> bytes:
    """Answer and drop server PINGs at the head of `buf` (the server's RTT probe)."""
    while buf.startswith(b"PING\r\n"):
        s.sendall(b"PONG\r\n")
        buf = buf[6:]
    return buf


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


def responder(
    port: int, subject: str, inbox: str, size: int, idx: int, ready: Queue[Any], done: Event
) -> None:
    """Answer every request on `subject` to its reply subject, one `sendall` per read. Every reply subject
    has the length of `inbox` (`bench.inbox`, or fresh ones: INBOX), so each is at a fixed offset."""
    s = connect(port)
    s.sendall(f"SUB {subject} 1\r\n".encode())
    ping(s)
    ready.put(idx)
    frame = msg_frame_len(subject, "1", size, inbox)
    at = len(f"MSG {subject} 1 ")
    tail = f" {size}\r\n".encode() + b"x" * size + b"\r\n"
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
            offsets = range(0, k * frame, frame)
            s.sendall(b"".join(b"PUB " + buf[o + at : o + at + len(inbox)] + tail for o in offsets))
            buf = buf[k * frame :]
    s.close()


def requesters(
    port: int,
    subject: str,
    size: int,
    count: int,
    conc: int,
    idx: int,
    ready: Queue[Any],
    go: Event,
    results: Queue[Any],
) -> None:
    """`conc` requesters (one socket each, one request in flight each, a fresh inbox per request) share
    `count` requests; report (round-trip times in ns, first send, last reply) from one selector loop."""
    socks = []
    for r in range(conc):
        s = connect(port)
        s.sendall(f"SUB _INBOX.{r:02d}.* 1\r\n".encode())
        ping(s)
        s.setblocking(False)
        socks.append(s)
    ready.put(idx)
    frame = msg_frame_len(INBOX.format(0, 0), "1", size)
    head, body = f"PUB {subject} ".encode(), f" {size}\r\n".encode() + b"x" * size + b"\r\n"
    left = [count // conc + (1 if r < count % conc else 0) for r in range(conc)]
    sent = [0] * conc
    started = [0] * conc
    bufs = [b""] * conc
    rtts: list[int] = []
    sel = selectors.DefaultSelector()

    def send(r: int) -> None:
        started[r] = time.perf_counter_ns()
        socks[r].sendall(head + INBOX.format(r, sent[r]).encode() + body)
        sent[r] += 1
        left[r] -= 1

    go.wait(TIMEOUT)
    t0 = time.monotonic()
    for r in range(conc):
        sel.register(socks[r], selectors.EVENT_READ, r)
        if left[r]:
            send(r)
    pending = sum(1 for n in sent if n)
    deadline = time.monotonic() + TIMEOUT
    while pending and time.monotonic() < deadline:
        for key, _ in sel.select(1.0):
            r = key.data
            chunk = socks[r].recv(RECV_BYTES)
            if not chunk:
                raise ConnectionError("server closed")
            bufs[r] = _strip_pings(socks[r], bufs[r] + chunk)
            if len(bufs[r]) >= frame:
                rtts.append(time.perf_counter_ns() - started[r])
                bufs[r] = bufs[r][frame:]
                if left[r]:
                    send(r)
                else:
                    pending -= 1
    results.put(("req", idx, (rtts, t0, time.monotonic())))
    for s in socks:
        s.close()


def probe(
    port: int, idx: int, ready: Queue[Any], done: Event, results: Queue[Any], every: float = 0.05
) -> None:
    """The latency other clients see while a row runs, in ms: every `every` s until `done`, a new client
    connects (connect -> INFO -> CONNECT+PING -> PONG, in a thread of its own) and an idle client (connected
    before the row) sends a PING, its PONGs read in order by another thread. Samples start on the clock,
    whether or not earlier ones have come back, so a stalled server is sampled as often as a fast one
    (no coordinated omission). A failure: no PONG within 2 s."""
    out: dict[str, Any] = {"connect": [], "ping": [], "connect_fail": 0, "ping_fail": 0}
    lock = threading.Lock()

    def connect_once() -> None:
        s, took, _ = connect_timed(port, CONNECT_TIMEOUT)
        with lock:
            if s is None:
                out["connect_fail"] += 1
            else:
                out["connect"].append(took * 1e3)
        if s is not None:
            s.close()

    idle, _, _ = connect_timed(port, TIMEOUT)
    if idle is None:
        raise ConnectionError("probe: the idle client could not connect")
    sent: collections.deque[float] = collections.deque()  # send times of the PINGs not answered yet
    stop = threading.Event()

    def read_pongs() -> None:
        buf = b""
        idle.settimeout(0.05)
        while not stop.is_set():
            try:
                chunk = idle.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                return
            now, buf = time.perf_counter(), buf + chunk
            *lines, buf = buf.split(b"\r\n")
            for line in lines:
                if line == b"PONG" and sent:
                    took = now - sent.popleft()
                    with lock:
                        if took > CONNECT_TIMEOUT:
                            out["ping_fail"] += 1
                        else:
                            out["ping"].append(took * 1e3)
                elif line == b"PING":  # the server's own RTT probe
                    idle.sendall(b"PONG\r\n")

    reader = threading.Thread(target=read_pongs)
    reader.start()
    ready.put(idx)
    connects = []
    while not done.wait(every):
        connects.append(threading.Thread(target=connect_once))
        connects[-1].start()
        sent.append(time.perf_counter())
        idle.sendall(b"PING\r\n")
    for t in connects:
        t.join()
    deadline = time.perf_counter() + CONNECT_TIMEOUT
    while sent and time.perf_counter() < deadline:
        time.sleep(0.01)
    stop.set()
    reader.join()
    out["ping_fail"] += len(sent)
    idle.close()
    results.put(("probe", idx, out))


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
