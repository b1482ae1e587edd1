"""MQTT over WebSocket, against pynatsd and nats-server: the `websocket {}` port takes MQTT clients on a
path ending in `/mqtt` (answered with the `mqtt` subprotocol), paho-mqtt's websockets transport talks to
TCP MQTT clients both ways, the client is an MQTT client in /connz, a user allowed MQTT_WS connections
only gets in that way; without an `mqtt {}` port the path is
refused (404)."""

from __future__ import annotations

import base64
import json
import os
import socket
import urllib.request
from collections.abc import Iterator

import pytest

from tests.mqtt.conftest import CONFIG, KINDS, MQTTServer, RawClient, mqtt_life
from tests.mqtt.test_differential import Paho
from tests.servers import free_port
from tests.websocket.servers import start_ws_server, wait_listening

# The conftest's configuration, with wsonly (MQTT over WebSocket only) in account A, and a websocket port.
ALICE = "{{ user: alice, password: pw }}"
WSONLY = '{{ user: wsonly, password: pw, allowed_connection_types: ["MQTT_WS"] }}'
WS_CONFIG = (
    CONFIG.replace(ALICE, f"{ALICE}\n      {WSONLY}")
    + "websocket {{ host: 127.0.0.1, port: %d, no_tls: true }}\n"
)


@pytest.fixture(scope="module", params=KINDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[MQTTServer, int]]:
    ws_port = free_port()
    config = WS_CONFIG % ws_port
    with mqtt_life(request.param, tmp_path_factory.mktemp(request.param), config) as started:
        wait_listening(ws_port, started.server)
        yield started, ws_port


def _upgrade(port: int, path: str) -> tuple[str, set[str]]:
    """The status line and the header lines (but Date and the accept key) answering an upgrade of `path`."""
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head and (chunk := sock.recv(4096)):
            head += chunk
    status, *lines = head.split(b"\r\n\r\n")[0].decode().split("\r\n")
    return status, {line for line in lines if not line.startswith(("Date:", "Sec-WebSocket-Accept:"))}


def test_the_mqtt_path_answers_with_the_mqtt_subprotocol(server: tuple[MQTTServer, int]) -> None:
    _, ws_port = server
    assert _upgrade(ws_port, "/mqtt") == (
        "HTTP/1.1 101 Switching Protocols",
        {"Upgrade: websocket", "Connection: Upgrade", "Sec-Websocket-Protocol: mqtt"},
    )
    assert _upgrade(ws_port, "/") == (
        "HTTP/1.1 101 Switching Protocols",
        {"Upgrade: websocket", "Connection: Upgrade"},
    )


def test_paho_over_websocket_both_ways(server: tuple[MQTTServer, int]) -> None:
    mqtt_server, ws_port = server
    over_ws = Paho(mqtt_server, "over-ws", websocket_port=ws_port)
    over_tcp = Paho(mqtt_server, "over-tcp")
    try:
        assert over_ws.subscribe("to/ws/#") == [0]
        assert over_tcp.subscribe("to/tcp") == [0]
        over_tcp.publish("to/ws/a", b"from tcp")
        over_ws.publish("to/tcp", b"from ws")
        assert over_ws.wait(1) == [("to/ws/a", b"from tcp")]
        assert over_tcp.wait(1) == [("to/tcp", b"from ws")]
        url = f"http://127.0.0.1:{mqtt_server.server.http_port}/connz"
        with urllib.request.urlopen(url, timeout=10) as answer:
            connections = json.load(answer)["connections"]
        assert [c["type"] for c in connections if c.get("mqtt_client") == "over-ws"] == ["mqtt"]
    finally:
        over_ws.stop()
        over_tcp.stop()


def test_a_user_allowed_mqtt_over_websocket_only(server: tuple[MQTTServer, int]) -> None:
    mqtt_server, ws_port = server
    over_tcp = RawClient(mqtt_server.mqtt_port)
    assert over_tcp.connect(client_id=b"wsonly-tcp", user=b"wsonly", password=b"pw") == 5
    over_tcp.close()
    over_ws = Paho(mqtt_server, "wsonly-ws", user="wsonly", websocket_port=ws_port)
    try:
        assert over_ws.subscribe("ws/only") == [0]  # (a SUBACK: connected)
    finally:
        over_ws.stop()


@pytest.mark.parametrize("kind", KINDS)
def test_the_mqtt_path_is_refused_without_an_mqtt_port(
    kind: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    started, ws_port = start_ws_server(kind, tmp_path_factory.mktemp(kind))
    try:
        status, _ = _upgrade(ws_port, "/mqtt")
        assert status == "HTTP/1.1 404 Not Found"
    finally:
        started.stop()
