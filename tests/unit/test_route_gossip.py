"""Gossip of pinned routes (nats-server's forwardNewRouteInfoToKnownServers and processImplicitRoute), on
a real RouteManager with fake routes: which server hears of which, in the orders a simultaneous start
produces (a server's pinned `$SYS` route may register before its pool's first connection)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from pynatsd.base.blocks import ClusterOptions
from pynatsd.base.options import Options
from pynatsd.routes.manager import RouteManager
from pynatsd.server import Server

SYS = "$SYS"


@dataclass
class FakeRoute:
    """What gossip reads of a registered route, and what it sends on it."""

    remote_id: str
    account: bytes = b""
    did_solicit: bool = False
    is_configured: bool = False
    gossip_mode: int = 0
    closed: bool = False
    remote_pool_size: int = 3
    info: dict[str, Any] = field(default_factory=dict)
    sent: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.info = {"server_id": self.remote_id, "ip": f"nats-route://127.0.0.1:{len(self.remote_id)}/"}

    def send(self, data: bytes) -> None:
        assert data.startswith(b"INFO ")
        self.sent.append(json.loads(data[5:]))


@pytest.fixture
def manager() -> RouteManager:
    server = Server(Options(system_account=SYS))
    return RouteManager(server, ClusterOptions(name="c"))


def register(manager: RouteManager, route: FakeRoute) -> None:
    if route.account:
        manager.links[(route.remote_id, route.account.decode())] = route  # type: ignore[assignment]
    else:
        manager.routes[route.remote_id] = route  # type: ignore[assignment]


def test_a_pinned_route_is_told_to_a_server_known_by_its_pinned_route_only(manager: RouteManager) -> None:
    """n1's `$SYS` route registered before its pool's first connection; then n2's `$SYS` route: n1 hears
    of it on its `$SYS` route (before, only servers with a first route were told: n1 never was, and
    n1 and n2 had no `$SYS` route between them)."""
    n1_sys = FakeRoute("n1", account=SYS.encode())
    register(manager, n1_sys)
    n2_sys = FakeRoute("n2", account=SYS.encode())
    register(manager, n2_sys)
    manager._forward_new_route(n2_sys)  # type: ignore[arg-type]
    assert [(m["server_id"], m.get("route_account")) for m in n1_sys.sent] == [("n2", SYS)]
    assert n2_sys.sent == []


def test_a_pinned_route_is_told_once_per_server(manager: RouteManager) -> None:
    """A server with both routes hears on its pinned one; one without a pinned route on its first one;
    a peer without pools not at all."""
    n1_first, n1_sys = FakeRoute("n1"), FakeRoute("n1", account=SYS.encode())
    n3_first = FakeRoute("n3")
    old = FakeRoute("old", remote_pool_size=0)
    for route in (n1_first, n1_sys, n3_first, old):
        register(manager, route)
    n2_sys = FakeRoute("n2", account=SYS.encode())
    register(manager, n2_sys)
    manager._forward_new_route(n2_sys)  # type: ignore[arg-type]
    told = {
        r.remote_id + ("/sys" if r.account else ""): len(r.sent) for r in (n1_first, n1_sys, n3_first, old)
    }
    assert told == {"n1": 0, "n1/sys": 1, "n3": 1, "old": 0}
    assert n3_first.sent[0]["route_account"] == SYS


def test_an_implicit_pinned_route_to_a_known_server_is_opened(
    manager: RouteManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server we know by its first route, without its `$SYS` route (it solicited us and opened none):
    an INFO naming `$SYS` opens it; one for an account we do not pin, or a route we have, opens nothing."""
    solicited: list[tuple[str, tuple[bytes, int]]] = []

    def solicit(url: str, explicit: bool, gossip_mode: int = 0, link: tuple[bytes, int] = (b"", 0)) -> None:
        solicited.append((url, link))

    monkeypatch.setattr(manager, "solicit", solicit)
    register(manager, FakeRoute("n1"))
    info = {"server_id": "n1", "ip": "nats-route://127.0.0.1:7001/", "port": 7001}
    manager.implicit_route({**info, "route_account": "OTHER"})
    manager.implicit_route(info)
    assert solicited == []
    manager.implicit_route({**info, "route_account": SYS})
    assert solicited == [("nats-route://127.0.0.1:7001/", (SYS.encode(), 0))]
    register(manager, FakeRoute("n1", account=SYS.encode()))
    manager.implicit_route({**info, "route_account": SYS})
    assert len(solicited) == 1
