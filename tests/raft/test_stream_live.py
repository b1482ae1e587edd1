"""pynatsd as a follower replica of a replicated stream in a cluster of nats-server nodes
(pynatsd.raft.replica), beside the reference where a nats-server stands in its place.

pynatsd's meta member advertises JetStream in its STATSZ, so nats-server's meta leader places an R3 stream's
peers on the two nats-server nodes and on it. Its replica follows and votes, never leads: the stream leader
is a nats-server, which lists the replica current. After acked publishes its store holds exactly the
stream's messages; when the stream leader is killed (kill -9), the other nats-server leads with pynatsd's
vote, publishing goes on and no acknowledged message is lost."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
from nats.js.errors import APIError, NoStreamResponseError

from pynatsd.jetstream.store.file import FileStore
from pynatsd.raft.codec import AppendEntry, EntryType
from pynatsd.raft.meta import EntryOp
from pynatsd.raft.storage import FileStorage
from tests.cluster.harness import Cluster, Node
from tests.raft.test_meta_live import _current, _leader, _until, mixed_cluster

pytestmark = pytest.mark.timeout(240)

FIRST, MORE = 1500, 300
BIG, BIG_SIZE = 72, 128 * 1024
WAIT = 60.0


def _payload(i: int) -> bytes:
    """Some are past nats-server's 8 KiB threshold: their entries are S2-compressed."""
    return f"m{i}".encode() * (2000 if i % 500 == 7 else 1)


@pytest.fixture(scope="module", params=["pynatsd", "nats-server"])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    with mixed_cluster(str(request.param)) as cluster:
        yield cluster


