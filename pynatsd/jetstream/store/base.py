"""The index every store shares: sequences, per-subject sequence lists, counters.

A backend only keeps payloads (`_put`, `_get`, `_drop`); everything a stream asks of its messages (the
next sequence matching a filter, the last message of a subject, how many messages per subject, purges)
is answered from this in-memory index. Per message the index holds the subject (interned), the
timestamp and the accounted size: a few dozen bytes, whatever the payload size.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(slots=True)
class StoredMsg:
    """A message as a stream keeps it. `ts` is nanoseconds since the epoch."""

    subject: bytes
    seq: int
    hdrs: bytes | None
    data: bytes
    ts: int


class Store:
    """Index of one stream's messages; subclasses hold the payloads."""

    def __init__(self) -> None:
        self.first_seq = 1
        self.last_seq = 0
        self.last_ts = 0
        self.msgs = 0
        self.bytes = 0
        self._meta: dict[int, tuple[bytes, int, int]] = {}  # seq -> (subject, ts, size)
        self._seqs: list[int] = []  # ascending; holds removed sequences too until compacted
        self._dead = 0
        self.subjects: dict[bytes, list[int]] = {}  # subject -> its sequences, ascending

    # -- backend --------------------------------------------------------------------------------------
    def _put(self, msg: StoredMsg) -> None:
        raise NotImplementedError

    def _get(self, seq: int, subject: bytes, ts: int) -> StoredMsg | None:
        raise NotImplementedError

    def _drop(self, seqs: list[int], purge_to: int = 0) -> None:
        """Forget payloads of `seqs` (and record it durably); `purge_to` > 0: everything below is gone."""
        raise NotImplementedError

    def msg_size(self, subject: bytes, hdrs: bytes | None, data: bytes) -> int:
        raise NotImplementedError

    def flush(self) -> None:
        """Make what was written durable (the backend's sync policy decides when this runs)."""

    def close(self) -> None:
        """Release files; the store is not used afterwards."""

    def delete(self) -> None:
        """Remove everything the store keeps (stream deleted)."""

    # -- index ----------------------------------------------------------------------------------------
    def _index(self, subject: bytes, seq: int, ts: int, size: int) -> None:
        self._meta[seq] = (subject, ts, size)
        self._seqs.append(seq)
        lst = self.subjects.get(subject)
        if lst is None:
            self.subjects[subject] = [seq]
        else:
            lst.append(seq)
        self.msgs += 1
        self.bytes += size
        if seq > self.last_seq:
            self.last_seq = seq
            self.last_ts = ts
        if self.msgs == 1:
            self.first_seq = seq

    def _unindex(self, seq: int) -> bool:
        meta = self._meta.pop(seq, None)
        if meta is None:
            return False
        subject, _, size = meta
        self.msgs -= 1
        self.bytes -= size
        lst = self.subjects[subject]
        if lst[0] == seq:
            del lst[0]
        else:
            lst.remove(seq)
        if not lst:
            del self.subjects[subject]
        self._dead += 1
        if seq == self.first_seq:
            nxt = self.next_seq(seq + 1)
            self.first_seq = nxt if nxt is not None else self.last_seq + 1
        if self._dead > 1024 and self._dead * 2 > len(self._seqs):
            self._seqs = [s for s in self._seqs if s in self._meta]
            self._dead = 0
        return True

    def append(self, subject: bytes, hdrs: bytes | None, data: bytes, ts: int) -> int:
        """Store a message as the next sequence; returns it."""
        seq = self.last_seq + 1
        msg = StoredMsg(subject, seq, hdrs, data, ts)
        self._put(msg)
        self._index(subject, seq, ts, self.msg_size(subject, hdrs, data))
        return seq

    def skip_to(self, last_seq: int) -> None:
        """Advance the sequence without messages (a purge of an empty stream keeps its last sequence)."""
        self.last_seq = max(self.last_seq, last_seq)
        if self.msgs == 0:
            self.first_seq = self.last_seq + 1

    def load(self, seq: int) -> StoredMsg | None:
        meta = self._meta.get(seq)
        if meta is None:
            return None
        return self._get(seq, meta[0], meta[1])

    def subject_of(self, seq: int) -> bytes | None:
        meta = self._meta.get(seq)
        return None if meta is None else meta[0]

    def ts_of(self, seq: int) -> int | None:
        meta = self._meta.get(seq)
        return None if meta is None else meta[1]

    def size_of(self, seq: int) -> int:
        meta = self._meta.get(seq)
        return 0 if meta is None else meta[2]

    def __contains__(self, seq: int) -> bool:
        return seq in self._meta

    def remove(self, seq: int) -> bool:
        if not self._unindex(seq):
            return False
        self._drop([seq])
        return True

    def remove_many(self, seqs: list[int]) -> int:
        gone = [s for s in seqs if self._unindex(s)]
        if gone:
            self._drop(gone)
        return len(gone)

    def purge(
        self, subject_filter: Callable[[bytes], bool] | None = None, upto: int = 0, keep: int = 0
    ) -> int:
        """Remove messages (all, or those whose subject passes the filter) below `upto` (0: any), keeping the
        newest `keep`; returns how many went."""
        if subject_filter is None and upto == 0 and keep == 0:
            n = self.msgs
            end = self.last_seq + 1
            self._meta.clear()
            self._seqs.clear()
            self._dead = 0
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
        meta = self._meta
        if start < self.first_seq:
            start = self.first_seq
        seqs = self._seqs
        i = bisect_left(seqs, start)
        n = len(seqs)
        while i < n:
            s = seqs[i]
            m = meta.get(s)
            if m is not None and (match is None or match(m[0])):
                return s
            i += 1
        return None

    def seqs_from(self, start: int) -> Iterator[int]:
        seqs = self._seqs
        for i in range(bisect_left(seqs, start), len(seqs)):
            if seqs[i] in self._meta:
                yield seqs[i]

    def last_for(self, subject: bytes) -> int:
        lst = self.subjects.get(subject)
        return lst[-1] if lst else 0

    def seq_for_time(self, ts: int) -> int:
        """The first sequence stored at or after `ts` (last_seq + 1 if none)."""
        for s in self.seqs_from(self.first_seq):
            if self._meta[s][1] >= ts:
                return s
        return self.last_seq + 1

    def first_ts(self) -> int:
        meta = self._meta.get(self.first_seq)
        return meta[1] if meta else 0
