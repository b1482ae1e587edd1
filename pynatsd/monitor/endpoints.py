"""The monitoring endpoints' JSON, built from the server's live state (nats-server's field names and order).

Pure with respect to I/O: each builder takes the server and the query parameters and returns a dict, or
raises `BadRequest` with nats-server's plain-text message.
"""

from __future__ import annotations

import heapq
import os
import resource
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pynatsd import NATS_COMPAT_VERSION, VARZ_VERSION, __version__
from pynatsd.auth.users import DEFAULT_ACCOUNT
from pynatsd.base.build import git_commit
from pynatsd.base.formats import (
    go_duration,
    parse_bool,
    parse_int,
    rfc3339nano,
    uptime,
)
from pynatsd.broker.delivery import sid_bytes
from pynatsd.config.jetstream import account_js_limits
from pynatsd.config.jetstream import from_options as js_config_from_options
from pynatsd.jetstream import monitor as js_monitor
from pynatsd.jetstream.stream import API_LEVEL
from pynatsd.matcher import combine_stats
from pynatsd.monitor import cluster, gateways, leafnodes
from pynatsd.monitor.details import subscription_detail
from pynatsd.mqtt.connection import MQTTConnection
from pynatsd.protocol.subjects import is_literal_subject

if TYPE_CHECKING:
    from pynatsd.broker.connection import Connection
    from pynatsd.broker.delivery import Subscription
    from pynatsd.matcher import Sublist
    from pynatsd.node import Node
    from pynatsd.raft.member import MetaMember

    Monitored = Connection | MQTTConnection  # what /connz lists: client connections and MQTT clients

DEFAULT_LIMIT = 1024


class BadRequest(ValueError):
    """A bad query parameter: answered with 400 and this message, as nats-server does."""


def _now() -> datetime:
    return datetime.now(UTC)


