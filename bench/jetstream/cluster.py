"""JetStream cluster benchmark: an R3 stream on 2 nats-server + 1 pynatsd beside 3 nats-server nodes.

Both clusters run in the same process tree and alternate A B A B; each rep makes a fresh R3 file stream and
connects its nats-py client to the stream's leader (a nats-server in both layouts: pynatsd never leads).
Rows (msgs/s, medians of --reps, pynatsd's layout over the reference's):
- publish-ack: publishes with a window of acks in flight, until the last is acknowledged (the leader commits
  with one follower's append: the faster of the two);
- all-replicas: the same publishes, until every replica holds the last one (the leader's view: every replica
  current, no lag): the slower follower's pace, pynatsd's in the mixed layout;
- consume-ack: a durable R3 pull consumer fetching batches, each message acknowledged.
Besides, the CPU per message (utime + stime, µs) of node 0, pynatsd or the nats-server in its place, while
it follows the publishes (until all-replicas; not while consuming: pynatsd hosts no consumer replica).

    python bench/jetstream/cluster.py [--reps 3] [--msgs 20000] [--size 128] [--out bench/results] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import nats.errors
from nats.js import api

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.cluster.harness import Cluster, Node, wait_until  # noqa: E402
from tests.raft.test_meta_live import _current, _leader, mixed_cluster  # noqa: E402
from tests.servers import nats_server_binary  # noqa: E402

LAYOUTS = {"pynatsd": "2 nats-server + pynatsd", "nats-server": "3 nats-server"}
ROWS = ("publish-ack", "all-replicas", "consume-ack")
WINDOW = 256  # acks in flight
BATCH = 256  # pull fetch size
WAIT = 120.0


def _cpu_seconds(node: Node) -> float:
    assert node.process is not None
    fields = Path(f"/proc/{node.process.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _stream_info(nc: nats.NATS, name: str) -> dict[str, Any]:
    msg = await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=5)
    info: dict[str, Any] = json.loads(msg.data)
    return info


async def _fresh_stream(cluster: Cluster, name: str) -> Node:
    """A new R3 stream `name` with a leader and every replica current; the leader's node."""
    config = {"name": name, "subjects": [f"{name}.>"], "num_replicas": 3, "storage": "file"}
    deadline = time.monotonic() + WAIT
    async with await nats.connect(f"nats://a:a@127.0.0.1:{cluster[1].port}") as nc:
        while True:
            try:
                created = await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(config).encode(), 5)
                if "error" not in json.loads(created.data):
                    info = await _stream_info(nc, name)
                    replicas = info.get("cluster", {}).get("replicas") or ()
                    current = len(replicas) == 2 and all(r.get("current") for r in replicas)
                    if info.get("cluster", {}).get("leader") and current:
                        break
            except nats.errors.TimeoutError:
                pass
            assert time.monotonic() < deadline, f"stream {name} not ready"
            await asyncio.sleep(0.2)
    return next(n for n in cluster.nodes if n.name == info["cluster"]["leader"])


async def _publish_acked(nc: nats.NATS, subject: str, msgs: int, size: int) -> float:
    """Seconds until every publish (WINDOW in flight) is acknowledged."""
    data = b"x" * size
    inbox = nc.new_inbox()
    done = asyncio.Event()
    window = asyncio.Semaphore(WINDOW)
    acked = 0

    async def on_ack(msg: nats.aio.msg.Msg) -> None:
        nonlocal acked
        assert b'"error"' not in msg.data, msg.data
        acked += 1
        window.release()
        if acked == msgs:
            done.set()

    await nc.subscribe(inbox + ".*", cb=on_ack)
    t0 = time.perf_counter()
    for i in range(msgs):
        await window.acquire()
        await nc.publish(subject, data, reply=f"{inbox}.{i}")
    await asyncio.wait_for(done.wait(), WAIT)
    return time.perf_counter() - t0


async def _all_replicas(nc: nats.NATS, name: str, last_seq: int) -> None:
    """Until every replica is current with no lag at `last_seq` (the leader's view)."""
    deadline = time.monotonic() + WAIT
    while True:
        info = await _stream_info(nc, name)
        replicas = info.get("cluster", {}).get("replicas") or ()
        caught_up = all(r.get("current") and not r.get("lag") for r in replicas)
        if info["state"]["last_seq"] == last_seq and caught_up:
            return
        assert time.monotonic() < deadline, json.dumps(info.get("cluster"))
        await asyncio.sleep(0.02)


