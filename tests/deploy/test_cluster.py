"""The compose cluster (docker/docker-compose.cluster.yml) for real: two pynatsd nodes and nats-server built
from docker/Dockerfile.nats-server, the exporter and Prometheus, brought up with docker-compose on the
private engine. Messages cross nodes both ways and Prometheus scrapes all three nodes. The leaf stack
(docker/docker-compose.leaf.yml: a pynatsd and nats-server hub cluster, a pynatsd leaf) the same way: clients
on the leaf and on each hub member exchange messages both ways.

CI's dockerd has no bridge, so every service joins the host network: the resolved compose config gets free
ports for each node (the same environment variables docker/cluster/node.conf reads), routes to 127.0.0.1,
and Prometheus' config the same targets with their host ports. Prometheus runs from an image made of the
host's own binary (no registry is reachable here to pull prom/prometheus).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml

from tests.conftest import need_tool
from tests.deploy.conftest import IMAGE, NATS_SERVER_IMAGE, PROMETHEUS_IMAGE, build_cluster_images
from tests.deploy.engine import Engine, wait_healthy
from tests.servers import REPO_ROOT, free_port

COMPOSE_FILE = REPO_ROOT / "docker" / "docker-compose.cluster.yml"
NODES = ("pynatsd-a", "pynatsd-b", "nats-server")
pytestmark = pytest.mark.timeout(900)


@dataclass
class Ports:
    client: int
    http: int
    cluster: int


@pytest.fixture(scope="module")
def images(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> None:
    """nats-server from its Dockerfile, and Prometheus from the host's binary (it needs only libc); built
    already by the engine's background preparation in a whole-suite run, so here from the build cache."""
    need_tool(shutil.which("prometheus") is not None, "prometheus (Debian package prometheus)")
    build_cluster_images(engine, tmp_path_factory.mktemp("prometheus-image"))


def host_network(
    config: dict[str, Any], ports: dict[str, Ports], exporter: int, prom: int, prom_conf: Path
) -> None:
    """Rewrite the resolved compose config for the host network (see the module docstring)."""
    services = config["services"]
    for name in NODES:
        service = services[name]
        service.pop("ports")
        service["network_mode"] = "host"
        others = [o for o in NODES if o != name]
        service["environment"].update(
            CLIENT_PORT=str(ports[name].client),
            HTTP_PORT=str(ports[name].http),
            CLUSTER_PORT=str(ports[name].cluster),
            ROUTE_1=f"nats-route://127.0.0.1:{ports[others[0]].cluster}",
            ROUTE_2=f"nats-route://127.0.0.1:{ports[others[1]].cluster}",
            PYNATSD_HEALTH_URL=f"http://127.0.0.1:{ports[name].http}/healthz",
            NATS_HEALTH_URL=f"http://127.0.0.1:{ports[name].http}/healthz",
        )
        service["healthcheck"]["interval"] = "1s"
    exporter_service = services["nats-server-exporter"]
    exporter_service["network_mode"] = "host"
    url = exporter_service["command"][0]
    assert url == "http://nats-server:8222", url
    exporter_service["command"] = [
        f"http://127.0.0.1:{ports['nats-server'].http}",
        "--host",
        "127.0.0.1",
        "--port",
        str(exporter),
    ]
    prometheus = services["prometheus"]
    prometheus.pop("ports")
    prometheus.update(network_mode="host", image=PROMETHEUS_IMAGE)
    prometheus["healthcheck"] = {"disable": True}  # wget is in prom/prometheus, not in the test image
    prometheus["command"].append(f"--web.listen-address=127.0.0.1:{prom}")
    prometheus["volumes"] = [
        v
        if not str(v).endswith("/etc/prometheus/prometheus.yml:ro")
        else f"{prom_conf}:/etc/prometheus/prometheus.yml:ro"
        for v in prometheus["volumes"]
    ]


