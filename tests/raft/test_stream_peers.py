"""Peer-set changes of a replicated stream that pynatsd hosts a follower replica of (pynatsd.raft.member),
beside the reference where a nats-server stands in its place: scale up onto it and down off it by stream
update, a leader stepdown that prefers it, and what a restart finds (streams deleted or moved off it while
it was down, its STATSZ)."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from pynatsd.raft.codec import peer_id
from tests.cluster.harness import Cluster, Node, node_config
from tests.conftest import need_tool
from tests.raft.test_codec_live import CONFIG
from tests.raft.test_meta_live import _current, _leader, _until, mixed_cluster
from tests.raft.test_stream_live import _info_until, _local_messages, _payload, _publish, _request
from tests.servers import ServerProcess, free_port, nats_server_binary, start_server

pytestmark = pytest.mark.timeout(240)

COUNT = 60


@pytest.fixture(scope="module", params=["pynatsd", "nats-server"])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    with mixed_cluster(str(request.param)) as cluster:
        yield cluster


def _placed(info: dict[str, Any]) -> dict[str, bool]:
    """Server name -> current, for the stream's leader and replicas."""
    cluster = info.get("cluster") or {}
    placed = {str(r["name"]): bool(r.get("current")) for r in cluster.get("replicas") or ()}
    if cluster.get("leader"):
        placed[str(cluster["leader"])] = True
    return placed


def _groups(cluster: Cluster) -> set[str]:
    """The stream groups whose replica directory node 0 (pynatsd) holds."""
    replicas = cluster.workdir / "js0" / "_js_"
    return {d.name for d in replicas.iterdir()} if replicas.exists() else set()


async def _messages(node: Node, count: int) -> dict[int, tuple[str, bytes]]:
    """The stream's messages 1..count (sequence -> subject, payload), got one by one (a consumer would hold
    up a scale down until it migrated)."""
    out = {}
    for seq in range(1, count + 1):
        got = (await _request(node, "$JS.API.STREAM.MSG.GET.ORDERS", {"seq": seq}))["message"]
        out[seq] = (str(got["subject"]), base64.b64decode(got.get("data") or ""))
    return out


async def _scale(cluster: Cluster) -> None:
    """R1 (on a nats-server: pynatsd does not lead) -> R3 -> R1 -> R3 by stream update: a replica on
    pynatsd starts and catches up, is removed when the scale down drops it, and starts again."""
    ours, go = cluster[0], cluster.nodes[1:]
    await _until(lambda: _leader(cluster, go) != "", "no meta leader")
    await _until(lambda: _current(cluster, ours.name), f"{ours.name} not current")
    names = {n.name for n in cluster.nodes}
    config = {"name": "ORDERS", "subjects": ["orders.>"], "num_replicas": 1}
    created = await _request(go[0], "$JS.API.STREAM.CREATE.ORDERS", config)
    assert "error" not in created, created
    assert created["cluster"]["leader"] != ours.name or ours.kind == "nats-server"
    await _publish(go[0], 0, COUNT)
    group = ""
    for replicas in (3, 1, 3):
        updated = await _request(go[0], "$JS.API.STREAM.UPDATE.ORDERS", {**config, "num_replicas": replicas})
        assert "error" not in updated, updated
        if replicas == 3:  # every server holds it, current: the new replicas caught up
            info = await _info_until(go[0], lambda i: _placed(i) == dict.fromkeys(names, True))
            group = info["cluster"]["raft_group"]
        else:
            info = await _info_until(go[0], lambda i: len(_placed(i)) == 1)
        assert info["state"]["messages"] == COUNT
        if ours.kind == "pynatsd" and replicas == 1:  # dropped by the scale down: its data removed
            await _until(lambda: not _groups(cluster), "a replica left after the scale down")
    stored = await _messages(go[0], COUNT)
    assert set(stored.values()) == {(f"orders.{i % 7}", _payload(i)) for i in range(COUNT)}
    if ours.kind == "pynatsd":  # the replica's store holds the stream's messages (read once stopped)
        assert _groups(cluster) == {group}
        errors = [line for line in ours.log().splitlines() if "[ERR]" in line]
        cluster.stop(ours)
        local = _local_messages(cluster.workdir / "js0" / "_js_" / group)
        await asyncio.to_thread(cluster.start, ours)
        assert local == stored
        assert not errors, errors  # the peer set changes followed, none refused


