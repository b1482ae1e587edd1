"""A hub and a leaf node of real servers (pynatsd and nats-server, each way round) for the leafnode tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.routes.conftest import wait_routed
from tests.servers import ServerProcess, free_port, require, start_server

# (hub, leaf) per topology; "nats-server" alone is the reference, nats-server on both sides (the root
# conftest runs it in the compiled pass only).
TOPOLOGIES = {
    "pynatsd-leaf>nats-server-hub": ("nats-server", "pynatsd"),
    "nats-server-leaf>pynatsd-hub": ("pynatsd", "nats-server"),
    "pynatsd-leaf>pynatsd-hub": ("pynatsd", "pynatsd"),
    "nats-server": ("nats-server", "nats-server"),
}

# Two accounts on each side; the hub's leafnode users bind A and B, the leaf's remotes dial one for each.
_ACCOUNTS = """accounts {
  A { users [ {user: a, password: a} ] }
  B { users [ {user: b, password: b} ] }
}
"""


# The hub's account A imports a service of its account S (a leaf's request reaches it through A's import).
_HUB_ACCOUNTS = _ACCOUNTS.replace(
    "A { users [ {user: a, password: a} ] }",
    'A { users [ {user: a, password: a} ], imports [ {service: {account: S, subject: "time"}} ] }\n'
    '  S { users [ {user: s, password: s} ], exports [ {service: "time"} ] }',
)


def hub_config(leaf_port: int) -> str:
    return _HUB_ACCOUNTS + (
        f"leafnodes {{\n  listen: 127.0.0.1:{leaf_port}\n"
        "  authorization { users [\n    {user: la, password: la, account: A}\n"
        "    {user: lb, password: lb, account: B}\n  ] }\n}\n"
    )


def leaf_config(leaf_port: int) -> str:
    return _ACCOUNTS + (
        'leafnodes {\n  reconnect: "1s"\n  remotes [\n'
        f'    {{ url: "nats-leaf://la:la@127.0.0.1:{leaf_port}", account: A, '
        'deny_imports: ["in.denied.>"], deny_exports: ["out.denied.>"] }\n'
        f'    {{ url: "nats-leaf://lb:lb@127.0.0.1:{leaf_port}", account: B }}\n  ]\n}}\n'
    )


@dataclass
class Pair:
    hub: ServerProcess
    leaf: ServerProcess
    hub_conf: Path
    leaf_port: int

    def restart_hub(self) -> None:
        kind, port = self.hub.kind, self.hub.port
        self.hub.stop()
        self.hub = start_server(kind, ["-c", str(self.hub_conf)], port=port)


@pytest.fixture(scope="module", params=list(TOPOLOGIES))
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """A hub and a leaf connected by two remotes (accounts A and B), shared by a module's tests."""
    require("nats-server")
    hub_kind, leaf_kind = TOPOLOGIES[request.param]
    directory = tmp_path_factory.mktemp("leaf")
    leaf_port = free_port()
    hub_conf, leaf_conf = directory / "hub.conf", directory / "leaf.conf"
    hub_conf.write_text(hub_config(leaf_port))
    leaf_conf.write_text(leaf_config(leaf_port))
    hub = start_server(hub_kind, ["-c", str(hub_conf)])
    leaf = start_server(leaf_kind, ["-c", str(leaf_conf)])
    servers = Pair(hub, leaf, hub_conf, leaf_port)
    yield servers
    servers.leaf.stop()
    servers.hub.stop()


_OPEN: list[nats.NATS] = []  # the clients a test opened: closed after it, failed or not


def track(nc: nats.NATS) -> nats.NATS:
    """Close `nc` after the test (a failed test's open clients kept the event loop from closing)."""
    _OPEN.append(nc)
    return nc


@pytest.fixture(autouse=True)
async def _close_clients() -> AsyncIterator[None]:
    yield
    while _OPEN:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(_OPEN.pop().close(), 5)


async def connect(server: ServerProcess, account: str = "a", **kwargs: Any) -> nats.NATS:
    nc = await nats.connect(server.url, user=account, password=account, allow_reconnect=False, **kwargs)
    return track(nc)


async def ready(sub: nats.NATS, pub: nats.NATS) -> None:
    """Until what `sub` subscribed so far is known on `pub`'s side: a probe subscribed after it (its
    interest travels behind theirs) reaches `sub` from `pub`."""
    await wait_routed(pub, sub)


async def collect(nc: nats.NATS, subject: str, queue: str = "") -> list[tuple[str, bytes]]:
    """Subscribe `subject` (in `queue`) on `nc`; the list fills with (subject, data) as messages come."""
    received: list[tuple[str, bytes]] = []

    async def take(msg: Any) -> None:
        received.append((msg.subject, msg.data))

    await nc.subscribe(subject, queue=queue, cb=take)
    return received


async def settled(nc: nats.NATS, sub: nats.NATS, received: list[tuple[str, bytes]], subject: str) -> None:
    """Until a marker published on `nc` after what the test sent has reached `sub`'s `received` list on
    `subject` (messages from one publisher keep their order across the link): what was to cross has."""
    await nc.publish(subject, b"marker")
    await nc.flush()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10.0
    while (subject, b"marker") not in received:
        assert loop.time() < deadline, "the marker never arrived"
        await asyncio.sleep(0.02)
    received.remove((subject, b"marker"))
