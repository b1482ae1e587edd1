"""Leaf nodes over TLS (`leafnodes { tls {} }` on the hub, a remote's `tls {}` and `tls://` URL): the
hub sends its INFO in plaintext with `tls_required`, the leaf upgrades, then CONNECT; mutual TLS with
`verify`, each way round with nats-server; a leaf whose certificate another CA signed never connects."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.leafnodes.conftest import _ACCOUNTS, TOPOLOGIES, collect, connect, ready, settled
from tests.routes.conftest import wait_routed
from tests.routes.test_tls import route_certs
from tests.servers import ServerProcess, free_port, require, start_server

pytestmark = pytest.mark.asyncio


def _tls(certs: dict[str, str], extra: str = "") -> str:
    return (
        f'tls {{ cert_file: "{certs["cert"]}", key_file: "{certs["key"]}", ca_file: "{certs["ca"]}"{extra} }}'
    )


@dataclass
class TlsPair:
    hub: ServerProcess
    leaf: ServerProcess
    stranger: ServerProcess  # a leaf whose certificate another CA signed


def _leafz(server: ServerProcess) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/leafz", timeout=5) as response:
        return json.load(response)


@pytest.fixture(scope="module", params=list(TOPOLOGIES))
def tls_pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsPair]:
    require("nats-server")
    hub_kind, leaf_kind = TOPOLOGIES[request.param]
    directory = tmp_path_factory.mktemp("leaf-tls")
    (directory / "ours").mkdir()
    (directory / "foreign").mkdir()
    ours, foreign = route_certs(directory / "ours"), route_certs(directory / "foreign", "another CA")
    port = free_port()
    hub_conf, leaf_conf, stranger_conf = (directory / f"{n}.conf" for n in ("hub", "leaf", "stranger"))
    hub_conf.write_text(
        _ACCOUNTS + f"leafnodes {{\n  listen: 127.0.0.1:{port}\n  {_tls(ours, ', verify: true')}\n"
        "  authorization { users [ {user: la, password: la, account: A} ] }\n}\n"
    )

    def remote(certs: dict[str, str]) -> str:
        return (
            _ACCOUNTS + 'leafnodes {\n  reconnect: "1s"\n  remotes [\n'
            f'    {{ url: "tls://la:la@127.0.0.1:{port}", account: A, {_tls(certs)} }}\n  ]\n}}\n'
        )

    leaf_conf.write_text(remote(ours))
    stranger_conf.write_text(remote({**foreign, "ca": ours["ca"]}))  # it trusts the hub
    hub = start_server(hub_kind, ["-c", str(hub_conf)], http_port=free_port(), log_dir=directory)
    leaf = start_server(leaf_kind, ["-c", str(leaf_conf)], log_dir=directory)
    stranger = start_server(leaf_kind, ["-c", str(stranger_conf)], log_dir=directory)
    yield TlsPair(hub, leaf, stranger)
    for server in (stranger, leaf, hub):
        server.stop()


async def test_pub_sub_across_a_tls_leaf_connection(tls_pair: TlsPair) -> None:
    hub, leaf = await connect(tls_pair.hub), await connect(tls_pair.leaf)
    for pub, sub in ((leaf, hub), (hub, leaf)):
        received = await collect(sub, "tls.>")
        await ready(sub, pub)
        await pub.publish("tls.one", b"across")
        await settled(pub, sub, received, "tls.end")
        assert received == [("tls.one", b"across")]


async def test_a_leaf_of_another_ca_never_connects(tls_pair: TlsPair) -> None:
    """The hub refuses the handshake of the stranger's certificate, as nats-server's: it logs a TLS
    handshake error, /leafz lists only the good leaf, and no interest crosses."""
    hub, stranger = await connect(tls_pair.hub), await connect(tls_pair.stranger)
    await wait_routed(await connect(tls_pair.leaf), hub)  # the good leaf is up
    deadline = time.monotonic() + 15
    while "handshake error" not in tls_pair.hub.log().lower():
        assert time.monotonic() < deadline, tls_pair.hub.log()
        time.sleep(0.05)
    with pytest.raises(AssertionError, match="no route"):
        await wait_routed(stranger, hub, timeout=1.0)
    leafz = _leafz(tls_pair.hub)
    assert leafz["leafnodes"] == 1
    assert [leaf["account"] for leaf in leafz["leafs"]] == ["A"]


async def test_varz_shows_the_leafnode_tls_timeouts(tls_pair: TlsPair) -> None:
    """A TLS listener's /varz `leaf` block: its TLS timeout, and (nats-server's default) the auth timeout a
    second more; both hubs of the layout are compared with nats-server's own defaults (2 s and 3 s)."""
    url = f"http://127.0.0.1:{tls_pair.hub.http_port}/varz"
    with urllib.request.urlopen(url, timeout=5) as response:
        leaf = json.load(response)["leaf"]
    assert (leaf["tls_timeout"], leaf["auth_timeout"]) == (2, 3)
