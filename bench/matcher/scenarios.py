"""The matcher benchmark scenarios (issue 3): seed table, scale, churn, fan-out, high cardinality."""

from __future__ import annotations

import gc
import json
import random
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from bench.matcher.baselines import NaiveScan, PyTrieIndex
from bench.matcher.measure import median_of, per_op, rss_bytes, traced_bytes
from bench.matcher.workload import Sub, distinct_literal_subs, random_subject, random_workload
from pynatsd.matcher import Sublist

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def _fill(index: Any, subs: list[Sub]) -> Any:
    for s in subs:
        index.insert(s)
    return index


def seed_table(runs: int, n: int = 1000) -> list[dict[str, Any]]:
    """Subscribe/unsubscribe/lookup ns/op, cold (empty) and hot (n subs), per implementation."""
    base = random_workload(n, seed=1)
    extra = random_workload(n, seed=2).subs
    impls: dict[str, Any] = {
        "naive hashmap scan": lambda: NaiveScan(),
        "pytrie trie": lambda: PyTrieIndex(),
        "pynatsd Sublist": lambda: Sublist(cache=False),
    }
    rows = []
    for name, make in impls.items():
        slow = name == "naive hashmap scan"

        def cold_sub(make: Any = make) -> float:
            return per_op(make().insert, base.subs)

        def cold_unsub(make: Any = make) -> float:
            idx = _fill(make(), base.subs)
            return per_op(idx.remove, base.subs)

        def cold_lookup(make: Any = make) -> float:
            return per_op(make().match, base.lookups)

        hot = _fill(make(), base.subs)

        def hot_sub_unsub(hot: Any = hot) -> tuple[float, float]:
            s = per_op(hot.insert, extra)
            u = per_op(hot.remove, extra)
            return s, u

        lookups = base.lookups[:100] if slow else base.lookups
        pairs = [hot_sub_unsub() for _ in range(runs)]
        row = {
            "impl": name,
            "cold_subscribe_ns": median_of(runs, cold_sub),
            "cold_unsubscribe_ns": median_of(runs, cold_unsub),
            "cold_lookup_ns": median_of(runs, cold_lookup),
            "hot_subscribe_ns": sorted(p[0] for p in pairs)[runs // 2],
            "hot_unsubscribe_ns": sorted(p[1] for p in pairs)[runs // 2],
            "hot_lookup_ns": median_of(runs, partial(per_op, hot.match, lookups)),
        }
        if name == "pynatsd Sublist":
            cached = _fill(Sublist(cache=True), base.subs)
            per_op(cached.match, base.lookups)  # warm: 1,000 distinct subjects fit the cache
            row["hot_lookup_cached_ns"] = median_of(runs, partial(per_op, cached.match, base.lookups))
            row["wildcard_subscribe_full_cache_ns"] = _wildcard_sub_full_cache(cached, base.lookups)
        rows.append(row)
    return rows


def _wildcard_sub_full_cache(sl: Sublist[Sub], lookups: list[bytes], n: int = 101) -> float:
    """Median ns of one wildcard subscribe landing on a full cache (which it empties)."""
    times = []
    for i in range(n):
        per_op(sl.match, lookups)  # refill
        sub = Sub(b"zz.*.%d" % i)
        t0 = time.perf_counter_ns()
        sl.insert(sub)
        times.append(time.perf_counter_ns() - t0)
        sl.remove(sub)
    return float(statistics.median(times))


def scale(sizes: list[int], runs: int, rss: bool = True) -> list[dict[str, Any]]:
    """Lookup (uncached, cached), subscribe, unsubscribe and bytes/sub at each size."""
    rows = []
    for n in sizes:
        wl = random_workload(n, seed=3)
        fresh = random_workload(1000, seed=4).subs
        traced, sl = traced_bytes(partial(_fill, Sublist(cache=False), wl.subs))
        uncached = median_of(runs, partial(per_op, sl.match, wl.lookups))
        sub_unsub = [_sub_then_unsub(sl, fresh) for _ in range(runs)]
        nwild = sl._nwild
        del sl
        gc.collect()
        cached = _fill(Sublist(cache=True), wl.subs)
        per_op(cached.match, wl.lookups)  # warm: 1,000 distinct subjects fit the cache
        row = {
            "subs": n,
            "lookup_uncached_ns": uncached,
            "lookup_cached_ns": median_of(runs, partial(per_op, cached.match, wl.lookups)),
            "subscribe_ns": sorted(p[0] for p in sub_unsub)[runs // 2],
            "unsubscribe_ns": sorted(p[1] for p in sub_unsub)[runs // 2],
            "bytes_per_sub_tracemalloc": traced / n,
            "wildcard_subs": nwild,
        }
        del cached
        gc.collect()
        if rss:
            row["bytes_per_sub_rss"] = _rss_in_subprocess(n)
        rows.append(row)
    return rows


def _sub_then_unsub(sl: Sublist[Sub], fresh: list[Sub]) -> tuple[float, float]:
    return per_op(sl.insert, fresh), per_op(sl.remove, fresh)


def _rss_in_subprocess(n: int, kind: str = "random") -> float:
    out = subprocess.run(
        [sys.executable, "-m", "bench.matcher.scenarios", "rss", str(n), kind],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return float(json.loads(out.stdout)["bytes_per_sub"])


def rss_child(n: int, kind: str) -> None:
    """In a fresh process: RSS growth of building an n-sub index (subscriptions created beforehand)."""
    subs = random_workload(n, seed=3, n_lookups=0).subs if kind == "random" else distinct_literal_subs(n)
    gc.collect()
    before = rss_bytes()
    sl = _fill(Sublist(cache=False), subs)
    gc.collect()
    after = rss_bytes()
    assert len(sl) == n
    print(json.dumps({"subs": n, "bytes_per_sub": (after - before) / n}))


def literal_memory(n: int) -> dict[str, Any]:
    """Index bytes/sub for n distinct literal subjects (the end-to-end workload's shape)."""
    subs = distinct_literal_subs(n)
    traced, sl = traced_bytes(lambda: _fill(Sublist(cache=False), subs))
    assert len(sl.match(subs[-1].subject).plain) == 1
    del sl
    gc.collect()
    return {
        "subs": n,
        "bytes_per_sub_tracemalloc": traced / n,
        "bytes_per_sub_rss": _rss_in_subprocess(n, "literal"),
    }


def churn(runs: int, deep: int = 10_000, batch: int = 1000) -> dict[str, Any]:
    """Subscribe+unsubscribe cost of the 1st vs the deep-th subscriber on one filter (cache on, warm)."""
    subject = b"churn.one.filter"

    def measure(present: int) -> tuple[float, float]:
        sl: Sublist[Sub] = Sublist(cache=True)
        _fill(sl, [Sub(subject) for _ in range(present)])
        sl.match(subject)
        fresh = [Sub(subject) for _ in range(batch)]

        def pair(s: Sub) -> None:
            sl.insert(s)
            sl.remove(s)

        ins = median_of(runs, lambda: per_op(pair, fresh))
        queued = [Sub(subject, b"q") for _ in range(batch)]
        _fill(sl, [Sub(subject, b"q") for _ in range(present)])
        qpair = median_of(runs, lambda: per_op(pair, queued))
        return ins, qpair

    first, qfirst = measure(0)
    nth, qnth = measure(deep - 1)
    return {
        "first_pair_ns": first,
        "nth_pair_ns": nth,
        "n": deep,
        "ratio": nth / first,
        "queue_first_pair_ns": qfirst,
        "queue_nth_pair_ns": qnth,
        "queue_ratio": qnth / qfirst,
    }


def fanout(runs: int, n: int = 10_000) -> dict[str, Any]:
    """Collecting n matching subscribers: on one filter, and spread over a literal, `*` and `>` filter."""
    one: Sublist[Sub] = _fill(Sublist(cache=False), [Sub(b"fan.out") for _ in range(n)])
    pats = [b"fan.out", b"fan.*", b"fan.>"]
    three: Sublist[Sub] = _fill(Sublist(cache=False), [Sub(pats[i % 3]) for i in range(n)])
    q3: Sublist[Sub] = _fill(Sublist(cache=False), [Sub(pats[i % 3], b"q%d" % (i % 4)) for i in range(n)])
    assert len(one.match(b"fan.out").plain) == n and len(three.match(b"fan.out").plain) == n
    subjects = [b"fan.out"] * 20
    return {
        "n": n,
        "one_filter_ns": median_of(runs, lambda: per_op(one.match, subjects)),
        "three_filters_ns": median_of(runs, lambda: per_op(three.match, subjects)),
        "three_filters_4_queues_ns": median_of(runs, lambda: per_op(q3.match, subjects)),
    }


def high_cardinality(runs: int, distinct: int = 100_000, n_subs: int = 1000) -> dict[str, Any]:
    """Lookups cycling through `distinct` subjects: cache on vs off, alternated, medians."""
    wl = random_workload(n_subs, seed=5)
    rng = random.Random(6)
    subjects = list({random_subject(rng, 0.0)[1] for _ in range(distinct)})
    # Every 10th lookup hits a subscribed subject, so some have matches.
    for i in range(0, len(subjects), 10):
        subjects[i] = wl.lookups[i % len(wl.lookups)] + b".x%d" % i if i % 20 else wl.lookups[i % 1000]
    on: Sublist[Sub] = _fill(Sublist(cache=True), wl.subs)
    off: Sublist[Sub] = _fill(Sublist(cache=False), wl.subs)
    per_op(on.match, subjects)  # warm both
    per_op(off.match, subjects)
    t_on, t_off = [], []
    for _ in range(runs):
        t_off.append(per_op(off.match, subjects))
        t_on.append(per_op(on.match, subjects))
    t_on.sort()
    t_off.sort()
    st = on.stats()
    return {
        "distinct_subjects": len(subjects),
        "cache_on_ns": t_on[runs // 2],
        "cache_off_ns": t_off[runs // 2],
        "ratio_on_off": t_on[runs // 2] / t_off[runs // 2],
        "cache_hit_rate": st.cache_hit_rate,
        "cache_entries": st.num_cache,
    }


if __name__ == "__main__":
    if sys.argv[1] == "rss":
        rss_child(int(sys.argv[2]), sys.argv[3])
