"""Consumer group entries in nats-server's encodings, applied by a follower replica to a consumer state
(pynatsd.raft.consumer); the live test (test_consumer_live.py) checks the state against nats-server's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import pytest

from pynatsd.raft.codec import APPEND_SUBJECT, AppendEntry, Entry, EntryType
from pynatsd.raft.consumer import (
    ConsumerApplier,
    ConsumerReplica,
    ConsumerState,
    decode_consumer_state,
    decode_delivered,
    encode_consumer_state,
)
from pynatsd.raft.meta import EntryOp

if TYPE_CHECKING:
    from pynatsd.broker.core import Broker
    from pynatsd.broker.internal import InternalClient

INBOX = bytes.fromhex("5f494e424f582e3573307444765337415a6756307663394830354a7036")  # a pull request's

# A pull consumer's group log as nats-server 2.15.1 wrote it (captured from the real binary's entries to
# pynatsd's replica): its leader's start (skip to 1), a fetch of 3 (pending request added, 3 deliveries,
# removed), acks of 1 and 3, a nak of 2 and its redelivery (count 2), its ack, a fetch of the last 3.
CAPTURED = [
    "0a0100000000000000",
    "0c" + INBOX.hex(),
    "07010101c086cd83efe680ec31",
    "0702020190f9ce83efe680ec31",
    "0d" + INBOX.hex(),
    "07030301c89fcf83efe680ec31",
    "080101",
    "080303",
    "0c" + INBOX.hex(),
    "0d" + INBOX.hex(),
    "0704020290f9ce83efe680ec31",
    "080202",
    "0c" + INBOX.hex(),
    "07050401e0b7cf83efe680ec31",
    "07060501a0cfcf83efe680ec31",
    "07070601f8efcf83efe680ec31",
    "0d" + INBOX.hex(),
]


def _entries(*hexes: str) -> tuple[Entry, ...]:
    return tuple(Entry(EntryType.NORMAL, bytes.fromhex(h)) for h in hexes)


def _floors(state: ConsumerState) -> tuple[int, int, int, int]:
    s = state
    return (s.delivered_consumer, s.delivered_stream, s.ack_floor_consumer, s.ack_floor_stream)


def test_captured_pull_consumer_log() -> None:
    """The state nats-server's consumer info showed at the end: delivered 7/6, ack floor 4/3, 3 pending."""
    applier = ConsumerApplier({"ack_policy": "explicit", "max_deliver": -1})
    applier.apply(_entries(*CAPTURED[:11]))
    assert applier.state.redelivered == {2: 1} and sorted(applier.state.pending) == [2]
    assert applier.state.pending[2][0] == 2  # a redelivery keeps the first consumer sequence
    applier.apply(_entries(*CAPTURED[11:]))
    assert not applier.broken
    state = applier.state
    assert _floors(state) == (7, 6, 4, 3)
    assert {s: p[0] for s, p in state.pending.items()} == {4: 5, 5: 6, 6: 7}
    assert state.redelivered == {} and applier.pending_requests == set()
    delivered = decode_delivered(bytes.fromhex(CAPTURED[2])[1:])
    assert (delivered.dseq, delivered.sseq, delivered.count) == (1, 1, 1)
    assert 1_700_000_000_000_000_000 < delivered.ts < 1_900_000_000_000_000_000  # ns since the epoch
    # Replayed after a restart from an older point: nothing below the ack floor changes.
    applier.apply(_entries(*CAPTURED[2:8]))
    assert _floors(applier.state) == (7, 6, 4, 3) and sorted(applier.state.pending) == [4, 5, 6]


