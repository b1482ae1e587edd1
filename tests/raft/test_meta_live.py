"""pynatsd with JetStream in a cluster of nats-server nodes: a member of the meta group `_meta_` run by
the server itself (pynatsd.raft.member), beside the reference where that member is a nats-server.

nats-server's meta group is not a managed one: its leader adds as a member any peer that answers its
append entries, once it has caught that peer up (raft.go: trackPeer, runCatchup). Two JetStream
nats-server nodes bootstrap it with the two of them; pynatsd (its peer id is getHash of its server name)
becomes the third member. It must be reported current, store the meta appends, give the vote that keeps
the cluster's JetStream available when a nats-server stops (for the clients of either node), catch up
after a restart (kill -9 included), and never be given a stream. A cluster of pynatsd nodes alone has no
meta leader: they answer the JetStream API as nats-server answers then.

The reference layout has a JetStream nats-server in pynatsd's place; the same actions must succeed."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import nats
import nats.errors
import pytest
from nats.js.errors import APIError, ServiceUnavailableError

from pynatsd.raft.codec import META_GROUP, AppendEntry, EntryType, VoteRequest, VoteResponse, peer_id
from pynatsd.raft.member import MetaApplier
from pynatsd.raft.meta import EntryOp, MetaState, decode_meta_entry, decode_meta_snapshot
from pynatsd.raft.node import RaftNode
from pynatsd.raft.storage import FileStorage
from tests.cluster.harness import Cluster, Node, build_cluster, wait_until
from tests.conftest import need_tool
from tests.raft.test_codec_live import CONFIG  # the same accounts: A with JetStream, SYS the system
from tests.servers import nats_server_binary

pytestmark = pytest.mark.timeout(240)

WAIT = 60.0  # elections take 4-9 s each (nats-server's timeouts), more on a loaded machine


def _start(
    kinds: list[str], workdir: Path, js: list[bool], prepare: Callable[[Cluster], None] | None = None
) -> Cluster:
    """The cluster with JetStream where `js` says; a nats-server JetStream seed routes to itself, for
    nats-server refuses a JetStream cluster node without a configured route. `prepare` may rewrite the
    nodes' config files before they start (routes through a relay, say)."""

    def extra(index: int, wd: Path) -> str:
        # The member under test compacts its meta log past a few entries (nats-server's option, 0: by time).
        compact = ", meta_compact: 3" if index == 0 else ""
        return CONFIG + (f"jetstream {{ store_dir: '{wd}/js{index}'{compact} }}\n" if js[index] else "")

    cluster = build_cluster(kinds, workdir, node_extra=extra)
    seed = cluster[0]
    if js[0] and seed.kind == "nats-server":
        text = seed.config.read_text()
        route = f"  routes: [nats-route://127.0.0.1:{seed.cluster_port}]\n"
        seed.config.write_text(text.replace("cluster {\n", "cluster {\n" + route, 1))
    if prepare is not None:
        prepare(cluster)
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


@contextmanager
def mixed_cluster(kind: str, prepare: Callable[[Cluster], None] | None = None) -> Iterator[Cluster]:
    """`kind` (pynatsd, or the reference's nats-server) and two nats-server nodes, JetStream on each."""
    need_tool(nats_server_binary() is not None, "nats-server")
    with tempfile.TemporaryDirectory(prefix="pynatsd-raft-") as workdir:
        cluster = _start([kind, "nats-server", "nats-server"], Path(workdir), [True, True, True], prepare)
        try:
            yield cluster
        finally:
            cluster.stop_all()


@pytest.fixture(params=["pynatsd", "nats-server"])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    with mixed_cluster(str(request.param)) as cluster:
        yield cluster


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


