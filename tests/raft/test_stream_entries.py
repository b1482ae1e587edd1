"""Stream group entries in nats-server's encodings, applied by a follower replica to a pynatsd store
(pynatsd.raft.stream); the live test (test_stream_live.py) checks them against nats-server's traffic."""

from __future__ import annotations

import json

import pytest

from pynatsd.base.s2 import encode_block
from pynatsd.jetstream.store.memory import MemoryStore
from pynatsd.raft.codec import Entry, EntryType
from pynatsd.raft.meta import EntryOp
from pynatsd.raft.stream import StreamApplier, StreamMsg, decode_stream_msg, encode_stream_msg


def _msg(lseq: int, subject: bytes = b"s", data: bytes = b"x", hdrs: bytes | None = None) -> Entry:
    return Entry(
        EntryType.NORMAL, encode_stream_msg(StreamMsg(subject, b"", hdrs, data, lseq, 1000 + lseq, False))
    )


def _op(op: EntryOp, body: dict[str, object]) -> Entry:
    return Entry(EntryType.NORMAL, bytes((op,)) + json.dumps(body).encode())


def test_stream_msg_round_trip() -> None:
    msg = StreamMsg(b"orders.1", b"_INBOX.x", b"NATS/1.0\r\nA: b\r\n\r\n", b"payload", 41, 1234567, True)
    assert decode_stream_msg(encode_stream_msg(msg)[1:]) == msg
    bare = StreamMsg(b"s", b"", None, b"", 0, 1, False)
    assert decode_stream_msg(encode_stream_msg(bare)[1:]) == bare
    with pytest.raises(ValueError):
        decode_stream_msg(encode_stream_msg(msg)[1:30])


def test_applier_stores_at_the_leaders_sequences() -> None:
    store = MemoryStore()
    applier = StreamApplier(store)
    body = encode_stream_msg(StreamMsg(b"big", b"", None, b"y" * 9000, 2, 5, False))[1:]
    compressed = Entry(EntryType.NORMAL, bytes((EntryOp.COMPRESSED_STREAM_MSG,)) + encode_block(body))
    applier.apply((_msg(0, b"a"), _msg(1, b"b"), compressed))
    applier.apply((_msg(1, b"b"),))  # replayed after a restart: already held
    skip = Entry(EntryType.NORMAL, encode_stream_msg(StreamMsg(b"", b"", None, b"", 3, 0, False)))
    applier.apply((skip, _msg(4, b"e")))
    assert [(m.seq, m.subject, m.ts) for s in (1, 2, 3, 5) if (m := store.load(s))] == [
        (1, b"a", 1000),
        (2, b"b", 1001),
        (3, b"big", 5),
        (5, b"e", 1004),
    ]
    assert store.load(3) is not None and store.load(3).data == b"y" * 9000  # type: ignore[union-attr]
    assert 4 not in store and store.last_seq == 5

    applier.apply((_op(EntryOp.DELETE_MSG, {"stream": "S", "seq": 2, "subject": "", "reply": ""}),))
    assert 2 not in store and store.msgs == 3
    applier.apply((_op(EntryOp.PURGE_STREAM, {"stream": "S", "last_seq": 5, "request": {"keep": 1}}),))
    assert store.msgs == 1 and 5 in store
    applier.apply((_op(EntryOp.DELETE_RANGE, {"First": 6, "Num": 3}),))
    assert store.last_seq == 8
    applier.apply((_op(EntryOp.PURGE_STREAM, {"stream": "S", "last_seq": 8, "subject": "", "reply": ""}),))
    assert store.msgs == 0 and store.first_seq == 9
    assert not applier.broken


def test_applier_refuses_what_it_cannot_apply() -> None:
    """An atomic batch or a gap stop the replica with the reason, rather than store messages at wrong
    sequences."""
    for entries, reason in (
        (
            (Entry(EntryType.NORMAL, bytes((EntryOp.BATCH_MSG,)) + b"\x01\x00b\x01"),),
            "BATCH_MSG not implemented",
        ),
        ((_msg(0), _msg(5)), "after sequence 5"),
    ):
        store = MemoryStore()
        applier = StreamApplier(store)
        applier.apply(entries)
        assert reason in applier.broken
        applier.apply((_msg(store.last_seq),))
        assert store.msgs <= 1  # nothing more applied


def test_snapshot_state_the_store_holds() -> None:
    store = MemoryStore()
    applier = StreamApplier(store)
    applier.apply(tuple(_msg(i) for i in range(4)))
    snapshot = {"messages": 2, "bytes": 0, "first_seq": 2, "last_seq": 4, "clfs": 1, "deleted": [3]}
    applier.apply((Entry(EntryType.SNAPSHOT, json.dumps(snapshot).encode()),))
    assert [s for s in range(1, 5) if s in store] == [2, 4] and applier.clfs == 1
    applier.apply((_msg(5),))  # lseq 5 less one failed proposal: sequence 5
    assert store.last_seq == 5 and not applier.broken


def test_binary_snapshot_and_catchup() -> None:
    """nats-server's binary stream state ahead of the store holds entries back until the catch-up's
    messages (each at its own sequence, a delete range skipping) reach its last sequence."""
    from pynatsd.base.varint import put_uvarint

    state = bytes((42, 1)) + b"".join(put_uvarint(v) for v in (3, 99, 1, 5, 0, 0))
    store = MemoryStore()
    applier = StreamApplier(store)
    applier.apply((_msg(0, b"a"), Entry(EntryType.SNAPSHOT, state), _msg(5, b"f")))
    assert applier.catchup_to == 5 and len(applier.held) == 1 and store.last_seq == 1
    assert not applier.caught_up()  # nothing came yet: ask again
    catchup_msg = encode_stream_msg(StreamMsg(b"b", b"", None, b"x", 2, 7, False))  # lseq: its own sequence
    applier.apply_catchup(catchup_msg)
    applier.apply_catchup(bytes((EntryOp.DELETE_RANGE,)) + b'{"First":3,"Num":3}')
    with pytest.raises(ValueError):
        applier.apply_catchup(bytes((EntryOp.PURGE_STREAM,)) + b"{}")
    assert applier.caught_up() and applier.catchup_to == 0
    assert [(s, m.subject) for s in range(1, 7) if (m := store.load(s))] == [(1, b"a"), (2, b"b"), (6, b"f")]
    deletes = bytes((42, 1)) + b"".join(put_uvarint(v) for v in (3, 99, 1, 5, 0, 1))
    applier.apply((Entry(EntryType.SNAPSHOT, deletes),))
    assert "interior deletes" in applier.broken
