"""The snapshots of nats-server before 2.15 (which 2.15 still restores): a tar of the stream's store directory
inside an S2 stream. Read here from a spooled file, for `STREAM.RESTORE`.

    meta.inf                 the stream's config as JSON, with its `Created` time
    msgs/<n>.blk             message blocks: records `len u32 (bit 31: has headers) | seq u64 | ts i64 |
                             subj_len u16 | subject | [hdr_len u32 | headers] | data | checksum 8`;
                             seq bit 63 marks an erased record, bit 62 a tombstone (a later delete of seq)
    msgs/index.db            the stream's state (not needed: the records and tombstones say it)
    obs/<name>/meta.inf      a consumer's config as JSON, with `Created` and `Name`
    obs/<name>/o.dat         its state: `0x16 0x02`, uvarints ack floor (consumer, stream), delivered
                             (consumer, stream), pending (delta-coded, times in seconds) and redelivered

The records' checksum (highwayhash-64 keyed by the stream's name) is not verified here: the S2 framing's
CRC-32C already covers the bytes in transit. Encrypted stores are refused by name (a snapshot carries them
decrypted; a store directory tarred by hand may not).
"""

from __future__ import annotations

import json
import struct
import tarfile
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import IO, Any

from pynatsd.base.s2 import uvarint
from pynatsd.jetstream.util import parse_rfc3339


class BackupError(ValueError):
    """A backup that cannot be restored, in words the client may read (nats-server's where it has them)."""


USTAR_AT = 257  # where a tar header says "ustar"
_RECORD = struct.Struct("<IQqH")
_HAS_HEADERS = 1 << 31
_ERASED = 1 << 63
_TOMBSTONE = 1 << 62
_CHECKSUM = 8
_STATE_MAGIC = 22


def is_tar(head: bytes) -> bool:
    return head[USTAR_AT : USTAR_AT + 5] == b"ustar"


def _varint(buf: bytes, at: int) -> tuple[int, int]:
    zigzag, at = uvarint(buf, at)
    return (zigzag >> 1) ^ -(zigzag & 1), at


def consumer_state(buf: bytes) -> dict[str, Any]:
    """o.dat as nats-server's ConsumerState JSON (versions 1 and 2 of its encoding)."""
    try:
        return _consumer_state(buf)
    except ValueError:  # a cut varint too
        raise BackupError("corrupt state") from None


def _consumer_state(buf: bytes) -> dict[str, Any]:
    if len(buf) < 2 or buf[0] != _STATE_MAGIC or buf[1] not in (1, 2):
        raise BackupError("corrupt state")
    version, at = buf[1], 2
    fields = []
    for _ in range(4):
        value, at = uvarint(buf, at)
        fields.append(value)
    afc, afs, dc, ds = fields
    if version == 1:  # it stored the next to deliver
        dc += afc - 1 if afc > 1 else 0
        ds += afs - 1 if afs > 1 else 0
    state: dict[str, Any] = {
        "delivered": {"consumer_seq": dc, "stream_seq": ds},
        "ack_floor": {"consumer_seq": afc, "stream_seq": afs},
    }
    count, at = uvarint(buf, at)
    if count:
        mints, at = _varint(buf, at)
        pending = {}
        for _ in range(count):
            sseq, at = uvarint(buf, at)
            dseq = 0
            if version == 2:
                dseq, at = uvarint(buf, at)
            ts, at = _varint(buf, at)
            seconds = ts + mints if version == 1 else mints - ts
            pending[str(sseq + afs)] = {"sequence": dseq + afc if version == 2 else 0, "ts": seconds * 10**9}
        state["pending"] = pending
    if at < len(buf):
        count, at = uvarint(buf, at)
        redelivered = {}
        for _ in range(count):
            sseq, at = uvarint(buf, at)
            n, at = uvarint(buf, at)
            redelivered[str(sseq + afs)] = n
        if redelivered:
            state["redelivered"] = redelivered
    return state


class Message:
    __slots__ = ("data", "hdrs", "seq", "subject", "ts")

    def __init__(self, seq: int, ts: int, subject: bytes, hdrs: bytes | None, data: bytes) -> None:
        self.seq, self.ts, self.subject, self.hdrs, self.data = seq, ts, subject, hdrs, data


