"""The index every store shares: sequences, per-subject sequence lists, counters.

A backend only keeps payloads (`_put`, `_get`, `_drop`); everything a stream asks of its messages (the
next sequence matching a filter, the last message of a subject, how many messages per subject, purges)
is answered from this in-memory index. It is column arrays indexed by `seq - base` (timestamp, size,
subject id, and two backend locator words such as segment and offset) plus one array of sequences per
subject: about 40 bytes a message whatever its payload, so a file stream of millions of messages stays
small in memory. A removed message keeps its slot (subject id -1) until the front of the arrays is
trimmed; timestamps of free slots repeat their predecessor's, so the timestamp column stays sorted.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from typing import Final

_GONE: Final = -1  # (Final: compiled, a constant rather than a module lookup in each load)
_TRIM_AT = 4096  # trim the front of the columns once this many leading slots are free


class StoredMsg:
    """A message as a stream keeps it. `ts` is nanoseconds since the epoch.

    A plain class, not a dataclass: compiled, the dataclass's generated `__init__` stays interpreted, and
    made a third of a direct get's per-message cost on the broker."""

    __slots__ = ("data", "hdrs", "seq", "subject", "ts")

    def __init__(self, subject: bytes, seq: int, hdrs: bytes | None, data: bytes, ts: int) -> None:
        self.subject = subject
        self.seq = seq
        self.hdrs = hdrs
        self.data = data
        self.ts = ts

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoredMsg):
            return NotImplemented
        return (self.subject, self.seq, self.hdrs, self.data, self.ts) == (
            other.subject,
            other.seq,
            other.hdrs,
            other.data,
            other.ts,
        )

    def __repr__(self) -> str:
        return f"StoredMsg({self.subject!r}, {self.seq}, {self.hdrs!r}, {self.data!r}, {self.ts})"


Locator = tuple[int, int]
Removed = list[tuple[int, Locator]]


class SeqList:
    """One subject's live sequences, ascending: what `Store.subjects` maps each subject to.

    The oldest goes first most of the time (a work queue's backlog, acked in order), so removing it only
    moves a head offset, and the dead prefix is cut once it is half the array: amortized O(1) where
    `del arr[0]` moved the whole array (at a backlog of 100k on one subject, 26% of the server's CPU).
    Readers see only the live part: `len`, `[i]` (negative from the newest), iteration and the lookups
    below, which bisect the array from the head at C speed."""

    __slots__ = ("_head", "_seqs")

    def __init__(self, first: int) -> None:
        self._seqs = array("q", (first,))
        self._head = 0  # live sequences are _seqs[_head:]

    def __len__(self) -> int:
        return len(self._seqs) - self._head

    def __bool__(self) -> bool:
        return len(self._seqs) > self._head

    def __getitem__(self, i: int) -> int:
        n = len(self._seqs) - self._head
        if i < 0:
            i += n
        if i < 0 or i >= n:
            raise IndexError("SeqList index out of range")
        return self._seqs[self._head + i]

    def __iter__(self) -> Iterator[int]:
        return iter(self._seqs[self._head :])  # (a copy: the caller may remove while it goes)

    def __repr__(self) -> str:
        return f"SeqList({list(self)})"

    def append(self, seq: int) -> None:
        """Add `seq`, newer than every sequence already here."""
        self._seqs.append(seq)

    def discard(self, seq: int) -> None:
        seqs, head = self._seqs, self._head
        if seqs[head] == seq:
            head += 1
            if head * 2 >= len(seqs):  # (moves at most as many as were dropped since the last cut)
                del seqs[:head]
                head = 0
            self._head = head
        elif seqs[-1] == seq:
            del seqs[-1]
        else:
            i = bisect_left(seqs, seq, head)
            if i < len(seqs) and seqs[i] == seq:
                del seqs[i]

    def count_from(self, start: int) -> int:
        """How many sequences are >= start."""
        return len(self._seqs) - bisect_left(self._seqs, start, self._head)

    def first_from(self, start: int) -> int:
        """The first sequence >= start, 0 if none."""
        seqs = self._seqs
        i = bisect_left(seqs, start, self._head)
        return seqs[i] if i < len(seqs) else 0

    def last_upto(self, up_to: int) -> int:
        """The last sequence <= up_to, 0 if none."""
        i = bisect_right(self._seqs, up_to, self._head)
        return self._seqs[i - 1] if i > self._head else 0

    def oldest(self, n: int) -> list[int]:
        """The first `n` sequences (all if fewer, none if n <= 0)."""
        head = self._head
        return self._seqs[head : head + max(n, 0)].tolist()


