"""Static checks of the deployment files with the real tools: docker-compose, promtool, systemd-analyze, and
the Grafana dashboard's PromQL against the metrics a live pynatsd exports."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.errors
import pytest
import yaml

from tests.cluster.harness import running_cluster
from tests.conftest import need_tool
from tests.servers import REPO_ROOT, ServerProcess, free_port, nats_server_binary, start_server

DOCKER = REPO_ROOT / "docker"
DASHBOARD = DOCKER / "grafana" / "dashboards" / "pynatsd.json"
UNIT = DOCKER / "systemd" / "pynatsd.service"

# PromQL words that look like metric names: functions are skipped by the "(" that follows them.
_PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (label matchers, ranges, grouping labels and strings removed)."""
    expr = re.sub(r'"(?:\\.|[^"\\])*"', "", expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for m in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?", expr):
        if m.group(2) is None and m.group(1).lower() not in _PROMQL_WORDS:
            names.add(m.group(1))
    return names


def test_promql_metric_names_parser() -> None:
    expr = 'histogram_quantile(0.99, sum by (le) (rate(a_bucket{job="x"}[1m]))) / on (i) b_total offset 5m'
    assert promql_metric_names(expr) == {"a_bucket", "b_total"}


def _compose() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return ["docker", "compose"]


def test_compose_file_validates() -> None:
    need_tool(shutil.which("docker-compose") is not None, "docker-compose (Debian package docker-compose)")
    out = subprocess.run(
        [*_compose(), "-f", str(DOCKER / "docker-compose.yml"), "config"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    # The resolved config keeps the three services wired as documented.
    for service in ("pynatsd:", "prometheus:", "grafana:", "condition: service_healthy"):
        assert service in out.stdout


def test_cluster_compose_file_validates() -> None:
    need_tool(shutil.which("docker-compose") is not None, "docker-compose (Debian package docker-compose)")
    out = subprocess.run(
        [*_compose(), "-f", str(DOCKER / "docker-compose.cluster.yml"), "config"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    for service in ("pynatsd-a:", "pynatsd-b:", "nats-server:", "nats-server-exporter:", "prometheus:"):
        assert service in out.stdout


@pytest.mark.parametrize("config", ["prometheus.yml", "cluster.yml"])
def test_prometheus_config_passes_promtool(config: str) -> None:
    need_tool(shutil.which("promtool") is not None, "promtool (Debian package prometheus)")
    out = subprocess.run(
        ["promtool", "check", "config", str(DOCKER / "prometheus" / config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr


def test_cluster_node_conf_forms_the_mixed_cluster() -> None:
    """docker/cluster/node.conf, read by two pynatsd processes and a nats-server with the compose file's
    environment (ports and peers on loopback), gives a full mesh of the three names."""
    need_tool(nats_server_binary() is not None, "nats-server")
    names = {"pynatsd-a": "pynatsd", "pynatsd-b": "pynatsd", "nats-server": "nats-server"}
    ports = {name: (free_port(), free_port(), free_port()) for name in names}
    servers = []
    try:
        for name, kind in names.items():
            peers = [ports[other][2] for other in names if other != name]
            env = {
                "NODE_NAME": name,
                "CLIENT_PORT": str(ports[name][0]),
                "HTTP_PORT": str(ports[name][1]),
                "CLUSTER_PORT": str(ports[name][2]),
                "ROUTE_1": f"nats-route://127.0.0.1:{peers[0]}",
                "ROUTE_2": f"nats-route://127.0.0.1:{peers[1]}",
            }
            conf = str(DOCKER / "cluster" / "node.conf")
            servers.append(start_server(kind, ["-c", conf], port=ports[name][0], env=env))

        def meshed() -> bool:
            for name in names:
                routez = json.loads(scrape(f"http://127.0.0.1:{ports[name][1]}/routez"))
                if {r["remote_name"] for r in routez["routes"]} != set(names) - {name}:
                    return False
            return True

        deadline = time.monotonic() + 30
        while not meshed():
            assert time.monotonic() < deadline, "the three nodes did not mesh"
            time.sleep(0.2)
    finally:
        for server in servers:
            server.stop()


JETSTREAM_COMPOSE = DOCKER / "docker-compose.jetstream.yml"


def test_jetstream_compose_file_validates() -> None:
    need_tool(shutil.which("docker-compose") is not None, "docker-compose (Debian package docker-compose)")
    out = subprocess.run(
        [*_compose(), "-f", str(JETSTREAM_COMPOSE), "config"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    for service in ("pynatsd-a:", "pynatsd-b:", "nats-js-1:", "nats-js-2:", "nats-js-3:", "JS_STORE_DIR"):
        assert service in out.stdout


def test_jetstream_compose_cluster_serves_jetstream_through_pynatsd(tmp_path: Path) -> None:
    """The services of docker-compose.jetstream.yml as processes: each reads its config file
    (docker/cluster/node.conf for pynatsd, jetstream.conf for nats-server) with the compose file's
    environment, on loopback ports. The five nodes mesh, and a client of a pynatsd node creates an R3
    stream kept by the three nats-server nodes and publishes to it with acks."""
    need_tool(nats_server_binary() is not None, "nats-server")
    services: dict[str, Any] = yaml.safe_load(JETSTREAM_COMPOSE.read_text())["services"]
    ports = {name: (free_port(), free_port(), free_port()) for name in services}
    servers: dict[str, ServerProcess] = {}
    try:
        for name, service in services.items():
            env = {k: str(v) for k, v in service["environment"].items()}
            for key in ("ROUTE_1", "ROUTE_2"):  # nats-route://<service>:6222 -> its loopback port
                peer = env[key].removeprefix("nats-route://").split(":")[0]
                env[key] = f"nats-route://127.0.0.1:{ports[peer][2]}"
            env.update(CLIENT_PORT=str(ports[name][0]), HTTP_PORT=str(ports[name][1]),
                       CLUSTER_PORT=str(ports[name][2]), JS_STORE_DIR=str(tmp_path / name))  # fmt: skip
            kind = "pynatsd" if "PYNATSD_IMAGE" in service["image"] else "nats-server"
            conf = DOCKER / "cluster" / Path(service["command"][1]).name
            servers[name] = start_server(kind, ["-c", str(conf)], port=ports[name][0], env=env)
        asyncio.run(_stream_through(servers["pynatsd-a"].url, servers["pynatsd-b"].url))
    finally:
        for server in servers.values():
            server.stop()


async def _stream_through(url: str, other_url: str) -> None:
    """An R3 stream made and written through `url`, read through `other_url`, once JetStream answers."""
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=2)
    deadline = time.monotonic() + 60  # meshing, then the meta leader's election
    while True:
        try:
            info = await js.add_stream(name="ORDERS", subjects=["orders.>"], num_replicas=3)
            break
        except (nats.errors.Error, nats.js.errors.Error, TimeoutError):
            assert time.monotonic() < deadline, "no JetStream through the pynatsd node"
            await asyncio.sleep(0.5)
    assert info.cluster is not None and str(info.cluster.leader).startswith("nats-js-")
    assert (await js.publish("orders.1", b"one")).seq == 1
    await nc.close()
    nc = await nats.connect(other_url)
    state = (await nc.jetstream().stream_info("ORDERS")).state
    assert (state.messages, state.last_seq) == (1, 1)
    await nc.close()


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]


def test_grafana_provisioning_points_at_the_dashboard() -> None:
    provider = (DOCKER / "grafana" / "provisioning" / "dashboards" / "pynatsd.yml").read_text()
    compose = (DOCKER / "docker-compose.yml").read_text()
    assert "path: /var/lib/grafana/dashboards" in provider
    assert "./grafana/dashboards:/var/lib/grafana/dashboards" in compose
    datasource = (DOCKER / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    uid = re.search(r"uid:\s*(\S+)", datasource)
    assert uid is not None
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == uid.group(1), panel["title"]


def scrape(url: str, timeout: float = 10) -> str:
    """GET url, retrying while refused: the monitoring listener may open just after the client one."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return str(resp.read().decode())
        except urllib.error.URLError as err:
            if not isinstance(err.reason, ConnectionRefusedError) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def exported_names(text: str) -> set[str]:
    return {re.split(r"[{ ]", line, maxsplit=1)[0] for line in text.splitlines() if line[:1] not in ("#", "")}


async def test_dashboard_queries_only_metrics_pynatsd_exports(tmp_path: Path) -> None:
    """Scraped from a node of a two-node pynatsd cluster, so the per-route series exist too, and from a
    JetStream server with a stream and a consumer, for the per-stream and per-consumer series."""
    exprs = _dashboard_exprs()
    wanted = set().union(*(promql_metric_names(e) for e in exprs))
    assert len(wanted) >= 10, wanted
    with running_cluster(("pynatsd", "pynatsd"), tmp_path / "cluster") as cluster:
        exported = exported_names(scrape(f"{cluster[0].monitor_url}/metrics"))
    server = start_server("pynatsd", ["-js", "-sd", str(tmp_path / "js")], http_port=free_port())
    try:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s"])
        await js.add_consumer("S", durable_name="C")
        await nc.close()
        exported |= exported_names(scrape(f"http://127.0.0.1:{server.http_port}/metrics"))
    finally:
        server.stop()
    assert {"jetstream_stream_total_messages", "jetstream_consumer_num_pending"} <= wanted
    assert not wanted - exported, (
        f"dashboard names metrics pynatsd does not export: {sorted(wanted - exported)}"
    )


@pytest.fixture
def unit_for_verify(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this checkout (systemd-analyze verify checks the binary exists)."""
    text = UNIT.read_text().replace("/opt/pynatsd/bin/pynatsd", f"{sys.executable} -m pynatsd")
    path = tmp_path / "pynatsd.service"
    path.write_text(text)
    return path


def test_systemd_unit_verifies(unit_for_verify: Path) -> None:
    need_tool(shutil.which("systemd-analyze") is not None, "systemd-analyze (Debian package systemd)")
    out = subprocess.run(
        ["systemd-analyze", "verify", str(unit_for_verify)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=unit_for_verify.parent,
    )
    assert out.returncode == 0 and not out.stderr.strip(), out.stdout + out.stderr


def test_systemd_unit_is_hardened(unit_for_verify: Path) -> None:
    need_tool(shutil.which("systemd-analyze") is not None, "systemd-analyze (Debian package systemd)")
    text = UNIT.read_text()
    for line in (
        "DynamicUser=yes",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "Restart=on-failure",
        "CapabilityBoundingSet=\n",
    ):
        assert line in text
    out = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit_for_verify)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=unit_for_verify.parent,
    )
    level = re.search(r"Overall exposure level for \S+: ([\d.]+) (\w+)", out.stdout + out.stderr)
    assert level is not None, out.stdout + out.stderr
    # systemd rates 0-10; below 2.0 is "OK", the best band.
    assert float(level.group(1)) < 2.0 and level.group(2) == "OK", level.group(0)
