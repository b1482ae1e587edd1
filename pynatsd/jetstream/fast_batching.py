"""Fast batch publishing (`allow_batched`, nats-server 2.14, API level 4): a publisher names its batch in the
reply subject, `<prefix>.<id>.<flow>.<gap mode>.<batch seq>.<op>.$FI` (op 0 start, 1 append, 2 commit,
3 commit with an end marker not stored, 4 ping). Each message is checked and stored at once, as a plain
publish is (no all-or-nothing: what was stored before a kill -9 stays); the publisher hears, on the reply
subject of its latest message, `{"type":"ack","seq":N,"msgs":M}` once every M messages are stored (M starts at
the flow it asked for, at most 500, and follows the number of open batches), `{"type":"gap",...}` when a
sequence is missing, `{"type":"err",...}` when a message is refused past the first, and at the commit one
PubAck with `batch` and `count`. A gap ends the batch unless its gap mode is `ok`. A batch idle for 10 s is
dropped; at most 1000 are open on a stream and 50 000 in the server. All of it is held in memory."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pynatsd.base.logging import get_logger
from pynatsd.jetstream import errors
from pynatsd.jetstream.batching import OpenBatches
from pynatsd.jetstream.errors import ApiError
from pynatsd.jetstream.util import get_header

if TYPE_CHECKING:
    from pynatsd.jetstream.stream import Stream

SUFFIX = b".$FI"
OP_START, OP_APPEND, OP_COMMIT, OP_COMMIT_EOB, OP_PING = range(5)
# nats-server's streamDefaultMaxFastBatchInflight* and streamDefaultMaxBatchTimeout
MAX_INFLIGHT_PER_STREAM = 1000
MAX_INFLIGHT_TOTAL = 50_000
BATCH_TIMEOUT = 10.0
MAX_ACK_MESSAGES = 500  # the most messages between two flow acks, shared by the stream's open batches
_DEFAULT_FLOW = 10
_MAX_ID_LEN = 64
_MAX_UINT64 = (1 << 64) - 1
_REQUIRED_API_LEVEL = b"Nats-Required-Api-Level"
REQUEST_INFO = b"Nats-Request-Info"
log = get_logger()


class Request:
    """What a message's reply subject says of its batch."""

    __slots__ = ("flow", "gap_ok", "id", "op", "seq")

    def __init__(self, batch_id: bytes, flow: int, gap_ok: bool, seq: int, op: int) -> None:
        self.id = batch_id
        self.flow = flow
        self.gap_ok = gap_ok
        self.seq = seq
        self.op = op


def imported_reply(hdrs: bytes) -> bytes | None:
    """The `.$FI` reply subject a service import keeps in Nats-Request-Info (its `_R_` reply names none)."""
    info = get_header(hdrs, REQUEST_INFO)
    if not info or b'"reply"' not in info:
        return None
    try:
        reply = json.loads(info).get("reply")
    except (ValueError, AttributeError):
        return None
    if not isinstance(reply, str) or not reply.endswith(".$FI") or len(reply) <= len(SUFFIX):
        return None
    return reply.encode()


def _go_int(raw: bytes) -> int:
    """nats-server's parseInt64: -1 unless all digits; wraps as an int64 would."""
    if not raw or not raw.isdigit() or not raw.isascii():
        return -1
    n = int(raw) & _MAX_UINT64
    return n - (1 << 64) if n >= 1 << 63 else n


def parse_reply(reply: bytes) -> Request | None:
    """The batch a `.$FI` reply subject names; None when its pattern is invalid (10206)."""
    parts = reply[: -len(SUFFIX)].rsplit(b".", 5)
    if len(parts) < 6:
        return None
    _, batch_id, raw_flow, gap_mode, raw_seq, raw_op = parts
    op = _go_int(raw_op)
    if not OP_START <= op <= OP_PING:
        return None
    if not raw_seq.isdigit() or not raw_seq.isascii() or int(raw_seq) >= _MAX_UINT64 or int(raw_seq) == 0:
        return None
    seq = int(raw_seq)
    if (seq == 1 and op == OP_COMMIT_EOB) or (op == OP_START and seq != 1) or (op == OP_APPEND and seq <= 1):
        return None
    if gap_mode not in (b"fail", b"ok"):
        return None
    flow = _go_int(raw_flow)
    flow = _DEFAULT_FLOW if flow <= 0 else min(flow, 0xFFFF)
    return Request(batch_id, flow, gap_mode == b"ok", seq, op)


class _Batch:
    __slots__ = ("ack_messages", "fseq", "gap_ok", "lseq", "max_ack_messages", "pseq", "sseq", "timer")

    def __init__(self, gap_ok: bool, max_ack_messages: int) -> None:
        self.gap_ok = gap_ok
        self.max_ack_messages = max_ack_messages
        self.ack_messages = 1
        self.lseq = 0  # the highest batch sequence taken
        self.pseq = 0  # the highest batch sequence stored (or given up on)
        self.fseq = 0  # the batch sequence the last flow ack named
        self.sseq = 0  # the stream sequence of the batch's last stored message
        self.timer: Any = None


