"""The accepting side's handshake, byte for byte on a raw socket, pynatsd beside nats-server: the leafnode
INFO, refused credentials, a client on the leafnode port, ops before CONNECT, and a CONNECT that binds
the account (the second INFO, then the loop detection subject's LS+)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.leafnodes.conftest import hub_config
from tests.servers import ServerProcess, free_port, require, start_server, wait_for_port
from tests.wire import WireClient

KINDS = ("pynatsd", "nats-server")


@pytest.fixture(scope="module", params=KINDS)
def hub(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    require("nats-server")
    conf = Path(tmp_path_factory.mktemp("hub") / "hub.conf")
    leaf_port = free_port()
    conf.write_text(hub_config(leaf_port))
    server = start_server(request.param, ["-c", str(conf)])
    server.extra["leaf_port"] = leaf_port
    wait_for_port(leaf_port, server.proc)  # pynatsd opens it after the client port
    yield server
    server.stop()


def _dial(hub: ServerProcess) -> WireClient:
    port = hub.extra["leaf_port"]
    assert isinstance(port, int)
    return WireClient(port)


def test_the_leafnode_info(hub: ServerProcess) -> None:
    with _dial(hub) as wire:
        info = wire.info
    assert info["auth_required"] is True
    assert info["info_on_connect"] is True
    assert info["client_id"] > 0
    assert isinstance(info["nonce"], str) and info["nonce"]
    assert isinstance(info["leafnode_urls"], list) and info["leafnode_urls"]
    assert "connect_urls" not in info


@pytest.mark.parametrize(
    "connect",
    [
        {"user": "la", "pass": "wrong"},
        {"user": "nobody", "pass": "la"},
        {},
    ],
    ids=["wrong password", "unknown user", "no credentials"],
)
def test_refused_credentials(hub: ServerProcess, connect: dict[str, str]) -> None:
    with _dial(hub) as wire:
        wire.send(b"CONNECT " + json.dumps(connect).encode() + b"\r\n")
        data, _ = wire.read_until(b"\r\n")
        assert data == b"-ERR 'Authorization Violation'\r\n"


def test_ops_before_connect(hub: ServerProcess) -> None:
    with _dial(hub) as wire:
        wire.send(b"LS+ foo\r\n")
        data, _ = wire.read_until(b"\r\n")
        assert data == b"-ERR 'Authorization Violation'\r\n"


def test_a_connect_binds_the_account(hub: ServerProcess) -> None:
    with _dial(hub) as wire:
        wire.send(b'CONNECT {"user":"la","pass":"la","headers":true,"name":"x","server_id":"x"}\r\n')
        line = wire.read_line()
        assert line.startswith(b"INFO ")
        info = json.loads(line[5:])
        assert info["connect_info"] is True
        assert info["remote_account"] == "A"
        wire.send(b"PING\r\n")
        data, closed = wire.read_until(b"PONG\r\n")
        assert not closed
        interest = [line for line in data.split(b"\r\n") if line.startswith(b"LS+ ")]
        assert any(line.startswith(b"LS+ $LDS.") for line in interest), data


def test_a_client_on_the_leafnode_port(hub: ServerProcess) -> None:
    with _dial(hub) as wire:
        wire.send(b'CONNECT {"user":"la","pass":"la","lang":"python","version":"2.16"}\r\n')
        data, _ = wire.read_until(b"\r\n")
        assert data == b"-ERR 'attempted to connect to leaf node port'\r\n"
