"""pynatsd's RAFT node (pynatsd.raft.node) as a follower and voter of a real nats-server cluster's meta
group `_meta_`, beside the reference where that member is a nats-server.

nats-server's meta group is not a managed one: its leader adds as a member any peer that answers its
append entries, once it has caught that peer up (raft.go: trackPeer, runCatchup). Two JetStream
nats-server nodes bootstrap it with the two of them; a RaftNode speaking for the pynatsd node (its peer
name is getHash of pynatsd's server name), driven over a system-account connection to that node
(tests/raft/peer.py; the node does not run it in-process yet), becomes the third member. It must be
reported current, store and ack meta appends, give the vote that lets the surviving nats-server lead
when the other stops, and catch up after a restart.

The reference layout has a JetStream nats-server in pynatsd's place; the same actions must succeed."""

from __future__ import annotations

import asyncio
import random
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nats
import nats.errors
import pytest
from nats.js.errors import APIError, ServiceUnavailableError

from pynatsd.raft.codec import META_GROUP, EntryType, PeerState, peer_id
from pynatsd.raft.meta import EntryOp, decode_meta_entry
from pynatsd.raft.node import RaftNode
from pynatsd.raft.storage import FileStorage
from tests.cluster.harness import Cluster, Node, build_cluster, wait_until
from tests.conftest import need_tool
from tests.raft.peer import ClientPeer
from tests.servers import nats_server_binary

pytestmark = pytest.mark.timeout(240)

CONFIG = (
    "accounts {\n"
    "  A: { jetstream: enabled, users: [{user: a, password: a}] }\n"
    "  SYS: { users: [{user: sys, password: sys}] }\n"
    "}\n"
    "system_account: SYS\n"
)
WAIT = 60.0  # elections take 4-9 s each (nats-server's timeouts), more on a loaded machine


def _start(kinds: list[str], workdir: Path, js: list[bool]) -> Cluster:
    """The cluster with JetStream where `js` says; a JetStream seed routes to itself, for nats-server
    refuses a JetStream cluster node without a configured route."""

    def extra(index: int, wd: Path) -> str:
        return CONFIG + (f"jetstream {{ store_dir: '{wd}/js{index}' }}\n" if js[index] else "")

    cluster = build_cluster(kinds, workdir, node_extra=extra)
    seed = cluster[0]
    if js[0]:
        text = seed.config.read_text()
        route = f"  routes: [nats-route://127.0.0.1:{seed.cluster_port}]\n"
        seed.config.write_text(text.replace("cluster {\n", "cluster {\n" + route, 1))
    try:
        cluster.start(seed)
        with ThreadPoolExecutor(len(cluster.nodes) - 1) as pool:
            for started in [pool.submit(cluster.start, n) for n in cluster.nodes[1:]]:
                started.result()
        cluster.wait_mesh()
    except BaseException:
        cluster.stop_all()
        raise
    return cluster


@pytest.fixture(params=["pynatsd", "nats-server"])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    need_tool(nats_server_binary() is not None, "nats-server")
    kind = str(request.param)
    with tempfile.TemporaryDirectory(prefix="pynatsd-meta-") as workdir:
        js = [kind == "nats-server", True, True]
        cluster = _start([kind, "nats-server", "nats-server"], Path(workdir), js)
        try:
            yield cluster
        finally:
            cluster.stop_all()


def _meta(node: Node) -> dict[str, object]:
    return dict(node.get("/jsz").get("meta_cluster") or {})


def _leader(cluster: Cluster, among: list[Node]) -> str:
    leaders = {str(_meta(n).get("leader") or "") for n in among if n.running}
    return leaders.pop() if len(leaders) == 1 else ""


def _healthy(node: Node) -> bool:
    try:
        return bool(node.get("/healthz").get("status") == "ok")
    except (OSError, ValueError):  # 503 while not current
        return False


def _current(cluster: Cluster, name: str) -> bool:
    """`name` is a current member of `_meta_` in its leader's view (a nats-server follower tracks only its
    leader, and reports every other member not current)."""
    running = [n for n in cluster.nodes if n.running]
    leader = _leader(cluster, [n for n in running if n.kind == "nats-server"])
    if leader == name:
        return True
    node = next((n for n in running if n.name == leader), None)
    if node is None:
        return False
    replicas = _meta(node).get("replicas") or []
    assert isinstance(replicas, list)
    return any(r.get("name") == name and r.get("current") for r in replicas)


async def _until(check: object, what: str) -> None:
    await asyncio.to_thread(wait_until, check, WAIT, lambda: what)  # type: ignore[arg-type]


