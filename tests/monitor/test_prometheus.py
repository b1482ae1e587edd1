"""Real Prometheus scrapes pynatsd's /metrics every second; its HTTP API must report the traffic we drove."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from tests.conftest import need_tool
from tests.servers import ServerProcess, free_port

N_MSGS = 250
PAYLOAD = b"x" * 40
SUBSCRIBERS = 2
# start_server's readiness probe is one short-lived client connection too.
PROBES = 1


@pytest.fixture
def prometheus(monitored: ServerProcess) -> Iterator[int]:
    binary = shutil.which("prometheus")
    need_tool(binary is not None, "prometheus")
    assert binary is not None
    tmp = Path(tempfile.mkdtemp(prefix="prom-"))
    (tmp / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: pynatsd\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{monitored.http_port}']\n"
    )
    port = free_port()
    with open(tmp / "prometheus.log", "wb") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_ready(port, proc)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Bounded wait for Prometheus' readiness endpoint."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, "prometheus exited early"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError("prometheus not ready")


def query(port: int, expr: str) -> dict[str, float]:
    """Instant query → {job label value or '': value} for each returned series."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return {r["metric"].get("__name__", ""): float(r["value"][1]) for r in body["data"]["result"]}


def wait_for_value(port: int, expr: str, want: float, deadline_s: float = 30.0) -> float:
    """Poll Prometheus (bounded) until the newest sample of `expr` equals `want`; return the last value."""
    end = time.monotonic() + deadline_s
    last = float("nan")
    while time.monotonic() < end:
        values = list(query(port, expr).values())
        if values:
            last = values[0]
            if last == want:
                return last
        time.sleep(0.5)
    return last


async def test_prometheus_scrapes_exact_traffic(monitored: ServerProcess, prometheus: int) -> None:
    # Prometheus must see the target up before traffic, so the counters it records start from zero.
    assert wait_for_value(prometheus, 'up{job="pynatsd"}', 1.0) == 1.0
    subs = [await nats.connect(monitored.url) for _ in range(SUBSCRIBERS)]
    pub = await nats.connect(monitored.url)
    got = [0] * SUBSCRIBERS
    for i, nc in enumerate(subs):

        async def cb(msg: object, i: int = i) -> None:
            got[i] += 1

        await nc.subscribe("prom.test", cb=cb)
        await nc.flush()
    for _ in range(N_MSGS):
        await pub.publish("prom.test", PAYLOAD)
    await pub.flush()
    for nc in subs:
        await nc.flush()
    for _ in range(200):  # bounded: let the subscription callbacks drain
        if got == [N_MSGS] * SUBSCRIBERS:
            break
        await asyncio.sleep(0.02)
    assert got == [N_MSGS] * SUBSCRIBERS
    total = SUBSCRIBERS + 1 + PROBES
    try:
        p = prometheus
        assert wait_for_value(p, "pynatsd_connections", SUBSCRIBERS + 1) == SUBSCRIBERS + 1
        assert wait_for_value(p, "pynatsd_connections_accepted_total", total) == total
        assert wait_for_value(p, "pynatsd_subscriptions", SUBSCRIBERS) == SUBSCRIBERS
        assert wait_for_value(p, "pynatsd_messages_in_total", N_MSGS) == N_MSGS
        assert wait_for_value(p, "pynatsd_bytes_in_total", N_MSGS * len(PAYLOAD)) == N_MSGS * len(PAYLOAD)
        out = N_MSGS * SUBSCRIBERS
        assert wait_for_value(p, "pynatsd_messages_out_total", out) == out
        assert wait_for_value(p, "pynatsd_bytes_out_total", out * len(PAYLOAD)) == out * len(PAYLOAD)
        # Every publish matched both subscribers: the fan-out histogram's sum and count say so.
        assert wait_for_value(p, "pynatsd_fanout_per_publish_count", N_MSGS) == N_MSGS
        assert wait_for_value(p, "pynatsd_fanout_per_publish_sum", out) == out
        # The exporter-compatible names carry the same numbers.
        assert wait_for_value(p, "gnatsd_varz_in_msgs", N_MSGS) == N_MSGS
        assert wait_for_value(p, "gnatsd_varz_out_msgs", out) == out
        assert wait_for_value(p, "gnatsd_varz_connections", SUBSCRIBERS + 1) == SUBSCRIBERS + 1
        assert wait_for_value(p, "pynatsd_slow_consumers_total", 0) == 0
    finally:
        for nc in [*subs, pub]:
            await nc.close()
    # Closing is visible too: the open-connection gauge drops to zero while the total stays.
    assert wait_for_value(prometheus, "pynatsd_connections", 0) == 0
    assert wait_for_value(prometheus, "pynatsd_connections_accepted_total", total) == total