def process_rss() -> int:
    """Resident set size of this process in bytes."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class CpuSampler:
    """CPU use in percent since the previous sample (what /varz `cpu` shows)."""

    def __init__(self) -> None:
        self._wall = time.monotonic()
        self._cpu = time.process_time()
        self.last = 0.0

    def sample(self) -> float:
        wall, cpu = time.monotonic(), time.process_time()
        if wall - self._wall >= 0.5:
            self.last = round(100.0 * (cpu - self._cpu) / (wall - self._wall), 2)
            self._wall, self._cpu = wall, cpu
        return self.last


def varz(server: Node, cpu: CpuSampler, req_stats: Mapping[str, int]) -> dict[str, Any]:
    opts = server.options
    now = _now()
    stats = server.stats
    # `version`: the nats-server level pynatsd implements, which tools compare, and pynatsd's own release
    # as build metadata, which they ignore (pynatsd.VARZ_VERSION).
    info: dict[str, Any] = {
        "server_id": server.server_id,
        "server_name": server.server_name,
        "version": VARZ_VERSION,
        "proto": 1,
    }
    if git_commit():
        info["git_commit"] = git_commit()
    info.update({"go": f"pynatsd {__version__}", "host": opts.host, "port": server.port})
    if server.auth.required:
        info["auth_required"] = True
    if opts.tls:
        info["tls_required"] = True
        if opts.tls_verify:
            info["tls_verify"] = True
    urls = cluster.connect_urls(server)
    if urls:
        info["connect_urls"] = urls
    info.update(
        {
            "max_connections": opts.max_connections,
            "ping_interval": int(opts.ping_interval * 1e9),
            "ping_max": opts.ping_max,
            "http_host": opts.http_host,
            "http_port": server.http_port,
            "http_base_path": opts.http_base_path,
            "https_port": opts.https_port,
            "auth_timeout": opts.effective_auth_timeout,
            "max_control_line": opts.max_control_line,
            "max_payload": opts.max_payload,
            "max_pending": opts.max_pending,
            "cluster": cluster.varz_cluster(server),
            "gateway": gateways.varz_gateway(server),
            "leaf": leafnodes.varz_leaf(server),
            "mqtt": server.mqtt.varz() if server.mqtt is not None else {},
            "websocket": server.websocket.varz() if server.websocket is not None else {},
            "jetstream": {} if server.jetstream is None else js_monitor.varz_block(server.jetstream),
            "tls_timeout": opts.tls_timeout,
            "write_deadline": int(opts.write_deadline * 1e9),
            "start": rfc3339nano(server.start_time),
            "now": rfc3339nano(now),
            "uptime": uptime((now - server.start_time).total_seconds()),
            "mem": process_rss(),
            "cores": os.cpu_count() or 1,
            "gomaxprocs": os.cpu_count() or 1,
            "cpu": cpu.sample(),
            "connections": len(server.clients) + (len(server.mqtt.clients) if server.mqtt is not None else 0),
            "total_connections": stats.total_connections,
            "routes": len(server.routes),
            "remotes": cluster.remotes(server),
            "leafnodes": len(server.leafnodes),
            "in_msgs": stats.in_msgs,  # routed messages included, as nats-server counts them
            "in_bytes": stats.in_bytes,
            "in_client_msgs": stats.in_client_msgs,
            "in_client_bytes": stats.in_client_bytes,
            "out_msgs": stats.out_msgs,
            "out_bytes": stats.out_bytes,
            "out_client_msgs": stats.out_client_msgs,
            "out_client_bytes": stats.out_client_bytes,
            "slow_consumers": stats.slow_consumers,
            "stale_connections": stats.stale_connections,
            "stalled_clients": stats.stalled_clients,
            "subscriptions": server.sublist_stats().num_subscriptions,
            "http_req_stats": dict(req_stats),
            "config_load_time": rfc3339nano(server.start_time),
            "config_digest": opts.config_digest,
            "feature_flags": {},  # nats-server's are JetStream's; pynatsd has none
            "system_account": server.auth.system_account,
            "slow_consumer_stats": stats.slow_consumer_stats(),
            "stale_connection_stats": stats.stale_connection_stats(),
            "disk_io_wait_stats": {"waiters": 0, "waits": 0, "wait_time": 0, "max_wait_time": 0},
            "pynatsd": {
                "version": __version__,
                "nats_compat_version": NATS_COMPAT_VERSION,
                "auth_failures": stats.auth_failures,
            },
        }
    )
    if not info["system_account"]:
        del info["system_account"]  # no_system_account: nats-server leaves the field out
    if opts.max_subscriptions:
        info["max_subscriptions"] = opts.max_subscriptions  # nats-server omits it when unlimited
    return info


# /connz sort keys: value extractors; cid ascends, every other sort descends (as nats-server).
_SORTS: dict[str, Callable[[Monitored, float], Any]] = {
    "cid": lambda c, now: c.cid,
    "start": lambda c, now: c.start,
    "subs": lambda c, now: len(c.subs),
    "pending": lambda c, now: c.pending_bytes,
    "msgs_to": lambda c, now: c.out_msgs,
    "msgs_from": lambda c, now: c.in_msgs,
    "bytes_to": lambda c, now: c.out_bytes,
    "bytes_from": lambda c, now: c.in_bytes,
    "last": lambda c, now: c.last_activity,
    "idle": lambda c, now: now - c.last_activity.timestamp(),
    "uptime": lambda c, now: now - c.start.timestamp(),
    "rtt": lambda c, now: c.rtt or 0.0,
    "stop": lambda c, now: c.stop or c.start,
    "reason": lambda c, now: c.close_reason,
}


def _param(query: Mapping[str, str], name: str, parse: Callable[[str, str], Any], default: Any) -> Any:
    value = query.get(name)
    if value is None or value == "":
        return default
    try:
        return parse(name, value)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _subs_option(query: Mapping[str, str]) -> tuple[bool, bool]:
    """`subs` as nats-server decodes it for /connz and /routez: (list subscriptions, with details)."""
    detail = query.get("subs", "").lower() == "detail"
    return detail or _param(query, "subs", parse_bool, False), detail


def connz(server: Node, query: Mapping[str, str]) -> dict[str, Any]:
    sort = query.get("sort", "") or "cid"
    if sort not in _SORTS:
        raise BadRequest(f"invalid sorting option: {sort}")
    subs, detail = _subs_option(query)
    auth = _param(query, "auth", parse_bool, False)
    offset = max(0, _param(query, "offset", parse_int, 0))
    limit = _param(query, "limit", parse_int, DEFAULT_LIMIT)
    if limit <= 0:
        limit = DEFAULT_LIMIT
    cid = _param(query, "cid", parse_int, 0)
    state = (query.get("state", "") or "open").lower()
    if state not in ("open", "closed", "any", "all"):
        raise BadRequest(f"Error decoding state for {query.get('state')}")
    if sort in ("stop", "reason") and state == "open":
        raise BadRequest(f"sort by {sort} only valid on closed connections")
    user = query.get("user", "")
    account = query.get("acc", "")

    conns: list[Monitored] = []
    mqtt = server.mqtt
    if state in ("open", "any", "all"):
        conns.extend(server.clients.values())
        if mqtt is not None:
            conns.extend(mqtt.clients)
    if state in ("closed", "any", "all"):
        closed: list[Monitored] = [*server.closed_clients]
        if mqtt is not None and mqtt.closed:  # the last max_closed_clients of both rings
            closed.extend(mqtt.closed)
            closed.sort(key=lambda c: c.stop or c.start)
            del closed[: -server.options.max_closed_clients or len(closed)]
        conns.extend(closed)
    if cid:
        conns = [c for c in conns if c.cid == cid]
    if user:
        conns = [c for c in conns if c.user == user]
    if account:
        conns = [c for c in conns if c.account == account]
    now = time.time()
    key = _SORTS[sort]
    conns.sort(key=lambda c: key(c, now), reverse=sort != "cid")
    total = len(conns)
    page = conns[offset : offset + limit]
    now_dt = _now()
    return {
        "server_id": server.server_id,
        "now": rfc3339nano(now_dt),
        "num_connections": len(page),
        "total": total,
        "offset": offset,
        "limit": limit,
        "connections": [connection_info(c, now_dt, subs, detail, auth) for c in page],
    }


def connection_info(conn: Monitored, now: datetime, subs: bool, detail: bool, auth: bool) -> dict[str, Any]:
    end = conn.stop or now
    is_mqtt = isinstance(conn, MQTTConnection)
    info: dict[str, Any] = {
        "cid": conn.cid,
        "kind": "Client",
        "type": "mqtt" if is_mqtt else "websocket" if conn.is_websocket else "nats",
        "ip": conn.ip,
        "port": conn.port,
        "start": rfc3339nano(conn.start),
        "last_activity": rfc3339nano(conn.last_activity),
    }
    if conn.stop is not None:
        info["stop"] = rfc3339nano(conn.stop)
        info["reason"] = conn.close_reason
    # nats-server always shows `rtt` ("0s" until the first PING/PONG exchange measured it).
    info["rtt"] = go_duration(round(conn.rtt, 6)) if conn.rtt is not None else "0s"
    info.update(
        {
            "uptime": uptime((end - conn.start).total_seconds()),
            "idle": uptime((end - conn.last_activity).total_seconds()),
            "pending_bytes": conn.pending_bytes,
            "in_msgs": conn.in_msgs,
            "out_msgs": conn.out_msgs,
            "in_bytes": conn.in_bytes,
            "out_bytes": conn.out_bytes,
            "subscriptions": len(conn.subs),
        }
    )
    if conn.stalls:
        info["stalls"] = conn.stalls
    for field in ("name", "lang", "version"):
        value = getattr(conn, field)
        if value:
            info[field] = value
    if conn.tls_version:
        info["tls_version"] = conn.tls_version
        info["tls_cipher_suite"] = conn.tls_cipher
        if conn.tls_first:
            info["tls_first"] = True
    if auth:  # as nats-server: the account unless it is $G; its name tag, for a closed one unless $G
        if conn.user:
            info["authorized_user"] = conn.user
        if conn.account != DEFAULT_ACCOUNT:
            info["account"] = conn.account
        if conn.stop is None or conn.account != DEFAULT_ACCOUNT:
            info["name_tag"] = conn.account
    if conn.subs and subs:
        key = "subscriptions_list_detail" if detail else "subscriptions_list"
        info[key] = SubscriptionsSnapshot(conn, detail)
    if isinstance(conn, MQTTConnection) and conn.mqtt_client:
        info["mqtt_client"] = conn.mqtt_client
    return info


class SubscriptionsSnapshot:
    """A connection's subscriptions as they were when the page was built, turned into JSON later by
    `to_json` (off the event loop, see monitor.http): copying the list is one C-level pass, while
    describing 200k subscriptions would hold the loop for most of a second."""

    __slots__ = ("conn", "detail", "subs")

    def __init__(self, conn: Monitored, detail: bool) -> None:
        self.conn = conn
        self.detail = detail
        self.subs = list(conn.subs.values())

    def to_json(self) -> list[Any]:
        if self.detail:
            return [subscription_detail(s, self.conn.cid) for s in self.subs]
        return [s.subject.decode("utf-8", "replace") for s in self.subs]


def _cid(conn: Any) -> int:
    """A subscriber's connection id (0 for the server's internal clients, which have none)."""
    return int(getattr(conn, "cid", 0))


def _matching(sublist: Sublist[Subscription], subject: bytes) -> list[Subscription]:
    matched = sublist.match(subject)
    return [*matched.plain, *(s for g in matched.groups for s in g)]


def subsz(server: Node, query: Mapping[str, str]) -> dict[str, Any]:
    subs = _param(query, "subs", parse_bool, False)
    offset = max(0, _param(query, "offset", parse_int, 0))
    limit = _param(query, "limit", parse_int, DEFAULT_LIMIT)
    if limit <= 0:
        limit = DEFAULT_LIMIT
    test = query.get("test", "")
    if test and not is_literal_subject(test.encode()):
        raise BadRequest(f"invalid test subject, must be valid publish subject: {test}")
    account = query.get("acc", "")
    sublists = (
        [sl for name, sl in server.account_sublists.items() if name == account]
        if account
        else list(server.account_sublists.values())
    )
    stats = combine_stats([sl.stats() for sl in sublists])
    result: dict[str, Any] = {
        "server_id": server.server_id,
        "now": rfc3339nano(_now()),
        "num_subscriptions": stats.num_subscriptions,
        "num_cache": stats.num_cache,
        "num_inserts": stats.num_inserts,
        "num_removes": stats.num_removes,
        "num_matches": stats.num_matches,
        "cache_hit_rate": stats.cache_hit_rate,
        "max_fanout": stats.max_fanout,
        "avg_fanout": stats.avg_fanout,
    }
    if subs or test:
        if test:
            found: Iterable[Any] = [s for sl in sublists for s in _matching(sl, test.encode())]
        else:
            found = (s for sl in sublists for s in sl.subscriptions())
        found = list(found)
        # Only the page is sorted out of the whole: O(n) for a first page, not O(n log n).
        listing = heapq.nsmallest(offset + limit, found, key=lambda s: (_cid(s.conn), sid_bytes(s)))
        result["total"] = len(found)
        result["offset"] = offset
        result["limit"] = limit
        page = [subscription_detail(s, _cid(s.conn), s.conn.account) for s in listing[offset:]]
        if page:
            result["subscriptions_list"] = page
    else:
        result["total"] = 0
        result["offset"] = offset
        result["limit"] = limit
    return result


def routez(server: Node, query: Mapping[str, str]) -> dict[str, Any]:
    subs, detail = _subs_option(query)
    return cluster.routez(server, _now(), subs, detail)


def gatewayz(server: Node, query: Mapping[str, str] | None = None) -> dict[str, Any]:
    query = query or {}
    subs = query.get("subs", "") in ("1", "true", "detail")
    accounts = query.get("accs", "") in ("1", "true") or subs
    return gateways.gatewayz(server, _now(), accounts, subs)


def leafz(server: Node, query: Mapping[str, str] | None = None) -> dict[str, Any]:
    query = query or {}
    subs = _param(query, "subs", parse_bool, False)
    return leafnodes.leafz(server, _now(), subs, query.get("acc", ""))


def _accounts(server: Node) -> list[str]:
    """The configured accounts (with $G and the system account), JWT accounts preloaded, and any a
    connection is bound to."""
    names = {c.account for c in server.clients.values()} | {DEFAULT_ACCOUNT} | set(server.auth.accounts)
    if server.auth.jwt is not None:
        names |= set(server.auth.jwt.preload)
    return sorted(names)


def account_name_tag(server: Node, name: str) -> str:
    """nats-server's name tag: a JWT account's `name` claim, else the account's own name."""
    jwt_auth = server.auth.jwt
    acc = jwt_auth.account(name) if jwt_auth is not None and name != DEFAULT_ACCOUNT else None
    return acc.claims.name if acc is not None and acc.claims.name else name