async def _create(node: Node, name: str) -> str:
    """A stream created through `node` (asked again while the meta group settles after a change: a
    request in that window times out or is answered 10008, with either layout); the server its single
    replica was placed on. Creating the same stream again is answered as the first time."""
    deadline = asyncio.get_running_loop().time() + WAIT
    async with await nats.connect(f"nats://a:a@127.0.0.1:{node.port}") as nc:
        while True:
            try:
                info = await nc.jetstream().add_stream(name=name, subjects=[name.lower()], num_replicas=1)
                break
            except (nats.errors.TimeoutError, ServiceUnavailableError) as e:
                assert asyncio.get_running_loop().time() < deadline, f"{name} not created: {e!r}"
            except APIError as e:
                if e.err_code != 10008:
                    raise
                assert asyncio.get_running_loop().time() < deadline, f"{name} not created: {e!r}"
        assert info.cluster is not None
        return str(info.cluster.leader)


def _assigned(peer: ClientPeer) -> dict[str, list[str]]:
    """The streams whose assignment the RaftNode applied from the meta group's log: their peers."""
    names = {}
    for _, entries in peer.applied:
        for e in entries:
            if e.type == EntryType.NORMAL and e.data[:1] == bytes((EntryOp.ASSIGN_STREAM,)):
                _, assignment = decode_meta_entry(e.data)
                assert assignment is not None
                names[assignment["stream"]["name"]] = list(assignment["group"]["peers"])
    return names


async def _our_peer(cluster: Cluster, store: Path) -> ClientPeer:
    """The RaftNode speaking for node 0 (pynatsd) in `_meta_`, restarted from `store` each time."""
    nc = await nats.connect(f"nats://sys:sys@127.0.0.1:{cluster[0].port}")
    storage = FileStorage(store)
    if storage.load_peer_state() is None:
        storage.save_peer_state(PeerState((), 0))  # a newcomer: the leader's entries tell it the members
    now = asyncio.get_running_loop().time()
    # An observer (nats-server's notion): it follows, acks and votes, but never campaigns, so it never
    # becomes a meta leader, which would have to serve the JetStream API.
    node = RaftNode(META_GROUP, peer_id(cluster[0].name), storage, [], now, random.Random(), observer=True)
    peer = ClientPeer(nc, node)
    peer.start()
    return peer


async def _scenario(cluster: Cluster, store: Path) -> None:
    ours = cluster[0]
    go = cluster.nodes[1:]
    everyone = cluster.nodes if ours.kind == "nats-server" else go
    await _until(lambda: _leader(cluster, everyone) != "", "no meta leader")
    peer = await _our_peer(cluster, store) if ours.kind == "pynatsd" else None
    try:
        # Current in the meta group, as every nats-server node reports it.
        await _until(lambda: _current(cluster, ours.name), f"{ours.name} not current")
        placed = await _create(go[0], "ONE")
        if peer is not None:
            await _until(lambda: "ONE" in _assigned(peer), "the stream's assignment not applied")
            # Never sent a JetStream statsz, so not selectable: nats-server places nothing on it.
            assert placed != ours.name and peer.node.id not in _assigned(peer)["ONE"]

        # The meta leader stops: the other nats-server leads, with our vote when we are pynatsd.
        leader = _leader(cluster, everyone)
        stopped = next((n for n in go if n.name == leader), go[0])
        survivor = next(n for n in go if n is not stopped)
        cluster.stop(stopped)
        running = [n for n in everyone if n.running]
        await _until(
            lambda: _leader(cluster, running) not in ("", stopped.name), "no meta leader after the stop"
        )
        await _create(survivor, "TWO")
        if peer is not None:
            await _until(lambda: "TWO" in _assigned(peer), "the second assignment not applied")
        await asyncio.to_thread(cluster.start, stopped)

        # Our member restarts and misses a stream's creation: it catches up.
        if peer is not None:
            await peer.stop()
            await peer.nc.close()
        else:
            cluster.stop(ours)
        await _until(lambda: _leader(cluster, go) != "", "no meta leader among the nats-server nodes")
        # Until the restarted nats-server is current again: before, the group (two of three members up)
        # has no quorum, and a create waits out the client's timeout, in both layouts.
        await _until(lambda: all(_healthy(n) for n in go), "the restarted node not current")
        await _create(survivor, "THREE")
        if peer is not None:
            peer = await _our_peer(cluster, store)
            # From the log, or from the leader's snapshot (S2-compressed, not decoded here): then by index.
            target = _committed(go)
            await _until(lambda: "THREE" in _assigned(peer) or peer.node.commit >= target, "no catch-up")
        else:
            await asyncio.to_thread(cluster.start, ours)
        await _until(lambda: _current(cluster, ours.name), f"{ours.name} not current after its restart")
    finally:
        if peer is not None:
            await peer.stop()
            await peer.nc.close()


def _committed(nodes: list[Node]) -> int:
    """The meta group's highest commit index among `nodes` (/raftz)."""
    groups = [
        n.get(f"/raftz?group={META_GROUP}").get("SYS", {}).get(META_GROUP, {}) for n in nodes if n.running
    ]
    return max(int(g.get("committed", 0)) for g in groups)


def test_meta_member_follows_votes_and_catches_up(cluster: Cluster, tmp_path: Path) -> None:
    asyncio.run(_scenario(cluster, tmp_path / "meta"))
