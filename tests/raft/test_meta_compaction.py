"""The meta group member's applied state (pynatsd.raft.meta.MetaState) and its log compaction
(pynatsd.raft.member.MetaApplier): a leader RaftNode proposes nats-server's meta entries to an observer
that keeps its log in files, as the in-server member does, over a synchronous fake transport in virtual
time. The log stays bounded, a restart loads snapshot + log into the same state, and a crash at any file
operation of a compaction leaves a directory that loads."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

from pynatsd.base.s2 import decode_block, encode_stream
from pynatsd.raft.codec import META_GROUP
from pynatsd.raft.member import MetaApplier
from pynatsd.raft.meta import EntryOp, MetaState, decode_meta_snapshot, encode_meta_entry
from pynatsd.raft.node import RaftNode, State
from pynatsd.raft.storage import FileStorage, MemoryStorage

LEADER, MEMBER = "LEADER01", "MEMBER01"
COMPACT_ENTRIES = 40
CLIENT = {"start": "2026-11-27T15:00:00Z", "acc": "A", "svc": "", "user": "u", "cluster": "C", "server": "n1"}


def _stream(name: str, subjects: list[str] | None = None) -> dict[str, Any]:
    config = {"name": name, "subjects": subjects or [name.lower()], "storage": "file", "num_replicas": 1}
    group = {"name": f"S-R1F-{name}", "peers": ["n1"], "store": "file"}
    return {
        "client": CLIENT,
        "created": "2026-11-27T15:00:00Z",
        "stream": config,
        "group": group,
        "sync": "_INBOX.x",
    }


def _consumer(stream: str, name: str) -> dict[str, Any]:
    group = {"name": f"C-R1F-{name}", "peers": ["n1"], "store": "file"}
    config = {"durable_name": name, "ack_policy": "explicit"}
    return {
        "client": CLIENT,
        "created": "2026-11-27T15:00:01Z",
        "name": name,
        "stream": stream,
        "consumer": config,
        "group": group,
    }


def _view(state: MetaState) -> dict[str, set[str]]:
    """Stream names (account A) with their consumer names: what STREAM.NAMES and CONSUMER.NAMES list."""
    return {name: set(state.consumers[(acc, name)]) for acc, name in state.streams if acc == "A"}


class Pair:
    """A leader and the observer member, messages handed over at once, the clock advanced by `run`."""

    def __init__(self, directory: Path) -> None:
        self.now = 0.0
        self.directory = directory
        self.leader = RaftNode(META_GROUP, LEADER, MemoryStorage(), [LEADER, MEMBER], 0.0, random.Random(1))
        self.start_member()
        self.run(until=lambda: self.leader.state == State.LEADER and self.member.leader == LEADER)

    def start_member(self) -> None:
        storage = FileStorage(self.directory)
        self.member = RaftNode(
            META_GROUP, MEMBER, storage, [LEADER, MEMBER], self.now, random.Random(2), observer=True
        )
        self.applier = MetaApplier(self.member, compact_entries=COMPACT_ENTRIES)
        self._pump()

    def restart_member(self) -> None:
        """The member stopped and started again from its directory, until the leader's next heartbeat
        has told it the commit of its last stored entries."""
        self.member.close()
        self.start_member()
        target = self.leader.pindex
        self.run(until=lambda: self.member.applied >= target)

    def _pump(self) -> None:
        moved = True
        while moved:
            moved = False
            for src, dst in ((self.leader, self.member), (self.member, self.leader)):
                for out in src.take_outbox():
                    if out.subject in dst.subscriptions():
                        dst.receive(out.subject, out.reply, out.data, self.now)
                        moved = True
            self.applier.apply(self.member.take_applied())
            self.leader.take_applied()

    def run(self, until: Any, limit: float = 30.0) -> None:
        end = self.now + limit
        while not until():
            assert self.now < end, "no progress in virtual time"
            self.now = round(self.now + 0.05, 6)
            self.leader.tick(self.now)
            self.member.tick(self.now)
            self._pump()

    def propose(self, op: EntryOp, body: dict[str, Any]) -> None:
        assert self.leader.propose(encode_meta_entry(op, body))
        self._pump()
        target = self.leader.pindex
        self.run(until=lambda: self.member.applied >= target)


def test_meta_state_applies_assignments_and_round_trips() -> None:
    state = MetaState()
    state.apply_entry(encode_meta_entry(EntryOp.ASSIGN_STREAM, _stream("S")))
    state.apply_entry(encode_meta_entry(EntryOp.ASSIGN_STREAM, _stream("T")))
    state.apply_entry(encode_meta_entry(EntryOp.ASSIGN_CONSUMER, _consumer("S", "C1")))
    compressed = json.dumps(_consumer("S", "C2")).encode() + b"\n"
    state.apply_entry(bytes((EntryOp.ASSIGN_COMPRESSED_CONSUMER,)) + encode_stream(compressed))
    state.apply_entry(encode_meta_entry(EntryOp.ASSIGN_CONSUMER, _consumer("GONE", "C")))  # no such stream
    state.apply_entry(encode_meta_entry(EntryOp.UPDATE_STREAM, _stream("S", ["s", "s2"])))
    state.apply_entry(encode_meta_entry(EntryOp.REMOVE_CONSUMER, _consumer("S", "C1")))
    state.apply_entry(encode_meta_entry(EntryOp.ASSIGN_CONSUMER, _consumer("T", "D")))
    state.apply_entry(encode_meta_entry(EntryOp.REMOVE_STREAM, _stream("T")))
    state.apply_entry(bytes((EntryOp.PURGE_STREAM,)) + b"{}")  # not an assignment: left alone
    assert _view(state) == {"S": {"C2"}}
    assert state.streams["A", "S"]["stream"]["subjects"] == ["s", "s2"]  # the update kept its consumers

    snap = state.encode_snapshot()
    streams = decode_meta_snapshot(snap)
    # nats-server's writeableStreamAssignment: the client cut to account, service and cluster
    # (ClientInfo.forAssignmentSnap), `Consumers` under Go's field name; compact JSON as json.Marshal.
    assert list(streams[0]) == ["client", "created", "stream", "group", "sync", "Consumers"]
    assert streams[0]["client"] == {"acc": "A", "cluster": "C"}
    assert list(streams[0]["Consumers"][0]) == ["client", "created", "name", "stream", "consumer", "group"]
    assert b", " not in decode_block(snap) and b"\n" not in decode_block(snap)
    again = MetaState()
    again.load_snapshot(snap)
    assert _view(again) == _view(state) and again.encode_snapshot() == snap
    assert MetaState().encode_snapshot() == b""  # nats-server's snapshot of no streams is empty too


def test_log_stays_bounded_and_restarts_from_the_snapshot(tmp_path: Path) -> None:
    """300 stream creates with a consumer each and their deletes (every tenth stream kept): the member's
    wal.log never holds much more than the compaction threshold, and a restart (twice, and at the end)
    loads snapshot + log into the leader's view."""
    pair = Pair(tmp_path)
    model: dict[str, set[str]] = {}
    largest_wal = 0
    record = 0
    for i in range(300):
        name = f"S{i}"
        pair.propose(EntryOp.ASSIGN_STREAM, _stream(name))
        pair.propose(EntryOp.ASSIGN_CONSUMER, _consumer(name, "C"))
        model[name] = {"C"}
        if i >= 1 and (i - 1) % 10:
            pair.propose(EntryOp.REMOVE_STREAM, _stream(f"S{i - 1}"))
            del model[f"S{i - 1}"]
        stored = pair.member.storage
        assert isinstance(stored, FileStorage)
        record = max([record, *(len(d) + 12 for d in stored.log.values())])
        largest_wal = max(largest_wal, (tmp_path / "wal.log").stat().st_size)
        assert _view(pair.applier.state) == model
        if i in (100, 200):
            pair.restart_member()
            assert _view(pair.applier.state) == model
    assert largest_wal <= (COMPACT_ENTRIES + 2) * record, (largest_wal, record)
    assert pair.member.storage.load_snapshot() is not None
    pair.restart_member()
    assert _view(pair.applier.state) == model and len(model) == 31


