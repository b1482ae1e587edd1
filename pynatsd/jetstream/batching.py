"""Atomic batch publishing (`allow_atomic`, nats-server 2.12): messages that carry `Nats-Batch-Id` and
`Nats-Batch-Sequence` (1, 2, ...) are held, each answered with an empty message, until one carries
`Nats-Batch-Commit: 1` (stored too) or `eob` (an end marker, not stored). Then every message is checked and,
when all pass, stored in one turn of the loop (one write of the file store), answered with one PubAck that
names the batch and its size; otherwise none is stored. A batch idle for 10 s is dropped, as nats-server
drops it; so is one a server crash interrupts before its commit (held in memory only)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from pynatsd.jetstream import counters, errors
from pynatsd.jetstream.errors import ApiError
from pynatsd.jetstream.util import get_header, now_ns, parse_msg_ttl

if TYPE_CHECKING:
    from pynatsd.jetstream.stream import Stream

BATCH_ID = b"Nats-Batch-Id"
BATCH_SEQ = b"Nats-Batch-Sequence"
BATCH_COMMIT = b"Nats-Batch-Commit"
MAX_BATCH_SIZE = 1000  # nats-server's defaults (streamDefaultMaxAtomicBatch*, streamDefaultMaxBatchTimeout)
MAX_INFLIGHT_PER_STREAM = 50
MAX_INFLIGHT_TOTAL = 1000
BATCH_TIMEOUT = 10.0
_MAX_ID_LEN = 64


def incomplete() -> ApiError:
    return errors._e(400, 10176, "atomic publish batch is incomplete")


def _too_large() -> ApiError:
    return errors._e(400, 10199, f"atomic publish batch is too large: {MAX_BATCH_SIZE}")


def _raw(hdrs: bytes, key: bytes) -> bytes | None:
    """A header's value as nats-server slices it (None when absent, b"" when empty)."""
    needle = b"\r\n" + key + b":"
    i = hdrs.find(needle)
    if i < 0:
        return None
    end = hdrs.find(b"\r\n", i + len(needle))
    return hdrs[i + len(needle) : end].lstrip(b" ")


class _Batch:
    __slots__ = ("last", "msgs", "timer")

    def __init__(self) -> None:
        self.last = 0
        self.msgs: list[tuple[bytes, bytes, bytes]] = []
        self.timer: Any = None


class _TimedBatch(Protocol):
    timer: Any  # its idle timeout's timer handle, or None


BatchT = TypeVar("BatchT", bound=_TimedBatch)


class OpenBatches(Generic[BatchT]):
    """One stream's open batches of one kind (atomic here, fast in fast_batching.py), by batch id, each
    with its idle timeout's timer. `inflight` counts that kind's open batches on every stream of this
    process: each subclass keeps its own, as nats-server limits the two kinds apart."""

    inflight = 0

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.open: dict[bytes, BatchT] = {}

    def too_many(self, per_stream: int, total: int) -> bool:
        """Opening one more batch would pass a limit: `per_stream` on this stream, `total` in the process."""
        return len(self.open) + 1 > per_stream or type(self).inflight + 1 > total

    def opened(self, batch_id: bytes, batch: BatchT) -> None:
        self.open[batch_id] = batch
        type(self).inflight += 1

    def drop(self, batch_id: bytes) -> None:
        batch = self.open.pop(batch_id, None)
        if batch is not None:
            type(self).inflight -= 1
            if batch.timer is not None:
                batch.timer.cancel()

    def drop_all(self) -> None:
        for batch_id in list(self.open):
            self.drop(batch_id)