def account_info(server: Node, name: str) -> dict[str, Any]:
    """nats-server's AccountInfo of `name` (with its exports, imports and pending responses; no mappings);
    raises BadRequest when there is no such account."""
    if name not in _accounts(server):
        raise BadRequest(f"Account {name} does not exist")
    sublist = server.account_sublists.get(name)
    stats = combine_stats([sublist.stats()] if sublist is not None else [])
    jwt_auth = server.auth.jwt
    acc = jwt_auth.account(name) if jwt_auth is not None and name != DEFAULT_ACCOUNT else None
    detail: dict[str, Any] = {"account_name": name, "update_time": rfc3339nano(server.start_time)}
    if name == server.auth.system_account:
        detail["is_system"] = True
    detail.update(
        {
            "expired": False,
            "complete": True,
            "jetstream_enabled": server.jetstream is not None and name in server.jetstream.accounts,
            "leafnode_connections": sum(1 for leaf in server.leafnodes if leaf.account == name),
            "client_connections": sum(1 for c in server.clients.values() if c.account == name),
            "subscriptions": stats.num_subscriptions,
        }
    )
    if server.links is not None:
        detail.update(server.links.describe(name))
    if acc is not None and jwt_auth is not None:
        token = jwt_auth.token(name) or ""
        detail["jwt"] = token
        detail["issuer_key"] = acc.claims.issuer
    detail["name_tag"] = account_name_tag(server, name)
    if acc is not None and jwt_auth is not None:
        tags = acc.claims.nats.get("tags")
        if tags:
            detail["tags"] = tags
        detail["decoded_jwt"] = jwt_auth.payload(name)
        if acc.revocations:
            detail["revoked_user"] = {
                key: rfc3339nano(datetime.fromtimestamp(at, UTC)) for key, at in acc.revocations.items()
            }
    detail["sublist_stats"] = stats._asdict()
    return detail