def test_scale_up_and_down(cluster: Cluster) -> None:
    asyncio.run(_scale(cluster))


def _group_leaders(cluster: Cluster, group: str) -> set[str]:
    """The leader each server's /raftz names for the stream's group (account A)."""
    return {str(n.get("/raftz?acc=A").get("A", {}).get(group, {}).get("leader")) for n in cluster.nodes}


async def _stepdown(node: Node, preferred: str) -> dict[str, Any]:
    body = {"placement": {"preferred": preferred}}
    return await _request(node, "$JS.API.STREAM.LEADER.STEPDOWN.ORDERS", body)


async def _stepdown_to_ours(cluster: Cluster) -> None:
    """A stream leader stepdown preferring pynatsd's server: nats-server's leader answers success and hands
    over to it; pynatsd, which does not lead, passes the leadership on, so the stream has a nats-server
    leader again and takes publishes (the reference: the preferred server leads)."""
    ours, go = cluster[0], cluster.nodes[1:]
    names = {n.name for n in cluster.nodes}
    info = await _info_until(go[0], lambda i: _placed(i) == dict.fromkeys(names, True))
    if info["cluster"]["leader"] == ours.name:  # the reference's stand-in leads: hand over first
        assert (await _stepdown(go[0], go[0].name)).get("success") is True
        info = await _info_until(go[0], lambda i: i["cluster"].get("leader") == go[0].name)
    before, group = info["cluster"]["leader"], info["cluster"]["raft_group"]
    term = go[0].get("/raftz?acc=A")["A"][group]["term"]
    # Every member heard from the leader (the member restarted by the test before may not have yet).
    await _until(lambda: _group_leaders(cluster, group) == {peer_id(before)}, "a member without the leader")
    answer = await _stepdown(go[0], ours.name)
    assert answer == {"type": "io.nats.jetstream.api.v1.stream_leader_stepdown_response", "success": True}
    info = await _info_until(go[0], lambda i: i["cluster"].get("leader") not in (None, "", before))
    leader = info["cluster"]["leader"]
    if ours.kind == "nats-server":
        assert leader == ours.name
    else:  # pynatsd led for a term, to hand over to the other nats-server
        assert leader in {n.name for n in go} - {before}
        assert go[0].get("/raftz?acc=A")["A"][group]["term"] >= term + 2
    assert await _publish(go[0], COUNT, 1) == [COUNT + 1]


def test_stepdown_preferring_the_member(cluster: Cluster) -> None:
    asyncio.run(_stepdown_to_ours(cluster))


async def _meta_leader_not(cluster: Cluster, node: Node) -> None:
    """The meta group led by another server than `node` (the reference's stand-in may lead it)."""
    go = [n for n in cluster.nodes if n is not node]
    if _leader(cluster, go) == node.name:
        async with await nats.connect(f"nats://sys:sys@127.0.0.1:{go[0].port}") as nc:
            body = json.dumps({"placement": {"preferred": go[0].name}}).encode()
            await nc.request("$JS.API.META.LEADER.STEPDOWN", body, timeout=10)
    await _until(lambda: _leader(cluster, go) not in ("", node.name), "the meta leader did not move")


