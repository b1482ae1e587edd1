"""The nats.go generator (bench/broker/go/natsbench): built offline once, one process per measured run.

The build is tests/interop/drivers.build_go (GOPATH mode against Debian's golang-github-nats-io-go-nats-dev,
no modules, no network). Each run prints one JSON object, whose keys match the raw generator's results
(`rate`, `pub_rate`, `delivered`, `expected`, `connect_failures`, `publishers`, `p50`/`p90`/`p99` µs).
"""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path
from typing import Any

from tests.interop.drivers import build_go, go_available

SOURCE = Path(__file__).resolve().parent / "go" / "natsbench"
WATCHDOG = 300


def available() -> bool:
    """Go and nats.go's source are installed (golang-go, golang-github-nats-io-go-nats-dev)."""
    return go_available()


@functools.cache
def binary() -> Path:
    return build_go(SOURCE, "natsbench-go")


def run(port: int, scenario: str, **flags: Any) -> dict[str, Any]:
    """One run of `scenario` against the server on `port`; `flags` are natsbench's (True -> `-flag`)."""
    args = [str(binary()), f"-url=nats://127.0.0.1:{port}", f"-scenario={scenario}", f"-watchdog={WATCHDOG}s"]
    for key, value in flags.items():
        if value is True:
            args.append(f"-{key}")
        elif value is not None and value is not False:  # 0 is a value (`-subs=0`: publish only), not "off"
            args.append(f"-{key}={value}")
    proc = subprocess.run(args, capture_output=True, text=True, timeout=WATCHDOG + 30, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(f"natsbench {scenario} {flags}: rc={proc.returncode} {proc.stdout} {proc.stderr}")
    out: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    out.setdefault("rate", 0.0)
    out.setdefault("pub_rate", 0.0)
    for p in out.get("publishers", []):
        p.pop("t0", None)
        p.pop("t1", None)
    return out
