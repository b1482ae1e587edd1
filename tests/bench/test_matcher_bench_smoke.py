"""Keeps the matcher benchmark harness alive: its seconds-long smoke mode runs and writes its outputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_matcher_bench_smoke(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "bench/matcher/run.py", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "seed table" in out.stdout and "high cardinality" in out.stdout
    results = json.loads((tmp_path / "matcher-smoke.json").read_text())
    impls = [row["impl"] for row in results["seed"]]
    assert impls == ["naive hashmap scan", "pytrie trie", "pynatsd Sublist"]
    assert all(v > 0 for row in results["seed"] for k, v in row.items() if k.endswith("_ns"))
    assert (tmp_path / "matcher-smoke.png").stat().st_size > 10_000
