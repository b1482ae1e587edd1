"""JetStream pipeline benchmark: msgs/s from a stream into Spark (executors fetch sequence ranges) and from
Spark into a stream with publish acks, with 1 and 2 partitions, 100-byte payloads.

    python bench/pipeline/js.py [--messages 300000] [--large 2000000] [--large-out 1500000] [--reps 3]
                                [--no-out | --no-in] [--servers pynatsd,nats-server]
                                [--out bench/results/pipeline-js.json]

In: `spark.read.format("pynatsd").option("stream", …)` into the noop sink (every row materialised); the rate
is N over the job's wall time, for N = --messages and N = --large (0: skip), so the fixed cost of a Spark job
(scheduling, the planning and reading Python workers, Arrow set-up) shows apart from the cost per message.
That fixed cost is measured too: the same job over a 2-message range ("fixed_s", wall seconds; "net" rates are
N over the wall time less it). Beside every rate, the CPU time each process spent on the job (from /proc, see
proctree.py): µs per message of the broker, the JVM, Spark's Python workers (the readers; the planning worker
and the daemon included) and the driver, and for the tiny job ms per job. Wall rates move with the load of
the machine (printed as "load"); CPU per message much less.

Out: a cached DataFrame of N rows written with `option("stream", …)`; the rate is N over the write's wall
time, which ends once every publish is acknowledged. The same fixed cost per job weighs on the out rate at
300k rows, so the out rows are also measured with --large-out rows (`out_large_*`; 0 skips them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.pipeline.proctree import cpu_delta, snapshot  # noqa: E402
from pynatsd.spark.jetstream import StreamAdmin, StreamReadOptions  # noqa: E402
from pynatsd.spark.spark import local_session  # noqa: E402
from tests.pipeline.natsclient import SyncNats  # noqa: E402
from tests.servers import ServerProcess, start_server  # noqa: E402

SIZE = 100


def stream_count(url: str, stream: str) -> int:
    admin = StreamAdmin(StreamReadOptions.parse({"url": url, "stream": stream}))
    try:
        first, last = admin.bounds()
        return last - first + 1
    finally:
        admin.close()


def fill(client: SyncNats, stream: str, n: int) -> None:
    """A stream of n messages, published with acks in windows (a raw publisher outruns the store)."""

    async def pub() -> None:
        js = client.nc.jetstream()
        await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], allow_direct=True)
        payload = b"x" * SIZE
        for lo in range(0, n, 10_000):
            acks = [
                await js.publish_async(f"{stream.lower()}.x", payload) for _ in range(min(10_000, n - lo))
            ]
            for ack in acks:
                await ack

    client.io.run(pub(), 300)


def bench_in(
    spark: Any, server: ServerProcess, stream: str, n: int, parts: int, end: int = 0
) -> dict[str, float]:
    """One read job: wall seconds, rows/s and the CPU seconds of each process (see proctree.py)."""
    df = spark.read.format("pynatsd").option("url", server.url).option("stream", stream)
    if end:
        df = df.option("endSequence", str(end))
    before = snapshot(server.proc.pid)
    start = time.monotonic()
    df.option("numPartitions", str(parts)).load().write.format("noop").mode("overwrite").save()
    wall = time.monotonic() - start
    cpu = roles(cpu_delta(before, snapshot(server.proc.pid)))
    rows = end or n
    return {
        "wall": wall,
        "rate": rows / wall,
        "load": os.getloadavg()[0],
        **{f"cpu_{k}": v for k, v in cpu.items()},
    }


def roles(cpu: dict[str, float]) -> dict[str, float]:
    """Per process kind: the broker, the JVM, the Python workers (with their daemon), the driver."""
    out = {"broker": 0.0, "jvm": 0.0, "workers": 0.0, "driver": 0.0}
    for role, seconds in cpu.items():
        kind = "workers" if role.startswith(("worker", "daemon")) else role
        if kind in out:
            out[kind] += seconds
    return out


def summarize_in(runs: list[dict[str, float]], n: int, fixed: float) -> dict[str, float]:
    """Medians of a read row's runs: rate, rate net of the fixed job cost, CPU µs per message per process."""
    out = summarize_out(runs, n)
    out["net_rate"] = n / max(statistics.median(r["wall"] for r in runs) - fixed, 1e-9)
    return out


def summarize_out(runs: list[dict[str, float]], n: int) -> dict[str, float]:
    """Medians of a row's runs: rate, load and CPU µs per message of each process."""
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    out = {"rate": med["rate"], "load": med["load"]}
    out.update({f"us_per_msg_{k[4:]}": v * 1e6 / n for k, v in med.items() if k.startswith("cpu_")})
    return out


def summarize_fixed(runs: list[dict[str, float]]) -> dict[str, float]:
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    out = {"fixed_s": med["wall"], "load": med["load"]}
    out.update({f"ms_per_job_{k[4:]}": v * 1e3 for k, v in med.items() if k.startswith("cpu_")})
    return out


