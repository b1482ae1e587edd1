"""A consumer group's entries as nats-server 2.15 proposes them, a follower applying them to a consumer
state, and the follower replica of a replicated consumer placed on this server.

A consumer entry is an op byte (meta.EntryOp) and its body:
- UPDATE_DELIVERED: uvarints consumer seq, stream seq, delivery count, then a (zigzag) varint timestamp.
- UPDATE_ACKS: uvarints consumer seq, stream seq.
- UPDATE_SKIP: the next stream sequence (u64 little endian).
- RESET_SEQ: the new starting stream sequence (u64 little endian), then the reply of the reset request.
- ADD_PENDING_REQUEST / REMOVE_PENDING_REQUEST: a pull request's reply subject.
A consumer snapshot (RAFT snapshot entry) is nats-server's encoded consumer state (magic 22, version 2):
uvarints ack floor (consumer, stream), delivered (consumer, stream), the pending count, then when pending a
base time (varint seconds) and per pending message its stream and consumer sequences above the ack floor
and its time below the base (seconds); then the redelivered count and per message its stream sequence
above the ack floor and its count.

The replica (ConsumerReplica) is an observer of the group: it stores, acks and votes, never campaigns, so a
nats-server always leads the consumer. Its log is under the JetStream store directory, `_js_/<group>/raft`
beside the stream replicas'; it compacts the log behind snapshots of its state in nats-server's encoding
(as often as nats-server's consumers do, and when the server stops), and a restart recovers the state from
the snapshot and the log. An entry it does not know stops it (it logs why) rather than guess a state.
"""

from __future__ import annotations

import shutil
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pynatsd.base.logging import get_logger
from pynatsd.base.varint import put_uvarint, read_uvarint
from pynatsd.broker.internal import InternalClient
from pynatsd.jetstream.legacy_backup import consumer_state
from pynatsd.raft.codec import Entry, EntryType
from pynatsd.raft.meta import EntryOp
from pynatsd.raft.replica import GroupFollower, rearm
from pynatsd.raft.stream import UnsupportedEntry

if TYPE_CHECKING:
    from pynatsd.broker.core import Broker

log = get_logger()

STATE_MAGIC = 22  # nats-server's consumer state header (filestore.go magic), version 2 written
STATE_VERSION = 2
_U64 = struct.Struct("<Q")
_MASK64 = (1 << 64) - 1
_HIGH_BIT = 1 << 63

# nats-server's consumer compaction (jetstream_cluster.go monitorConsumer): a snapshot every 2 minutes, and
# on apply once the log holds 1024 entries or 64 KiB.
COMPACT_INTERVAL = 120.0
COMPACT_ENTRIES = 1024
COMPACT_BYTES = 64 * 1024


def put_varint(value: int) -> bytes:
    """Go's binary.PutVarint (zigzag)."""
    return put_uvarint(((value << 1) ^ (value >> 63)) & _MASK64)


def read_varint(buf: bytes, at: int) -> tuple[int, int]:
    """Go's binary.Varint; ValueError when cut short."""
    raw, at = read_uvarint(buf, at)
    value = raw >> 1
    return (~value if raw & 1 else value), at


@dataclass(slots=True)
class ConsumerState:
    """nats-server's ConsumerState: what was delivered and acked, and per unacked stream sequence its
    consumer sequence and delivery time (ns); per redelivered stream sequence its redelivery count."""

    delivered_consumer: int = 0
    delivered_stream: int = 0
    ack_floor_consumer: int = 0
    ack_floor_stream: int = 0
    pending: dict[int, tuple[int, int]] = field(default_factory=dict)
    redelivered: dict[int, int] = field(default_factory=dict)


