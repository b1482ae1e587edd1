"""File storage: append-only segment files, an in-memory index, recovery that cuts a torn tail.

Layout: `<dir>/NNNNNNNN.blk` segments, rolled at `SEGMENT_BYTES`. Each record is

    type u8 | crc32 u32 | body_len u32 | seq u64 | ts i64 | subj_len u16 | hdr_len i32 (-1: none)
    | subject | headers | payload

with the CRC over everything after it. Types: MSG; DEL (a message removed); PURGE (everything below
`seq` removed); BASE (first record of each segment: the stream's last sequence and first sequence at the
time, so a stream whose messages are all gone keeps its sequence across restarts). Records only ever go
at the end; a segment is deleted once none of its messages is left.

Compaction: a sealed segment whose live messages take less than half of it (and that is past
`COMPACT_MIN`) is rewritten without what is dead, as nats-server compacts its blocks: its BASE record, its
last PURGE, its live MSG records (byte for byte, in order) and the DEL records it holds for messages still
on disk in an older segment. The new file is written beside it (`.cmp`), fsync'ed and renamed over it, so a
kill -9 at any point leaves either segment, both of which replay to the same messages; a leftover `.cmp` is
removed at recovery. A KV bucket overwritten without end (its old values pinned in their segments by keys
written once) thus keeps about its live data on disk, not everything ever written.

Durability: a published message's record is buffered until `commit()`, which the stream calls once per
turn of the event loop (one `os.writev` for every message published in that turn) before it sends their
PubAcks; so are the deletes of acked messages (interest and work-queue retention: the stream commits them at
the end of the turn, before any AckSync reply goes out: one write for a turn's acks, not one each); other
records (other deletes, purges, segment bases) are written at once. A record is thus in the kernel before
its publisher (or acker) hears of it and survives `kill -9` of the server. The files are fsync'ed every
`sync_interval` seconds (nats-server's default is 2 minutes) and on close; `sync_always` fsyncs each
record instead (see README "JetStream" for the measured cost of both). A power loss may lose up to one
interval, as with nats-server.

Recovery reads the segments in order; the first record that is short or fails its CRC ends the log:
the file is truncated there and any later segments removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import time
import zlib
from array import array
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Final

from pynatsd.base.logging import get_logger
from pynatsd.jetstream.store.base import _GONE, Locator, Removed, Store, StoredMsg

log = get_logger()

SEGMENT_BYTES = 32 * 1024 * 1024
KV_SEGMENT_BYTES = 4 * 1024 * 1024  # nats-server's block size for a stream limited per subject only (a KV)
COMPACT_MIN = 2 * 1024 * 1024  # nats-server's compactMinimum: smaller segments are not worth a rewrite
# A locator's first word: the segment in the low bits, the record's size above (a removal's Removed then
# tells what it frees, without a read).
_SEG_BITS: Final = 24  # (Final: compiled, a constant rather than a module lookup on each append)
_SEG_MASK: Final = (1 << 24) - 1
WRITE_BATCH = 4 * 1024 * 1024  # buffered message records are written before they grow past this
# Reads go through one cached block of a segment: consumers and direct gets read sequences in order, so one
# pread serves hundreds of messages (two preads per message cost more than everything else on the path).
READ_BLOCK = 1024 * 1024
_HEAD = struct.Struct("<BIIQqHi")
_HEAD_SIZE: Final = 31  # _HEAD.size
_HLEN_AT: Final = 27  # where hdr_len starts in the head
_KIND_CRC = struct.Struct("<BI")
_REST = struct.Struct("<IQqHi")  # the head after the CRC: what the CRC starts with
_IOV_MAX = 1024
_JOIN_MAX = 4096  # records up to this size are written from one buffer (see _record)
_CRC_FROM = 5  # the CRC covers the record from body_len on
MSG, DEL, PURGE, BASE = 1, 2, 3, 4
_DEL_SIZE = _HEAD.size  # a DEL record: the head alone
assert _HEAD.size == _HEAD_SIZE


def _write_all(fd: int, parts: list[bytes]) -> None:
    """Write the parts in as few `os.writev` calls as the kernel takes."""
    for i in range(0, len(parts), _IOV_MAX):
        chunk = parts[i : i + _IOV_MAX]
        written = os.writev(fd, chunk)
        want = sum(map(len, chunk))
        if written < want:  # a regular file only writes short when the disk is full: finish or fail
            os.write(fd, b"".join(chunk)[written:])


def _size(slen: int, hlen: int, dlen: int) -> int:
    return 22 + slen + (hlen + 4 if hlen else 0) + dlen + 8


class _Rewrite:
    """A compaction worked out on the loop: what the worker copies, and what the swap checks afterwards."""

    def __init__(
        self,
        seg: int,
        purge: bytes,
        snapshot: tuple[int, array[int], array[int], array[int]],
        dels: list[int],
    ) -> None:
        self.seg = seg
        self.purge = purge  # the segment's last PURGE record (or nothing)
        # the first sequence, then its subject ids and locators onwards, as they were when planned
        self.snapshot = snapshot
        self.moves: list[tuple[int, int, int]] = []  # (sequence, locator word a, offset) of what is kept
        self.new_offsets = array("q")  # the snapshot's offsets with the kept messages' new ones
        self.end = 0  # the new file's offset after its last message
        self.del_seqs = dels  # the sequences of the DEL records it keeps (its records, made by the worker)
        self.dels: list[bytes] = []
        self.prefix = -1  # the new file's offset of its first message (-1: failed)
        self.future: Future[int] | None = None


def _write_rewrite(path: Path, plan: _Rewrite) -> int:
    """Write `path`'s compacted copy beside it (`.cmp`), fsync'ed; return where its messages start. Touches
    only the plan and the files (it may run in a worker thread)."""
    first, sids, loc_a, loc_b = plan.snapshot
    seg = plan.seg
    moves = plan.moves
    for i in range(len(sids)):
        if sids[i] != _GONE and loc_a[i] & _SEG_MASK == seg:
            moves.append((first + i, loc_a[i], loc_b[i]))
    fd = os.open(path, os.O_RDONLY)
    try:
        head = os.pread(fd, _HEAD.size, 0)
        parts = [os.pread(fd, _CRC_FROM + _HEAD.unpack_from(head)[2], 0)]
        if plan.purge:
            parts.append(plan.purge)
        prefix = sum(map(len, parts))
        new_offsets = array("q", loc_b)
        offset = prefix
        for seq, a, _ in moves:
            new_offsets[seq - first] = offset
            offset += a >> _SEG_BITS
        plan.new_offsets, plan.end = new_offsets, offset
        # Many live records: one read of the segment beats a pread each (300k preads took 0.3 s).
        whole = b""
        if len(plan.moves) > 256:
            last = plan.moves[-1]
            whole = os.pread(fd, last[2] + (last[1] >> _SEG_BITS), 0)
        for _, a, at in plan.moves:
            size = a >> _SEG_BITS
            parts.append(whole[at : at + size] if whole else os.pread(fd, size, at))
    finally:
        os.close(fd)
    plan.dels = [_del_record(seq) for seq in plan.del_seqs]  # (20k took a few ms: not on the loop)
    parts.extend(plan.dels)
    out = os.open(path.with_suffix(".cmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(out, parts)
        os.fsync(out)
    finally:
        os.close(out)
    return prefix


def _del_record(seq: int) -> bytes:
    """A DEL record, as FileStore._record(DEL, seq, 0) makes it."""
    rest = _REST.pack(_HEAD.size - _CRC_FROM, seq, 0, 0, -1)
    return _KIND_CRC.pack(DEL, zlib.crc32(rest)) + rest


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_worker_pool: list[ThreadPoolExecutor] = []


def _worker() -> ThreadPoolExecutor:
    """The one thread that rewrites segments, for every store (one at a time keeps the disk's load low)."""
    if not _worker_pool:
        _worker_pool.append(ThreadPoolExecutor(1, thread_name_prefix="pynatsd-compact"))
    return _worker_pool[0]


def _call_soon(loop: asyncio.AbstractEventLoop, finish: Callable[[_Rewrite], None], plan: _Rewrite) -> None:
    with contextlib.suppress(RuntimeError):  # (a closed loop: close() of the store finishes the rewrite)
        loop.call_soon_threadsafe(finish, plan)


class FileStore(Store):
    def __init__(
        self,
        directory: Path,
        sync_interval: float = 120.0,
        sync_always: bool = False,
        segment_bytes: int = 0,
    ) -> None:
        super().__init__()
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sync_interval = sync_interval
        self.sync_always = sync_always
        self.segment_bytes = segment_bytes or SEGMENT_BYTES
        self.compact_min = min(COMPACT_MIN, self.segment_bytes // 4)
        self.compactions = 0  # segments rewritten (for tests and figures)
        self._live: dict[int, int] = {}  # segment -> messages still in it
        # segment -> bytes of its dead MSG records, and how many DEL records it holds (kept up by removals,
        # not appends: an append costs one dict update, as before compaction)
        self._dead_bytes: dict[int, int] = {}
        self._dels: dict[int, int] = {}
        self._raw: dict[int, int] = {}  # sealed segment -> its size on disk
        self._lowest: dict[int, int] = {}  # segment -> the lowest sequence its MSG records can have
        self._purged: dict[int, int] = {}  # segment -> its highest PURGE record
        # segment -> the DEL records it holds for messages in an older segment (sequence -> that segment):
        # kept by a compaction while that segment may still hold the message.
        self._foreign: dict[int, dict[int, int]] = {}
        self._unchecked: set[int] = set()  # sealed segments not looked at for compaction since
        self._compacting: dict[int, _Rewrite] = {}  # segment -> its rewrite under way in the worker thread
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
            self._raw[self._seg] = self._size
            self._unchecked.add(self._seg)
        self._seg = seg
        self._fd = os.open(self._path(seg), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = os.fstat(self._fd).st_size
        self._live.setdefault(seg, 0)
        self._dead_bytes.setdefault(seg, 0)
        self._dels.setdefault(seg, 0)
        self._lowest.setdefault(seg, self.last_seq + 1)
        if self._size == 0:
            self._write(self._record(BASE, self.last_seq, self.first_seq))

    def _write(self, parts: list[bytes], buffered: bool = False, size: int = -1) -> int:
        """Append records (their parts, `size` bytes in all if known) to the current segment; returns the
        offset. Unless `buffered`, they are written now (with anything buffered before them)."""
        if size < 0:
            size = sum(map(len, parts))
        if self._size + size > self.segment_bytes and self._size > _HEAD.size + 64:
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
            _write_all(self._fd, parts)
            if self.sync_always:
                os.fsync(self._fd)
        except OSError:
            self._size = start
            os.ftruncate(self._fd, start)
            for seq in seqs:
                loc = self._unindex(seq)
                if loc is not None:
                    self._forget(loc)
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
        seg = self._seg
        self._live[seg] += 1
        return (seg | size << _SEG_BITS, offset)

    def _forget(self, loc: Locator) -> None:
        """A message of this locator's segment is gone."""
        seg = loc[0] & _SEG_MASK
        self._live[seg] -= 1
        self._dead_bytes[seg] += loc[0] >> _SEG_BITS

    def _drop(self, removed: Removed, purge_to: int = 0, buffered: bool = False) -> None:
        if purge_to:
            self._write(self._record(PURGE, purge_to, 0))
            self._purged[self._seg] = purge_to
            for seg in self._live:  # (all of it dead: each but the current one goes now)
                self._live[seg] = 0
                self._dead_bytes[seg] = self._raw.get(seg, self._size)
        if removed:
            parts = [part for seq, _ in removed for part in self._record(DEL, seq, 0)]
            self._write(parts, buffered, _DEL_SIZE * len(removed))
            here = self._seg  # (after the write: it may have started a segment)
            self._dels[here] += len(removed)
            foreign = None
            for seq, loc in removed:
                self._forget(loc)
                seg = loc[0] & _SEG_MASK
                self._unchecked.add(seg)
                if seg != here:
                    if foreign is None:
                        foreign = self._foreign.setdefault(here, {})
                    foreign[seq] = seg
        self._drop_empty_segments()
        if self._unchecked:
            self._compact_where_due()

    def _drop_empty_segments(self) -> None:
        """Delete the segments none of whose messages is left (never the current one), oldest first."""
        for seg in sorted(self._live):
            # (one holding DEL records for messages still in an older segment must stay: they are not dead)
            if seg == self._seg or self._live[seg] > 0 or self._foreign.get(seg):
                continue
            for counts in (self._live, self._dead_bytes, self._dels, self._raw, self._lowest, self._purged):
                counts.pop(seg, None)
            self._foreign.pop(seg, None)
            self._unchecked.discard(seg)
            self._close_reader(seg)
            self._path(seg).unlink(missing_ok=True)
            self._no_longer_on_disk(seg)

    def _close_reader(self, seg: int) -> None:
        fd = self._readers.pop(seg, None)
        if fd is not None:
            os.close(fd)
        if seg == self._block_seg:
            self._block_seg, self._block = -1, b""

    def _no_longer_on_disk(self, seg: int, still_there: set[int] | None = None) -> None:
        """The dead messages of `seg` are gone from the disk (but `still_there`): the DEL records for them are
        not needed."""
        for holder, foreign in self._foreign.items():
            gone = [
                s for s, target in foreign.items() if target == seg and not (still_there and s in still_there)
            ]
            for seq in gone:
                del foreign[seq]
            if gone:
                self._unchecked.add(holder)

    # -- compaction -----------------------------------------------------------------------------------
    def _compact_where_due(self) -> None:
        """Rewrite the sealed segments looked at since the last time whose live records take less than half
        of them (what stays of a segment's DEL records counted as live). The one sealed last waits for the
        next: its newest messages are the likeliest to go soon (a KV key overwritten), and a compaction
        then would keep them and the DEL records for them."""
        unchecked, self._unchecked = self._unchecked, set()
        for seg in sorted(unchecked):
            if seg in self._compacting:
                continue
            if seg >= self._seg - 1:
                if seg != self._seg:
                    self._unchecked.add(seg)
                continue
            raw = self._raw.get(seg, 0)
            if raw < self.compact_min:
                continue
            droppable_dels = self._dels[seg] - len(self._foreign.get(seg, ()))
            kept = raw - self._dead_bytes[seg] - droppable_dels * _DEL_SIZE
            if kept * 2 < raw:
                self._compact(seg)

    def _compact(self, seg: int) -> None:
        """Rewrite one sealed segment without its dead records (see the module's docstring). What to keep is
        worked out here; reading, writing and fsync'ing the new file (8-50 ms for a 4 MiB segment) is done by
        a worker thread when an event loop runs, and the swap back on the loop (`_finish_compaction`)."""
        later = [lowest for other, lowest in self._lowest.items() if other > seg]
        # The index columns of the sequences it can hold, copied (array slices: microseconds); which of them
        # are live in it is sorted out with the rewrite (40k sequences took 8-25 ms on the loop, interpreted).
        start = max(self._lowest.get(seg, 1) - self._base, 0)
        end = max((min(later) if later else self.last_seq + 1) - self._base, start)
        snapshot = (
            self._base + start,
            self._col_sid[start:end],
            self._loc_a[start:end],
            self._loc_b[start:end],
        )
        purged = self._purged.get(seg, 0)
        plan = _Rewrite(
            seg,
            self._record(PURGE, purged, 0)[0] if purged else b"",
            snapshot,
            list(self._foreign.get(seg, {})),
        )
        path = self._path(seg)
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:
            plan.prefix = _write_rewrite(path, plan)
            self._finish_compaction(plan)
            return
        plan.future = _worker().submit(_write_rewrite, path, plan)
        self._compacting[seg] = plan
        plan.future.add_done_callback(lambda _: _call_soon(loop, self._finish_compaction, plan))

    def _finish_compaction(self, plan: _Rewrite) -> None:
        """Put a rewritten segment in place of the old one (on the loop: no append, removal or read runs
        meanwhile) and move the locators of what it kept; what went since the plan stays as dead bytes."""
        seg = plan.seg
        future = plan.future
        if future is not None:
            if self._compacting.get(seg) is not plan:
                return  # finished already (by close)
            del self._compacting[seg]
            try:
                plan.prefix = future.result()
            except OSError as exc:
                log.warning("JetStream store %s: compaction of segment %d failed: %s", self.dir, seg, exc)
                plan.prefix = -1
        path = self._path(seg)
        tmp = path.with_suffix(".cmp")
        if plan.prefix < 0 or seg not in self._live or self._fd < 0:  # failed, emptied meanwhile, or closed
            tmp.unlink(missing_ok=True)
            return
        os.replace(tmp, path)  # atomic: the old segment or the new one, both replay to the same messages
        if future is not None:  # (the rename made durable by the worker: until then a power loss keeps
            _worker().submit(_sync_dir, self.dir)  # the old segment, whole; kill -9 needs no fsync)
        else:
            _sync_dir(self.dir)
        self._close_reader(seg)
        loc_a, loc_b = self._loc_a, self._loc_b
        first, sids, snap_a, snap_b = plan.snapshot
        dead = 0
        still_there: set[int] = set()  # removed since the plan, yet in the new file: their DELs must stay
        start, end = first - self._base, first - self._base + len(sids)
        if (  # nothing of it changed since the plan: the offsets in one go (20k one by one took 3-8 ms)
            start >= 0
            and self._col_sid[start:end] == sids
            and loc_a[start:end] == snap_a
            and loc_b[start:end] == snap_b
        ):
            loc_b[start:end] = plan.new_offsets
        else:
            for seq, a, b in plan.moves:
                i = self._slot(seq)
                if i >= 0 and loc_a[i] == a and loc_b[i] == b:
                    loc_b[i] = plan.new_offsets[seq - first]
                else:
                    dead += a >> _SEG_BITS
                    still_there.add(seq)
        self._raw[seg] = plan.end + sum(map(len, plan.dels))
        self._dead_bytes[seg] = dead
        self._dels[seg] = len(plan.dels)
        self.compactions += 1
        self._no_longer_on_disk(seg, still_there)

    # -- reading --------------------------------------------------------------------------------------
    def _get(self, seq: int, subject: bytes, ts: int, loc: Locator) -> StoredMsg | None:
        if self._pending:
            self.commit()  # read what was published: it must be in the file first
        # The locator has the record's size, the index its subject: of the head only hdr_len is read, byte by
        # byte (compiled, no tuple or int objects: the head's unpack was a third of a file load's cost).
        word, offset = loc
        seg, size = word & _SEG_MASK, word >> _SEG_BITS
        block, at = self._block, offset - self._block_at
        if seg != self._block_seg or at < 0 or at + size > len(block):
            block, at = self._read_block(seg, offset, size), 0  # (a record past the block: read from it)
        p = at + _HLEN_AT
        hlen = block[p] | block[p + 1] << 8 | block[p + 2] << 16 | block[p + 3] << 24
        start, end = at + _HEAD_SIZE + len(subject), at + size
        if hlen == 0xFFFFFFFF:  # -1: no headers
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
        for leftover in self.dir.glob("*.cmp"):  # a compaction cut short: its segment is still whole
            leftover.unlink(missing_ok=True)
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
        for seg in segs[:-1]:
            self._raw[seg] = self._path(seg).stat().st_size
            self._unchecked.add(seg)
        self._open_segment(segs[-1] if segs else 1)
        self._drop_empty_segments()
        self._compact_where_due()

    def _replay(self, seg: int) -> bool:
        """Index one segment's records; False if it ended in a torn record (then truncated there)."""
        path = self._path(seg)
        buf = path.read_bytes()
        self._live.setdefault(seg, 0)
        self._dead_bytes.setdefault(seg, 0)
        self._dels.setdefault(seg, 0)
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
                    record = stop - pos
                    self._index(subject, seq, ts, size, (seg | record << _SEG_BITS, pos))
                    self._live[seg] += 1
                    if hlen > 0 and buf.find(b"\r\nNats-TTL:", at + slen, at + slen + hlen) >= 0:
                        self.with_ttl.append(seq)
            elif kind == DEL:
                self._dels[seg] += 1
                loc = self._unindex(seq)
                if loc is not None:
                    self._forget(loc)
                    if loc[0] & _SEG_MASK != seg:
                        self._foreign.setdefault(seg, {})[seq] = loc[0] & _SEG_MASK
            elif kind == PURGE:
                for s in list(self.seqs_from(self.first_seq)):
                    if s >= seq:
                        break
                    loc = self._unindex(s)
                    if loc is not None:
                        self._forget(loc)
                self._purged[seg] = seq
                self.skip_to(seq - 1)
            else:  # BASE
                self._lowest[seg] = seq + 1
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
        for plan in list(self._compacting.values()):  # wait for the worker: its swap is done here
            self._finish_compaction(plan)
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
        for pattern in ("*.blk", "*.cmp"):
            for p in self.dir.glob(pattern):
                p.unlink(missing_ok=True)
