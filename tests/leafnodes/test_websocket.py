"""Leaf nodes over WebSocket: the leaf's remotes dial the hub's `websocket {}` listener (`ws://`, the
`/leafnode` path), one masked and uncompressed, the other asking for `ws_compression` and `ws_no_masking`;
`wss://` remotes dial its `websocket { tls {} }` port. The matrix's pub/sub, request/reply and hub restart
run on each topology (pynatsd leaf -> nats-server hub, nats-server leaf -> pynatsd hub, pynatsd ->
pynatsd, the nats-server reference), and the hub's /leafz shows both connections. A server without a
leafnode port closes a leaf's upgrade."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pynatsd.websocket.client import leaf_upgrade_request
from tests.leafnodes import test_matrix as matrix
from tests.leafnodes.conftest import (
    TOPOLOGIES,
    Pair,
    collect,
    connect,
    hub_config,
    leaf_config,
    ready,
    settled,
)
from tests.leafnodes.test_matrix import (
    test_pub_sub_both_ways_with_wildcards_and_headers,
    test_request_reply_and_no_responders,
)
from tests.routes.test_tls import route_certs
from tests.servers import ServerProcess, free_port, require, start_server
from tests.websocket.servers import start_ws_server

__all__ = [
    "test_hub_restart_reconnects_and_resends_interest",
    "test_pub_sub_both_ways_with_wildcards_and_headers",
    "test_request_reply_and_no_responders",
]


def _leafz(server: ServerProcess) -> Any:
    url = f"http://127.0.0.1:{server.http_port}/leafz"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


@pytest.fixture(scope="module", params=list(TOPOLOGIES))
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """The hub (leafnode port and WebSocket port) and a leaf whose two remotes dial its WebSocket port,
    both links up."""
    require("nats-server")
    hub_kind, leaf_kind = TOPOLOGIES[request.param]
    directory = tmp_path_factory.mktemp("leaf-ws")
    leaf_port, ws_port = free_port(), free_port()
    hub_conf, leaf_conf = directory / "hub.conf", directory / "leaf.conf"
    hub_conf.write_text(
        hub_config(leaf_port)
        + f"websocket {{ listen: 127.0.0.1:{ws_port}, no_tls: true, compression: true }}\n"
    )
    remotes = leaf_config(ws_port).replace("nats-leaf://", "ws://")
    leaf_conf.write_text(
        remotes.replace("account: B }", "account: B, ws_compression: true, ws_no_masking: true }")
    )
    hub = start_server(hub_kind, ["-c", str(hub_conf)], http_port=free_port())
    leaf = start_server(leaf_kind, ["-c", str(leaf_conf)])
    servers = Pair(hub, leaf, hub_conf, leaf_port)
    try:
        deadline = time.monotonic() + 15
        while _leafz(hub)["leafnodes"] < 2:
            assert time.monotonic() < deadline, "the leaf never connected over WebSocket"
            time.sleep(0.05)
        yield servers
    finally:  # the pair's servers: the restart test replaces its hub (the one started here left running)
        servers.leaf.stop()
        servers.hub.stop()


def test_leafz_shows_the_websocket_links(pair: Pair) -> None:
    leafs = sorted(_leafz(pair.hub)["leafs"], key=lambda entry: entry["account"])
    assert [(entry["account"], entry["ip"]) for entry in leafs] == [("A", "127.0.0.1"), ("B", "127.0.0.1")]


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
async def test_a_server_without_a_leafnode_port_closes_a_leaf_upgrade(kind: str, tmp_path: Path) -> None:
    """The `/leafnode` path on the WebSocket port of a server with no leafnode port: the upgrade is
    answered (nats-server answers before it looks at the kind), then the socket closed, no INFO sent."""
    require("nats-server")
    server, ws_port = start_ws_server(kind, tmp_path)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", ws_port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(leaf_upgrade_request(f"ws://127.0.0.1:{ws_port}", key, False, False))
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
    finally:
        server.stop()
    assert answer.startswith(b"HTTP/1.1 101 ")
    assert answer.endswith(b"\r\n\r\n")


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
async def test_a_remote_whose_upgrade_is_not_answered_dials_again(kind: str, tmp_path: Path) -> None:
    """A `ws://` remote whose hub takes the socket and never answers the upgrade gives up after its wait
    and dials again."""
    require("nats-server")
    dialed = asyncio.Event()
    sockets: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sockets.append(writer)  # (kept open, never answered)
        if len(sockets) == 2:
            dialed.set()

    hub = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = hub.sockets[0].getsockname()[1]
    conf = tmp_path / "leaf.conf"
    conf.write_text(f'leafnodes {{ reconnect: "1s", remotes [ {{ url: "ws://127.0.0.1:{port}" }} ] }}\n')
    leaf = start_server(kind, ["-c", str(conf)])
    try:
        await asyncio.wait_for(dialed.wait(), 15)
    finally:
        leaf.stop()
        for writer in sockets:
            writer.close()
        hub.close()


# Last (it restarts the hub without its monitoring port): the remotes dial ws:// again and resend interest.
test_hub_restart_reconnects_and_resends_interest = matrix.test_hub_restart_reconnects_and_resends_interest


@pytest.mark.parametrize("topology", list(TOPOLOGIES))
def test_a_hub_with_leafnode_tls_takes_websocket_leafs_in_the_clear(topology: str, tmp_path: Path) -> None:
    """As nats-server: leafnode TLS is not negotiated over a WebSocket (the hub's INFO there asks for none,
    and a ws:// remote asks none of it); before, a pynatsd hub tried a TLS upgrade inside the WebSocket."""
    require("nats-server")
    hub_kind, leaf_kind = TOPOLOGIES[topology]
    (tmp_path / "certs").mkdir()
    certs = route_certs(tmp_path / "certs")
    leaf_port, ws_port = free_port(), free_port()
    hub_conf, leaf_conf = tmp_path / "hub.conf", tmp_path / "leaf.conf"
    tls = f'tls {{ cert_file: "{certs["cert"]}", key_file: "{certs["key"]}", ca_file: "{certs["ca"]}" }}'
    hub_conf.write_text(
        hub_config(leaf_port).replace(
            f"listen: 127.0.0.1:{leaf_port}", f"listen: 127.0.0.1:{leaf_port}\n  {tls}"
        )
        + f"websocket {{ listen: 127.0.0.1:{ws_port}, no_tls: true }}\n"
    )
    leaf_conf.write_text(leaf_config(ws_port).replace("nats-leaf://", "ws://"))
    hub = start_server(hub_kind, ["-c", str(hub_conf)], http_port=free_port())
    leaf = start_server(leaf_kind, ["-c", str(leaf_conf)])
    try:
        deadline = time.monotonic() + 15
        while _leafz(hub)["leafnodes"] < 2:
            assert time.monotonic() < deadline, "the leaf never connected over WebSocket"
            time.sleep(0.05)
    finally:
        leaf.stop()
        hub.stop()


@pytest.mark.parametrize("topology", list(TOPOLOGIES))
async def test_wss_remotes_dial_the_hubs_websocket_tls_port(topology: str, tmp_path: Path) -> None:
    """`wss://` (the CA from the remote's `tls {}`) and `ws://` with a `tls {}` block, as nats-server: TLS
    before the upgrade, against a hub whose `websocket { tls {} }` is on; messages cross both links."""
    require("nats-server")
    hub_kind, leaf_kind = TOPOLOGIES[topology]
    (tmp_path / "certs").mkdir()
    certs = route_certs(tmp_path / "certs")
    leaf_port, ws_port = free_port(), free_port()
    hub_conf, leaf_conf = tmp_path / "hub.conf", tmp_path / "leaf.conf"
    hub_conf.write_text(
        hub_config(leaf_port)
        + f'websocket {{ listen: 127.0.0.1:{ws_port}, tls {{ cert_file: "{certs["cert"]}", '
        f'key_file: "{certs["key"]}" }} }}\n'
    )
    ca = f'tls {{ ca_file: "{certs["ca"]}" }}'
    remotes = (
        leaf_config(ws_port)
        .replace("account: A,", f"account: A, {ca},")
        .replace("account: B", f"account: B, {ca}")
    )
    leaf_conf.write_text(remotes.replace("nats-leaf://la", "wss://la").replace("nats-leaf://lb", "ws://lb"))
    hub = start_server(hub_kind, ["-c", str(hub_conf)], http_port=free_port())
    leaf = start_server(leaf_kind, ["-c", str(leaf_conf)])
    try:
        deadline = time.monotonic() + 15
        while _leafz(hub)["leafnodes"] < 2:
            assert time.monotonic() < deadline, "the leaf never connected over WebSocket TLS"
            await asyncio.sleep(0.05)
        for account in ("a", "b"):
            on_hub_client = await connect(hub, account)
            on_leaf_client = await connect(leaf, account)
            received = await collect(on_hub_client, "wss.>")
            await ready(on_hub_client, on_leaf_client)
            await on_leaf_client.publish("wss.up", account.encode())
            await settled(on_leaf_client, on_hub_client, received, "wss.mark")
            assert received == [("wss.up", account.encode())]
    finally:
        leaf.stop()
        hub.stop()
