"""Exact counts of small integer observations, cheap enough for the per-message path."""

from __future__ import annotations


class HistogramCounts:
    """`counts[v]` = how often `v` was observed; values ≥ `cap` share the last slot.

    The hot path increments `counts[...]` inline (no method call); buckets are summed only when scraped.
    """

    __slots__ = ("cap", "counts")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.counts = [0] * (cap + 1)

    def observe(self, value: int) -> None:
        self.counts[value if value < self.cap else self.cap] += 1

    @property
    def total(self) -> int:
        """Sum of the observed values (the capped slot counted at the cap)."""
        return sum(value * count for value, count in enumerate(self.counts))

    @property
    def count(self) -> int:
        return sum(self.counts)

    def buckets(self, bounds: tuple[int, ...]) -> list[tuple[str, float]]:
        """Cumulative Prometheus buckets `(le, count)` for the given upper bounds, then +Inf."""
        out: list[tuple[str, float]] = []
        cumulative = 0
        start = 0
        for bound in bounds:
            top = min(bound, self.cap - 1)
            cumulative += sum(self.counts[start : top + 1])
            start = max(start, top + 1)
            out.append((str(float(bound)), float(cumulative)))
        out.append(("+Inf", float(self.count)))
        return out