def test_state_encoding_round_trip() -> None:
    state = ConsumerState(9, 20, 4, 12, {14: (5, 3_000_000_000_000), 20: (9, 3_000_000_000_000)}, {14: 2})
    raw = encode_consumer_state(state, now=3_000_000_010)
    assert raw[:2] == bytes((22, 2))
    assert decode_consumer_state(raw) == state  # times are kept to the second: these are whole seconds
    late = ConsumerState(1, 1, 0, 0, {1: (1, 3_000_000_000_700_000_000)})
    assert decode_consumer_state(encode_consumer_state(late)).pending == {1: (1, 3_000_000_000_000_000_000)}
    empty = encode_consumer_state(ConsumerState())
    assert empty == bytes((22, 2, 0, 0, 0, 0, 0, 0)) and decode_consumer_state(empty) == ConsumerState()
    # nats-server's version 1 stored delivered as the next to deliver, above the ack floor.
    assert _floors(decode_consumer_state(bytes((22, 1, 3, 5, 2, 2, 0, 0)))) == (4, 6, 3, 5)
    for corrupt in (b"", bytes((21, 2, 0, 0, 0, 0, 0, 0)), bytes((22, 3, 0)), bytes((22, 2, 1, 0x80))):
        with pytest.raises(ValueError):
            decode_consumer_state(corrupt)


def test_snapshot_replaces_the_state_unless_older_or_bad() -> None:
    applier = ConsumerApplier({"ack_policy": "explicit"})
    snap = ConsumerState(7, 6, 4, 3, {4: (5, 10**18), 5: (6, 10**18)})
    applier.apply((Entry(EntryType.SNAPSHOT, encode_consumer_state(snap)),))
    assert _floors(applier.state) == (7, 6, 4, 3) and sorted(applier.state.pending) == [4, 5]
    older = ConsumerState(3, 3, 1, 1)
    bad = ConsumerState(3, 8, 4, 3)  # ack floor above delivered
    for rejected in (older, bad):
        applier.apply((Entry(EntryType.SNAPSHOT, encode_consumer_state(rejected)),))
        assert _floors(applier.state) == (7, 6, 4, 3)
    applier.apply(_entries("080504"))  # consumer 5, stream 4 acked: the floor moves to the next pending
    assert _floors(applier.state) == (7, 6, 5, 4) and not applier.broken


def test_ack_policies_and_resets() -> None:
    ack_all = ConsumerApplier({"ack_policy": "all"})
    ack_all.apply(_entries("07010101" + "02", "07020201" + "02", "07030301" + "02", "080202"))
    assert _floors(ack_all.state) == (3, 3, 2, 2) and sorted(ack_all.state.pending) == [3]
    none = ConsumerApplier({"ack_policy": "none"})
    none.apply(_entries("07010101" + "02", "07020501" + "02", "080101"))
    assert _floors(none.state) == (2, 5, 2, 5) and not none.state.pending
    limited = ConsumerApplier({"ack_policy": "explicit", "max_deliver": 2})
    limited.apply(_entries("07010101" + "02", "07020102" + "02", "07030103" + "02"))
    assert not limited.state.pending and limited.state.redelivered == {1: 2}
    # A skip moves the delivered stream sequence up, a reset starts over at its sequence.
    limited.apply(_entries("0a0900000000000000"))
    assert limited.state.delivered_stream == 8
    limited.apply(_entries("120500000000000000" + b"reply".hex()))
    assert limited.state == ConsumerState(0, 4, 0, 4)


def test_unknown_or_bad_entries_stop_the_replica() -> None:
    """Fail closed: an op the replica does not know (or a malformed one) stops it, with the reason."""
    for data, reason in (
        (bytes((EntryOp.STREAM_MSG,)) + b"x", "STREAM_MSG not implemented"),
        (bytes((99,)), "op 99 not implemented"),
        (b"", "empty consumer entry"),
        (bytes((EntryOp.UPDATE_ACKS, 0x80)), "varint"),
        (bytes((EntryOp.UPDATE_SKIP, 1, 2)), "skip update: too short"),
    ):
        applier = ConsumerApplier({"ack_policy": "explicit"})
        applier.apply((Entry(EntryType.NORMAL, data), *_entries("07010101" + "02")))
        assert reason in applier.broken
        assert applier.state == ConsumerState()  # nothing applied after it