def encode_consumer_state(state: ConsumerState, now: float | None = None) -> bytes:
    """nats-server's encoding (version 2); pending times kept to the second, as nats-server keeps them."""
    afc, afs = state.ack_floor_consumer, state.ack_floor_stream
    out = bytearray((STATE_MAGIC, STATE_VERSION))
    for value in (afc, afs, state.delivered_consumer, state.delivered_stream, len(state.pending)):
        out += put_uvarint(value)
    if state.pending:
        base = round(time.time() if now is None else now)
        out += put_varint(base)
        for sseq, (dseq, ts) in state.pending.items():
            out += put_uvarint((sseq - afs) & _MASK64)
            out += put_uvarint((dseq - afc) & _MASK64)
            out += put_varint(base - ts // 1_000_000_000)
    out += put_uvarint(len(state.redelivered))
    for sseq, count in state.redelivered.items():
        out += put_uvarint((sseq - afs) & _MASK64)
        out += put_uvarint(count)
    return bytes(out)


def decode_consumer_state(buf: bytes) -> ConsumerState:
    """nats-server's encoded consumer state (versions 1 and 2, read as a backup's o.dat is); ValueError
    when corrupt."""
    decoded = consumer_state(buf)  # its BackupError is a ValueError
    delivered, floor = decoded["delivered"], decoded["ack_floor"]
    state = ConsumerState(
        int(delivered["consumer_seq"]),
        int(delivered["stream_seq"]),
        int(floor["consumer_seq"]),
        int(floor["stream_seq"]),
        {int(s): (int(p["sequence"]), int(p["ts"])) for s, p in (decoded.get("pending") or {}).items()},
        {int(s): int(n) for s, n in (decoded.get("redelivered") or {}).items() if int(s) and int(n)},
    )
    if (state.ack_floor_stream | state.delivered_stream) & _HIGH_BIT or 0 in state.pending:
        raise ValueError("consumer state: corrupt sequences")
    return state


@dataclass(frozen=True, slots=True)
class Delivered:
    dseq: int
    sseq: int
    count: int
    ts: int


def decode_delivered(body: bytes) -> Delivered:
    """An UPDATE_DELIVERED body (after the op byte); ValueError when malformed."""
    dseq, at = read_uvarint(body, 0)
    sseq, at = read_uvarint(body, at)
    count, at = read_uvarint(body, at)
    ts, at = read_varint(body, at)
    return Delivered(dseq, sseq, count, ts)


def decode_acks(body: bytes) -> tuple[int, int]:
    """An UPDATE_ACKS body: (consumer seq, stream seq); ValueError when malformed."""
    dseq, at = read_uvarint(body, 0)
    sseq, at = read_uvarint(body, at)
    return dseq, sseq


def decode_sequence(body: bytes, what: str) -> tuple[int, bytes]:
    """An UPDATE_SKIP or RESET_SEQ body: the u64 sequence and what follows it."""
    if len(body) < _U64.size:
        raise ValueError(f"{what}: too short")
    return _U64.unpack_from(body)[0], body[_U64.size :]


class ConsumerApplier:
    """Applies a consumer group's committed entries to a ConsumerState, as a nats-server follower's
    consumer store does (jetstream_cluster.go applyConsumerEntries; filestore.go consumerFileStore's
    UpdateDelivered, UpdateAcks, UpdateStarting, Reset, Update). `config`: the consumer's configuration
    (its ack policy and max deliveries matter). `broken` names the first entry it could not apply; from
    then on it applies nothing, as nats-server stops applying a consumer's entries after an error."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.state = ConsumerState()
        self.pending_requests: set[bytes] = set()  # pull requests' replies the leader waits on
        self.broken = ""
        self.applied_entries = 0  # normal entries, and their bytes, since the last snapshot
        self.applied_bytes = 0

    @property
    def ack_policy(self) -> str:
        return str(self.config.get("ack_policy") or "none")

    def apply(self, entries: tuple[Entry, ...]) -> None:
        for entry in entries:
            if self.broken:
                return
            try:
                if entry.type == EntryType.NORMAL:
                    self._apply_normal(entry.data)
                    self.applied_entries += 1
                    self.applied_bytes += len(entry.data)
                elif entry.type == EntryType.SNAPSHOT:
                    self._apply_snapshot(decode_consumer_state(entry.data))
                    self.applied_entries = self.applied_bytes = 0
            except ValueError as e:  # UnsupportedEntry included
                self.broken = str(e) or type(e).__name__
                log.error("JetStream cluster replica: consumer entry not applied, replica stopped: %s", e)

    def _apply_normal(self, data: bytes) -> None:
        if not data:
            raise ValueError("empty consumer entry")
        op, body = data[0], data[1:]
        if op == EntryOp.UPDATE_DELIVERED:
            d = decode_delivered(body)
            if d.count != 1 and self.ack_policy == "none":
                raise ValueError("consumer delivered update: redelivery with ack policy none")
            self._delivered(d)
        elif op == EntryOp.UPDATE_ACKS:
            self._acked(*decode_acks(body))
        elif op == EntryOp.UPDATE_SKIP:
            sseq, _ = decode_sequence(body, "consumer skip update")
            if sseq - 1 > self.state.delivered_stream:
                self.state.delivered_stream = sseq - 1
                if self.ack_policy == "none":
                    self.state.ack_floor_stream = sseq - 1
        elif op == EntryOp.RESET_SEQ:
            sseq, _ = decode_sequence(body, "consumer reset update")
            start = max(sseq - 1, 0)
            self.state = ConsumerState(delivered_stream=start, ack_floor_stream=start)
        elif op == EntryOp.ADD_PENDING_REQUEST:
            self.pending_requests.add(body)
        elif op == EntryOp.REMOVE_PENDING_REQUEST:
            self.pending_requests.discard(body)
        else:
            name = EntryOp(op).name if op in EntryOp._value2member_map_ else str(op)
            raise UnsupportedEntry(f"consumer entry op {name} not implemented")

    def _delivered(self, d: Delivered) -> None:
        state = self.state
        if d.dseq <= state.ack_floor_consumer:
            return  # replayed from before the floor
        if self.ack_policy == "none":
            if d.dseq > state.delivered_consumer:
                state.delivered_consumer = state.ack_floor_consumer = d.dseq
            if d.sseq > state.delivered_stream:
                state.delivered_stream = state.ack_floor_stream = d.sseq
            return
        if d.sseq <= state.delivered_stream:
            known = state.pending.get(d.sseq)
            if known is not None:  # a redelivery keeps the first consumer sequence
                state.pending[d.sseq] = (known[0], d.ts)
        else:
            state.pending[d.sseq] = (d.dseq, d.ts)
        state.delivered_consumer = max(state.delivered_consumer, d.dseq)
        state.delivered_stream = max(state.delivered_stream, d.sseq)
        if d.count > 1:
            max_deliver = int(self.config.get("max_deliver") or 0)
            if max_deliver > 0 and d.count > max_deliver:
                state.pending.pop(d.sseq, None)
            if state.redelivered.get(d.sseq, 0) < d.count - 1:
                state.redelivered[d.sseq] = d.count - 1

    def _acked(self, dseq: int, sseq: int) -> None:
        state = self.state
        if self.ack_policy == "none":
            return  # nats-server's store refuses (ErrNoAckPolicy), which the apply ignores
        state.redelivered.pop(sseq, None)
        if dseq <= state.ack_floor_consumer or sseq not in state.pending:
            return  # replayed, or not pending: the store refuses it, and the apply ignores that
        if self.ack_policy in ("all", "flow_control"):
            state.ack_floor_consumer, state.ack_floor_stream = dseq, sseq
            for seq in [s for s in state.pending if s <= sseq]:
                del state.pending[seq]
                state.redelivered.pop(seq, None)
            return
        first = state.pending.pop(sseq)[0]
        if 0 < first < dseq:
            dseq = first  # the original delivery's sequence
        if not state.pending:
            state.ack_floor_consumer = state.delivered_consumer
            state.ack_floor_stream = state.delivered_stream
        elif dseq == state.ack_floor_consumer + 1:
            state.ack_floor_consumer, state.ack_floor_stream = dseq, sseq
            if state.delivered_consumer > dseq:
                for seq in range(sseq + 1, state.delivered_stream + 1):
                    next_pending = state.pending.get(seq)
                    if next_pending is not None:
                        if next_pending[0] > 0:
                            state.ack_floor_consumer = next_pending[0] - 1
                            state.ack_floor_stream = seq - 1
                        break

    def _apply_snapshot(self, snap: ConsumerState) -> None:
        """The leader's state, unless it is inconsistent or older than ours (nats-server's store refuses
        both, and the apply goes on)."""
        if snap.ack_floor_consumer > snap.delivered_consumer or snap.ack_floor_stream > snap.delivered_stream:
            log.warning("JetStream cluster replica: consumer snapshot with a bad ack floor not applied")
            return
        if any(s <= snap.ack_floor_stream or s > snap.delivered_stream for s in snap.pending):
            log.warning("JetStream cluster replica: consumer snapshot with pending out of range not applied")
            return
        state = self.state
        if (
            snap.delivered_consumer < state.delivered_consumer
            or snap.ack_floor_stream < state.ack_floor_stream
        ):
            return
        self.state = snap


class ConsumerReplica(GroupFollower):
    """One consumer group's follower on this server (see the module docstring)."""

    def __init__(
        self, server: Broker, client: InternalClient, directory: Path, assignment: dict[str, Any], ours: str
    ) -> None:
        super().__init__(server, client, directory, assignment, ours, COMPACT_INTERVAL)
        self.applier = ConsumerApplier(self.config)
        self.pump()

    @property
    def config(self) -> dict[str, Any]:
        config = self.assignment.get("consumer")
        return config if isinstance(config, dict) else {}

    def update(self, assignment: dict[str, Any]) -> None:
        """The consumer's assignment again (its configuration may have changed)."""
        self.assignment = assignment
        self.applier.config = self.config

    def pump(self) -> None:
        due = self.drive()
        for done in self.node.take_applied():
            self.applier.apply(done.entries)
        applier = self.applier
        if applier.applied_entries >= COMPACT_ENTRIES or applier.applied_bytes > COMPACT_BYTES:
            self.compact()
        self.timer = rearm(self.server.loop, self.timer, due, self._on_timer)

    def compact(self) -> None:
        """Snapshot the state (nats-server's encoding); the log up to it goes."""
        applier = self.applier
        if not applier.applied_entries or applier.broken:
            return
        self.node.install_snapshot(encode_consumer_state(applier.state))
        applier.applied_entries = applier.applied_bytes = 0

    def stop(self, remove: bool = False) -> None:
        """Stop; its data removed (the consumer was deleted), or its state snapshotted for the restart."""
        self.release()
        if remove:
            self.node.close()
            shutil.rmtree(self.dir, ignore_errors=True)
            return
        self.compact()
        self.node.close()
