"""A stream group's entries as nats-server 2.15 proposes them, and a follower replica applying them to a
pynatsd store.

A stream entry is an op byte (meta.EntryOp) and its body:
- STREAM_MSG: the message and the stream's last sequence before it (`lseq`), little endian: lseq u64,
  timestamp u64 (ns), subject (u16 length), reply (u16), headers (u16), payload (u32), then a uvarint of
  flags (1: sourced or mirrored). The message takes sequence lseq + 1 (less the failed proposals, `clfs`,
  which a follower only learns from a snapshot). A message without subject, timestamp, headers or payload
  skips its sequence. COMPRESSED_STREAM_MSG: the same body in one S2 block.
- DELETE_MSG, PURGE_STREAM, DELETE_RANGE: JSON (nats-server's streamMsgDelete, streamPurge, DeleteRange).
- BATCH_MSG / BATCH_COMMIT_MSG (atomic batches): refused here (the replica stops applying, see below).
A stream snapshot (RAFT snapshot entry) is the stream state: nats-server's binary encoding (which 2.15 sends
whatever a peer announces), or the legacy JSON (`messages`, `bytes`, `first_seq`, `last_seq`, `clfs`,
`deleted`), which the replica writes for its own snapshots.
A follower behind a snapshot catches up out of band: it sends nats-server's sync request (JSON `peer`,
`first_seq`, `last_seq`, `delete_ranges`, `min_applied`) to the stream's `sync` subject with a `$JSC.R.`
inbox; the leader streams STREAM_MSG entries whose `lseq` is the message's own sequence (or DELETE_RANGE),
each acked with an empty message to its reply, then an empty message at the end.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from pynatsd.base.logging import get_logger
from pynatsd.base.s2 import S2Error, decode_block
from pynatsd.base.varint import read_uvarint
from pynatsd.jetstream.store.base import Store
from pynatsd.protocol.subjects import matches
from pynatsd.raft.codec import Entry, EntryType
from pynatsd.raft.meta import EntryOp

log = get_logger()

_HEAD = struct.Struct("<QQH")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
FLAG_SOURCED = 1


class UnsupportedEntry(ValueError):
    """An entry the replica cannot apply (what it names is not implemented): the replica stops there."""


@dataclass(frozen=True, slots=True)
class StreamMsg:
    subject: bytes
    reply: bytes
    hdrs: bytes | None
    data: bytes
    lseq: int
    ts: int
    sourced: bool


def decode_stream_msg(body: bytes) -> StreamMsg:
    """A STREAM_MSG body (after the op byte); ValueError when malformed."""
    if len(body) < 26:
        raise ValueError("stream msg: too short")
    lseq, ts, slen = _HEAD.unpack_from(body)
    at = _HEAD.size
    fields: list[bytes] = []
    for width in (_U16, _U16, _U32):
        if len(body) < at + slen:
            raise ValueError("stream msg: truncated")
        fields.append(body[at : at + slen])
        at += slen
        if len(body) < at + width.size:
            raise ValueError("stream msg: truncated")
        (slen,) = width.unpack_from(body, at)
        at += width.size
    if len(body) < at + slen:
        raise ValueError("stream msg: truncated")
    data = body[at : at + slen]
    at += slen
    flags = read_uvarint(body, at)[0] if at < len(body) else 0
    subject, reply, hdrs = fields
    return StreamMsg(subject, reply, hdrs or None, data, lseq, ts, bool(flags & FLAG_SOURCED))


def encode_stream_msg(msg: StreamMsg) -> bytes:
    """An uncompressed STREAM_MSG entry (op byte included), as nats-server writes one (for tests)."""
    hdrs = msg.hdrs or b""
    return b"".join(
        (
            bytes((EntryOp.STREAM_MSG,)),
            _HEAD.pack(msg.lseq, msg.ts, len(msg.subject)),
            msg.subject,
            _U16.pack(len(msg.reply)),
            msg.reply,
            _U16.pack(len(hdrs)),
            hdrs,
            _U32.pack(len(msg.data)),
            msg.data,
            bytes((FLAG_SOURCED if msg.sourced else 0,)),
        )
    )


def _json_body(body: bytes, what: str) -> dict[str, Any]:
    value = json.loads(body)
    if not isinstance(value, dict):
        raise ValueError(f"{what}: not an object")
    return value


STATE_MAGIC = 42  # nats-server's binary stream state (store.go EncodedStreamState): magic, version
STATE_VERSIONS = (1, 2)  # 2: with sources


def decode_stream_snapshot(data: bytes) -> dict[str, Any]:
    """A stream snapshot as the JSON one's fields: nats-server's binary state (uvarints msgs, bytes,
    first_seq, last_seq, clfs, then with version 2 the sources, then the interior deletes), or the legacy
    JSON. Interior deletes of the binary form (sequence sets) are not decoded: UnsupportedEntry."""
    if len(data) >= 2 and data[0] == STATE_MAGIC and data[1] in STATE_VERSIONS:
        at, values = 2, []
        for _ in range(5):
            value, at = read_uvarint(data, at)
            values.append(value)
        if data[1] == 2:
            sources, at = read_uvarint(data, at)
            for _ in range(sources):  # name, sequence, ident: skipped (pynatsd replicas source nothing)
                n, at = read_uvarint(data, at)
                at += n
                _, at = read_uvarint(data, at)
                n, at = read_uvarint(data, at)
                at += n
        deleted, at = read_uvarint(data, at)
        if deleted:
            raise UnsupportedEntry("stream snapshot with interior deletes not implemented")
        keys = ("messages", "bytes", "first_seq", "last_seq", "clfs")
        return dict(zip(keys, values, strict=True))
    return _json_body(data, "stream snapshot")


class StreamApplier:
    """Applies a stream group's committed entries to `store`, as a nats-server follower does
    (jetstream_cluster.go applyStreamEntries): messages at their leader-given sequences, deletes, purges,
    skipped ranges. `clfs`: the leader's failed proposals, from the last snapshot. A snapshot ahead of the
    store sets `catchup_to` (its last sequence): entries after it wait in `held` until the messages up to
    it came over nats-server's catch-up (`apply_catchup`, then `caught_up`). `broken` names the first entry
    it could not apply; from then on it applies nothing (it would store at wrong sequences)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.clfs = 0
        self.broken = ""
        self.applied_msgs = 0
        self.catchup_to = 0
        self.held: list[Entry] = []

    def apply(self, entries: tuple[Entry, ...]) -> None:
        for entry in entries:
            if self.broken:
                return
            if self.catchup_to:
                self.held.append(entry)
                continue
            try:
                if entry.type == EntryType.NORMAL:
                    self._apply_normal(entry.data)
                elif entry.type == EntryType.SNAPSHOT:
                    self._apply_snapshot(entry.data)
            except (ValueError, KeyError, TypeError) as e:  # UnsupportedEntry included
                self.broken = str(e) or type(e).__name__
                log.error("JetStream cluster replica: stream entry not applied, replica stopped: %s", e)
        if self.store.pending_writes:
            self.store.commit()

    def _apply_normal(self, data: bytes) -> None:
        if not data:
            raise ValueError("empty stream entry")
        op = data[0]
        if op == EntryOp.STREAM_MSG:
            self._apply_msg(decode_stream_msg(data[1:]))
        elif op == EntryOp.COMPRESSED_STREAM_MSG:
            try:
                self._apply_msg(decode_stream_msg(decode_block(data[1:])))
            except S2Error as e:
                raise ValueError(f"compressed stream msg: {e}") from None
        elif op == EntryOp.DELETE_MSG:
            seq = int(_json_body(data[1:], "delete msg")["seq"])
            self.store.remove(seq)
        elif op == EntryOp.PURGE_STREAM:
            self._apply_purge(_json_body(data[1:], "purge"))
        elif op == EntryOp.DELETE_RANGE:
            dr = _json_body(data[1:], "delete range")
            first, num = int(dr["First"]), int(dr["Num"])
            if num and self.store.last_seq < first + num - 1:
                self.store.skip_to(first + num - 1)
        else:
            name = EntryOp(op).name if op in EntryOp._value2member_map_ else str(op)
            raise UnsupportedEntry(f"stream entry op {name} not implemented")

    def _apply_msg(self, msg: StreamMsg) -> None:
        last = self.store.last_seq
        if msg.lseq - self.clfs < last:
            return  # applied before (a replay after a restart)
        if msg.lseq == 0 and last != 0:
            return
        if msg.lseq - self.clfs > last:
            raise ValueError(f"stream msg after sequence {msg.lseq - self.clfs}, the store is at {last}")
        if not msg.subject and msg.ts == 0 and not msg.data and not msg.hdrs:
            self.store.skip_to(last + 1)
            return
        if not msg.data and msg.hdrs and msg.reply and msg.hdrs.startswith(b"NATS/1.0 100"):
            return  # a flow control message of a source: nothing stored
        self.store.append(msg.subject, msg.hdrs, msg.data, msg.ts)
        self.applied_msgs += 1

    def _apply_purge(self, sp: dict[str, Any]) -> None:
        request = sp.get("request") or {}
        if not isinstance(request, dict):
            raise ValueError("purge: request not an object")
        upto = int(request.get("seq") or 0)
        keep = int(request.get("keep") or 0)
        if not upto and not keep:  # up to the leader's last sequence then: a replay purges no more
            upto = int(sp.get("last_seq") or 0) + 1
        subject = str(request.get("filter") or "").encode()
        match = (lambda s: matches(subject, s)) if subject else None
        self.store.purge(match, upto, keep)
        if not match and not keep and self.store.msgs == 0:
            self.store.skip_to(upto - 1)

    def _apply_snapshot(self, data: bytes) -> None:
        """The leader's stream state: deletes and a moved first sequence apply at once; messages the store
        lacks come over nats-server's catch-up (see the class docstring)."""
        state = decode_stream_snapshot(data)
        self.clfs = int(state.get("clfs") or 0)
        first, last = int(state.get("first_seq") or 0), int(state.get("last_seq") or 0)
        deleted = {int(s) for s in state.get("deleted") or ()}
        store = self.store
        below = [s for s in store.seqs_from(store.first_seq) if s < first or s in deleted]
        if below:
            store.remove_many(below)
        if store.last_seq < last:
            self.catchup_to = last

    def apply_catchup(self, data: bytes) -> None:
        """One message of a catch-up (a stream msg at its own sequence, or a delete range); ValueError when
        it is not one."""
        if not data or data[0] not in _CATCHUP_OPS:
            raise ValueError("catch-up message not understood")
        store = self.store
        if data[0] == EntryOp.DELETE_RANGE:
            dr = _json_body(data[1:], "delete range")
            store.skip_to(int(dr["First"]) + int(dr["Num"]) - 1)
            return
        body = data[1:]
        if data[0] == EntryOp.COMPRESSED_STREAM_MSG:
            try:
                body = decode_block(body)
            except S2Error as e:
                raise ValueError(f"compressed catch-up msg: {e}") from None
        msg = decode_stream_msg(body)
        seq = msg.lseq  # a catch-up message carries its own sequence
        if seq <= store.last_seq:
            return
        store.skip_to(seq - 1)
        if not msg.subject and msg.ts == 0:
            store.skip_to(seq)
        else:
            store.append(msg.subject, msg.hdrs, msg.data, msg.ts)
            self.applied_msgs += 1

    def caught_up(self) -> bool:
        """At the end of a catch-up: True (and the held entries applied) when the store reached the
        snapshot's last sequence; False when the leader must be asked again."""
        if self.store.pending_writes:
            self.store.commit()
        if self.store.last_seq < self.catchup_to:
            return False
        held, self.held, self.catchup_to = self.held, [], 0
        self.apply(tuple(held))
        return True


_CATCHUP_OPS = frozenset({EntryOp.STREAM_MSG, EntryOp.COMPRESSED_STREAM_MSG, EntryOp.DELETE_RANGE})
