"""Sublist: the subscription index with nats-server's semantics and a result cache.

Layout: literal subscriptions live in one flat dict keyed by their subject bytes (the subscription's own
bytes object, so the key costs nothing extra); wildcard subscriptions live in a token trie. A lookup is one
dict probe plus, only when wildcard filters exist, a trie walk.

Cache: ``subject -> MatchResult`` that is always valid, so a hit is one dict lookup. Every change keeps it
valid eagerly: a literal insert/remove drops only its own key (no other subject can match it); a wildcard
insert/remove empties the cache (re-matching every cached key in Python would cost more than refilling).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any, Generic

from matcher import trie
from matcher.leaf import merge, slot_add, slot_iter, slot_remove, slot_result
from matcher.result import EMPTY, MatchResult, S, SublistStats
from matcher.subjects import SEP, has_wildcard, subscription_tokens

CACHE_MAX = 1024
"""Cached subjects before a sweep (nats-server's slCacheMax)."""
CACHE_SWEEP = 256
"""Entries kept by a sweep (nats-server's slCacheSweep): the most recently admitted ones."""


class Sublist(Generic[S]):
    """Subscription index: insert/remove subscriptions, match published subjects to subscribers."""

    __slots__ = (
        "_admit",
        "_cache",
        "_count",
        "_literal",
        "_nmiss",
        "_nwild",
        "_root",
        "generation",
        "num_inserts",
        "num_matches",
        "num_removes",
    )

    def __init__(self, cache: bool = True) -> None:
        self._literal: dict[bytes, Any] = {}
        self._root = trie.Node()
        self._nwild = 0
        self._count = 0
        self._cache: dict[bytes, MatchResult[S]] = {}
        self._admit = cache
        self._nmiss = 0
        self.generation = 0
        """Bumped on every effective insert or remove (for callers' own per-connection caches)."""
        self.num_inserts = 0
        self.num_removes = 0
        self.num_matches = 0

    def __len__(self) -> int:
        return self._count

    def insert(self, sub: S) -> None:
        """Add a subscription. Raises InvalidSubjectError for an invalid subject; a repeat is a no-op."""
        subject = sub.subject
        tokens = subscription_tokens(subject)
        if has_wildcard(tokens):
            if not trie.insert(self._root, tokens, sub):
                return
            self._nwild += 1
            if self._cache:
                self._cache.clear()
        else:
            literal = self._literal
            slot, added = slot_add(literal.get(subject), sub)
            if not added:
                return
            literal[subject] = slot
            self._cache.pop(subject, None)
        self._count += 1
        self.num_inserts += 1
        self.generation += 1

    def remove(self, sub: S) -> bool:
        """Remove a subscription; False if it was not in the index."""
        subject = sub.subject
        literal = self._literal
        slot = literal.get(subject)
        if slot is not None:
            slot, removed = slot_remove(slot, sub)
            if not removed:
                return False
            if slot is None:
                del literal[subject]
            else:
                literal[subject] = slot
            self._cache.pop(subject, None)
        else:
            try:
                tokens = subscription_tokens(subject)
            except ValueError:
                return False
            if not has_wildcard(tokens) or not trie.remove(self._root, tokens, sub):
                return False
            self._nwild -= 1
            if self._cache:
                self._cache.clear()
        self._count -= 1
        self.num_removes += 1
        self.generation += 1
        return True

    def match(self, subject: bytes) -> MatchResult[S]:
        """Subscriptions matching a published subject (the per-message hot path)."""
        self.num_matches += 1
        r = self._cache.get(subject)
        if r is None:
            self._nmiss += 1
            r = self._lookup(subject)
            if self._admit:
                cache = self._cache
                cache[subject] = r
                if len(cache) > CACHE_MAX:
                    self._sweep()
        return r

    def _lookup(self, subject: bytes) -> MatchResult[S]:
        lit = self._literal.get(subject)
        if not self._nwild:
            return EMPTY if lit is None else slot_result(lit)
        tokens = subject.split(SEP)
        if b"" in tokens:
            return EMPTY  # empty tokens match nothing (and cannot be a literal key)
        out: list[Any] = [] if lit is None else [lit]
        trie.match(self._root, tokens, 0, len(tokens), out)
        if not out:
            return EMPTY
        if len(out) == 1:
            return slot_result(out[0])
        return merge(out)

    def _sweep(self) -> None:
        # Keep the most recently admitted entries; a hot subject swept out costs one re-match.
        self._cache = dict(islice(reversed(self._cache.items()), CACHE_SWEEP))

    def subscriptions(self) -> Iterator[S]:
        """Every subscription in the index."""
        for slot in self._literal.values():
            yield from slot_iter(slot)
        yield from trie.iter_subs(self._root)

    def stats(self) -> SublistStats:
        """Counters for /subsz; fan-out (plain subs + queue groups per result) is over cached results."""
        cache = self._cache
        total = maxf = 0
        for r in cache.values():
            f = len(r.plain) + len(r.groups)
            total += f
            if f > maxf:
                maxf = f
        n = len(cache)
        hits = self.num_matches - self._nmiss
        return SublistStats(
            num_subscriptions=self._count,
            num_cache=n,
            num_inserts=self.num_inserts,
            num_removes=self.num_removes,
            num_matches=self.num_matches,
            cache_hit_rate=hits / self.num_matches if self.num_matches else 0.0,
            max_fanout=maxf,
            avg_fanout=total / n if n else 0.0,
        )
