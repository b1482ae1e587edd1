"""What MQTT keeps in JetStream outlives the server, on both servers: a persistent session's
subscriptions and retained messages, after a restart on the same store."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mqtt.conftest import KINDS, RawClient, mqtt_life, packet, publish_packet, subscribe_packet


@pytest.mark.parametrize("kind", KINDS)
def test_session_and_retained_survive_a_restart(kind: str, tmp_path: Path) -> None:
    with mqtt_life(kind, tmp_path) as started:
        client = RawClient(started.mqtt_port)
        assert client.connect(client_id=b"durable", clean=False) == 0
        client.send(subscribe_packet(1, [(b"s/x", 0)]))
        assert client.read() == (0x90, b"\x00\x01\x00")
        client.send(packet(0x31, b"\x00\x03s/r" + b"still here"))  # retained
        client.send(packet(0xE0, b""))
        assert client.closed()
    with mqtt_life(kind, tmp_path, restart_of=started) as again:
        client = RawClient(again.mqtt_port)
        assert client.connect(client_id=b"durable", clean=False) == 0
        assert client.session_present == 1
        publisher = RawClient(again.mqtt_port)
        assert publisher.connect(client_id=b"after-restart") == 0
        publisher.send(publish_packet(b"s/x", b"delivered"))
        assert client.read() == (0x30, b"\x00\x03s/x" + b"delivered")
        publisher.send(subscribe_packet(2, [(b"s/r", 0)]))
        assert publisher.read() == (0x90, b"\x00\x02\x00")
        assert publisher.read() == (0x31, b"\x00\x03s/r" + b"still here")
        client.close()
        publisher.close()
