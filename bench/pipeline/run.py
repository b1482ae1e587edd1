"""Pipeline benchmark: messages per second broker -> Spark (streaming read, Arrow) and Spark -> broker (Arrow
write), 2 partitions, 100-byte payloads, against pynatsd and nats-server alternately in one run.

    python bench/pipeline/run.py [--messages 300000] [--reps 3] [--out bench/results/pipeline.json]

In: a raw-protocol publisher sends N messages; the rate is N over the time from the first publish to the
micro-batch that completes the N-th message (noop sink, so every row is materialised by Spark).
Out: a cached 2-partition DataFrame is written with the pynatsd writer; the rate is N over the time from the
write's start to the last message reaching a raw subscriber (delivery, not just publishing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pynatsd.spark.spark import local_session  # noqa: E402
from tests.servers import ServerProcess, start_server  # noqa: E402

RAW = [sys.executable, str(Path(__file__).with_name("rawnats.py"))]
SIZE = 100


def _end_seq(query: object) -> int:
    progress = query.lastProgress  # type: ignore[attr-defined]
    if not progress:
        return 0
    end = progress["sources"][0]["endOffset"]
    return int((json.loads(end) if isinstance(end, str) else end)["seq"])


def bench_in(spark: object, server: ServerProcess, n: int, tag: str) -> dict[str, float]:
    stream = (
        spark.readStream.format("pynatsd")  # type: ignore[attr-defined]
        .option("url", server.url)
        .option("subjects", f"bin.{tag}")
        .option("numPartitions", "2")
        .option("bufferSize", str(2 * n))
        .load()
    )
    query = stream.writeStream.format("noop").start()
    try:
        query.processAllAvailable()  # subscribed
        start = time.monotonic()
        subprocess.run([*RAW, "pub", str(server.port), f"bin.{tag}", str(n), str(SIZE)], check=True)
        published = time.monotonic()
        deadline = start + 120
        while _end_seq(query) < n and time.monotonic() < deadline:
            time.sleep(0.02)
        done = time.monotonic()
        latest = query.lastProgress["sources"][0]["latestOffset"]
        latest = json.loads(latest) if isinstance(latest, str) else latest
        if _end_seq(query) < n:
            raise RuntimeError(f"only {_end_seq(query)} of {n} messages reached Spark: {latest}")
        return {
            "rate": n / (done - start),
            "publish_rate": n / (published - start),
            "dropped": latest["dropped"],
        }
    finally:
        query.stop()


def bench_out(df: object, server: ServerProcess, n: int) -> dict[str, float]:
    sub = subprocess.Popen(
        [*RAW, "sub", str(server.port), "bout", str(n), str(SIZE)], stdout=subprocess.PIPE, text=True
    )
    assert sub.stdout is not None
    assert sub.stdout.readline().strip() == "ready"
    start = time.monotonic()
    df.write.format("pynatsd").option("url", server.url).mode("append").save()  # type: ignore[attr-defined]
    written = time.monotonic()
    last, count = sub.stdout.readline().split()
    sub.wait(10)
    if last == "timeout":
        raise RuntimeError(f"subscriber got {count} of {n} messages")
    return {"rate": n / (float(last) - start), "write_rate": n / (written - start)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "pipeline.json"))
    args = parser.parse_args()
    n = args.messages

    servers = {kind: start_server(kind) for kind in ("nats-server", "pynatsd")}
    spark = local_session("pynatsd-bench")
    df = (
        spark.range(n)
        .selectExpr("'bout' AS subject", f"cast(repeat('x', {SIZE}) AS binary) AS payload")
        .repartition(2)
        .cache()
    )
    df.count()
    results: dict[str, dict[str, list[dict[str, float]]]] = {k: {"in": [], "out": []} for k in servers}
    try:
        for kind, server in servers.items():  # warm-up: Python workers, JIT, connections
            bench_in(spark, server, n // 10, f"warm{kind[0]}")
            bench_out(df.limit(n // 10), server, n // 10)
        for rep in range(args.reps):
            for kind, server in servers.items():
                results[kind]["in"].append(bench_in(spark, server, n, f"r{rep}"))
                results[kind]["out"].append(bench_out(df, server, n))
                print(
                    f"rep {rep} {kind:<11} in {results[kind]['in'][-1]['rate']:>9,.0f}/s  "
                    f"out {results[kind]['out'][-1]['rate']:>9,.0f}/s",
                    flush=True,
                )
    finally:
        spark.stop()
        for server in servers.values():
            server.stop()

    summary: dict[str, object] = {"messages": n, "payload_bytes": SIZE, "partitions": 2, "reps": args.reps}
    for kind, runs in results.items():
        for direction in ("in", "out"):
            rates = sorted(r["rate"] for r in runs[direction])
            summary[f"{kind}_{direction}"] = {
                "min": rates[0],
                "median": statistics.median(rates),
                "max": rates[-1],
            }
    for direction in ("in", "out"):
        ratio = summary[f"pynatsd_{direction}"]["median"] / summary[f"nats-server_{direction}"]["median"]  # type: ignore[index]
        summary[f"ratio_{direction}"] = ratio
    print(json.dumps(summary, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    for kind in servers:
        print(
            f"{kind:<11} median in {summary[f'{kind}_in']['median']:>9,.0f} msgs/s (target >= 100,000)  "  # type: ignore[index]
            f"out {summary[f'{kind}_out']['median']:>9,.0f} msgs/s (target >= 200,000)"
        )  # type: ignore[index]


if __name__ == "__main__":
    main()