async def _request(node: Node, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    """A JetStream API request through `node`, asked again while its cluster elects (a timeout or 10008)."""
    deadline = asyncio.get_running_loop().time() + WAIT
    async with await nats.connect(f"nats://a:a@127.0.0.1:{node.port}") as nc:
        while True:
            try:
                msg = await nc.request(subject, json.dumps(body).encode(), timeout=5)
                answer: dict[str, Any] = json.loads(msg.data)
                error = answer.get("error") or {}
                if error.get("err_code") not in (10008, 10074):  # unavailable, no stream leader yet
                    return answer
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                pass
            assert asyncio.get_running_loop().time() < deadline, f"{subject}: no answer"
            await asyncio.sleep(0.5)


async def _publish(
    node: Node, start: int, count: int, payload: Callable[[int], bytes] = _payload, batch: int = 100
) -> list[int]:
    """`count` acked publishes through `node` (retried while the stream elects a leader); their sequences."""
    seqs: list[int] = []
    async with await nats.connect(f"nats://a:a@127.0.0.1:{node.port}") as nc:
        js = nc.jetstream(timeout=5)

        async def one(i: int) -> int:
            deadline = asyncio.get_running_loop().time() + WAIT
            while True:
                try:
                    ack = await js.publish(f"orders.{i % 7}", payload(i), headers={"Nats-Msg-Id": str(i)})
                    return int(ack.seq)
                except (nats.errors.TimeoutError, NoStreamResponseError, APIError) as e:
                    assert asyncio.get_running_loop().time() < deadline, f"publish {i} never acked: {e!r}"
                    await asyncio.sleep(0.2)

        for base in range(start, start + count, batch):
            seqs += await asyncio.gather(*(one(i) for i in range(base, min(base + batch, start + count))))
    return seqs


async def _stream_messages(node: Node, count: int) -> dict[int, tuple[str, bytes]]:
    """Every message of the stream (sequence -> subject, payload), read through an ordered consumer."""
    out: dict[int, tuple[str, bytes]] = {}
    async with await nats.connect(f"nats://a:a@127.0.0.1:{node.port}") as nc:
        deadline = asyncio.get_running_loop().time() + WAIT
        while True:  # the consumer is created by the meta leader, which may be in an election
            try:
                sub = await nc.jetstream().subscribe("orders.>", ordered_consumer=True)
                break
            except (nats.errors.TimeoutError, APIError):  # 10023 when placed on pynatsd (see below)
                assert asyncio.get_running_loop().time() < deadline, "no ordered consumer"
        while len(out) < count:
            msg = await sub.next_msg(timeout=WAIT)
            out[msg.metadata.sequence.stream] = (msg.subject, msg.data)
    return out


def _replica(info: dict[str, Any], name: str) -> dict[str, Any]:
    return next((r for r in info.get("cluster", {}).get("replicas") or () if r["name"] == name), {})


async def _info_until(
    node: Node, check: Callable[[dict[str, Any]], bool], stream: str = "ORDERS"
) -> dict[str, Any]:
    """The stream's info through `node` once `check` holds for it."""
    deadline = asyncio.get_running_loop().time() + WAIT
    while True:
        info = await _request(node, f"$JS.API.STREAM.INFO.{stream}", {})
        if check(info):
            return info
        assert asyncio.get_running_loop().time() < deadline, json.dumps(
            [info.get("cluster"), info.get("state")]
        )
        await asyncio.sleep(0.3)


async def _settled(node: Node, ours: str, last_seq: int) -> dict[str, Any]:
    """Stream info once `ours` is a current replica with no lag and the stream is at `last_seq`."""

    def settled(info: dict[str, Any]) -> bool:
        if info["state"]["last_seq"] != last_seq:
            return False
        if info["cluster"].get("leader") == ours:  # the reference's stand-in may lead after a kill
            return True
        replica = _replica(info, ours)
        return bool(replica.get("current") and not replica.get("lag"))

    return await _info_until(node, settled)


async def _scenario(cluster: Cluster) -> None:
    ours = cluster[0]
    go = cluster.nodes[1:]
    await _until(lambda: _leader(cluster, go) != "", "no meta leader")
    await _until(lambda: _current(cluster, ours.name), f"{ours.name} not current")
    config = {"name": "ORDERS", "subjects": ["orders.>"], "num_replicas": 3}
    created = await _request(go[0], "$JS.API.STREAM.CREATE.ORDERS", config)
    assert "error" not in created, created
    # When the meta leader made pynatsd the group's preferred peer, which never campaigns, the first leader
    # is elected once a nats-server's election timeout (4-9 s) passed: the create may be answered before.
    info = await _info_until(go[0], lambda info: bool(info.get("cluster", {}).get("leader")))
    placed = {info["cluster"]["leader"], *(r["name"] for r in info["cluster"].get("replicas") or ())}
    assert placed == {n.name for n in cluster.nodes}
    assert info["cluster"]["leader"] != ours.name or ours.kind == "nats-server"
    if info["cluster"]["leader"] == ours.name:
        # The reference's stand-in leads: hand over, so the same server is killed in both layouts.
        await _request(go[0], "$JS.API.STREAM.LEADER.STEPDOWN.ORDERS", {})

    seqs = await _publish(go[0], 0, FIRST)
    assert sorted(seqs) == list(range(1, FIRST + 1))
    info = await _settled(go[0], ours.name, FIRST)
    assert info["state"]["messages"] == FIRST
    leader = info["cluster"]["leader"]
    assert leader != ours.name

    # The stream leader dies: the other nats-server leads (pynatsd's vote makes its quorum).
    dead = next(n for n in go if n.name == leader)
    survivor = next(n for n in go if n is not dead)
    cluster.kill(dead)
    seqs = await _publish(survivor, FIRST, MORE)
    assert sorted(seqs) == list(range(FIRST + 1, FIRST + MORE + 1))
    info = await _settled(survivor, ours.name, FIRST + MORE)
    # pynatsd never leads; the reference's stand-in may.
    assert info["cluster"]["leader"] in (survivor.name, ours.name if ours.kind == "nats-server" else "")
    assert info["state"]["messages"] == FIRST + MORE
    assert _replica(info, dead.name).get("current") is not True
    through_ours = await _request(ours, "$JS.API.STREAM.INFO.ORDERS", {})  # answered by the stream leader
    assert through_ours["state"]["last_seq"] == FIRST + MORE and through_ours["cluster"]["leader"]
    stored = await _stream_messages(survivor, FIRST + MORE)
    assert sorted(stored) == list(range(1, FIRST + MORE + 1))  # concurrent publishes: in any order
    assert set(stored.values()) == {(f"orders.{i % 7}", _payload(i)) for i in range(FIRST + MORE)}

    # /raftz lists the stream's group under the stream's account, in the same term as the survivor's.
    group = info["cluster"]["raft_group"]
    ours_raftz, survivor_raftz = ours.get("/raftz?acc=A"), survivor.get("/raftz?acc=A")
    assert ours_raftz["A"][group]["term"] == survivor_raftz["A"][group]["term"]
    assert ours_raftz["A"][group].keys() >= {"id", "state", "leader", "committed", "applied", "peers"}

    if ours.kind == "pynatsd":
        # The replica's own store holds exactly the stream's messages (read once the server stopped).
        member = ours.get("/jsz")
        assert member.get("meta_cluster"), member
        cluster.stop(ours)
        groups = list((cluster.workdir / "js0" / "_js_").iterdir())
        assert [g.name for g in groups] == [info["cluster"]["raft_group"]]
        assert _local_messages(groups[0]) == stored, ours.log()[-3000:]
        # Its log holds nats-server's entries as they came, the large messages S2-compressed.
        raft = FileStorage(groups[0] / "raft")
        ops = set()
        for index in range(raft.first_index(), raft.last_index() + 1):
            raw = raft.entry(index)
            assert raw is not None
            ops |= {e.data[0] for e in AppendEntry.decode(raw).entries if e.type == EntryType.NORMAL}
        assert {EntryOp.STREAM_MSG, EntryOp.COMPRESSED_STREAM_MSG} <= ops, ops


def _local_messages(group: Path) -> dict[int, tuple[str, bytes]]:
    """What the replica's file store holds (sequence -> subject, payload)."""
    store = FileStore(group / "msgs")
    try:
        local = {}
        for seq in range(store.first_seq, store.last_seq + 1):
            msg = store.load(seq)
            if msg is not None:  # None: deleted or purged
                local[seq] = (msg.subject.decode(), msg.data)
        assert store.msgs == len(local)
        return local
    finally:
        store.close()


async def _all_running(cluster: Cluster) -> None:
    """Nodes a test before stopped started again (a nats-server's route goes through the seed, node 0)."""
    for node in cluster.nodes:
        if not node.running:
            await asyncio.to_thread(cluster.start, node)


def _big(i: int) -> bytes:
    return random.Random(i).randbytes(BIG_SIZE)  # incompressible


async def _catch_up(cluster: Cluster) -> None:
    ours = cluster[0]
    go = cluster.nodes[1:]
    await _all_running(cluster)  # the stream leader killed in the first test comes back
    total = FIRST + MORE

    def all_current(info: dict[str, Any]) -> bool:
        replicas = info.get("cluster", {}).get("replicas") or ()
        names = {info["cluster"].get("leader")} | {r["name"] for r in replicas if r.get("current")}
        return names >= {n.name for n in cluster.nodes} and info["state"]["last_seq"] == total

    await _info_until(go[0], all_current)
    cluster.stop(ours)
    # More than nats-server's 8 MiB: the stream leader compacts its log behind a snapshot, so the replica
    # restarted behind it gets the snapshot and must catch up over $JSC.CATCHUP.
    seqs = await _publish(go[0], total, BIG, _big, batch=4)
    assert sorted(seqs) == list(range(total + 1, total + BIG + 1))
    await asyncio.to_thread(cluster.start, ours)
    info = await _settled(go[0], ours.name, total + BIG)
    assert info["state"]["messages"] == total + BIG
    stored = await _stream_messages(go[0], total + BIG)
    assert {stored[s] for s in range(total + 1, total + BIG + 1)} == {
        (f"orders.{i % 7}", _big(i)) for i in range(total, total + BIG)
    }
    if ours.kind == "pynatsd":
        log = ours.log()
        cluster.stop(ours)
        assert "caught up" in log, log[-3000:]
        group = cluster.workdir / "js0" / "_js_" / info["cluster"]["raft_group"]
        assert _local_messages(group) == stored, log[-3000:]


def test_stream_replica_follows_and_votes(cluster: Cluster) -> None:
    asyncio.run(_scenario(cluster))


def test_stream_replica_catches_up(cluster: Cluster) -> None:
    """After test_stream_replica_follows_and_votes (the same cluster)."""
    asyncio.run(_catch_up(cluster))


async def _single_replica_consumers(cluster: Cluster) -> None:
    """An R1 consumer of an R3 stream goes to a random peer of the stream: pynatsd, which serves no
    consumers, refuses it (nats-server's 10023 "insufficient resources", relayed by the meta leader) rather
    than leave the client waiting on a consumer that never delivers; the reference serves all."""
    await _all_running(cluster)
    ours, go = cluster[0], cluster.nodes[1:]
    await _info_until(
        go[0],
        lambda info: (
            _replica(info, ours.name).get("current") is True or info["cluster"].get("leader") == ours.name
        ),
    )
    # nats-server takes a peer for offline from its shutdown until its next STATSZ: wait for one.
    async with await nats.connect(f"nats://sys:sys@127.0.0.1:{go[0].port}") as nc:
        statsz = await nc.subscribe("$SYS.SERVER.*.STATSZ")
        while json.loads((await statsz.next_msg(timeout=WAIT)).data)["server"]["name"] != ours.name:
            pass
    placed: dict[str, int] = {}
    for i in range(20):
        config = {"durable_name": f"R1_{i}", "ack_policy": "explicit", "num_replicas": 1}
        body = {"stream_name": "ORDERS", "config": config}
        answer = await _request(go[0], f"$JS.API.CONSUMER.DURABLE.CREATE.ORDERS.R1_{i}", body)
        if "error" in answer:
            assert answer["error"] == {
                "code": 503,
                "err_code": 10023,
                "description": "insufficient resources",
            }
            where = "refused"
        else:
            where = answer["cluster"]["leader"]
        placed[where] = placed.get(where, 0) + 1
    if ours.kind == "pynatsd":
        assert placed.get("refused") and ours.name not in placed, placed
    else:
        assert "refused" not in placed, placed


async def _delete_and_purge(cluster: Cluster) -> None:
    """A message deleted and a purge keeping the last 10 of a subject reach the replica's store too."""
    await _all_running(cluster)
    ours, go = cluster[0], cluster.nodes[1:]
    total = FIRST + MORE + BIG
    deleted = await _request(go[0], "$JS.API.STREAM.MSG.DELETE.ORDERS", {"seq": 5})
    assert deleted == {"type": "io.nats.jetstream.api.v1.stream_msg_delete_response", "success": True}
    purge = {"filter": "orders.3", "keep": 10}
    purged = await _request(go[0], "$JS.API.STREAM.PURGE.ORDERS", purge)
    assert purged["success"] and purged["purged"] > 0
    info = await _settled(go[0], ours.name, total)
    left = info["state"]["messages"]
    assert left == total - 1 - purged["purged"]
    stored = await _stream_messages(go[0], left)
    if ours.kind == "pynatsd":
        cluster.stop(ours)
        group = cluster.workdir / "js0" / "_js_" / info["cluster"]["raft_group"]
        assert _local_messages(group) == stored


def test_single_replica_consumer_refused(cluster: Cluster) -> None:
    asyncio.run(_single_replica_consumers(cluster))


def test_delete_and_purge_reach_the_replica(cluster: Cluster) -> None:
    asyncio.run(_delete_and_purge(cluster))


async def _delete_stream(cluster: Cluster) -> None:
    """A deleted stream's replica stops, its log and store removed."""
    await _all_running(cluster)
    ours, go = cluster[0], cluster.nodes[1:]
    info = await _info_until(go[0], lambda info: _replica(info, ours.name).get("current") is True)
    group = cluster.workdir / "js0" / "_js_" / info["cluster"]["raft_group"]
    assert (await _request(go[0], "$JS.API.STREAM.DELETE.ORDERS", {})).get("success") is True
    gone = await _request(ours, "$JS.API.STREAM.INFO.ORDERS", {})
    assert gone["error"]["err_code"] == 10059  # stream not found, asked through either layout's node 0
    if ours.kind == "pynatsd":
        await _until(lambda: not group.exists(), "the deleted stream's replica directory is still there")


def test_deleted_stream_leaves_no_replica(cluster: Cluster) -> None:
    asyncio.run(_delete_stream(cluster))
