"""Route frames compared with nats-server 2.15's own: a raw socket plays a route peer to each server."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest

from pynatsd.routes.manager import pool_index
from tests.routes.conftest import Start

FAKE_INFO = (
    b'INFO {"server_id":"NFAKEPEER","server_name":"fake","version":"2.15.1","proto":1,"go":"x",'
    b'"host":"127.0.0.1","port":1,"headers":true,"max_payload":1048576,"cluster":"T"}\r\n'
)
FAKE_CONNECT = (
    b'CONNECT {"echo":true,"verbose":false,"pedantic":false,"tls_required":false,"headers":true,'
    b'"name":"NFAKEPEER","cluster":"T"}\r\n'
)


def read_until(sock: socket.socket, marker: bytes, timeout: float = 5.0) -> bytes:
    data = b""
    deadline = time.monotonic() + timeout
    while marker not in data:
        assert time.monotonic() < deadline, data
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        assert chunk, data
        data += chunk
    return data


def session(port: int, route_port: int) -> dict[str, Any]:
    """What a server says to a route peer: its INFO, the interest it sends for a client's
    subscriptions, what its client gets of routed messages and what the route gets of its client's."""
    route = socket.create_connection(("127.0.0.1", route_port))
    info = json.loads(read_until(route, b"\r\n").split(b" ", 1)[1])
    route.sendall(FAKE_CONNECT + FAKE_INFO + b"PING\r\n")
    read_until(route, b"PONG\r\n")
    client = socket.create_connection(("127.0.0.1", port))
    read_until(client, b"\r\n")
    client.sendall(
        b'CONNECT {"verbose":false,"headers":true}\r\nSUB foo 1\r\nSUB bar q1 2\r\nSUB bar q1 3\r\nPING\r\n'
    )
    read_until(client, b"PONG\r\n")
    route.sendall(b"PING\r\n")  # its PONG comes after the interest the subscriptions sent
    interest = read_until(route, b"RS+ $G bar q1 2\r\n")
    if b"PONG\r\n" not in interest.split(b"RS+ $G bar q1 2\r\n", 1)[1]:
        read_until(route, b"PONG\r\n")
    rs = [line for line in interest.split(b"\r\n") if line.startswith(b"RS") and b" $G " in line]
    route.sendall(
        b"RS+ $G baz\r\nRMSG $G foo reply 2\r\nhi\r\nRMSG $G bar | q1 2\r\nhq\r\n"
        b"HMSG $G foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\nRMSG $G bar 1\r\nx\r\nPING\r\n"
    )
    read_until(route, b"PONG\r\n")
    client.sendall(b"PUB baz r2 3\r\nabc\r\nHPUB baz 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPING\r\n")
    delivered = read_until(client, b"PONG\r\n")
    routed = read_until(route, b"hi\r\n").replace(b"PONG\r\n", b"").replace(b"PING\r\n", b"")
    route.close()
    client.close()
    # the queue group's member is picked at random: either sid is right
    delivered = delivered.replace(b"PONG\r\n", b"").replace(b"MSG bar 3 ", b"MSG bar 2 ")
    return {"info": info, "rs": rs, "delivered": delivered, "routed": routed}


