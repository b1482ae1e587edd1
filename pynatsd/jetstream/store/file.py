"""File storage: append-only segment files, an in-memory index, recovery that cuts a torn tail.

Layout: `<dir>/NNNNNNNN.blk` segments, rolled at `SEGMENT_BYTES`. Each record is

    type u8 | crc32 u32 | body_len u32 | seq u64 | ts i64 | subj_len u16 | hdr_len i32 (-1: none)
    | subject | headers | payload

with the CRC over everything after it. Types: MSG; DEL (a message removed); PURGE (everything below
`seq` removed); BASE (first record of each segment: the stream's last sequence and first sequence at the
time, so a stream whose messages are all gone keeps its sequence across restarts). Records only ever go
at the end; segments are deleted from the front once none of their messages is left.

Durability: a published message's record is buffered until `commit()`, which the stream calls once per
turn of the event loop (one `os.writev` for every message published in that turn) before it sends their
PubAcks; other records (deletes, purges, segment bases) are written at once. A record is thus in the kernel
before its publisher hears of it and survives `kill -9` of the server. The files are fsync'ed every
`sync_interval` seconds (nats-server's default is 2 minutes) and on close; `sync_always` fsyncs each
record instead (see README "JetStream" for the measured cost of both). A power loss may lose up to one
interval, as with nats-server.

Recovery reads the segments in order; the first record that is short or fails its CRC ends the log:
the file is truncated there and any later segments removed.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from pathlib import Path

from pynatsd.base.logging import get_logger
from pynatsd.jetstream.store.base import Locator, Removed, Store, StoredMsg

log = get_logger()

SEGMENT_BYTES = 32 * 1024 * 1024
WRITE_BATCH = 4 * 1024 * 1024  # buffered message records are written before they grow past this
# Reads go through one cached block of a segment: consumers and direct gets read sequences in order, so one
# pread serves hundreds of messages (two preads per message cost more than everything else on the path).
READ_BLOCK = 1024 * 1024
_HEAD = struct.Struct("<BIIQqHi")
_KIND_CRC = struct.Struct("<BI")
_REST = struct.Struct("<IQqHi")  # the head after the CRC: what the CRC starts with
_IOV_MAX = 1024
_JOIN_MAX = 4096  # records up to this size are written from one buffer (see _record)
_CRC_FROM = 5  # the CRC covers the record from body_len on
MSG, DEL, PURGE, BASE = 1, 2, 3, 4


def _size(slen: int, hlen: int, dlen: int) -> int:
    return 22 + slen + (hlen + 4 if hlen else 0) + dlen + 8


class FileStore(Store):
    def __init__(self, directory: Path, sync_interval: float = 120.0, sync_always: bool = False) -> None:
        super().__init__()
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sync_interval = sync_interval
        self.sync_always = sync_always
        self._live: dict[int, int] = {}  # segment -> messages still in it
        self._readers: dict[int, int] = {}  # segment -> read descriptor
        self._pending: list[bytes] = []  # buffered records (their parts), not written yet
        self._pending_bytes = 0
        self._pending_seqs: list[int] = []
        self._block_seg = -1  # the cached block: segment, offset in it, bytes
        self._block_at = 0
        self._block = b""
        self._seg = 0
        self._fd = -1
        self._size = 0
        self._last_sync = time.monotonic()
        self._dirty = False
        self._recover()

    # -- accounting -----------------------------------------------------------------------------------
    def msg_size(self, subject: bytes, hdrs: bytes | None, data: bytes) -> int:
        # nats-server's file store accounting: 22 + subject + headers (+4 when present) + payload + 8.
        return _size(len(subject), len(hdrs) if hdrs else 0, len(data))

    # -- writing --------------------------------------------------------------------------------------
    def _path(self, seg: int) -> Path:
        return self.dir / f"{seg:08d}.blk"

    def _record(
        self, kind: int, seq: int, ts: int, subject: bytes = b"", hdrs: bytes | None = None, data: bytes = b""
    ) -> list[bytes]:
        """One record as the parts `os.writev` takes: a small one in one buffer (one join and one CRC cost
        half of four parts and four CRC calls), a large one in parts (its payload is not copied)."""
        hlen = -1 if hdrs is None else len(hdrs)
        hdrs = hdrs or b""
        body_len = _HEAD.size - _CRC_FROM + len(subject) + len(hdrs) + len(data)
        rest = _REST.pack(body_len, seq, ts, len(subject), hlen)
        if body_len <= _JOIN_MAX:
            body = b"".join((rest, subject, hdrs, data))
            return [_KIND_CRC.pack(kind, zlib.crc32(body)) + body]
        crc = zlib.crc32(data, zlib.crc32(hdrs, zlib.crc32(subject, zlib.crc32(rest))))
        return [_KIND_CRC.pack(kind, crc) + rest, subject, hdrs, data]

    def _open_segment(self, seg: int) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
        self._seg = seg
        self._fd = os.open(self._path(seg), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = os.fstat(self._fd).st_size
        self._live.setdefault(seg, 0)
        if self._size == 0:
            self._write(self._record(BASE, self.last_seq, self.first_seq))

    def _write(self, parts: list[bytes], buffered: bool = False, size: int = -1) -> int:
        """Append records (their parts, `size` bytes in all if known) to the current segment; returns the
        offset. Unless `buffered`, they are written now (with anything buffered before them)."""
        if size < 0:
            size = sum(map(len, parts))
        if self._size + size > SEGMENT_BYTES and self._size > _HEAD.size + 64:
            self.commit()  # what is buffered belongs to this segment
            self._open_segment(self._seg + 1)
        offset = self._size
        self._pending.extend(parts)
        self._pending_bytes += size
        self._size += size
        if not buffered or self._pending_bytes >= WRITE_BATCH:
            self.commit()
        return offset

    @property
    def pending_writes(self) -> bool:
        return bool(self._pending)

    def commit(self) -> None:
        """Write the buffered records in one system call (fsync'ed with sync_always). On failure the file is
        cut back to its last whole record, the unwritten messages leave the index and join `failed` (so
        their publishers get an error, not an ack), and the OSError propagates."""
        parts = self._pending
        if not parts:
            return
        size, seqs = self._pending_bytes, self._pending_seqs
        self._pending, self._pending_bytes, self._pending_seqs = [], 0, []
        start = self._size - size
        try:
            for i in range(0, len(parts), _IOV_MAX):
                chunk = parts[i : i + _IOV_MAX]
                written = os.writev(self._fd, chunk)
                want = sum(map(len, chunk))
                if written < want:  # a regular file only writes short when the disk is full: finish or fail
                    os.write(self._fd, b"".join(chunk)[written:])
            if self.sync_always:
                os.fsync(self._fd)
        except OSError:
            self._size = start
            os.ftruncate(self._fd, start)
            for seq in seqs:
                loc = self._unindex(seq)
                if loc is not None:
                    self._live[loc[0]] -= 1
            self.failed.update(seqs)
            raise
        if not self.sync_always:
            self._dirty = True
            if time.monotonic() - self._last_sync >= self.sync_interval:
                self.flush()

    def _put(self, seq: int, subject: bytes, hdrs: bytes | None, data: bytes, ts: int) -> Locator:
        parts = self._record(MSG, seq, ts, subject, hdrs, data)
        size = _HEAD.size + len(subject) + (len(hdrs) if hdrs else 0) + len(data)
        offset = self._write(parts, True, size)
        if self._pending:  # still buffered: a failed commit later fails this message too (see commit)
            self._pending_seqs.append(seq)
        # (written already: an OSError of that write reached this message's publisher)
        self._live[self._seg] += 1
        return (self._seg, offset)

    def _drop(self, removed: Removed, purge_to: int = 0) -> None:
        if purge_to:
            self._write(self._record(PURGE, purge_to, 0))
            for seg in self._live:
                self._live[seg] = 0
        if removed:
            self._write([part for seq, _ in removed for part in self._record(DEL, seq, 0)])
        for _, (seg, _) in removed:
            self._live[seg] -= 1
        self._drop_empty_segments()

    def _drop_empty_segments(self) -> None:
        """Delete segments from the front while none of their messages is left (never the current one)."""
        for seg in sorted(self._live):
            if seg == self._seg or self._live[seg] > 0:
                return
            del self._live[seg]
            fd = self._readers.pop(seg, None)
            if fd is not None:
                os.close(fd)
            if seg == self._block_seg:
                self._block_seg, self._block = -1, b""
            self._path(seg).unlink(missing_ok=True)

    # -- reading --------------------------------------------------------------------------------------
    def _get(self, seq: int, subject: bytes, ts: int, loc: Locator) -> StoredMsg | None:
        if self._pending:
            self.commit()  # read what was published: it must be in the file first
        seg, offset = loc
        block, at = self._block, offset - self._block_at
        if seg != self._block_seg or at < 0 or at + _HEAD.size > len(block):
            block, at = self._read_block(seg, offset), 0
        _, _, body_len, _, _, slen, hlen = _HEAD.unpack_from(block, at)
        end = at + _CRC_FROM + body_len
        if end > len(block):  # the record runs past the block: read from its start
            block, at = self._read_block(seg, offset, _CRC_FROM + body_len), 0
            end = _CRC_FROM + body_len
        start = at + _HEAD.size + slen
        if hlen < 0:
            return StoredMsg(subject, seq, None, block[start:end], ts)
        return StoredMsg(subject, seq, block[start : start + hlen], block[start + hlen : end], ts)

    def _read_block(self, seg: int, offset: int, at_least: int = 0) -> bytes:
        fd = self._readers.get(seg)
        if fd is None:
            fd = os.open(self._path(seg), os.O_RDONLY)
            self._readers[seg] = fd
        block = os.pread(fd, max(READ_BLOCK, at_least), offset)
        self._block_seg, self._block_at, self._block = seg, offset, block
        return block

    # -- recovery -------------------------------------------------------------------------------------
    def _recover(self) -> None:
        segs = sorted(int(p.stem) for p in self.dir.glob("*.blk") if p.stem.isdigit())
        for i, seg in enumerate(segs):
            if not self._replay(seg):
                for later in segs[i + 1 :]:
                    log.warning(
                        "JetStream store %s: removing segment %d after a torn record", self.dir, later
                    )
                    self._path(later).unlink(missing_ok=True)
                segs = segs[: i + 1]
                break
        for seg in list(self._live):
            if seg not in segs:
                del self._live[seg]
        self._open_segment(segs[-1] if segs else 1)
        self._drop_empty_segments()

    def _replay(self, seg: int) -> bool:
        """Index one segment's records; False if it ended in a torn record (then truncated there)."""
        path = self._path(seg)
        buf = path.read_bytes()
        self._live.setdefault(seg, 0)
        pos, end = 0, len(buf)
        view = memoryview(buf)
        while pos < end:
            if end - pos < _HEAD.size:
                break
            kind, crc, body_len, seq, ts, slen, hlen = _HEAD.unpack_from(buf, pos)
            stop = pos + _CRC_FROM + body_len
            if (
                kind not in (MSG, DEL, PURGE, BASE)
                or stop > end
                or zlib.crc32(view[pos + _CRC_FROM : stop]) != crc
            ):
                break
            if kind == MSG:
                at = pos + _HEAD.size
                subject = bytes(view[at : at + slen])
                if seq > self.last_seq:  # a MSG record twice would be a bug; keep the first
                    size = _size(slen, max(hlen, 0), stop - at - slen - max(hlen, 0))
                    self._index(subject, seq, ts, size, (seg, pos))
                    self._live[seg] += 1
                    if hlen > 0 and buf.find(b"\r\nNats-TTL:", at + slen, at + slen + hlen) >= 0:
                        self.with_ttl.append(seq)
            elif kind == DEL:
                loc = self._unindex(seq)
                if loc is not None:
                    self._live[loc[0]] -= 1
            elif kind == PURGE:
                for s in list(self.seqs_from(self.first_seq)):
                    if s >= seq:
                        break
                    loc = self._unindex(s)
                    if loc is not None:
                        self._live[loc[0]] -= 1
                self.skip_to(seq - 1)
            else:  # BASE
                self.skip_to(seq)
                if self.msgs == 0:
                    self.first_seq = max(self.first_seq, ts)
            pos = stop
        if pos < end:
            log.warning(
                "JetStream store %s: truncating torn tail of segment %d at %d (of %d bytes)",
                self.dir,
                seg,
                pos,
                end,
            )
            with path.open("r+b") as f:
                f.truncate(pos)
            return False
        return True

    # -- lifecycle ------------------------------------------------------------------------------------
    def flush(self) -> None:
        self.commit()
        if self._dirty and self._fd >= 0:
            os.fsync(self._fd)
            self._dirty = False
        self._last_sync = time.monotonic()

    def close(self) -> None:
        self.flush()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        for fd in self._readers.values():
            os.close(fd)
        self._readers.clear()
        self._block_seg, self._block = -1, b""

    def delete(self) -> None:
        self.close()
        for p in self.dir.glob("*.blk"):
            p.unlink(missing_ok=True)