def accountz(server: Node, query: Mapping[str, str]) -> dict[str, Any]:
    """The account names, or with `acc=NAME` that account's `account_detail` (nats-server's fields)."""
    result: dict[str, Any] = {"server_id": server.server_id, "now": rfc3339nano(_now())}
    if server.auth.system_account:
        result["system_account"] = server.auth.system_account
    name = query.get("acc", "")
    if not name:
        result["accounts"] = _accounts(server)
        return result
    result["account_detail"] = account_info(server, name)
    return result


def _connected_by_account(server: Node) -> dict[str, list[Connection]]:
    """The connected clients of each account, in one pass."""
    by_account: dict[str, list[Connection]] = {}
    for conn in server.clients.values():
        if conn.connected:
            by_account.setdefault(conn.account, []).append(conn)
    return by_account


def account_stat(server: Node, name: str, conns: list[Connection] | None = None) -> dict[str, Any]:
    """nats-server's AccountStat of one account: its connections, subscriptions and traffic (of its
    open connections, `conns` when known, and those closed since start)."""
    if conns is None:
        conns = _connected_by_account(server).get(name, [])
    closed = server.stats.closed_by_account.get(name)
    sublist = server.account_sublists.get(name)
    zero = {"msgs": 0, "bytes": 0}
    sent_msgs = sum(c.out_msgs for c in conns) + (closed.out_msgs if closed else 0)
    sent_bytes = sum(c.out_bytes for c in conns) + (closed.out_bytes if closed else 0)
    recv_msgs = sum(c.in_msgs for c in conns) + (closed.in_msgs if closed else 0)
    recv_bytes = sum(c.in_bytes for c in conns) + (closed.in_bytes if closed else 0)
    leafnodes = sum(1 for leaf in server.leafnodes if leaf.account == name)
    return {
        "acc": name,
        "name": account_name_tag(server, name),
        "conns": len(conns),
        "leafnodes": leafnodes,
        "total_conns": len(conns) + leafnodes,  # nats-server counts its leaf nodes in
        "num_subscriptions": sublist.stats().num_subscriptions if sublist is not None else 0,
        "sent": {
            "msgs": sent_msgs,
            "bytes": sent_bytes,
            "gateways": dict(zero),
            "routes": dict(zero),
            "leafs": dict(zero),
        },
        "received": {
            "msgs": recv_msgs,
            "bytes": recv_bytes,
            "gateways": dict(zero),
            "routes": dict(zero),
            "leafs": dict(zero),
        },
        "slow_consumers": closed.slow_consumers if closed else 0,
    }


