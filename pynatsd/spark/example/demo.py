"""`make pipeline-demo`: a local pynatsd, the trade simulator, the Spark VWAP job and the printing subscriber.

python -m pynatsd.spark.example.demo [--seconds 40] [--port 4333] [--url nats://... to use a running server]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nats

from pynatsd.spark.example import job
from pynatsd.spark.natsio import wait_for_subscriber
from pynatsd.spark.spark import REPO_ROOT, local_session


def _wait_for_port(port: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"no server on 127.0.0.1:{port}")


async def _wait_for_job(url: str) -> None:
    nc = await nats.connect(url)
    try:
        await wait_for_subscriber(nc, "trades.probe", 120)  # the job ignores the probe's empty payload
    finally:
        await nc.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=40, help="how long the simulator publishes")
    parser.add_argument("--rate", type=int, default=200, help="trades per second")
    parser.add_argument("--port", type=int, default=4333, help="port for the local pynatsd")
    parser.add_argument("--url", help="use this running server instead of starting pynatsd")
    parser.add_argument("--out", help="Parquet output directory (default: a temporary one)")
    args = parser.parse_args()

    procs: list[subprocess.Popen[bytes]] = []
    work = Path(tempfile.mkdtemp(prefix="pynatsd-demo-"))
    parquet = args.out or str(work / "vwap.parquet")
    url = args.url
    if url is None:
        url = f"nats://127.0.0.1:{args.port}"
        broker = [sys.executable, "-m", "pynatsd", "-a", "127.0.0.1", "-p", str(args.port)]
        procs.append(subprocess.Popen(broker, cwd=REPO_ROOT))
        _wait_for_port(args.port)
        print(f"demo: pynatsd listening at {url}", flush=True)
    try:
        spark = local_session("pynatsd-vwap-demo")
        query = job.start(spark, url, parquet, str(work / "checkpoint"), trigger_seconds=1)
        asyncio.run(_wait_for_job(url))
        python = [sys.executable, "-m"]
        procs.append(
            subprocess.Popen([*python, "pynatsd.spark.example.subscriber", "--url", url], cwd=REPO_ROOT)
        )
        time.sleep(1)
        print(f"demo: publishing trades for {args.seconds:.0f}s; 10-second windows close 2s after they end")
        sim = [*python, "pynatsd.spark.example.trades", "--url", url, "--seconds", str(args.seconds)]
        subprocess.run([*sim, "--rate", str(args.rate)], cwd=REPO_ROOT, check=True)
        # Windows close when newer trades move the watermark past them, so the last one stays open.
        time.sleep(3)
        query.processAllAvailable()
        query.stop()
        if Path(parquet).exists():
            print(f"demo: {spark.read.parquet(parquet).count()} VWAP rows in {parquet}")
        spark.stop()
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(10)
        if args.out is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
