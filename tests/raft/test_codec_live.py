"""The NRG codec on real traffic: a 3-node nats-server JetStream cluster runs elections, meta and stream
groups, a stepdown and a catch-up while a system-account client records every `$NRG.>` message; each one
decodes with pynatsd.raft.codec and encodes back to the same bytes."""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from pathlib import Path

import nats
import pytest
from nats.aio.msg import Msg
from nats.js.errors import ServiceUnavailableError

from pynatsd.raft.codec import (
    APPEND_ENTRY_RESPONSE_LEN,
    ID_LEN,
    META_GROUP,
    VOTE_RESPONSE_LEN,
    AppendEntry,
    AppendEntryResponse,
    EntryType,
    PeerState,
    VoteRequest,
    VoteResponse,
    group_of,
    peer_id,
)
from pynatsd.raft.meta import META_JSON_OPS, EntryOp, decode_meta_entry, encode_meta_entry
from tests.cluster.harness import Cluster, Node, running_cluster, wait_until
from tests.conftest import need_tool
from tests.servers import nats_server_binary

pytestmark = pytest.mark.timeout(180)

CONFIG = (
    "accounts {\n"
    "  A: { jetstream: enabled, users: [{user: a, password: a}] }\n"
    "  SYS: { users: [{user: sys, password: sys}] }\n"
    "}\n"
    "system_account: SYS\n"
)


def _extra(index: int, workdir: Path) -> str:
    """Node 0, the seed, has no routes of its own to solicit, which a JetStream cluster node needs: it
    runs without JetStream and is where the test's clients connect."""
    return CONFIG + (f"jetstream {{ store_dir: '{workdir}/js{index}' }}\n" if index else "")


def _meta_leader(cluster: Cluster) -> str:
    running = [n for n in cluster.nodes[1:] if n.running]
    leaders = {str((n.get("/jsz").get("meta_cluster") or {}).get("leader") or "") for n in running}
    return leaders.pop() if len(leaders) == 1 else ""


def _current(cluster: Cluster) -> bool:
    def ok(node: Node) -> bool:
        try:
            return bool(node.get("/healthz").get("status") == "ok")
        except (OSError, ValueError):  # 503 while not current
            return False

    return all(ok(n) for n in cluster.nodes[1:] if n.running)


def _wait_ready(cluster: Cluster) -> None:
    wait_until(lambda: _meta_leader(cluster) != "", 60, lambda: f"no meta leader:\n{cluster.describe()}")
    wait_until(lambda: _current(cluster), 60, lambda: f"not current:\n{cluster.describe()}")


async def _capture(cluster: Cluster) -> list[tuple[str, str, bytes]]:
    """Every NRG message one node saw while the cluster did the work of a JetStream user."""
    captured: list[tuple[str, str, bytes]] = []
    spy = await nats.connect(f"nats://sys:sys@127.0.0.1:{cluster[0].port}")

    async def record(msg: Msg) -> None:
        captured.append((msg.subject, msg.reply, msg.data))

    await spy.subscribe("$NRG.>", cb=record)
    await spy.flush()
    cluster.wait_interest("$NRG.>", cluster.nodes[1:], [cluster[0]])
    nc = await nats.connect(f"nats://a:a@127.0.0.1:{cluster[0].port}")
    js = nc.jetstream()
    await js.add_stream(name="R3", subjects=["r3.>"], num_replicas=3)
    # Go's JSON encoder escapes <, > and & and keeps other text as UTF-8: the meta entry shows it.
    await js.add_stream(name="R1", subjects=["r1.>"], num_replicas=1, description="<a & b> é")
    for i in range(20):
        await js.publish(f"r3.{i % 3}", b"x" * i)
        await js.publish("r1.x", b"y")
    sub = await js.pull_subscribe("r3.>", "worker", stream="R3")
    acked = 0
    while acked < 10:  # acks replicate in the consumer's group
        try:
            batch = await sub.fetch(10 - acked, timeout=2)
        except (TimeoutError, ServiceUnavailableError):
            # The consumer leader's interest reaches this node after the create's answer (the reference's
            # own behaviour; tests/jscluster/test_mixed.py measured it): pull again.
            continue
        for msg in batch:
            await msg.ack_sync()
        acked += len(batch)
    kv = await js.create_key_value(bucket="kv", replicas=3)
    await kv.put("k", b"v")
    await js.delete_consumer("R3", "worker")
    await js.delete_stream("R1")
    await nc.close()

    # A stepdown: a new election, a new leader's peer state.
    before = _meta_leader(cluster)
    await spy.request("$JS.API.META.LEADER.STEPDOWN", b"", timeout=10)
    await asyncio.to_thread(
        wait_until, lambda: _meta_leader(cluster) not in ("", before), 60, lambda: "no new meta leader"
    )
    # A lagging follower: a node other than the leader misses a stream's creation and catches up on its
    # return.
    leader = _meta_leader(cluster)
    lagging = next(n for n in cluster.nodes[1:] if n.name != leader)
    await asyncio.to_thread(cluster.stop, lagging)
    nc = await nats.connect(f"nats://a:a@127.0.0.1:{cluster[0].port}")
    await nc.jetstream().add_stream(name="LATE", subjects=["late"], num_replicas=1)
    await nc.close()
    await asyncio.to_thread(cluster.start, lagging)
    await asyncio.to_thread(_wait_ready, cluster)
    await spy.flush()
    await spy.close()
    return captured


