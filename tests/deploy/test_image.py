"""The real image: built from docker/Dockerfile on a locally debootstrapped Debian base, run on a private
dockerd with host networking, driven with nats-py and over HTTP, stopped cleanly; then the compose file's
pynatsd service brought up with docker-compose."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import nats
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.conftest import IMAGE
from tests.deploy.engine import Engine, wait_healthy
from tests.servers import REPO_ROOT, free_port
from tests.wire import WireClient

# The first test also pays for debootstrap and the build (about 75 s here); keep room for slower machines.
pytestmark = pytest.mark.timeout(900)


async def roundtrip(port: int, count: int) -> None:
    """Publish `count` messages through the broker with nats-py and receive every one of them back."""
    nc = await nats.connect(f"nats://127.0.0.1:{port}", max_reconnect_attempts=0)
    try:
        sub = await nc.subscribe("deploy.check")
        for i in range(count):
            await nc.publish("deploy.check", f"m{i}".encode())
        got = [(await sub.next_msg(timeout=5)).data for _ in range(count)]
        assert got == [f"m{i}".encode() for i in range(count)]
    finally:
        await nc.close()


def metric(text: str, name: str) -> float:
    """The value of `name` in a Prometheus exposition, summed over its label sets."""
    values = [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]
    assert values, f"{name} not in /metrics"
    return sum(values)


def http_get(port: int, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
        return resp.status, resp.read().decode()


async def test_image_serves_nats_and_monitoring_as_non_root(engine: Engine) -> None:
    port, http_port = free_port(), free_port()
    name = f"pynatsd-{uuid.uuid4().hex[:8]}"
    engine.run(
        "run", "-d", "--name", name, "--network", "host", "--health-interval", "1s",
        "-e", f"PYNATSD_HEALTH_URL=http://127.0.0.1:{http_port}/healthz",
        IMAGE, "-a", "127.0.0.1", "-p", str(port), "-m", str(http_port),
    )  # fmt: skip
    try:
        wait_healthy(engine, name)
        config = json.loads(engine.run("inspect", name).stdout)[0]["Config"]
        assert config["User"] == "pynatsd:pynatsd"
        assert set(config["ExposedPorts"]) == {"4222/tcp", "8222/tcp"}
        uid = engine.run("exec", name, "python3", "-c", "import os; print(os.getuid())").stdout
        assert int(uid) != 0

        await roundtrip(port, 5)
        assert http_get(http_port, "/healthz") == (200, '{"status":"ok"}')
        status, text = http_get(http_port, "/metrics")
        assert status == 200
        assert metric(text, "pynatsd_messages_in_total") == 5
        assert metric(text, "pynatsd_messages_out_total") == 5

        engine.run("stop", "-t", "20", name)
        state = json.loads(engine.run("inspect", name).stdout)[0]["State"]
        assert (state["ExitCode"], state["OOMKilled"]) == (0, False)
        logs = engine.run("logs", name)
        assert "Server Exiting" in logs.stdout + logs.stderr
        assert "message path compiled (mypyc)" in logs.stdout + logs.stderr  # built from source in the image
    finally:
        engine.run("rm", "-f", name, check=False)


async def test_image_runs_a_mounted_config_with_pid_and_log_files(engine: Engine, tmp_path: Path) -> None:
    """The daemon set-up of docs/deploy.md: config from a mounted file, -P and -l, --signal reopen inside."""
    port, http_port = free_port(), free_port()
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "pynatsd.conf").write_text(
        f"listen: 127.0.0.1:{port}\nhttp_port: {http_port}\nauthorization {{ token: s3cret }}\n"
    )
    conf_dir.chmod(0o755)
    name = f"pynatsd-{uuid.uuid4().hex[:8]}"
    engine.run(
        "run", "-d", "--name", name, "--network", "host", "--health-interval", "1s",
        "-e", f"PYNATSD_HEALTH_URL=http://127.0.0.1:{http_port}/healthz",
        "-v", f"{conf_dir}:/etc/pynatsd:ro",
        IMAGE, "-c", "/etc/pynatsd/pynatsd.conf", "-P", "/tmp/pynatsd.pid", "-l", "/tmp/pynatsd.log",
    )  # fmt: skip
    try:
        wait_healthy(engine, name)
        with WireClient(port) as anonymous:  # the mounted file's token is enforced
            reply, closed = anonymous.exchange(b"CONNECT {}\r\n")
            assert (reply, closed) == (b"-ERR 'Authorization Violation'\r\n", True)
        nc = await nats.connect(f"nats://s3cret@127.0.0.1:{port}", max_reconnect_attempts=0)
        await nc.close()
        pid = engine.run("exec", name, "cat", "/tmp/pynatsd.pid").stdout
        assert pid == "1"  # the entrypoint is the broker itself; written without a newline
        engine.run("exec", name, "mv", "/tmp/pynatsd.log", "/tmp/pynatsd.log.1")
        engine.run("exec", name, "pynatsd", "--signal", "reopen", "-P", "/tmp/pynatsd.pid")
        deadline = time.monotonic() + 10
        while engine.run("exec", name, "test", "-s", "/tmp/pynatsd.log", check=False).returncode:
            assert time.monotonic() < deadline, "no new log file after --signal reopen"
            time.sleep(0.2)
        assert "Server is ready" in engine.run("exec", name, "cat", "/tmp/pynatsd.log.1").stdout
        engine.run("stop", "-t", "20", name)
        state = json.loads(engine.run("inspect", name).stdout)[0]["State"]
        assert state["ExitCode"] == 0
    finally:
        engine.run("rm", "-f", name, check=False)


async def test_compose_brings_up_pynatsd(engine: Engine, tmp_path: Path) -> None:
    port, http_port = free_port(), free_port()
    # CI's dockerd has no bridge: the service joins the host network on free ports instead of publishing
    # 4222/8222. Compose v1 cannot drop `ports` in an override, so the resolved config is edited instead.
    env = {**engine.env, "PYNATSD_IMAGE": IMAGE}
    base = ["docker-compose", "-f", str(REPO_ROOT / "docker" / "docker-compose.yml")]
    resolved = subprocess.run(
        [*base, "config"], env=env, capture_output=True, text=True, check=True, timeout=60
    )
    config = yaml.safe_load(resolved.stdout)
    service = config["services"]["pynatsd"]
    service.pop("ports")
    service.update(
        network_mode="host",
        command=["-a", "127.0.0.1", "-p", str(port), "-m", str(http_port)],
        environment={"PYNATSD_HEALTH_URL": f"http://127.0.0.1:{http_port}/healthz"},
    )
    service["healthcheck"]["interval"] = "1s"
    hostnet = tmp_path / "docker-compose.yml"
    hostnet.write_text(yaml.safe_dump(config))
    project = f"pynatsdtest{uuid.uuid4().hex[:6]}"
    compose = ["docker-compose", "-p", project, "-f", str(hostnet)]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        out = subprocess.run([*compose, *args], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        return out

    run("up", "-d", "--no-build", "pynatsd")
    try:
        container = run("ps", "-q", "pynatsd").stdout.strip()
        wait_healthy(engine, container)
        await roundtrip(port, 3)
        assert http_get(http_port, "/healthz")[0] == 200
    finally:
        run("down", "--volumes", "--timeout", "20")
    assert (
        engine.run("ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={project}").stdout == ""
    )
