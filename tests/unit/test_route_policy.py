"""A route's queue under the clients' policy (issue 31): past its gate it stalls the clients that feed it
(nats-server gives a route's outbound the same stall gate as a client's: its producers wait, the route is not
cut), past max_pending it is a slow consumer. A route is built on fakes: a peer whose socket pushed back."""

from __future__ import annotations

import asyncio
from typing import Any

from pynatsd.base.options import Options
from pynatsd.broker.outbound import STALL_BYTES
from pynatsd.routes.route import Route
from pynatsd.server import Server
from tests.unit.test_read_slices import FakeTransport, connect


class FakeCluster:
    auth_required = False


class FakeManager:
    """What a route asks of its manager while it is made and closed."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.cluster = FakeCluster()
        self.permissions = None  # no route permissions
        self.closed: list[Route] = []
        self.gateway = None  # no gateway (pynatsd.gateways)

    def connecting(self, route: Route) -> None:
        pass

    def connect_options(self, url: str) -> dict[str, Any]:
        return {}

    def route_info(self, extra: dict[str, object] | None = None) -> bytes:
        return b"INFO {}\r\n"

    def route_closed(self, route: Route) -> None:
        self.closed.append(route)


def behind_route(server: Server) -> tuple[Route, FakeManager]:
    """A route with interest in `foo` whose peer stopped reading (its transport paused our writes)."""
    manager = FakeManager(server)
    route = Route(manager, did_solicit=True)  # type: ignore[arg-type]  # (solicited: no CONNECT awaited)
    route.connection_made(FakeTransport())  # type: ignore[arg-type]
    route.on_rsub(b"$G", b"foo", None, 1)
    route.pause_writing()
    return route, manager


def flood(size: int, count: int) -> bytes:
    payload = b"x" * size
    return b"".join(b"PUB foo %d\r\n%s\r\n" % (size, payload) for _ in range(count))


async def turns_until(done: Any, most: int = 500) -> None:
    for _ in range(most):
        if done():
            return
        await asyncio.sleep(0)


async def test_a_route_behind_stalls_the_clients_that_feed_it() -> None:
    server = Server(Options())
    server.loop = asyncio.get_running_loop()
    server.scheduler.stall.loop = server.loop
    route, manager = behind_route(server)
    _, pub_transport = connect(server, flood(16384, 2 * STALL_BYTES // 16384))
    stall = server.scheduler.stall
    await turns_until(lambda: stall.stalled_total > 0)
    assert stall.stalled_total == 1 and route.stalls == 1
    assert not pub_transport.reading  # held until the route's queue drains or its stall runs out
    assert not route.closed and not manager.closed
    route.close("Client Closed")


async def test_a_route_past_max_pending_is_a_slow_consumer() -> None:
    max_pending = 1 << 20
    # (without the stall, so the publisher goes on at once past the gate)
    server = Server(Options(max_pending=max_pending, no_fast_producer_stall=True))
    server.loop = asyncio.get_running_loop()
    server.scheduler.stall.loop = server.loop
    route, manager = behind_route(server)
    connect(server, flood(16384, 2 * max_pending // 16384))
    await turns_until(lambda: route.closed)
    assert route.close_reason == "Slow Consumer (Pending Bytes)" and manager.closed == [route]
    assert server.stats.slow_consumers == 1 and server.stats.route_slow_consumers == 1