class Crash(Exception):
    pass


@pytest.mark.parametrize("at", range(8))
def test_a_crash_during_compaction_leaves_a_usable_state(
    tmp_path: Path, at: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process dies (the exception stands for kill -9: nothing after it runs) at each file operation of
    a compaction in turn (the snapshot's and the log's fsync and rename, the old snapshot's removal), with
    a half-written temporary file left behind: the directory loads into the state applied before."""
    pair = Pair(tmp_path)
    model: dict[str, set[str]] = {}
    for i in range(COMPACT_ENTRIES + 5):  # past one compaction: an old snapshot to replace
        pair.propose(EntryOp.ASSIGN_STREAM, _stream(f"S{i}"))
        model[f"S{i}"] = set()
    calls = 0
    compacting = False
    real = {"replace": os.replace, "fsync": os.fsync, "unlink": Path.unlink}

    def crashing(kind: str) -> Any:
        def op(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            if compacting:
                calls += 1
                if calls > at:
                    (tmp_path / "snap.torn.tmp").write_bytes(b"\x00" * 7)
                    raise Crash(kind)
            return real[kind](*args, **kwargs)

        return op

    compact = pair.applier.compact

    def compact_and_die() -> None:
        nonlocal compacting
        compacting = True
        compact()
        raise Crash("after the compaction")

    monkeypatch.setattr(pair.applier, "compact", compact_and_die)
    monkeypatch.setattr(os, "replace", crashing("replace"))
    monkeypatch.setattr(os, "fsync", crashing("fsync"))
    monkeypatch.setattr(Path, "unlink", crashing("unlink"))
    with pytest.raises(Crash):
        for i in range(COMPACT_ENTRIES + 5, 2 * COMPACT_ENTRIES + 10):
            model[f"S{i}"] = set()  # the leader has it from here on, whatever becomes of the member
            pair.propose(EntryOp.ASSIGN_STREAM, _stream(f"S{i}"))
    # seven file operations: fsync, rename, directory fsync for the snapshot, the old one removed, and
    # the same three for the log; the last case dies after them all
    assert calls == min(at + 1, 7)
    monkeypatch.undo()
    pair.restart_member()
    assert _view(pair.applier.state) == model
    pair.propose(EntryOp.ASSIGN_STREAM, _stream("AFTER"))
    assert "AFTER" in _view(pair.applier.state)
