"""Issue 16 item 3, reproduced: do new connections starve while others flood interleaved subjects?

One subscriber on bench.*; four publishers connect one after another (`--stagger` s apart) and each
publishes 400,000 16-byte messages over bench.0 ... bench.999, interleaved. Each publisher's connect
time (connect -> PONG) or failure is reported (nats.go's default connect timeout: 2 s), with the latency
probes (a new client's connect -> PONG, an idle client's PING -> PONG, every 50 ms) on each server.

python bench/broker/starvation.py [--runs 1] [--generator go|raw] [--stagger 0.1] [--count 400000]

Writes bench/results/starvation.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.broker import gogen, scenarios  # noqa: E402
from bench.broker.report import probe_cell  # noqa: E402
from bench.broker.run import SERVERS, SUBJECTS, generator_name, generators, nats_server_version  # noqa: E402
from tests.servers import start_server  # noqa: E402

PUBLISHERS = 4


def once(port: int, generator: str, count: int, stagger: float) -> dict[str, Any]:
    """One run: 4 joining publishers of `count` messages each, 1 subscriber, probes alongside."""
    n = PUBLISHERS * count
    with scenarios.probing(port) as probes:
        if generator == "go":
            flags = dict(pubs=PUBLISHERS, subs=1, count=n, size=16, subjects=SUBJECTS, stagger=f"{stagger}s")
            out = gogen.run(port, "pubsub", **flags)
        else:
            subjects = scenarios.interleaved(SUBJECTS)
            out = scenarios.pubsub(port, PUBLISHERS, 1, 16, n, False, 0, subjects, "bench.*", stagger)
    out["latency"] = scenarios.latency([probes])
    return out


def describe(kind: str, run: dict[str, Any]) -> str:
    pubs = ", ".join(
        f"#{i + 1} {p['connect_ms']:.1f} ms" + (f" FAILED ({p['error']})" if p.get("error") else "")
        for i, p in enumerate(run.get("publishers", []))
    )
    lat = run["latency"]
    probes = "; ".join(
        f"{name} p50/p99/max (samples) {probe_cell(v)} ms, {v['fail']} of {v['n'] + v['fail']} failed"
        for name, v in lat.items()
    )
    return (
        f"{kind:<12} connect failures {run['connect_failures']}/{PUBLISHERS}; publishers: {pubs}\n"
        f"{'':<12} delivered {run['delivered']:,}/{run['expected']:,} at {run['rate'] / 1e6:.3f}M/s\n"
        f"{'':<12} probes: {probes}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1, help="runs per server, alternating")
    ap.add_argument("--generator", choices=("go", "raw"), default="go")
    ap.add_argument("--stagger", type=float, default=0.1, help="seconds between publishers' connects")
    ap.add_argument("--count", type=int, default=400_000, help="messages per publisher")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    if args.generator not in generators([args.generator]):
        return 0
    results: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "nats_server": nats_server_version(),
        "generator": generator_name(args.generator),
        "publishers": PUBLISHERS,
        "count": args.count,
        "stagger_s": args.stagger,
        "subjects": SUBJECTS,
        "runs": {kind: [] for kind in SERVERS},
    }
    servers = {kind: start_server(kind) for kind in SERVERS}
    try:
        for _ in range(args.runs):
            for kind in SERVERS:  # A B A B
                run = once(servers[kind].port, args.generator, args.count, args.stagger)
                results["runs"][kind].append(run)
                print(describe(kind, run), flush=True)
    finally:
        for server in servers.values():
            server.stop()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "starvation.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out / 'starvation.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
