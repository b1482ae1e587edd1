"""The server: listener, connection registry and shared state; its life as a daemon (signals, lame duck,
reload, pid and ports files) is in pynatsd.lifecycle."""

from __future__ import annotations

import asyncio
import copy
import os
import platform
import ssl
import sys
from collections import deque
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from pynatsd import NATS_COMPAT_VERSION, __version__, extensions
from pynatsd.auth.users import DEFAULT_ACCOUNT, Authenticator
from pynatsd.base.build import git_commit
from pynatsd.base.histogram import HistogramCounts
from pynatsd.base.ids import new_server_id
from pynatsd.base.listener import dual_stack_socket, peer_closed
from pynatsd.base.logging import get_logger
from pynatsd.base.options import Options
from pynatsd.base.tls import monitor_context, server_context
from pynatsd.broker.connection import (
    AUTHENTICATION_VIOLATION,
    CLIENT_CLOSED,
    SERVER_SHUTDOWN,
    SLOW_CONSUMER_DEADLINE,
    SLOW_CONSUMER_PENDING,
    Connection,
)
from pynatsd.broker.delivery import Subscription
from pynatsd.broker.outbound import FlushScheduler, StallGate
from pynatsd.config.cluster import ClusterOptions, cluster_options
from pynatsd.lifecycle import lame_duck, reload, signals
from pynatsd.lifecycle.files import LifecycleFiles, PidFileError, listener_urls, socket_urls
from pynatsd.matcher import Sublist, SublistStats, combine_stats
from pynatsd.protocol import encoder
from pynatsd.websocket import start_websocket

if TYPE_CHECKING:
    from pynatsd.accounts.links import AccountLinks
    from pynatsd.accounts.resolver import ResolverService
    from pynatsd.jetstream import JetStream
    from pynatsd.monitor import Monitor
    from pynatsd.monitor.system import SystemService
    from pynatsd.protocol.parser import ParsedLine
    from pynatsd.routes.jetstream import ClusterJetStream
    from pynatsd.routes.manager import RouteManager
    from pynatsd.routes.route import Route
    from pynatsd.websocket.server import WebSocketListener

log = get_logger()


@dataclass
class ClosedTotals:
    """Message counters of connections that have closed (so totals survive their connections)."""

    in_msgs: int = 0
    out_msgs: int = 0
    in_bytes: int = 0
    out_bytes: int = 0
    slow_consumers: int = 0