def accstatz(server: Node, accounts: Iterable[str] | None = None, unused: bool = False) -> dict[str, Any]:
    """nats-server's AccountStatz: the accounts with connections (all of them with `unused`), or of
    `accounts` those that exist."""
    known = _accounts(server)
    names = known if accounts is None else [a for a in accounts if a in known]
    active = _connected_by_account(server)
    statz = [account_stat(server, name, active.get(name, [])) for name in names if unused or name in active]
    return {"server_id": server.server_id, "now": rfc3339nano(_now()), "account_statz": statz}


def accstatz_query(server: Node, query: Mapping[str, str]) -> dict[str, Any]:
    """/accstatz: `unused` includes the accounts without connections."""
    return accstatz(server, None, _param(query, "unused", parse_bool, False))


def jsz(server: Node, query: Mapping[str, str] | None = None) -> dict[str, Any]:
    if server.jetstream is not None:
        return js_monitor.jsz(server.jetstream, server.server_id, query or {})
    if server.meta_member is not None:  # JetStream on, in the cluster's meta group, holding no streams
        return _member_jsz(server, server.meta_member, query or {})
    return _no_jetstream(server)


def _member_jsz(server: Node, member: MetaMember, query: Mapping[str, str]) -> dict[str, Any]:
    """/jsz of a cluster member running no JetStream of its own, as nats-server shows a node that hosts
    no stream: its settings, its accounts with JetStream (their usage on this node: none), the RAFT
    groups it is in (ha_assets) and the meta group's view."""
    info = _no_jetstream(server)
    del info["disabled"]
    accounts = _member_js_accounts(server)
    info["accounts"] = len(accounts)
    info["ha_assets"] = sum(1 for _ in member.groups())
    info["api"]["level"] = API_LEVEL
    config = js_config_from_options(server.options)
    if config is not None:
        info["config"] = js_monitor.settings_block(config)
    del info["total"]
    streams = _param(query, "streams", parse_bool, False) or _param(query, "consumers", parse_bool, False)
    only = query.get("acc") or ""
    info["limits"] = {"default_max_consumers": 1000}
    for key in ("streams", "consumers", "messages", "bytes"):
        info[key] = info.pop(key)
    info["meta_cluster"] = member.cluster_info()
    if only in accounts:
        shown = [only]
    elif _param(query, "accounts", parse_bool, False) or (streams and not only):
        shown = sorted(accounts)
    else:
        shown = []
    if shown:
        none = {"memory": 0, "storage": 0, "api_total": 0, "api_errors": 0}
        info["account_details"] = [js_monitor.account_detail(name, none, accounts[name]) for name in shown]
    info["total"] = len(accounts)
    return info


