"""A leafnode port without its own `authorization` takes the server's users as a client's CONNECT is
decided (nats-server's isClientAuthorized), beside nats-server 2.15.1: an anonymous leaf of a server with
nkey users only, a user allowed only STANDARD (or only LEAFNODE_WS) connections, and (pynatsd, which does
not apply them on leaf connections: fail closed) a user with permissions are refused; a plain user is
admitted."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

import nkeys
import pytest

from tests.servers import free_port, require, start_server, wait_for_port
from tests.wire import WireClient

_NKEY = nkeys.from_seed(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)).public_key.decode()
CONFIGS = {
    "nkeys only": f"authorization {{ users [ {{nkey: {_NKEY}}} ] }}\n",
    "users": (
        "authorization { users [\n"
        '  {user: std, password: std, allowed_connection_types: ["STANDARD"]}\n'
        "  {user: ok, password: ok}\n"
        "] }\n"
    ),
    # LEAFNODE_WS admits a leaf over WebSocket only (test_a_leafnode_ws_user_is_admitted_over_websocket)
    "leaf types": (
        "authorization { users [\n"
        '  {user: wsonly, password: wsonly, allowed_connection_types: ["LEAFNODE_WS"]}\n'
        '  {user: leaf, password: leaf, allowed_connection_types: ["leafnode"]}\n'
        "] }\n"
    ),
}
CASES = [
    ("nkeys only", {}, False),
    ("users", {}, False),
    ("users", {"user": "std", "pass": "std"}, False),
    ("users", {"user": "ok", "pass": "wrong"}, False),
    ("users", {"user": "ok", "pass": "ok"}, True),
    ("leaf types", {"user": "wsonly", "pass": "wsonly"}, False),
    ("leaf types", {"user": "leaf", "pass": "leaf"}, True),
]
VIOLATION = b"-ERR 'Authorization Violation'"


def _admitted(leaf_port: int, credentials: dict[str, str]) -> bool:
    with WireClient(leaf_port) as wire:
        data, closed = wire.exchange(b"CONNECT " + json.dumps(credentials).encode() + b"\r\n")
    return VIOLATION not in data and not closed


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_leafnode_port_takes_the_servers_users(kind: str, tmp_path: Path) -> None:
    require("nats-server")
    seen: list[bool] = []
    for name, config in CONFIGS.items():
        leaf_port = free_port()
        conf = tmp_path / f"{name.replace(' ', '_')}.conf"
        conf.write_text(config + f"leafnodes {{ listen: 127.0.0.1:{leaf_port} }}\n")
        server = start_server(kind, ["-c", str(conf)])
        try:
            assert server.proc is not None
            wait_for_port(leaf_port, server.proc)
            seen += [_admitted(leaf_port, creds) for case, creds, _ in CASES if case == name]
        finally:
            server.stop()
    assert seen == [admitted for _, _, admitted in CASES]


def test_a_leaf_user_with_permissions_is_refused(tmp_path: Path) -> None:
    """pynatsd does not apply user permissions on leaf connections: such a user is refused, not let in
    with all rights (nats-server applies them)."""
    leaf_port = free_port()
    conf = tmp_path / "perm.conf"
    conf.write_text(
        'authorization { users [ {user: perm, password: perm, permissions: {publish: "only.this"}} ] }\n'
        f"leafnodes {{ listen: 127.0.0.1:{leaf_port} }}\n"
    )
    server = start_server("pynatsd", ["-c", str(conf)])
    try:
        assert server.proc is not None
        wait_for_port(leaf_port, server.proc)
        assert not _admitted(leaf_port, {"user": "perm", "pass": "perm"})
    finally:
        server.stop()


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_a_leaf_message_past_max_payload_closes_the_link(kind: str, tmp_path: Path) -> None:
    """The server's max_payload binds what a leaf sends (a route's is 64 MiB): past it, the link closes."""
    require("nats-server")
    leaf_port = free_port()
    conf = tmp_path / "payload.conf"
    conf.write_text(f"max_payload: 1024\nleafnodes {{ listen: 127.0.0.1:{leaf_port} }}\n")
    server = start_server(kind, ["-c", str(conf)])
    try:
        assert server.proc is not None
        wait_for_port(leaf_port, server.proc)
        with WireClient(leaf_port) as wire:
            _, closed = wire.exchange(b"CONNECT {}\r\n")
            assert not closed
            wire.send(b"LMSG foo 2000\r\n" + b"x" * 2000 + b"\r\n")
            _, closed = wire.read_until(b"\r\n\r\n", timeout=10)  # nothing more: read to the close
        assert closed
    finally:
        server.stop()


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_a_leafnode_ws_user_is_admitted_over_websocket(kind: str, tmp_path: Path) -> None:
    """A server user allowed only `LEAFNODE_WS` connections: a leaf (nats-server's) dialing the hub's
    WebSocket port as that user is admitted (on the leafnode port it is refused, above)."""
    require("nats-server")
    leaf_port, ws_port, http_port = free_port(), free_port(), free_port()
    hub_conf, leaf_conf = tmp_path / "hub.conf", tmp_path / "leaf.conf"
    hub_conf.write_text(
        CONFIGS["leaf types"]
        + f"leafnodes {{ listen: 127.0.0.1:{leaf_port} }}\n"
        + f"websocket {{ listen: 127.0.0.1:{ws_port}, no_tls: true }}\n"
    )
    leaf_conf.write_text(
        f'leafnodes {{ reconnect: "1s", remotes [ {{ url: "ws://wsonly:wsonly@127.0.0.1:{ws_port}" }} ] }}\n'
    )
    hub = start_server(kind, ["-c", str(hub_conf)], http_port=http_port)
    leaf = start_server("nats-server", ["-c", str(leaf_conf)])
    try:
        deadline = time.monotonic() + 15
        while _leafz(http_port)["leafnodes"] < 1:
            assert time.monotonic() < deadline, "the LEAFNODE_WS user was never admitted over WebSocket"
            time.sleep(0.05)
    finally:
        leaf.stop()
        hub.stop()


def _leafz(http_port: int) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/leafz", timeout=10) as response:
        return json.load(response)
