"""Rendering of broker benchmark results: a text table and a PNG chart."""

from __future__ import annotations

import re
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
    "i-1-1": "1 -> 1",
    "i-pub": "publish only",
    "i-1-4": "1 -> 4 fan-out",
    "i-queue-4": "1 -> queue of 4",
    "i-4-1": "4 -> 1",
    "i-4-4": "4 -> 4",
    "i-1-16": "1 -> 16 fan-out",
    "i-16-16": "16 -> 16",
    "i-join": "4 -> 1, publishers join the flood",
    "i-reqrep": "request/reply, 16 requesters",
    "i-mixed": "mixed workload",
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


def _rate(v: float) -> str:
    return f"{v / 1e6:.3f}M/s" if v >= 1e5 else f"{v / 1e3:.1f}k/s"


def probe_cell(lat: dict[str, float]) -> str:
    """p50/p99/max of a probe; "-" when no sample came back (all failed, or the row was too short)."""
    return f"{lat['p50']:.1f}/{lat['p99']:.1f}/{lat['max']:.1f} ({lat['n']})" if lat["n"] else "- (0)"


def _real_value(row: dict[str, Any], kind: str) -> str:
    s = row[kind]
    if row["scenario"] == "i-reqrep":
        return f"{_rate(s['median'])} {s['p50']:.0f}/{s['p99']:.0f} µs"
    if row["scenario"] == "i-mixed":
        return f"{_rate(s['median'])}; req {_rate(s['request_rate'])} {s['p50']:.0f}/{s['p99']:.0f} µs"
    return _rate(s["median"])


def _growth(side: dict[str, Any]) -> str:
    """Peak RSS over the RSS before the run, MiB ('-' for rows recorded before it was)."""
    return f"{side['rss_growth'] / 2**20:.1f}" if "rss_growth" in side else "-"


def _notes(row: dict[str, Any]) -> str:
    notes = [f"{label} {row[key]:.2f}x" for key, label in RATIO_NOTES if key in row]
    return ", ".join(notes)


RATIO_NOTES = (
    ("pub_rate_ratio", "publish"),
    ("request_rate_ratio", "requests"),
    ("p50_ratio", "p50"),
    ("p99_ratio", "p99"),
    ("rss_peak_ratio", "peak RSS"),
)


def _target(row: dict[str, Any], sign: str) -> str:
    if row.get("target") is None:
        return ""
    return f"{sign}{row['target']}{'' if row['target_met'] else ' !'}"


REAL_LEGEND = re.sub(
    r"\s+",
    " ",
    """Rates: msgs/s delivered to all subscribers, first PUB -> last MSG (publish only: accepted, until
    the PONG after the last); request/reply: round trips/s and p50/p99. ratio = pynatsd / nats-server of
    the rate; other ratios: publish rate, request rate, p50 and p99 latency, the server's peak RSS during
    the run (median of the runs; VmHWM reset before each). Probes, sampled every 50 ms
    while the row runs: a new client's connect -> PONG and an idle client's PING -> PONG, ms p50/p99/max
    pooled over the runs (samples; started on the clock, answered or not). failures
    pynatsd/nats-server: probe connects + probe PINGs without a PONG in 2 s + publishers whose connect
    failed (2 s, nats.go's default). gen ok: the faster server went >= 1.1x the slower one's rate with the
    same generator, so the slower figure is the server's, not the generator's; n/a for request/reply,
    mixed and joining rows. lost: deliveries owed but not made. peak MiB over idle: the server's VmHWM
    during the run less its VmRSS just before it (median of the runs; both servers run through all rows),
    pynatsd/nats-server.""",
)


