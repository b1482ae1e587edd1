"""Seeded chaos on an R3 stream of pynatsd and two nats-server nodes (the reference: three nats-server):
under steady acknowledged publishing (nats-py), each round kills a random node with SIGKILL and restarts
it, or steps the stream leader down. Once all converge, every acknowledged message is at its sequence,
exactly once, on every replica: through the stream leader, in each nats-server's own /jsz state, and in
pynatsd's store read offline.

The seed is printed and named by a failure; PYNATSD_RANDOM_SEED replays one. CI runs the short form
(ROUNDS rounds, pynatsd's layout); PYNATSD_RANDOM_ROUNDS=N runs N rounds, and the reference layout too."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Iterator
from typing import Any

import nats
import nats.errors
import pytest

from tests.cluster.harness import Cluster, Node
from tests.raft.test_meta_live import _current, _leader, _until, mixed_cluster
from tests.raft.test_stream_live import (
    WAIT,
    _info_until,
    _local_messages,
    _payload,
    _request,
    _stream_messages,
)

pytestmark = pytest.mark.timeout(600)

ROUNDS = int(os.environ.get("PYNATSD_RANDOM_ROUNDS") or 3)
LAYOUTS = ["pynatsd", "nats-server"] if os.environ.get("PYNATSD_RANDOM_ROUNDS") else ["pynatsd"]
IN_FLIGHT, PAUSE = 10, 0.05  # steady, not flat out: up to 200 msg/s


@pytest.fixture(params=LAYOUTS)
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    with mixed_cluster(str(request.param)) as cluster:
        yield cluster


class Publisher:
    """Acknowledged publishes, each retried with its message id until acknowledged, until stopped."""

    def __init__(self, cluster: Cluster) -> None:
        self.urls = [f"nats://a:a@127.0.0.1:{n.port}" for n in cluster.nodes]
        self.acked: dict[int, int] = {}  # message number -> the sequence its ack named
        self.stopped = asyncio.Event()

    async def run(self) -> None:
        nc = await nats.connect(servers=self.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        js = nc.jetstream(timeout=2)
        nxt = 0

        async def one(i: int) -> None:
            deadline = asyncio.get_running_loop().time() + WAIT
            while True:
                try:
                    ack = await js.publish(f"orders.{i % 7}", _payload(i), headers={"Nats-Msg-Id": str(i)})
                    self.acked[i] = int(ack.seq)
                    return
                except nats.errors.Error as e:  # no leader for now, its node killed, a reconnect
                    assert asyncio.get_running_loop().time() < deadline, f"publish {i} never acked: {e!r}"
                    await asyncio.sleep(0.1)

        try:
            while not self.stopped.is_set():
                await asyncio.gather(*(one(i) for i in range(nxt, nxt + IN_FLIGHT)))
                nxt += IN_FLIGHT
                await asyncio.sleep(PAUSE)
        finally:
            await nc.close()


def _all_current(cluster: Cluster, last_seq: int | None = None) -> Any:
    def check(info: dict[str, Any]) -> bool:
        replicas = info.get("cluster", {}).get("replicas") or ()
        names = {info["cluster"].get("leader")} | {r["name"] for r in replicas if r.get("current")}
        return names == {n.name for n in cluster.nodes} and last_seq in (None, info["state"]["last_seq"])

    return check


def _local_state(node: Node) -> dict[str, Any]:
    """The stream's state in `node`'s own store (nats-server's /jsz, per server)."""
    jsz = node.get("/jsz?acc=A&streams=true")
    streams = [s for a in jsz.get("account_details") or () for s in a.get("stream_detail") or ()]
    state: dict[str, Any] = next(s["state"] for s in streams if s["name"] == "ORDERS")
    return state


async def _round(cluster: Cluster, rng: random.Random, log: list[str]) -> None:
    running = [n for n in cluster.nodes if n.running]
    if rng.random() < 0.6:
        node = rng.choice(running)
        log.append(f"kill -9 {node.name}")
        cluster.kill(node)
        await asyncio.sleep(rng.uniform(0.2, 2.0))  # the others go on without it
        await asyncio.to_thread(cluster.start, node)
    else:
        log.append("stream leader stepdown")
        await _request(rng.choice(running), "$JS.API.STREAM.LEADER.STEPDOWN.ORDERS", {})
    await _info_until(cluster[1], _all_current(cluster))  # a majority again before the next round


async def _chaos(cluster: Cluster, seed: int, log: list[str]) -> None:
    rng = random.Random(seed)
    ours, go = cluster[0], cluster.nodes[1:]
    await _until(lambda: _leader(cluster, go) != "", "no meta leader")
    await _until(lambda: _current(cluster, ours.name), f"{ours.name} not current")
    config = {"name": "ORDERS", "subjects": ["orders.>"], "num_replicas": 3}
    assert "error" not in await _request(go[0], "$JS.API.STREAM.CREATE.ORDERS", config)
    await _info_until(go[0], _all_current(cluster))
    publisher = Publisher(cluster)
    publishing = asyncio.create_task(publisher.run())
    try:
        for _ in range(ROUNDS):
            await _round(cluster, rng, log)
    finally:
        publisher.stopped.set()
        await publishing
    total = len(publisher.acked)
    assert total > ROUNDS * IN_FLIGHT, (log, total)  # publishing went on through the rounds
    info = await _info_until(go[0], _all_current(cluster, total))
    expected = {seq: (f"orders.{i % 7}", _payload(i)) for i, seq in publisher.acked.items()}
    assert len(expected) == total and info["state"]["messages"] == total, (log, info["state"])
    for node in cluster.nodes:
        if node.kind == "nats-server":
            state = _local_state(node)
            assert (state["messages"], state["first_seq"], state["last_seq"]) == (total, 1, total), node
    assert await _stream_messages(go[0], total) == expected, log
    if ours.kind == "pynatsd":
        cluster.stop(ours)
        group = cluster.workdir / "js0" / "_js_" / info["cluster"]["raft_group"]
        assert _local_messages(group) == expected, (log, ours.log()[-3000:])


def test_acknowledged_messages_survive_chaos(cluster: Cluster) -> None:
    seed = int(os.environ.get("PYNATSD_RANDOM_SEED") or random.randrange(2**32))
    print(f"PYNATSD_RANDOM_SEED={seed} rounds={ROUNDS}")
    log: list[str] = []
    try:
        asyncio.run(_chaos(cluster, seed, log))
    except BaseException as e:
        e.add_note(f"PYNATSD_RANDOM_SEED={seed} PYNATSD_RANDOM_ROUNDS={ROUNDS} replays this run: {log}")
        raise
