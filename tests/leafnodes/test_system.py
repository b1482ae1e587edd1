"""The system account and leaf nodes, as nats-server 2.15.1: `$SYS.REQ.SERVER.PING.LEAFZ` (and the account's
`$SYS.REQ.ACCOUNT.<acc>.LEAFZ`) answered with /leafz's data, and what a system-account client hears while a
leaf connects and disconnects: the account's connection counts (`.SERVER.CONNS`, leaf nodes counted), the
soliciting side's CONNECT, and DISCONNECT on both sides, its client of kind `Leafnode`. Each topology's
events against the same scenario between two nats-servers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.leafnodes.conftest import TOPOLOGIES, track
from tests.servers import ServerProcess, free_port, require, start_server

_SYSTEM = """system_account: SYS
server_name: %s
accounts {
  SYS { users [ {user: sys, password: sys} ] }
  A { users [ {user: a, password: a} ] }
}
"""

Events = dict[str, list[dict[str, Any]]]
_REFERENCE: Events = {}  # nats-server's events, from the first test that needs them


def _hub_config(leaf_port: int) -> str:
    return _SYSTEM % "hub" + (
        f"leafnodes {{\n  listen: 127.0.0.1:{leaf_port}\n"
        "  authorization { users [ {user: la, password: la, account: A} ] }\n}\n"
    )


def _leaf_config(leaf_port: int) -> str:
    return _SYSTEM % "theleaf" + (
        f'leafnodes {{\n  reconnect: "1s"\n  remotes [ {{ url: "nats-leaf://la:la@127.0.0.1:{leaf_port}", '
        "account: A } ]\n}\n"
    )


def _configs(directory: Path) -> tuple[Path, Path]:
    """The hub's and the leaf's configuration files, in `directory`."""
    leaf_port = free_port()
    hub_conf, leaf_conf = directory / "hub.conf", directory / "leaf.conf"
    hub_conf.write_text(_hub_config(leaf_port))
    leaf_conf.write_text(_leaf_config(leaf_port))
    return hub_conf, leaf_conf


class Listener:
    """A system-account client of `server` recording what is published on `$SYS.ACCOUNT.A.>`."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.nc: nats.NATS | None = None

    async def start(self, server: ServerProcess) -> nats.NATS:
        nc = track(await nats.connect(server.url, user="sys", password="sys", allow_reconnect=False))
        self.nc = nc

        async def take(msg: Any) -> None:
            self.events.append((msg.subject, json.loads(msg.data)))

        await nc.subscribe("$SYS.ACCOUNT.A.>", cb=take)
        await nc.flush()
        return nc

    async def linked(self, what: str) -> None:
        """Until the server says its leaf link is up (LEAFZ on this connection: the events its registration
        sent came before the answer), then from here on only: a link that registers after the listener
        subscribed would otherwise add its counts and CONNECT to what the next steps count."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        while True:
            assert self.nc is not None
            reply = await self.nc.request("$SYS.REQ.SERVER.PING.LEAFZ", b"", timeout=5)
            if json.loads(reply.data)["data"]["leafnodes"] == 1:
                break
            assert loop.time() < deadline, f"{what}: the leaf link never came up"
            await asyncio.sleep(0.05)
        self.events.clear()

    async def until(self, count: int, what: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        while len(self.events) < count:
            assert loop.time() < deadline, f"{what}: only {self.events} came"
            await asyncio.sleep(0.02)


def _shown(subject: str, event: dict[str, Any]) -> dict[str, Any]:
    """An event without what differs run to run (ids, times, ports, the servers' own blocks)."""
    shown: dict[str, Any] = {"subject": subject, "type": event["type"], "keys": sorted(event)}
    if "client" in event:  # `rtt`: nats-server measures it at once, pynatsd a second after the handshake
        client = event["client"]
        shown["client_keys"] = sorted(k for k in client if k != "rtt")
        shown["client"] = {k: client[k] for k in ("acc", "user", "name", "name_tag", "kind") if k in client}
        shown["reason"] = event.get("reason")
    else:
        shown["counts"] = {k: event[k] for k in ("acc", "name", "conns", "leafnodes", "total_conns")}
    return shown


async def _scenario(hub_kind: str, leaf_kind: str, directory: Path) -> Events:
    """The hub's and the leaf's system events while the leaf connects, loses its hub, reconnects, and
    stops."""
    hub_conf, leaf_conf = _configs(directory)
    hub = start_server(hub_kind, ["-c", str(hub_conf)])
    leaf: ServerProcess | None = None
    on_hub, on_leaf, on_hub_again = Listener(), Listener(), Listener()
    try:
        hub_nc = await on_hub.start(hub)
        leaf = start_server(leaf_kind, ["-c", str(leaf_conf)])
        await on_hub.until(
            1, "the hub's counts"
        )  # the hub's counts: one leaf node in A (the accepting side has no CONNECT)
        leaf_nc = await on_leaf.start(leaf)
        await on_leaf.linked("the leaf's first link")
        await hub_nc.close()
        hub.stop()
        await on_leaf.until(2, "the leaf's loss")  # the leaf lost its hub: counts, DISCONNECT
        hub = start_server(hub_kind, ["-c", str(hub_conf)], port=hub.port)
        await on_leaf.until(4, "the leaf's reconnect")  # reconnected: counts, CONNECT
        await on_hub_again.start(hub)
        await on_hub_again.linked("the hub's second link")
        await leaf_nc.close()
        leaf.stop()
        await on_hub_again.until(2, "the hub's leaf stopped")  # the leaf stopped: counts, DISCONNECT
    finally:
        if leaf is not None:
            leaf.stop()
        hub.stop()
    # When the leaf stops, nats-server's hub sends the account's counts and the DISCONNECT in either order
    # (both came first in runs here): that pair is compared in subject order.
    stopped = sorted(on_hub_again.events, key=lambda event: event[0])
    hub_events = [e for e in on_hub.events + stopped if "LEAFNODE" not in e[0]]
    return {
        "hub": [_shown(*event) for event in hub_events],
        "leaf": [_shown(*event) for event in on_leaf.events],
    }


@pytest.mark.parametrize("topology", [t for t in TOPOLOGIES if t != "nats-server"])
async def test_leaf_connect_and_disconnect_advisories_as_nats_server(topology: str, tmp_path: Path) -> None:
    require("nats-server")
    hub_kind, leaf_kind = TOPOLOGIES[topology]
    reference = _REFERENCE
    if not reference:
        directory = tmp_path / "reference"
        directory.mkdir()
        reference.update(await _scenario("nats-server", "nats-server", directory))
    ours = await _scenario(hub_kind, leaf_kind, tmp_path)
    assert [e["type"] for e in reference["leaf"]] == [
        "io.nats.server.advisory.v1.account_connections",
        "io.nats.server.advisory.v1.client_disconnect",
        "io.nats.server.advisory.v1.account_connections",
        "io.nats.server.advisory.v1.client_connect",
    ]
    assert ours["hub"] == reference["hub"]
    assert ours["leaf"] == reference["leaf"]


def _leafz_shown(reply: bytes) -> dict[str, Any]:
    """A LEAFZ reply without what differs run to run (the server block, ids, ports, times)."""
    body = json.loads(reply)
    data = body["data"]
    leafs = [
        {
            **{k: v for k, v in leaf.items() if k not in ("id", "name", "port", "rtt", "compression")},
            "subscriptions_list": sorted(
                "$LDS.*" if s.startswith("$LDS.") else s for s in leaf.get("subscriptions_list", [])
            ),
        }
        for leaf in data["leafs"]
    ]
    return {"keys": sorted(body), "data_keys": list(data), "leafnodes": data["leafnodes"], "leafs": leafs}


async def _leafz_replies(kind: str, directory: Path) -> list[dict[str, Any]]:
    hub_conf, leaf_conf = _configs(directory)
    hub = start_server(kind, ["-c", str(hub_conf)])
    leaf = start_server(kind, ["-c", str(leaf_conf)])
    try:
        nc = track(await nats.connect(hub.url, user="sys", password="sys", allow_reconnect=False))
        for _ in range(300):  # until the leaf connected
            reply = await nc.request("$SYS.REQ.SERVER.PING.LEAFZ", b"", timeout=5)
            if json.loads(reply.data)["data"]["leafnodes"]:
                break
            await asyncio.sleep(0.05)
        server_id = json.loads(reply.data)["server"]["id"]
        asked = [
            ("$SYS.REQ.SERVER.PING.LEAFZ", {"subscriptions": True}),
            (f"$SYS.REQ.SERVER.{server_id}.LEAFZ", {"account": "A"}),
            ("$SYS.REQ.SERVER.PING.LEAFZ", {"account": "SYS"}),
            ("$SYS.REQ.ACCOUNT.A.LEAFZ", {}),
            ("$SYS.REQ.ACCOUNT.SYS.LEAFZ", {"subscriptions": True}),
        ]
        return [
            _leafz_shown((await nc.request(subject, json.dumps(body).encode(), timeout=5)).data)
            for subject, body in asked
        ]
    finally:
        leaf.stop()
        hub.stop()


async def test_leafz_requests_as_nats_server(tmp_path: Path) -> None:
    """LEAFZ by PING, by server id and by account, with LeafzOptions' `subscriptions` and `account`."""
    require("nats-server")
    replies = {}
    for kind in ("pynatsd", "nats-server"):
        directory = tmp_path / kind
        directory.mkdir()
        replies[kind] = await _leafz_replies(kind, directory)
    assert [reply["leafnodes"] for reply in replies["nats-server"]] == [1, 1, 0, 1, 0]
    assert replies["pynatsd"] == replies["nats-server"]
