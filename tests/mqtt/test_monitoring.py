"""MQTT clients in monitoring, against pynatsd and nats-server: /connz lists them (type `mqtt`, their
`mqtt_client`), open and closed, with nats-server's fields and counts; their messages reach /varz while
they are connected; pynatsd's /metrics counts their connections and messages."""

from __future__ import annotations

import json
import re
import urllib.request
from typing import Any

import pytest

from tests.mqtt.conftest import MQTTServer, RawClient, publish_packet, settled_varz, subscribe_packet

# What differs from run to run (times, the peer's port, ids) is left out of the comparison, and
# pending_bytes: nats-server 2.15.1 shows an MQTT client's delivered bytes there once written (12 for one
# PUBLISH of 12 bytes), pynatsd what is still unwritten.
VOLATILE = ("cid", "ip", "port", "start", "last_activity", "stop", "rtt", "uptime", "idle", "pending_bytes")


def _get(server: MQTTServer, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.server.http_port}{path}", timeout=10) as answer:
        return str(answer.read().decode())


def _mqtt_entry(server: MQTTServer, query: str, client_id: str) -> dict[str, Any]:
    connections = json.loads(_get(server, "/connz?" + query))["connections"]
    found = [c for c in connections if c.get("mqtt_client") == client_id]
    assert len(found) == 1, connections
    entry = {k: v for k, v in found[0].items() if k not in VOLATILE}
    if "subscriptions_list" in entry:
        entry["subscriptions_list"].sort()  # (nats-server's order is a Go map's)
    return entry


EXPECTED = {
    "kind": "Client",
    "type": "mqtt",
    "in_msgs": 1,
    "out_msgs": 0,  # (nats-server counts no deliveries to an MQTT client)
    "in_bytes": 28,  # the message with its Nmqtt-Pub header, less 2, as nats-server counts it
    "out_bytes": 0,
    "subscriptions": 3,  # a/b, c/# and c/#'s parent level `c`
    "authorized_user": "alice",
    "account": "A",
    "name_tag": "A",
    "mqtt_client": "monitored",
}


def test_connz_and_varz_show_mqtt_clients(mqtt_server: MQTTServer) -> None:
    before = settled_varz(mqtt_server)
    client = RawClient(mqtt_server.mqtt_port)
    assert client.connect(client_id=b"monitored") == 0
    client.send(subscribe_packet(1, [(b"a/b", 0), (b"c/#", 0)]))
    assert client.read() == (0x90, b"\x00\x01\x00\x00")
    client.send(publish_packet(b"a/b", b"hello"))
    assert client.read() == (0x30, b"\x00\x03a/bhello")  # its own message (no echo suppression in MQTT)
    try:
        opened = _mqtt_entry(mqtt_server, "auth=1&subs=1", "monitored")
        assert opened == {**EXPECTED, "subscriptions_list": ["a.b", "c", "c.>"]}
        during = json.loads(_get(mqtt_server, "/varz"))  # live, not only once it closes
        for field, delta in (("connections", 1), ("total_connections", 1), ("in_msgs", 1), ("in_bytes", 28)):
            assert during[field] - before[field] == delta, field
        assert during["in_client_msgs"] - before["in_client_msgs"] == 1
        assert during["out_msgs"] == before["out_msgs"]
    finally:
        client.send(b"\xe0\x00")  # DISCONNECT
        assert client.closed()
    closed = _mqtt_entry(mqtt_server, "state=closed&auth=1", "monitored")
    assert closed == {**EXPECTED, "reason": "Client Closed"}
    after = json.loads(_get(mqtt_server, "/varz"))
    assert after["connections"] == before["connections"]
    assert after["in_msgs"] - before["in_msgs"] == 1


def _metric(text: str, name: str) -> float:
    found = re.search(rf"^{name}{{[^}}]*}} (\S+)$", text, re.MULTILINE)
    assert found is not None, name
    return float(found.group(1))


@pytest.mark.parametrize("mqtt_server", ["pynatsd"], indirect=True)  # (nats-server has no /metrics)
def test_metrics_count_mqtt_connections_and_messages(mqtt_server: MQTTServer) -> None:
    names = ("pynatsd_mqtt_connections", "pynatsd_connections", "pynatsd_mqtt_messages_in_total")
    names += ("pynatsd_mqtt_messages_out_total", "pynatsd_mqtt_bytes_out_total", "pynatsd_messages_in_total")
    before = _get(mqtt_server, "/metrics")
    subscriber = RawClient(mqtt_server.mqtt_port)
    assert subscriber.connect(client_id=b"metered") == 0
    subscriber.send(subscribe_packet(1, [(b"metered", 0)]))
    assert subscriber.read() is not None
    subscriber.send(publish_packet(b"metered", b"12345") * 3)
    assert [subscriber.read() for _ in range(3)] == [(0x30, b"\x00\x07metered12345")] * 3
    during = _get(mqtt_server, "/metrics")
    subscriber.close()
    deltas = {name: _metric(during, name) - _metric(before, name) for name in names}
    assert deltas == {
        "pynatsd_mqtt_connections": 1,
        "pynatsd_connections": 1,
        "pynatsd_mqtt_messages_in_total": 3,
        "pynatsd_mqtt_messages_out_total": 3,
        "pynatsd_mqtt_bytes_out_total": 15,
        "pynatsd_messages_in_total": 3,
    }