def _records(block: bytes, name: str) -> Iterator[tuple[int, int, bytes, bytes | None, bytes]]:
    """(raw seq, ts, subject, headers, data) of each record of a message block."""
    at, end = 0, len(block)
    while at < end:
        if end - at < _RECORD.size:
            raise BackupError(f"could not read message block {name}: message overrun")
        length, seq, ts, slen = _RECORD.unpack_from(block, at)
        has_headers = bool(length & _HAS_HEADERS)
        length &= ~_HAS_HEADERS
        body_at, stop = at + _RECORD.size, at + length
        room = length - _RECORD.size - _CHECKSUM - slen - (4 if has_headers else 0)
        if length < _RECORD.size + _CHECKSUM or stop > end or room < 0:
            raise BackupError(f"could not read message block {name}: sanity check failed")
        subject = block[body_at : body_at + slen]
        rest = body_at + slen
        hdrs: bytes | None = None
        if has_headers:
            (hlen,) = struct.unpack_from("<I", block, rest)
            if hlen > room:
                raise BackupError(f"could not read message block {name}: sanity check failed")
            hdrs = block[rest + 4 : rest + 4 + hlen]
            rest += 4 + hlen
        yield seq, ts, subject, hdrs, block[rest : stop - _CHECKSUM]
        at = stop


class LegacyBackup:
    """The stream, consumers and messages in a tar snapshot (`source`: the tar, seekable)."""

    def __init__(self, source: IO[bytes]) -> None:
        try:
            self._tar = tarfile.open(fileobj=source, mode="r:")  # noqa: SIM115 (read as long as the restore)
            members = self._tar.getmembers()
        except (tarfile.TarError, EOFError):
            raise BackupError("unexpected content (not a nats-server snapshot)") from None
        self._files: dict[str, tarfile.TarInfo] = {}
        for member in members:
            where = PurePosixPath(member.name)
            if not member.isreg() or where.is_absolute() or ".." in where.parts:
                raise BackupError("unexpected content")
            if where.name.endswith(".key") or where.name == "key":
                raise BackupError("encrypted stores are not supported by pynatsd")
            self._files[str(where)] = member
        meta = self.json("meta.inf")
        self.name: str = str(meta.get("name") or "")
        created = meta.get("Created")
        self.created = parse_rfc3339(created) if isinstance(created, str) and created[:4] != "0001" else 0
        blocks = [p for p in self._files if p.startswith("msgs/") and p.endswith(".blk")]
        self.blocks = sorted(blocks, key=lambda p: int(p[5:-4]) if p[5:-4].isdigit() else -1)
        # What later records say of earlier ones, and the stream's last sequence.
        self.tombstones: set[int] = set()
        self.last_seq = self.last_ts = 0
        for path in self.blocks:
            for seq, ts, _, _, _ in _records(self.read(path), path):
                if seq & _TOMBSTONE:
                    self.tombstones.add(seq & ~_TOMBSTONE)
                seq &= ~(_TOMBSTONE | _ERASED)
                if seq > self.last_seq:
                    self.last_seq, self.last_ts = seq, ts
                elif seq == self.last_seq and not self.last_ts:  # an erased record has no time: its tombstone
                    self.last_ts = ts

    def read(self, path: str) -> bytes:
        member = self._files.get(path)
        try:
            handle = self._tar.extractfile(member) if member is not None else None
            if handle is None:
                raise BackupError(f"{path} is missing")
            return handle.read()
        except (tarfile.TarError, EOFError):
            raise BackupError("unexpected content") from None

    def json(self, path: str) -> dict[str, Any]:
        try:
            value = json.loads(self.read(path))
        except ValueError:
            raise BackupError(f"{path} is no valid JSON") from None
        if not isinstance(value, dict):
            raise BackupError(f"{path} is no JSON object")
        return value

    def messages(self) -> Iterator[Message]:
        """The live messages, in sequence order (erased records, tombstones and their victims left out)."""
        last = 0
        for path in self.blocks:
            for seq, ts, subject, hdrs, data in _records(self.read(path), path):
                if seq & (_TOMBSTONE | _ERASED) or seq == 0 or seq <= last or seq in self.tombstones:
                    continue
                last = seq
                yield Message(seq, ts, subject, hdrs or None, data)

    def consumers(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(name, {"config", "state"}) of each consumer, as the version 2 archive has them."""
        names = sorted({p.split("/")[1] for p in self._files if p.startswith("obs/") and p.count("/") == 2})
        for name in names:
            meta = self.json(f"obs/{name}/meta.inf")
            config = {k: v for k, v in meta.items() if k not in ("Created", "Name")}
            try:
                state = consumer_state(self.read(f"obs/{name}/o.dat"))
            except ValueError as exc:
                raise BackupError(f"error restoring consumer [{json.dumps(name)}]: {exc}") from None
            yield str(meta.get("Name") or name), {"config": config, "state": state}
