"""A brute-force reference for the sublist: match every subscription's tokens against the subject."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class Sub:
    """A subscription as the broker's: slots, identity hash."""

    __slots__ = ("queue", "subject")

    def __init__(self, subject: bytes, queue: bytes | None = None) -> None:
        self.subject = subject
        self.queue = queue

    def __repr__(self) -> str:
        return f"Sub({self.subject!r}, {self.queue!r})@{id(self):x}"


def pattern_matches(pattern: bytes, subject: bytes) -> bool:
    """nats-server semantics, written from the spec rather than from the trie."""
    subj = subject.split(b".")
    if b"" in subj:
        return False
    pat = pattern.split(b".")
    for i, p in enumerate(pat):
        if p == b">":
            return len(subj) > i
        if i >= len(subj):
            return False
        if p != b"*" and p != subj[i]:
            return False
    return len(pat) == len(subj)


def oracle(subs: Iterable[Any], subject: bytes) -> tuple[list[int], dict[bytes, list[int]]]:
    """(sorted ids of plain matches, {queue: sorted ids of members})."""
    plain: list[int] = []
    groups: dict[bytes, list[int]] = {}
    for s in subs:
        if pattern_matches(s.subject, subject):
            if s.queue:
                groups.setdefault(s.queue, []).append(id(s))
            else:
                plain.append(id(s))
    return sorted(plain), {q: sorted(m) for q, m in groups.items()}


def normalise(result: Any) -> tuple[list[int], dict[bytes, list[int]]]:
    """A MatchResult in the oracle's form, checking group invariants on the way."""
    plain = sorted(id(s) for s in result.plain)
    groups: dict[bytes, list[int]] = {}
    for g in result.groups:
        assert len(g) > 0, "empty queue group in result"
        q = g[0].queue
        assert all(s.queue == q for s in g), "mixed queue names in one group"
        assert q not in groups, "queue name split across groups"
        groups[q] = sorted(id(s) for s in g)
    return plain, groups
