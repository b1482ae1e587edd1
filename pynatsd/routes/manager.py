"""The cluster side of a server: route listener, solicited routes with retry, interest propagation,
gossip, duplicate routes, connect_urls, lame duck mode. nats-server's rules (server/route.go):

- interest: the local interest of every account is counted per `subject` and per `subject queue`; a
  subject's first subscription sends `RS+ account subject` to every route, its last `RS-`; a queue
  group sends `RS+ account subject queue weight` whenever its weight (members here) changes, `RS-` at 0.
  A route gets the whole of it when it registers. Remote interest is never propagated further.
- gossip: when a server registers a new route, it sends the newcomer's INFO to its other routes, which
  connect to the newcomer (implicit routes) unless they know it already; a route solicited because of
  gossip is not gossiped again (nats-server's gossip modes decide the exceptions).
- duplicates: one route per remote server; a second one (both sides soliciting at once) is closed, and
  the one kept reconnects if the peer drops it in turn.
- reconnect: explicit routes (configured) are retried forever, one attempt a second; implicit routes
  `connect_retries` times.
- pool and pinned accounts: pynatsd advertises `route_pool_size` 1 (it needs no more connections of
  its own: more would only add sockets to one event loop), so a nats-server peer pools (its default
  `pool_size` 3: the larger size wins) and pins the system account. A peer's pool connections
  (`route_pool_idx` 1..n-1) are accepted, and opened when this server solicited the first one. Each
  account's interest goes on the connection the peer places that account on (`pool_index`, as
  nats-server's), where the peer's interest and messages for it come too: one order per account both
  ways. The system account (and `cluster { accounts }`) gets a route of its own to each server that
  pools, solicited like the pool, its interest and messages only there, without the account name.
  `pool_size: -1` turns both off (the peer then keeps one route naming accounts in every op).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import random
import ssl
import urllib.parse
from typing import TYPE_CHECKING, Any, Protocol, cast

from pynatsd import NATS_COMPAT_VERSION
from pynatsd.auth.users import Permissions
from pynatsd.base.hashing import fnv1a32
from pynatsd.base.ids import new_server_id
from pynatsd.base.listener import interface_addresses
from pynatsd.base.logging import get_logger
from pynatsd.base.tls import route_contexts
from pynatsd.broker.delivery import kept_local, propagated
from pynatsd.config.cluster import advertised_permissions
from pynatsd.protocol import encoder
from pynatsd.protocol.route import encode_rsub, encode_runsub
from pynatsd.routes.route import Route

if TYPE_CHECKING:
    from pynatsd.base.blocks import ClusterOptions
    from pynatsd.broker.core import Broker
    from pynatsd.broker.delivery import Subscription
    from pynatsd.matcher import Sublist

log = get_logger()

ROUTE_CONNECT_DELAY = 1.0  # between connect attempts (nats-server's routeConnectDelay)
ROUTE_RECONNECT_DELAY = 1.0  # before reconnecting an explicit route (DEFAULT_ROUTE_RECONNECT)
_GOSSIP_DEFAULT, _GOSSIP_DISABLED, _GOSSIP_OVERRIDE = 0, 1, 2


class GatewayHooks(Protocol):
    """What the routes tell the gateways (pynatsd.gateways): our route INFO's `gateway_url`, a route
    registered (its server's gateway URL, the gateways to gossip to it), a gateway INFO a route brought, a
    `_GR_.` reply subject a route brought (its own subject if it is this cluster's, else empty)."""

    def route_info_fields(self) -> dict[str, object]: ...

    def route_registered(self, route: Route) -> None: ...

    def route_gateway_info(self, info: dict[str, object]) -> None: ...

    def routed_reply(self, subject: bytes) -> bytes: ...


class RouteListenError(Exception):
    """The route port cannot be bound (the server stops, as nats-server does)."""


class RouteManager:
    """Every route of one server, and the interest it propagates to them."""

    def __init__(self, server: Broker, cluster: ClusterOptions, jetstream: bool = False) -> None:
        self.server = server
        self.cluster = cluster
        self.jetstream = jetstream  # this server serves JetStream (its route INFO says so)
        self.routes: dict[str, Route] = {}  # remote server id -> its registered route (pool index 0)
        # (remote server id, pinned account or `#<pool index>`) -> the other registered connections to it
        self.links: dict[tuple[str, str], Route] = {}
        self.connections: set[Route] = set()  # every open route connection, registered or not
        server.stats.routes = self.connections  # the server's message totals include the routes'
        # Local interest: (account, subject, queue or None) -> subscriptions (a queue group's weight).
        self.interest: dict[tuple[str, bytes, bytes | None], int] = {}
        self.connect_urls: list[str] = []  # client URLs of the other servers (for clients' INFO)
        self._self_urls: set[str] = set()  # route URLs that turned out to be this server
        self._listener: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._connecting: set[str] = set()  # URLs being solicited (no second attempt meanwhile)
        self._stopping = False
        self._own_urls: list[str] | None = None
        # `tls {}`: the accepting and the soliciting side's contexts (pynatsd.base.tls)
        self._tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None
        # `permissions`: import decides which of our interest we send (nats-server's canImport), export
        # which of the peers' interest we take and what we send them (each route's copy, see Route)
        spec = cluster.permissions
        self.permissions = Permissions(spec) if spec else None
        self.gateway: GatewayHooks | None = None  # pynatsd.gateways, when this server has a gateway
        if not cluster.name:
            cluster.name = new_server_id()[:22]  # nats-server's dynamic name: random until a peer's
            cluster.dynamic_name = True

    def registered(self) -> list[Route]:
        return list(self.routes.values()) + list(self.links.values())

    @property
    def pinned(self) -> list[str]:
        """The accounts with a route of their own to each server: the configured `accounts` and, as
        nats-server's default, the system account, unless pooling is off (`pool_size: -1`)."""
        if self.cluster.pool_size < 0:
            return []
        system = self.server.auth.system_account
        accounts = self.cluster.accounts
        return [*accounts, system] if system and system not in accounts else accounts

    # -- start / stop ---------------------------------------------------------------------------------
    async def start(self) -> None:
        cluster = self.cluster
        server = self.server
        for account, sublist in server.account_sublists.items():
            self.watch(account, sublist)
        port = 0 if cluster.port == -1 else cluster.port
        if cluster.tls is not None:
            self._tls = route_contexts(cluster.tls)
        try:
            self._listener = await server.loop.create_server(
                lambda: cast(asyncio.Protocol, Route(self, did_solicit=False)),
                host=cluster.host or None,
                port=port,
                reuse_address=True,
                ssl=self._tls[0] if self._tls else None,
                ssl_handshake_timeout=self._tls_timeout(),
            )
        except OSError as exc:
            raise RouteListenError(f"Error listening on router port: {cluster.port} - {exc}") from None
        sockets = self._listener.sockets
        if sockets:
            cluster.port = int(sockets[0].getsockname()[1])
        log.info("Cluster name is %s", cluster.name)
        if cluster.dynamic_name:
            log.warning("Cluster name was dynamically generated, consider setting one")
        log.info("Listening for route connections on %s:%d", cluster.host, cluster.port)
        for url in cluster.urls:
            self.solicit(url, explicit=True)

    async def stop(self) -> None:
        self._stopping = True
        if self._listener is not None:
            self._listener.close()
        for task in list(self._tasks):
            task.cancel()
        for route in list(self.connections):
            route.no_reconnect = True
            route.close("Server Shutdown")
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None

    # -- INFO and CONNECT -----------------------------------------------------------------------------
    def route_info(self, extra: dict[str, Any] | None = None) -> bytes:
        """This server's route INFO (`extra`: a soliciting side's `route_account` / `route_pool_idx`).
        `route_pool_size` 1 (see the module docstring). No `compression`: the peer does not compress. No
        `lnoc`: it sends RS+ for leaf interest too."""
        server = self.server
        cluster = self.cluster
        opts = server.options
        host, port = cluster.host, cluster.port
        info: dict[str, Any] = {
            "server_id": server.server_id,
            "server_name": server.server_name,
            "version": NATS_COMPAT_VERSION,
            "proto": 1,
            "go": server.info_base().get("go", ""),
            "host": host,
            "port": port,
            "headers": opts.headers,
        }
        if cluster.auth_required:
            info["auth_required"] = True
        if cluster.tls is not None:
            info["tls_required"] = info["tls_verify"] = True
        info["max_payload"] = opts.max_payload
        if self.jetstream:
            info["jetstream"] = True
        if cluster.advertise:
            # nats-server's: the advertised address is the route's host, port and ip (a port-less one
            # keeps the listen port)
            adv_host, sep, adv_port = cluster.advertise.rpartition(":")
            if not sep or not adv_port.isdigit():
                adv_host, adv_port = cluster.advertise, str(port)
            info["host"], info["port"] = adv_host.strip("[]"), int(adv_port)
            info["ip"] = f"nats-route://{_join(adv_host.strip('[]'), int(adv_port))}/"
        info["cluster"] = cluster.name
        if cluster.dynamic_name:
            info["cluster_dynamic"] = True
        info["connect_urls"] = self.own_client_urls()
        info.update(advertised_permissions(cluster.permissions))
        if self.cluster.pool_size >= 0:
            info["route_pool_size"] = 1  # see the module docstring
        if self.gateway is not None:
            info.update(self.gateway.route_info_fields())
        if extra:
            info.update(extra)
        return encoder.encode_info(info)

    def connect_options(self, url: str) -> dict[str, object]:
        """The CONNECT a soliciting side sends (credentials from the route URL, as nats-server)."""
        parts = urllib.parse.urlsplit(url)
        options: dict[str, object] = {"echo": True, "verbose": False, "pedantic": False}
        if parts.username:
            options["user"] = urllib.parse.unquote(parts.username)
            options["pass"] = urllib.parse.unquote(parts.password or "")
        options |= {
            "tls_required": self.cluster.tls is not None,
            "headers": self.server.options.headers,
            "name": self.server.server_id,
            "cluster": self.cluster.name,
        }
        if self.cluster.dynamic_name:
            options["cluster_dynamic"] = True
        return options

    def agree_cluster_name(self, remote: str, remote_dynamic: bool) -> bool:
        """True if a peer's cluster name is ours, or ours is dynamic and yields to it (theirs is
        configured, or greater): nats-server's rule, so all dynamic servers settle on one name."""
        cluster = self.cluster
        if remote == cluster.name:
            return True
        if cluster.dynamic_name and (not remote_dynamic or cluster.name < remote):
            log.info("Cluster name updated to %s", remote)
            cluster.name = remote
            if not remote_dynamic:
                cluster.dynamic_name = False
            self.advertise()
            return True
        return False

    def advertise(self, notify: bool = True) -> None:
        """The cluster's name and, unless `no_advertise`, every server's client URLs go into the clients'
        INFO; with `notify`, connected clients that take async INFOs are told."""
        urls = None if self.cluster.no_advertise else self.own_client_urls() + self.connect_urls
        self.server.advertise_cluster(self.cluster.name, urls, notify)

    def own_client_urls(self) -> list[str]:
        """Where clients reach this server, as nats-server advertises it: client_advertise, else the
        listen address, else (listening on all of them) every global unicast address of every interface
        (listed once)."""
        if self._own_urls is None:
            self._own_urls = self._client_urls()
        return list(self._own_urls)

    def _client_urls(self) -> list[str]:
        server = self.server
        opts = server.options
        if opts.client_advertise:
            adv = opts.client_advertise
            return [adv if ":" in adv else f"{adv}:{server.port}"]
        host = opts.host
        if host not in ("", "0.0.0.0", "::"):
            return [_join(host, server.port)]
        # nats-server's getNonLocalIPsIfHostIsIPAny: what other hosts can dial (private and ULA addresses
        # included, as Go's IsGlobalUnicast), never a loopback or link-local one
        addrs: list[str] = []
        for ip in interface_addresses():
            address = ipaddress.ip_address(ip)
            if address.is_loopback or address.is_link_local or address.is_multicast or address.is_unspecified:
                continue
            if address == ipaddress.IPv4Address("255.255.255.255"):
                continue
            url = _join(ip, server.port)
            if url not in addrs:
                addrs.append(url)
        if not addrs:
            log.error('Address "%s" can not be resolved properly', host or "0.0.0.0")
        return addrs

    # -- connections ----------------------------------------------------------------------------------
    def connecting(self, route: Route) -> None:
        self.connections.add(route)
        if route.did_solicit:
            # Done connecting: should it close at once, its reconnect must not take it for an attempt
            # still under way.
            self._connecting.discard(_attempt(route.url, (route.account, route.pool_idx)))

    def solicit(
        self, url: str, explicit: bool, gossip_mode: int = 0, link: tuple[bytes, int] = (b"", 0)
    ) -> None:
        """Connect to the route at `url` (retried: forever if explicit, else connect_retries times);
        `link`: the (pinned account, pool index) of a connection other than the first."""
        attempt = _attempt(url, link)
        if self._stopping or attempt in self._connecting or url in self._self_urls:
            return
        self._connecting.add(attempt)
        task = self.server.loop.create_task(self._connect(url, explicit, gossip_mode, link=link))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(
        self,
        url: str,
        explicit: bool,
        gossip_mode: int,
        delay: float = 0.0,
        link: tuple[bytes, int] = (b"", 0),
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname or "", parts.port or 0
        attempts = 0
        try:
            if delay:
                await asyncio.sleep(delay)
            while not self._stopping:
                if explicit and url not in self.cluster.urls:
                    return  # no longer configured
                if link != (b"", 0) and not self._linkable(url):
                    return  # the first route to that server is gone (it solicits the rest again)
                try:
                    await self.server.loop.create_connection(
                        lambda: cast(asyncio.Protocol, self._solicited(url, explicit, gossip_mode, link)),
                        host,
                        port,
                        ssl=self._tls[1] if self._tls else None,
                        server_hostname=host if self._tls else None,
                        ssl_handshake_timeout=self._tls_timeout(),
                    )
                    return
                except OSError as exc:
                    attempts += 1
                    level = log.error if attempts == 1 or attempts % 60 == 0 else log.debug
                    level("Error trying to connect to route (attempt %d): %s", attempts, exc)
                    if not explicit and attempts > self.cluster.connect_retries:
                        return
                await asyncio.sleep(ROUTE_CONNECT_DELAY)
        finally:
            self._connecting.discard(_attempt(url, link))

    def _linkable(self, url: str) -> bool:
        """True while a registered first route to the server at `url` is ours (solicited)."""
        return any(r.url == url and r.did_solicit and not r.closed for r in self.routes.values())

    def _tls_timeout(self) -> float | None:
        tls = self.cluster.tls
        return float(tls["timeout"]) if tls is not None else None

    def _solicited(self, url: str, explicit: bool, gossip_mode: int, link: tuple[bytes, int]) -> Route:
        account, pool_idx = link
        route = Route(
            self, did_solicit=True, url=url, is_configured=explicit, account=account, pool_idx=pool_idx
        )
        route.gossip_mode = gossip_mode
        return route

    def route_to_self(self, route: Route) -> None:
        if route.url:
            self._self_urls.add(route.url)

    def link_problem(self, route: Route) -> tuple[str, str]:
        """Why a connection naming a pinned account or a pool index cannot be taken: nats-server's error
        and close reason, or empty strings if it can."""
        if not route.account and not route.pool_idx:
            return "", ""
        if route.account and route.account_space(route.account) is None:
            name = route.account.decode("utf-8", "replace")
            return f'Unable to lookup account "{name}": account missing', "Missing Account"
        return self._pool_problem(route), "Protocol Violation"

    def _pool_problem(self, route: Route) -> str:
        if route.remote_pool_size <= 0 or self.cluster.pool_size < 0:
            if route.account:
                name = route.account.decode("utf-8", "replace")
                return f'Not possible to have a dedicated route for account "{name}" between those servers'
            return f"Invalid route pool index: {route.pool_idx} - pool size is {route.remote_pool_size}"
        if route.account:
            name = route.account.decode("utf-8", "replace")
            return "" if name in self.pinned else f'No route for account "{name}"'
        if route.did_solicit:
            return ""
        if not 0 < route.pool_idx < route.remote_pool_size:
            return f"Invalid route pool index: {route.pool_idx} - pool size is {route.remote_pool_size}"
        return ""

    def add_route(self, route: Route) -> bool:
        """Register a route whose handshake is done; False for a duplicate (the caller closes it)."""
        if self._stopping:
            return False
        remote_id = route.remote_id
        if route.account or route.pool_idx:
            return self._add_link(route)
        if _duplicate(self.routes.get(remote_id), route):
            return False
        self.routes[remote_id] = route
        route.registered = True
        log.info("%r - Registering remote route %r", route, remote_id)
        self._forward_new_route(route)
        self._send_interest(route)
        if route.connect_urls and not self.cluster.no_advertise:
            self._add_connect_urls(route.connect_urls)
        if route.did_solicit and route.remote_pool_size:
            self._solicit_links(route)
        if self.gateway is not None:
            self.gateway.route_registered(route)
        return True

    def _solicit_links(self, route: Route) -> None:
        """The rest of the peer's pool and our pinned accounts' routes, to a server we solicited (the
        soliciting side opens them all, as nats-server's)."""
        links = [(b"", idx) for idx in range(1, route.remote_pool_size)]
        links += [(account.encode(), 0) for account in self.pinned]
        for link in links:
            if (route.remote_id, _slot(*link)) not in self.links:
                self.solicit(route.url, route.is_configured, link=link)

    def _add_link(self, route: Route) -> bool:
        """Register a pool connection or a pinned account's route (one per server and slot)."""
        key = (route.remote_id, _slot(route.account, route.pool_idx))
        if _duplicate(self.links.get(key), route):
            return False
        self.links[key] = route
        route.registered = True
        # nats-server's debug lines (quoted as its %q)
        if route.account:
            log.debug(
                '%r - Registering remote route "%s" for account "%s"',
                route,
                route.remote_id,
                _text(route.account),
            )
        else:
            log.debug('%r - Registering remote route "%s"', route, route.remote_id)
        self._send_interest(route)
        if route.account:
            self._forward_new_route(route)
        return True

    def route_closed(self, route: Route) -> None:
        if route in self.connections:
            self.connections.discard(route)
            self.server.stats.add_closed_route(route)
        link = (route.account, route.pool_idx)
        if link != (b"", 0):
            key = (route.remote_id, _slot(*link))
            if self.links.get(key) is route:
                del self.links[key]
            if not (self._stopping or route.no_reconnect) and route.did_solicit and self._linkable(route.url):
                self._retry(route.url, route.is_configured, link)
            return
        if self.routes.get(route.remote_id) is route:
            del self.routes[route.remote_id]
            if route.connect_urls and not self.cluster.no_advertise:
                self._remove_connect_urls(route.connect_urls)
        if self._stopping or route.no_reconnect or not route.url:
            return
        if route.did_solicit or route.retry:
            self._retry(route.url, route.is_configured, (b"", 0))

    def _retry(self, url: str, explicit: bool, link: tuple[bytes, int]) -> None:
        """Reconnect a closed route (after ROUTE_RECONNECT_DELAY if explicit, with a little jitter)."""
        attempt = _attempt(url, link)
        if attempt in self._connecting:
            return
        delay = random.random() * 0.1 + (ROUTE_RECONNECT_DELAY if explicit else 0.0)
        self._connecting.add(attempt)
        task = self.server.loop.create_task(self._reconnect(url, explicit, delay, link))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reconnect(self, url: str, explicit: bool, delay: float, link: tuple[bytes, int]) -> None:
        attempt = _attempt(url, link)
        self._connecting.discard(attempt)
        await asyncio.sleep(delay)
        if not self._stopping and attempt not in self._connecting:
            self._connecting.add(attempt)
            await self._connect(url, explicit, _GOSSIP_DEFAULT, link=link)

    # -- gossip ---------------------------------------------------------------------------------------
    def _forward_new_route(self, route: Route) -> None:
        """Tell the other routes about the new one's server, so they connect to it (nats-server's
        forwardNewRouteInfoToKnownServers, gossip modes included). A pinned account's route is told too,
        its INFO naming the account, on the receiver's route for that account if there is one: a 2.15
        peer that pools opens its pinned routes to a server it heard of through gossip only when told
        so (without it two nats-servers meeting through pynatsd had no `$SYS` route between them, and
        their JetStream meta group, which speaks in `$SYS`, never elected a leader)."""
        info = route.info
        from_gossip = route.did_solicit and not route.is_configured
        local_mode = route.gossip_mode
        if (from_gossip and local_mode != _GOSSIP_OVERRIDE) or info.get("gossip_mode") == _GOSSIP_DISABLED:
            return
        account = _text(route.account)
        # Each other server once: on its route for the account if it has one here (whether or not its
        # pool's first connection registered yet: nats-server opens both at once, in any order), else
        # on its first route. Iterating first routes only missed a server whose pinned route came
        # first: the two nats-servers of a 1py+2js cluster then had no `$SYS` route between them
        # (1 start in 8 on a loaded machine).
        receivers = dict(self.routes)
        if account:
            pinned = {remote_id: link for (remote_id, slot), link in self.links.items() if slot == account}
            receivers.update(pinned)
        for remote_id, other in receivers.items():
            if remote_id == route.remote_id or other.closed or (account and not other.remote_pool_size):
                continue
            if (not route.did_solicit and other.is_configured) or (route.did_solicit and route.is_configured):
                mode = _GOSSIP_OVERRIDE
            elif not route.did_solicit:
                mode = _GOSSIP_DISABLED
            else:
                mode = _GOSSIP_DEFAULT
            forwarded = dict(info)
            forwarded.pop("gossip_mode", None)
            if mode:
                forwarded["gossip_mode"] = mode
            if account:
                forwarded["route_account"] = account
            other.send(encoder.encode_info(forwarded))

    def implicit_route(self, info: dict[str, Any]) -> None:
        """A peer told us of another server: connect to it unless we know it (nats-server's
        processImplicitRoute)."""
        remote_id = str(info.get("server_id", ""))
        if not remote_id or remote_id == self.server.server_id:
            return
        account = str(info.get("route_account") or "")
        link = (b"", 0)
        if remote_id in self.routes:
            # known: only a pinned account's route may be missing (the server solicited us and did not
            # open it), as nats-server opens it on such an INFO
            if not account or account not in self.pinned or (remote_id, account) in self.links:
                return
            link = (account.encode(), 0)
        if self._configured(info):
            return
        ip = str(info.get("ip", ""))
        if not ip:
            return
        parts = urllib.parse.urlsplit(ip)
        if parts.hostname is None or parts.port is None:
            return
        url = f"nats-route://{_join(parts.hostname, parts.port)}/"
        if info.get("auth_required") and self.cluster.username:
            user = urllib.parse.quote(self.cluster.username, safe="")
            password = urllib.parse.quote(self.cluster.password, safe="")
            url = f"nats-route://{user}:{password}@{_join(parts.hostname, parts.port)}/"
        mode = info.get("gossip_mode", _GOSSIP_DEFAULT)
        self.solicit(url, explicit=False, gossip_mode=mode if isinstance(mode, int) else 0, link=link)

    def _configured(self, info: dict[str, Any]) -> bool:
        """True if the server of `info` is one of our configured routes (we solicit it anyway)."""
        port = info.get("port")
        candidates = {_join(str(info.get("host", "")).lower(), port if isinstance(port, int) else 0)}
        ip = urllib.parse.urlsplit(str(info.get("ip", "")))
        if ip.hostname:
            candidates.add(_join(ip.hostname.lower(), port if isinstance(port, int) else 0))
        for url in self.cluster.urls:
            parts = urllib.parse.urlsplit(url)
            if parts.hostname and _join(parts.hostname.lower(), parts.port or 0) in candidates:
                return True
        return False

    # -- interest -------------------------------------------------------------------------------------
    def watch(self, account: str, sublist: Sublist[Subscription]) -> None:
        """Propagate the local interest of `account` (its sublist tells every insert and remove)."""
        acc = account.encode()

        def changed(sub: Subscription, added: bool) -> None:
            if propagated(sub.conn) and not kept_local(sub):
                self._interest_changed(account, acc, sub, added)

        sublist.watcher = changed
        # what subscribed before the routes started (the system account's services, JetStream's):
        # counted as it stands, sent to each route as it registers
        for sub in sublist.subscriptions():
            if propagated(sub.conn) and not kept_local(sub):
                key = (account, sub.subject, sub.queue)
                self.interest[key] = self.interest.get(key, 0) + 1

    def _interest_changed(self, account: str, acc: bytes, sub: Subscription, added: bool) -> None:
        key = (account, sub.subject, sub.queue)
        before = self.interest.get(key, 0)
        after = before + 1 if added else before - 1
        if after > 0:
            self.interest[key] = after
        else:
            self.interest.pop(key, None)
            after = 0
        if sub.queue is None and (before == 0) == (after == 0):
            return  # a plain subject's interest changes only at its first and last subscription
        if not self.imports(sub.subject):
            return
        pinned = account in self.pinned
        frame = _interest_frame(acc, sub, after)
        for route in self.routes.values():
            # a peer without pool: its one route; else the pool's first connection if the account's
            size = route.remote_pool_size
            if not size or (not pinned and pool_index(account, size) == 0):
                route.send(frame)
        if pinned:
            bare = _interest_frame(b"", sub, after)  # a pinned route's ops name no account
            for (_, slot), link in self.links.items():
                if slot == account:
                    link.send(bare)
            return
        for link in self.links.values():  # the pool's other connection for the account, if up
            if not link.account and link.pool_idx == pool_index(account, link.remote_pool_size):
                link.send(frame)

    def imports(self, subject: bytes) -> bool:
        """True if our interest in `subject` may go to the peers: the import permission (nats-server's
        canImport; a wildcard subscription is checked as written, as a client's subscribe)."""
        perms = self.permissions
        return perms is None or perms.can_publish(subject)

    def _send_interest(self, route: Route) -> None:
        """All our interest a route that just registered carries: a pinned account's on its route (no
        account named); the others' on the pool's connection the peer places that account on (its
        `pool_index`), so that an account's interest and messages keep one order both ways, as between
        nats-servers (a reply's interest may not overtake the request it answers)."""
        frames = [
            encode_rsub(account, subject, queue, n if queue else 1)
            for account, subject, queue, n in self._route_interest(route)
        ]
        if frames:
            route.send(b"".join(frames))

    def _route_interest(self, route: Route) -> list[tuple[bytes, bytes, bytes | None, int]]:
        """(account as the route's ops name it, subject, queue, weight) of the interest `route` carries
        (see _send_interest), within the import permission."""
        if route.account:
            only = _text(route.account)
            return [
                (b"", subject, queue, n)
                for (account, subject, queue), n in self.interest.items()
                if account == only and self.imports(subject)
            ]
        size = route.remote_pool_size
        pinned = self.pinned if size else []
        return [
            (account.encode(), subject, queue, n)
            for (account, subject, queue), n in self.interest.items()
            if account not in pinned
            and (size <= 1 or pool_index(account, size) == route.pool_idx)
            and self.imports(subject)
        ]

    def peer_exports_changed(self, route: Route, before: dict[str, list[str]] | None) -> None:
        """The peer's export permission changed (its INFO after a reload): our interest it now takes and
        did not before goes to it (nats-server's updateRemoteRoutePerms)."""
        old, new = _export_rule(before), _export_rule(route.remote_export)
        frames = [
            encode_rsub(account, subject, queue, n if queue else 1)
            for account, subject, queue, n in self._route_interest(route)
            if new.can_subscribe(subject, None) and not old.can_subscribe(subject, None)
        ]
        if frames:
            route.send(b"".join(frames))

    # -- connect_urls, lame duck ----------------------------------------------------------------------
    def _add_connect_urls(self, urls: list[str]) -> None:
        changed = False
        for url in urls:
            if url not in self.connect_urls:
                self.connect_urls.append(url)
                changed = True
        if changed:
            self.advertise()

    def _remove_connect_urls(self, urls: list[str]) -> None:
        before = len(self.connect_urls)
        self.connect_urls = [u for u in self.connect_urls if u not in urls]
        if len(self.connect_urls) != before:
            self.advertise()

    def peer_lame_duck(self, route: Route) -> None:
        """The peer entered lame duck mode: clients stop hearing of it."""
        if route.connect_urls and not self.cluster.no_advertise:
            self._remove_connect_urls(route.connect_urls)

    def lame_duck(self) -> None:
        """Tell every route that this server enters lame duck mode (its peers drop its client URLs)."""
        frame = self.route_info({"ldm": True})
        for route in self.routes.values():
            route.send(frame)


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _export_rule(shown: dict[str, list[str]] | None) -> Permissions:
    """A peer's advertised export permission (INFO `export`) as the rules it stands for."""
    return Permissions({"subscribe": shown} if shown else {})


@functools.lru_cache(maxsize=1024)
def pool_index(account: str, pool_size: int) -> int:
    """The pool connection an account's traffic takes, as nats-server places it: FNV-1a (32 bits) of
    its name modulo the pool size."""
    return fnv1a32(account.encode()) % pool_size if pool_size > 1 else 0


def _duplicate(known: Route | None, route: Route) -> bool:
    """True if `route` duplicates the open `known` one (then not to be reconnected). nats-server's
    handleDuplicateRoute: the kept route takes over the duplicate's solicited URL and reconnects if the
    peer, having kept the other one, drops it."""
    if known is None or known.closed:
        return False
    if route.did_solicit and not known.did_solicit:
        known.did_solicit, known.url = True, route.url
    known.is_configured = known.is_configured or route.is_configured
    known.retry = True
    route.no_reconnect = True
    return True


def _interest_frame(account: bytes, sub: Subscription, after: int) -> bytes:
    """RS+ for `sub`'s subject (its queue group's weight `after`), RS- once `after` is 0."""
    if after > 0:
        return encode_rsub(account, sub.subject, sub.queue, after if sub.queue else 1)
    return encode_runsub(account, sub.subject, sub.queue)


def _slot(account: bytes, pool_idx: int) -> str:
    """The key of a connection other than a server's first: its pinned account, else `#<pool index>`."""
    return _text(account) if account else f"#{pool_idx}"


def _attempt(url: str, link: tuple[bytes, int]) -> str:
    """What tells connect attempts apart: the URL, with the slot for a pool or pinned connection."""
    return url if link == (b"", 0) else f"{url} {_slot(*link)}"


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")
