"""MQTT input that should not hurt the server, against pynatsd and nats-server: malformed, truncated and
oversized packets close their own connection at once, with nothing sent back (what nats-server does);
a flood of CONNECTs over many sockets, and one client's flood of QoS 0 PUBLISHes, leave the server
responsive (a fresh NATS client's CONNECT -> PONG within tests/fairness's bounds: the MQTT reader is
under the server's one per-turn budget and stall gate) and lose nothing for other clients. Neither
logs a traceback."""

from __future__ import annotations

import socket
import statistics
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.fairness.test_flood_latency import BOUND, MEDIAN_BOUND, _connect, _latencies_during, _read_until
from tests.mqtt.conftest import (
    CONFIG,
    KINDS,
    MQTTServer,
    RawClient,
    connect_packet,
    mqtt_life,
    packet,
    publish_packet,
    subscribed,
)

# The conftest's accounts, with anonymous NATS clients as alice too (the fairness probes send no user).
ROBUST_CONFIG = "no_auth_user: alice\n" + CONFIG


@pytest.fixture(scope="module", params=KINDS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MQTTServer]:
    with mqtt_life(request.param, tmp_path_factory.mktemp(request.param), ROBUST_CONFIG) as started:
        yield started
        log = started.server.log()
        assert "Traceback" not in log and "panic:" not in log, log[-4000:]


def _length(n: int) -> bytes:
    """A remaining length of `n` in exactly 3 bytes (a fixed header announcing more than is sent)."""
    return bytes((0x80 | n & 0x7F, 0x80 | n >> 7 & 0x7F, n >> 14))


def _replies_until_closed(
    port: int, data: bytes, after_connect: bool, half_close: bool
) -> list[tuple[int, bytes]]:
    """The packets the server sends after `data` (after a CONNECT and its CONNACK first, if
    `after_connect`) until it closes the connection; a server still waiting after 5 s fails the test
    (the socket's timeout)."""
    client = RawClient(port)
    try:
        if after_connect:
            assert client.connect(client_id=b"robust-" + uuid.uuid4().hex[:8].encode()) == 0
        client.send(data)
        if half_close:
            client.sock.shutdown(socket.SHUT_WR)
        replies = []
        while (reply := client.read()) is not None:
            replies.append(reply)
        return replies
    finally:
        client.close()


