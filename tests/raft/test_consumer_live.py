"""pynatsd as a follower replica of a replicated consumer in a cluster of nats-server nodes
(pynatsd.raft.consumer), beside the reference where a nats-server stands in its place.

An R3 durable pull consumer of an R3 stream has its group on the two nats-server nodes and on pynatsd. When
the consumer leader is killed (kill -9), the other nats-server leads it with pynatsd's vote and acks, and
the consumer goes on: the next fetch returns the next messages, nothing acked comes again, and its info is
the reference's. pynatsd's replica holds the consumer's state (delivered, ack floor, pending), which it
recovers from its log when it restarts after a kill -9, and snapshots in nats-server's encoding when it
stops."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
from nats.js.errors import APIError

from pynatsd.raft.consumer import ConsumerApplier, ConsumerState, decode_consumer_state
from pynatsd.raft.node import RaftNode
from pynatsd.raft.storage import FileStorage
from tests.cluster.harness import Cluster, Node
from tests.raft.test_meta_live import _current, _leader, _until, mixed_cluster
from tests.raft.test_stream_live import WAIT, _all_running, _info_until, _publish, _replica, _request

pytestmark = pytest.mark.timeout(240)

MESSAGES = 100
CONSUMER = "WORK"
INFO = f"$JS.API.CONSUMER.INFO.ORDERS.{CONSUMER}"


@pytest.fixture(scope="module", params=["pynatsd", "nats-server"])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    with mixed_cluster(str(request.param)) as cluster:
        yield cluster


async def _consumer_until(node: Node, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The consumer's info through `node` once `check` holds for it."""
    deadline = asyncio.get_running_loop().time() + WAIT
    while True:
        info = await _request(node, INFO, {})
        if "error" not in info and check(info):
            return info
        assert asyncio.get_running_loop().time() < deadline, info
        await asyncio.sleep(0.3)


def _all_current(cluster: Cluster) -> Callable[[dict[str, Any]], bool]:
    def check(info: dict[str, Any]) -> bool:
        replicas = info.get("cluster", {}).get("replicas") or ()
        names = {info["cluster"].get("leader")} | {r["name"] for r in replicas if r.get("current")}
        return names >= {n.name for n in cluster.nodes if n.running}

    return check


async def _fetch(node: Node, count: int, ack: Callable[[int], bool] = lambda seq: True) -> list[int]:
    """`count` messages fetched through `node` (asked again while the consumer elects a leader), acked
    (synchronously: the leader answers once the ack is replicated) where `ack(stream seq)` says; their
    stream sequences."""
    deadline = asyncio.get_running_loop().time() + WAIT
    seqs: list[int] = []
    async with await nats.connect(f"nats://a:a@127.0.0.1:{node.port}") as nc:
        js = nc.jetstream(timeout=5)
        sub = await js.pull_subscribe_bind(CONSUMER, "ORDERS")
        while len(seqs) < count:
            try:
                msgs = await sub.fetch(count - len(seqs), timeout=3)
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError, APIError) as e:
                assert asyncio.get_running_loop().time() < deadline, f"fetched {seqs}: {e!r}"
                continue
            for msg in msgs:
                seq = msg.metadata.sequence.stream
                seqs.append(seq)
                if ack(seq):
                    await msg.ack_sync(timeout=WAIT)
    return seqs


def _odd(seq: int) -> bool:
    return seq % 2 == 1


def _summary(info: dict[str, Any]) -> dict[str, Any]:
    """What the consumer's info says of its state (not of when)."""
    return {
        "delivered": {k: info["delivered"][k] for k in ("consumer_seq", "stream_seq")},
        "ack_floor": {k: info["ack_floor"][k] for k in ("consumer_seq", "stream_seq")},
        "num_ack_pending": info["num_ack_pending"],
        "num_redelivered": info["num_redelivered"],
        "num_pending": info["num_pending"],
    }


