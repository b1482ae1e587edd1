"""Stale and slow routes are counted as routes in /varz `stale_connection_stats` and
`slow_consumer_stats`, not as clients; each case runs on pynatsd and, as the reference, nats-server.

The peer is a raw socket speaking the route handshake: one that never answers PINGs goes stale; one
that subscribes and then stops reading is a slow consumer once the server's buffer for it is full.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.routes.conftest import Start
from tests.servers import ServerProcess, free_port

CLUSTER = "T"


def varz(server: ServerProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/varz", timeout=5) as resp:
        body: dict[str, Any] = json.load(resp)
    return body


def fake_route(server: ServerProcess, subscribe: bytes = b"") -> socket.socket:
    """A route from a made-up server: CONNECT and INFO, then `subscribe` (RS+ lines)."""
    sock = socket.create_connection(("127.0.0.1", server.extra["route_port"]), timeout=5)
    connect = {"verbose": False, "pedantic": False, "name": "FAKEROUTE", "cluster": CLUSTER, "headers": True}
    info = {"server_id": "FAKEROUTE", "server_name": "fake", "cluster": CLUSTER, "headers": True}
    sock.sendall(
        b"CONNECT " + json.dumps(connect).encode() + b"\r\nINFO " + json.dumps(info).encode() + b"\r\n"
    )
    sock.sendall(subscribe)
    return sock


def wait_for(check: Any, timeout: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body: dict[str, Any] = check()
        if body or time.monotonic() > deadline:
            return body
        time.sleep(0.1)


def start_node(node: Start, kind: str, tmp_path: Path, settings: str) -> ServerProcess:
    config = tmp_path / f"{kind}.conf"
    rport = free_port()
    config.write_text(f"{settings}\ncluster {{\n  name: {CLUSTER}\n  listen: 127.0.0.1:{rport}\n}}\n")
    return node(kind, cluster_port=rport, args=["-c", str(config)], name=None, http=True, listen_flag=False)


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_stale_route_counts_as_a_route(node: Start, kind: str, tmp_path: Path) -> None:
    server = start_node(node, kind, tmp_path, 'ping_interval: "250ms"\nping_max: 1')
    sock = fake_route(server)
    try:
        stats = wait_for(lambda: (v := varz(server))["stale_connections"] and v)
    finally:
        sock.close()
    assert stats["stale_connections"] == 1, stats
    assert stats["stale_connection_stats"] == {"clients": 0, "routes": 1, "gateways": 0, "leafs": 0}
    assert stats["slow_consumer_stats"]["routes"] == 0


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_slow_route_counts_as_a_route(node: Start, kind: str, tmp_path: Path) -> None:
    # A 1 s write deadline: nats-server notices a stalled route when a write outlasts it (10 s by default).
    server = start_node(node, kind, tmp_path, 'max_pending: 1048576\nwrite_deadline: "1s"')
    sock = fake_route(server, b"RS+ $G slow.>\r\nPING\r\n")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        sock.recv(4096)  # the server's INFO: the handshake is under way; from now on nothing is read
        time.sleep(0.3)  # the interest is in place
        payload = b"x" * 60000
        frames = b"".join(b"PUB slow.%d %d\r\n%s\r\n" % (i, len(payload), payload) for i in range(50))
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as pub:
            pub.recv(4096)
            pub.sendall(b'CONNECT {"verbose":false}\r\n')
            for _ in range(40):  # up to 120 MB, far beyond what the kernel buffers between the two
                try:
                    pub.sendall(frames)
                except OSError:
                    break
                if varz(server)["slow_consumers"]:
                    break
            stats = wait_for(lambda: (v := varz(server))["slow_consumers"] and v)
    finally:
        sock.close()
    assert stats["slow_consumers"] >= 1, stats
    assert stats["slow_consumer_stats"]["routes"] == stats["slow_consumers"], stats
    assert stats["slow_consumer_stats"]["clients"] == 0, stats