MALFORMED = {
    # before the CONNECT
    "reserved type 0 first": (False, b"\x00\x00"),
    "CONNECT with fixed header flags": (False, b"\x11" + connect_packet(client_id=b"flags")[1:]),
    "truncated CONNECT, then end of input": (False, connect_packet(client_id=b"truncated")[:-3]),
    "CONNECT of max_payload + 1": (False, b"\x10" + _length(1024 * 1024 + 1)),
    # after it
    "reserved type 0": (True, b"\x00\x00"),
    "PUBREL without its fixed flags": (True, b"\x60\x02\x00\x01"),
    "PUBACK with a 3-byte body": (True, b"\x40\x03\x00\x01\x00"),
    "DISCONNECT with a body": (True, b"\xe0\x01\x00"),
    "SUBSCRIBE asking QoS 3": (True, packet(0x82, b"\x00\x01\x00\x01a\x03")),
    "a 5th remaining length byte": (True, b"\x30\xff\xff\xff\xff\x01"),
    "PUBLISH announcing 1.5 MiB": (True, b"\x30" + _length(3 * 512 * 1024)),
    "truncated PUBLISH, then end of input": (True, publish_packet(b"t", b"xxxxxx")[:-2]),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_packets_close_at_once_without_a_reply(server: MQTTServer, case: str) -> None:
    after_connect, data = MALFORMED[case]
    assert _replies_until_closed(server.mqtt_port, data, after_connect, "end of input" in case) == []


def _connect_flood(port: int, stop: threading.Event, codes: list[int | None]) -> None:
    """New MQTT clients one after another, each kept open for a while (up to 100 at once)."""
    open_clients: list[RawClient] = []
    try:
        while not stop.is_set():
            client = RawClient(port)
            codes.append(client.connect(client_id=b"flood-" + uuid.uuid4().hex.encode()))
            open_clients.append(client)
            if len(open_clients) > 100:
                open_clients.pop(0).close()
    finally:
        for client in open_clients:
            client.close()


def _report(kind: str, flood: str, handshakes: list[float], pings: list[float]) -> str:
    median = statistics.median(handshakes)
    return (
        f"{kind}, {flood}: handshake median {median * 1000:.1f} ms, max {max(handshakes) * 1000:.1f} ms, "
        f"ping max {max(pings) * 1000:.1f} ms"
    )


def _assert_responsive(report: str, handshakes: list[float], pings: list[float]) -> None:
    print(report)
    assert statistics.median(handshakes) <= MEDIAN_BOUND, report
    assert max(handshakes) < BOUND and max(pings) < BOUND, report


def test_a_connect_flood_leaves_the_server_responsive(server: MQTTServer) -> None:
    stop = threading.Event()
    codes: list[list[int | None]] = [[], []]
    floods = [
        threading.Thread(target=_connect_flood, args=(server.mqtt_port, stop, c), daemon=True) for c in codes
    ]
    handshakes, pings = _latencies_during(server.server, floods, stop)
    _assert_responsive(_report(server.kind, "CONNECT flood", handshakes, pings), handshakes, pings)
    every = codes[0] + codes[1]
    assert len(every) > 20 and set(every) == {0}, (len(every), set(every))


FLOOD_CHUNK_MESSAGES = 1000
FLOOD_SECONDS = 2.5
PAYLOAD = b"x" * 16
# What a NATS subscriber to `flood.t` receives per message (nats-server's Nmqtt-Pub header).
NATS_FRAME = b"HMSG flood.t 1 25 41\r\nNATS/1.0\r\nNmqtt-Pub:0\r\n\r\n" + PAYLOAD + b"\r\n"


def _publish_flood(port: int, stop: threading.Event, sent: list[int]) -> None:
    """One MQTT client's QoS 0 PUBLISHes, whole chunks at a time, for FLOOD_SECONDS; then a PINGREQ,
    answered once everything before it is processed."""
    chunk = publish_packet(b"flood/t", PAYLOAD) * FLOOD_CHUNK_MESSAGES
    client = RawClient(port)
    try:
        assert client.connect(client_id=b"flooder") == 0
        deadline = time.monotonic() + FLOOD_SECONDS
        while not stop.is_set() and time.monotonic() < deadline:
            client.sock.sendall(chunk)
            sent[0] += FLOOD_CHUNK_MESSAGES
        client.sock.settimeout(60)
        client.send(b"\xc0\x00")
        assert client.read() == (0xD0, b"")
    finally:
        client.close()


def _beside_the_flood(port: int, watcher: RawClient, got: list[tuple[int, bytes] | None]) -> None:
    """Another MQTT client's messages, to `watcher`, once the flood runs."""
    time.sleep(0.5)
    other = RawClient(port)
    try:
        assert other.connect(client_id=b"flood-other") == 0
        other.send(b"".join(publish_packet(b"other/t", b"%d" % i) for i in range(100)))
        watcher.sock.settimeout(30)
        got.extend(watcher.read() for _ in range(100))
    finally:
        other.close()


def _count_frames(sock: socket.socket) -> int:
    """NATS_FRAMEs read until the PONG after them (nothing else among them)."""
    sock.sendall(b"PING\r\n")
    received = bytearray()
    while not received.endswith(b"PONG\r\n"):
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        received += chunk
    body = bytes(received[: -len(b"PONG\r\n")]).replace(b"PING\r\n", b"")  # (the server's own PINGs)
    assert body == NATS_FRAME * (len(body) // len(NATS_FRAME)), body[:200]
    return len(body) // len(NATS_FRAME)


def test_a_qos0_publish_flood_leaves_the_server_responsive_and_loses_nothing(server: MQTTServer) -> None:
    nats_sub = _connect(server.server.port)
    _read_until(nats_sub, b"\r\n")
    nats_sub.sendall(b'CONNECT {"verbose":false,"headers":true}\r\nSUB flood.t 1\r\nPING\r\n')
    _read_until(nats_sub, b"PONG\r\n")
    watcher = subscribed(server.mqtt_port, b"flood-watcher", b"other/t")
    stop = threading.Event()
    sent = [0]
    got: list[tuple[int, bytes] | None] = []
    flood = threading.Thread(target=_publish_flood, args=(server.mqtt_port, stop, sent), daemon=True)
    beside = threading.Thread(target=_beside_the_flood, args=(server.mqtt_port, watcher, got), daemon=True)
    try:
        handshakes, pings = _latencies_during(server.server, [flood, beside], stop)
        flood.join(60)
        beside.join(30)
        assert got == [(0x30, b"\x00\x07other/t" + b"%d" % i) for i in range(100)]
        assert not flood.is_alive()
        nats_sub.settimeout(60)
        assert _count_frames(nats_sub) == sent[0]
    finally:
        stop.set()
        nats_sub.close()
        watcher.close()
    _assert_responsive(_report(server.kind, "QoS 0 PUBLISH flood", handshakes, pings), handshakes, pings)
