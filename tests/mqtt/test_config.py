"""The `mqtt {}` block: nats-server's keys, checks and texts (the same outcome from both servers where
both take the file), what pynatsd refuses by name, and the /varz `mqtt` block."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.mqtt.conftest import KINDS, RawClient, start_mqtt_server
from tests.servers import REPO_ROOT, nats_server_binary, pynatsd_command, require


def run(kind: str, conf: Path, text: str, *args: str) -> subprocess.CompletedProcess[str]:
    require(kind)
    conf.write_text(text)
    command = pynatsd_command() if kind == "pynatsd" else [str(nats_server_binary())]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [*command, *args, "-c", str(conf), "-a", "127.0.0.1", "-p", "-1"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        cwd=REPO_ROOT,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_standalone_mqtt_requires_jetstream(kind: str, tmp_path: Path) -> None:
    result = run(kind, tmp_path / "nojs.conf", "mqtt { port: -1 }\n")
    assert result.returncode == 1
    assert (
        "mqtt requires JetStream to be enabled if running in standalone mode" in result.stdout + result.stderr
    )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("block", "error"),
    [
        ("authorization { users: [] }", 'unknown field "users"'),
        ("bogus: 1", 'unknown field "bogus"'),
        ("max_ack_pending: 70000", "invalid value 70000, should in [0..65535] range"),
    ],
)
def test_block_errors_as_nats_server(kind: str, block: str, error: str, tmp_path: Path) -> None:
    text = f"jetstream {{ store_dir: '{tmp_path / 'js'}' }}\nmqtt {{ port: -1, {block} }}\n"
    result = run(kind, tmp_path / "bad.conf", text, "-t")
    assert result.returncode == 1
    assert error in result.stdout + result.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_single_user_with_users_refused_at_start(kind: str, tmp_path: Path) -> None:
    text = (
        f"jetstream {{ store_dir: '{tmp_path / 'js'}' }}\n"
        "authorization { users: [ { user: a, password: b } ] }\n"
        "mqtt { port: -1, authorization { user: x, password: y } }\n"
    )
    result = run(kind, tmp_path / "mix.conf", text)
    assert result.returncode == 1
    assert (
        "mqtt authentication username not compatible with presence of users/nkeys"
        in result.stdout + result.stderr
    )


def test_js_domain_of_another_jetstream_refused(tmp_path: Path) -> None:
    """nats-server would keep the MQTT state in that domain's JetStream (a hub's); pynatsd keeps it in
    its own, so another domain is refused rather than ignored."""
    text = f"jetstream {{ store_dir: '{tmp_path / 'js'}' }}\nmqtt {{ port: -1, js_domain: hub }}\n"
    result = run("pynatsd", tmp_path / "domain.conf", text)
    assert result.returncode == 1
    assert "mqtt js_domain: pynatsd keeps MQTT state in its own JetStream" in result.stdout + result.stderr


LIMITED = """
max_connections: 2
jetstream {{ store_dir: "{store}" }}
mqtt {{ host: 127.0.0.1, port: {mqtt_port} }}
"""


@pytest.mark.parametrize("kind", KINDS)
def test_mqtt_clients_count_against_max_connections(kind: str, tmp_path: Path) -> None:
    started = start_mqtt_server(kind, tmp_path, LIMITED)
    try:

        def admitted(client_id: bytes) -> RawClient:
            for _ in range(50):  # (the start-up probes' sockets may not be reaped yet)
                client = RawClient(started.mqtt_port)
                if client.connect(client_id=client_id) == 0:
                    return client
                time.sleep(0.05)
            raise AssertionError("never admitted")

        first, second = admitted(b"one"), admitted(b"two")
        third = RawClient(started.mqtt_port)
        assert third.connect(client_id=b"three") is None  # closed at once, as nats-server does
        with socket.create_connection(("127.0.0.1", started.server.port), timeout=5) as nats_client:
            greeting = nats_client.recv(4096)  # a NATS client is one too many as well
            while b"-ERR" not in greeting and (more := nats_client.recv(4096)):
                greeting += more
            assert b"-ERR 'maximum connections exceeded'" in greeting, greeting
        for client in (first, second, third):
            client.close()
    finally:
        started.server.stop()