@pytest.mark.parametrize("kind", ["pynatsd"])
def test_route_frames_match_nats_server(node: Start, kind: str) -> None:
    ours = node(kind)
    reference = node("nats-server")
    mine = session(ours.port, int(str(ours.extra["route_port"])))
    theirs = session(reference.port, int(str(reference.extra["route_port"])))
    common = {"server_id", "server_name", "version", "proto", "go", "host", "port", "headers", "max_payload"}
    for info in (mine["info"], theirs["info"]):
        assert common | {"cluster", "connect_urls"} <= set(info)
        assert info["cluster"] == "T"
    # pynatsd's own traffic takes one connection (see pynatsd.routes.manager); nats-server's default pool
    assert (mine["info"]["route_pool_size"], theirs["info"]["route_pool_size"]) == (1, 3)
    assert mine["rs"] == theirs["rs"] == [b"RS+ $G foo", b"RS+ $G bar q1 1", b"RS+ $G bar q1 2"]
    # only the named queue group gets `| q1`; a plain RMSG reaches no queue group
    assert (
        mine["delivered"]
        == theirs["delivered"]
        == (b"MSG foo 1 reply 2\r\nhi\r\nMSG bar 2 2\r\nhq\r\nHMSG foo 1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n")
    )
    assert (
        mine["routed"]
        == theirs["routed"]
        == b"RMSG $G baz r2 3\r\nabc\r\nHMSG $G baz 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    )


def test_soliciting_connect_matches_nats_server(node: Start) -> None:
    """The CONNECT a server sends to a route it solicits (it does not wait for the peer's INFO)."""
    connects = {}
    for kind in ("pynatsd", "nats-server"):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        fake_port = listener.getsockname()[1]
        server = node(kind, args=["--routes", f"nats://ruser:rpass@127.0.0.1:{fake_port}"])
        listener.settimeout(10)
        conn, _ = listener.accept()
        first = read_until(conn, b"\r\n").split(b"\r\n")[0]
        assert first.startswith(b"CONNECT ")
        connects[kind] = json.loads(first[len(b"CONNECT ") :])
        conn.close()
        listener.close()
        server.stop()
    ours, theirs = connects["pynatsd"], connects["nats-server"]
    for key in ("echo", "verbose", "pedantic", "user", "pass", "tls_required", "headers", "cluster"):
        assert ours[key] == theirs[key], key
    assert set(ours) <= set(theirs)
    assert ours["name"] != theirs["name"] and ours["name"].startswith("N")  # each server's own id


def first_reply(route_port: int, data: bytes) -> tuple[bytes, bool]:
    """What a server answers on its route port to `data` (after its INFO), and whether it then closed."""
    sock = socket.create_connection(("127.0.0.1", route_port))
    read_until(sock, b"\r\n")
    sock.sendall(data)
    out = b""
    closed = False
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        sock.settimeout(0.2)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            if out:
                break
            continue
        except ConnectionResetError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        out += chunk
    sock.close()
    lines = [line for line in out.split(b"\r\n") if line and not line.startswith((b"PING", b"PONG", b"INFO"))]
    return b"\r\n".join(lines), closed


@pytest.mark.parametrize(
    "data",
    [
        FAKE_CONNECT + b"BOGUS\r\n",
        FAKE_CONNECT + b'CONNECT {"lang":"python","verbose":false}\r\n',
        b'CONNECT {"lang":"python","verbose":false,"pedantic":false}\r\n',
        b"RS+ $G foo\r\n",
        FAKE_CONNECT.replace(b'"cluster":"T"', b'"cluster":"OTHER"'),
        FAKE_CONNECT
        + FAKE_INFO.replace(b'"cluster":"T"', b'"cluster":"T","route_pool_size":3,"route_account":"A"'),
        FAKE_CONNECT + FAKE_INFO.replace(b'"cluster":"T"', b'"cluster":"T","route_account":"$SYS"'),
        FAKE_CONNECT
        + FAKE_INFO.replace(b'"cluster":"T"', b'"cluster":"T","route_pool_size":3,"route_pool_idx":3'),
    ],
    ids=[
        "unknown-op",
        "second-connect",
        "client-on-route-port",
        "op-before-connect",
        "cluster-name",
        "unpinned-account",
        "pinned-without-pool",
        "pool-index-out-of-range",
    ],
)
def test_bad_route_input_gets_nats_server_answer(node: Start, data: bytes) -> None:
    ours, reference = node("pynatsd"), node("nats-server")
    mine = first_reply(int(str(ours.extra["route_port"])), data)
    theirs = first_reply(int(str(reference.extra["route_port"])), data)
    assert mine == theirs


def test_cluster_advertise_is_the_route_address_in_info(node: Start) -> None:
    infos = {}
    for kind in ("pynatsd", "nats-server"):
        server = node(kind, args=["--cluster_advertise", "10.1.2.3:7244"])
        sock = socket.create_connection(("127.0.0.1", int(str(server.extra["route_port"]))))
        infos[kind] = json.loads(read_until(sock, b"\r\n").split(b" ", 1)[1])
        sock.close()
    for info in infos.values():
        assert (info["host"], info["port"], info["ip"]) == ("10.1.2.3", 7244, "nats-route://10.1.2.3:7244/")


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_an_account_s_interest_takes_the_pool_connection_the_peer_places_it_on(
    node: Start, kind: str
) -> None:
    """A peer pooling 3 connections places the global account on index 2 (nats-server's FNV-1a of the
    name): the server's interest in it goes there, never on index 0, so that it keeps its order with the
    peer's messages and interest for that account."""
    server = node(kind)
    route_port = int(str(server.extra["route_port"]))
    pooled = FAKE_INFO.replace(b'"cluster":"T"', b'"cluster":"T","route_pool_size":3')
    connections = {}
    for idx in (0, 2):
        sock = socket.create_connection(("127.0.0.1", route_port))
        read_until(sock, b"\r\n")
        info = pooled.replace(b"}\r\n", b',"route_pool_idx":%d}\r\n' % idx) if idx else pooled
        sock.sendall(FAKE_CONNECT + info + b"PING\r\n")
        read_until(sock, b"PONG\r\n")
        connections[idx] = sock
    client = socket.create_connection(("127.0.0.1", server.port))
    read_until(client, b"\r\n")
    client.sendall(b'CONNECT {"verbose":false}\r\nSUB placed.here 1\r\nPING\r\n')
    read_until(client, b"PONG\r\n")
    read_until(connections[2], b"RS+ $G placed.here\r\n")
    connections[0].sendall(b"PING\r\n")  # its PONG comes after any interest sent before it
    assert b"placed.here" not in read_until(connections[0], b"PONG\r\n")
    for sock in (client, *connections.values()):
        sock.close()


def test_pool_index_is_nats_server_s() -> None:
    """FNV-1a 32 of the account name modulo the pool size (values from Go's hash/fnv)."""
    assert [pool_index(name, 3) for name in ("$G", "A", "SYS", "$SYS", "orders")] == [2, 0, 0, 0, 2]
    assert pool_index("$G", 1) == 0
