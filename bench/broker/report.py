"""Rendering of broker benchmark results: a text table and a PNG chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

NAMES = {
    "pub": "publish only",
    "pub-mix": "publish only, 2 subjects",
    "1-1": "1 -> 1",
    "1-1-mix": "1 -> 1, 2 subjects",
    "1-1-split": "1 -> 1 of 2 subjects",
    "1-4": "1 -> 4 fan-out",
    "1-4-mix": "1 -> 4, 2 subjects",
    "queue-4": "1 -> queue of 4",
    "4-4": "4 -> 4",
    "busy": "1 -> 1, 100k idle subs",
    "reqrep": "request/reply",
}


def _size(n: int) -> str:
    return f"{n // 1024} KiB" if n >= 1024 else f"{n} B"


def _value(row: dict[str, Any], kind: str) -> str:
    s = row[kind]
    if row["scenario"] == "reqrep":
        return f"{s['median']:.0f}/{s['p90']:.0f}/{s['p99']:.0f} µs"
    return f"{s['median'] / 1e6:.3f}M/s"


def _gen(ok: bool | None) -> str:
    return "n/a" if ok is None else "yes" if ok else "NO"


def render_table(r: dict[str, Any], header: bool = True) -> str:
    """Rows: median per side (rates in msgs/s delivered; request/reply p50/p90/p99), ratio, target."""
    lines = []
    if header:
        lines.append(
            f"broker benchmark {r['date']}  python {r['python']}  {r['machine']}  {r['nats_server']}  "
            f"medians of {r['reps']}"
        )
        lines.append(
            f"{'scenario':<24}{'size':>7}{'pynatsd':>19}{'nats-server':>19}{'ratio':>7}"
            f"{'target':>8}  {'gen ok':<7}lost"
        )
    for row in r["rows"]:
        target = row.get("target")
        if target is None:
            tgt = ""
        else:
            sign = "<=" if row["scenario"] == "reqrep" else ">="
            tgt = f"{sign}{target}{'' if row['target_met'] else '!'}"
        lost = ""
        if row["scenario"] != "reqrep":
            lost = f"{row['pynatsd']['lost']}/{row['nats-server']['lost']}"
        lines.append(
            f"{NAMES[row['scenario']]:<24}{_size(row['size']):>7}{_value(row, 'pynatsd'):>19}"
            f"{_value(row, 'nats-server'):>19}{row['ratio']:>7.2f}{tgt:>8}  "
            f"{_gen(row['generator_ok']):<7}{lost}"
        )
    if header:
        lines.append(
            "rates: msgs/s delivered to all subscribers (publish only: accepted); ratio = pynatsd /"
            " nats-server (request/reply: of p50 latency); gen ok = the generator has gone >= 1.1x"
            " nats-server's rate (with pynatsd, or against stand-in servers: ceilings below); '!' = target"
            " missed; lost = messages not delivered, pynatsd/nats-server"
        )
    if header and r.get("ceilings"):
        lines.append(
            "generator ceiling against stand-ins (msgs/s): "
            + ", ".join(
                f"{_size(int(size))}: publisher {c['pub'] / 1e6:.2f}M, subscriber {c['sub'] / 1e6:.2f}M"
                for size, c in r["ceilings"].items()
            )
        )
    m = r.get("memory")
    if header and m:
        lines.append("")
        lines.append(
            f"stalled subscriber: {m['messages']:,} x {_size(m['size'])} burst, 2 fast subscribers, "
            f"max_pending {m['max_pending'] / 2**20:.2f} MiB"
        )
        for kind in ("pynatsd", "nats-server"):
            s = m[kind]
            lines.append(
                f"  {kind:<12} RSS {s['rss_before'] / 2**20:6.1f} -> peak {s['rss_peak'] / 2**20:6.1f} MiB "
                f"(+{s['growth'] / 2**20:.1f} MiB), fast subscribers lost {s['fast_lost']}, "
                f"stalled one dropped: {'yes' if s['stalled_dropped'] else 'no'}"
            )
    return "\n".join(lines)


def render_chart(r: dict[str, Any], path: Path) -> None:
    """Two panels: ratio pynatsd/nats-server per scenario and size (with targets), absolute rates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in r["rows"] if row["scenario"] != "reqrep"]
    rr = [row for row in r["rows"] if row["scenario"] == "reqrep"]
    fig, axes = plt.subplots(1, 3, figsize=(18, 6), gridspec_kw={"width_ratios": [3, 3, 1.2]})
    labels = [f"{row['scenario']} {_size(row['size'])}" for row in rows]
    xs = range(len(rows))

    ax = axes[0]
    ax.bar(xs, [row["ratio"] for row in rows], color="#36c")
    for x, row in zip(xs, rows, strict=True):
        if row.get("target") is not None:
            ax.plot([x - 0.4, x + 0.4], [row["target"]] * 2, color="red")
    ax.axhline(1.0, color="#999", linestyle="--")
    ax.set_xticks(list(xs), labels, fontsize=8, rotation=90)
    ax.set_ylabel("pynatsd / nats-server (rate)")
    ax.set_title("throughput ratio (red: target)")

    ax = axes[1]
    w = 0.4
    ax.bar([x - w / 2 for x in xs], [row["pynatsd"]["median"] for row in rows], w, label="pynatsd")
    ax.bar([x + w / 2 for x in xs], [row["nats-server"]["median"] for row in rows], w, label="nats-server")
    ax.set_yscale("log")
    ax.set_xticks(list(xs), labels, fontsize=8, rotation=90)
    ax.set_ylabel("msgs/s (log)")
    ax.set_title("median rates")
    ax.legend()

    ax = axes[2]
    xr = range(len(rr))
    ax.bar([x - w / 2 for x in xr], [row["pynatsd"]["median"] for row in rr], w, label="pynatsd")
    ax.bar([x + w / 2 for x in xr], [row["nats-server"]["median"] for row in rr], w, label="nats-server")
    ax.set_xticks(list(xr), [_size(row["size"]) for row in rr])
    ax.set_ylabel("µs")
    ax.set_title("request/reply p50")
    ax.legend()
    fig.suptitle(f"pynatsd vs {r['nats_server']} — {r['date']} — {r['machine']}")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
