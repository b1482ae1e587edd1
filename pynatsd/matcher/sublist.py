"""Sublist: the subscription index with nats-server's semantics and a result cache.

Layout: literal subscriptions live in one flat dict keyed by their subject bytes (the subscription's own
bytes object, so the key costs nothing extra); wildcard subscriptions live in a token trie. A lookup is one
dict probe plus, only when wildcard filters exist, a trie walk.

Cache: ``subject -> MatchResult`` that is always valid, so a hit is one dict lookup. Every change keeps it
valid eagerly: a literal insert/remove drops only its own key (no other subject can match it); a wildcard
insert/remove empties the cache (re-matching every cached key in Python would cost more than refilling).
Admission control keeps the cache from making things worse: when a window of lookups shows too few hits
(publishers cycling through more distinct subjects than the cache holds), misses stop being admitted, and
the cache is re-tried now and then. Subjects unique by construction (JetStream ack replies, `$JS.ACK.`)
bypass the cache and its admission windows: each is published once, so caching one only evicts a subject
that repeats, and counting it as a miss would switch admission off under a consumer's acks.

Interest notifications (nats-server's RegisterNotification): `notify_on_interest(subject, callback)` calls
`callback` once, at the next insert of a subscription that receives the literal `subject` (a JetStream push
consumer waiting for a subscriber on its deliver subject).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Final, Generic, cast

from pynatsd.matcher import trie
from pynatsd.matcher.errors import InvalidSubjectError
from pynatsd.matcher.leaf import Leaf, Slot, merge, slot_add, slot_iter, slot_result
from pynatsd.matcher.result import EMPTY, MatchResult, S, SublistStats, Subscriber
from pynatsd.protocol.subjects import FWC, PWC, SEP, filter_tokens, matches

CACHE_MAX = 1024
"""Cached subjects before a sweep (nats-server's slCacheMax)."""
CACHE_SWEEP = 256
"""Entries kept by a sweep (nats-server's slCacheSweep): the most recently admitted ones."""
WINDOW = 1024
"""Cache misses per admission-control window."""
MIN_HIT_RATIO = 8
"""Stop admitting when fewer than 1 in this many lookups of a window hit: refills would cost more than
they save (a miss + admission + sweep share costs about a tenth of an uncached match)."""
PROBE_EVERY = 32
"""While not admitting, re-admit for one window after this many windows, to notice a workload change."""
UNCACHED_PREFIX: Final = b"$JS.ACK."
"""Published subjects under this prefix are matched without the cache: each JetStream ack reply names its
message's sequences, so it is published once (an MQTT QoS 1 -> 1 run of 22k messages had ~20k misses,
nearly all acks, each evicting a subject that repeats or pushing admission control to stop admitting).
Not `_INBOX.`: a push consumer's deliver subject is one, published to for every message."""


class Sublist(Generic[S]):
    """Subscription index: insert/remove subscriptions, match published subjects to subscribers."""

    __slots__ = (
        "_admit",
        "_awaited",
        "_cache",
        "_literal",
        "_nmiss",
        "_nwild",
        "_probe_in",
        "_root",
        "_uncached",
        "_win_end",
        "_win_start",
        "generation",
        "num_inserts",
        "num_matches",
        "num_removes",
        "watcher",
    )

    def __init__(self, cache: bool = True) -> None:
        self._literal: dict[bytes, Slot] = {}
        self._root = trie.Node()
        self._nwild = 0
        self._cache: dict[bytes, MatchResult[S]] = {}
        self._admit = cache
        self._nmiss = 0
        # Admission windows end after WINDOW misses; with the cache off they never end, so the miss path
        # runs the very same checks whether the cache is off or bypassed.
        self._win_end = WINDOW if cache else sys.maxsize
        self._win_start = 0
        self._probe_in = 0
        self._uncached = 0  # lookups of UNCACHED_PREFIX subjects: neither hits nor window misses
        self.generation = 0
        """Bumped on every effective insert or remove (for callers' own per-connection caches)."""
        self.num_inserts = 0
        self.num_removes = 0
        self.num_matches = 0
        self.watcher: Callable[[S, bool], None] | None = None
        """Told of every effective insert (True) or remove (False): a cluster propagates interest so."""
        self._awaited: dict[bytes, list[Callable[[], None]]] = {}  # see notify_on_interest

    def __len__(self) -> int:
        return self.num_inserts - self.num_removes

    def insert(self, sub: S) -> None:
        """Add a subscription. Raises InvalidSubjectError for an invalid subject; a repeat is a no-op."""
        subject = sub.subject
        tokens = filter_tokens(subject)
        if tokens is None:
            raise InvalidSubjectError(subject)
        if PWC in tokens or FWC in tokens:
            if not trie.insert(self._root, tokens, sub):
                return
            self._nwild += 1
            if self._cache:
                self._cache.clear()
        else:
            literal = self._literal
            slot = literal.get(subject)
            # The common cases inline (first subscriber, one more on a shared filter): churn then costs
            # the same for the 1st and the 10,000th subscriber of a subject.
            if slot is None:
                literal[subject] = sub
            elif type(slot) is Leaf:
                if not slot.add(sub):
                    return
            elif slot is sub:
                return
            else:
                literal[subject] = slot_add(slot, sub)[0]
            if self._cache:
                self._cache.pop(subject, None)
        self.num_inserts += 1
        self.generation += 1
        if self.watcher is not None:
            self.watcher(sub, True)
        if self._awaited:
            self._notify(subject, tokens)

    def remove(self, sub: S) -> bool:
        """Remove a subscription; False if it was not in the index."""
        subject = sub.subject
        literal = self._literal
        slot = literal.get(subject)
        if slot is sub:
            del literal[subject]
        elif type(slot) is Leaf:
            if not slot.discard(sub):
                return False
            if slot.count == 1:
                literal[subject] = next(iter(slot))  # back to a bare subscription, no container
        elif slot is not None:
            return False
        else:
            tokens = filter_tokens(subject)
            if tokens is None:
                return False
            if (PWC not in tokens and FWC not in tokens) or not trie.remove(self._root, tokens, sub):
                return False
            self._nwild -= 1
            if self._cache:
                self._cache.clear()
        if self._cache:
            self._cache.pop(subject, None)
        self.num_removes += 1
        self.generation += 1
        if self.watcher is not None:
            self.watcher(sub, False)
        return True

    def notify_on_interest(self, subject: bytes, callback: Callable[[], None]) -> None:
        """Call `callback` once, when a subscription that receives literal `subject` is next inserted."""
        self._awaited.setdefault(subject, []).append(callback)

    def cancel_notification(self, subject: bytes, callback: Callable[[], None]) -> None:
        """Forget a `notify_on_interest` that has not fired."""
        callbacks = self._awaited.get(subject)
        if callbacks is not None and callback in callbacks:
            callbacks.remove(callback)
            if not callbacks:
                del self._awaited[subject]

    def _notify(self, subject: bytes, tokens: list[bytes]) -> None:
        """Fire (and forget) the notifications the subscription just inserted (`subject`, split into
        `tokens`) answers: its own subject's, or for a wildcard one every literal subject it receives."""
        awaited = self._awaited
        if PWC in tokens or FWC in tokens:
            fired = [s for s in awaited if matches(subject, s)]
        else:
            fired = [subject] if subject in awaited else []
        for key in fired:
            for callback in awaited.pop(key):
                callback()

    def match(self, subject: bytes) -> MatchResult[S]:
        """Subscriptions matching a published subject (the per-message hot path)."""
        self.num_matches += 1
        r = self._cache.get(subject)
        if r is None:
            r = self._miss(subject)
        return r

    def count_repeats(self, subject: bytes, repeats: int) -> None:
        """Count `repeats` more publishes to `subject`, served by the `match` just made for it (a run of
        publishes is matched once): as the cache hits they would have been, or misses when uncached."""
        self.num_matches += repeats
        if subject.startswith(UNCACHED_PREFIX):
            self._uncached += repeats
        elif subject not in self._cache:
            self._nmiss += repeats
            if self._nmiss >= self._win_end:
                self._end_window()

    def _miss(self, subject: bytes) -> MatchResult[S]:
        uncached = subject.startswith(UNCACHED_PREFIX)
        if uncached:
            self._uncached += 1
        else:
            self._nmiss += 1
        # The uncached match, inline: literal subscribers by one probe, wildcard ones by a trie walk.
        lit = self._literal.get(subject)
        found: MatchResult[Subscriber]
        if not self._nwild:
            found = EMPTY if lit is None else slot_result(lit)
        else:
            tokens = subject.split(SEP)
            if b"" in tokens:
                return EMPTY  # empty tokens match nothing (and cannot be a literal key); never cached
            out: list[Slot] = [] if lit is None else [lit]
            trie.match(self._root, tokens, 0, len(tokens), out)
            if not out:
                found = EMPTY
            elif len(out) == 1:
                found = slot_result(out[0])
            else:
                found = merge(out)
        r = cast(MatchResult[S], found)  # the slots hold only what insert() took: S
        if uncached:
            return r
        if self._admit:
            cache = self._cache
            cache[subject] = r
            if len(cache) > CACHE_MAX:
                self._cache = dict(islice(reversed(cache.items()), CACHE_SWEEP))
        if self._nmiss >= self._win_end:
            self._end_window()
        return r

    def _end_window(self) -> None:
        """Admission control: stop filling the cache while it does not pay, probe again now and then."""
        matched = self.num_matches - self._uncached
        lookups = matched - self._win_start
        hits = lookups - (self._nmiss - (self._win_end - WINDOW))
        self._win_start = matched
        self._win_end = self._nmiss + WINDOW
        if self._admit:
            if hits * MIN_HIT_RATIO < lookups:
                self._admit = False
                self._probe_in = PROBE_EVERY
        else:
            self._probe_in -= 1
            if self._probe_in <= 0:
                self._admit = True

    def subscriptions(self) -> Iterator[S]:
        """Every subscription in the index."""
        # Casts: the index holds only what insert() took, all S.
        for slot in self._literal.values():
            yield from cast(Iterator[S], slot_iter(slot))
        yield from cast(Iterator[S], trie.iter_subs(self._root))

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
        hits = self.num_matches - self._nmiss - self._uncached
        return SublistStats(
            num_subscriptions=self.num_inserts - self.num_removes,
            num_cache=n,
            num_inserts=self.num_inserts,
            num_removes=self.num_removes,
            num_matches=self.num_matches,
            cache_hit_rate=hits / self.num_matches if self.num_matches else 0.0,
            max_fanout=maxf,
            avg_fanout=total / n if n else 0.0,
        )
