"""A node: the broker core (pynatsd.broker.core) with its listeners and features — the client port,
account links and resolvers, JetStream, the routes of a cluster and the WebSocket port — started and stopped
in nats-server's order. The daemon's life (signals, lame duck, reload, pid and ports files) is in
pynatsd.lifecycle; monitoring and the system account's services are added by the composition root,
pynatsd.server."""

from __future__ import annotations

import asyncio
import copy
import platform
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from pynatsd import NATS_COMPAT_VERSION, __version__, extensions
from pynatsd.base.build import git_commit
from pynatsd.base.listener import dual_stack_socket, listener_urls
from pynatsd.base.logging import get_logger
from pynatsd.base.options import Options
from pynatsd.base.tls import server_context
from pynatsd.broker.connection import SERVER_SHUTDOWN, Connection
from pynatsd.broker.core import Broker
from pynatsd.broker.delivery import Subscription
from pynatsd.config.cluster import cluster_options
from pynatsd.config.gateway import gateway_options
from pynatsd.config.jetstream import JsConfig, from_options, is_cluster_member
from pynatsd.lifecycle import lame_duck, reload, signals
from pynatsd.lifecycle.files import LifecycleFiles, PidFileError
from pynatsd.matcher import Sublist
from pynatsd.mqtt import start_mqtt
from pynatsd.websocket import start_websocket

if TYPE_CHECKING:
    from pynatsd.accounts.links import AccountLinks
    from pynatsd.accounts.resolver import ResolverService
    from pynatsd.base.blocks import GatewayOptions
    from pynatsd.gateways.manager import GatewayManager
    from pynatsd.jetstream import JetStream
    from pynatsd.leafnodes.leaf import LeafConnection
    from pynatsd.leafnodes.manager import LeafManager
    from pynatsd.mqtt.listener import MQTTListener
    from pynatsd.raft.member import MetaMember
    from pynatsd.routes.jetstream import ClusterJetStream
    from pynatsd.routes.manager import RouteManager
    from pynatsd.routes.route import Route
    from pynatsd.websocket.server import WebSocketListener

log = get_logger()


