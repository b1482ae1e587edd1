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

import pytest
from prometheus_client.parser import text_string_to_metric_families

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
        proc.wait(10)


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