def _stored_streams(store: Path) -> tuple[dict[str, list[str]], set[str]]:
    """The streams whose assignment the member stored (its snapshot, then its log): their peers; and the
    streams its snapshot holds."""
    storage = FileStorage(store / META_GROUP)
    streams: dict[str, list[str]] = {}
    snap = storage.load_snapshot()
    if snap is not None:
        streams = {sa["stream"]["name"]: list(sa["group"]["peers"]) for sa in decode_meta_snapshot(snap.data)}
    snapshotted = set(streams)
    first = storage.first_index()
    for index in range(first, storage.last_index() + 1) if first else ():
        raw = storage.entry(index)
        assert raw is not None
        for e in AppendEntry.decode(raw).entries:
            if e.type == EntryType.NORMAL and e.data[:1] == bytes((EntryOp.ASSIGN_STREAM,)):
                _, sa = decode_meta_entry(e.data)
                streams[sa["stream"]["name"]] = list(sa["group"]["peers"])
    return streams, snapshotted


async def _scenario(cluster: Cluster) -> None:
    ours = cluster[0]
    go = cluster.nodes[1:]
    await _until(lambda: _leader(cluster, go) != "", "no meta leader")
    # Current in the meta group, as its leader reports it; the member's own view names that leader.
    await _until(lambda: _current(cluster, ours.name), f"{ours.name} not current")
    await _until(lambda: _meta(ours).get("leader") == _leader(cluster, go), "the member sees no leader")
    meta = _meta(ours)
    assert meta["name"] == cluster.name and meta["cluster_size"] == 3
    assert meta["peer"] == peer_id(str(meta["leader"]))
    listed = meta["replicas"]
    assert isinstance(listed, list)
    replicas = {r["name"]: r for r in listed}
    assert set(replicas) == {n.name for n in go}  # every member but itself
    assert meta["leader"] == ours.name or replicas[meta["leader"]]["current"]
    assert ours.get("/healthz?js-enabled-only=true") == {"status": "ok"}
    assert _healthy(ours)
    # The same fields as a nats-server member shows, for a replica too; its snapshot statistics as theirs
    # (last_duration only once the member has taken a snapshot: Go omits a zero duration).
    other = _meta(next(n for n in go if n.name != meta["leader"]))
    assert set(meta) == set(other), (meta, other)
    stats, their_stats = meta["snapshot"], other["snapshot"]
    assert isinstance(stats, dict) and isinstance(their_stats, dict)
    assert set(stats) - {"last_duration"} == set(their_stats) - {"last_duration"}, (stats, their_stats)
    if ours.kind == "pynatsd":  # the entries since it joined (a nats-server snapshots once it recovered)
        assert stats["pending_entries"] > 0 and stats["pending_size"] > 0
    theirs = other["replicas"]
    assert isinstance(theirs, list)
    if meta["leader"] != ours.name:  # the leader as each follower sees it
        assert set(replicas[meta["leader"]]) == {k for r in theirs if r["name"] == meta["leader"] for k in r}
    for creator, name in ((go[0], "ONE"), (ours, "ONE_VIA_OURS")):
        # Never sent a JetStream statsz, so not selectable: nats-server places nothing on pynatsd.
        assert await _create(creator, name) != ours.name or ours.kind == "nats-server"
    async with await nats.connect(f"nats://a:a@127.0.0.1:{go[0].port}") as nc:
        await nc.jetstream().add_consumer("ONE", durable_name="D")
        await nc.jetstream().add_consumer("ONE_VIA_OURS", durable_name="E")
        await nc.jetstream().delete_consumer("ONE_VIA_OURS", "E")

    # The meta leader stops: the other nats-server leads, with our vote.
    leader = _leader(cluster, go)
    stopped = next((n for n in go if n.name == leader), go[0])
    survivor = next(n for n in go if n is not stopped)
    cluster.stop(stopped)
    await _until(lambda: _leader(cluster, [survivor]) not in ("", stopped.name), "no leader after the stop")
    for creator, name in ((survivor, "TWO"), (ours, "TWO_VIA_OURS")):
        await _create(creator, name)
        async with await nats.connect(f"nats://a:a@127.0.0.1:{creator.port}") as nc:
            ack = await nc.jetstream().publish(name.lower(), b"kept")
            assert ack.stream == name and ack.seq == 1
    await asyncio.to_thread(cluster.start, stopped)

    # Our member is killed and misses a stream's creation: it catches up after its restart. (The reference
    # stops gracefully: a nats-server killed is still selectable until its statsz goes stale, and a stream
    # placed on it is never created.)
    if ours.kind == "pynatsd":
        # It compacted behind snapshots of its own: its log holds about the threshold's entries.
        stats = _meta(ours)["snapshot"]
        assert isinstance(stats, dict) and stats.get("last_duration", 0) > 0, stats
        assert stats["pending_entries"] <= 8, stats
        cluster.kill(ours)
    else:
        cluster.stop(ours)
    # Until the restarted nats-server is current again: before, the group (two of three members up)
    # has no quorum, and a create waits out the client's timeout, in both layouts.
    await _until(lambda: all(_healthy(n) for n in go), "the restarted node not current")
    await _create(survivor, "THREE")
    # A new meta leader installs a snapshot (jetstream_cluster.go, monitorCluster): its log no longer
    # holds what the restarted member missed, so the catch-up starts with that S2-compressed snapshot.
    before = _leader(cluster, go)
    # The successor named: left to chance, the leader may hand over to the member just killed (still current
    # in its view), and once no leader came within 60 s.
    successor = next(n.name for n in go if n.name != before)
    stepdown = json.dumps({"placement": {"preferred": successor}}).encode()
    async with await nats.connect(f"nats://sys:sys@127.0.0.1:{survivor.port}") as nc:
        await nc.request("$JS.API.META.LEADER.STEPDOWN", stepdown, timeout=10)
    await _until(lambda: _leader(cluster, go) not in ("", before), "no new meta leader")
    await asyncio.to_thread(cluster.start, ours)
    await _until(lambda: _current(cluster, ours.name), f"{ours.name} not current after its restart")
    if ours.kind == "pynatsd":
        cluster.stop(ours)
        stored, snapshotted = await asyncio.to_thread(_stored_streams, cluster.workdir / "js0")
        names = {"ONE", "ONE_VIA_OURS", "TWO", "TWO_VIA_OURS", "THREE"}
        assert names <= set(stored) and "THREE" in snapshotted, (stored, snapshotted)
        assert all(peer_id(ours.name) not in peers for peers in stored.values())
        # What the member applied, reloaded from its directory as a restart loads it, is the leader's view;
        # the snapshot it took from the leader, re-encoded by the member, holds the same assignments.
        applier = await asyncio.to_thread(_reloaded, cluster.workdir / "js0")
        view = {name: sorted(applier.state.consumers[acc, name]) for acc, name in applier.state.streams}
        assert view == await _leader_view(survivor), view
        snap = FileStorage(cluster.workdir / "js0" / META_GROUP).load_snapshot()
        assert snap is not None
        ours_again = MetaState()
        ours_again.load_snapshot(snap.data)
        assert _by_name(decode_meta_snapshot(ours_again.encode_snapshot())) == _by_name(
            _snap_view(decode_meta_snapshot(snap.data))
        )