class AtomicBatches(OpenBatches[_Batch]):
    """One stream's open batches."""

    inflight = 0  # atomic batches open on every stream of this process

    def publish(
        self, batch_id: bytes, subject: bytes, reply: bytes | None, hdrs: bytes, payload: bytes
    ) -> None:
        """One message of a batch; its answer (or the batch's PubAck, or an error) sent to `reply`."""
        stream = self.stream
        try:
            done = self._take(batch_id, subject, hdrs, payload)
        except OSError as exc:  # the disk said no while storing the batch
            stream._nack(reply, errors.store_failed(str(exc)))
            return
        except ApiError as err:
            stream._nack(reply, err)
            return
        if not reply or stream.config.get("no_ack"):
            return
        if done is None:  # held: an empty answer, as nats-server's
            stream.account.client.publish(reply, None, None, b"")
            return
        seq, count = done
        ack = b'%s"seq":%d,"batch":%s,"count":%d}' % (
            stream._ack_head,
            seq,
            json.dumps(batch_id.decode(errors="replace")).encode(),
            count,
        )
        stream._answer(reply, seq, ack)  # once the store has written the batch

    def _take(self, batch_id: bytes, subject: bytes, hdrs: bytes, payload: bytes) -> tuple[int, int] | None:
        """Hold a batch's message, or store the batch at its commit: (last sequence, count) then."""
        stream = self.stream
        cfg = stream.config
        if cfg["sealed"]:
            raise errors.stream_sealed()
        size = len(hdrs) + len(payload)
        if 0 <= cfg["max_msg_size"] < size:
            raise errors.message_too_big()
        if not cfg.get("allow_atomic"):
            raise errors._e(400, 10174, "atomic publish is disabled")
        if len(batch_id) > _MAX_ID_LEN:
            raise errors._e(400, 10179, "atomic publish batch ID is invalid")
        raw_seq = _raw(hdrs, BATCH_SEQ)
        if not raw_seq or not raw_seq.isdigit() or int(raw_seq) >= 1 << 64:
            raise errors._e(400, 10175, "atomic publish sequence is missing")
        seq = int(raw_seq)
        commit_value = _raw(hdrs, BATCH_COMMIT)
        eob = commit_value == b"eob"
        batch = self.open.get(batch_id)
        if batch is None:
            if seq != 1:
                raise _too_large() if seq - int(eob) > MAX_BATCH_SIZE else incomplete()
            if self.too_many(MAX_INFLIGHT_PER_STREAM, MAX_INFLIGHT_TOTAL):
                raise errors._e(429, 10210, "atomic publish too many inflight")
            batch = _Batch()
            self.opened(batch_id, batch)
        if commit_value is not None and not eob and commit_value != b"1":
            self.drop(batch_id)
            raise errors._e(400, 10200, "atomic publish batch commit is invalid")
        if batch.timer is not None:
            batch.timer.cancel()
        batch.timer = stream.account.js.loop.call_later(BATCH_TIMEOUT, self.drop, batch_id)
        batch.last += 1
        if batch.last != seq or (seq == 1 and eob):
            self.drop(batch_id)
            raise incomplete()
        if seq - int(eob) > MAX_BATCH_SIZE:
            self.drop(batch_id)
            raise _too_large()
        if not eob:
            batch.msgs.append((subject, hdrs, payload))
        if commit_value is None:
            return None
        self.drop(batch_id)
        msgs = batch.msgs
        if eob:  # the last stored message carries the commit header nats-server gives it
            last_subject, last_hdrs, last_payload = msgs[-1]
            msgs[-1] = (last_subject, counters.set_header(last_hdrs, BATCH_COMMIT, b"1"), last_payload)
        self._check(msgs)
        last = 0
        for msg_subject, msg_hdrs, msg_payload in msgs:
            last, _ = stream.process(msg_subject, msg_hdrs, msg_payload)
        return last, len(msgs)

    def _check(self, msgs: list[tuple[bytes, bytes, bytes]]) -> None:
        """What would refuse a message of the batch once the earlier ones are stored, checked before any
        is, in nats-server's order (its staged checks): the batch is stored whole or not at all."""
        stream = self.stream
        st = stream.store
        cfg = stream.config
        counter = stream._counter
        ids: set[bytes] = set()
        in_batch: dict[bytes, int] = {}  # subject -> its messages in the batch
        total_bytes = st.bytes
        for i, (subject, hdrs, payload) in enumerate(msgs):
            if get_header(hdrs, b"Nats-Expected-Last-Msg-Id"):
                raise errors._e(
                    400, 10177, "atomic publish unsupported header used: Nats-Expected-Last-Msg-Id"
                )
            incr = (
                counters.incr_of(hdrs, payload, counter, False) if hdrs.find(b"\r\nNats-Incr:") >= 0 else None
            )
            expected = get_header(hdrs, b"Nats-Expected-Stream")
            if expected and expected.decode(errors="replace") != stream.name:
                raise errors.stream_not_match()
            ttl = get_header(hdrs, b"Nats-TTL")
            if ttl:
                try:
                    bad, given = False, parse_msg_ttl(ttl) != 0
                except ValueError:
                    bad, given = True, False
                if (given or bad) and not cfg.get("allow_msg_ttl"):  # a bad TTL too, as nats-server
                    raise errors.message_ttl_disabled()
                if bad:
                    raise errors.message_ttl_invalid()
            msg_id = get_header(hdrs, b"Nats-Msg-Id")
            if msg_id:
                stream._expire_dedupe(now_ns())
                if msg_id in ids or msg_id in stream._dedupe:
                    raise errors._e(400, 10201, "atomic publish batch contains duplicate message id")
                ids.add(msg_id)
            if hdrs.find(b"\r\nNats-Stream-Source:") >= 0:
                raise errors._e(400, 10227, "message stream source header is not allowed")
            if incr is None and counter:
                raise counters.incr_missing()
            last_seq = get_header(hdrs, b"Nats-Expected-Last-Sequence")
            if last_seq is not None:
                if _uint(last_seq) != st.last_seq:
                    raise errors.wrong_last_sequence(st.last_seq)
                if i:  # only the first message may expect the stream's last sequence
                    raise errors._e(400, 10164, "wrong last sequence")
            per_subject = get_header(hdrs, b"Nats-Expected-Last-Subject-Sequence")
            if per_subject is not None:
                if subject in in_batch:
                    raise errors._e(400, 10164, "wrong last sequence")
                last = st.last_for(subject)
                if _uint(per_subject) != last:
                    raise errors.wrong_last_sequence(last)
            roll = get_header(hdrs, b"Nats-Rollup")
            if roll:
                if not cfg["allow_rollup_hdrs"] or cfg["deny_purge"]:
                    raise errors.rollup_failed("rollup not permitted")
                if roll == b"sub" and subject in in_batch:
                    raise errors.rollup_failed("batch rollup sub invalid")
                if roll == b"all" and i:
                    raise errors.rollup_failed("batch rollup all invalid")
                if roll not in (b"sub", b"all"):
                    raise errors.rollup_failed(
                        f"rollup value invalid: {json.dumps(roll.decode(errors='replace'))}"
                    )
            in_batch[subject] = in_batch.get(subject, 0) + 1
            total_bytes += st.msg_size(subject, hdrs, payload)
            if cfg["discard"] == "new":
                if 0 < cfg["max_msgs"] < st.msgs + i + 1:
                    raise errors.store_failed("maximum messages exceeded")
                if 0 < cfg["max_bytes"] < total_bytes:
                    raise errors.store_failed("maximum bytes exceeded")
                per = cfg["max_msgs_per_subject"]
                held = len(st.subjects.get(subject, ())) + in_batch[subject]
                if cfg.get("discard_new_per_subject") and per > 0 and not roll and held > per:
                    raise errors.store_failed("maximum messages per subject exceeded")
        # The server's and the account's storage limits, for the whole batch at once.
        batch_bytes = total_bytes - st.bytes
        if stream._js.limited:
            stream._js.check_capacity(cfg["storage"], batch_bytes)
        if stream.account.limited:
            stream.account.check_usage(cfg["storage"], batch_bytes)


def _uint(raw: bytes) -> int:
    return int(raw) if raw.isdigit() else 0
