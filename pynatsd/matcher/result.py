"""Result and statistics types returned by the subscription index."""

from __future__ import annotations

from typing import Generic, NamedTuple, Never, Protocol, TypeVar


class Subscriber(Protocol):
    """What the index needs from a subscription; it is hashed by identity."""

    @property
    def subject(self) -> bytes: ...

    @property
    def queue(self) -> bytes | None: ...


S = TypeVar("S", bound=Subscriber)
S_co = TypeVar("S_co", bound=Subscriber, covariant=True)


class MatchResult(NamedTuple, Generic[S_co]):
    """Subscriptions matching one published subject. Shared and cached: callers never mutate it."""

    plain: tuple[S_co, ...]
    """Every matching subscription without a queue group."""
    groups: tuple[tuple[S_co, ...], ...]
    """One tuple per queue name: the matching members of that group (deliver to one of each)."""


class SublistStats(NamedTuple):
    """Index counters with nats-server's /subsz meaning (fan-out is measured over cached results)."""

    num_subscriptions: int
    num_cache: int
    num_inserts: int
    num_removes: int
    num_matches: int
    cache_hit_rate: float
    max_fanout: int
    avg_fanout: float


EMPTY: MatchResult[Never] = MatchResult((), ())
"""No subscribers: a MatchResult of every subscription type (it is covariant, and holds none)."""


def combine_stats(parts: list[SublistStats]) -> SublistStats:
    """Totals over several indexes (one per account), as nats-server's /subsz sums its accounts."""
    matches = sum(p.num_matches for p in parts)
    hits = sum(p.num_matches * p.cache_hit_rate for p in parts)
    cached = sum(p.num_cache for p in parts)
    fanout = sum(p.avg_fanout * p.num_cache for p in parts)
    return SublistStats(
        num_subscriptions=sum(p.num_subscriptions for p in parts),
        num_cache=cached,
        num_inserts=sum(p.num_inserts for p in parts),
        num_removes=sum(p.num_removes for p in parts),
        num_matches=matches,
        cache_hit_rate=hits / matches if matches else 0.0,
        max_fanout=max((p.max_fanout for p in parts), default=0),
        avg_fanout=fanout / cached if cached else 0.0,
    )