class Store:
    """Index of one stream's messages; subclasses hold the payloads."""

    def __init__(self) -> None:
        self.first_seq = 1
        self.last_seq = 0
        self.last_ts = 0
        self.msgs = 0
        self.bytes = 0
        self._base = 1  # the sequence of slot 0
        self._col_ts = array("q")
        self._col_size = array("q")
        self._col_sid = array("l")  # subject id, _GONE for a free slot
        self._loc_a = array("q")
        self._loc_b = array("q")
        self._names: list[bytes] = []  # subject id -> subject
        self._ids: dict[bytes, int] = {}
        self.subjects: dict[bytes, SeqList] = {}  # subject -> its live sequences
        self.failed: set[int] = set()  # sequences whose buffered write failed (see commit)
        # Recovered messages whose headers carry Nats-TTL (their stream rebuilds its pending TTLs from them).
        self.with_ttl: list[int] = []

    # -- backend --------------------------------------------------------------------------------------
    def _put(self, seq: int, subject: bytes, hdrs: bytes | None, data: bytes, ts: int) -> Locator:
        """Keep the message; returns two words the backend wants back to find it."""
        raise NotImplementedError

    def _get(self, seq: int, subject: bytes, ts: int, loc: Locator) -> StoredMsg | None:
        raise NotImplementedError

    def _drop(self, removed: Removed, purge_to: int = 0, buffered: bool = False) -> None:
        """Forget payloads of `removed` (and record it durably); `purge_to` > 0: everything below is gone.
        `buffered`: the removal's records may wait for the next `commit` (see `remove_many`)."""
        raise NotImplementedError

    def msg_size(self, subject: bytes, hdrs: bytes | None, data: bytes) -> int:
        raise NotImplementedError

    def flush(self) -> None:
        """Make what was written durable (the backend's sync policy decides when this runs)."""

    @property
    def pending_writes(self) -> bool:
        """True while appended messages wait for `commit` (their PubAcks must wait too)."""
        return False

    def commit(self) -> None:
        """Write out buffered appends (a backend that buffers them)."""

    def close(self) -> None:
        """Release files; the store is not used afterwards."""

    def delete(self) -> None:
        """Remove everything the store keeps (stream deleted)."""

    # -- index ----------------------------------------------------------------------------------------
    def _slot(self, seq: int) -> int:
        """The live slot of `seq`, or -1."""
        i = seq - self._base
        if 0 <= i < len(self._col_sid) and self._col_sid[i] != _GONE:
            return i
        return -1

    def _reset(self, base: int) -> None:
        for col in (self._col_ts, self._col_size, self._col_sid, self._loc_a, self._loc_b):
            del col[:]
        self._base = base

    def _index(self, subject: bytes, seq: int, ts: int, size: int, loc: Locator) -> None:
        if self.msgs == 0 and seq - self._base != len(self._col_sid):
            self._reset(seq)  # nothing live: start the columns at this sequence
        gap = seq - self._base - len(self._col_sid)
        if gap < 0:
            raise ValueError(f"sequence {seq} is behind the index")
        if gap:
            fill = self._col_ts[-1] if self._col_ts else ts
            self._col_ts.extend([fill] * gap)
            self._col_size.extend([0] * gap)
            self._col_sid.extend([_GONE] * gap)
            self._loc_a.extend([0] * gap)
            self._loc_b.extend([0] * gap)
        sid = self._ids.get(subject)
        if sid is None:
            sid = self._ids[subject] = len(self._names)
            self._names.append(subject)
        self._col_ts.append(ts)
        self._col_size.append(size)
        self._col_sid.append(sid)
        self._loc_a.append(loc[0])
        self._loc_b.append(loc[1])
        lst = self.subjects.get(subject)
        if lst is None:
            self.subjects[subject] = SeqList(seq)
        else:
            lst.append(seq)
        self.msgs += 1
        self.bytes += size
        if seq > self.last_seq:
            self.last_seq = seq
            self.last_ts = ts
        if self.msgs == 1:
            self.first_seq = seq

    def _unindex(self, seq: int) -> Locator | None:
        i = self._slot(seq)
        if i < 0:
            return None
        subject = self._names[self._col_sid[i]]
        self._col_sid[i] = _GONE
        self.msgs -= 1
        self.bytes -= self._col_size[i]
        lst = self.subjects[subject]
        lst.discard(seq)
        if not lst:
            del self.subjects[subject]
        loc = (self._loc_a[i], self._loc_b[i])
        if seq == self.first_seq:
            nxt = self.next_seq(seq + 1)
            self.first_seq = nxt if nxt is not None else self.last_seq + 1
            dead = self.first_seq - self._base
            if dead >= _TRIM_AT and dead * 2 >= len(self._col_sid):
                for col in (self._col_ts, self._col_size, self._col_sid, self._loc_a, self._loc_b):
                    del col[:dead]
                self._base = self.first_seq
        return loc

    def append(self, subject: bytes, hdrs: bytes | None, data: bytes, ts: int) -> int:
        """Store a message as the next sequence; returns it."""
        seq = self.last_seq + 1
        loc = self._put(seq, subject, hdrs, data, ts)
        self._index(subject, seq, ts, self.msg_size(subject, hdrs, data), loc)
        return seq

    def skip_to(self, last_seq: int) -> None:
        """Advance the sequence without messages (a purge of an empty stream keeps its last sequence)."""
        self.last_seq = max(self.last_seq, last_seq)
        if self.msgs == 0:
            self.first_seq = self.last_seq + 1

    def load(self, seq: int) -> StoredMsg | None:
        i = seq - self._base  # (`_slot` inline: a consumer loads each message it delivers)
        sids = self._col_sid
        if i < 0 or i >= len(sids):
            return None
        sid = sids[i]
        if sid == _GONE:
            return None
        return self._get(seq, self._names[sid], self._col_ts[i], (self._loc_a[i], self._loc_b[i]))

    def subject_of(self, seq: int) -> bytes | None:
        i = self._slot(seq)
        return None if i < 0 else self._names[self._col_sid[i]]

    def ts_of(self, seq: int) -> int | None:
        i = self._slot(seq)
        return None if i < 0 else self._col_ts[i]

    def size_of(self, seq: int) -> int:
        i = self._slot(seq)
        return 0 if i < 0 else self._col_size[i]

    def __contains__(self, seq: int) -> bool:
        return self._slot(seq) >= 0

    def remove(self, seq: int) -> bool:
        return self.remove_many([seq]) == 1

    def remove_many(self, seqs: list[int], buffered: bool = False) -> int:
        """Remove messages; returns how many were there. `buffered`: their delete records are written at the
        next `commit` (with whatever else that turn buffered), not at once; the caller commits before it
        tells anyone of the removal."""
        gone = [(s, loc) for s in seqs if (loc := self._unindex(s)) is not None]
        if gone:
            self._drop(gone, buffered=buffered)
        return len(gone)

    def purge(
        self, subject_filter: Callable[[bytes], bool] | None = None, upto: int = 0, keep: int = 0
    ) -> int:
        """Remove messages (all, or those whose subject passes the filter) below `upto` (0: any), keeping the
        newest `keep`; returns how many went."""
        if subject_filter is None and upto == 0 and keep == 0:
            n = self.msgs
            end = self.last_seq + 1
            self._reset(end)
            self.subjects.clear()
            self.msgs = 0
            self.bytes = 0
            self.first_seq = end
            self._drop([], purge_to=end)
            return n
        victims: list[int] = []
        if subject_filter is None:
            victims = [s for s in self.seqs_from(self.first_seq) if not upto or s < upto]
            if keep:
                victims = victims[: max(0, len(victims) - keep)]
        else:
            for subj, lst in list(self.subjects.items()):
                if not subject_filter(subj):
                    continue
                cand = [s for s in lst if not upto or s < upto]
                if keep:
                    cand = cand[: max(0, len(cand) - keep)]
                victims.extend(cand)
            victims.sort()
        return self.remove_many(victims)

    def next_seq(self, start: int, match: Callable[[bytes], bool] | None = None) -> int | None:
        """The first stored sequence >= start whose subject passes `match` (all when None)."""
        sids, names = self._col_sid, self._names
        if match is None:  # (a consumer without filter asks once per delivery: no verdicts to keep)
            for i in range(max(start, self.first_seq) - self._base, len(sids)):
                if sids[i] != _GONE:
                    return self._base + i
            return None
        verdicts: dict[int, bool] = {}  # subject id -> match, decided once per call
        for i in range(max(start, self.first_seq) - self._base, len(sids)):
            sid = sids[i]
            if sid == _GONE:
                continue
            ok = verdicts.get(sid)
            if ok is None:
                ok = verdicts[sid] = match(names[sid])
            if ok:
                return self._base + i
        return None

    def next_seq_of(self, start: int, subjects: list[bytes]) -> int | None:
        """The first sequence >= start on any of these literal subjects (no scan of other subjects)."""
        best: int | None = None
        for subject in subjects:
            lst = self.subjects.get(subject)
            if lst:
                found = lst.first_from(start)
                if found and (best is None or found < best):
                    best = found
        return best

    def iter_from(self, start: int, match: Callable[[bytes], bool] | None = None) -> Iterator[int]:
        """Stored sequences >= start whose subject passes `match` (all when None), ascending."""
        if match is None:
            yield from self.seqs_from(start)
            return
        sids, names = self._col_sid, self._names
        verdicts: dict[int, bool] = {}  # subject id -> match, decided once
        i = max(start, self.first_seq) - self._base
        while i < len(sids):
            sid = sids[i]
            if sid != _GONE:
                ok = verdicts.get(sid)
                if ok is None:
                    ok = verdicts[sid] = match(names[sid])
                if ok:
                    yield self._base + i
            i += 1

    def load_from(
        self, start: int, limit: int, max_bytes: int, match: Callable[[bytes], bool] | None = None
    ) -> list[StoredMsg]:
        """Up to `limit` stored messages from sequence `start` on (subject passing `match`, all when None),
        ascending, stopping after the one that brings their subjects, headers and payloads to `max_bytes`."""
        out: list[StoredMsg] = []
        sids, names, col_ts, loc_a, loc_b = self._col_sid, self._names, self._col_ts, self._loc_a, self._loc_b
        verdicts: dict[int, bool] = {}  # subject id -> match, decided once
        base = self._base
        i = max(start, self.first_seq) - base
        n = len(sids)
        size = 0
        while i < n and len(out) < limit:
            sid = sids[i]
            if sid != _GONE:
                ok = True
                if match is not None:
                    known = verdicts.get(sid)
                    ok = verdicts[sid] = match(names[sid]) if known is None else known
                if ok:
                    msg = self._get(base + i, names[sid], col_ts[i], (loc_a[i], loc_b[i]))
                    if msg is None:
                        break
                    out.append(msg)
                    size += len(msg.subject) + len(msg.data) + (len(msg.hdrs) if msg.hdrs else 0)
                    if size >= max_bytes:
                        break
            i += 1
        return out

    def count_from(self, start: int, match: Callable[[bytes], bool] | None = None) -> int:
        """How many stored messages have a sequence >= start (and a subject passing `match`)."""
        if match is not None:
            return sum(lst.count_from(start) for s, lst in self.subjects.items() if match(s))
        if start <= self.first_seq:
            return self.msgs
        if start > self.last_seq:
            return 0
        if self.msgs == self.last_seq - self.first_seq + 1:  # no holes: no need to look
            return self.last_seq - start + 1
        tail = self._col_sid[start - self._base :]
        return len(tail) - tail.count(_GONE)

    def seqs_from(self, start: int) -> Iterator[int]:
        sids, base = self._col_sid, self._base
        i = max(start, self.first_seq) - base
        while i < len(sids):
            if sids[i] != _GONE:
                yield base + i
            i += 1

    def last_for(self, subject: bytes) -> int:
        lst = self.subjects.get(subject)
        return lst[-1] if lst else 0

    def seq_for_time(self, ts: int) -> int:
        """The first sequence stored at or after `ts` (last_seq + 1 if none)."""
        i = bisect_left(self._col_ts, ts, max(self.first_seq - self._base, 0))
        nxt = self.next_seq(self._base + i)
        return nxt if nxt is not None else self.last_seq + 1

    def first_ts(self) -> int:
        i = self._slot(self.first_seq)
        return self._col_ts[i] if i >= 0 else 0