def _reloaded(store: Path) -> MetaApplier:
    node = RaftNode(META_GROUP, "RELOADED", FileStorage(store / META_GROUP), [], 0.0, observer=True)
    applier = MetaApplier(node)
    applier.apply(node.take_applied())
    return applier


async def _leader_view(node: Node) -> dict[str, list[str]]:
    """Account A's streams and their consumers, as `$JS.API.STREAM.NAMES` and `CONSUMER.NAMES` list them."""
    async with await nats.connect(f"nats://a:a@127.0.0.1:{node.port}") as nc:
        reply = await nc.request("$JS.API.STREAM.NAMES", b"{}", timeout=10)
        view = {}
        for name in json.loads(reply.data)["streams"]:
            reply = await nc.request(f"$JS.API.CONSUMER.NAMES.{name}", b"{}", timeout=10)
            view[name] = sorted(json.loads(reply.data)["consumers"] or [])
        return view


def _snap_view(streams: list[dict[str, object]]) -> list[dict[str, object]]:
    """nats-server's snapshot as our encoder writes it: the same fields, `stream` only where nats-server
    omitted it on a consumer (it rehydrates it from the stream, jetstream_cluster.go decodeMetaSnapshot)."""
    for sa in streams:
        for ca in sa.get("Consumers") or []:  # type: ignore[attr-defined]
            ca.setdefault("stream", sa["stream"]["name"])  # type: ignore[index]
    return streams


