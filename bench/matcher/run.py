"""`make bench-matcher`: run the matcher scenarios, print a table, write JSON and a PNG chart.

python bench/matcher/run.py [--runs 5] [--sizes 10000,100000,1000000] [--smoke] [--e2e]
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.matcher import scenarios  # noqa: E402
from bench.matcher.report import render_chart, render_table  # noqa: E402
from bench.output import write_results  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=7, help="repetitions per figure (the median is reported)")
    ap.add_argument("--sizes", default="10000,100000,1000000", help="scale scenario sizes")
    ap.add_argument("--smoke", action="store_true", help="seconds-long harness check")
    ap.add_argument("--e2e", action="store_true", help="also measure broker RSS growth vs nats-server")
    ap.add_argument("--e2e-subs", type=int, default=1_000_000)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)

    runs = 1 if args.smoke else args.runs
    sizes = [1000] if args.smoke else [int(x) for x in args.sizes.split(",")]
    results: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": f"{platform.machine()} {_cpus()} cpu",
        "runs": runs,
        "smoke": args.smoke,
    }
    results["seed_subs"] = 200 if args.smoke else 1000
    results["seed"] = scenarios.seed_table(runs, n=results["seed_subs"])
    results["scale"] = scenarios.scale(sizes, runs, rss=not args.smoke)
    results["literal_memory"] = scenarios.literal_memory(1000 if args.smoke else 1_000_000)
    deep, batch = (100, 100) if args.smoke else (10_000, 1000)
    results["churn"] = scenarios.churn(runs, deep=deep, batch=batch)
    results["fanout"] = scenarios.fanout(runs, n=100 if args.smoke else 10_000)
    results["high_cardinality"] = scenarios.high_cardinality(runs, distinct=5000 if args.smoke else 100_000)
    if args.e2e:
        from bench.matcher import e2e

        results["e2e_rss"] = e2e.compare(args.e2e_subs, runs=1 if args.smoke else 3)

    print(render_table(results))
    write_results(results, args.out, "matcher-smoke" if args.smoke else "matcher", render_chart)
    return 0


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


if __name__ == "__main__":
    raise SystemExit(main())
