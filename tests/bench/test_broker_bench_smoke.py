"""Keeps the broker benchmark harness alive: its smoke mode runs against both servers and writes its outputs.

No timing thresholds: only structure, nonzero rates and counts (every published message delivered).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.broker import gogen, scenarios
from tests.servers import IN_CI, start_server

ROOT = Path(__file__).resolve().parents[2]


REALISTIC = ["i-1-1", "i-queue-4", "i-join", "i-reqrep", "i-mixed"]


def test_broker_bench_smoke(tmp_path: Path) -> None:
    # Without Go the nats.go rows are left out, outside CI only (under CI=true that is a failure).
    gens = ["raw", "go"] if gogen.available() else ["raw"]
    if IN_CI and gens == ["raw"]:
        pytest.fail(
            "the nats.go generator needs golang-go and golang-github-nats-io-go-nats-dev under CI=true"
        )
    out = subprocess.run(
        [
            sys.executable,
            "bench/broker/run.py",
            "--smoke",
            "--realistic",
            ",".join(REALISTIC),
            "--generators",
            ",".join(gens),
            "--scenarios",
            "1-1,queue-4,reqrep",
            "--sizes",
            "16",
            "--no-memory",
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert out.returncode == 0, out.stderr
    assert "request/reply" in out.stdout and "nats-server" in out.stdout
    results = json.loads((tmp_path / "broker-smoke.json").read_text())
    assert results["nats_server"].startswith("nats-server: v")
    assert sorted(results["generators"]) == sorted(gens)
    rows = {row["scenario"]: row for row in results["rows"]}
    assert sorted(rows) == ["1-1", "queue-4", "reqrep"]
    for name in ("1-1", "queue-4"):
        for kind in ("pynatsd", "nats-server"):
            (run,) = rows[name][kind]["runs"]
            assert run["rate"] > 0 and run["pub_rate"] > 0
            assert run["delivered"] == run["expected"] > 0, (name, kind, run)
    for kind in ("pynatsd", "nats-server"):
        side = rows["reqrep"][kind]
        assert 0 < side["median"] <= side["p90"] <= side["p99"]
    real = {(row["scenario"], row["size"], row["generator"]): row for row in results["realistic"]}
    assert {(name, gen) for name, _, gen in real} == {(n, g) for n in REALISTIC for g in gens}
    assert {size for name, size, _ in real if name == "i-1-1"} == {16, 256, 1024}
    for (name, _, gen), row in real.items():
        for kind in ("pynatsd", "nats-server"):
            side = row[kind]
            (run,) = side["runs"]
            assert run["rate"] > 0, (name, gen, kind, run)
            assert set(side["latency"]) == {"connect", "ping"}
            assert side["rss_growth"] >= 0 and run["rss_peak"] > 0  # peak RSS over the RSS before the run
            if name in ("i-reqrep", "i-mixed"):
                assert 0 < side["p50"] <= side["p99"], (name, gen, kind)
            if name != "i-reqrep":  # every message owed is delivered, with every publisher connected
                assert run["delivered"] == run["expected"] > 0, (name, gen, kind, run)
                assert run["connect_failures"] == 0, (name, gen, kind, run)
    table = (tmp_path / "broker-smoke.md").read_text()
    assert "| 4 -> 1, publishers join the flood |" in table and "| peak MiB over idle |" in table
    assert (tmp_path / "broker-smoke.png").stat().st_size > 10_000


def test_stalled_subscriber_is_dropped_and_fast_ones_lose_nothing(tmp_path: Path) -> None:
    """The memory scenario in small: a subscriber that stops reading while 200k messages pass is cut off
    as a slow consumer at max_pending, and the two that keep reading receive every message."""
    conf = tmp_path / "small.conf"
    # 4 MiB of headroom keeps a fast subscriber that a busy machine starves for a moment from being cut
    # too (pynatsd has no fast-producer stall); the 30 MB burst is far beyond it and the kernel buffers.
    conf.write_text("max_pending: 4194304\n")
    server = start_server("pynatsd", ["-c", str(conf)])
    try:
        result = scenarios.stalled(server.port, server.proc.pid, 128, 200_000)
    finally:
        server.stop()
    assert result["fast_delivered"] == [200_000, 200_000]
    assert result["stalled_dropped"] is True


def test_go_publish_only_has_no_subscriber() -> None:
    """`subs=0` reaches natsbench as `-subs=0` (it was dropped as falsy, and natsbench's default of one
    subscriber turned the 'publish only' row into a 1 -> 1 row)."""
    if not gogen.available():
        assert not IN_CI, "the nats.go generator needs golang-go under CI=true"
        pytest.skip("Go is not installed")
    server = start_server("pynatsd")
    try:
        out = gogen.run(server.port, "pubsub", count=2000, size=16, subjects=10, pubs=1, subs=0)
    finally:
        server.stop()
    assert out["expected"] == 0 and out["delivered"] == 0, out
    assert out["pub_rate"] > 0
