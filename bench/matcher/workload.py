"""Deterministic subscription workloads for the matcher benchmarks."""

from __future__ import annotations

import random
from dataclasses import dataclass

WORDS = [b"w%03d" % i for i in range(1000)]
"""Vocabulary of the random 5-word subjects (1,000 words, as 'Fast Topic Matching' style workloads)."""


class Sub:
    """A subscription shaped like the broker's: slots, identity hash."""

    __slots__ = ("queue", "subject")

    def __init__(self, subject: bytes, queue: bytes | None = None) -> None:
        self.subject = subject
        self.queue = queue


@dataclass
class Workload:
    subs: list[Sub]
    """Subscriptions in insertion order."""
    lookups: list[bytes]
    """Literal subjects that each match at least one subscription."""


def random_subject(rng: random.Random, wildcard_ratio: float = 0.1) -> tuple[bytes, bytes]:
    """A 5-word subject (maybe with a `*` or a trailing `>` after the first word) and a literal it matches."""
    tokens = [rng.choice(WORDS) for _ in range(5)]
    literal = b".".join(tokens)
    if rng.random() < wildcard_ratio:
        pos = rng.randrange(1, 5)
        if rng.random() < 0.5:
            tokens[pos] = b"*"
        else:
            tokens = [*tokens[:pos], b">"]
    return b".".join(tokens), literal


def random_workload(n: int, seed: int = 1, wildcard_ratio: float = 0.1, n_lookups: int = 1000) -> Workload:
    """n random 5-word subscriptions (~10% wildcards) and lookups drawn from what they match."""
    rng = random.Random(seed)
    subs: list[Sub] = []
    literals: list[bytes] = []
    for _ in range(n):
        subject, literal = random_subject(rng, wildcard_ratio)
        subs.append(Sub(subject))
        literals.append(literal)
    lookups = [literals[rng.randrange(n)] for _ in range(n_lookups)] if n else []
    return Workload(subs, lookups)


def distinct_literal_subs(n: int, prefix: bytes = b"bench.sub") -> list[Sub]:
    """n subscriptions on n distinct literal subjects (the end-to-end memory workload's shape)."""
    return [Sub(b"%s.%d" % (prefix, i)) for i in range(n)]
