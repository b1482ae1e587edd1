"""A KV bucket overwritten through nats-py, keys written once pinning every segment: the file store's
compaction keeps the disk near the live data (without it every segment would stay), and after a kill -9
every key reads its last value."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pynatsd.jetstream.store.file import KV_SEGMENT_BYTES
from tests.jetstream.conftest import jetstream_life

VALUE = 512 * 1024


def _value(n: int) -> bytes:
    return (b"%08d" % n) * (VALUE // 8)


def _disk(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*.blk"))


async def test_overwritten_kv_bucket_keeps_bounded_disk_across_kill_9(tmp_path: Path) -> None:
    store = tmp_path / "store"
    last: dict[str, int] = {}
    async with jetstream_life("pynatsd", store, kill=True) as (_, nc):
        js = nc.jetstream(timeout=30)
        kv = await js.create_key_value(bucket="OVER", history=1)
        for start in range(0, 160, 20):  # 80 MiB in all, 20 puts in flight
            batch = {n: f"cold.{n}" if n % 8 == 0 else f"hot.{n % 4}" for n in range(start, start + 20)}
            await asyncio.gather(*(kv.put(key, _value(n)) for n, key in batch.items()))
            last.update({key: n for n, key in batch.items()})
        live = (await js.stream_info("KV_OVER")).state.bytes
        # Without compaction each segment would stay (a key written once in each): all that was written.
        bound = 2 * KV_SEGMENT_BYTES + 2 * live
        assert bound < 160 * VALUE // 2
        # The current segment and the one sealed last are not compacted yet; the rest hold live data only.
        assert _disk(store) < bound
    async with jetstream_life("pynatsd", store) as (_, nc):
        kv = await nc.jetstream(timeout=30).key_value("OVER")
        for key, n in last.items():
            entry = await kv.get(key)
            assert entry.value == _value(n), key
        assert sorted(await kv.keys()) == sorted(last)
