"""What clients hear of the cluster: connect_urls and async INFOs (joins, lame duck mode, no_advertise),
compared between pynatsd and nats-server on raw client sockets."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from typing import Any

import pytest

from tests.routes.conftest import Start
from tests.servers import REPO_ROOT, ServerProcess, nats_server_binary, pynatsd_command
from tests.wire import WireClient


def next_info(client: WireClient, timeout: float = 10.0) -> dict[str, Any]:
    """The next INFO the server sends (async INFOs about the cluster); PINGs are answered."""
    deadline = time.monotonic() + timeout
    while True:
        line = client.read_line(max(0.05, deadline - time.monotonic()))
        if line.startswith(b"PING"):
            client.send(b"PONG\r\n")
        elif line.startswith(b"INFO "):
            return dict(json.loads(line[5:]))


def own_urls(server: ServerProcess, urls: list[str]) -> list[str]:
    return [u for u in urls if u.endswith(f":{server.port}")]


@pytest.mark.parametrize(("kind", "peer_kind"), [("pynatsd", "nats-server"), ("nats-server", "pynatsd")])
def test_async_info_follows_the_cluster_and_lame_duck(node: Start, kind: str, peer_kind: str) -> None:
    """A protocol-1 client hears of a joining server, then of its lame duck mode (its URL is dropped)."""
    here = node(kind)
    with WireClient(here.port) as client:
        client.send(b'CONNECT {"protocol":1,"verbose":false}\r\nPING\r\n')
        client.read_until(b"PONG\r\n")
        peer = node(peer_kind, routes=[here])
        deadline = time.monotonic() + 10
        info: dict[str, Any] = {}
        while not own_urls(peer, info.get("connect_urls") or []):
            assert time.monotonic() < deadline, info
            info = next_info(client)
        assert info["cluster"] == "T"
        # the peer keeps a client so that its lame duck mode lasts (with none it would just exit)
        with WireClient(peer.port) as keeper:
            keeper.send(b"CONNECT {}\r\n")
            peer.proc.send_signal(signal.SIGUSR2)
            while own_urls(peer, info.get("connect_urls") or []):
                assert time.monotonic() < deadline + 10, info
                info = next_info(client)
            assert peer.proc.poll() is None  # still in lame duck mode: the INFO said so, not a closed route
    # Either server in lame duck mode outlasts the fixture's SIGTERM and its 10 s wait (measured: 10.0 s of
    # teardown per row); how it exits is not this test's question.
    peer.stop(signal.SIGKILL)


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_no_advertise_keeps_other_servers_out_of_client_info(node: Start, kind: str) -> None:
    here = node(kind, args=["--no_advertise"])
    peer = node("pynatsd" if kind == "nats-server" else "nats-server", routes=[here])
    with WireClient(peer.port) as on_peer:
        on_peer.send(b"CONNECT {}\r\nSUB x 1\r\nPING\r\n")
        on_peer.read_until(b"PONG\r\n")
        deadline = time.monotonic() + 10
        while True:  # the route is up once a message crosses it
            with WireClient(here.port) as probe:
                probe.send(b"CONNECT {}\r\nPUB x 1\r\nx\r\nPING\r\n")
                probe.read_until(b"PONG\r\n")
                info = probe.info
            try:
                on_peer.read_until(b"MSG", timeout=0.3)
                break
            except TimeoutError:
                pass
            assert time.monotonic() < deadline
    assert not own_urls(peer, info.get("connect_urls") or []), info


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_a_busy_route_port_stops_the_server(kind: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        command = pynatsd_command() if kind == "pynatsd" else [str(nats_server_binary())]
        done = subprocess.run(
            [*command, "-a", "127.0.0.1", "-p", "-1", "--cluster", f"nats://127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=REPO_ROOT,
        )
    assert done.returncode == 1, done
    assert f"Error listening on router port: {port} - " in done.stderr, done.stderr


@pytest.mark.parametrize(("kind", "peer_kind"), [("pynatsd", "nats-server"), ("nats-server", "pynatsd")])
def test_async_info_when_a_server_leaves(node: Start, kind: str, peer_kind: str) -> None:
    here = node(kind)
    peer = node(peer_kind, routes=[here])
    with WireClient(here.port) as client:
        client.send(b'CONNECT {"protocol":1,"verbose":false}\r\nPING\r\n')
        client.read_until(b"PONG\r\n")
        info = client.info
        deadline = time.monotonic() + 10
        while not own_urls(peer, info.get("connect_urls") or []):
            assert time.monotonic() < deadline, info
            info = next_info(client)
        peer.stop(signal.SIGKILL)
        while own_urls(peer, info.get("connect_urls") or []):
            assert time.monotonic() < deadline + 10, info
            info = next_info(client)


def test_listening_on_all_addresses_advertises_every_interface_address(node: Start) -> None:
    """A clustered server listening on 0.0.0.0 gives its peers (who tell their clients) every address
    another host can dial (nats-server's non-local interface addresses): the same hosts as nats-server,
    not a loopback address nobody else can reach."""
    hosts = {}
    for kind in ("pynatsd", "nats-server"):
        wide = node(kind, args=["-a", "0.0.0.0"])
        peer = node(kind, routes=[wide])
        deadline = time.monotonic() + 10
        with WireClient(peer.port) as client:
            client.send(b'CONNECT {"protocol":1,"verbose":false}\r\nPING\r\n')
            client.read_until(b"PONG\r\n")
            info = client.info
            while not own_urls(wide, info.get("connect_urls") or []):
                assert time.monotonic() < deadline, info
                info = next_info(client)
        hosts[kind] = [u.rsplit(":", 1)[0] for u in own_urls(wide, info["connect_urls"])]
    assert sorted(hosts["pynatsd"]) == sorted(hosts["nats-server"])  # the order is each one's interface walk
    assert not any(h.startswith("127.") or h == "[::1]" for h in hosts["pynatsd"]), hosts