async def _consume_acked(nc: nats.NATS, name: str, msgs: int) -> float:
    """Seconds to fetch every message through a durable R3 pull consumer, acknowledging each."""
    js = nc.jetstream(timeout=10)
    config = api.ConsumerConfig(ack_policy=api.AckPolicy.EXPLICIT, max_ack_pending=-1)
    psub = await js.pull_subscribe(f"{name}.>", "bench", stream=name, config=config)
    deadline = time.monotonic() + WAIT
    while not ((await js.consumer_info(name, "bench")).cluster or api.ClusterInfo()).leader:  # R3: elects
        assert time.monotonic() < deadline, "the consumer has no leader"
        await asyncio.sleep(0.05)
    got = 0
    t0 = time.perf_counter()
    while got < msgs:
        batch = await psub.fetch(min(BATCH, msgs - got), timeout=10)
        for msg in batch:
            await msg.ack()
        got += len(batch)
    await nc.flush()
    return time.perf_counter() - t0


async def one_rep(cluster: Cluster, rep: int, msgs: int, size: int) -> dict[str, float]:
    name = f"BENCH{rep}"
    leader = await _fresh_stream(cluster, name)
    cpu0 = _cpu_seconds(cluster[0])
    async with await nats.connect(f"nats://a:a@127.0.0.1:{leader.port}") as nc:
        t0 = time.perf_counter()
        acked = await _publish_acked(nc, f"{name}.a", msgs, size)
        await _all_replicas(nc, name, msgs)
        replicated = time.perf_counter() - t0
        cpu = _cpu_seconds(cluster[0]) - cpu0
        consumed = await _consume_acked(nc, name, msgs)
        await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"", timeout=10)
    return {
        "publish-ack": msgs / acked,
        "all-replicas": msgs / replicated,
        "consume-ack": msgs / consumed,
        "node0-cpu-us": cpu / msgs * 1e6,
    }


@contextlib.contextmanager
def clusters() -> Iterator[dict[str, Cluster]]:
    with contextlib.ExitStack() as stack:
        running = {kind: stack.enter_context(mixed_cluster(kind)) for kind in LAYOUTS}
        for cluster in running.values():
            go = cluster.nodes[1:]
            wait_until(lambda c=cluster, g=go: _leader(c, g) != "", WAIT, lambda: "no meta leader")
            wait_until(lambda c=cluster: _current(c, c[0].name), WAIT, lambda: "node 0 not current")
        yield running


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--msgs", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--smoke", action="store_true", help="1 rep of 500 messages (keeps the harness alive)")
    args = ap.parse_args()
    if args.smoke:
        args.reps, args.msgs = 1, 500
    runs: dict[str, dict[str, list[float]]] = {kind: {} for kind in LAYOUTS}
    with clusters() as running:
        for rep in range(args.reps):
            for kind, cluster in running.items():  # alternating A B A B
                for row, value in asyncio.run(one_rep(cluster, rep, args.msgs, args.size)).items():
                    runs[kind].setdefault(row, []).append(value)
    version = os.popen(f"{nats_server_binary()} --version").read().strip()
    print(f"JetStream R3, {args.msgs} msgs of {args.size} B, medians of {args.reps} (msgs/s); {version}")
    print(f"{'row':<16}{LAYOUTS['nats-server']:>16}{LAYOUTS['pynatsd']:>26}{'ratio':>8}")
    table: dict[str, dict[str, Any]] = {}
    for row in (*ROWS, "node0-cpu-us"):
        ref, ours = statistics.median(runs["nats-server"][row]), statistics.median(runs["pynatsd"][row])
        by_layout = {kind: runs[kind][row] for kind in runs}
        ratio = ours / ref if ref else None  # CPU is counted in 10 ms ticks: none in a smoke run's 500
        table[row] = {"nats-server": ref, "pynatsd": ours, "ratio": ratio, "runs": by_layout}
        print(f"{row:<16}{ref:>16,.1f}{ours:>26,.1f}{ratio or 0:>8.2f}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "js-cluster-smoke" if args.smoke else "js-cluster"
    run_args = {"reps": args.reps, "msgs": args.msgs, "size": args.size, "smoke": args.smoke}
    results = {"nats_server": version, "args": run_args, "layouts": LAYOUTS, "rows": table}
    (out / f"{stem}.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
