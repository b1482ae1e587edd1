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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
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


def matches(pattern: str, subject: str) -> bool:
    """NATS subject matching for the scenarios' patterns (`*` one token, `>` the rest)."""
    p, t = pattern.split("."), subject.split(".")
    for i, tok in enumerate(p):
        if tok == ">":
            return len(t) > i
        if i >= len(t) or tok not in ("*", t[i]):
            return False
    return len(p) == len(t)


def owed(count: int, subjects: Sequence[str], pattern: str) -> int:
    """How many of `count` messages cycling through `subjects` (from the first) match `pattern`."""
    k = len(subjects)
    return sum((count - j + k - 1) // k for j in range(min(k, count)) if matches(pattern, subjects[j]))


def interleaved(k: int, prefix: str = "bench.", suffix: str = "") -> list[str]:
    """`prefix`0 ... `prefix`{k-1}: the realistic rows' subjects (1,000 in `make bench`)."""
    return [f"{prefix}{i}{suffix}" for i in range(k)]


def pubsub(
    port: int,
    pubs: int,
    subs: int,
    size: int,
    n: int,
    queue: bool = False,
    idle: int = 0,
    subjects: Sequence[str] = (SUBJECT,),
    sub_subject: str = SUBJECT,
    stagger: float | None = None,
    sub_port: int | None = None,
    subscribed: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """`pubs` publishers share `n` messages, each cycling through `subjects`; `subs` subscribers on
    `sub_subject` (one queue group when `queue`). With `stagger`, publisher i connects `stagger` * i s
    after the start, while the others already flood (a connect that takes over 2 s fails). Subscribers
    connect to `sub_port` when given (another node of a cluster); `subscribed` runs once they are, before
    any publisher starts (to wait until their interest has reached the publishers' node).

    Returns the delivered rate (msgs/s, all subscribers), the publish rate, delivered and expected
    counts, and each publisher's connect time (ms) and error.
    """
    w = Workers.new()
    try:
        if idle:
            w.spawn(gen.idle_subscriptions, port, idle, -1, w.ready, w.done)
            w.wait_ready(1)
        share = [n // pubs + (1 if i < n % pubs else 0) for i in range(pubs)]
        wanted = sum(owed(k, subjects, sub_subject) for k in share)
        for i in range(subs):
            expected = 0 if queue else wanted
            args = (
                sub_port or port,
                sub_subject,
                "q" if queue else "",
                expected,
                i,
                w.ready,
                w.done,
                w.results,
            )
            w.spawn(gen.subscriber, *args)
        w.wait_ready(subs)
        if subscribed is not None:
            subscribed()
        for i in range(pubs):
            delay = None if stagger is None else stagger * i
            w.spawn(gen.publisher, port, list(subjects), share[i], size, i, w.ready, w.go, w.results, delay)
        w.wait_ready(pubs)
        w.go.set()
        got = w.collect(pubs)
        while sum(r[0] == "pub" for r in got) < pubs:
            got += w.collect(1)
        w.done.set()  # publishers have their PONGs: subscribers with an unknown count may finish
        got += w.collect(pubs + subs - len(got))
        pub_res = [r[2] for r in sorted(got) if r[0] == "pub"]
        sub_res = [r[2] for r in got if r[0] == "sub"]
    finally:
        w.reap()
    ok = [r for r in pub_res if not r[4]]
    sent = sum(r[2] for r in ok)
    if len(ok) < pubs:  # publishers that could not connect sent nothing: the others' messages are owed
        wanted = sum(owed(r[2], subjects, sub_subject) for r in ok)
    if not ok:
        return {
            "rate": 0.0,
            "pub_rate": 0.0,
            "expected": 0,
            "delivered": 0,
            "sent": 0,
            "connect_failures": pubs,
        }
    t0 = min(r[0] for r in ok)
    t_pub = max(r[1] for r in ok)
    out: dict[str, Any] = {
        "pub_rate": sent / (t_pub - t0),
        "expected": 0,
        "delivered": 0,
        "sent": sent,
        "connect_failures": pubs - len(ok),
        "publishers": [{"connect_ms": r[3], "error": r[4], "sent": r[2]} for r in pub_res],
    }
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


def _percentiles(rtts_ns: list[int]) -> dict[str, float]:
    """p50/p90/p99 of round-trip times, in µs."""
    rtts = sorted(rtts_ns)
    return {p: rtts[min(len(rtts) - 1, int(q * len(rtts)))] / 1000 for p, q in PCTS} if rtts else {}


PCTS = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


def reqrep(port: int, size: int, n: int) -> dict[str, Any]:
    """Round trips with one request in flight: p50/p90/p99 in µs, and round trips per second."""
    w = Workers.new()
    try:
        w.spawn(gen.responder, port, "bench.req", "bench.inbox", size, 0, w.ready, w.done)
        w.spawn(gen.requester, port, size, n, 1, w.ready, w.go, w.results)
        w.wait_ready(2)
        w.go.set()
        rtts = w.collect(1)[0][2]
    finally:
        w.reap()
    return {**_percentiles(rtts), "rate": 1e9 * len(rtts) / sum(rtts), "n": len(rtts)}


def reqrep_many(port: int, size: int, n: int, conc: int) -> dict[str, Any]:
    """`conc` concurrent requesters on fresh inboxes share `n` requests to one responder: round trips
    per second (first request -> last reply) and p50/p90/p99 in µs."""
    w = Workers.new()
    try:
        w.spawn(gen.responder, port, "bench.req", gen.INBOX.format(0, 0), size, 0, w.ready, w.done)
        w.spawn(gen.requesters, port, "bench.req", size, n, conc, 1, w.ready, w.go, w.results)
        w.wait_ready(2)
        w.go.set()
        rtts, t0, t1 = w.collect(1)[0][2]
    finally:
        w.reap()
    return {**_percentiles(rtts), "rate": len(rtts) / (t1 - t0), "n": len(rtts), "errors": n - len(rtts)}


def mixed(port: int, n: int, conc: int) -> dict[str, Any]:
    """Everything at once (the same shape as the Go generator's `mixed`): 2 publishers of 16 B over
    bench.0..999 (n/2 each) and 1 of 256 B over orders.0..99.new (n/4); subscribers bench.* plain,
    bench.* as a queue group of 2, orders.> plain; `conc` requesters on fresh inboxes sending n/100
    requests to one responder on svc.echo. Returns the delivered rate, the request rate and latencies."""
    bench, orders = interleaved(1000), interleaved(100, "orders.", ".new")
    pubs = [(bench, n // 2, 16), (bench, n // 2, 16), (orders, n // 4, 256)]
    subs = [
        ("bench.*", "", 2 * (n // 2)),
        ("bench.*", "mq", 0),
        ("bench.*", "mq", 0),
        ("orders.>", "", n // 4),
    ]
    requests = max(n // 100, conc)
    w = Workers.new()
    try:
        for i, (subject, queue, expected) in enumerate(subs):
            w.spawn(gen.subscriber, port, subject, queue, expected, i, w.ready, w.done, w.results)
        w.spawn(gen.responder, port, "svc.echo", gen.INBOX.format(0, 0), 16, -1, w.ready, w.done)
        w.spawn(gen.requesters, port, "svc.echo", 16, requests, conc, -2, w.ready, w.go, w.results)
        for i, (subjects, count, size) in enumerate(pubs):
            w.spawn(gen.publisher, port, subjects, count, size, i, w.ready, w.go, w.results)
        w.wait_ready(len(subs) + 2 + len(pubs))
        w.go.set()
        got: list[tuple[str, int, Any]] = []
        while sum(r[0] != "sub" for r in got) < len(pubs) + 1:  # publishers and requesters first
            got += w.collect(1)
        w.done.set()
        got += w.collect(len(pubs) + 1 + len(subs) - len(got))
    finally:
        w.reap()
    pub_res = [r[2] for r in got if r[0] == "pub"]
    sub_res = [r[2] for r in got if r[0] == "sub"]
    rtts, r0, r1 = next(r[2] for r in got if r[0] == "req")
    t0 = min(r[0] for r in pub_res)
    sent = sum(r[2] for r in pub_res)
    delivered = sum(r[0] for r in sub_res)
    return {
        "rate": delivered / (max(r[1] for r in sub_res) - t0),
        "pub_rate": sent / (max(r[1] for r in pub_res) - t0),
        "sent": sent,
        "delivered": delivered,
        "expected": 4 * (n // 2) + n // 4,  # bench.* plain and queue group, orders.>
        "connect_failures": 0,
        "request_rate": len(rtts) / (r1 - r0),
        "requests": len(rtts),
        **_percentiles(rtts),
    }


@contextmanager
def probing(port: int) -> Iterator[dict[str, Any]]:
    """Samples, while the body runs, a new client's connect -> PONG and an idle client's PING -> PONG
    (gen.probe); the yielded dict holds the samples (ms) and failures once the body is done."""
    w = Workers.new()
    out: dict[str, Any] = {}
    try:
        w.spawn(gen.probe, port, 0, w.ready, w.done, w.results)
        w.wait_ready(1)
        yield out
        w.done.set()
        out.update(w.collect(1)[0][2])
    finally:
        w.reap()


def latency(probes: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Pooled probe samples of a row's runs: p50/p99/max (ms), samples and failures, per kind."""
    out = {}
    for kind in ("connect", "ping"):
        values = sorted(v for p in probes for v in p.get(kind, []))
        fails = sum(p.get(f"{kind}_fail", 0) for p in probes)
        pct = {q: values[min(len(values) - 1, int(f * len(values)))] if values else 0.0 for q, f in PCTS}
        out[kind] = {"p50": pct["p50"], "p99": pct["p99"], "max": max(values, default=0.0)}
        out[kind].update(n=len(values), fail=fails)
    return out


def reset_peak_rss(pid: int) -> None:
    """Start a new VmHWM for `pid` (Linux: `5` to /proc/<pid>/clear_refs), so that the next `rss` gives
    the peak of what runs in between; without permission the peak is the process's lifetime one."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


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
        w.spawn(gen.publisher, port, [SUBJECT], n, size, 0, w.ready, w.go, w.results)
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
                    w.spawn(gen.publisher, port, [SUBJECT], n, size, 0, w.ready, w.go, w.results)
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
            start, end, count, _, _ = result[2]
            out["pub"] = count / (end - start)
        else:
            count, last = result[2]
            out["sub"] = count / (last - t0)
    return out


def summary(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}