def _expected(delivered: int, floor: int, pending: int) -> dict[str, Any]:
    return {
        "delivered": {"consumer_seq": delivered, "stream_seq": delivered},
        "ack_floor": {"consumer_seq": floor, "stream_seq": floor},
        "num_ack_pending": pending,
        "num_redelivered": 0,
        "num_pending": MESSAGES - delivered,
    }


async def _failover(cluster: Cluster) -> None:
    ours, go = cluster[0], cluster.nodes[1:]
    await _until(lambda: _leader(cluster, go) != "", "no meta leader")
    await _until(lambda: _current(cluster, ours.name), f"{ours.name} not current")
    config = {"name": "ORDERS", "subjects": ["orders.>"], "num_replicas": 3}
    assert "error" not in await _request(go[0], "$JS.API.STREAM.CREATE.ORDERS", config)
    await _info_until(go[0], lambda info: bool(info.get("cluster", {}).get("leader")))
    assert sorted(await _publish(go[0], 0, MESSAGES)) == list(range(1, MESSAGES + 1))
    consumer = {"durable_name": CONSUMER, "ack_policy": "explicit", "num_replicas": 3}
    body = {"stream_name": "ORDERS", "config": consumer}
    created = await _request(go[0], f"$JS.API.CONSUMER.DURABLE.CREATE.ORDERS.{CONSUMER}", body)
    assert "error" not in created, created
    info = await _consumer_until(go[0], lambda info: bool(info.get("cluster", {}).get("leader")))
    placed = {info["cluster"]["leader"], *(r["name"] for r in info["cluster"].get("replicas") or ())}
    assert placed == {n.name for n in cluster.nodes}
    assert info["cluster"]["leader"] != ours.name or ours.kind == "nats-server"
    if info["cluster"]["leader"] == ours.name:  # the reference's stand-in: hand over, as pynatsd never leads
        await _request(go[0], f"$JS.API.CONSUMER.LEADER.STEPDOWN.ORDERS.{CONSUMER}", {})
        info = await _consumer_until(go[0], lambda info: info["cluster"].get("leader") not in ("", ours.name))

    # 30 acked, then 10 of which only the odd ones acked: 5 pending, the ack floor at 31.
    assert await _fetch(go[0], 30) == list(range(1, 31))
    assert await _fetch(go[0], 10, _odd) == list(range(31, 41))
    info = await _consumer_until(go[0], _all_current(cluster))
    assert _summary(info) == _expected(40, 31, 5)
    leader = info["cluster"]["leader"]
    assert leader != ours.name

    # The consumer leader dies: the other nats-server leads (pynatsd's vote and acks make its quorum).
    dead = next(n for n in go if n.name == leader)
    survivor = next(n for n in go if n is not dead)
    cluster.kill(dead)
    assert await _fetch(survivor, 10) == list(range(41, 51))  # nothing acked (or pending) comes again
    info = await _consumer_until(survivor, lambda info: info["delivered"]["stream_seq"] == 50)
    assert info["cluster"]["leader"] in (survivor.name, ours.name if ours.kind == "nats-server" else "")
    assert _summary(info) == _expected(50, 31, 5)
    assert _replica(info, dead.name).get("current") is not True

    # /raftz lists the consumer's group under its account beside the stream's, in the survivor's term.
    group = info["cluster"]["raft_group"]
    ours_raftz, survivor_raftz = ours.get("/raftz?acc=A"), survivor.get("/raftz?acc=A")
    assert ours_raftz["A"].keys() == survivor_raftz["A"].keys() and group in ours_raftz["A"]
    assert ours_raftz["A"][group]["term"] == survivor_raftz["A"][group]["term"]
    assert ours_raftz["A"][group]["applied"] > 0
    assert ours.get(f"/raftz?acc=A&group={group}")["A"].keys() == {group}


