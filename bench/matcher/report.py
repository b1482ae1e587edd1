"""Rendering of matcher benchmark results: a text table and a PNG chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _ns(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 100_000:
        return f"{x / 1000:,.0f} µs"
    return f"{x:,.0f}"


def render_table(r: dict[str, Any]) -> str:
    """The benchmark results as aligned text tables (ns/op unless stated)."""
    lines = [f"matcher benchmark {r['date']}  python {r['python']}  {r['machine']}  medians of {r['runs']}"]
    lines.append("")
    n = r.get("seed_subs", 1000)
    lines.append(f"seed table: {n:,} random 5-word subscriptions, ~10% wildcards (ns/op)")
    hdr = ("impl", "sub cold", "unsub cold", "lookup cold", "sub hot", "unsub hot", "lookup hot", "cached")
    lines.append("{:<20}{:>10}{:>11}{:>12}{:>10}{:>11}{:>12}{:>9}".format(*hdr))
    for row in r["seed"]:
        lines.append(
            "{:<20}{:>10}{:>11}{:>12}{:>10}{:>11}{:>12}{:>9}".format(
                row["impl"],
                _ns(row["cold_subscribe_ns"]),
                _ns(row["cold_unsubscribe_ns"]),
                _ns(row["cold_lookup_ns"]),
                _ns(row["hot_subscribe_ns"]),
                _ns(row["hot_unsubscribe_ns"]),
                _ns(row["hot_lookup_ns"]),
                _ns(row.get("hot_lookup_cached_ns")),
            )
        )
    ours = r["seed"][-1]
    if "wildcard_subscribe_full_cache_ns" in ours:
        lines.append(
            f"a wildcard subscribe landing on a full result cache (it empties it): "
            f"{_ns(ours['wildcard_subscribe_full_cache_ns'])} ns"
        )
    lines.append("")
    lines.append("scale (random 5-word subs, ~10% wildcards)")
    lines.append(
        "{:>10}{:>11}{:>9}{:>9}{:>9}{:>14}{:>10}".format(
            "subs", "uncached", "cached", "sub", "unsub", "B/sub tracem", "B/sub RSS"
        )
    )
    for row in r["scale"]:
        rss = row.get("bytes_per_sub_rss")
        lines.append(
            "{:>10,}{:>11}{:>9}{:>9}{:>9}{:>14.0f}{:>10}".format(
                row["subs"],
                _ns(row["lookup_uncached_ns"]),
                _ns(row["lookup_cached_ns"]),
                _ns(row["subscribe_ns"]),
                _ns(row["unsubscribe_ns"]),
                row["bytes_per_sub_tracemalloc"],
                "-" if rss is None else f"{rss:.0f}",
            )
        )
    lm = r["literal_memory"]
    lines.append(
        f"{lm['subs']:,} distinct literal subjects: {lm['bytes_per_sub_tracemalloc']:.0f} B/sub "
        f"(tracemalloc), {lm['bytes_per_sub_rss']:.0f} B/sub (RSS)"
    )
    c = r["churn"]
    lines.append("")
    lines.append(
        f"churn (subscribe+unsubscribe pair on one filter): 1st {_ns(c['first_pair_ns'])} ns, "
        f"{c['n']:,}th {_ns(c['nth_pair_ns'])} ns, ratio {c['ratio']:.2f}; queue group: "
        f"{_ns(c['queue_first_pair_ns'])} vs {_ns(c['queue_nth_pair_ns'])} ns, ratio {c['queue_ratio']:.2f}"
    )
    f = r["fanout"]
    lines.append(
        f"fan-out (collect {f['n']:,} subs, uncached): one filter {_ns(f['one_filter_ns'])} ns, "
        f"literal+*+> {_ns(f['three_filters_ns'])} ns, same with 4 queue groups "
        f"{_ns(f['three_filters_4_queues_ns'])} ns"
    )
    h = r["high_cardinality"]
    lines.append(
        f"high cardinality ({h['distinct_subjects']:,} distinct subjects): "
        f"cache on {_ns(h['cache_on_ns'])} ns, off {_ns(h['cache_off_ns'])} ns, "
        f"on/off {h['ratio_on_off']:.3f}, hit rate {h['cache_hit_rate']:.3f}"
    )
    e = r.get("e2e_rss")
    if e:
        lines.append("")
        lines.append(
            f"end to end ({e['subs']:,} distinct-subject SUBs over the wire, RSS growth, median of "
            f"{e['runs']}): pynatsd {e['pynatsd_bytes_per_sub']:.0f} B/sub, nats-server "
            f"{e['nats_server_bytes_per_sub']:.0f} B/sub ({e['nats_server_version']}), ratio {e['ratio']:.2f}"
        )
    return "\n".join(lines)


def render_chart(r: dict[str, Any], path: Path) -> None:
    """A four-panel PNG: seed lookups, scale lookups, memory per sub, cache on/off and churn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    ax = axes[0][0]
    names = [row["impl"] for row in r["seed"]]
    ax.bar(names, [row["hot_lookup_ns"] for row in r["seed"]], color=["#999", "#c93", "#36c"])
    ax.set_yscale("log")
    ax.set_ylabel("ns per lookup (log)")
    ax.set_title("hot lookup, 1,000 subs (uncached)")

    ax = axes[0][1]
    sizes = [row["subs"] for row in r["scale"]]
    for key, label in [
        ("lookup_uncached_ns", "lookup uncached"),
        ("lookup_cached_ns", "lookup cached"),
        ("subscribe_ns", "subscribe"),
        ("unsubscribe_ns", "unsubscribe"),
    ]:
        ax.plot(sizes, [row[key] for row in r["scale"]], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("subscriptions")
    ax.set_ylabel("ns/op")
    ax.set_title("scale")
    ax.legend()

    ax = axes[1][0]
    ax.plot(sizes, [row["bytes_per_sub_tracemalloc"] for row in r["scale"]], marker="o", label="tracemalloc")
    if all("bytes_per_sub_rss" in row for row in r["scale"]):
        ax.plot(sizes, [row["bytes_per_sub_rss"] for row in r["scale"]], marker="s", label="RSS")
    ax.axhline(250, color="red", linestyle="--", label="target 250 B")
    ax.set_xscale("log")
    ax.set_ylabel("index bytes per subscription")
    ax.set_title("memory")
    ax.legend()

    ax = axes[1][1]
    h, c = r["high_cardinality"], r["churn"]
    labels = ["100k subj\ncache off", "100k subj\ncache on", "churn\n1st", f"churn\n{c['n']:,}th"]
    ax.bar(
        labels,
        [h["cache_off_ns"], h["cache_on_ns"], c["first_pair_ns"], c["nth_pair_ns"]],
        color=["#999", "#36c", "#999", "#36c"],
    )
    ax.set_ylabel("ns/op")
    ax.set_title("high cardinality and churn")
    fig.suptitle(f"pynatsd matcher — {r['date']} — python {r['python']}")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
