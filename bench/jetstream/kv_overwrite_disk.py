"""Disk use of a KV bucket under heavy overwrite (history 1), beside nats-server's.

`--keys` hot keys are overwritten round after round (`--rounds`), values of `--size` bytes; with
`--cold-every N` every Nth write goes to a new key written once, which pins the segment it lands in (its
neighbours' old values can then only go by compaction). Puts are pipelined (`--window` in flight). The
figures: bytes written, the live bytes the stream reports, the store directory's size on disk at the end,
and the puts per second.

    python bench/jetstream/kv_overwrite_disk.py [--keys 100] [--rounds 10000] [--size 100]
                                                [--cold-every 0] [--servers pynatsd,nats-server]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import nats

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.servers import start_server  # noqa: E402


def disk_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


async def run(kind: str, keys: int, rounds: int, size: int, cold_every: int, window: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as store:
        server = start_server(kind, ["-js", "-sd", store])
        try:
            nc = await nats.connect(server.url)
            js = nc.jetstream(timeout=30)
            kv = await js.create_key_value(bucket="OVER", history=1)
            value = b"v" * size
            start = time.perf_counter()
            pending: list[asyncio.Future[object]] = []
            n = 0
            for _ in range(rounds):
                for k in range(keys):
                    n += 1
                    key = f"cold.{n}" if cold_every and n % cold_every == 0 else f"hot.{k}"
                    pending.append(asyncio.ensure_future(kv.put(key, value)))
                    if len(pending) >= window:
                        await asyncio.gather(*pending)
                        pending.clear()
            await asyncio.gather(*pending)
            elapsed = time.perf_counter() - start
            info = await js.stream_info("KV_OVER")
            await nc.close()
            return {
                "puts/s": n / elapsed,
                "written MB": n * size / 1e6,
                "live MB": info.state.bytes / 1e6,
                "disk MB": disk_bytes(Path(store)) / 1e6,
            }
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--cold-every", type=int, default=0)
    parser.add_argument("--window", type=int, default=500)
    parser.add_argument("--servers", default="pynatsd,nats-server")
    args = parser.parse_args()
    for kind in args.servers.split(","):
        got = asyncio.run(run(kind, args.keys, args.rounds, args.size, args.cold_every, args.window))
        print(f"{kind}: " + ", ".join(f"{k} {v:,.1f}" for k, v in got.items()), flush=True)


if __name__ == "__main__":
    main()
