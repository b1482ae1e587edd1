"""`make bench-ws`: WebSocket 1 -> 1 msgs/s, pynatsd against nats-server's websocket listener, same run.

python bench/websocket/run.py [--reps 3] [--sizes 16,1024] [--count 3000000]

Both servers get the same config (`websocket { port, no_tls: true }`) and are measured alternately
(A B A B ...); each figure is the median of --reps runs. The generator is raw: one process publishes a
pre-encoded batch of PUBs wrapped in one masked binary frame (masked once, with a random key, so the
server unmasks as it would for any client) until its count is sent; one process subscribes and counts
`MSG ` in the unframed stream.
Writes bench/results/websocket.json.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pynatsd.websocket.framing import Control, Decoder, unmask  # noqa: E402
from tests.websocket.servers import start_ws_server  # noqa: E402

BATCH_BYTES = 64 * 1024


def client_frame(payload: bytes) -> bytes:
    """A binary frame masked with a random key, as a client sends it."""
    n = len(payload)
    if n < 126:
        head = bytes((0x82, 0x80 | n))
    elif n < 65536:
        head = struct.pack("!BBH", 0x82, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x82, 0x80 | 127, n)
    key = os.urandom(4)
    return head + key + unmask(payload, key)  # XOR masking is its own inverse


class TCPClient:
    """A raw NATS client over plain TCP: the same generator as a baseline (`--tcp`)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.pending = b""
        while b"\r\n" not in self.pending:
            self.pending += self.recv()
        self.send(b'CONNECT {"verbose":false,"pedantic":false,"headers":false,"echo":true}\r\n')

    def recv(self) -> bytes:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed")
        return chunk

    def data(self, raw: bytes) -> bytes:
        return raw

    def wrap(self, nats: bytes) -> bytes:
        return nats

    def send(self, nats: bytes) -> None:
        self.sock.sendall(self.wrap(nats))

    def ping(self) -> None:
        self.send(b"PING\r\n")
        buf = self.pending
        while b"PONG\r\n" not in buf:
            buf = buf[-8:] + self.data(self.recv())
        self.pending = b""


class WSClient(TCPClient):
    """A raw WebSocket NATS client: upgrade, INFO, CONNECT; frames decoded with pynatsd's sans-IO Decoder."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += self.recv()
        head, _, rest = buf.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        self.decoder = Decoder(masked=False)
        self.pending = self.data(rest)
        while b"\r\n" not in self.pending:
            self.pending += self.data(self.recv())
        self.send(b'CONNECT {"verbose":false,"pedantic":false,"headers":false,"echo":true}\r\n')

    def data(self, raw: bytes) -> bytes:
        return b"".join(e for e in self.decoder.feed(raw) if not isinstance(e, Control))

    def wrap(self, nats: bytes) -> bytes:
        return client_frame(nats)


def subscriber(client: type[TCPClient], port: int, count: int, ready: Any, results: Any) -> None:
    c = client(port)
    c.send(b"SUB bench 1\r\n")
    c.ping()
    ready.put(1)
    seen, tail = 0, b""
    start = 0.0
    while seen < count:
        data = c.data(c.recv())
        if not start:
            start = time.perf_counter()
        both = tail + data
        seen += both.count(b"MSG ")
        tail = both[-3:] if not both.endswith(b"MSG ") else b""
    results.put(time.perf_counter())


def publisher(
    client: type[TCPClient], port: int, count: int, size: int, ready: Any, go: Any, results: Any
) -> None:
    c = client(port)
    c.ping()
    pub = b"PUB bench %d\r\n" % size + b"x" * size + b"\r\n"
    per_batch = max(1, BATCH_BYTES // len(pub))
    batch = c.wrap(pub * per_batch)
    ready.put(1)
    go.wait()
    t0 = time.perf_counter()
    sent = 0
    while sent + per_batch <= count:
        c.sock.sendall(batch)
        sent += per_batch
    if sent < count:
        c.send(pub * (count - sent))
    c.ping()
    results.put(t0)


def one_run(port: int, size: int, count: int, client: type[TCPClient] = WSClient) -> float:
    ctx = mp.get_context("fork")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    sub = ctx.Process(target=subscriber, args=(client, port, count, ready, results))
    sub.start()
    ready.get(timeout=30)
    pub_results = ctx.Queue()
    pub = ctx.Process(target=publisher, args=(client, port, count, size, ready, go, pub_results))
    pub.start()
    ready.get(timeout=30)
    go.set()
    t0 = pub_results.get(timeout=300)
    t1 = results.get(timeout=300)
    pub.join(30)
    sub.join(30)
    return count / (t1 - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", default="16,1024")
    ap.add_argument("--count", type=int, default=3_000_000, help="msgs per run up to 256 B (a fifth above)")
    ap.add_argument("--tcp", action="store_true", help="also the same rows over plain TCP, as a baseline")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-ws-"))
    servers = {kind: start_ws_server(kind, tmp) for kind in ("pynatsd", "nats-server")}
    rows: list[dict[str, Any]] = []
    transports: list[tuple[str, type[TCPClient]]] = [("ws", WSClient)] + (
        [("tcp", TCPClient)] if args.tcp else []
    )
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            count = args.count if size <= 256 else args.count // 5
            for name, client in transports:
                rates: dict[str, list[float]] = {k: [] for k in servers}
                for _ in range(args.reps):
                    for kind, (proc, ws_port) in servers.items():
                        port = ws_port if client is WSClient else proc.port
                        rates[kind].append(one_run(port, size, count, client))
                med = {k: statistics.median(v) for k, v in rates.items()}
                row = {
                    "scenario": f"{name} 1-1",
                    "size": size,
                    "count": count,
                    "pynatsd": med["pynatsd"],
                    "nats-server": med["nats-server"],
                    "ratio": med["pynatsd"] / med["nats-server"],
                    "runs": rates,
                }
                rows.append(row)
                print(
                    f"{name:>3} 1->1 {size:>5} B: pynatsd {med['pynatsd']:>10,.0f} msgs/s   nats-server "
                    f"{med['nats-server']:>10,.0f} msgs/s   ratio {row['ratio']:.2f}",
                    flush=True,
                )
    finally:
        for proc, _ in servers.values():
            proc.stop()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "reps": args.reps,
        "rows": rows,
    }
    (out / "websocket.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