class ServerStats:
    """Server-wide counters read by monitoring.

    Message and byte totals are not bumped on the hot path: each connection (client or route) counts
    its own, and the totals are the open connections' counts plus those of closed ones. `in_msgs` and
    the like include routed messages, as nats-server's do; `in_client_msgs` and the like count clients'
    only. Slow consumers and stale connections are counted in all, and routes' apart (`route_*`).
    """

    def __init__(self, clients: dict[int, Connection], stall: StallGate) -> None:
        self._clients = clients
        self._stall = stall
        self.closed = ClosedTotals()
        self.closed_by_account: dict[str, ClosedTotals] = {}  # per account (accstatz, /metrics)
        self.routes: Collection[Route] = ()  # the open route connections (the route manager's)
        self.closed_routes = ClosedTotals()
        self.slow_consumers = 0
        self.stale_connections = 0
        self.route_slow_consumers = 0
        self.route_stale_connections = 0
        self.total_connections = 0
        self.auth_failures = 0

    @property
    def stalled_clients(self) -> int:
        """Producers stalled at a consumer's gate so far (nats-server's count)."""
        return self._stall.stalled_total

    def _total(self, field: str) -> int:
        return int(getattr(self.closed, field)) + sum(getattr(c, field) for c in self._clients.values())

    def _routed(self, field: str) -> int:
        return int(getattr(self.closed_routes, field)) + sum(getattr(r, field) for r in self.routes)

    def slow_consumer_stats(self) -> dict[str, int]:
        """nats-server's `slow_consumer_stats`: slow consumers by connection kind."""
        routes = self.route_slow_consumers
        return {"clients": self.slow_consumers - routes, "routes": routes, "gateways": 0, "leafs": 0}

    def stale_connection_stats(self) -> dict[str, int]:
        """nats-server's `stale_connection_stats`: stale connections by connection kind."""
        routes = self.route_stale_connections
        return {"clients": self.stale_connections - routes, "routes": routes, "gateways": 0, "leafs": 0}

    @property
    def in_client_msgs(self) -> int:
        return self._total("in_msgs")

    @property
    def out_client_msgs(self) -> int:
        return self._total("out_msgs")

    @property
    def in_client_bytes(self) -> int:
        return self._total("in_bytes")

    @property
    def out_client_bytes(self) -> int:
        return self._total("out_bytes")

    @property
    def in_msgs(self) -> int:
        return self._total("in_msgs") + self._routed("in_msgs")

    @property
    def out_msgs(self) -> int:
        return self._total("out_msgs") + self._routed("out_msgs")

    @property
    def in_bytes(self) -> int:
        return self._total("in_bytes") + self._routed("in_bytes")

    @property
    def out_bytes(self) -> int:
        return self._total("out_bytes") + self._routed("out_bytes")

    def add_closed_route(self, route: Route) -> None:
        """Keep a closing route's counters in the totals (called once, as it leaves `routes`)."""
        closed = self.closed_routes
        closed.in_msgs += route.in_msgs
        closed.out_msgs += route.out_msgs
        closed.in_bytes += route.in_bytes
        closed.out_bytes += route.out_bytes

    def add_closed(self, conn: Connection) -> None:
        account = self.closed_by_account.get(conn.account)
        if account is None:
            account = self.closed_by_account[conn.account] = ClosedTotals()
        for closed in (self.closed, account):
            closed.in_msgs += conn.in_msgs
            closed.out_msgs += conn.out_msgs
            closed.in_bytes += conn.in_bytes
            closed.out_bytes += conn.out_bytes
        if conn.close_reason in (SLOW_CONSUMER_PENDING, SLOW_CONSUMER_DEADLINE):
            account.slow_consumers += 1

    def __repr__(self) -> str:
        return (
            f"ServerStats(in_msgs={self.in_msgs}, out_msgs={self.out_msgs}, in_bytes={self.in_bytes}, "
            f"out_bytes={self.out_bytes}, slow_consumers={self.slow_consumers}, "
            f"stale_connections={self.stale_connections}, total_connections={self.total_connections}, "
            f"auth_failures={self.auth_failures})"
        )