class _Client:
    """The replica's side of the system account: what it publishes (its acks) is recorded."""

    def __init__(self) -> None:
        self.published: list[bytes] = []

    def subscribe(self, subject: bytes, callback: object) -> object:
        return subject

    def unsubscribe(self, sub: object) -> None:
        pass

    def publish(self, subject: bytes, reply: bytes | None, headers: bytes | None, data: bytes) -> None:
        self.published.append(subject)


GROUP = "C-R3F-unit"


def _replica(directory: Path, client: _Client) -> ConsumerReplica:
    assignment = {
        "name": "C",
        "stream": "S",
        "consumer": {"durable_name": "C", "ack_policy": "explicit"},
        "group": {"name": GROUP, "peers": ["LEADER01", "MEMBER01"]},
    }
    server = SimpleNamespace(loop=asyncio.get_running_loop())
    return ConsumerReplica(
        cast("Broker", server), cast("InternalClient", client), directory, assignment, "MEMBER01"
    )


def _append(replica: ConsumerReplica, index: int, entries: tuple[Entry, ...], commit: int) -> None:
    """The leader's append of `entries` at `index` (none: a heartbeat after it), committing `commit`."""
    pindex = index - 1 if entries else index
    ae = AppendEntry("LEADER01", 1, commit, 1 if pindex else 0, pindex, entries)
    replica._on_msg((APPEND_SUBJECT % GROUP).encode(), b"$NRG.R.leader01", None, ae.encode())


def _deliveries(first: int, count: int) -> tuple[Entry, ...]:
    """Per stream sequence from `first`: its delivery, then its ack (the odd ones only)."""
    out: list[Entry] = []
    for seq in range(first, first + count):
        out += _entries(f"07{seq:02x}{seq:02x}0100")
        if seq % 2:
            out += _entries(f"08{seq:02x}{seq:02x}")
    return tuple(out)


def test_replica_compacts_and_recovers(tmp_path: Path) -> None:
    """The log is compacted behind a snapshot in nats-server's encoding past 1024 entries and when the
    replica stops; a restart (after a stop, or a crash) has the same state, from snapshot and log."""

    async def run() -> None:
        client = _Client()
        replica = _replica(tmp_path, client)
        # 150 entries for 100 messages (sequences below 128: one byte), 900 more, in 11 appends.
        requests = _entries("0c" + INBOX.hex(), "0d" + INBOX.hex()) * 450
        batches = [_deliveries(1, 100), *(requests[i : i + 90] for i in range(0, 900, 90))]
        for index, entries in enumerate(batches, 1):
            _append(replica, index, entries, index - 1)
        _append(replica, len(batches), (), len(batches))
        storage = replica.node.storage
        snap = storage.load_snapshot()
        assert snap is not None and snap.last_index == len(batches)  # compacted once past 1024 entries
        assert storage.first_index() == 0
        assert client.published  # it acks the leader
        state = replica.applier.state
        assert _floors(state) == (100, 100, 1, 1) and len(state.pending) == 50
        replica.stop()
        assert decode_consumer_state(replica.node.storage.load_snapshot().data) == state  # type: ignore[union-attr]

        again = _replica(tmp_path, client)
        assert again.applier.state == state
        index = len(batches)
        fresh = [_deliveries(seq, 1) for seq in range(101, 111)]  # stream sequences 101-110
        for entries in fresh:
            index += 1
            _append(again, index, entries, index - 1)
        expected = ConsumerApplier({"ack_policy": "explicit"})
        expected.state = ConsumerState(100, 100, 1, 1, dict(state.pending))
        for entries in fresh[:-1]:  # the last one not known committed yet
            expected.apply(entries)
        assert again.applier.state == expected.state
        again.release()  # a crash: no snapshot
        crashed = _replica(tmp_path, client)
        assert crashed.applier.state == expected.state  # snapshot + the log's committed entries
        crashed.stop(remove=True)
        assert not tmp_path.exists()

    asyncio.run(run())
