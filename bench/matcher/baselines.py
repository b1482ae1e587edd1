"""Baselines for the seed table: a naive hashmap scan and a pytrie-based token trie.

Both share the Sublist API subset the benchmark drives (insert, remove, match -> list of subs).
"""

from __future__ import annotations

from typing import Any

from pytrie import NULL, Trie


def _pattern_matches(pattern: tuple[bytes, ...], tokens: list[bytes]) -> bool:
    n = len(tokens)
    for i, p in enumerate(pattern):
        if p == b">":
            return n > i
        if i >= n or (p != b"*" and p != tokens[i]):
            return False
    return len(pattern) == n


class NaiveScan:
    """A hashmap of filter -> subscribers; a lookup tests every filter (the 'naive' row of the seed table)."""

    def __init__(self) -> None:
        self.filters: dict[bytes, tuple[tuple[bytes, ...], dict[Any, None]]] = {}

    def insert(self, sub: Any) -> None:
        entry = self.filters.get(sub.subject)
        if entry is None:
            entry = self.filters[sub.subject] = (tuple(sub.subject.split(b".")), {})
        entry[1][sub] = None

    def remove(self, sub: Any) -> bool:
        entry = self.filters.get(sub.subject)
        if entry is None or sub not in entry[1]:
            return False
        del entry[1][sub]
        if not entry[1]:
            del self.filters[sub.subject]
        return True

    def match(self, subject: bytes) -> list[Any]:
        tokens = subject.split(b".")
        out: list[Any] = []
        for pattern, subs in self.filters.values():
            if _pattern_matches(pattern, tokens):
                out.extend(subs)
        return out


class PyTrieIndex:
    """Filters stored in a pytrie.Trie keyed by token tuples; a lookup walks its nodes with wildcards."""

    def __init__(self) -> None:
        self.trie = Trie()

    def insert(self, sub: Any) -> None:
        key = tuple(sub.subject.split(b"."))
        subs = self.trie.get(key)
        if subs is None:
            self.trie[key] = subs = {}
        subs[sub] = None

    def remove(self, sub: Any) -> bool:
        key = tuple(sub.subject.split(b"."))
        subs = self.trie.get(key)
        if subs is None or sub not in subs:
            return False
        del subs[sub]
        if not subs:
            del self.trie[key]
        return True

    def match(self, subject: bytes) -> list[Any]:
        out: list[Any] = []
        self._walk(self.trie._root, subject.split(b"."), 0, out)
        return out

    def _walk(self, node: Any, tokens: list[bytes], i: int, out: list[Any]) -> None:
        children = node.children
        if i == len(tokens):
            if node.value is not NULL:
                out.extend(node.value)
            return
        fwc = children.get(b">")
        if fwc is not None and fwc.value is not NULL:
            out.extend(fwc.value)
        for token in (tokens[i], b"*"):
            child = children.get(token)
            if child is not None:
                self._walk(child, tokens, i + 1, out)
