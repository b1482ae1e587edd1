"""The exporter for nats-server nodes (python -m pynatsd.monitor.exporter) against the real nats-server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pynatsd.monitor.exporter import registry_for
from tests.conftest import need_tool
from tests.servers import REPO_ROOT, ServerProcess, free_port, nats_server_binary, start_server


@pytest.fixture
def nats_server() -> Iterator[ServerProcess]:
    need_tool(nats_server_binary() is not None, "nats-server")
    server = start_server("nats-server", http_port=free_port())
    yield server
    server.stop()


@pytest.fixture
def exporter(nats_server: ServerProcess) -> Iterator[int]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cmd = [sys.executable, "-m", "pynatsd.monitor.exporter", f"http://127.0.0.1:{nats_server.http_port}"]
    proc = subprocess.Popen([*cmd, "--host", "127.0.0.1", "--port", str(port)], env=env, cwd=REPO_ROOT)
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        # SIGTERM is a clean stop (exit 0): as a container's first process, an exporter without a handler
        # ignored it and `docker-compose down` waited 20 s to kill it
        assert proc.wait(10) == 0


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def test_exporter_serves_nats_server_varz(nats_server: ServerProcess, exporter: int) -> None:
    samples = scrape(exporter)
    with urllib.request.urlopen(f"http://127.0.0.1:{nats_server.http_port}/varz", timeout=5) as resp:
        varz = json.load(resp)
    assert samples["gnatsd_varz_max_payload"] == varz["max_payload"] == 1048576
    assert samples["gnatsd_varz_port"] == nats_server.port
    assert samples["gnatsd_routez_num_routes"] == 0
    assert "gnatsd_varz_cluster" not in samples  # objects are not series


def test_exporter_fails_the_scrape_when_the_server_is_gone(nats_server: ServerProcess, exporter: int) -> None:
    nats_server.stop()
    with pytest.raises(urllib.error.HTTPError) as failed:
        scrape(exporter)
    assert failed.value.code == 503


# The labels that name a server, or a moment: they differ between any two runs
RUN_LABELS = {
    "server_id",
    "server_name",
    "meta_leader",
    "stream_leader",
    "consumer_leader",
    "consumer_created",
}


def jetstream_series(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in RUN_LABELS))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("jetstream_")
    }


async def test_jetstream_series_match_the_exporter_names_on_both_servers(tmp_path: Path) -> None:
    """Per-stream and per-consumer series under prometheus-nats-exporter's names and labels: pynatsd's
    own /metrics and nats-server's through pynatsd.monitor.exporter give the same series and values
    after the same stream, publishes, fetch and ack (messages, bytes, pending, ack pending, redelivered,
    waiting, the configured limits)."""
    need_tool(nats_server_binary() is not None, "nats-server")
    got = {}
    for kind in ("pynatsd", "nats-server"):
        conf = tmp_path / f"{kind}.conf"
        store = tmp_path / kind
        conf.write_text(
            f'jetstream {{ store_dir: "{store}", max_memory_store: 64MB, max_file_store: 1GB }}\n'
        )
        server = start_server(kind, ["-c", str(conf)], http_port=free_port())
        try:
            nc = await nats.connect(server.url)
            js = nc.jetstream()
            await js.add_stream(name="ORDERS", subjects=["orders.>"])
            for i in range(5):
                await js.publish("orders.new", b"order %d" % i)
            puller = await js.pull_subscribe("orders.>", durable="proc")
            first = await puller.fetch(3)
            await first[0].ack_sync()
            await js.add_consumer("ORDERS", durable_name="idle", description="nothing read yet")
            await nc.close()
            url = f"http://127.0.0.1:{server.http_port}"
            if kind == "pynatsd":
                with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
                    text = resp.read().decode()
            else:
                text = generate_latest(registry_for(url)).decode()
            got[kind] = jetstream_series(text)
        finally:
            server.stop()
    assert got["pynatsd"] == got["nats-server"]
    series = got["pynatsd"]

    def value(name: str, **labels: str) -> float:
        return next(v for (n, ls), v in series.items() if n == name and set(labels.items()) <= set(ls))

    assert value("jetstream_stream_total_messages", stream_name="ORDERS", account="$G") == 5
    assert value("jetstream_consumer_num_pending", consumer_name="proc") == 2
    assert value("jetstream_consumer_num_ack_pending", consumer_name="proc") == 2
    assert value("jetstream_consumer_num_redelivered", consumer_name="proc") == 0
    assert value("jetstream_server_max_memory") == 64 * 1024 * 1024
    assert value("jetstream_consumer_num_pending", consumer_desc="nothing read yet") == 5
