"""Timing and memory primitives: per-op nanoseconds over a batch, medians of repeats, RSS and tracemalloc."""

from __future__ import annotations

import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable, Iterable
from typing import Any


def per_op(fn: Callable[[Any], Any], items: Iterable[Any]) -> float:
    """Nanoseconds per call of ``fn`` over ``items`` (one batch, GC paused)."""
    items = list(items)
    gc_was = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter_ns()
        for x in items:
            fn(x)
        t1 = time.perf_counter_ns()
    finally:
        if gc_was:
            gc.enable()
    return (t1 - t0) / max(1, len(items))


def median_of(runs: int, measure: Callable[[], float]) -> float:
    """Median of ``runs`` calls of a measurement."""
    return statistics.median(measure() for _ in range(runs))


def rss_bytes() -> int:
    """This process's resident set size from /proc (VmRSS)."""
    return proc_rss_bytes("self")


def proc_rss_bytes(pid: int | str) -> int:
    """A process's VmRSS in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def traced_bytes(build: Callable[[], Any]) -> tuple[int, Any]:
    """Bytes still allocated after ``build()`` (its result kept alive), measured by tracemalloc."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        obj = build()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return after - before, obj