def test_every_captured_nrg_message_round_trips() -> None:
    need_tool(nats_server_binary() is not None, "nats-server")
    with (
        tempfile.TemporaryDirectory(prefix="pynatsd-nrg-") as workdir,
        running_cluster(["nats-server"] * 4, Path(workdir), node_extra=_extra) as cluster,
    ):
        _wait_ready(cluster)
        captured = asyncio.run(_capture(cluster))
        names = {peer_id(n.name) for n in cluster.nodes[1:]}

    kinds: Counter[str] = Counter()
    entry_types: Counter[EntryType] = Counter()
    meta_ops: Counter[EntryOp] = Counter()
    for subject, reply, data in captured:
        kind, rest = group_of(subject)
        if kind == "V":
            vr = VoteRequest.decode(data)
            assert vr.encode() == data and vr.candidate in names
            assert group_of(reply)[0] == "R"
        elif kind in ("AE", "CR"):
            ae = AppendEntry.decode(data)
            assert ae.encode() == data, (subject, data)
            assert ae.leader in names and len(ae.leader) == ID_LEN
            if kind == "CR":
                # A catch-up starts with the leader's snapshot and peer state when its log was compacted
                # past the follower's position; the log entries it streams carry the leader's term.
                # The snapshot's reply is the leader's usual inbox, the entries' a catch-up progress inbox.
                if [e.type for e in ae.entries] == [EntryType.SNAPSHOT, EntryType.PEER_STATE]:
                    assert group_of(reply)[0] == "R"
                else:
                    assert ae.lterm >= ae.term and group_of(reply)[0] == "CP"
            for e in ae.entries:
                entry_types[e.type] += 1
                if e.type == EntryType.PEER_STATE:
                    ps = PeerState.decode(e.data)
                    assert ps.encode() == e.data and set(ps.known_peers) <= names
                elif e.type == EntryType.NORMAL and rest == META_GROUP:
                    op, assignment = decode_meta_entry(e.data)
                    meta_ops[op] += 1
                    if op in META_JSON_OPS:
                        assert assignment is not None
                        assert encode_meta_entry(op, assignment) == e.data
        elif kind == "R":
            if not data:
                kind = "R-empty"  # the leader's answer to a forwarded proposal
            elif len(data) == VOTE_RESPONSE_LEN:
                vote = VoteResponse.decode(data)
                assert vote.encode() == data and vote.peer in names
                kind = "R-vote"
            else:
                assert len(data) == APPEND_ENTRY_RESPONSE_LEN
                ar = AppendEntryResponse.decode(data)
                assert ar.encode() == data and ar.peer in names
                kind = "R-ae-catchup" if reply else "R-ae"
        elif kind == "CP":  # 2.15.1: a follower acks catch-up entries here (2.15.0's source never acked them)
            ar = AppendEntryResponse.decode(data)
            assert ar.encode() == data and ar.peer in names and ar.success
        elif kind == "RP":
            assert len(data) == ID_LEN
        else:
            assert kind == "P", (subject, data[:80])
        kinds[kind] += 1

    # What the actions above must have produced, so the loop above checked each kind.
    assert {"V", "AE", "CR", "CP", "R-vote", "R-ae", "R-ae-catchup"} <= set(kinds), kinds
    assert {EntryType.NORMAL, EntryType.PEER_STATE, EntryType.LEADER_TRANSFER} <= set(entry_types), (
        entry_types
    )
    assert {EntryOp.ASSIGN_STREAM, EntryOp.ASSIGN_CONSUMER, EntryOp.REMOVE_STREAM} <= set(meta_ops), meta_ops
