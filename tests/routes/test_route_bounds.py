"""What a route peer's interest may cost, beside nats-server 2.15: a queue group's weight is one
subscription (not that many), and interest in an account unknown here is logged and ignored (no account
made for it). A raw socket plays the peer; /subsz counts the subscriptions each server holds."""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest

from tests.routes.conftest import Start
from tests.routes.test_frames import FAKE_CONNECT, FAKE_INFO, read_until
from tests.servers import ServerProcess

UNKNOWN_ACCOUNTS = 2000
HUGE_WEIGHT = 2_000_000


def subscriptions(server: ServerProcess) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/subsz", timeout=5) as resp:
        return int(json.load(resp)["num_subscriptions"])


def peer(server: ServerProcess) -> socket.socket:
    route = socket.create_connection(("127.0.0.1", int(str(server.extra["route_port"]))), timeout=10)
    read_until(route, b"\r\n")
    route.sendall(FAKE_CONNECT + FAKE_INFO + b"PING\r\n")
    read_until(route, b"PONG\r\n")
    return route


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_route_interest_is_bounded_by_what_exists_here(node: Start, kind: str) -> None:
    server = node(kind, http=True)
    route = peer(server)
    before = subscriptions(server)
    unknown = b"".join(b"RS+ ghost%d foo.%d\r\n" % (i, i) for i in range(UNKNOWN_ACCOUNTS))
    route.sendall(
        unknown
        + b"RS+ ghost1 work q 5\r\nRS- ghost2 foo.2\r\nRMSG ghost3 foo.3 1\r\nx\r\n"
        + b"RS+ $G work q %d\r\nPING\r\n" % HUGE_WEIGHT
    )
    read_until(route, b"PONG\r\n", timeout=30)  # the route stays up
    # one subscription for the weighted group; none for the unknown accounts
    assert subscriptions(server) == before + 1
    assert 'Unknown account "ghost7" for remote subject "foo.7"' in server.log()
    # the group's weight still picks the remote side: a local member of the group rarely gets one
    client = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    read_until(client, b"\r\n")
    client.sendall(b'CONNECT {"verbose":false}\r\nSUB work q 1\r\nPING\r\n')
    read_until(client, b"PONG\r\n")
    route.sendall(b"PING\r\n")
    read_until(route, b"PONG\r\n")
    client.sendall(b"PUB work 1\r\na\r\nPUB work 1\r\nb\r\nPUB work 1\r\nc\r\nPING\r\n")
    routed = read_until(route, b"RMSG $G work | q 1\r\nc\r\n")
    assert routed.count(b"RMSG $G work | q 1\r\n") == 3
    client.close()
    route.close()