def render_real(r: dict[str, Any], header: bool = True) -> str:
    """The realistic rows as a markdown table: medians per side, ratio, probes (ms), failures."""
    lines = []
    if header:
        lines += [
            f"### Realistic rows: {r['subjects']:,} interleaved subjects ({r['date']}, {r['machine']}, "
            f"{r['nats_server']}, medians of {r['real_reps']})",
            "",
            *(f"- generator `{g}`: {name}" for g, name in r["generators"].items()),
            "",
            "| row | size | gen | pynatsd | nats-server | ratio | target | gen ok | lost | peak MiB over idle"
            " | connect ms pynatsd | connect ms nats-server | PING ms pynatsd | PING ms nats-server"
            " | failures | other ratios |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    for row in r["realistic"]:
        a, b = row["pynatsd"], row["nats-server"]
        fails = "/".join(
            f"{s['latency']['connect']['fail']}+{s['latency']['ping']['fail']}+{s['connect_failures']}"
            for s in (a, b)
        )
        lines.append(
            f"| {NAMES[row['scenario']]} | {_size(row['size'])} | {row['generator']}"
            f" | {_real_value(row, 'pynatsd')} | {_real_value(row, 'nats-server')}"
            f" | {row['ratio']:.2f} | {_target(row, '>=')}"
            f" | {_gen(row['generator_ok'])} | {a['lost']}/{b['lost']} | {_growth(a)}/{_growth(b)}"
            f" | {probe_cell(a['latency']['connect'])} | {probe_cell(b['latency']['connect'])}"
            f" | {probe_cell(a['latency']['ping'])} | {probe_cell(b['latency']['ping'])}"
            f" | {fails} | {_notes(row)} |"
        )
    if header:
        lines += [
            "",
            REAL_LEGEND,
        ]
    return "\n".join(lines)


def _p99s(row: dict[str, Any], probe: str) -> str:
    """p99 of a probe, pynatsd/nats-server (rows recorded before the probes existed have none)."""
    sides = [row[kind].get("latency", {}).get(probe) for kind in ("pynatsd", "nats-server")]
    return "/".join(f"{s['p99']:.1f}" if s and s["n"] else "-" for s in sides)


def render_table(r: dict[str, Any], header: bool = True) -> str:
    """Single-subject rows as a markdown table: median per side (rates in msgs/s delivered;
    request/reply p50/p90/p99), ratio, target."""
    lines = []
    if header:
        lines += [
            f"### Single-subject rows ({r['date']}, {r['machine']}, {r['nats_server']}, raw generator,"
            f" medians of {r['reps']})",
            "",
            "| scenario | size | pynatsd | nats-server | ratio | target | gen ok | lost | connect p99 ms"
            " | PING p99 ms |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
    for row in r["rows"]:
        sign = "<=" if row["scenario"] == "reqrep" else ">="
        lost = ""
        if row["scenario"] != "reqrep":
            lost = f"{row['pynatsd']['lost']}/{row['nats-server']['lost']}"
        lines.append(
            f"| {NAMES[row['scenario']]} | {_size(row['size'])} | {_value(row, 'pynatsd')}"
            f" | {_value(row, 'nats-server')} | {row['ratio']:.2f} | {_target(row, sign)}"
            f" | {_gen(row['generator_ok'])} | {lost} | {_p99s(row, 'connect')} | {_p99s(row, 'ping')} |"
        )
    if header:
        lines += [
            "",
            "rates: msgs/s delivered to all subscribers (publish only: accepted); ratio = pynatsd /"
            " nats-server (request/reply: of p50 latency); gen ok = the generator has gone >= 1.1x"
            " nats-server's rate (with pynatsd, or against stand-in servers: ceilings below); '!' = target"
            " missed; lost = messages not delivered, pynatsd/nats-server; connect/PING p99: the probes"
            " (as in the realistic rows), pynatsd/nats-server",
        ]
    if header and r.get("ceilings"):
        lines.append(
            "\ngenerator ceiling against stand-ins (msgs/s): "
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
                f"- {kind}: RSS {s['rss_before'] / 2**20:.1f} -> peak {s['rss_peak'] / 2**20:.1f} MiB "
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
    fig, grid = plt.subplots(2, 3, figsize=(18, 12), gridspec_kw={"width_ratios": [3, 3, 2]})
    _real_panels(r.get("realistic", []), grid[0], plt)
    axes = grid[1]
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
    ax.set_title("single-subject rows: throughput ratio (red: target)")

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


def _real_panels(rows: list[dict[str, Any]], axes: Any, plt: Any) -> None:
    """Top row: the realistic rows' ratios per generator, and the p99 of the probes per server."""
    labels = sorted({(row["scenario"], row["size"]) for row in rows}, key=lambda k: _order(rows, k))
    xs = range(len(labels))
    index = {k: i for i, k in enumerate(labels)}
    ticks = [f"{name} {_size(size)}" for name, size in labels]
    w = 0.4
    ax = axes[0]
    for j, gen in enumerate(sorted({row["generator"] for row in rows})):
        mine = [row for row in rows if row["generator"] == gen]
        ax.bar(
            [index[(row["scenario"], row["size"])] + (j - 0.5) * w for row in mine],
            [row["ratio"] for row in mine],
            w,
            label=gen,
        )
    ax.axhline(1.0, color="#999", linestyle="--")
    ax.set_xticks(list(xs), ticks, fontsize=8, rotation=90)
    ax.set_ylabel("pynatsd / nats-server (rate)")
    ax.set_title("realistic rows: throughput ratio per generator")
    ax.legend()
    for ax, probe in zip(axes[1:], ("connect", "ping"), strict=True):
        for j, kind in enumerate(("pynatsd", "nats-server")):
            worst: dict[int, float] = {}
            for row in rows:
                i = index[(row["scenario"], row["size"])]
                worst[i] = max(worst.get(i, 0.0), row[kind]["latency"][probe]["p99"])
            ax.bar([i + (j - 0.5) * w for i in worst], list(worst.values()), w, label=kind)
        ax.set_yscale("log")
        ax.set_xticks(list(xs), ticks, fontsize=7, rotation=90)
        ax.set_ylabel("ms (log)")
        ax.set_title(
            f"{'new client connect -> PONG' if probe == 'connect' else 'idle client PING -> PONG'} p99"
        )
        ax.legend()


def _order(rows: list[dict[str, Any]], key: tuple[str, int]) -> int:
    return next(i for i, row in enumerate(rows) if (row["scenario"], row["size"]) == key)
