"""The gateway side of a server: the gateway listener, one outbound connection per remote cluster
(configured, or learned through gossip) with retry, the inbound ones, our cluster's interest sent to them,
and the gossip of gateway URLs over the routes (nats-server's server/gateway.go).

- interest: every subscription of an account's subject space counts (this server's clients and the
  remote interest of our routes: the cluster's), except the gateways' own; inbound connections get RS+ at
  a subject's first subscription, RS- at its last (a queue group's with weight 1), once the account is
  in interest-only mode on that connection (at once, for every account: nats-server 2.9+).
- gossip: a registered outbound connection's gateway is told to our routes (an INFO with `gateway`,
  `gateway_urls` and `gateway_cmd` 1), and a route that registers hears of every outbound gateway: its
  server then connects to those it does not know. Our route INFO carries our `gateway_url`; the route
  peers' are added to the `gateway_urls` our gateway INFO lists. An inbound connection from a cluster we
  have no outbound connection to makes us open one (the superclusters' full mesh).
- reconnect: a configured gateway is retried forever, one attempt a second; an implicit one (gossip)
  `connect_retries` times.
- the system account stays out of the gateways (neither interest nor messages cross).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import random
import urllib.parse
from typing import TYPE_CHECKING, Any, cast

from pynatsd import NATS_COMPAT_VERSION
from pynatsd.base.blocks import ClusterOptions
from pynatsd.base.hashing import base62_sha256
from pynatsd.base.logging import get_logger
from pynatsd.base.tls import AcceptTls, peer_context
from pynatsd.broker.delivery import kept_local
from pynatsd.gateways.connection import (
    CMD_GOSSIP,
    GW_HASH_LEN,
    GW_REPLY_PREFIX,
    GW_SUBJECT_OFFSET,
    Gateway,
)
from pynatsd.protocol import encoder
from pynatsd.protocol.route import encode_rsub, encode_runsub

if TYPE_CHECKING:
    from pynatsd.base.blocks import GatewayOptions
    from pynatsd.broker.core import Broker
    from pynatsd.broker.delivery import Subscription
    from pynatsd.matcher import Sublist
    from pynatsd.routes.route import Route

log = get_logger()

GATEWAY_CONNECT_DELAY = 1.0  # between connect attempts (nats-server's gatewayConnectDelay)
GATEWAY_RECONNECT_DELAY = 1.0  # before reconnecting (gatewayReconnectDelay)
GATEWAY_MAX_PING_INTERVAL = 15.0  # nats-server pings gateways at least that often


def gw_hash(name: str) -> bytes:
    """nats-server's 6-character hash of a name (getGWHash): the `_GR_.` reply prefixes carry it."""
    return base62_sha256(name, 6).encode()


class GatewayListenError(Exception):
    """The gateway port cannot be bound (the server stops, as nats-server does)."""


class RemoteCluster:
    """A remote cluster we keep an outbound connection to: its URLs, configured or gossiped."""

    def __init__(self, name: str, urls: list[str], implicit: bool, tls: dict[str, Any] | None) -> None:
        self.name = name
        self.urls = list(urls)
        self.implicit = implicit
        # TLS first, checked as its `tls {}` (or the gateway block's) says; None: plaintext
        self.tls_context = peer_context(tls, False, not tls.get("insecure")) if tls is not None else None
        self.tls_timeout = float(tls["timeout"]) if tls is not None else None


