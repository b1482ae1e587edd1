"""Keeps the cross-node benchmark rows alive: smoke mode on two-node pynatsd and nats-server clusters, and
the JetStream cluster rows on three-node ones.

No timing thresholds: structure, nonzero rates, and every message delivered across the route.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_cluster_bench_smoke(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "bench/broker/cluster.py", "--smoke", "--sizes", "16", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert out.returncode == 0, out.stderr
    results = json.loads((tmp_path / "cluster-smoke.json").read_text())
    assert results["nats_server"].startswith("nats-server: v")
    rows = {(row["scenario"], row["size"]): row for row in results["rows"]}
    assert sorted(rows) == [("x-1-1", 16), ("x-1-4", 16)]
    for row in rows.values():
        for kind in ("pynatsd", "nats-server"):
            side = row[kind]
            assert side["lossless"] is True, (row["scenario"], kind)
            assert side["median"] > 0 and side["runs"] == [round(side["median"])]
        assert row["ratio"] > 0
    assert "| x-1-4 | 16 B |" in (tmp_path / "cluster-smoke.md").read_text()
    assert (tmp_path / "cluster-smoke.png").stat().st_size > 5_000


def test_jetstream_cluster_bench_smoke(tmp_path: Path) -> None:
    """bench/jetstream/cluster.py: an R3 stream on 2 nats-server + pynatsd beside 3 nats-server."""
    out = subprocess.run(
        [sys.executable, "bench/jetstream/cluster.py", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert out.returncode == 0, out.stderr
    results = json.loads((tmp_path / "js-cluster-smoke.json").read_text())
    assert results["nats_server"].startswith("nats-server: v")
    rows = results["rows"]
    assert sorted(rows) == ["all-replicas", "consume-ack", "node0-cpu-us", "publish-ack"]
    for name in ("publish-ack", "all-replicas", "consume-ack"):
        assert rows[name]["nats-server"] > 0 and rows[name]["pynatsd"] > 0 and rows[name]["ratio"] > 0
    assert rows["node0-cpu-us"]["pynatsd"] >= 0  # 10 ms ticks: maybe none in 500 messages
    assert "all-replicas" in out.stdout
