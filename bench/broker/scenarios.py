"""One measured run of each broker scenario against one running server, driven by bench.broker.gen processes.

Every run is bounded by message count and a wall-clock timeout; all worker processes are reaped (or
killed) in `finally`. Rates are end to end: deliveries over (last MSG received - first PUB sent); the
publish-only rate is messages over (first PUB sent - PONG after the last one).
"""

from __future__ import annotations

import multiprocessing as mp
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.broker import gen

CTX = mp.get_context("fork")
SUBJECT = "bench.s"
WAIT = gen.TIMEOUT + 30


@dataclass
class Workers:
    """The processes of one run and their rendezvous objects."""

    ready: Any
    go: Any
    done: Any
    results: Any
    procs: list[Any]

    @classmethod
    def new(cls) -> Workers:
        return cls(CTX.Queue(), CTX.Event(), CTX.Event(), CTX.Queue(), [])

    def spawn(self, target: Callable[..., None], *args: Any) -> None:
        p = CTX.Process(target=target, args=args, daemon=True)
        p.start()
        self.procs.append(p)

    def wait_ready(self, n: int) -> None:
        for _ in range(n):
            self.ready.get(timeout=WAIT)

    def collect(self, n: int) -> list[tuple[str, int, Any]]:
        return [self.results.get(timeout=WAIT) for _ in range(n)]

    def reap(self) -> None:
        self.done.set()
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)