class GatewayManager:
    """Every gateway connection of one server (see the module docstring)."""

    def __init__(self, server: Broker, options: GatewayOptions) -> None:
        self.server = server
        self.options = options
        self.name = options.name
        self.own_hash = gw_hash(options.name)
        # what our mapped replies start with: this cluster's hash and this server's
        self.reply_prefix = GW_REPLY_PREFIX + self.own_hash + b"." + gw_hash(server.server_id) + b"."
        self.gateway = None  # what the route machinery reads: no gateway hooks on gateway connections
        self.permissions = None  # ... and no route permissions (the `cluster {}` block's are for routes)
        # what the route machinery reads for the connections' PINGs (pynatsd.routes.route)
        self.cluster = ClusterOptions(
            ping_interval=min(server.options.ping_interval, GATEWAY_MAX_PING_INTERVAL)
        )
        self.remotes: dict[str, RemoteCluster] = {
            r.name: RemoteCluster(r.name, r.urls, implicit=False, tls=r.tls or options.tls)
            for r in options.gateways
            if r.name != self.name
        }
        self.outbound: dict[str, Gateway] = {}  # remote gateway name -> its registered connection
        self.inbound: dict[int, Gateway] = {}  # gid -> registered inbound connection
        self.connections: set[Gateway] = set()
        server.stats.gateways = self.connections  # the server's message totals include the gateways'
        self.interest: dict[tuple[str, bytes, bytes | None], int] = {}  # our cluster's, per account
        self.url = ""  # this server's gateway URL (host:port)
        self.urls: list[str] = []  # our cluster's gateway URLs (ours and the routes')
        self.route_manager: Any = None  # pynatsd.routes.manager.RouteManager, when clustered
        self._listener: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._connecting: set[str] = set()
        self._stopping = False
        self._watched: set[str] = set()  # accounts whose interest is counted

    def hash_of(self, name: str) -> bytes:
        return gw_hash(name)

    # -- mapped replies (`_GR_.<cluster hash>.<server hash>.<reply>`, nats-server's) ---------------------
    def map_reply(self, account: bytes, reply: bytes) -> bool:
        """True if a request's `reply` crossing a gateway is to be mapped: a client of this server
        subscribes to it (its answer then comes back here whatever the remote knows of our interest)."""
        sublist = self.server.account_sublists.get(account.decode("utf-8", "replace"))
        if sublist is None or reply.startswith(GW_REPLY_PREFIX):
            return False
        plain, groups = sublist.match(reply)
        return any(not sub.conn.is_route for sub in plain) or any(
            not sub.conn.is_route for group in groups for sub in group
        )

    def track_reply(self, account: bytes, routed: bytes) -> None:
        """A request came with a reply mapped by another cluster: answers go back to its gateway."""
        cluster = routed[len(GW_REPLY_PREFIX) : len(GW_REPLY_PREFIX) + GW_HASH_LEN]
        if cluster == self.own_hash:
            return
        for conn in self.outbound.values():
            if conn.remote_hash == cluster:
                conn.track_reply(account, routed)
                return

    def routed_reply(self, subject: bytes) -> bytes:
        """A `_GR_.` subject a route brought: its own subject if mapped by this cluster, else empty."""
        cluster = subject[len(GW_REPLY_PREFIX) : len(GW_REPLY_PREFIX) + GW_HASH_LEN]
        if cluster != self.own_hash or len(subject) <= GW_SUBJECT_OFFSET:
            return b""
        return subject[GW_SUBJECT_OFFSET:]

    # -- start / stop ---------------------------------------------------------------------------------
    async def listen(self) -> None:
        """Bind the gateway port (before the routes start: their INFO carries our gateway URL)."""
        opts = self.options
        server = self.server
        tls = opts.tls

        def accept() -> asyncio.Protocol:
            return cast(asyncio.Protocol, Gateway(self, outbound=False))

        factory = accept
        if tls is not None:  # TLS first: the connection is the gateway's once the handshake is done
            ctx, timeout = peer_context(tls, True, bool(tls.get("verify"))), float(tls["timeout"])
            factory = functools.partial(AcceptTls, accept, ctx, timeout, "gateway", log.error)
        try:
            self._listener = await server.loop.create_server(
                factory,
                host=opts.host or None,
                port=0 if opts.port == -1 else opts.port,
                reuse_address=True,
            )
        except OSError as exc:
            raise GatewayListenError(f"Error listening on gateway port: {opts.port} - {exc}") from None
        sockets = self._listener.sockets
        if sockets:
            opts.port = int(sockets[0].getsockname()[1])
        self.url = self._own_url()
        self.urls = [self.url]
        log.info("Gateway name is %s", self.name)
        log.info("Listening for gateways connections on %s:%d", opts.host, opts.port)
        log.info('Address for gateway "%s" is %s', self.name, self.url)

    def start(self) -> None:
        """Count the interest (after the routes, whose sublist watchers ours wrap) and connect out."""
        for account, sublist in list(self.server.account_sublists.items()):
            self.watch(account, sublist)
        for remote in list(self.remotes.values()):
            self._solicit(remote, delay=GATEWAY_CONNECT_DELAY * random.random())

    def _own_url(self) -> str:
        opts = self.options
        if opts.advertise:
            host, sep, port = opts.advertise.rpartition(":")
            return opts.advertise if sep and port.isdigit() else f"{opts.advertise}:{opts.port}"
        host = opts.host
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        return f"[{host}]:{opts.port}" if ":" in host else f"{host}:{opts.port}"

    async def stop(self) -> None:
        self._stopping = True
        if self._listener is not None:
            self._listener.close()
        for task in list(self._tasks):
            task.cancel()
        for conn in list(self.connections):
            conn.no_reconnect = True
            conn.close("Server Shutdown")
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None

    # -- INFO and CONNECT -----------------------------------------------------------------------------
    def gateway_info(self) -> bytes:
        """This server's gateway INFO."""
        server = self.server
        opts = self.options
        host, _, port = self.url.rpartition(":")
        info: dict[str, object] = {
            "server_id": server.server_id,
            "server_name": server.server_name,
            "version": NATS_COMPAT_VERSION,
            "go": server.info_base().get("go", ""),
            "host": host.strip("[]"),
            "port": int(port) if port.isdigit() else opts.port,
        }
        if opts.auth_required:
            info["auth_required"] = True
        if opts.tls is not None:
            info["tls_required"] = True
        info |= {
            "max_payload": server.options.max_payload,
            "gateway": self.name,
            "gateway_url": self.url,
            "gateway_urls": list(self.urls),
            "gateway_nrp": True,
            "gateway_iom": True,
            "headers": server.options.headers,
            "proto": 1,
        }
        return encoder.encode_info(info)

    def command_info(self, command: int, account: str) -> bytes:
        """An INFO command about `account` (`gateway_cmd_payload`: Go's []byte, base64 in JSON)."""
        payload = base64.b64encode(account.encode()).decode()
        info = {"server_id": self.server.server_id, "gateway": self.name, "gateway_cmd": command}
        return encoder.encode_info(info | {"gateway_cmd_payload": payload})

    def connect_options(self, name: str, url: str) -> dict[str, object]:
        """The CONNECT of an outbound connection (credentials from its URL, else the block's)."""
        parts = urllib.parse.urlsplit(url)
        remote = self.remotes.get(name)
        options: dict[str, object] = {"echo": False, "verbose": False, "pedantic": False}
        if parts.username:
            options["user"] = urllib.parse.unquote(parts.username)
            options["pass"] = urllib.parse.unquote(parts.password or "")
        elif self.options.username:
            options["user"], options["pass"] = self.options.username, self.options.password
        options |= {
            "tls_required": remote is not None and remote.tls_context is not None,
            "name": self.server.server_id,
            "gateway": self.name,
            "headers": self.server.options.headers,
        }
        return options

    # -- connections ----------------------------------------------------------------------------------
    def _solicit(self, remote: RemoteCluster, delay: float = 0.0) -> None:
        if self._stopping or remote.name in self._connecting or remote.name in self.outbound:
            return
        self._connecting.add(remote.name)
        task = self.server.loop.create_task(self._connect(remote, delay))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self, remote: RemoteCluster, delay: float) -> None:
        attempts = 0
        try:
            if delay:
                await asyncio.sleep(delay)
            while not self._stopping and remote.name not in self.outbound:
                url = random.choice(remote.urls) if remote.urls else ""
                parts = urllib.parse.urlsplit(url if "://" in url else f"nats://{url}")
                try:
                    await self.server.loop.create_connection(
                        functools.partial(self._outbound, remote.name, url),
                        parts.hostname or "",
                        parts.port or 0,
                        ssl=remote.tls_context,
                        server_hostname=parts.hostname if remote.tls_context else None,
                        ssl_handshake_timeout=remote.tls_timeout,
                    )
                    return
                except (OSError, ValueError) as exc:
                    attempts += 1
                    level = log.error if attempts == 1 or attempts % 60 == 0 else log.debug
                    level('Error connecting to gateway "%s" (attempt %d): %s', remote.name, attempts, exc)
                    if remote.implicit and attempts > self.options.connect_retries:
                        self.remotes.pop(remote.name, None)
                        return
                await asyncio.sleep(GATEWAY_CONNECT_DELAY)
        finally:
            self._connecting.discard(remote.name)

    def _outbound(self, name: str, url: str) -> asyncio.Protocol:
        return cast(asyncio.Protocol, Gateway(self, outbound=True, name=name, url=url))

    def register_outbound(self, conn: Gateway) -> bool:
        if self._stopping:
            return False
        known = self.outbound.get(conn.name)
        if known is not None and not known.closed:
            return False
        self.outbound[conn.name] = conn
        conn.registered = True
        log.info('%r - Outbound gateway connection to "%s" (%s) registered', conn, conn.name, conn.remote_id)
        return True

    def register_inbound(self, conn: Gateway, info: dict[str, object]) -> None:
        if self._stopping:
            return
        self.inbound[conn.rid] = conn
        conn.registered = True
        log.info('%r - Inbound gateway connection from "%s" (%s) registered', conn, conn.name, conn.remote_id)
        for account in list(self.server.account_sublists):
            if self.carries(account):
                conn.send_all_subs(account, self._interest_frames(account))
        self.implicit_gateway(info)
        self._gossip_to_inbound(conn)

    def route_closed(self, conn: Route) -> None:
        """A gateway connection closed (the route machinery's name for it): unregistered, reconnected."""
        gateway = cast(Gateway, conn)
        if gateway in self.connections:
            self.connections.discard(gateway)
            self.server.stats.add_closed_route(gateway)
        if self.inbound.get(gateway.rid) is gateway:
            del self.inbound[gateway.rid]
        if not gateway.outbound or self.outbound.get(gateway.name, gateway) is not gateway:
            return
        self.outbound.pop(gateway.name, None)
        remote = self.remotes.get(gateway.name)
        if remote is not None and not (self._stopping or gateway.no_reconnect):
            self._solicit(remote, delay=GATEWAY_RECONNECT_DELAY)

    # -- gossip ---------------------------------------------------------------------------------------
    def add_remote_urls(self, name: str, urls: list[str]) -> None:
        remote = self.remotes.get(name)
        if remote is not None:
            remote.urls += [u for u in urls if u not in remote.urls]

    def implicit_gateway(self, info: dict[str, object]) -> None:
        """A gateway we heard of (an inbound connection, gossip): connect to it unless we know it."""
        name = str(info.get("gateway") or "")
        if not name or name == self.name:
            return
        urls = info.get("gateway_urls")
        found = [str(u) for u in urls] if isinstance(urls, list) else []
        if not found and info.get("gateway_url"):
            found = [str(info["gateway_url"])]
        known = self.remotes.get(name)
        if known is not None:
            self.add_remote_urls(name, found)
            if known.implicit and name not in self.outbound:
                self._solicit(known)
            return
        if self.options.reject_unknown_cluster or not found:
            return
        remote = self.remotes[name] = RemoteCluster(name, found, implicit=True, tls=self.options.tls)
        self._solicit(remote)

    def _gossip_to_inbound(self, conn: Gateway) -> None:
        """Tell a new inbound connection of the other gateways we know (it connects to them)."""
        for name, remote in self.remotes.items():
            if name != conn.name and remote.urls:
                info = {"server_id": self.server.server_id, "gateway": name, "gateway_urls": remote.urls}
                conn.send(encoder.encode_info(info | {"gateway_cmd": CMD_GOSSIP}))

    def _gossip_info(self, name: str, urls: list[str]) -> bytes:
        info: dict[str, object] = {
            "server_id": "GW" + self.server.server_id,
            "server_name": self.server.server_name,
            "gateway": name,
            "gateway_urls": urls,
            "gateway_cmd": CMD_GOSSIP,
        }
        return encoder.encode_info(info)

    def forward_to_cluster(self, info: dict[str, object]) -> None:
        """A new outbound gateway: our routes' servers make sure they have one to it too."""
        routes = self.route_manager
        if routes is None:
            return
        urls = info.get("gateway_urls")
        frame = self._gossip_info(
            str(info.get("gateway")), [str(u) for u in urls] if isinstance(urls, list) else []
        )
        for route in routes.routes.values():
            route.send(frame)

    # the route machinery's hooks (pynatsd.routes.manager.RouteManager.gateway)
    def route_info_fields(self) -> dict[str, object]:
        return {"gateway_url": self.url} if self.url else {}

    def route_registered(self, route: Route) -> None:
        url = route.info.get("gateway_url")
        if isinstance(url, str) and url and url not in self.urls:
            self.urls.append(url)
            frame = self.gateway_info()
            for conn in self.inbound.values():
                conn.send(frame)
        for name, conn in self.outbound.items():
            remote = self.remotes.get(name)
            if remote is not None and remote.urls and not conn.closed:
                route.send(self._gossip_info(name, remote.urls))

    def route_gateway_info(self, info: dict[str, object]) -> None:
        if info.get("gateway_cmd") == CMD_GOSSIP:
            self.implicit_gateway(info)

    # -- interest -------------------------------------------------------------------------------------
    def carries(self, account: str) -> bool:
        """An account's interest and messages cross gateways: every one but the system account's (its
        requests are answered with the server's rights: none from another cluster, either way)."""
        return account != self.server.auth.system_account

    def account_created(self, account: str, sublist: Sublist[Subscription]) -> None:
        self.watch(account, sublist)
        if not self.carries(account):
            return
        for conn in list(self.outbound.values()):
            conn.watch_account(account)
        frames = self._interest_frames(account)
        for conn in list(self.inbound.values()):
            conn.send_all_subs(account, frames)

    def watch(self, account: str, sublist: Sublist[Subscription]) -> None:
        """Count the cluster's interest in `account` (after the routes', whose watcher is kept)."""
        if not self.carries(account):
            return
        acc = account.encode()
        if account in self._watched:
            return
        self._watched.add(account)
        before = sublist.watcher

        def changed(sub: Subscription, added: bool) -> None:
            if before is not None:
                before(sub, added)
            if not (isinstance(sub.conn, Gateway) or kept_local(sub)):
                self._interest_changed(account, acc, sub, added)

        sublist.watcher = changed
        for sub in sublist.subscriptions():
            if not (isinstance(sub.conn, Gateway) or kept_local(sub)):
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
        if (before == 0) == (after <= 0):
            return  # only a subject's (or queue group's) first and last subscription are told
        frame = (
            encode_rsub(acc, sub.subject, sub.queue, 1)
            if after > 0
            else encode_runsub(acc, sub.subject, sub.queue)
        )
        for conn in self.inbound.values():
            if account in conn.switched:
                conn.send(frame)

    def _interest_frames(self, account: str) -> bytes:
        acc = account.encode()
        return b"".join(
            encode_rsub(acc, subject, queue, 1) for (name, subject, queue) in self.interest if name == account
        )