def _by_name(streams: list[dict[str, object]]) -> dict[object, object]:
    return {
        sa["stream"]["name"]: {**sa, "Consumers": sorted(sa["Consumers"] or [], key=lambda c: c["name"])}  # type: ignore[index,call-overload,arg-type]
        for sa in streams
    }


def test_meta_member_follows_votes_and_catches_up(cluster: Cluster) -> None:
    asyncio.run(_scenario(cluster))


def test_pynatsd_alone_has_no_meta_leader(tmp_path: Path) -> None:
    """Three pynatsd members and no nats-server: no one may lead, so no JetStream; clients get nats-server's
    answer for a meta group without a leader (once it has had none for 10 s), never a JetStream of one
    node (split brain), never silence."""
    cluster = _start(["pynatsd"] * 3, tmp_path, [True] * 3)
    try:
        for node in cluster.nodes:
            assert node.get("/healthz?js-enabled-only=true") == {"status": "ok"}
            assert "leader" not in _meta(node)
        asyncio.run(_leaderless(cluster[1]))
        asyncio.run(_answers_only_nrg_inboxes(cluster))
        with pytest.raises(OSError, match="503"):
            cluster[2].get("/healthz")
    finally:
        cluster.stop_all()


async def _leaderless(node: Node) -> None:
    unavailable = {"code": 503, "err_code": 10008, "description": "JetStream system temporarily unavailable"}
    deadline = asyncio.get_running_loop().time() + WAIT
    async with await nats.connect(f"nats://a:a@127.0.0.1:{node.port}") as nc:
        while True:  # no responders until nats-server's 10 s without a leader have passed
            try:
                msg = await nc.request("$JS.API.STREAM.CREATE.S", b'{"name":"S"}', timeout=2)
                break
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.5)
        answer = json.loads(msg.data)
        assert answer == {"type": "io.nats.jetstream.api.v1.stream_create_response", "error": unavailable}
        with pytest.raises(APIError) as info:
            await nc.jetstream().account_info()
        assert info.value.err_code == 10008


async def _answers_only_nrg_inboxes(cluster: Cluster) -> None:
    """A vote request names its answer's subject: a member answers on an NRG inbox only, so a system
    account user cannot make the server publish elsewhere in its own name."""
    async with await nats.connect(f"nats://sys:sys@127.0.0.1:{cluster[0].port}") as nc:
        elsewhere = await nc.subscribe("elsewhere")
        answers = await nc.subscribe("$NRG.R.probe")
        await nc.flush()
        await asyncio.to_thread(cluster.wait_interest, "$NRG.R.probe", cluster.nodes[1:], [cluster[0]])
        request = VoteRequest(0, 0, 0, "probe123").encode()
        for reply in ("elsewhere", "$NRG.R.probe"):
            await nc.publish(f"$NRG.V.{META_GROUP}", request, reply=reply)
        voters: set[str] = set()
        while len(voters) < len(cluster.nodes):  # each member answers in order: the first would come first
            voters.add(VoteResponse.decode((await answers.next_msg(timeout=WAIT)).data).peer)
        assert voters == {peer_id(n.name) for n in cluster.nodes}
        assert elsewhere.pending_msgs == 0