class FastBatches(OpenBatches[_Batch]):
    """One stream's open fast batches."""

    inflight = 0  # fast batches open on every stream of this process

    def __init__(self, stream: Stream, api_level: int) -> None:
        super().__init__(stream)
        self.api_level = api_level  # the server's, which a message's Nats-Required-Api-Level must not pass

    # -- bookkeeping ----------------------------------------------------------------------------------
    def _arm(self, batch_id: bytes, batch: _Batch) -> None:
        if batch.timer is not None:
            batch.timer.cancel()
        batch.timer = self.stream.account.js.loop.call_later(BATCH_TIMEOUT, self.drop, batch_id)

    # -- answers --------------------------------------------------------------------------------------
    def _send(self, reply: bytes, body: bytes, seq: int = 0) -> None:
        """In order with the stream's other answers, after the store has written what this turn appended."""
        if reply:
            self.stream._answer(reply, seq, body)

    def _flow_ack(self, batch: _Batch, reply: bytes) -> None:
        self._send(reply, b'{"type":"ack","seq":%d,"msgs":%d}' % (batch.fseq, batch.ack_messages))

    def _gap(self, reply: bytes, last: int, seq: int) -> None:
        self._send(reply, b'{"type":"gap","last_seq":%d,"seq":%d}' % (last, seq))

    def _pub_ack(self, batch_id: bytes, batch: _Batch, reply: bytes) -> None:
        body = b'%s"seq":%d,"batch":%s,"count":%d}' % (
            self.stream._ack_head,
            batch.sseq,
            json.dumps(batch_id.decode(errors="replace")).encode(),
            batch.lseq,
        )
        self._send(reply, body, batch.sseq)

    def _check_flow(self, batch: _Batch, reply: bytes) -> bool:
        """A flow ack once `ack_messages` more are stored, its pace set by how many batches are open."""
        step = batch.ack_messages
        if batch.pseq < batch.fseq + step:
            return False
        batch.fseq += (batch.pseq - batch.fseq) // step * step
        allowed = min(max(MAX_ACK_MESSAGES // len(self.open), 1), batch.max_ack_messages)
        if batch.ack_messages < allowed:
            batch.ack_messages = min(batch.ack_messages * 2, allowed)
        elif batch.ack_messages > allowed:
            batch.ack_messages = max(batch.ack_messages // 2, allowed)
        self._flow_ack(batch, reply)
        return True

    def _commit(self, batch_id: bytes, batch: _Batch, reply: bytes) -> None:
        """End the batch where it stands: its PubAck names the last message stored and the batch's count."""
        self.drop(batch_id)
        self._pub_ack(batch_id, batch, reply)

    # -- publishing -----------------------------------------------------------------------------------
    def publish(
        self, subject: bytes, reply: bytes, hdrs: bytes | None, payload: bytes, named_by: bytes
    ) -> None:
        """One message whose reply subject ends in `.$FI` (`named_by`: that subject, the reply itself or,
        across a service import, the one in its Nats-Request-Info): taken as nats-server takes it."""
        stream = self.stream
        can_respond = not stream._no_ack
        request = parse_reply(named_by)
        if named_by is not reply and hdrs:  # what the import added is not stored, as nats-server's
            hdrs = _without_header(hdrs, REQUEST_INFO)
        try:
            if stream._sealed:
                raise errors.stream_sealed()
            if len(payload) + (len(hdrs) if hdrs else 0) > stream._max_msg_size:
                raise errors.message_too_big()
            if not stream.config.get("allow_batched"):
                raise errors._e(400, 10205, "batch publish is disabled")
            if request is None:
                raise errors._e(400, 10206, "batch publish pattern is invalid")
            if len(request.id) > _MAX_ID_LEN:
                raise errors._e(400, 10207, "batch publish ID is invalid")
            batch_id = request.id
            batch = self.open.get(batch_id)
            if batch is None:
                if request.seq != 1 or request.op == OP_PING:  # (a ping opens no batch, as nats-server's)
                    raise errors._e(400, 10208, "batch publish ID unknown")
                if self.too_many(MAX_INFLIGHT_PER_STREAM, MAX_INFLIGHT_TOTAL):
                    raise errors._e(429, 10211, "batch publish too many inflight")
                batch = _Batch(request.gap_ok, request.flow)
                self.opened(batch_id, batch)
                # Alone, the publisher gets the pace it asked for; beside others it starts at every message.
                batch.ack_messages = min(MAX_ACK_MESSAGES, request.flow) if len(self.open) == 1 else 1
            if hdrs and hdrs.find(b"\r\n" + _REQUIRED_API_LEVEL + b":") >= 0:
                level = get_header(hdrs, _REQUIRED_API_LEVEL)
                if level:
                    required = _go_atoi(level)
                    if required is None or required > self.api_level:
                        self.drop(batch_id)
                        raise errors._e(412, 10185, "JetStream minimum api level required")
                    hdrs = _without_header(hdrs, _REQUIRED_API_LEVEL)
        except ApiError as err:
            if can_respond:
                stream._nack(reply, err)
            return
        self._arm(batch_id, batch)
        if request.op == OP_PING:
            self._ping(batch_id, batch, request, reply)
        else:
            self._take(batch_id, batch, request, subject, reply, hdrs, payload, can_respond)

    def _ping(self, batch_id: bytes, batch: _Batch, request: Request, reply: bytes) -> None:
        """A ping has the last flow ack sent again, or reports the gap up to it."""
        if request.seq > batch.lseq:
            self._gap(reply, batch.lseq + 1, request.seq + 1)
            if not batch.gap_ok:
                self._commit(batch_id, batch, reply)
                return
            batch.lseq = batch.pseq = request.seq
            if self._check_flow(batch, reply):
                return
        self._flow_ack(batch, reply)

    def _take(
        self,
        batch_id: bytes,
        batch: _Batch,
        request: Request,
        subject: bytes,
        reply: bytes,
        hdrs: bytes | None,
        payload: bytes,
        can_respond: bool,
    ) -> None:
        stream = self.stream
        seq = request.seq
        batch.lseq += 1
        if batch.lseq != seq:
            self._gap(reply, batch.lseq, seq)
            if batch.gap_ok and seq > batch.lseq:
                batch.lseq = seq
            else:
                batch.lseq -= 1
                batch.pseq = batch.lseq
                self._commit(batch_id, batch, reply)
                return
        commit = request.op in (OP_COMMIT, OP_COMMIT_EOB)
        if request.op == OP_COMMIT_EOB:  # the end marker is not a message: the batch ends before it
            batch.lseq -= 1
            batch.pseq = batch.lseq
            self._commit(batch_id, batch, reply)
            return
        if seq == 1 and can_respond and not commit:
            self._flow_ack(batch, reply)
        try:
            stored, duplicate = stream.process(subject, hdrs, payload)
        except OSError as exc:  # the disk said no: as any other refusal of this message
            self._refused(batch_id, batch, request, reply, errors.store_failed(str(exc)), commit)
            return
        except ApiError as err:
            self._refused(batch_id, batch, request, reply, err, commit)
            return
        except Exception as exc:  # a bug must not leave the publisher waiting for its answers
            log.exception("JetStream stream %s: storing failed", stream.name)
            self._refused(
                batch_id, batch, request, reply, errors.general(f"{type(exc).__name__}: {exc}"), commit
            )
            return
        if duplicate:
            batch.pseq = seq
            self._check_flow(batch, reply)
            if not commit:
                return
            if not batch.gap_ok and batch.lseq == 1:  # a batch of one: answered as a plain publish
                self.drop(batch_id)
                body = b'%s"seq":%d,"duplicate": true,"batch":%s,"count":%d}' % (
                    stream._ack_head,
                    stored,
                    json.dumps(batch_id.decode(errors="replace")).encode(),
                    seq,
                )
                self._send(reply, body)
                return
            self._commit(batch_id, batch, reply)
            return
        batch.sseq = stored
        batch.pseq = batch.lseq
        if commit:
            self._commit(batch_id, batch, reply)
            return
        self._check_flow(batch, reply)

    def _refused(
        self, batch_id: bytes, batch: _Batch, request: Request, reply: bytes, err: ApiError, commit: bool
    ) -> None:
        """A message the stream refused: the batch's first one answered as a plain publish (and the batch
        gone), a later one reported; the batch ends there unless its gap mode is `ok`."""
        stream = self.stream
        stream.account.api_errors_on_publish += 1
        if not batch.gap_ok and batch.lseq == 1:
            self.drop(batch_id)
            self._send(reply, _error(stream.name, err))
            return
        body = json.dumps({"type": "err", "seq": request.seq, "error": err.json()}, separators=(",", ":"))
        self._send(reply, body.encode())
        if batch.gap_ok and not commit:
            return
        batch.lseq -= 1
        batch.pseq = batch.lseq
        self._commit(batch_id, batch, reply)


def _go_atoi(raw: bytes) -> int | None:
    """Go's strconv.Atoi: a signed decimal int64, else None."""
    digits = raw[1:] if raw[:1] in (b"+", b"-") else raw
    if not digits.isdigit() or not digits.isascii():
        return None
    n = int(raw)
    return n if -(1 << 63) <= n < 1 << 63 else None


def _error(stream: str, err: ApiError) -> bytes:
    return json.dumps({"error": err.json(), "stream": stream, "seq": 0}, separators=(",", ":")).encode()


def _without_header(hdrs: bytes, key: bytes) -> bytes | None:
    """The header block without `key`'s lines (None when none is left, as nats-server's)."""
    needle = b"\r\n" + key + b":"
    while (i := hdrs.find(needle)) >= 0:
        end = hdrs.find(b"\r\n", i + len(needle))
        if end < 0:
            break
        hdrs = hdrs[:i] + hdrs[end:]
    return hdrs if len(hdrs) > len(b"NATS/1.0\r\n\r\n") else None
