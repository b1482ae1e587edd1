"""Simulated trades: a seeded random walk per symbol, published as JSON to `trades.<symbol>`."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass

SYMBOLS = ("AAPL", "MSFT", "GOOG", "AMZN")


@dataclass(frozen=True)
class Trade:
    symbol: str
    price: float
    qty: int
    ts: int  # event time, milliseconds since the epoch (UTC)

    @property
    def subject(self) -> str:
        return f"trades.{self.symbol}"

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()


def simulate(
    count: int, start_ms: int, step_ms: int, seed: int = 7, symbols: tuple[str, ...] = SYMBOLS
) -> Iterator[Trade]:
    """`count` trades, one every `step_ms` of event time from `start_ms`, round-robin over `symbols`."""
    rng = random.Random(seed)
    prices = {s: 100.0 + 50 * i for i, s in enumerate(symbols)}
    for i in range(count):
        symbol = symbols[i % len(symbols)]
        prices[symbol] = round(max(1.0, prices[symbol] * (1 + rng.gauss(0, 0.002))), 2)
        yield Trade(symbol, prices[symbol], rng.randint(1, 50) * 10, start_ms + i * step_ms)


def expected_vwap(trades: list[Trade], window_ms: int = 10_000) -> dict[tuple[str, int], tuple[float, int]]:
    """The reference result: (symbol, window start ms) -> (VWAP, volume), computed without Spark."""
    sums: dict[tuple[str, int], tuple[float, int]] = {}
    for t in trades:
        key = (t.symbol, t.ts - t.ts % window_ms)
        notional, volume = sums.get(key, (0.0, 0))
        sums[key] = (notional + t.price * t.qty, volume + t.qty)
    return {k: (notional / volume, volume) for k, (notional, volume) in sums.items()}


async def publish_live(url: str, seconds: float, rate: int, seed: int = 7) -> int:
    """Publish trades stamped with the wall clock, `rate` per second for `seconds`; returns the count."""
    import asyncio
    import time

    import nats

    nc = await nats.connect(url)
    step_ms = max(1, 1000 // rate)
    start_ms = time.time_ns() // 1_000_000
    sent = 0
    try:
        for trade in simulate(int(seconds * 1000 / step_ms), start_ms, step_ms, seed):
            delay = trade.ts / 1000 - time.time()
            if delay > 0:
                await nc.flush()
                await asyncio.sleep(delay)
            await nc.publish(trade.subject, trade.to_json())
            sent += 1
        await nc.flush()
    finally:
        await nc.close()
    return sent


def main() -> None:
    import argparse
    import asyncio

    parser = argparse.ArgumentParser(description="Publish simulated trades to trades.<symbol>")
    parser.add_argument("--url", default="nats://127.0.0.1:4222")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rate", type=int, default=200, help="trades per second")
    args = parser.parse_args()
    sent = asyncio.run(publish_live(args.url, args.seconds, args.rate))
    print(f"trades: published {sent} trades", flush=True)


if __name__ == "__main__":
    main()
