"""The cluster's part of monitoring: /routez, /varz's `cluster` block, `connect_urls` and route counts,
with nats-server's field names and order (its `Routez`, `RouteInfo`, `ClusterOptsVarz`).

Reads only the clustering interface documented in `pynatsd.routes` (`Node.cluster`, `Node.routes`).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pynatsd.base.formats import go_duration, rfc3339nano, uptime
from pynatsd.config.cluster import DEFAULT_AUTH_TIMEOUT, DEFAULT_TLS_TIMEOUT, advertised_permissions
from pynatsd.monitor.details import subscription_detail

if TYPE_CHECKING:
    from pynatsd.broker.delivery import Subscription
    from pynatsd.node import Node
    from pynatsd.routes.route import Route


def routez(server: Node, now: datetime, subs: bool, detail: bool) -> dict[str, Any]:
    """/routez; `subs` lists each route's remote interest, `detail` with nats-server's SubDetail fields."""
    routes = sorted(server.routes, key=lambda r: r.rid)
    shown: dict[str, Any] = {
        "server_id": server.server_id,
        "server_name": server.server_name,
        "now": rfc3339nano(now),
    }
    cluster = server.cluster
    shown.update(advertised_permissions(cluster.permissions if cluster is not None else None))
    shown["num_routes"] = len(routes)
    shown["routes"] = [route_info(r, now, subs, detail) for r in routes]
    return shown


def route_info(route: Route, now: datetime, subs: bool, detail: bool) -> dict[str, Any]:
    info: dict[str, Any] = {
        "rid": route.rid,
        "remote_id": route.remote_id,
        "remote_name": route.remote_name,
        "did_solicit": route.did_solicit,
        "is_configured": route.is_configured,
        "ip": route.host,
        "port": route.port,
        "start": rfc3339nano(route.start),
        "last_activity": rfc3339nano(route.last_activity),
        # nats-server prints the route's RTT duration, "0s" until the first PING/PONG measured it.
        "rtt": go_duration(round(route.rtt, 6)) if route.rtt is not None else "0s",
        "uptime": uptime((now - route.start).total_seconds()),
        "idle": uptime((now - route.last_activity).total_seconds()),
    }
    # the peer's permissions, as its INFO advertised them
    for name, rule in (("import", route.remote_import), ("export", route.remote_export)):
        if rule is not None:
            info[name] = rule
    info |= {
        "pending_size": route.pending_bytes,
        "in_msgs": route.in_msgs,
        "out_msgs": route.out_msgs,
        "in_bytes": route.in_bytes,
        "out_bytes": route.out_bytes,
        "subscriptions": route.num_subs,
    }
    if subs and route.num_subs:
        if detail:
            info["subscriptions_list_detail"] = [
                remote_detail(account, shadows, route.rid) for account, shadows in route.remote_interest()
            ]
        else:  # subjects only, queue subscriptions too (as nats-server lists them)
            info["subscriptions_list"] = [
                shadows[0].subject.decode("utf-8", "replace") for _, shadows in route.remote_interest()
            ]
    if route.account:  # the account a pinned route is dedicated to
        info["account"] = route.account.decode("utf-8", "replace")
    info["compression"] = route.compression
    return info


def remote_detail(account: bytes, shadows: list[Subscription], rid: int) -> dict[str, Any]:
    """One remote subscription as nats-server details those of a route without pooling: a queue group
    once, whatever its weight; sid `account subject [queue]`; the messages sent to it over the route."""
    sub = shadows[0]
    detail = subscription_detail(sub, rid)
    detail["sid"] = b" ".join(p for p in (account, sub.subject, sub.queue) if p).decode("utf-8", "replace")
    detail["msgs"] = sum(s.delivered for s in shadows)
    return detail


def link_timeouts(tls: dict[str, Any] | None, auth_timeout: float) -> tuple[float, float]:
    """A route's, gateway's or leafnode listener's (auth_timeout, tls_timeout) as /varz shows them:
    nats-server's default auth timeout is the TLS handshake limit plus a second under TLS, else 2 s."""
    tls_timeout = float(tls["timeout"]) if tls else DEFAULT_TLS_TIMEOUT
    return auth_timeout or (tls_timeout + 1.0 if tls else DEFAULT_AUTH_TIMEOUT), tls_timeout


def varz_cluster(server: Node) -> dict[str, Any]:
    """/varz `cluster`: empty without clustering, as nats-server's omitempty fields leave it."""
    cluster = server.cluster
    if cluster is None:
        return {}
    tls = cluster.tls
    auth_timeout, tls_timeout = link_timeouts(tls, cluster.auth_timeout)
    block: dict[str, Any] = {
        "name": cluster.name,
        "addr": cluster.host,
        "cluster_port": cluster.port,
        "auth_timeout": auth_timeout,
    }
    if cluster.urls:  # host:port of the configured routes, credentials left out
        block["urls"] = [urlsplit(u).netloc.rpartition("@")[2] for u in cluster.urls]
    block["tls_timeout"] = tls_timeout
    if tls:  # routes then run mutual TLS: required and verified
        block["tls_required"] = True
        block["tls_verify"] = True
    if cluster.pool_size:  # the configured value, as nats-server shows it (pynatsd keeps one route a peer)
        block["pool_size"] = cluster.pool_size
    return block


def connect_urls(server: Node) -> list[str]:
    """The client URLs of this server and its peers, as announced to clients in INFO `connect_urls`."""
    urls = server.info_base().get("connect_urls") or []
    return [str(u) for u in urls]


def remotes(server: Node) -> int:
    """Peers with at least one route (nats-server's `remotes`; `routes` counts route connections)."""
    return len({r.remote_id for r in server.routes})