class Server:
    """A pynatsd server. `await start()`, then `await wait_closed()` or `await shutdown()`."""

    def __init__(self, options: Options | None = None) -> None:
        self.options = options or Options()
        self.server_id = new_server_id()
        self.start_time = datetime.now(UTC)
        self.clients: dict[int, Connection] = {}
        self.scheduler = FlushScheduler()
        self.stats = ServerStats(self.clients, self.scheduler.stall)
        self.sublist: Sublist[Subscription] = Sublist(cache=not self.options.disable_sublist_cache)
        self.auth = Authenticator(self.options)
        # bcrypt checks of CONNECTs run here, off the event loop (bcrypt releases the GIL).
        self.auth_workers = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="auth")
        self.reloader: Callable[[], Options] | None = None  # set by the CLI when a config file is used
        # Each account is an isolated subject space; $G is the default one (`self.sublist`).
        self.account_sublists: dict[str, Sublist[Subscription]] = {DEFAULT_ACCOUNT: self.sublist}
        # Caches every connection shares, since what they hold depends on nothing but their keys: parsed
        # PUB control lines, and `MSG subject ` per published subject (only subjects that may be
        # published to: not reserved). Bounded; each starts over when full.
        self.pub_lines: dict[bytes, ParsedLine] = {}
        self.msg_heads: dict[bytes, bytes] = {}
        self.fanout = HistogramCounts(1024)  # subscriptions matched per publish (monitoring)
        self.monitor: Monitor | None = None
        self.websocket: WebSocketListener | None = None  # the `websocket {}` port (pynatsd.websocket)
        self.jetstream: JetStream | None = None  # set by start() when -js / a jetstream block is given
        self.resolver: ResolverService | None = None  # set by start() with a `full` account resolver
        self.system: SystemService | None = None  # set by start() unless there is no system account
        self.links: AccountLinks | None = None  # imports between accounts; set by start() when any
        self.tls_context: ssl.SSLContext | None = None  # set by start() when TLS is configured
        self.http_port = 0
        self.closed_clients: deque[Connection] = deque(maxlen=self.options.max_closed_clients)
        self.port = self.options.port
        self.loop: asyncio.AbstractEventLoop  # set by start()
        self._cid = 0
        self._listener: asyncio.base_events.Server | None = None
        self._stopped: asyncio.Event | None = None
        self._info_base: dict[str, Any] = {}
        self.ldm = False  # lame duck mode: no new clients, the connected ones closed gradually
        self._ldm_task: asyncio.Task[None] | None = None
        self._shutting_down = False
        self.files = LifecycleFiles()  # the pid and ports files this process wrote
        # Clustering (pynatsd.routes): the `cluster {}` settings, None without one; the routes' manager.
        # A copy: the running cluster's name and port change (dynamic name, random port); the options keep
        # what was configured, which a reload compares.
        self.cluster: ClusterOptions | None = copy.deepcopy(cluster_options(self.options))
        self.route_manager: RouteManager | None = None
        self.cluster_js: ClusterJetStream | None = None  # the cluster's JetStream, when not our own

    # -- lifecycle ------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Bind the client port and start serving."""
        opts = self.options
        self.loop = asyncio.get_running_loop()
        self.scheduler.stall.loop = self.loop
        self._stopped = asyncio.Event()
        port = 0 if opts.port == -1 else opts.port
        self.tls_context = server_context(opts)
        self._log_banner()
        if opts.http_port or opts.https_port:
            # Monitoring first: once the client port accepts, /healthz and /varz already answer.
            from pynatsd.monitor import Monitor

            self.monitor = Monitor(self)
            self.http_port = await self.monitor.start(
                opts.http_host or opts.host, opts.http_port or opts.https_port, monitor_context(opts)
            )
        self.configure_links()
        self._start_jetstream()
        self._start_resolver()
        self.start_system()
        # TLS-first (handshake_first): the handshake precedes INFO, so the listener itself wraps. Otherwise
        # each connection upgrades itself right after its plaintext INFO (Connection._upgrade_tls).
        tls_first = self.tls_context if opts.tls_handshake_first else None
        dual = dual_stack_socket(opts.host, port)
        where: dict[str, Any] = (
            {"sock": dual} if dual else {"host": opts.host or None, "port": port, "reuse_address": True}
        )
        self._listener = await self.loop.create_server(
            lambda: cast(asyncio.Protocol, Connection(self)),
            **where,
            backlog=1024,
            ssl=tls_first,
            ssl_handshake_timeout=opts.tls_timeout if tls_first else None,
        )
        sockets = self._listener.sockets
        self.port = int(sockets[0].getsockname()[1]) if sockets else port
        self._info_base = self._build_info()
        if self.cluster is not None:
            from pynatsd.routes.manager import RouteManager

            self.route_manager = RouteManager(self, self.cluster)
            self.cluster_changed(notify=False)  # the first clients' INFO already names the cluster
            self._start_cluster_jetstream()
        if opts.pid_file:
            try:
                self.files.write_pid_file(opts.pid_file)
            except PidFileError:
                self._listener.close()
                if self.monitor is not None:
                    await self.monitor.stop()
                raise
        self.websocket = await start_websocket(self)
        if self.route_manager is not None:  # after the client port: route INFOs carry our client URLs
            await self.route_manager.start()
        log.info("Listening for client connections on %s:%d", opts.host, self.port)
        if self.tls_context is not None:
            log.info("TLS required for client connections")
        if opts.ports_file_dir:
            self.files.write_ports_file(opts.ports_file_dir, self.listening_urls())
        log.info("Server is ready")

    def _log_banner(self) -> None:
        """nats-server's start banner, line for line, with our own name, version and build."""
        opts = self.options
        log.info("Starting pynatsd")
        log.info(
            "  Version:  %s (implements nats-server %s; message path %s)",
            __version__,
            NATS_COMPAT_VERSION,
            extensions.describe(),
        )
        why_interpreted = extensions.interpreted_reason()
        if why_interpreted:
            log.warning("Message path interpreted, about 6x slower per message: %s", why_interpreted)
        log.info("  Git:      [%s]", git_commit() or "not set")
        log.debug("  Python:   %s", sys.version.split()[0])
        log.info("  Name:     %s", self.server_name)
        log.info("  ID:       %s", self.server_id)
        if self.auth.has_plaintext_passwords():
            log.warning("Plaintext passwords detected, use nkeys or bcrypt")
        if opts.config_file:
            digest = f"({opts.config_digest})" if opts.config_digest else ""
            log.info("Using configuration file: %s %s", opts.config_file, digest)

    def _start_cluster_jetstream(self) -> None:
        """A clustered server serves the cluster's JetStream (pynatsd.routes.jetstream) unless it has its own,
        which in a cluster lives in a domain of its own (`$JS.<domain>.API`)."""
        js = self.jetstream
        if self.auth.system_account and (js is None or js.domain):
            from pynatsd.routes.jetstream import ClusterJetStream

            self.cluster_js = ClusterJetStream(self, self.auth.system_account)
            self.cluster_js.start()

    def _start_jetstream(self) -> None:
        from pynatsd.jetstream import JetStream, from_options

        js_config = from_options(self.options)
        if js_config is not None:
            self.jetstream = JetStream(self, js_config)
            self.jetstream.start()

    def configure_links(self) -> None:
        """The imports and exports of the `accounts {}` blocks (checked by the config schema), or of the
        account JWTs; again after a reload, which replaces every link (the shadows of connected clients'
        subscriptions included)."""
        accounts = self.options.extra.get("accounts") or {}
        linked = any(acc.get("imports") for acc in accounts.values())
        if self.auth.jwt is None and self.links is None and not linked:
            return  # nothing to link: the imports module stays unloaded (idle RSS)
        from pynatsd.accounts.links import AccountLinks, link, specs_from_config

        if self.auth.jwt is not None:  # operator mode: linked as the account JWTs are used
            if self.links is None:
                self.links = AccountLinks(self)
            else:
                self.links.refresh_all()
            return
        if self.links is not None:
            self.links.uninstall()
            self.links = None
        if linked:
            specs = specs_from_config(accounts)
            streams, services, _ = link(specs)
            self.links = AccountLinks(self)
            self.links.exports = {name: spec.exports for name, spec in specs.items()}
            self.links.install(streams, services)
            self.links.resubscribe()

    def _start_resolver(self) -> None:
        """The directory account resolvers' $SYS services (updates pushed over NATS, lookups, deletes)."""
        jwt_auth = self.auth.jwt
        if jwt_auth is not None and jwt_auth.store is not None:
            from pynatsd.accounts.resolver import ResolverService

            cache = jwt_auth.resolver_type == "cache"
            self.resolver = ResolverService(self, self.auth.system_account, cache)
            self.resolver.start()

    def start_system(self) -> None:
        """The system account's requests and advisories (pynatsd.monitor.system), when a client can reach
        that account: in operator mode, or with accounts configured (without them nobody can be in it).
        Called at start and after a reload (which may add the accounts); once running, they stay."""
        if self.system is not None:
            return
        extra = self.options.extra
        reachable = self.auth.jwt is not None or bool(extra.get("accounts") or extra.get("system_account"))
        if self.auth.system_account and reachable:
            from pynatsd.monitor.system import SystemService

            self.system = SystemService(self, self.auth.system_account)
            self.system.start()

    def client_connected(self, conn: Connection) -> None:
        """Called once when a client is authenticated (its CONNECT advisory)."""
        if self.system is not None:
            self.system.client_connected(conn)

    def info_base(self) -> dict[str, Any]:
        """The server's INFO fields common to every connection."""
        return dict(self._info_base)

    def sublist_for(self, account: str) -> Sublist[Subscription]:
        """The subject space of `account`, created on its first user's connect."""
        sublist = self.account_sublists.get(account)
        if sublist is None:
            sublist = Sublist(cache=not self.options.disable_sublist_cache)
            self.account_sublists[account] = sublist
            if self.route_manager is not None:
                self.route_manager.watch(account, sublist)  # its interest goes to the routes
            if self.system is not None:  # the system services every account answers in itself
                self.system.account_created(account)
            if self.jetstream is not None and self.auth.jwt is not None:  # JetStream as its JWT says
                self.jetstream.account_created(account)
            if self.cluster_js is not None:
                self.cluster_js.account_created(account)
        return sublist

    def sublist_stats(self) -> SublistStats:
        """Index counters summed over every account's subject space."""
        return combine_stats([sl.stats() for sl in self.account_sublists.values()])

    def subscriptions(self) -> Iterator[Subscription]:
        """Every subscription, in every account."""
        for sublist in self.account_sublists.values():
            yield from sublist.subscriptions()

    def listening_urls(self) -> dict[str, list[str]]:
        """Where clients, monitoring and WebSocket clients reach this server (the ports file's content)."""
        ports: dict[str, list[str]] = {}
        if self._listener is not None:
            scheme = "tls" if self.options.tls_handshake_first else "nats"
            ports["nats"] = listener_urls(scheme, self._listener)
        if self.monitor is not None and self.monitor.sockets:
            ports["monitoring"] = [
                url for sock in self.monitor.sockets for url in socket_urls("http", sock.getsockname())
            ]
        if self.websocket is not None:
            ports["websocket"] = self.websocket.urls()
        return ports

    @property
    def routes(self) -> list[Route]:
        """The registered routes (pynatsd.routes documents their fields); empty without clustering."""
        return [] if self.route_manager is None else self.route_manager.registered()

    @property
    def listening(self) -> bool:
        """True while the client listener accepts connections."""
        return self._listener is not None and self._listener.is_serving()

    @property
    def server_name(self) -> str:
        return self.options.server_name or self.server_id

    async def shutdown(self) -> None:
        """Stop accepting, flush what each client has pending, close every connection."""
        if self._listener is None or self._shutting_down:
            return
        self._shutting_down = True
        if self._ldm_task is not None and self._ldm_task is not asyncio.current_task():
            self._ldm_task.cancel()
        log.info("Initiating Shutdown...")
        if self.system is not None:  # the last system message: the clients' disconnects are not sent
            self.system.announce("SHUTDOWN")
            self.system.stop()
            self.system = None
        self._listener.close()
        if self.websocket is not None:
            self.websocket.close()
        for conn in list(self.clients.values()):
            if conn.out is not None:
                conn.out.flush()
            conn.close(SERVER_SHUTDOWN)
        if self.route_manager is not None:
            await self.route_manager.stop()
        await self._listener.wait_closed()
        self._listener = None
        if self.websocket is not None:
            await self.websocket.wait_closed()
        if self.jetstream is not None:
            self.jetstream.stop()
        if self.cluster_js is not None:
            self.cluster_js.stop()
        if self.resolver is not None:
            self.resolver.stop()
        if self.system is not None:
            self.system.stop()
        if self.monitor is not None:
            await self.monitor.stop()
        self.files.remove()
        self.auth_workers.shutdown(wait=False, cancel_futures=True)
        log.info("Server Exiting..")
        if self._stopped is not None:
            self._stopped.set()

    # -- the daemon's life (pynatsd.lifecycle) -----------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """nats-server's signals (see lifecycle.signals)."""
        signals.install(self)

    def enter_lame_duck_mode(self) -> None:
        """Start lame duck mode (a no-op when already in it or shutting down); see lifecycle.lame_duck."""
        if self.ldm or self._shutting_down or self._listener is None:
            return
        self.ldm = True
        if self.system is not None:
            self.system.announce("LAMEDUCK")
        self._ldm_task = self.loop.create_task(lame_duck.run(self))

    def stop_accepting(self) -> None:
        """Close the client listeners (lame duck mode); connected clients stay."""
        if self._listener is not None:
            self._listener.close()
        if self.websocket is not None:
            self.websocket.close()

    def reload(self) -> None:
        """Re-read the configuration file (SIGHUP); see lifecycle.reload."""
        reload.apply(self)

    def reopen_log_file(self) -> None:
        """Reopen the `-l` log file (SIGUSR1)."""
        reload.reopen_log_file(self)

    async def wait_closed(self) -> None:
        assert self._stopped is not None
        await self._stopped.wait()

    # -- connections ----------------------------------------------------------------------------------
    def next_cid(self) -> int:
        self._cid += 1
        return self._cid

    def accept(self, conn: Connection) -> bool:
        """Register a new connection; False when max_connections is reached."""
        limit = self.options.max_connections
        # nats-server's meaning: negative (`max_connections: 0` in a file) refuses everyone; 0 = no limit.
        if limit < 0 or (limit > 0 and len(self.clients) >= limit and not self._reap_closed_peers(limit)):
            log.error("%r - maximum connections exceeded", conn)
            return False
        self.clients[conn.cid] = conn
        self.stats.total_connections += 1
        return True

    def _reap_closed_peers(self, limit: int) -> bool:
        """At the limit: close the connections whose peer has already hung up but whose end of file is not
        read yet (a TCP probe closed just before the next client connected: nats-server does not count it
        either); True when that made room. Only connections that never sent CONNECT are looked at."""
        for other in [c for c in self.clients.values() if not c.connected]:
            if other.transport is not None and peer_closed(other.transport):
                other.close(CLIENT_CLOSED)
        return len(self.clients) < limit

    def forget(self, conn: Connection) -> None:
        """Called once when a connection closes."""
        if self.clients.pop(conn.cid, None) is not None:
            self.stats.add_closed(conn)
            self.closed_clients.append(conn)
            if self.system is not None:
                self.system.client_closed(conn, auth_failed=conn.close_reason == AUTHENTICATION_VIOLATION)
        conn.transport = None

    # -- INFO -----------------------------------------------------------------------------------------
    def _build_info(self) -> dict[str, Any]:
        opts = self.options
        host, port = opts.host, self.port
        if opts.client_advertise:
            adv_host, _, adv_port = opts.client_advertise.rpartition(":")
            if adv_host and adv_port.isdigit():
                host, port = adv_host, int(adv_port)
            else:
                host = opts.client_advertise
        info: dict[str, Any] = {
            "server_id": self.server_id,
            "server_name": self.server_name,
            "version": NATS_COMPAT_VERSION,
            "proto": 1,
            "go": f"python{platform.python_version()}",
            "host": host,
            "port": port,
            "headers": opts.headers,
        }
        if self.jetstream is not None:
            info["jetstream"] = True
        if self.auth.required:
            info["auth_required"] = True
        if self.tls_context is not None:
            info["tls_required"] = True
            if opts.tls_verify:
                info["tls_verify"] = True
        info["max_payload"] = opts.max_payload
        return info

    def limits_changed(self) -> None:
        """After a reload: the INFO and every client's parser take the new max_payload and
        max_control_line (a JWT user's own smaller payload limit stays), as nats-server applies them."""
        opts = self.options
        self._info_base["max_payload"] = opts.max_payload
        if self.jetstream is not None:
            self.jetstream.max_payload = opts.max_payload
        for conn in list(self.clients.values()):
            conn.parser.max_control_line = opts.max_control_line
            conn.parser.max_payload = opts.max_payload  # revalidate applies a JWT user's own limit

    def cluster_changed(self, notify: bool = True) -> None:
        """The cluster's name or its servers' client URLs changed: the client INFO says so, and, unless
        `no_advertise`, clients that take async INFOs are told (nats-server's sendAsyncInfoToClients)."""
        manager = self.route_manager
        if manager is None:
            return
        self._info_base["cluster"] = manager.cluster.name
        if manager.cluster.no_advertise:
            return
        self._info_base["connect_urls"] = manager.own_client_urls() + manager.connect_urls
        if notify and not self.ldm:
            for conn in list(self.clients.values()):
                if conn.wants_async_info and not conn.closed:
                    conn.send_raw(self.info_for(conn, update=True))

    def info_for(
        self, conn: Connection, connect_info: bool = False, ldm: bool = False, update: bool = False
    ) -> bytes:
        """The INFO a connection gets on accept (or, with connect_info, after its first PONG; with ldm,
        the async one announcing lame duck mode; with update, the async one about the cluster)."""
        info = dict(self._info_base)
        info["client_id"] = conn.cid
        if conn.ip:
            info["client_ip"] = conn.ip
        if self.auth.wants_nonce and not connect_info and not ldm and not update:
            info["nonce"] = conn.nonce = self.auth.new_nonce()
        if connect_info:
            info["connect_info"] = True
            info["remote_account"] = conn.account
        if ldm:
            info["ldm"] = True
        info["pynatsd_version"] = __version__
        conn.adjust_info(info)
        return encoder.encode_info(info)
