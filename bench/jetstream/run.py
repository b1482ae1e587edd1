"""JetStream benchmark: pynatsd -js against nats-server -js in the same run, medians of --reps.

Rows: publish with ack one at a time (sync), publish with a window of acks in flight (async), pull-consume
(fetch batches, AckAll), each on a file stream; plus a store micro-benchmark that prices the fsync policy
(appends/s of our segment store with the default 2-minute sync and with a sync per record, against SQLite
in WAL mode). The client is nats-py for both servers, so the ratios compare servers, not clients.

    python bench/jetstream/run.py [--reps 3] [--msgs 5000] [--size 128] [--out bench/results]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import nats

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pynatsd.jetstream.store import FileStore  # noqa: E402
from tests.servers import start_server  # noqa: E402

Scenario = Callable[[str, int, int], Awaitable[float]]


async def _stream(url: str, name: str) -> nats.aio.client.Client:
    nc = await nats.connect(url)
    js = nc.jetstream()
    with contextlib.suppress(Exception):  # absent the first time
        await js.delete_stream(name)
    await js.add_stream(name=name, subjects=[f"{name}.>"])
    return nc


async def pub_sync(url: str, msgs: int, size: int) -> float:
    nc = await _stream(url, "BSYNC")
    js, data = nc.jetstream(), b"x" * size
    t0 = time.perf_counter()
    for _ in range(msgs):
        await js.publish("BSYNC.a", data)
    rate = msgs / (time.perf_counter() - t0)
    await nc.close()
    return rate


async def pub_async(url: str, msgs: int, size: int, window: int = 256) -> float:
    nc = await _stream(url, "BASYNC")
    data = b"x" * size
    inbox = nc.new_inbox()
    done = asyncio.Event()
    acked = 0
    sem = asyncio.Semaphore(window)

    async def on_ack(msg: nats.aio.msg.Msg) -> None:
        nonlocal acked
        acked += 1
        sem.release()
        if acked == msgs:
            done.set()

    await nc.subscribe(inbox + ".*", cb=on_ack)
    t0 = time.perf_counter()
    for i in range(msgs):
        await sem.acquire()
        await nc.publish("BASYNC.a", data, reply=f"{inbox}.{i}")
    await asyncio.wait_for(done.wait(), 120)
    rate = msgs / (time.perf_counter() - t0)
    await nc.close()
    return rate


async def pull_consume(url: str, msgs: int, size: int) -> float:
    nc = await _stream(url, "BPULL")
    js, data = nc.jetstream(), b"x" * size
    inbox = nc.new_inbox()
    await nc.subscribe(inbox + ".*", cb=None)
    for i in range(msgs):  # fill quickly: acks come back asynchronously
        await nc.publish("BPULL.a", data, reply=f"{inbox}.{i}")
    await nc.flush()
    while (await js.stream_info("BPULL")).state.messages < msgs:
        await asyncio.sleep(0.05)
    from nats.js import api

    psub = await js.pull_subscribe(
        "BPULL.a", "bench", config=api.ConsumerConfig(ack_policy=api.AckPolicy.ALL)
    )
    got = 0
    t0 = time.perf_counter()
    while got < msgs:
        batch = await psub.fetch(min(256, msgs - got), timeout=10)
        got += len(batch)
        await batch[-1].ack()
    rate = msgs / (time.perf_counter() - t0)
    await nc.close()
    return rate


SCENARIOS: dict[str, Scenario] = {"pub-sync": pub_sync, "pub-async": pub_async, "pull-consume": pull_consume}


def store_rates(size: int) -> dict[str, float]:
    """Appends per second: our segments (default sync / sync per record) and SQLite WAL (NORMAL / FULL)."""
    data = b"x" * size
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, n, always in (
            ("segments, fsync every 2 min", 50_000, False),
            ("segments, fsync per msg", 500, True),
        ):
            store = FileStore(Path(tmp) / label.replace(" ", "_"), sync_always=always)
            t0 = time.perf_counter()
            for i in range(n):
                store.append(b"bench.subject", None, data, i)
            out[label] = n / (time.perf_counter() - t0)
            store.close()
        for label, sync, n in (
            ("sqlite WAL synchronous=NORMAL", "NORMAL", 50_000),
            ("sqlite WAL synchronous=FULL", "FULL", 500),
        ):
            db = sqlite3.connect(Path(tmp) / f"{sync}.db", isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={sync}")
            db.execute("CREATE TABLE m (seq INTEGER PRIMARY KEY, subject TEXT, ts INTEGER, data BLOB)")
            t0 = time.perf_counter()
            for i in range(n):  # one transaction per message, as a PubAck needs it stored
                db.execute("INSERT INTO m VALUES (?, ?, ?, ?)", (i, "bench.subject", i, data))
            out[label] = n / (time.perf_counter() - t0)
            db.close()
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--msgs", type=int, default=5000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        servers = {
            kind: start_server(kind, ["-js", "-sd", str(Path(tmp) / kind)])
            for kind in ("nats-server", "pynatsd")
        }
        try:
            for name in args.scenarios.split(","):
                for _ in range(args.reps):
                    for kind, srv in servers.items():  # alternating A B A B
                        rate = await SCENARIOS[name](srv.url, args.msgs, args.size)
                        results.setdefault(name, {}).setdefault(kind, []).append(rate)
        finally:
            for srv in servers.values():
                srv.stop()
    print(f"JetStream, {args.msgs} msgs of {args.size} B, medians of {args.reps} (msgs/s)")
    print(f"{'scenario':<14}{'nats-server':>14}{'pynatsd':>12}{'ratio':>8}")
    table = {}
    for name, by in results.items():
        ref, ours = statistics.median(by["nats-server"]), statistics.median(by["pynatsd"])
        table[name] = {"nats-server": ref, "pynatsd": ours, "ratio": ours / ref, "runs": by}
        print(f"{name:<14}{ref:>14,.0f}{ours:>12,.0f}{ours / ref:>8.2f}")
    store = store_rates(args.size)
    print("\nstore appends/s (fsync policy cost)")
    for label, rate in store.items():
        print(f"  {label:<32}{rate:>12,.0f}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "jetstream.json").write_text(
        json.dumps({"args": vars(args), "rates": table, "store": store}, indent=1)
    )


if __name__ == "__main__":
    asyncio.run(main())