def _member_js_accounts(server: Node) -> dict[str, dict[str, Any]]:
    """The accounts given JetStream by the config (as a JetStream would enable them) -> their limits; none
    in operator mode (their JWTs are not looked up for this)."""
    if server.auth.jwt is not None:
        return {}
    configured = server.options.accounts
    if not configured:
        return {DEFAULT_ACCOUNT: account_js_limits()}
    system = server.auth.system_account
    return {n: dict(s.jetstream) for n, s in configured.items() if s.jetstream is not None and n != system}


def _no_jetstream(server: Node) -> dict[str, Any]:
    return {
        "memory": 0,
        "storage": 0,
        "reserved_memory": 0,
        "reserved_storage": 0,
        "accounts": 0,
        "ha_assets": 0,
        "api": {"level": 0, "total": 0, "errors": 0},
        "server_id": server.server_id,
        "now": rfc3339nano(_now()),
        "disabled": True,
        "config": {"max_memory": 0, "max_storage": 0},
        "streams": 0,
        "consumers": 0,
        "messages": 0,
        "bytes": 0,
        "total": 0,
    }


def healthz(server: Node, query: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
    """nats-server's healthz as HTTP serves it: the status code, and the body (with `details`, the errors
    listed by type). `account`, `stream` and `consumer` ask that those be on this server."""
    flags = {
        name: _param(query, name, parse_bool, False) if name in query else False
        for name in ("js-enabled", "js-enabled-only", "js-server-only", "js-meta-only", "details")
    }
    account, stream, consumer = (query.get(name, "") for name in ("account", "stream", "consumer"))

    def failed(code: int, status: str, kind: str, error: str, **where: str) -> tuple[int, dict[str, Any]]:
        if flags["details"]:
            return code, {"status": "error", "errors": [{"type": kind, **where, "error": error}]}
        return code, {"status": status, "error": error}

    if stream and not account:
        return failed(400, "error", "BAD_REQUEST", '"account" must not be empty when checking stream health')
    if consumer and not stream:
        return failed(400, "error", "BAD_REQUEST", '"stream" must not be empty when checking consumer health')
    if not server.listening:
        # nats-server's answer once its client listener is gone (lame duck mode, shutting down).
        return failed(500, "error", "CONNECTION", "failed to be ready for connections after 1ms: server")
    # nats-server stops before the meta group's check for these: js-server-only right after the listener's,
    # js-enabled-only (and the deprecated js-enabled) once JetStream is on.
    if flags["js-server-only"] or flags["js-enabled-only"] or flags["js-enabled"]:
        return 200, {"status": "ok"}
    member = server.meta_member
    if member is not None and member.node is not None:
        # A meta group member's check beyond "JetStream is on", in nats-server's words.
        if member.recovering():
            return failed(503, "unavailable", "JETSTREAM", "JetStream is still recovering meta layer")
        if not member.node.leader:
            error = "JetStream has not established contact with a meta leader"
            return failed(503, "unavailable", "JETSTREAM", error)
        if flags["js-meta-only"]:
            return 200, {"status": "ok"}
    missing = _missing_asset(server, account, stream, consumer)
    if missing is not None:
        kind, error = missing  # the details name the asset up to the missing one
        names = ("account", "stream", "consumer")
        where = dict(zip(names[: names.index(kind) + 1], (account, stream, consumer), strict=False))
        return failed(404, "unavailable", kind.upper(), error, **where)
    return 200, {"status": "ok"}


def _missing_asset(server: Node, account: str, stream: str, consumer: str) -> tuple[str, str] | None:
    """The first of `account`, `stream`, `consumer` (each when given) not on this server, as nats-server's
    healthz looks: a single server's stored accounts and streams, a cluster member's assignments naming
    it. None when all are here (or JetStream is off)."""
    if not account:
        return None
    found_account = found_stream = found_consumer = False
    js, member = server.jetstream, server.meta_member
    if js is not None:
        acc = js.accounts.get(account)
        found_account = acc is not None and bool(acc.streams)  # an account's store appears with a stream
        held = acc.streams.get(stream) if acc is not None and stream else None
        found_stream = held is not None
        found_consumer = held is not None and consumer in held.consumers
    elif member is not None and member.applier is not None:
        state, ours = member.applier.state, member.node.id if member.node is not None else ""
        found_account = any(acc == account for acc, _ in state.streams)
        assignment = state.streams.get((account, stream), {})
        found_stream = ours in (assignment.get("group") or {}).get("peers", [])
        assigned = state.consumers.get((account, stream), {}).get(consumer, {})
        found_consumer = found_stream and ours in (assigned.get("group") or {}).get("peers", [])
    else:
        return None
    if not found_account:
        return "account", f'JetStream account "{account}" not found'
    if stream and not found_stream:
        return "stream", f'JetStream stream "{stream}" not found on account "{account}"'
    if consumer and not found_consumer:
        error = f'JetStream consumer "{consumer}" not found for stream "{stream}" on account "{account}"'
        return "consumer", error
    return None
