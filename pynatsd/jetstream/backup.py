"""`$JS.API.STREAM.SNAPSHOT.<stream>` and `$JS.API.STREAM.RESTORE.<stream>` in nats-server 2.15's format: a
backup taken from either server restores on the other.

The backup is nats-server's version 2 archive inside an S2 stream (base/s2.py): `NATSARC1`, then entries
`uvarint name_len | varint ts | uvarint seq | uvarint hdr_len | uvarint data_len | name | headers | data`:
`state.json` (the stream's state), one `consumers/<name>` per consumer (`{"config", "state"}` JSON), each
message (name = subject, its sequence, timestamp, headers and data), and an all-zero entry ending it.
nats-server before 2.15 wrote a tar of its store directory instead: restored too (legacy_backup.py).

Transport, as nats-server's: a snapshot's chunks go to the request's `deliver_subject`, each (but a short
last one) with a reply `$JS.SNAPSHOT.ACK.<stream>.<id>.<size>.<index>` the client answers; at most
`window_size / chunk_size` go unanswered; an empty message ends it (status 204 once a full chunk went, none
before; 408 No Interest / No Flow Response or 500 ends it early). A restore answers with a
`deliver_subject` the client sends chunks to, each acked with an empty message; an empty chunk ends it and
its reply gets the stream's info (or the failure, 10062): decoding goes as the chunks come.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

from pynatsd.base.ids import event_id
from pynatsd.base.logging import get_logger
from pynatsd.base.s2 import STREAM_ID, S2Decoder, S2Error, encode_stream
from pynatsd.base.varint import put_uvarint
from pynatsd.jetstream import consumer as consumer_mod
from pynatsd.jetstream import errors, requests
from pynatsd.jetstream.account import PARTIAL_RESTORE
from pynatsd.jetstream.consumer import Consumer
from pynatsd.jetstream.errors import ApiError
from pynatsd.jetstream.legacy_backup import BackupError, LegacyBackup
from pynatsd.jetstream.sourcing import check_origins
from pynatsd.jetstream.stream import Stream, normalize_config
from pynatsd.jetstream.util import encode, get_header, headers, now_ns, parse_msg_ttl, rfc3339
from pynatsd.protocol.gojson import Struct
from pynatsd.protocol.subjects import is_literal_subject, is_valid_subject

if TYPE_CHECKING:
    from pynatsd.broker.internal import Subscription
    from pynatsd.jetstream.account import JsAccount

log = get_logger()

MAGIC = b"NATSARC1"
_TYPE = "io.nats.jetstream.api.v1."
# The snapshot_complete advisory's `error` for the status that ended a snapshot early (nats-server's words).
_SNAPSHOT_ERRORS = {
    b"408 No Interest": "no interest",
    b"408 No Flow Response": "no flow response",
    b"500 snapshot failed": "snapshot failed",
}
Json = dict[str, Any]
# A requester's client info as advisories carry it (None: no client to name).
ClientInfo = Json | None
CHUNK_DEFAULT, WINDOW_DEFAULT = 128 * 1024, 8 * 1024 * 1024
ACK_TIMEOUT = 5.0  # nats-server's snapshotAckTimeout: no ack for this long ends a snapshot
INTEREST_WAIT = 2.0  # a snapshot waits this long for its deliver subject's subscriber
RESTORE_IDLE = 5.0  # nats-server's: a restore without a chunk for this long is abandoned

SNAPSHOT_REQUEST = Struct(
    "JSApiStreamSnapshotRequest",
    {"deliver_subject": "string", "no_consumers": "bool", "chunk_size": "int", "window_size": "int",
     "jsck": "bool"},
)  # fmt: skip
RESTORE_REQUEST = Struct(
    "JSApiStreamRestoreRequest",
    {
        "config": Struct("StreamConfig", requests.STREAM_FIELDS),
        "state": Struct("StreamState", {}, strict=False),
    },
)


# -- the archive ----------------------------------------------------------------------------------------
def entry(name: bytes, ts: int, seq: int, hdrs: bytes, data: bytes) -> bytes:
    """One archive entry (Go's PutVarint zig-zags the signed timestamp)."""
    zigzag = (ts << 1) ^ (ts >> 63)
    return b"".join(
        (put_uvarint(len(name)), put_uvarint(zigzag & (2**64 - 1)), put_uvarint(seq),
         put_uvarint(len(hdrs)), put_uvarint(len(data)), name, hdrs, data)
    )  # fmt: skip


class Entry:
    __slots__ = ("data", "hdr_len", "name", "seq", "ts")

    def __init__(self, name: bytes, ts: int, seq: int, hdr_len: int, data: bytes) -> None:
        self.name, self.ts, self.seq, self.hdr_len, self.data = name, ts, seq, hdr_len, data


class ArchiveReader:
    """Entries of an archive as its bytes arrive (`feed`); `ValueError` when they are no archive."""

    def __init__(self, max_entry: int) -> None:
        self._buf = bytearray()
        self._magic = False
        self._max_entry = max_entry

    def feed(self, data: bytes) -> list[Entry]:
        self._buf += data
        buf, at = self._buf, 0
        out: list[Entry] = []
        if not self._magic:
            if len(buf) < len(MAGIC):
                return out
            if buf[: len(MAGIC)] != MAGIC:
                raise BackupError("archive: invalid archive stream")
            self._magic, at = True, len(MAGIC)
        while True:
            fields, pos = [], at
            for _ in range(5):
                value = shift = 0
                while pos < len(buf):
                    byte = buf[pos]
                    pos += 1
                    value |= (byte & 0x7F) << shift
                    shift += 7
                    if byte < 0x80:
                        break
                    if shift >= 70:
                        raise BackupError("archive: invalid archive stream")
                else:
                    break
                fields.append(value)
            if len(fields) < 5:
                break
            name_len, zigzag, seq, hdr_len, data_len = fields
            if name_len > 1 << 20 or hdr_len + data_len > self._max_entry:
                raise BackupError("archive: invalid archive stream")
            end = pos + name_len + hdr_len + data_len
            if end > len(buf):
                break
            ts = (zigzag >> 1) ^ -(zigzag & 1)
            name = bytes(buf[pos : pos + name_len])
            out.append(Entry(name, ts, seq, hdr_len, bytes(buf[pos + name_len : end])))
            at = end
        del buf[:at]
        return out

    def truncation(self) -> str:
        """Why the archive ends where it does, in nats-server's reader's words (EOF at an entry's start)."""
        if not self._magic:
            return "unexpected EOF" if self._buf else "EOF"
        return "archive: invalid archive stream" if self._buf else "EOF"


def restore_failed(why: str) -> ApiError:
    return errors._e(500, 10062, f"restore failed: {why}")


# -- snapshot -------------------------------------------------------------------------------------------
def _consumer_state(consumer: Consumer, last_seq: int) -> dict[str, Any]:
    """nats-server's ConsumerState of a consumer, bounded to the snapshot's last sequence."""
    ack_wait = int(consumer.config.get("ack_wait") or 30_000_000_000)
    pending = {
        str(seq): {"sequence": dseq, "ts": (due - ack_wait) if due else now_ns()}
        for seq, (dseq, due) in sorted(consumer.pending.items())
        if seq <= last_seq
    }
    redelivered = {str(seq): n for seq, n in sorted(consumer.rdc.items()) if seq <= last_seq}
    delivered = consumer.info()["delivered"]
    state: dict[str, Any] = {
        "delivered": {"consumer_seq": consumer.dseq, "stream_seq": min(delivered["stream_seq"], last_seq)},
        "ack_floor": {"consumer_seq": consumer.adflr, "stream_seq": min(consumer.asflr, last_seq)},
    }
    if pending:
        state["pending"] = pending
    if redelivered:
        state["redelivered"] = redelivered
    return state


def archive(stream: Stream, state: dict[str, Any], with_consumers: bool) -> Iterator[bytes]:
    """The archive's bytes: state (its consumer count that of the consumers in it), consumers, then the
    messages up to the state's last sequence."""
    ts = now_ns()
    yield MAGIC
    archived = {**state, "consumer_count": state["consumer_count"] if with_consumers else 0}
    yield entry(b"state.json", ts, 0, b"", json.dumps(archived, separators=(",", ":")).encode())
    last = state["last_seq"]
    if with_consumers:
        for name, consumer in list(stream.consumers.items()):
            body = {"config": consumer.config, "state": _consumer_state(consumer, last)}
            yield entry(f"consumers/{name}".encode(), ts, 0, b"", json.dumps(body).encode())
    store = stream.store
    seq = store.next_seq(max(state["first_seq"], 1))
    while seq is not None and seq <= last:  # (what is removed meanwhile is left out)
        msg = store.load(seq)
        if msg is not None:
            yield entry(msg.subject, msg.ts, msg.seq, msg.hdrs or b"", msg.data)
        seq = store.next_seq(seq + 1)
    yield entry(b"", 0, 0, b"", b"")


class SnapshotSender:
    """Sends one snapshot to its deliver subject, `window` bytes at most unacknowledged."""

    def __init__(
        self, account: JsAccount, stream: Stream, req: Json, state: Json, client: ClientInfo
    ) -> None:
        self.account = account
        self.client_info = client  # who asked (its advisories name it)
        self.stream = stream
        self.deliver = str(req["deliver_subject"]).encode()
        chunk = req.get("chunk_size") or CHUNK_DEFAULT
        window = req.get("window_size") or WINDOW_DEFAULT
        self.chunk = min(max(1024, chunk), 1024 * 1024)
        window = max(min(max(1024, window), 32 * 1024 * 1024), self.chunk)
        self.slots = window // self.chunk
        self.with_consumers = not req.get("no_consumers")
        self.state = state
        self._acked = asyncio.Event()
        self._had_interest = False  # whether the deliver subject had a subscriber when the chunks began

    def _interested(self) -> bool:
        res = self.account.client.sublist.match(self.deliver)
        return bool(res.groups) or bool(res.plain)

    def _on_ack(self, subject: bytes, reply: bytes | None, hdrs: bytes | None, payload: bytes) -> None:
        self.slots += 1
        self._acked.set()

    async def run(self) -> None:
        client, advisories, start = self.account.client, self.account.advisories, now_ns()
        advisories.backup("snapshot_create", self.stream.name, self.client_info, state=self.state)
        if not self._interested():
            loop = asyncio.get_running_loop()
            appeared = loop.create_future()

            def interest() -> None:
                if not appeared.done():
                    appeared.set_result(None)

            client.sublist.notify_on_interest(self.deliver, interest)
            try:
                await asyncio.wait_for(appeared, INTEREST_WAIT)
            except TimeoutError:  # sent all the same, as nats-server does: unacked, it ends No Flow Response
                client.sublist.cancel_notification(self.deliver, interest)
        self._had_interest = self._interested()
        ack_subject = b"$JS.SNAPSHOT.ACK.%s.%s" % (self.stream.name.encode(), event_id().encode())
        sub = client.subscribe(ack_subject + b".>", self._on_ack)
        status: bytes | None = None
        try:
            status = await self._send(ack_subject)
        except Exception as exc:  # the client hears a 500, never Python's words
            log.error(
                "Snapshot of stream '%s > %s' failed", self.account.name, self.stream.name, exc_info=exc
            )
            status = b"500 snapshot failed"
        finally:
            client.unsubscribe(sub)
        client.publish(self.deliver, None, headers(status) if status else None, b"")
        error = _SNAPSHOT_ERRORS.get(status or b"")
        fields = {"start": rfc3339(start), "end": rfc3339(now_ns()), **({"error": error} if error else {})}
        advisories.backup("snapshot_complete", self.stream.name, self.client_info, **fields)

    async def _send(self, ack_subject: bytes) -> bytes | None:
        """The chunks; returns the closing message's status (None: no status header)."""
        client = self.account.client
        pending = bytearray()
        source = _s2_framed(archive(self.stream, self.state, self.with_consumers))
        exhausted = False
        status: bytes | None = None
        index = 1
        loop = asyncio.get_running_loop()
        ack_deadline = loop.time() + ACK_TIMEOUT  # from the last chunk sent, as nats-server's timer
        while True:
            while not exhausted and len(pending) < self.chunk:
                part = next(source, None)
                if part is None:
                    exhausted = True
                else:
                    pending += part
                    await asyncio.sleep(0)  # one S2 block (64 KiB) a loop turn
            if len(pending) < self.chunk:  # the last, short chunk goes without an ack reply
                if pending:
                    client.publish(self.deliver, None, None, bytes(pending))
                return status
            while self.slots <= 0:
                self._acked.clear()
                try:
                    await asyncio.wait_for(self._acked.wait(), max(ack_deadline - loop.time(), 0))
                except TimeoutError:
                    return b"408 No Flow Response"
            if self._interested() != self._had_interest:  # its receiver went (or one came late)
                return b"408 No Interest"
            self.slots -= 1
            chunk = bytes(pending[: self.chunk])
            del pending[: self.chunk]
            client.publish(self.deliver, b"%s.%d.%d" % (ack_subject, len(chunk), index), None, chunk)
            ack_deadline = loop.time() + ACK_TIMEOUT
            status = b"204"
            index += 1
            await asyncio.sleep(0)


def _s2_framed(parts: Iterator[bytes]) -> Iterator[bytes]:
    """The archive's bytes as an S2 stream, in blocks of about 64 KiB."""
    yield STREAM_ID
    block = bytearray()
    for part in parts:
        block += part
        if len(block) >= 64 * 1024:
            yield encode_stream(bytes(block))[len(STREAM_ID) :]
            block.clear()
    if block:
        yield encode_stream(bytes(block))[len(STREAM_ID) :]


# -- restore --------------------------------------------------------------------------------------------
class Restore:
    """One restore in progress: decodes chunks as they come into a stream not yet in the account."""

    def __init__(self, account: JsAccount, cfg: dict[str, Any], deliver: bytes, client: ClientInfo) -> None:
        self.account = account
        self.client_info = client  # who asked (its advisories name it)
        self.began = now_ns()
        self.received = 0  # bytes of chunks
        self.cfg = cfg
        self.name: str = cfg["name"]
        self.deliver = deliver
        self.s2 = S2Decoder()
        self.reader = ArchiveReader(account.js.server.options.max_payload + 1024)
        self.mode = ""  # "archive" (nats-server 2.15's), "tar" (earlier servers'), "" until 8 bytes came
        self._head = bytearray()
        self._spool: IO[bytes] | None = None  # a tar snapshot, until it is complete
        self.last_ts: int | None = None  # the stream's last time, when the backup says it
        self.admitted = False  # the stream is the account's: never removed by this restore
        self.stream: Stream | None = None
        self.state: dict[str, Any] = {}
        self.consumers_left = -1  # consumers/<name> entries still expected (-1: state.json not read yet)
        self.consumers: list[tuple[str, dict[str, Any]]] = []
        self.last = 0
        self.ended = False
        self.error: ApiError | None = None
        self.sub: Subscription | None = None
        self._idle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self.sub = self.account.client.subscribe(self.deliver, self._on_chunk)
        self._arm()

    def _arm(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        self._idle = asyncio.get_running_loop().call_later(RESTORE_IDLE, self._stalled)

    def _stalled(self) -> None:
        log.warning("Restore for stream '%s > %s' is stalled", self.account.name, self.name)
        self._close(failed=True)

    def abandon(self) -> None:
        """The server stops: what was decoded so far is dropped."""
        self._close(failed=True)

    def _close(self, failed: bool) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if self.sub is not None:
            self.account.client.unsubscribe(self.sub)
            self.sub = None
        self.account.restoring.pop(self.name, None)
        if self._spool is not None:
            self._spool.close()
            self._spool = None
        if failed and self.stream is not None and not self.admitted:
            self.stream.store.delete()
            if self.stream.directory is not None:
                shutil.rmtree(self.stream.directory, ignore_errors=True)
            self.stream = None

    def _on_chunk(self, subject: bytes, reply: bytes | None, hdrs: bytes | None, payload: bytes) -> None:
        client = self.account.client
        if not reply:  # nats-server needs each chunk's reply to answer on: the restore is abandoned
            log.warning("Restore of stream '%s > %s': a chunk without reply", self.account.name, self.name)
            self._close(failed=True)
            return
        if not payload:
            self._finish(reply)
            return
        self._arm()
        self.received += len(payload)
        if self.error is None:
            self.error = self._attempt(self._feed, payload)
        client.publish(reply, None, None, b"")

    def _attempt(self, step: Callable[[bytes], None], payload: bytes = b"") -> ApiError | None:
        """Runs a step of the restore; the error the client is to hear, if it failed."""
        try:
            step(payload)
            if self.stream is not None:
                self.stream.store.commit()  # what came so far written (not held in memory)
        except ApiError as exc:  # nats-server's own errors reach the client as they are
            return exc
        except (BackupError, S2Error) as exc:  # the bytes are no backup: said in our words
            return restore_failed(str(exc))
        except Exception as exc:  # a store write failed, or a bug: the log has it, the client a fixed text
            log.error("Restore of stream '%s > %s' failed", self.account.name, self.name, exc_info=exc)
            return restore_failed("internal error")
        return None

    def _feed(self, payload: bytes) -> None:
        if self.ended:  # nats-server reads no further than the end entry
            return
        data = self.s2.feed(payload)
        if not self.mode:  # the first 8 bytes tell the format
            self._head += data
            if len(self._head) < len(MAGIC):
                return
            data, self._head = bytes(self._head), bytearray()
            self.mode = "archive" if data.startswith(MAGIC) else "tar"
            if self.mode == "tar":  # read at the end (seeking back and forth): spooled to disk until then
                self._spool = tempfile.TemporaryFile(dir=self.account.js.store_root)  # noqa: SIM115 (closed by _close)
        if self._spool is not None:
            self._spool.write(data)
            return
        for item in self.reader.feed(data):
            if self.ended:
                return
            if self.consumers_left < 0:
                self._begin(item)
            elif self.consumers_left > 0:
                self._consumer(item)
            else:
                self._message(item)

    def _begin(self, item: Entry) -> None:
        if item.name != b"state.json":
            raise BackupError("expected state.json first")
        try:
            state = json.loads(item.data)
        except ValueError:
            raise BackupError("error in state.json") from None
        if not isinstance(state, dict) or not all(
            isinstance(state.get(k, 0), int) and state.get(k, 0) >= 0
            for k in ("first_seq", "last_seq", "consumer_count")
        ):
            raise BackupError("error in state.json")
        self.state = state
        self._create(int(state.get("first_seq") or 0), now_ns())
        self.consumers_left = int(state.get("consumer_count") or 0)

    def _create(self, first: int, created: int) -> None:
        """The stream the backup's messages go to (not in the account until the end)."""
        if self.name in self.account.streams:
            raise errors._e(400, 10130, "stream name already in use, cannot restore")
        self._check_subjects()
        directory = self.account.dir / self.name if self.cfg["storage"] == "file" else None
        if directory is not None and directory.exists():
            shutil.rmtree(directory)  # what a stream of this name once left
        self.stream = Stream(self.account, self.cfg, created, directory)
        self.stream.restored = True
        if directory is not None:  # until it joins the account: a crash leaves nothing a restart would load
            (directory / PARTIAL_RESTORE).touch()
        if first > 1:
            self.stream.store.skip_to(first - 1)
        self.last = max(first - 1, 0)  # (the backup's first sequence, as nats-server counts them)

    def _check_subjects(self) -> None:
        try:
            self.account.check_new_stream(self.cfg)
        except ApiError as exc:  # wrapped by nats-server, so no longer its own error
            raise restore_failed(f"error adding stream: {exc.description}") from None

    def _consumer(self, item: Entry) -> None:
        if not item.name.startswith(b"consumers/"):
            raise BackupError(f"expected consumer, found {_quoted(item.name.decode(errors='replace'))}")
        name = item.name[len(b"consumers/") :].decode(errors="replace")
        try:
            body = json.loads(item.data)
        except ValueError:
            raise BackupError(f"failed to decode consumer {_quoted(name)} state") from None
        if not isinstance(body, dict) or not isinstance(body.get("config"), dict):
            raise BackupError(f"consumer {_quoted(name)} is missing config")
        if not isinstance(body.get("state"), dict):
            raise BackupError(f"consumer {_quoted(name)} is missing state")
        self.consumers.append((name, body))
        self.consumers_left -= 1

    def _message(self, item: Entry) -> None:
        if item.seq == 0:
            if item.ts or item.hdr_len or item.data:
                raise BackupError("expected message sequence")
            self.ended = True
            return
        if item.seq <= self.last:
            raise BackupError(f"message sequence {item.seq} out of order")
        if item.hdr_len > len(item.data):
            raise BackupError(f"failed to parse message sequence {item.seq}: invalid header length")
        hdrs = item.data[: item.hdr_len] if item.hdr_len else None
        self._store(item.seq, item.ts, item.name, hdrs, item.data[item.hdr_len :])

    def _store(self, seq: int, ts: int, subject: bytes, hdrs: bytes | None, data: bytes) -> None:
        stream = self.stream
        assert stream is not None
        max_size = self.cfg["max_msg_size"]
        if 0 <= max_size < len(data) + (len(hdrs) if hdrs else 0):
            raise BackupError(f"message sequence {seq} exceeds maximum message size")
        self.last = seq
        ttl = 0
        raw_ttl = get_header(hdrs, b"Nats-TTL")
        if raw_ttl:
            try:
                ttl = parse_msg_ttl(raw_ttl)
            except ValueError:
                raise BackupError("failed to parse message TTL: invalid per-message TTL") from None
            if ttl > 0 and now_ns() > ts + ttl * 1_000_000_000:
                return  # expired already: only its sequence is kept (nats-server's)
        store = stream.store
        js, storage = self.account.js, self.cfg["storage"]
        size = store.msg_size(subject, hdrs, data)
        if js.limited:
            js.check_capacity(storage, size)
        if self.account.limited:
            self.account.check_usage(storage, size)
        if seq <= store.last_seq:  # (a configured first_seq past the backup's first message)
            raise BackupError(
                f"failed to store message sequence {seq}: expected sequence does not match store"
            )
        store.skip_to(seq - 1)
        store.append(subject, hdrs, data, ts)
        if ttl:
            store.with_ttl.append(seq)

    def _restore_tar(self, _: bytes) -> None:
        """A snapshot of nats-server before 2.15 (legacy_backup.py), read from the spool."""
        assert self._spool is not None
        self._spool.seek(0)
        backup = LegacyBackup(self._spool)
        if backup.name != self.name:
            raise BackupError("stream names do not match")
        self._create(0, backup.created or now_ns())
        for msg in backup.messages():
            self._store(msg.seq, msg.ts, msg.subject, msg.hdrs, msg.data)
        assert self.stream is not None
        self.stream._enforce_limits()  # what its limits removed from the middle left no tombstone
        self.state, self.last_ts = {"last_seq": backup.last_seq}, backup.last_ts
        self.consumers = list(backup.consumers())
        self.ended = True

    def _finish(self, reply: bytes) -> None:
        resp: dict[str, Any] = {"type": _TYPE + "stream_create_response"}
        error = self.error
        if error is None and self._spool is not None and self.s2.at_chunk_boundary:
            error = self._attempt(self._restore_tar)
        if error is None and not self.ended:
            if not self.s2.at_chunk_boundary:
                why = "s2: corrupt input"
            elif not self.mode:
                why = "unexpected EOF" if self._head else "EOF"
            else:
                why = self.reader.truncation()
            error = restore_failed(why)
        if error is None:
            error = self._attempt(self._complete)
        if error is None and self.stream is not None:
            info = self.stream.info()
            resp.update(config=info["config"], created=info["created"], state=info["state"])
            resp["ts"] = rfc3339(now_ns())
        if error is not None:
            log.warning("Restore failed for stream '%s > %s': %s", self.account.name, self.name,
                        error.description)  # fmt: skip
            resp["error"] = error.json()
        self._close(failed=error is not None)
        fields = {"start": rfc3339(self.began), "end": rfc3339(now_ns()), "bytes": self.received}
        self.account.advisories.backup("restore_complete", self.name, self.client_info, **fields)
        self.account.client.publish(reply, None, None, encode(resp))

    def _complete(self, _: bytes) -> None:
        """The decoded stream joins the account, with its consumers, durable before anyone hears of it."""
        stream, account = self.stream, self.account
        assert stream is not None
        store = stream.store
        last = int(self.state.get("last_seq") or 0)
        if last > store.last_seq:
            self._pad_to(stream, last, self.last_ts if self.last_ts is not None else store.last_ts)
        if self.name in account.streams:
            raise errors._e(400, 10130, "stream name already in use, cannot restore")
        self._check_subjects()
        consumers = [_consumer_plan(stream, name, body) for name, body in self.consumers]  # all valid first
        stream._rebuild_ttls()  # (not the duplicate window's message ids: nats-server's restore has none)
        account.admit_stream(stream)
        self.admitted = True
        if stream.directory is not None:
            (stream.directory / PARTIAL_RESTORE).unlink(missing_ok=True)
        account.advisories.stream_action(stream.name, "create")
        for cfg, state, due in consumers:
            consumer = Consumer(stream, cfg["name"], cfg, now_ns(), state)
            for seq, deadline in due.items():  # redelivered once their ack wait from the delivery is over
                pending = consumer.pending.get(seq)
                if pending is not None:
                    consumer.pending[seq] = (pending[0], deadline)
            stream.consumers[consumer.name] = consumer
            if consumer.persistent:
                consumer.save()
        store.flush()

    @staticmethod
    def _pad_to(stream: Stream, last: int, last_ts: int) -> None:
        """Trailing deleted sequences: the last sequence kept (a placeholder stored and removed, so a file
        store keeps it across a restart), and the last time: the last message's in nats-server's archive
        restore, the last record's in its tar restore (the placeholder's, after a restart)."""
        store = stream.store
        store.skip_to(last - 1)
        store.append(b"_", None, b"", last_ts)
        store.remove(last)
        store.last_ts = last_ts


def _quoted(name: str) -> str:
    """A name as Go's %q writes it in nats-server's errors."""
    return json.dumps(name, ensure_ascii=False)


def _consumer_plan(stream: Stream, name: str, body: dict[str, Any]) -> tuple[Json, Json, dict[int, int]]:
    """A backed-up consumer's config (checked as a create's), its state as pynatsd keeps it, and when its
    pending messages are due again; ApiError 10062 if either does not hold."""
    raw = {k: v for k, v in body["config"].items() if k != "pause_until" or v}
    raw["name"] = raw.get("name") or raw.get("durable_name") or name  # (never a path: checked as a name)
    try:
        cfg = consumer_mod.normalize_config(raw, stream)
    except ApiError as exc:  # wrapped by nats-server, so no longer its own error
        raise restore_failed(f"failed to add consumer {_quoted(name)}: {exc.description}") from None
    try:
        state = body["state"]
        delivered, floor = state.get("delivered") or {}, state.get("ack_floor") or {}
        pending = {int(s): p for s, p in (state.get("pending") or {}).items()}
        ours = {
            "sseq": int(delivered.get("stream_seq") or 0) + 1,
            "dseq": int(delivered.get("consumer_seq") or 0),
            "asflr": int(floor.get("stream_seq") or 0),
            "adflr": int(floor.get("consumer_seq") or 0),
            "pending": [[s, int(p.get("sequence") or 0)] for s, p in sorted(pending.items())],
            "rdc": [[int(s), int(n)] for s, n in (state.get("redelivered") or {}).items()],
        }
        ack_wait = int(cfg.get("ack_wait") or 30_000_000_000)
        due = {s: int(p.get("ts") or 0) + ack_wait for s, p in pending.items()}
    except (AttributeError, TypeError, ValueError):
        raise restore_failed(f"failed to set consumer {_quoted(name)} state: invalid state") from None
    return cfg, ours, due


# -- the API's side -------------------------------------------------------------------------------------
def snapshot_request(
    account: JsAccount, stream_name: str, payload: bytes, client: ClientInfo
) -> dict[str, Any]:
    """Checks a snapshot request in nats-server's order; its answer, the chunks following it."""
    stream = account.streams.get(stream_name)
    if stream is None:
        raise errors.stream_not_found()
    req = requests.parse(payload, SNAPSHOT_REQUEST)
    deliver = str(req.get("deliver_subject") or "").encode()
    if not deliver or not is_valid_subject(deliver) or not is_literal_subject(deliver):
        raise errors._e(400, 10015, "deliver subject not valid")
    # (`jsck`, check_msgs: nats-server 2.15's snapshots check each message as they read it; so do ours)
    # The answer's state is the stream's (its consumers counted even when the archive leaves them out).
    state = {k: v for k, v in stream.state().items() if k != "subjects"}
    sender = SnapshotSender(account, stream, req, state, client)
    task = asyncio.get_running_loop().create_task(sender.run())
    account.background.add(task)
    task.add_done_callback(account.background.discard)
    return {"config": stream.config, "state": state}


def restore_request(
    account: JsAccount, stream_name: str, payload: bytes, client: ClientInfo
) -> dict[str, Any]:
    """Checks a restore request in nats-server's order; its answer names where the chunks go."""
    req = requests.parse(payload, RESTORE_REQUEST)
    raw = dict(req.get("config") or {})
    if not raw.get("name"):
        raw["name"] = stream_name
    if raw["name"] != stream_name:
        raise errors.stream_mismatch()
    if "/" in stream_name or "\\" in stream_name:
        raise errors._e(400, 10128, "Stream name can not contain path separators")
    name = requests.unsupported(raw, requests.STREAM_UNSUPPORTED)
    if name is not None:
        raise errors.stream_invalid_config(f"stream option {name} is not supported by pynatsd")
    cfg = normalize_config(raw, stream_name, create=True)
    check_origins(account, cfg)
    account.check_stream_bytes(cfg)
    account.check_new_stream(cfg, subjects=False)  # (nats-server checks those as the stream is added)
    if stream_name in account.streams or stream_name in account.restoring:
        raise errors._e(400, 10130, "stream name already in use, cannot restore")
    deliver = b"$JS.SNAPSHOT.RESTORE.%s.%s" % (stream_name.encode(), event_id().encode())
    account.advisories.backup("restore_create", stream_name, client)
    restore = Restore(account, cfg, deliver, client)
    account.restoring[stream_name] = restore
    restore.start()
    return {"deliver_subject": deliver.decode()}