class Node(Broker):
    """The broker with its listeners and features (see the module docstring). The composition root,
    pynatsd.server.Server, adds monitoring and the system account's services."""

    def __init__(self, options: Options | None = None) -> None:
        super().__init__(options)
        self.reloader: Callable[[], Options] | None = None  # set by the CLI when a config file is used
        self.links: AccountLinks | None = None  # imports between accounts; set by start() when any
        self.websocket: WebSocketListener | None = None  # the `websocket {}` port (pynatsd.websocket)
        self.mqtt: MQTTListener | None = None  # the `mqtt {}` port (pynatsd.mqtt)
        self.jetstream: JetStream | None = None  # set by start() when -js / a jetstream block is given
        self.resolver: ResolverService | None = None  # set by start() with a `full` account resolver
        self.http_port = 0  # the monitoring port, when the composition root starts one
        self._listener: asyncio.base_events.Server | None = None
        self._stopped: asyncio.Event | None = None
        self._ldm_task: asyncio.Task[None] | None = None
        self._shutting_down = False
        self.files = LifecycleFiles()  # the pid and ports files this process wrote
        # Clustering (pynatsd.routes): the running cluster's settings (see Broker.cluster); its manager.
        self.cluster = copy.deepcopy(cluster_options(self.options))
        self.route_manager: RouteManager | None = None
        self.cluster_js: ClusterJetStream | None = None  # the cluster's JetStream, when not our own
        self.meta_member: MetaMember | None = None  # in the cluster's meta group (-js on a clustered server)
        # Gateways (pynatsd.gateways): the `gateway {}` block's settings; its manager once started.
        self.gateway = copy.deepcopy(gateway_options(self.options))
        self.gateway_manager: GatewayManager | None = None
        self.leaf_manager: LeafManager | None = None  # pynatsd.leafnodes, with a `leafnodes {}` block

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
        await self.start_monitoring()  # first: once the client port accepts, /healthz and /varz answer
        self.configure_links()
        self._start_jetstream()
        self._start_resolver()
        self.start_system()
        self._start_auth_callout()
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

            self.route_manager = RouteManager(self, self.cluster, jetstream=self.jetstream is not None)
            self.route_manager.advertise(notify=False)  # the first clients' INFO already names the cluster
            self._start_cluster_jetstream()
        if opts.pid_file:
            try:
                self.files.write_pid_file(opts.pid_file)
            except PidFileError:
                self._listener.close()
                await self.stop_monitoring()
                raise
        self.websocket = await start_websocket(self)
        self.mqtt = await start_mqtt(self, self.jetstream)
        if self.gateway is not None:  # before the routes: their INFO carries our gateway URL
            await self._listen_gateways(self.gateway)
        if self.route_manager is not None:  # after the client port: route INFOs carry our client URLs
            await self.route_manager.start()
        if self.gateway_manager is not None:
            self.gateway_manager.start()
        if self.options.leafnodes is not None:  # after the routes: its interest watcher comes second
            from pynatsd.leafnodes.manager import LeafManager

            domain = self.jetstream.domain if self.jetstream is not None else None
            self.leaf_manager = LeafManager(self, copy.deepcopy(self.options.leafnodes), domain)
            await self.leaf_manager.start()
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

    async def _listen_gateways(self, gateway: GatewayOptions) -> None:
        from pynatsd.gateways.manager import GatewayManager

        self.gateway_manager = GatewayManager(self, gateway)
        if self.route_manager is not None:
            self.route_manager.gateway = self.gateway_manager
            self.gateway_manager.route_manager = self.route_manager
        await self.gateway_manager.listen()

    def _start_cluster_jetstream(self) -> None:
        """A clustered server serves the cluster's JetStream (pynatsd.routes.jetstream) unless it has its own,
        which in a cluster lives in a domain of its own (`$JS.<domain>.API`). With JetStream on and no
        domain, it is a member of the cluster's meta group (pynatsd.raft.member) instead of a JetStream."""
        js = self.jetstream
        system = self.auth.system_account
        if system and (js is None or js.domain):
            from pynatsd.routes.jetstream import ClusterJetStream

            js_config = self._cluster_member_config()
            if js_config is not None:
                from pynatsd.raft.member import MetaMember

                routes = self.route_manager
                names = (lambda: [r.remote_name for r in routes.routes.values()]) if routes else list
                self.meta_member = MetaMember(
                    self,
                    system,
                    js_config.store_dir,
                    names,
                    js_config.meta_compact,
                    js_config.meta_compact_size,
                    js_config,
                )
                self.meta_member.start()
            self.cluster_js = ClusterJetStream(self, system, self.meta_member)
            self.cluster_js.start()

    def _cluster_member_config(self) -> JsConfig | None:
        """The JetStream settings when this server is a meta group member rather than a JetStream."""
        member = is_cluster_member(self.options, self.cluster is not None)
        return from_options(self.options) if member else None

    def _start_auth_callout(self) -> None:
        callout = self.options.auth_callout
        # In operator mode, any account JWT may delegate its users (its `authorization`).
        if callout is not None or self.options.trusted is not None:
            from pynatsd.broker.callout import AuthCallout

            self.callout = AuthCallout(self, callout)

    def _start_jetstream(self) -> None:
        from pynatsd.jetstream import JetStream

        js_config = from_options(self.options)
        if js_config is not None and self._cluster_member_config() is None:
            self.jetstream = JetStream(self, js_config)
            self.jetstream.start()

    def configure_links(self) -> None:
        """The imports and exports of the `accounts {}` blocks (checked by the config schema), or of the
        account JWTs; again after a reload, which replaces every link (the shadows of connected clients'
        subscriptions included)."""
        accounts = self.options.accounts
        linked = any(acc.imports for acc in accounts.values())
        if self.auth.jwt is None and self.links is None and not linked:
            return  # nothing to link: the imports module stays unloaded (idle RSS)
        from pynatsd.accounts.links import AccountLinks
        from pynatsd.auth.specs import link, specs_from_config

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

    # -- hooks of the composition root (pynatsd.server) ---------------------------------------------------
    async def start_monitoring(self) -> None:
        """The monitoring port, started before the client port (none here: see pynatsd.server)."""

    async def stop_monitoring(self) -> None:
        """Stop what start_monitoring started."""

    def monitoring_urls(self) -> list[str]:
        """Where the monitoring port is reached (none here)."""
        return []

    def start_system(self) -> None:
        """The system account's services, at start and after a reload (none here: see pynatsd.server)."""

    def account_created(self, account: str, sublist: Sublist[Subscription]) -> None:
        """Its interest goes to the routes, the system services answer in it, and JetStream serves it as
        its JWT says."""
        if self.route_manager is not None:
            self.route_manager.watch(account, sublist)
        if self.gateway_manager is not None:  # after the routes: its watcher wraps theirs
            self.gateway_manager.account_created(account, sublist)
        if self.leaf_manager is not None:
            self.leaf_manager.watch(account, sublist)
        super().account_created(account, sublist)
        if self.jetstream is not None and self.auth.jwt is not None:
            self.jetstream.account_created(account)
        if self.cluster_js is not None:
            self.cluster_js.account_created(account)

    def listening_urls(self) -> dict[str, list[str]]:
        """Where clients, monitoring and WebSocket clients reach this server (the ports file's content)."""
        ports: dict[str, list[str]] = {}
        if self._listener is not None:
            scheme = "tls" if self.options.tls_handshake_first else "nats"
            ports["nats"] = listener_urls(scheme, self._listener)
        monitoring = self.monitoring_urls()
        if monitoring:
            ports["monitoring"] = monitoring
        if self.websocket is not None:
            ports["websocket"] = self.websocket.urls()
        return ports

    @property
    def routes(self) -> list[Route]:
        """The registered routes (pynatsd.routes documents their fields); empty without clustering."""
        return [] if self.route_manager is None else self.route_manager.registered()

    @property
    def leafnodes(self) -> list[LeafConnection]:
        """The registered leaf node connections (pynatsd.leafnodes documents their fields)."""
        return [] if self.leaf_manager is None else self.leaf_manager.registered()

    @property
    def listening(self) -> bool:
        """True while the client listener accepts connections."""
        return self._listener is not None and self._listener.is_serving()

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
        if self.mqtt is not None:
            self.mqtt.close()
            self.mqtt.close_clients()
        for conn in list(self.clients.values()):
            if conn.out is not None:
                conn.out.flush()
            conn.close(SERVER_SHUTDOWN)
        await self.stop_links()
        await self._listener.wait_closed()
        self._listener = None
        if self.websocket is not None:
            await self.websocket.wait_closed()
        if self.mqtt is not None:
            await self.mqtt.wait_closed()
        await self.stop_services()
        log.info("Server Exiting..")
        if self._stopped is not None:
            self._stopped.set()

    async def stop_links(self) -> None:
        """Stop the auth callout and the gateways, routes and leaf nodes (shutdown, and what undoes a start
        that failed part way)."""
        if self.callout is not None:
            self.callout.stop()
        if self.gateway_manager is not None:
            await self.gateway_manager.stop()
        if self.route_manager is not None:
            await self.route_manager.stop()
        if self.leaf_manager is not None:
            await self.leaf_manager.stop()

    async def stop_services(self) -> None:
        """Stop the features, the monitoring port and the workers, remove the pid and ports files: the end
        of shutdown, and what undoes a start that failed part way."""
        if self.jetstream is not None:
            self.jetstream.stop()
        if self.cluster_js is not None:
            self.cluster_js.stop()
        if self.meta_member is not None:
            self.meta_member.stop()
        if self.resolver is not None:
            self.resolver.stop()
        if self.system is not None:
            self.system.stop()
        await self.stop_monitoring()
        self.files.remove()
        self.auth_workers.shutdown(wait=False, cancel_futures=True)

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
        if self.mqtt is not None:
            self.mqtt.close()

    def reload(self) -> None:
        """Re-read the configuration file (SIGHUP); see lifecycle.reload."""
        reload.apply(self)

    def reopen_log_file(self) -> None:
        """Reopen the `-l` log file (SIGUSR1)."""
        reload.reopen_log_file(self)

    async def wait_closed(self) -> None:
        assert self._stopped is not None
        await self._stopped.wait()

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
        super().limits_changed()
        if self.jetstream is not None:
            self.jetstream.max_payload = self.options.max_payload
