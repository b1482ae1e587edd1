"""Result and statistics types returned by the subscription index."""

from __future__ import annotations

from typing import Generic, NamedTuple, Protocol, TypeVar


class Subscriber(Protocol):
    """What the index needs from a subscription; it is hashed by identity."""

    @property
    def subject(self) -> bytes: ...

    @property
    def queue(self) -> bytes | None: ...


S = TypeVar("S", bound=Subscriber)


class MatchResult(NamedTuple, Generic[S]):
    """Subscriptions matching one published subject. Shared and cached: callers never mutate it."""

    plain: tuple[S, ...]
    """Every matching subscription without a queue group."""
    groups: tuple[tuple[S, ...], ...]
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


EMPTY: MatchResult = MatchResult((), ())
