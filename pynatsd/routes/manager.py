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
"""

from __future__ import annotations

import asyncio
import ipaddress
import random
import ssl
import urllib.parse
from typing import TYPE_CHECKING, Any, cast

from pynatsd import NATS_COMPAT_VERSION
from pynatsd.base.ids import new_server_id
from pynatsd.base.listener import interface_addresses
from pynatsd.base.logging import get_logger
from pynatsd.base.tls import route_contexts
from pynatsd.protocol import encoder
from pynatsd.protocol.route import encode_rsub, encode_runsub
from pynatsd.routes.route import Route

if TYPE_CHECKING:
    from pynatsd.broker.core import Broker
    from pynatsd.broker.delivery import Subscription
    from pynatsd.config.cluster import ClusterOptions
    from pynatsd.matcher import Sublist

log = get_logger()

ROUTE_CONNECT_DELAY = 1.0  # between connect attempts (nats-server's routeConnectDelay)
ROUTE_RECONNECT_DELAY = 1.0  # before reconnecting an explicit route (DEFAULT_ROUTE_RECONNECT)
_GOSSIP_DEFAULT, _GOSSIP_DISABLED, _GOSSIP_OVERRIDE = 0, 1, 2


class RouteListenError(Exception):
    """The route port cannot be bound (the server stops, as nats-server does)."""


class RouteManager:
    """Every route of one server, and the interest it propagates to them."""

    def __init__(self, server: Broker, cluster: ClusterOptions, jetstream: bool = False) -> None:
        self.server = server
        self.cluster = cluster
        self.jetstream = jetstream  # this server serves JetStream (its route INFO says so)
        self.routes: dict[str, Route] = {}  # remote server id -> its registered route
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
        if not cluster.name:
            cluster.name = new_server_id()[:22]  # nats-server's dynamic name: random until a peer's
            cluster.dynamic_name = True

    def registered(self) -> list[Route]:
        return list(self.routes.values())

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
        """This server's route INFO. No `route_pool_size`: a 2.15 peer then keeps a single route with
        accounts in every op. No `compression`: the peer does not compress. No `lnoc`: it sends RS+ for
        leaf interest too."""
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
        if extra:
            info.update(extra)
        return encoder.encode_info(info)

    def connect_options(self, url: str) -> dict[str, Any]:
        """The CONNECT a soliciting side sends (credentials from the route URL, as nats-server)."""
        parts = urllib.parse.urlsplit(url)
        options: dict[str, Any] = {"echo": True, "verbose": False, "pedantic": False}
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
            self._connecting.discard(route.url)

    def solicit(self, url: str, explicit: bool, gossip_mode: int = 0) -> None:
        """Connect to the route at `url` (retried: forever if explicit, else connect_retries times)."""
        if self._stopping or url in self._connecting or url in self._self_urls:
            return
        self._connecting.add(url)
        task = self.server.loop.create_task(self._connect(url, explicit, gossip_mode))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self, url: str, explicit: bool, gossip_mode: int, delay: float = 0.0) -> None:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname or "", parts.port or 0
        attempts = 0
        try:
            if delay:
                await asyncio.sleep(delay)
            while not self._stopping:
                if explicit and url not in self.cluster.urls:
                    return  # no longer configured
                try:
                    await self.server.loop.create_connection(
                        lambda: cast(asyncio.Protocol, self._solicited(url, explicit, gossip_mode)),
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
            self._connecting.discard(url)

    def _tls_timeout(self) -> float | None:
        tls = self.cluster.tls
        return float(tls["timeout"]) if tls is not None else None

    def _solicited(self, url: str, explicit: bool, gossip_mode: int) -> Route:
        route = Route(self, did_solicit=True, url=url, is_configured=explicit)
        route.gossip_mode = gossip_mode
        return route

    def route_to_self(self, route: Route) -> None:
        if route.url:
            self._self_urls.add(route.url)

    def add_route(self, route: Route) -> bool:
        """Register a route whose handshake is done; False for a duplicate (the caller closes it)."""
        if self._stopping:
            return False
        remote_id = route.remote_id
        known = self.routes.get(remote_id)
        if known is not None and not known.closed:
            # nats-server's handleDuplicateRoute: the kept route takes over the duplicate's solicited URL
            # and reconnects if the peer, having kept the other one, drops it.
            if route.did_solicit and not known.did_solicit:
                known.did_solicit, known.url = True, route.url
            known.is_configured = known.is_configured or route.is_configured
            known.retry = True
            route.no_reconnect = True
            return False
        self.routes[remote_id] = route
        route.registered = True
        log.info("%r - Registering remote route %r", route, remote_id)
        self._forward_new_route(route)
        self._send_interest(route)
        if route.connect_urls and not self.cluster.no_advertise:
            self._add_connect_urls(route.connect_urls)
        return True

    def route_closed(self, route: Route) -> None:
        if route in self.connections:
            self.connections.discard(route)
            self.server.stats.add_closed_route(route)
        if self.routes.get(route.remote_id) is route:
            del self.routes[route.remote_id]
            if route.connect_urls and not self.cluster.no_advertise:
                self._remove_connect_urls(route.connect_urls)
        if self._stopping or route.no_reconnect or not route.url:
            return
        if route.did_solicit or route.retry:
            explicit = route.is_configured
            delay = random.random() * 0.1 + (ROUTE_RECONNECT_DELAY if explicit else 0.0)
            if route.url in self._connecting:
                return
            self._connecting.add(route.url)
            task = self.server.loop.create_task(self._reconnect(route.url, explicit, delay))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _reconnect(self, url: str, explicit: bool, delay: float) -> None:
        self._connecting.discard(url)
        await asyncio.sleep(delay)
        if not self._stopping and url not in self._connecting:
            self._connecting.add(url)
            await self._connect(url, explicit, _GOSSIP_DEFAULT)

    # -- gossip ---------------------------------------------------------------------------------------
    def _forward_new_route(self, route: Route) -> None:
        """Tell the other routes about the new one's server, so they connect to it (nats-server's
        forwardNewRouteInfoToKnownServers, gossip modes included)."""
        info = route.info
        from_gossip = route.did_solicit and not route.is_configured
        local_mode = route.gossip_mode
        if (from_gossip and local_mode != _GOSSIP_OVERRIDE) or info.get("gossip_mode") == _GOSSIP_DISABLED:
            return
        for other in self.routes.values():
            if other is route or other.closed:
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
            other.send(encoder.encode_info(forwarded))

    def implicit_route(self, info: dict[str, Any]) -> None:
        """A peer told us of another server: connect to it unless we know it (nats-server's
        processImplicitRoute)."""
        remote_id = str(info.get("server_id", ""))
        if not remote_id or remote_id == self.server.server_id or remote_id in self.routes:
            return
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
        self.solicit(url, explicit=False, gossip_mode=mode if isinstance(mode, int) else 0)

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
            if not sub.conn.is_route:
                self._interest_changed(account, acc, sub, added)

        sublist.watcher = changed

    def _interest_changed(self, account: str, acc: bytes, sub: Subscription, added: bool) -> None:
        key = (account, sub.subject, sub.queue)
        before = self.interest.get(key, 0)
        after = before + 1 if added else before - 1
        if after > 0:
            self.interest[key] = after
        else:
            self.interest.pop(key, None)
            after = 0
        if sub.queue is None:
            if before == 0 and after > 0:
                frame = encode_rsub(acc, sub.subject)
            elif before > 0 and after == 0:
                frame = encode_runsub(acc, sub.subject)
            else:
                return
        elif after > 0:
            frame = encode_rsub(acc, sub.subject, sub.queue, after)
        else:
            frame = encode_runsub(acc, sub.subject, sub.queue)
        for route in self.routes.values():
            route.send(frame)

    def _send_interest(self, route: Route) -> None:
        """All our interest, to a route that just registered."""
        frames = [
            encode_rsub(account.encode(), subject, queue, n if queue else 1)
            for (account, subject, queue), n in self.interest.items()
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