def pubsub(
    port: int,
    pubs: int,
    subs: int,
    size: int,
    n: int,
    queue: bool = False,
    idle: int = 0,
    mixed: bool = False,
    split: bool = False,
) -> dict[str, Any]:
    """`pubs` publishers share `n` messages; `subs` subscribers (one queue group when `queue`).

    `mixed`: publishers alternate two subjects, subscribers take both (`bench.*`); with `split` too,
    subscribers take the first subject only (every other message).

    Returns the delivered rate (msgs/s, all subscribers), the publish rate, delivered and expected counts.
    """
    w = Workers.new()
    try:
        if idle:
            w.spawn(gen.idle_subscriptions, port, idle, -1, w.ready, w.done)
            w.wait_ready(1)
        share = [n // pubs + (1 if i < n % pubs else 0) for i in range(pubs)]
        # A publisher alternating subjects starts with the first: (k + 1) // 2 of its k messages.
        wanted = sum((k + 1) // 2 for k in share) if split else n
        expected = 0 if queue else wanted
        for i in range(subs):
            w.spawn(
                gen.subscriber,
                port,
                "bench.*" if mixed and not split else SUBJECT,
                "q" if queue else "",
                expected,
                i,
                w.ready,
                w.done,
                w.results,
            )
        w.wait_ready(subs)
        for i in range(pubs):
            w.spawn(gen.publisher, port, SUBJECT, share[i], size, i, w.ready, w.go, w.results, mixed)
        w.wait_ready(pubs)
        w.go.set()
        got = w.collect(pubs)
        while sum(r[0] == "pub" for r in got) < pubs:
            got += w.collect(1)
        w.done.set()  # publishers have their PONGs: subscribers with an unknown count may finish
        got += w.collect(pubs + subs - len(got))
        pub_res = [r[2] for r in got if r[0] == "pub"]
        sub_res = [r[2] for r in got if r[0] == "sub"]
    finally:
        w.reap()
    t0 = min(r[0] for r in pub_res)
    t_pub = max(r[1] for r in pub_res)
    out: dict[str, Any] = {"pub_rate": n / (t_pub - t0), "expected": 0, "delivered": 0}
    if subs:
        delivered = sum(r[0] for r in sub_res)
        t_last = max(r[1] for r in sub_res)
        out.update(
            rate=delivered / (t_last - t0) if t_last > t0 else 0.0,
            delivered=delivered,
            expected=wanted if queue else wanted * subs,
        )
    else:
        out["rate"] = out["pub_rate"]
    return out


def reqrep(port: int, size: int, n: int) -> dict[str, Any]:
    """Round trips with one request in flight: p50/p90/p99 in µs, and round trips per second."""
    w = Workers.new()
    try:
        w.spawn(gen.responder, port, size, 0, w.ready, w.done)
        w.spawn(gen.requester, port, size, n, 1, w.ready, w.go, w.results)
        w.wait_ready(2)
        w.go.set()
        rtts = sorted(w.collect(1)[0][2])
    finally:
        w.reap()

    def pct(p: float) -> float:
        return rtts[min(len(rtts) - 1, int(p * len(rtts)))] / 1000

    return {
        "p50": pct(0.5),
        "p90": pct(0.9),
        "p99": pct(0.99),
        "rate": 1e9 * len(rtts) / sum(rtts),
        "n": len(rtts),
    }


def rss(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process, in bytes."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) * 1024
    return fields["VmRSS"], fields["VmHWM"]


def stalled(port: int, pid: int, size: int, n: int, fast: int = 2) -> dict[str, Any]:
    """One subscriber stops reading during an `n`-message burst while `fast` others keep up.

    Reports the server's RSS before and its peak after (sampled every 10 ms, plus VmHWM), what the fast
    subscribers received, and whether the server dropped the stalled one.
    """
    w = Workers.new()
    peak = 0
    try:
        w.spawn(gen.stalled_subscriber, port, SUBJECT, 99, w.ready, w.done, w.results)
        for i in range(fast):
            w.spawn(gen.subscriber, port, SUBJECT, "", n, i, w.ready, w.done, w.results)
        w.wait_ready(fast + 1)
        w.spawn(gen.publisher, port, SUBJECT, n, size, 0, w.ready, w.go, w.results)
        w.wait_ready(1)
        time.sleep(0.2)
        before, hwm_before = rss(pid)
        w.go.set()
        results: list[tuple[str, int, Any]] = []
        while len(results) < fast + 1:
            try:
                results.append(w.results.get(timeout=0.01))
            except Exception:  # queue.Empty: sample memory while the burst runs
                peak = max(peak, rss(pid)[0])
        w.done.set()
        results += w.collect(1)
    finally:
        w.reap()
    after, hwm = rss(pid)
    fast_counts = [r[2][0] for r in results if r[0] == "sub"]
    closed, _ = next(r[2] for r in results if r[0] == "stalled")
    if hwm > hwm_before:  # a new high-water mark was set during the burst
        peak = max(peak, hwm)
    return {
        "rss_before": before,
        "rss_peak": peak,
        "rss_after": after,
        "growth": peak - before,
        "fast_delivered": fast_counts,
        "expected": n,
        "fast_lost": sum(n - c for c in fast_counts),
        "stalled_dropped": closed,
    }


def ceiling(size: int, n: int) -> dict[str, float]:
    """The generator's own limits at `size`: one publisher into a sink, one subscriber fed by a source
    (stand-ins that parse and route nothing), in msgs/s."""
    out = {}
    for role in ("pub", "sub"):
        with socket.create_server(("127.0.0.1", 0)) as listener:
            port = listener.getsockname()[1]
            w = Workers.new()
            try:
                if role == "pub":
                    w.spawn(gen.sink, listener)
                    w.spawn(gen.publisher, port, SUBJECT, n, size, 0, w.ready, w.go, w.results)
                else:
                    w.spawn(gen.source, listener, SUBJECT, n, size, w.go)
                    w.spawn(gen.subscriber, port, SUBJECT, "", n, 0, w.ready, w.done, w.results)
                w.wait_ready(1)
                t0 = time.monotonic()
                w.go.set()
                (result,) = w.collect(1)
            finally:
                w.reap()
        if role == "pub":
            start, end, count = result[2]
            out["pub"] = count / (end - start)
        else:
            count, last = result[2]
            out["sub"] = count / (last - t0)
    return out


def summary(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}