def bench_out(df: Any, server: ServerProcess, client: SyncNats, stream: str, n: int) -> dict[str, float]:
    """One write job into a new stream: rows/s and the CPU seconds of each process (see proctree.py)."""

    async def add() -> None:
        await client.nc.jetstream().add_stream(name=stream, subjects=[stream.lower()])

    url = server.url
    client.io.run(add(), 10)
    before = snapshot(server.proc.pid)
    start = time.monotonic()
    df.selectExpr(f"'{stream.lower()}' AS subject", "payload").write.format("pynatsd").option(
        "url", url
    ).option("stream", stream).mode("append").save()
    wall = time.monotonic() - start
    cpu = roles(cpu_delta(before, snapshot(server.proc.pid)))
    if stream_count(url, stream) != n:
        raise RuntimeError(f"stream {stream} holds {stream_count(url, stream)} of {n}")

    async def delete() -> None:  # its messages and their ids in the duplicate window cost the server memory
        await client.nc.jetstream().delete_stream(stream)

    client.io.run(delete(), 60)
    return {"rate": n / wall, "load": os.getloadavg()[0], **{f"cpu_{k}": v for k, v in cpu.items()}}


def cached_frames(spark: Any, n: int) -> dict[int, Any]:
    """N rows of SIZE bytes, cached in 1 and 2 partitions."""
    frames = {
        p: spark.range(n).selectExpr(f"cast(repeat('x', {SIZE}) AS binary) AS payload").repartition(p).cache()
        for p in (1, 2)
    }
    for df in frames.values():
        df.count()
    return frames


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--large", type=int, default=2_000_000, help="the larger read row (0: none)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--servers", default="pynatsd,nats-server")
    parser.add_argument("--large-out", type=int, default=1_500_000, help="the larger out row (0: none)")
    parser.add_argument("--no-out", action="store_true", help="only the read rows")
    parser.add_argument("--no-in", action="store_true", help="only the write rows")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "pipeline-js.json"))
    args = parser.parse_args()
    n = args.messages
    spark = local_session("pynatsd-bench-js")
    frames = {} if args.no_out else cached_frames(spark, n)
    large_out = 0 if args.no_out else args.large_out
    summary: dict[str, Any] = {
        "messages": n,
        "large": args.large,
        "large_out_messages": large_out,
        "payload_bytes": SIZE,
        "reps": args.reps,
    }
    sizes = {} if args.no_in else {"BIN": n, **({"BIG": args.large} if args.large else {})}
    try:
        for kind in args.servers.split(","):
            server = start_server(kind, ["-js", "-sd", tempfile.mkdtemp(prefix="bench-js-")])
            client = SyncNats(server.url)
            try:
                for stream, count in sizes.items():
                    fill(client, stream, count)
                # Warm-ups: Python workers, connections, the JIT (the first write ran at a third of the rate).
                if sizes:
                    bench_in(spark, server, "BIN", n, 2)
                if frames:
                    bench_out(frames[2], server, client, "WARMOUT", n)
                runs: dict[str, list[dict[str, float]]] = {}
                outs: dict[str, list[dict[str, float]]] = {}
                for rep in range(args.reps):
                    for parts in (1, 2):
                        if sizes:
                            runs.setdefault(f"fixed_{parts}", []).append(
                                bench_in(spark, server, "BIN", 2, parts, 2)
                            )
                        for stream, count in sizes.items():
                            runs.setdefault(f"in_{count}_{parts}", []).append(
                                bench_in(spark, server, stream, count, parts)
                            )
                        if frames:
                            name = f"BOUT{rep}P{parts}"
                            outs.setdefault(f"out_{parts}", []).append(
                                bench_out(frames[parts], server, client, name, n)
                            )
                    print(
                        kind,
                        rep,
                        {k: f"{v[-1]['rate']:,.0f}" for k, v in runs.items() if k.startswith("in_")},
                        {k: f"{v[-1]['rate']:,.0f}" for k, v in outs.items()},
                        f"load {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
                if large_out:
                    # Cached only for these runs: held through the others, they slowed them (JVM heap).
                    large = cached_frames(spark, large_out)
                    for rep in range(args.reps):
                        for parts in (1, 2):
                            outs.setdefault(f"out_large_{parts}", []).append(
                                bench_out(large[parts], server, client, f"L{rep}P{parts}", large_out)
                            )
                        print(
                            kind,
                            "large",
                            rep,
                            {k: f"{v[-1]['rate']:,.0f}" for k, v in outs.items()},
                            flush=True,
                        )
                    for df in large.values():
                        df.unpersist()
                result: dict[str, Any] = {}
                for parts in (1, 2) if sizes else ():
                    fixed = summarize_fixed(runs[f"fixed_{parts}"])
                    result[f"fixed_{parts}"] = fixed
                    for count in sizes.values():
                        result[f"in_{count}_{parts}"] = summarize_in(
                            runs[f"in_{count}_{parts}"], count, fixed["fixed_s"]
                        )
                    if args.large:  # CPU per message of the larger read beyond the smaller one
                        small, big = result[f"in_{n}_{parts}"], result[f"in_{args.large}_{parts}"]
                        result[f"marginal_us_per_msg_{parts}"] = {
                            k[11:]: (big[k] * args.large - small[k] * n) / (args.large - n)
                            for k in big
                            if k.startswith("us_per_msg_")
                        }
                for key, out_runs in outs.items():
                    result[key] = summarize_out(out_runs, large_out if key.startswith("out_large") else n)
                summary[kind] = result
            finally:
                client.close()
                server.stop()
    finally:
        spark.stop()
    text = json.dumps(_rounded(summary), indent=2)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")


def _rounded(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return round(value, 3 if abs(value) < 100 else None) if isinstance(value, float) else value


if __name__ == "__main__":
    main()
