"""JetStream pipeline benchmark: msgs/s from a stream into Spark (executors fetch sequence ranges) and from
Spark into a stream with publish acks, with 1 and 2 partitions, 100-byte payloads.

    python bench/pipeline/js.py [--messages 300000] [--reps 3] [--servers pynatsd,nats-server]
                                [--large-out 1500000] [--out bench/results/pipeline-js.json]

In: `spark.read.format("pynatsd").option("stream", …)` into the noop sink (every row materialised); the rate
is N over the job's wall time. Out: a cached DataFrame of N rows written with `option("stream", …)`; the rate
is N over the write's wall time, which ends once every publish is acknowledged. A Spark job costs a few
tenths of a second whatever its size (planning, task launch, the commit on the driver): at 300k rows that is
a large share of the out rate, so the out rows are also measured with `--large-out` rows (`out_large_*`,
reported separately; 0 skips them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pynatsd.spark.jetstream import StreamAdmin, StreamReadOptions  # noqa: E402
from pynatsd.spark.spark import local_session  # noqa: E402
from tests.pipeline.natsclient import SyncNats  # noqa: E402
from tests.servers import start_server  # noqa: E402

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


def bench_in(spark: Any, url: str, stream: str, n: int, parts: int) -> float:
    df = spark.read.format("pynatsd").option("url", url).option("stream", stream)
    start = time.monotonic()
    df.option("numPartitions", str(parts)).load().write.format("noop").mode("overwrite").save()
    return n / (time.monotonic() - start)


def bench_out(df: Any, url: str, client: SyncNats, stream: str, n: int) -> float:
    async def add() -> None:
        await client.nc.jetstream().add_stream(name=stream, subjects=[stream.lower()])

    client.io.run(add(), 10)
    start = time.monotonic()
    df.selectExpr(f"'{stream.lower()}' AS subject", "payload").write.format("pynatsd").option(
        "url", url
    ).option("stream", stream).mode("append").save()
    rate = n / (time.monotonic() - start)
    if stream_count(url, stream) != n:
        raise RuntimeError(f"stream {stream} holds {stream_count(url, stream)} of {n}")

    async def delete() -> None:  # its messages and their ids in the duplicate window cost the server memory
        await client.nc.jetstream().delete_stream(stream)

    client.io.run(delete(), 60)
    return rate


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
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--servers", default="pynatsd,nats-server")
    parser.add_argument("--large-out", type=int, default=1_500_000)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "pipeline-js.json"))
    args = parser.parse_args()
    n = args.messages
    spark = local_session("pynatsd-bench-js")
    frames = cached_frames(spark, n)
    summary: dict[str, Any] = {
        "messages": n,
        "large_out_messages": args.large_out,
        "payload_bytes": SIZE,
        "reps": args.reps,
    }
    try:
        for kind in args.servers.split(","):
            server = start_server(kind, ["-js", "-sd", tempfile.mkdtemp(prefix="bench-js-")])
            client = SyncNats(server.url)
            try:
                fill(client, "BIN", n)
                bench_in(spark, server.url, "BIN", n, 2)  # warm-up: Python workers, connections
                runs: dict[str, list[float]] = {}
                for rep in range(args.reps):
                    for parts in (1, 2):
                        runs.setdefault(f"in_{parts}", []).append(
                            bench_in(spark, server.url, "BIN", n, parts)
                        )
                        name = f"BOUT{rep}P{parts}"
                        runs.setdefault(f"out_{parts}", []).append(
                            bench_out(frames[parts], server.url, client, name, n)
                        )
                    print(kind, rep, {k: f"{v[-1]:,.0f}" for k, v in runs.items()}, flush=True)
                if args.large_out:
                    # Cached only for these runs: held through the others, they slowed them (JVM heap).
                    large = cached_frames(spark, args.large_out)
                    for rep in range(args.reps):
                        for parts in (1, 2):
                            runs.setdefault(f"out_large_{parts}", []).append(
                                bench_out(large[parts], server.url, client, f"L{rep}P{parts}", args.large_out)
                            )
                        print(kind, "large", rep, {k: f"{v[-1]:,.0f}" for k, v in runs.items()}, flush=True)
                    for df in large.values():
                        df.unpersist()
                summary[kind] = {k: statistics.median(v) for k, v in runs.items()}
            finally:
                client.close()
                server.stop()
    finally:
        spark.stop()
    print(json.dumps(summary, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
