"""/gatewayz and the /varz `gateway` block, with nats-server's fields (server/monitor.go)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pynatsd.base.formats import go_duration, rfc3339nano, uptime
from pynatsd.gateways.connection import INTEREST_ONLY
from pynatsd.monitor.cluster import link_timeouts

if TYPE_CHECKING:
    from pynatsd.gateways.connection import Gateway
    from pynatsd.node import Node

INTEREST_ONLY_THRESHOLD = 1000  # nats-server's switch after that many RS- (we show its figure)


def gatewayz(server: Node, now: datetime, accounts: bool, subs: bool = False) -> dict[str, Any]:
    """nats-server's /gatewayz: the outbound connection per remote gateway (`accounts`: with the
    remote's interest per account, `subs`: its subjects), the inbound ones."""
    info: dict[str, Any] = {"server_id": server.server_id, "now": rfc3339nano(now)}
    manager = server.gateway_manager
    if manager is None:
        return info | {"outbound_gateways": {}, "inbound_gateways": {}}
    opts = manager.options
    info |= {"name": manager.name, "host": opts.host, "port": opts.port}
    outbound: dict[str, Any] = {}
    for name, remote in manager.remotes.items():
        entry: dict[str, Any] = {"configured": not remote.implicit}
        conn = manager.outbound.get(name)
        if conn is not None and not conn.closed:
            entry["connection"] = _connection(conn, now)
            if accounts:
                entry["accounts"] = _accounts(conn, subs)
        outbound[name] = entry
    inbound: dict[str, list[dict[str, Any]]] = {}
    for conn in manager.inbound.values():
        # `configured`: false, as nats-server shows its inbound connections
        entry = {"configured": False, "connection": _connection(conn, now)}
        if accounts:  # the accounts we told it we send all our interest for
            entry["accounts"] = [_mode(name, INTEREST_ONLY) for name in sorted(conn.switched)]
        inbound.setdefault(conn.name, []).append(entry)
    return info | {"outbound_gateways": outbound, "inbound_gateways": inbound}


def _connection(conn: Gateway, now: datetime) -> dict[str, Any]:
    return {
        "cid": conn.rid,
        "kind": "Gateway",
        "ip": conn.host,
        "port": conn.port,
        "start": rfc3339nano(conn.start),
        "last_activity": rfc3339nano(conn.last_activity),
        "rtt": go_duration(round(conn.rtt, 6)) if conn.rtt is not None else "0s",
        "uptime": uptime((now - conn.start).total_seconds()),
        "idle": uptime((now - conn.last_activity).total_seconds()),
        "pending_bytes": conn.pending_bytes,
        "in_msgs": conn.in_msgs,
        "out_msgs": conn.out_msgs,
        "in_bytes": conn.in_bytes,
        "out_bytes": conn.out_bytes,
        "subscriptions": conn.interest_count(),
        "name": conn.remote_id,
    }


def _accounts(conn: Gateway, subs: bool) -> list[dict[str, Any]]:
    shown = []
    for account, state in sorted(conn.accounts.items()):
        entry = _mode(account.decode("utf-8", "replace"), state.mode)
        if state.no_interest:
            entry["no_interest_count"] = len(state.no_interest)
        if state.subs:
            entry["num_subs"] = len(state.subs)
            queues = sum(1 for _, queue in state.subs if queue is not None)
            if queues:
                entry["num_queue_subs"] = queues
            if subs:
                entry["subscriptions_list"] = sorted(s.decode("utf-8", "replace") for s, _ in state.subs)
        shown.append(entry)
    return shown


def _mode(account: str, mode: str) -> dict[str, Any]:
    return {"name": account, "interest_mode": mode, "interest_only_threshold": INTEREST_ONLY_THRESHOLD}


def varz_gateway(server: Node) -> dict[str, Any]:
    """The /varz `gateway` block (empty without a gateway)."""
    manager = server.gateway_manager
    if manager is None:
        return {}
    opts = manager.options
    block: dict[str, Any] = {"name": manager.name, "host": opts.host, "port": opts.port}
    block["auth_timeout"], block["tls_timeout"] = link_timeouts(opts.tls, opts.auth_timeout)
    if opts.advertise:
        block["advertise"] = opts.advertise
    if opts.connect_retries:
        block["connect_retries"] = opts.connect_retries
    block["gateways"] = [
        {"name": r.name, "urls": [_host_port(url) for url in r.urls]} for r in manager.remotes.values()
    ]
    if opts.reject_unknown_cluster:
        block["reject_unknown"] = True
    return block


def _host_port(url: str) -> str:
    """`host:port` of a gateway URL, as nats-server lists it (no scheme, no credentials)."""
    netloc = urlsplit(url if "://" in url else f"nats://{url}").netloc
    return netloc.rpartition("@")[2]
