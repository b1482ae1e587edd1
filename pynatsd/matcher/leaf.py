"""Subscriber storage at one subject: a bare subscription when alone, else a ``Leaf``.

A slot holds ``None``, a single subscription (no container: most subjects have one subscriber), or a Leaf.
The Leaf keeps insertion-ordered dicts used as sets, so adding or removing the N-th subscriber of a filter
costs O(1); the tuples handed to matchers are built lazily, once per change, not per insert.

Weighted queue members: a subscription with a `weight` attribute (a route's remote queue interest, which
stands for that many members on the other server) appears `weight` times in its group of a match result,
as nats-server's sublist shadows remote queue subscriptions, so that one member is picked fairly across
the cluster from one object (never `weight` of them). Its weight must not change while it is indexed
(remove, change, insert).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeAlias, cast, final

from pynatsd.matcher.result import EMPTY, MatchResult, Subscriber

# NamedTuple's generated __new__ is a Python function; tuple.__new__ builds the same object in one C call.
_new = tuple.__new__


def weight_of(sub: Subscriber) -> int:
    """How many members `sub` stands for in its queue group (1 unless it carries a `weight`)."""
    # Optional, so not in the Subscriber protocol: only a route's remote queue interest has one, an int.
    return cast(int, getattr(sub, "weight", 1))


def _shadowed(members: Iterable[Subscriber]) -> tuple[Subscriber, ...]:
    """A queue group's members, each repeated as often as its weight."""
    return tuple(sub for sub in members for _ in range(weight_of(sub)))


@final
class Leaf:
    """Two or more subscriptions on one subject: plain ones and queue groups by name."""

    __slots__ = ("_result", "count", "plain", "queues", "weighted")

    def __init__(self) -> None:
        self.plain: dict[Subscriber, None] = {}
        self.queues: dict[bytes, dict[Subscriber, None]] | None = None
        self._result: MatchResult[Subscriber] | None = None
        self.count = 0
        self.weighted = 0  # queue members of a weight other than 1 (results then shadow them)

    def add(self, sub: Subscriber) -> bool:
        """Add a subscription; False if it was already here."""
        q = sub.queue
        if q:
            queues = self.queues
            if queues is None:
                queues = self.queues = {}
            members = queues.get(q)
            if members is None:
                queues[q] = {sub: None}
            elif sub in members:
                return False
            else:
                members[sub] = None
            if weight_of(sub) != 1:
                self.weighted += 1
        elif sub in self.plain:
            return False
        else:
            self.plain[sub] = None
        self._result = None
        self.count += 1
        return True

    def discard(self, sub: Subscriber) -> bool:
        """Remove a subscription; False if it was not here."""
        q = sub.queue
        if q:
            queues = self.queues
            if queues is None:
                return False
            members = queues.get(q)
            if members is None or sub not in members:
                return False
            del members[sub]
            if not members:
                del queues[q]
            if weight_of(sub) != 1:
                self.weighted -= 1
        elif self.plain.pop(sub, self) is self:
            return False
        self._result = None
        self.count -= 1
        return True

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Subscriber]:
        yield from self.plain
        if self.queues:
            for members in self.queues.values():
                yield from members

    def result(self) -> MatchResult[Subscriber]:
        """This subject's subscribers as a (cached until the next change) MatchResult."""
        r = self._result
        if r is None:
            if not self.queues:
                groups: tuple[tuple[Subscriber, ...], ...] = ()
            elif self.weighted:
                groups = tuple(_shadowed(m) for m in self.queues.values())
            else:
                groups = tuple(tuple(m) for m in self.queues.values())
            r = self._result = _new(MatchResult, (tuple(self.plain), groups))
        return r


Slot: TypeAlias = "Subscriber | Leaf"
"""What one subject (a literal key, a trie node) holds: a bare subscription, or a Leaf of several."""


def slot_add(slot: Slot | None, sub: Subscriber) -> tuple[Slot, bool]:
    """Add ``sub`` to a slot; returns the new slot value and whether it was added."""
    if slot is None:
        return sub, True
    if type(slot) is Leaf:
        return slot, slot.add(sub)
    if slot is sub:
        return slot, False
    leaf = Leaf()
    leaf.add(slot)
    leaf.add(sub)
    return leaf, True


def slot_remove(slot: Slot | None, sub: Subscriber) -> tuple[Slot | None, bool]:
    """Remove ``sub`` from a slot; returns the new slot value (None when empty) and whether it was there."""
    if slot is sub:
        return None, True
    if type(slot) is not Leaf or not slot.discard(sub):
        return slot, False
    if slot.count == 1:
        # Back to a bare subscription: a filter that shrinks to one subscriber costs no container.
        return next(iter(slot)), True
    return slot, True


def slot_iter(slot: Slot) -> Iterator[Subscriber]:
    """Iterate the subscriptions in a slot."""
    if type(slot) is Leaf:
        return iter(slot)
    return iter((slot,))


def slot_result(slot: Slot) -> MatchResult[Subscriber]:
    """A MatchResult for a single slot."""
    if type(slot) is Leaf:
        return slot.result()
    if slot.queue:
        return _new(MatchResult, ((), ((slot,) * weight_of(slot),)))
    return _new(MatchResult, ((slot,), ()))


def merge(slots: list[Slot]) -> MatchResult[Subscriber]:
    """Combine several matching slots; queue members of one name across slots form one group."""
    plain: list[Subscriber] = []
    groups: dict[bytes, list[Subscriber]] = {}
    for slot in slots:
        if type(slot) is Leaf:
            plain.extend(slot.plain)
            if slot.queues:
                for q, members in slot.queues.items():
                    shadows = _shadowed(members) if slot.weighted else members
                    g = groups.get(q)
                    if g is None:
                        groups[q] = list(shadows)
                    else:
                        g.extend(shadows)
        else:
            queue: bytes | None = slot.queue
            if not queue:
                plain.append(slot)
            else:
                g = groups.get(queue)
                if g is None:
                    g = groups[queue] = []
                weight = weight_of(slot)
                if weight == 1:
                    g.append(slot)
                else:
                    g.extend([slot] * weight)
    if not plain and not groups:
        return EMPTY
    return _new(MatchResult, (tuple(plain), tuple(tuple(g) for g in groups.values()) if groups else ()))
