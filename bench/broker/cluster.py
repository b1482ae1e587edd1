"""Cross-node rows: a publisher on node A, subscribers on node B of a two-node cluster; a pynatsd-only
cluster against a nats-server-only one in the same run, alternating A B A B, medians and their ratio.

python bench/broker/cluster.py [--rows x-1-1,x-1-4] [--sizes 16,1024] [--reps 3] [--scale 1.0] [--smoke]

Rows: x-1-1 (one subscriber: every message crosses the route once) and x-1-4 (fan-out: four subscribers
on B, one copy over the route, four deliveries on B). Rates are deliveries per second end to end (first PUB
on A to last MSG on B), measured by the raw-protocol generator of `make bench`. Before each run the
subscribers' interest must have reached node A (its /routez lists the subject), so no message is published
into a cluster that would drop it. Writes bench/results/cluster.{md,json,png}.

With --leaf (`make bench-leaf`): the same rows across a leaf node link instead, the publisher on a leaf
and the subscribers on its hub (a pynatsd pair against a nats-server pair), each run once the leaf's /leafz
lists the subscribers' interest. Writes bench/results/leaf.{md,json,png}.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.broker import scenarios  # noqa: E402
from bench.output import write_results  # noqa: E402
from tests.cluster.harness import Cluster, running_cluster, wait_until  # noqa: E402
from tests.servers import ServerProcess, free_port, start_server  # noqa: E402

KINDS = ("pynatsd", "nats-server")
ROWS = {"x-1-1": 1, "x-1-4": 4}  # row -> subscribers on node B
BASE = {16: 200_000, 128: 150_000, 1024: 60_000}  # messages per run at --scale 1


@dataclass
class Link:
    """Where a run publishes (node A, or the leaf) and subscribes (node B, or the hub), and how to wait
    until the subscribers' interest has reached the publishers' side, or has left it."""

    pub_port: int
    sub_port: int
    wait_interest: Callable[[], None]
    wait_no_interest: Callable[[], None]


@contextmanager
def two_node_clusters(workdir: Path) -> Iterator[dict[str, Link]]:
    with ExitStack() as stack:
        links = {}
        for kind in KINDS:
            cluster = stack.enter_context(running_cluster((kind, kind), workdir / kind))
            links[kind] = Link(
                cluster[0].port,
                cluster[1].port,
                interest_at_a(cluster),
                lambda c=cluster: c.wait_no_interest(scenarios.SUBJECT, [c[0]]),
            )
        yield links


def interest_at_a(cluster: Cluster) -> Callable[[], None]:
    """Waits until node A has node B's interest in the bench subject."""
    return lambda: cluster.wait_interest(scenarios.SUBJECT, [cluster[0]], [cluster[1]])


@contextmanager
def leaf_pairs(workdir: Path) -> Iterator[dict[str, Link]]:
    """A hub and a leaf dialing it (account $G) of each kind."""
    with ExitStack() as stack:
        links = {}
        for kind in KINDS:
            leaf_port = free_port()
            hub_conf, leaf_conf = workdir / f"{kind}-hub.conf", workdir / f"{kind}-leaf.conf"
            hub_conf.write_text(f"leafnodes {{ listen: 127.0.0.1:{leaf_port} }}\n")
            leaf_conf.write_text(
                f'leafnodes {{ remotes [ {{ url: "nats-leaf://127.0.0.1:{leaf_port}" }} ] }}\n'
            )
            hub = _started(stack, kind, hub_conf)
            leaf = _started(stack, kind, leaf_conf)
            links[kind] = Link(
                leaf.port,
                hub.port,
                lambda leaf=leaf: _wait_leaf_interest(leaf, True),
                lambda leaf=leaf: _wait_leaf_interest(leaf, False),
            )
        yield links


def _started(stack: ExitStack, kind: str, conf: Path) -> ServerProcess:
    server = start_server(kind, ["-c", str(conf)], http_port=free_port())
    stack.callback(server.stop)
    return server


def _wait_leaf_interest(leaf: ServerProcess, present: bool) -> None:
    """Until the leaf's /leafz lists (or no longer lists) the hub's interest in the bench subject."""

    def known() -> bool:
        url = f"http://127.0.0.1:{leaf.http_port}/leafz?subs=1"
        with urllib.request.urlopen(url, timeout=5) as response:
            leafs = json.load(response)["leafs"]
        listed = any(scenarios.SUBJECT in entry.get("subscriptions_list", []) for entry in leafs)
        return listed == present

    wait_until(known, 30, lambda: f"the leaf's interest in {scenarios.SUBJECT} never became {present}")


