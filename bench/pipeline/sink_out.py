"""The Spark sink's JetStream write without Spark: `publish_batches` (what each write task runs) publishes N
rows of 100 B from Arrow batches into a file stream, with its Nats-Msg-Id and 20k acks in flight; the rate is
N over the time until every ack is in. Also prints the CPU per message of the server (/proc/<pid>/stat) and of
the writer (this process).

    python bench/pipeline/sink_out.py [--messages 200000] [--reps 3] [--servers pynatsd,nats-server]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.jetstream.publish_cpu import connect, cpu_seconds, request  # noqa: E402
from pynatsd.spark.options import WriteOptions  # noqa: E402
from pynatsd.spark.writer import publish_batches  # noqa: E402
from tests.servers import start_server  # noqa: E402

SIZE = 100
BATCH = 10_000


def run_once(pid: int, port: int, n: int, stream: str) -> tuple[float, float, float]:
    s = connect(port)
    body = b'{"name":"%s","subjects":["%s"]}' % (stream.encode(), stream.lower().encode())
    request(s, b"$JS.API.STREAM.CREATE." + stream.encode(), body)
    batch = pa.RecordBatch.from_pydict(
        {"subject": [stream.lower()] * BATCH, "payload": [b"x" * SIZE] * BATCH}
    )
    options = WriteOptions.parse({"url": f"nats://127.0.0.1:{port}", "stream": stream})
    cpu0, own0, t0 = cpu_seconds(pid), time.process_time(), time.monotonic()
    count = asyncio.run(publish_batches(options, iter([batch] * (n // BATCH)), f"{uuid.uuid4().hex}/0"))
    wall, cpu, own = time.monotonic() - t0, cpu_seconds(pid) - cpu0, time.process_time() - own0
    request(s, b"$JS.API.STREAM.DELETE." + stream.encode(), b"")
    s.close()
    if count != n // BATCH * BATCH:
        raise RuntimeError(f"{count} of {n} published")
    return count / wall, cpu / count * 1e6, own / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--servers", default="pynatsd")
    args = parser.parse_args()
    for kind in args.servers.split(","):
        with tempfile.TemporaryDirectory() as store:
            server = start_server(kind, ["-js", "-sd", store])
            try:
                runs = [
                    run_once(server.proc.pid, server.port, args.messages, f"S{i}") for i in range(args.reps)
                ]
            finally:
                server.stop()
            rates = ", ".join(f"{r:,.0f}" for r, _, _ in runs)
            print(
                f"{kind}: {statistics.median(r for r, _, _ in runs):,.0f} acked msgs/s (runs {rates}), "
                f"server {statistics.median(u for _, u, _ in runs):.2f} µs/msg, "
                f"writer {statistics.median(w for _, _, w in runs):.2f} µs/msg"
            )


if __name__ == "__main__":
    main()
