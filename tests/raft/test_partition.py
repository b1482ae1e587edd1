"""Partitions of an R3 stream's cluster: pynatsd and two nats-server nodes (the reference: a nats-server in
pynatsd's place), every route through a relay (tests/netproxy.py) that cuts a node off and heals it.

(a) pynatsd's replica cut off: the two nats-server nodes keep acknowledging publishes; healed, its replica
catches up. (b) The stream leader (a nats-server) cut off: publishes through it are never acknowledged,
the other nats-server leads with pynatsd's vote and acknowledges; healed, every replica converges. In the
end every acknowledged message is at its sequence, once, on every replica (pynatsd's store read offline),
and no unacknowledged one is anywhere."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import nats
import nats.errors
import pytest
from nats.js.errors import NoStreamResponseError

from tests.cluster.harness import Cluster, Node
from tests.netproxy import Switchboard, switchboard
from tests.raft.test_meta_live import _current, _leader, _until, mixed_cluster
from tests.raft.test_stream_live import (
    _info_until,
    _local_messages,
    _payload,
    _publish,
    _replica,
    _request,
    _settled,
    _stream_messages,
)

pytestmark = pytest.mark.timeout(240)

BEFORE, CUT_OFF, LEADERLESS = 200, 200, 200
MINORITY_TRIES = 3
NOT_ACKED = (nats.errors.TimeoutError, nats.errors.NoRespondersError, NoStreamResponseError)


def route_through(board: Switchboard) -> Any:
    """A `mixed_cluster` prepare hook: each node advertises its relay; the seed is reached through its."""

    def prepare(cluster: Cluster) -> None:
        relays = {n.name: board.relay(n.name, n.cluster_port) for n in cluster.nodes}
        seed = cluster[0]
        for node in cluster.nodes:
            text = node.config.read_text()
            text = text.replace(f"127.0.0.1:{seed.cluster_port}]", f"127.0.0.1:{relays[seed.name]}]")
            advertise = f"  advertise: 127.0.0.1:{relays[node.name]}\n"
            node.config.write_text(text.replace("cluster {\n", "cluster {\n" + advertise, 1))

    return prepare


@pytest.fixture(scope="module", params=["pynatsd", "nats-server"])
def partitioned(request: pytest.FixtureRequest) -> Iterator[tuple[Cluster, Switchboard]]:
    with switchboard() as board, mixed_cluster(str(request.param), route_through(board)) as cluster:
        yield cluster, board


def _cut_off(cluster: Cluster, node: Node) -> bool:
    """`node` has no route left, and no other node a route to it."""
    others = [n for n in cluster.nodes if n is not node and n.running]
    return not node.routes() and all(
        node.name not in {r.get("remote_name") for r in n.routes()} for n in others
    )


async def _minority_refuses(node: Node) -> None:
    """Publishes through the cut-off stream leader are never acknowledged."""
    async with await nats.connect(f"nats://a:a@127.0.0.1:{node.port}") as nc:
        js = nc.jetstream(timeout=2)
        for k in range(MINORITY_TRIES):
            msg_id = {"Nats-Msg-Id": f"-{k}"}
            with pytest.raises(NOT_ACKED):
                await js.publish("orders.minority", f"minority-{k}".encode(), headers=msg_id)


async def _scenario(cluster: Cluster, board: Switchboard) -> None:
    ours, go = cluster[0], cluster.nodes[1:]
    await _until(lambda: _leader(cluster, go) != "", "no meta leader")
    await _until(lambda: _current(cluster, ours.name), f"{ours.name} not current")
    config = {"name": "ORDERS", "subjects": ["orders.>"], "num_replicas": 3}
    assert "error" not in await _request(go[0], "$JS.API.STREAM.CREATE.ORDERS", config)
    info = await _info_until(go[0], lambda info: bool(info.get("cluster", {}).get("leader")))
    if info["cluster"]["leader"] == ours.name:  # the reference's stand-in: the same roles in both layouts
        await _request(go[0], "$JS.API.STREAM.LEADER.STEPDOWN.ORDERS", {})
    acked = dict(enumerate(await _publish(go[0], 0, BEFORE)))
    leader_name = (await _settled(go[0], ours.name, BEFORE))["cluster"]["leader"]
    leader = next(n for n in go if n.name == leader_name)
    follower = next(n for n in go if n is not leader)

    # (a) pynatsd cut off: the two nats-server nodes are a majority and go on.
    board.isolate(ours.name)
    await _until(lambda: _cut_off(cluster, ours), f"{ours.name} still routed")
    acked |= dict(zip(range(BEFORE, BEFORE + CUT_OFF), await _publish(leader, BEFORE, CUT_OFF), strict=True))
    info = await _request(leader, "$JS.API.STREAM.INFO.ORDERS", {})
    assert info["state"]["last_seq"] == BEFORE + CUT_OFF and info["cluster"]["leader"] == leader.name
    board.heal()
    await _settled(leader, ours.name, BEFORE + CUT_OFF)  # its replica current again, no lag

    # (b) the stream leader cut off: it cannot commit; the rest elect a leader (pynatsd votes, never runs).
    board.isolate(leader.name)
    await _until(lambda: _cut_off(cluster, leader), f"{leader.name} still routed")
    await _minority_refuses(leader)
    total = BEFORE + CUT_OFF + LEADERLESS
    more = await _publish(follower, BEFORE + CUT_OFF, LEADERLESS)
    acked |= dict(zip(range(BEFORE + CUT_OFF, total), more, strict=True))
    info = await _request(follower, "$JS.API.STREAM.INFO.ORDERS", {})
    assert info["state"]["last_seq"] == total
    assert info["cluster"]["leader"] in (follower.name, ours.name if ours.kind == "nats-server" else "")
    board.heal()

    def converged(info: dict[str, Any]) -> bool:
        current = {r["name"] for r in info["cluster"].get("replicas") or () if r.get("current")}
        return info["state"]["last_seq"] == total and {info["cluster"]["leader"], *current} == {
            n.name for n in cluster.nodes
        }

    info = await _info_until(follower, converged)
    assert info["state"]["messages"] == total
    expected = {seq: (f"orders.{i % 7}", _payload(i)) for i, seq in acked.items()}
    assert len(expected) == total  # every acknowledged message at a sequence of its own
    assert await _stream_messages(follower, total) == expected  # no unacknowledged one from the minority
    if ours.kind == "pynatsd":
        cluster.stop(ours)
        group = cluster.workdir / "js0" / "_js_" / info["cluster"]["raft_group"]
        assert _local_messages(group) == expected, ours.log()[-3000:]
    assert _replica(info, leader.name).get("current") or info["cluster"]["leader"] == leader.name


def test_partitions_heal(partitioned: tuple[Cluster, Switchboard]) -> None:
    asyncio.run(_scenario(*partitioned))
