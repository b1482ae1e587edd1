"""A fast producer is stalled, not the consumer dropped at once: past 75% of max_pending a consumer's queue
makes the producers feeding it wait (nats-server's stall gate). Checked on pynatsd and on nats-server with
the same clients and the same monitoring fields."""

from __future__ import annotations

import json
import re
import socket
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import ServerProcess, free_port, start_server
from tests.wire import WireClient

MAX_PENDING = 2 * 1024 * 1024
FRAME = b"PUB firehose 1024\r\n" + b"x" * 1024 + b"\r\n"


@pytest.fixture(params=["pynatsd", "nats-server"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    conf = tmp_path / "stall.conf"
    conf.write_text(f"max_pending: {MAX_PENDING}\nmax_payload: 65536\n")
    started = start_server(request.param, ["-c", str(conf)], http_port=free_port())
    yield started
    started.stop()


def monitor(server: ServerProcess, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/{path}", timeout=5) as resp:
        return json.load(resp)


def stalled_reader(port: int) -> socket.socket:
    """A subscriber with a small receive buffer that never reads after its PONG."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.settimeout(5)
    sock.sendall(b'CONNECT {"verbose":false}\r\nSUB firehose 1\r\nPING\r\n')
    got = b""
    while b"PONG\r\n" not in got:
        got += sock.recv(4096)
    return sock


def test_a_producer_feeding_a_full_queue_is_stalled_and_then_goes_on(server: ServerProcess) -> None:
    consumer = stalled_reader(server.port)
    producer = WireClient(server.port)
    try:
        producer.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
        assert producer.read_until(b"PONG\r\n")[0].endswith(b"PONG\r\n")
        # 16 MiB, 8 times max_pending: the consumer is cut off in the end, the producer only slowed.
        sender = threading.Thread(target=producer.send, args=(FRAME * 16 * 1024,))
        sender.start()
        sender.join(60)
        assert not sender.is_alive()
        producer.send(b"PING\r\n")
        data, closed = producer.read_until(b"PONG\r\n", timeout=30)
        assert data.endswith(b"PONG\r\n") and not closed

        varz = monitor(server, "varz")
        assert varz["slow_consumers"] == 1
        assert varz["stalled_clients"] >= 1
        if server.kind == "pynatsd":
            with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/metrics", timeout=5) as resp:
                metrics = resp.read().decode()
            (value,) = re.findall(r"^pynatsd_stalled_clients_total(?:\{[^}]*\})? (\S+)$", metrics, re.M)
            assert float(value) == varz["stalled_clients"]
        conns = monitor(server, "connz")["connections"]
        (conn,) = [c for c in conns if c["in_msgs"]]  # the producer, still connected
        assert conn["in_msgs"] == 16 * 1024 and "stalls" not in conn
        # Stalls are counted on the consumer whose queue closed the gate.
        closed_conns = monitor(server, "connz?state=closed")["connections"]
        (gone,) = [c for c in closed_conns if c["reason"] == "Slow Consumer (Pending Bytes)"]
        assert gone["stalls"] >= 1
    finally:
        consumer.close()
        producer.close()


def test_without_stalls_when_no_fast_producer_stall_is_set(tmp_path: Path) -> None:
    conf = tmp_path / "nostall.conf"
    conf.write_text(f"max_pending: {MAX_PENDING}\nmax_payload: 65536\nno_fast_producer_stall: true\n")
    server = start_server("pynatsd", ["-c", str(conf)], http_port=free_port())
    consumer = stalled_reader(server.port)
    producer = WireClient(server.port)
    try:
        producer.send(b'CONNECT {"verbose":false}\r\n' + FRAME * 16 * 1024 + b"PING\r\n")
        data, closed = producer.read_until(b"PONG\r\n", timeout=30)
        assert data.endswith(b"PONG\r\n") and not closed
        varz = monitor(server, "varz")
        assert varz["slow_consumers"] == 1 and varz["stalled_clients"] == 0
    finally:
        consumer.close()
        producer.close()
        server.stop()


def test_a_producer_is_stalled_long_before_75_percent_of_the_default_max_pending() -> None:
    """With the default max_pending (64 MiB) nats-server's 75% gate would let a consumer behind hold 48 MiB
    before a producer waits; nats-server's own producers are held by their consumers' sockets instead
    (they write to them themselves). pynatsd stalls a producer once a consumer it feeds has STALL_BYTES
    pending: 8 MiB (the kernel's socket buffers take up to 4) for a consumer that does not read stall its
    producer, and nobody is cut."""
    server = start_server("pynatsd", http_port=free_port())
    consumer = stalled_reader(server.port)
    producer = WireClient(server.port)
    try:
        count = 8192  # 1 KiB payloads: 8 MiB, a sixth of the 75% gate
        producer.send(b'CONNECT {"verbose":false}\r\n' + FRAME * count + b"PING\r\n")
        data, closed = producer.read_until(b"PONG\r\n", timeout=30)
        assert data.endswith(b"PONG\r\n") and not closed
        varz = monitor(server, "varz")
        assert varz["stalled_clients"] >= 1 and varz["slow_consumers"] == 0
        conns = monitor(server, "connz")["connections"]
        (subscriber,) = [c for c in conns if c["subscriptions"]]
        assert subscriber["stalls"] >= 1
    finally:
        consumer.close()
        producer.close()
        server.stop()
