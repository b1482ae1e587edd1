"""One pynatsd and one nats-server, each with the same `mqtt {}` configuration (module-scoped), and a raw
MQTT 3.1.1 client for byte-exact checks (CONNACK and SUBACK codes, malformed packets)."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.servers import ServerProcess, free_port, require, start_server
from tests.websocket.servers import wait_listening

KINDS = ["pynatsd", "nats-server"]

# alice may do anything; bob only under `open.>`; anonymous MQTT clients are alice (the block's
# no_auth_user). NATS clients connect as alice. carol's account has no JetStream.
CONFIG = """
jetstream {{ store_dir: "{store}" }}
accounts {{
  A {{
    jetstream: enabled
    users = [
      {{ user: alice, password: pw }}
      {{ user: bob, password: pw, permissions: {{ publish: "open.>", subscribe: "open.>" }} }}
    ]
  }}
  NOJS {{ users = [ {{ user: carol, password: pw }} ] }}
}}
mqtt {{ host: 127.0.0.1, port: {mqtt_port}, no_auth_user: alice }}
"""


@dataclass
class MQTTServer:
    kind: str
    server: ServerProcess
    mqtt_port: int

    @property
    def nats_url(self) -> str:
        return f"nats://alice:pw@127.0.0.1:{self.server.port}"


def start_mqtt_server(
    kind: str, tmp: Path, config: str = CONFIG, *, restart_of: MQTTServer | None = None
) -> MQTTServer:
    """`kind` on `config` (its conf file and store in `tmp`), its MQTT port listening; `restart_of` a server
    stopped on the same `tmp`, on its ports (a restart: its clients come back where they were)."""
    require(kind)
    mqtt_port = free_port() if restart_of is None else restart_of.mqtt_port
    port = None if restart_of is None else restart_of.server.port
    conf = tmp / f"{kind}.conf"
    conf.write_text(config.format(store=tmp / f"{kind}-store", mqtt_port=mqtt_port))
    server = start_server(kind, ["-c", str(conf)], port=port, http_port=free_port())
    wait_listening(mqtt_port, server)  # (the MQTT port starts after the client port)
    return MQTTServer(kind, server, mqtt_port)


@contextlib.contextmanager
def mqtt_life(
    kind: str, tmp: Path, config: str = CONFIG, *, restart_of: MQTTServer | None = None, kill: bool = False
) -> Iterator[MQTTServer]:
    """`start_mqtt_server`'s server, stopped on exit: by a kill -9 if `kill`, else by SIGTERM (as
    `tests.servers.server_life`). A restart test is two in a row on the same `tmp`, the second `restart_of`
    the first."""
    started = start_mqtt_server(kind, tmp, config, restart_of=restart_of)
    try:
        yield started
    finally:
        started.server.stop(signal.SIGKILL if kill else signal.SIGTERM)


@pytest.fixture(scope="module", params=KINDS)
def mqtt_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MQTTServer]:
    with mqtt_life(request.param, tmp_path_factory.mktemp(request.param)) as started:
        yield started


def _string(value: bytes) -> bytes:
    return struct.pack(">H", len(value)) + value


def _length(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | 0x80 if n else byte)
        if not n:
            return bytes(out)


def packet(first: int, body: bytes) -> bytes:
    return bytes((first,)) + _length(len(body)) + body


def connect_packet(
    client_id: bytes = b"",
    user: bytes | None = None,
    password: bytes | None = None,
    clean: bool = True,
    keep_alive: int = 30,
    level: int = 4,
    will: tuple[bytes, bytes] | None = None,
    will_qos: int = 0,
    will_retain: bool = False,
) -> bytes:
    flags = 0x02 if clean else 0
    payload = _string(client_id)
    if will is not None:
        flags |= 0x04 | will_qos << 3 | (0x20 if will_retain else 0)
        payload += _string(will[0]) + _string(will[1])
    if user is not None:
        flags |= 0x80
        payload += _string(user)
    if password is not None:
        flags |= 0x40
        payload += _string(password)
    body = _string(b"MQTT") + bytes((level, flags)) + struct.pack(">H", keep_alive) + payload
    return packet(0x10, body)


def subscribe_packet(packet_id: int, filters: list[tuple[bytes, int]]) -> bytes:
    return packet(0x82, struct.pack(">H", packet_id) + b"".join(_string(f) + bytes((q,)) for f, q in filters))


def unsubscribe_packet(packet_id: int, filters: list[bytes]) -> bytes:
    return packet(0xA2, struct.pack(">H", packet_id) + b"".join(_string(f) for f in filters))


def publish_packet(topic: bytes, payload: bytes) -> bytes:
    return packet(0x30, _string(topic) + payload)


class RawClient:
    """A blocking MQTT socket: whole packets in, (first byte, body) out; None at end of stream."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""
        self.session_present = 0  # of the last CONNACK

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, n: int) -> bool:
        while len(self.buf) < n:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return False
            self.buf += chunk
        return True

    def read(self) -> tuple[int, bytes] | None:
        if not self._fill(2):
            return None
        length, multiplier, pos = 0, 1, 1
        while True:
            if not self._fill(pos + 1):
                return None
            byte = self.buf[pos]
            pos += 1
            length += (byte & 0x7F) * multiplier
            multiplier *= 128
            if not byte & 0x80:
                break
        if not self._fill(pos + length):
            return None
        first, body = self.buf[0], self.buf[pos : pos + length]
        self.buf = self.buf[pos + length :]
        return first, body

    def connect(self, **kwargs: object) -> int | None:
        """Send CONNECT; the CONNACK return code, or None if the server closed without one."""
        self.send(connect_packet(**kwargs))  # type: ignore[arg-type]
        reply = self.read()
        if reply is None:
            return None
        assert reply[0] == 0x20, reply
        self.session_present = reply[1][0]
        return reply[1][1]

    def closed(self) -> bool:
        """True once the server has closed the connection (anything it sent before is skipped)."""
        while True:
            if self.read() is None:
                return True

    def close(self) -> None:
        self.sock.close()


def subscribed(port: int, client_id: bytes, *filters: bytes) -> RawClient:
    """A raw client connected as `client_id` and subscribed (QoS 0) to `filters`."""
    client = RawClient(port)
    assert client.connect(client_id=client_id) == 0
    client.send(subscribe_packet(1, [(f, 0) for f in filters]))
    assert client.read() == (0x90, b"\x00\x01" + bytes(len(filters)))
    return client


def varz(server: MQTTServer) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.server.http_port}/varz", timeout=10) as answer:
        return dict(json.load(answer))


def settled_varz(server: MQTTServer) -> dict[str, Any]:
    """/varz once the connections before (the listening probe's, which nats-server may accept only once
    its MQTT setup is done) are accepted and gone: a client's CONNACK comes after their accept."""
    settle = RawClient(server.mqtt_port)
    assert settle.connect(client_id=b"settle") == 0
    settle.close()
    deadline = time.monotonic() + 10
    while (found := varz(server))["connections"] and time.monotonic() < deadline:
        time.sleep(0.02)
    return found