def prometheus_config(ports: dict[str, Ports], exporter: int, prom: int) -> str:
    """docker/prometheus/cluster.yml with each service target at its host port (all three nodes must be
    there in the shipped file)."""
    shipped = yaml.safe_load((REPO_ROOT / "docker" / "prometheus" / "cluster.yml").read_text())
    where = {f"{n}:8222": f"127.0.0.1:{ports[n].http}" for n in NODES if n != "nats-server"}
    where["nats-server-exporter:7777"] = f"127.0.0.1:{exporter}"
    where["localhost:9090"] = f"127.0.0.1:{prom}"
    targets = [t for job in shipped["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert sorted(targets) == sorted(where), targets
    for job in shipped["scrape_configs"]:
        for sc in job["static_configs"]:
            sc["targets"] = [where[t] for t in sc["targets"]]
    shipped["global"]["scrape_interval"] = "1s"
    return str(yaml.safe_dump(shipped))


def http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.load(resp)


def eventually(check: Any, what: str, timeout: float = 60) -> Any:
    """Poll `check()` until it returns something true (connection errors count as not yet)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except OSError as e:
            last = e
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}: {last!r}")


async def across(pub_port: int, sub_port: int, subject: str, count: int = 10) -> None:
    """A subscriber on one node gets exactly the `count` messages published on another: probes first,
    until one gets through (the interest has crossed the route), then the numbered messages."""
    sub_nc = await nats.connect(f"nats://127.0.0.1:{sub_port}", max_reconnect_attempts=0)
    pub_nc = await nats.connect(f"nats://127.0.0.1:{pub_port}", max_reconnect_attempts=0)
    try:
        sub = await sub_nc.subscribe(subject)
        probes = await sub_nc.subscribe(f"{subject}.probe")
        await sub_nc.flush()
        for _ in range(100):
            await pub_nc.publish(f"{subject}.probe", b"")
            try:
                await probes.next_msg(timeout=0.2)
                break
            except nats.errors.TimeoutError:
                continue
        else:
            raise AssertionError(f"no interest in {subject} crossed from :{sub_port} to :{pub_port}")
        for i in range(count):
            await pub_nc.publish(subject, f"m{i}".encode())
        await pub_nc.flush()
        got = [(await sub.next_msg(timeout=10)).data for _ in range(count)]
        assert got == [f"m{i}".encode() for i in range(count)]
    finally:
        await sub_nc.close()
        await pub_nc.close()


def compose_env(engine: Engine) -> dict[str, str]:
    return {**engine.env, "PYNATSD_IMAGE": IMAGE, "NATS_SERVER_IMAGE": NATS_SERVER_IMAGE}


def resolved_config(engine: Engine, compose_file: Path) -> dict[str, Any]:
    """The compose file as docker-compose resolves it, with the test images."""
    resolved = subprocess.run(
        ["docker-compose", "-f", str(compose_file), "config"],
        env=compose_env(engine),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    config: dict[str, Any] = yaml.safe_load(resolved.stdout)
    return config


@contextmanager
def compose_up(
    engine: Engine, config: dict[str, Any], tmp_path: Path, prefix: str, services: Sequence[str]
) -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    """`config` up as a project of its own until `services` are healthy; yields its docker-compose runner;
    everything down (and checked gone) on exit."""
    hostnet = tmp_path / "docker-compose.yml"
    hostnet.write_text(yaml.safe_dump(config))
    project = f"{prefix}{uuid.uuid4().hex[:6]}"
    compose = ["docker-compose", "-p", project, "-f", str(hostnet)]
    env = compose_env(engine)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        out = subprocess.run([*compose, *args], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        return out

    run("up", "-d", "--no-build")
    try:
        for name in services:
            wait_healthy(engine, run("ps", "-q", name).stdout.strip())
        yield run
    finally:
        run("down", "--volumes", "--timeout", "20")
    leftovers = engine.run("ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={project}")
    assert leftovers.stdout == ""


@pytest.fixture
def cluster(engine: Engine, images: None, tmp_path: Path) -> Iterator[dict[str, Any]]:
    ports = {n: Ports(free_port(), free_port(), free_port()) for n in NODES}
    exporter, prom = free_port(), free_port()
    config = resolved_config(engine, COMPOSE_FILE)
    prom_conf = tmp_path / "prometheus.yml"
    prom_conf.write_text(prometheus_config(ports, exporter, prom))
    prom_conf.chmod(0o644)
    tmp_path.chmod(0o755)
    host_network(config, ports, exporter, prom, prom_conf)
    with compose_up(engine, config, tmp_path, "pynatsdcluster", NODES) as run:
        yield {"ports": ports, "prometheus": prom, "run": run}


async def test_compose_cluster_routes_messages_and_is_scraped(cluster: dict[str, Any]) -> None:
    ports: dict[str, Ports] = cluster["ports"]
    for name in NODES:  # a full mesh: every node has routes to the two others, by their server names
        others = set(NODES) - {name}
        eventually(
            lambda n=name, o=others: (
                {r["remote_name"] for r in http_json(f"http://127.0.0.1:{ports[n].http}/routez")["routes"]}
                == o
            ),
            f"{name}'s routes",
        )
    await across(ports["pynatsd-a"].client, ports["nats-server"].client, "compose.a-to-go")
    await across(ports["nats-server"].client, ports["pynatsd-b"].client, "compose.go-to-b")
    await across(ports["pynatsd-b"].client, ports["pynatsd-a"].client, "compose.b-to-a")

    prom = cluster["prometheus"]

    def scraped() -> list[dict[str, Any]] | None:
        targets = http_json(f"http://127.0.0.1:{prom}/api/v1/targets")["data"]["activeTargets"]
        nodes = [t for t in targets if t["labels"]["job"] in ("pynatsd", "nats-server")]
        return nodes if len(nodes) == 3 and all(t["health"] == "up" for t in nodes) else None

    targets = eventually(scraped, "all three nodes' targets up in Prometheus")
    assert sorted(t["labels"]["job"] for t in targets) == ["nats-server", "pynatsd", "pynatsd"]

    def remotes() -> dict[str, float] | None:
        query = urllib.parse.urlencode({"query": "gnatsd_varz_remotes"})
        result = http_json(f"http://127.0.0.1:{prom}/api/v1/query?{query}")["data"]["result"]
        values = {r["metric"]["instance"]: float(r["value"][1]) for r in result}
        return values if len(values) == 3 and set(values.values()) == {2.0} else None

    # every node, nats-server included (through the exporter), reports the two others under one name
    eventually(remotes, "gnatsd_varz_remotes == 2 for the three nodes")


LEAF_FILE = REPO_ROOT / "docker" / "docker-compose.leaf.yml"
HUBS = ("hub-pynatsd", "hub-nats-server")


@pytest.fixture
def leaf_stack(engine: Engine, images: None, tmp_path: Path) -> Iterator[dict[str, Ports]]:
    """docker/docker-compose.leaf.yml on the host network: the hub cluster (each node's `cluster` port
    field is its leafnode port too, as a second free port) and the leaf dialing both hub members."""
    ports = {n: Ports(free_port(), free_port(), free_port()) for n in (*HUBS, "leaf")}
    leaf_ports = {n: free_port() for n in HUBS}
    config = resolved_config(engine, LEAF_FILE)
    for name, service in config["services"].items():
        service.pop("ports")
        service["network_mode"] = "host"
        service["healthcheck"]["interval"] = "1s"
        service["environment"].update(
            CLIENT_PORT=str(ports[name].client),
            HTTP_PORT=str(ports[name].http),
            PYNATSD_HEALTH_URL=f"http://127.0.0.1:{ports[name].http}/healthz",
            NATS_HEALTH_URL=f"http://127.0.0.1:{ports[name].http}/healthz",
        )
        if name in HUBS:
            other = HUBS[1 - HUBS.index(name)]
            service["environment"].update(
                CLUSTER_PORT=str(ports[name].cluster),
                LEAF_PORT=str(leaf_ports[name]),
                ROUTE_1=f"nats-route://127.0.0.1:{ports[other].cluster}",
            )
        else:
            service["environment"].update(
                HUB_1=f"nats-leaf://127.0.0.1:{leaf_ports[HUBS[0]]}",
                HUB_2=f"nats-leaf://127.0.0.1:{leaf_ports[HUBS[1]]}",
            )
    with compose_up(engine, config, tmp_path, "pynatsdleaf", list(ports)):
        yield ports


async def test_compose_leaf_exchanges_messages_with_the_hub_cluster(leaf_stack: dict[str, Ports]) -> None:
    """The leaf's one link reaches the hub cluster: a client on the leaf and clients on either hub member
    exchange messages both ways."""
    ports = leaf_stack
    eventually(
        lambda: http_json(f"http://127.0.0.1:{ports['leaf'].http}/leafz")["leafnodes"] == 1, "the leaf's link"
    )
    for hub in HUBS:
        await across(ports["leaf"].client, ports[hub].client, f"compose.leaf-to-{hub}")
        await across(ports[hub].client, ports["leaf"].client, f"compose.{hub}-to-leaf")
