"""The cluster side of a server: route listener, solicited routes, gossip, connect_urls."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pynatsd.broker.server import Server
    from pynatsd.routes.config import ClusterOptions
    from pynatsd.routes.route import Route


class RouteManager:
    """Every route of one server, by remote server id."""

    def __init__(self, server: Server, cluster: ClusterOptions) -> None:
        self.server = server
        self.cluster = cluster
        self.routes: dict[str, Route] = {}

    def registered(self) -> list[Route]:
        return list(self.routes.values())