def measure(link: Link, subs: int, size: int, n: int) -> dict[str, Any]:
    # The previous run's subscribers are gone; until A has dropped their interest, it could pass for
    # the new subscribers' (whose RS+ would follow the old RS-, and messages sent between be lost).
    link.wait_no_interest()
    return scenarios.pubsub(
        link.pub_port, 1, subs, size, n, sub_port=link.sub_port, subscribed=link.wait_interest
    )


def row_for(name: str, size: int, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    row: dict[str, Any] = {"scenario": name, "size": size}
    for kind, got in runs.items():
        lossless = all(r["delivered"] == r["expected"] for r in got)
        row[kind] = {
            "median": statistics.median(r["rate"] for r in got),
            "runs": [round(r["rate"]) for r in got],
            "lossless": lossless,
        }
    row["ratio"] = row["pynatsd"]["median"] / row["nats-server"]["median"]
    return row


def render_table(results: dict[str, Any], header: bool = True) -> str:
    lines = []
    if header:
        lines += [
            f"{results['title']} ({results['date']}, {results['machine']},"
            f" nats-server {results['nats_server']},"
            f" {results['reps']} reps per side, medians; deliveries/s, {results['where']})",
            "",
            "| row | size | pynatsd msgs/s | nats-server msgs/s | ratio | lossless (py / go) |",
            "|---|---|---|---|---|---|",
        ]
    for row in results["rows"]:
        py, go = row["pynatsd"], row["nats-server"]
        lines.append(
            f"| {row['scenario']} | {row['size']} B | {py['median']:,.0f} | {go['median']:,.0f} |"
            f" {row['ratio']:.2f} | {py['lossless']} / {go['lossless']} |"
        )
    return "\n".join(lines)


def render_chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["rows"]
    labels = [f"{r['scenario']} {r['size']}B" for r in rows]
    xs = range(len(rows))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    left.bar(xs, [r["ratio"] for r in rows], color="#36c")
    left.axhline(1.0, color="#999", linestyle="--")
    left.set_xticks(list(xs), labels)
    left.set_ylabel("pynatsd / nats-server (rate)")
    left.set_title(results["title"] + ": throughput ratio")
    w = 0.4
    right.bar([x - w / 2 for x in xs], [r["pynatsd"]["median"] for r in rows], w, label="pynatsd")
    right.bar([x + w / 2 for x in xs], [r["nats-server"]["median"] for r in rows], w, label="nats-server")
    right.set_yscale("log")
    right.set_xticks(list(xs), labels)
    right.set_ylabel("deliveries/s (log)")
    right.set_title("median rates, " + results["where"])
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--sizes", default="16,1024")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per side (medians are reported)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies the messages per run")
    ap.add_argument("--smoke", action="store_true", help="seconds-long harness check: tiny counts, 1 rep")
    ap.add_argument("--leaf", action="store_true", help="across a leaf node link (leaf -> hub) instead")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    names = [r for r in args.rows.split(",") if r]
    if set(names) - set(ROWS):
        ap.error(f"rows: {list(ROWS)}")
    sizes = [int(s) for s in args.sizes.split(",")]
    reps = 1 if args.smoke else args.reps
    from bench.broker.run import nats_server_version

    results: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu",
        "nats_server": nats_server_version(),
        "reps": reps,
        "smoke": args.smoke,
        "title": "Leaf -> hub rows" if args.leaf else "Cross-node rows",
        "where": "publisher on the leaf, subscribers on the hub"
        if args.leaf
        else "publisher on A, subscribers on B",
        "rows": [],
    }
    with (
        tempfile.TemporaryDirectory(prefix="pynatsd-bench-cluster-") as workdir,
        (leaf_pairs if args.leaf else two_node_clusters)(Path(workdir)) as clusters,
    ):
        for cluster in clusters.values():  # warm-up: connections, caches, the routes' first buffers
            measure(cluster, 1, 16, 2000 if args.smoke else 20_000)
        for name in names:
            for size in sizes:
                n = 2000 if args.smoke else int(BASE[size] * args.scale)
                runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
                for _ in range(reps):
                    for kind in KINDS:  # A B A B
                        runs[kind].append(measure(clusters[kind], ROWS[name], size, n))
                row = row_for(name, size, runs)
                results["rows"].append(row)
                print(render_table({**results, "rows": [row]}, header=False), flush=True)
    stem = ("leaf" if args.leaf else "cluster") + ("-smoke" if args.smoke else "")
    markdown = render_table(results)
    print()
    print(markdown)
    write_results(results, args.out, stem, render_chart)
    (Path(args.out) / f"{stem}.md").write_text(markdown + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
