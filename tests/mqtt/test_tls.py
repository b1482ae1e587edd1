"""The MQTT port with `tls {}`, on both servers: paho-mqtt over TLS gets its messages, a plaintext
CONNECT gets no CONNACK, and /varz says the TLS timeout."""

from __future__ import annotations

import json
import ssl
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from cryptography import x509

from tests.mqtt.conftest import KINDS, MQTTServer, RawClient, mqtt_life
from tests.security.certs import make_certs

TLS_CONFIG = """
jetstream {{ store_dir: "{store}" }}
mqtt {{ host: 127.0.0.1, port: {mqtt_port}, tls {{ cert_file: "CERT", key_file: "KEY", timeout: 3 }} }}
"""


@pytest.fixture(scope="module", params=KINDS)
def tls_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[MQTTServer, str, str]]:
    tmp = tmp_path_factory.mktemp(f"tls-{request.param}")
    certs = make_certs(tmp)
    config = TLS_CONFIG.replace("CERT", certs["server"]).replace("KEY", certs["server_key"])
    with mqtt_life(request.param, tmp, config) as started:
        yield started, certs["ca"], certs["server"]


def test_paho_over_tls(tls_server: tuple[MQTTServer, str, str]) -> None:
    server, ca, _cert = tls_server
    received: list[tuple[str, bytes]] = []
    subscribed, got = threading.Event(), threading.Event()
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="tls-client", protocol=paho.MQTTv311)
    client.tls_set(ca_certs=ca, cert_reqs=ssl.CERT_REQUIRED)
    client.on_subscribe = lambda *args: subscribed.set()

    def on_message(c: object, userdata: object, message: paho.MQTTMessage) -> None:
        received.append((message.topic, message.payload))
        got.set()

    client.on_message = on_message
    client.connect("localhost", server.mqtt_port, keepalive=30)
    client.loop_start()
    try:
        client.subscribe("secure/#", 0)
        assert subscribed.wait(10)
        client.publish("secure/x", b"over tls", qos=0)
        assert got.wait(10)
    finally:
        client.disconnect()
        client.loop_stop()
    assert received == [("secure/x", b"over tls")]


def test_plaintext_connect_gets_no_connack(tls_server: tuple[MQTTServer, str, str]) -> None:
    plain = RawClient(tls_server[0].mqtt_port)
    assert plain.connect(client_id=b"plain") is None


def test_varz_tls_timeout(tls_server: tuple[MQTTServer, str, str]) -> None:
    server, _ca, cert = tls_server
    expiry = x509.load_pem_x509_certificate(Path(cert).read_bytes()).not_valid_after_utc
    with urllib.request.urlopen(f"http://127.0.0.1:{server.server.http_port}/varz", timeout=10) as answer:
        block = json.load(answer)["mqtt"]
    assert block.pop("tls_cert_not_after") == expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert block == {"host": "127.0.0.1", "port": server.mqtt_port, "tls_timeout": 3}


def test_unsupported_tls_key_refused(tmp_path: Path) -> None:
    from tests.mqtt.test_config import run

    js = f"jetstream {{ store_dir: '{tmp_path / 'js'}' }}\n"
    text = js + "mqtt { port: -1, tls { cert_file: x, key_file: y, pinned_certs: [] } }\n"
    result = run("pynatsd", tmp_path / "tls.conf", text, "-t")
    assert result.returncode == 1
    assert "mqtt tls: unsupported field(s) pinned_certs" in result.stdout + result.stderr