def _local_state(group: Path, config: dict[str, Any]) -> ConsumerState:
    """The consumer state a replica's snapshot and log hold (read with the server stopped, as the replica
    reads them when it starts)."""
    storage = FileStorage(group / "raft")
    snap = storage.load_snapshot()
    assert snap is not None  # written when the server stopped, in nats-server's encoding
    decode_consumer_state(snap.data)
    node = RaftNode(group.name, "pynatsd0", storage, [], 0.0, random.Random(), observer=True)
    applier = ConsumerApplier(config)
    for done in node.take_applied():
        applier.apply(done.entries)
    assert not applier.broken
    return applier.state


def _as_summary(state: ConsumerState) -> dict[str, Any]:
    return {
        "delivered": {"consumer_seq": state.delivered_consumer, "stream_seq": state.delivered_stream},
        "ack_floor": {"consumer_seq": state.ack_floor_consumer, "stream_seq": state.ack_floor_stream},
        "num_ack_pending": len(state.pending),
        "num_redelivered": len(state.redelivered),
        "num_pending": MESSAGES - state.delivered_stream,
    }


async def _restart(cluster: Cluster) -> None:
    """After test_consumer_replica_votes_through_failover (the same cluster)."""
    ours, go = cluster[0], cluster.nodes[1:]
    await _all_running(cluster)  # the consumer leader killed before comes back
    await _consumer_until(go[0], _all_current(cluster))
    # Killed after applying more (its log holds them), the consumer goes on without it; started again, it
    # recovers its state from its log and catches up.
    assert await _fetch(ours, 5, _odd) == list(range(51, 56))
    await _consumer_until(go[0], _all_current(cluster))
    cluster.kill(ours)
    assert await _fetch(go[0], 5) == list(range(56, 61))
    await asyncio.to_thread(cluster.start, ours)
    assert await _fetch(ours, 5) == list(range(61, 66))
    info = await _consumer_until(
        go[0], lambda info: _all_current(cluster)(info) and info["delivered"]["stream_seq"] == 65
    )
    expected = _expected(65, 31, 7)
    assert _summary(info) == expected
    if ours.kind == "pynatsd":
        group = cluster.workdir / "js0" / "_js_" / info["cluster"]["raft_group"]
        await _until(lambda: _applied(ours, info["cluster"]["raft_group"]), "replica not applied")
        log = ours.log()
        cluster.stop(ours)
        state = _local_state(group, info["config"])
        assert _as_summary(state) == expected, log[-3000:]
        assert sorted(state.pending) == [32, 34, 36, 38, 40, 52, 54]


def _applied(node: Node, group: str) -> bool:
    """Every committed entry of `group` applied on `node`, and its commit is the group's."""
    raftz = node.get(f"/raftz?acc=A&group={group}")["A"][group]
    return bool(raftz["applied"] == raftz["committed"] and raftz.get("leader"))


async def _delete(cluster: Cluster) -> None:
    """A deleted consumer's replica stops, its log removed; the entries it applied were nats-server's."""
    await _all_running(cluster)
    ours, go = cluster[0], cluster.nodes[1:]
    info = await _consumer_until(go[0], _all_current(cluster))
    group = cluster.workdir / "js0" / "_js_" / info["cluster"]["raft_group"]
    if ours.kind == "pynatsd":
        assert group.is_dir()
    deleted = await _request(go[0], f"$JS.API.CONSUMER.DELETE.ORDERS.{CONSUMER}", {})
    assert deleted.get("success") is True, deleted
    gone = await _request(ours, INFO, {})
    assert gone["error"]["err_code"] == 10014  # consumer not found
    if ours.kind == "pynatsd":
        await _until(lambda: not group.exists(), "the deleted consumer's replica directory is still there")


def test_consumer_replica_votes_through_failover(cluster: Cluster) -> None:
    asyncio.run(_failover(cluster))


def test_consumer_replica_recovers_after_restart(cluster: Cluster) -> None:
    asyncio.run(_restart(cluster))


def test_deleted_consumer_leaves_no_replica(cluster: Cluster) -> None:
    asyncio.run(_delete(cluster))