async def _restart(cluster: Cluster) -> None:
    """A stream deleted while the member was down leaves no replica behind once it caught up with the meta
    group, though its assignment was the last entry of the member's log, never known committed there; the
    member's STATSZ reaches the meta leader before it is current again, so a stream created right then
    counts it among its peers (a stopped server is offline for the meta leader until its next STATSZ)."""
    ours, go = cluster[0], cluster.nodes[1:]
    names = {n.name for n in cluster.nodes}
    await _meta_leader_not(cluster, ours)
    config = {"name": "GONE", "subjects": ["gone"], "num_replicas": 3}
    assert "error" not in await _request(go[0], "$JS.API.STREAM.CREATE.GONE", config)
    info = await _info_until(go[0], lambda i: _placed(i) == dict.fromkeys(names, True), "GONE")
    cluster.stop(ours)
    if ours.kind == "pynatsd":  # and what a crash may leave: a group directory no assignment names
        replicas = cluster.workdir / "js0" / "_js_"
        shutil.copytree(replicas / info["cluster"]["raft_group"], replicas / "S-R3F-orphaned")
    for stream in ("ORDERS", "GONE"):
        # (Asked again when the first answer did not come in time: then the stream is already gone.)
        deleted = await _request(go[0], f"$JS.API.STREAM.DELETE.{stream}", {})
        assert deleted.get("success") is True or deleted["error"]["err_code"] == 10059, deleted
        gone = await _request(go[0], f"$JS.API.STREAM.INFO.{stream}", {})
        assert gone["error"]["err_code"] == 10059, gone
    await asyncio.to_thread(cluster.start, ours)
    await _until(lambda: _current(cluster, ours.name), f"{ours.name} not current after its restart")
    config = {"name": "AFTER", "subjects": ["after"], "num_replicas": 3}
    created = await _request(go[0], "$JS.API.STREAM.CREATE.AFTER", config)
    assert "error" not in created, created
    info = await _info_until(go[0], lambda i: set(_placed(i)) == names, "AFTER")
    if ours.kind == "pynatsd":
        group = info["cluster"]["raft_group"]
        await _until(lambda: _groups(cluster) == {group}, f"stale replica directories: {_groups(cluster)}")


def test_restart_leaves_no_stale_replica(cluster: Cluster) -> None:
    asyncio.run(_restart(cluster))


STATSZ_LATE_ROUTE = 8.0  # pynatsd's STATSZ ticks (0.25 s, doubling) found no listener this long


def test_statsz_as_soon_as_a_route_listens(tmp_path: Path) -> None:
    """A member whose routes come up late (a restart: its peers reconnect, or come back later) announces its
    STATSZ, which makes it placeable, within a tick of them: before the nats-server it routes to sent its
    own fourth (its cadence: 0.25, 0.75, 1.75, 3.75 s after its start), not at pynatsd's next doubled tick
    (15.75 s after its start, 7.75 s after the route)."""
    need_tool(nats_server_binary() is not None, "nats-server")
    go_port, ours_port = free_port(), free_port()
    config = tmp_path / "py.conf"
    config.write_text(
        node_config("py0", "statsz", ours_port, go_port)
        + CONFIG
        + f"jetstream {{ store_dir: '{tmp_path}/js' }}\n"
    )
    ours = start_server("pynatsd", ["-c", str(config)])
    try:
        asyncio.run(_statsz_order(tmp_path, go_port, ours))
    finally:
        ours.stop()


async def _statsz_order(tmp_path: Path, go_port: int, ours: ServerProcess) -> None:
    await asyncio.sleep(STATSZ_LATE_ROUTE)  # nothing to await: pynatsd's route finds no one listening
    config = tmp_path / "go.conf"
    config.write_text(node_config("go0", "statsz", go_port, None) + CONFIG)
    go = start_server("nats-server", ["-c", str(config)])
    try:
        async with await nats.connect(f"nats://sys:sys@127.0.0.1:{go.port}") as nc:
            statsz = await nc.subscribe("$SYS.SERVER.*.STATSZ")
            theirs = 0
            while True:
                msg = await statsz.next_msg(timeout=30)
                name = json.loads(msg.data)["server"]["name"]
                if name == "py0":
                    break
                theirs += 1
            assert theirs < 4, f"pynatsd's first STATSZ came after {theirs} of nats-server's"
    finally:
        go.stop()
