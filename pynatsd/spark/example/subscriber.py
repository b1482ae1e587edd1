"""Print the VWAP results the pipeline publishes on `vwap.>` (skipping replayed duplicates by Nats-Msg-Id)."""

from __future__ import annotations

import argparse
import asyncio
import json

import nats
from nats.aio.msg import Msg


async def run(url: str, seconds: float) -> int:
    nc = await nats.connect(url)
    seen: set[str] = set()

    async def show(msg: Msg) -> None:
        msg_id = (msg.headers or {}).get("Nats-Msg-Id", "")
        if msg_id and msg_id in seen:
            return
        seen.add(msg_id)
        r = json.loads(msg.data)
        print(
            f"{r['window_start']} .. {r['window_end'][11:]}  {r['symbol']:<5} "
            f"VWAP {r['vwap']:>10.4f}  volume {r['volume']:>7}  trades {r['trades']:>4}",
            flush=True,
        )

    await nc.subscribe("vwap.>", cb=show)
    await nc.flush()
    print(f"subscriber: listening on vwap.> at {url}", flush=True)
    try:
        await asyncio.sleep(seconds)
    finally:
        await nc.close()
    return len(seen)


def main() -> None:
    parser = argparse.ArgumentParser(description="Print VWAP windows published by the example pipeline")
    parser.add_argument("--url", default="nats://127.0.0.1:4222")
    parser.add_argument("--seconds", type=float, default=3600)
    args = parser.parse_args()
    asyncio.run(run(args.url, args.seconds))


if __name__ == "__main__":
    main()
