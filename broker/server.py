"""The server: listener, connection registry, shared state and lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import platform
import signal
import ssl
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from broker import NATS_COMPAT_VERSION, __version__
from broker.auth import DEFAULT_ACCOUNT, Authenticator
from broker.connection import SERVER_SHUTDOWN, Connection, Subscription
from broker.histogram import HistogramCounts
from broker.ids import new_server_id
from broker.logging import get_logger
from broker.options import Options
from broker.outbound import FlushScheduler
from broker.tls import monitor_context, server_context
from matcher import Sublist
from protocol import encoder

if TYPE_CHECKING:
    from broker.monitor import Monitor

log = get_logger()


@dataclass
class ClosedTotals:
    """Message counters of connections that have closed (so totals survive their connections)."""

    in_msgs: int = 0
    out_msgs: int = 0
    in_bytes: int = 0
    out_bytes: int = 0


class ServerStats:
    """Server-wide counters read by monitoring.

    Message and byte totals are not bumped on the hot path: each connection counts its own, and the
    totals are the open connections' counts plus those of closed ones.
    """

    def __init__(self, clients: dict[int, Connection]) -> None:
        self._clients = clients
        self.closed = ClosedTotals()
        self.slow_consumers = 0
        self.stale_connections = 0
        self.total_connections = 0
        self.auth_failures = 0

    def _total(self, field: str) -> int:
        return int(getattr(self.closed, field)) + sum(getattr(c, field) for c in self._clients.values())

    @property
    def in_msgs(self) -> int:
        return self._total("in_msgs")

    @property
    def out_msgs(self) -> int:
        return self._total("out_msgs")

    @property
    def in_bytes(self) -> int:
        return self._total("in_bytes")

    @property
    def out_bytes(self) -> int:
        return self._total("out_bytes")

    def add_closed(self, conn: Connection) -> None:
        closed = self.closed
        closed.in_msgs += conn.in_msgs
        closed.out_msgs += conn.out_msgs
        closed.in_bytes += conn.in_bytes
        closed.out_bytes += conn.out_bytes

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
        self.stats = ServerStats(self.clients)
        self.sublist: Sublist[Subscription] = Sublist(cache=not self.options.disable_sublist_cache)
        self.auth = Authenticator(self.options)
        self.reloader: Callable[[], Options] | None = None  # set by the CLI when a config file is used
        # Each account is an isolated subject space; $G is the default one (`self.sublist`).
        self.account_sublists: dict[str, Sublist[Subscription]] = {DEFAULT_ACCOUNT: self.sublist}
        self.scheduler = FlushScheduler()
        self.fanout = HistogramCounts(1024)  # subscriptions matched per publish (monitoring)
        self.monitor: Monitor | None = None
        self.tls_context: ssl.SSLContext | None = None  # set by start() when TLS is configured
        self.http_port = 0
        self.closed_clients: deque[Connection] = deque(maxlen=self.options.max_closed_clients)
        self.port = self.options.port
        self.loop: asyncio.AbstractEventLoop  # set by start()
        self._cid = 0
        self._listener: asyncio.base_events.Server | None = None
        self._stopped: asyncio.Event | None = None
        self._info_base: dict[str, Any] = {}

    # -- lifecycle ------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Bind the client port and start serving."""
        opts = self.options
        self.loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        port = 0 if opts.port == -1 else opts.port
        self.tls_context = server_context(opts)
        if opts.http_port or opts.https_port:
            # Monitoring first: once the client port accepts, /healthz and /varz already answer.
            from broker.monitor import Monitor

            self.monitor = Monitor(self)
            self.http_port = await self.monitor.start(
                opts.http_host or opts.host, opts.http_port or opts.https_port, monitor_context(opts)
            )
        # TLS-first (handshake_first): the handshake precedes INFO, so the listener itself wraps. Otherwise
        # each connection upgrades itself right after its plaintext INFO (Connection._upgrade_tls).
        tls_first = self.tls_context if opts.tls_handshake_first else None
        self._listener = await self.loop.create_server(
            lambda: Connection(self),
            host=opts.host or None,
            port=port,
            reuse_address=True,
            backlog=1024,
            ssl=tls_first,
            ssl_handshake_timeout=opts.tls_timeout if tls_first else None,
        )
        sockets = self._listener.sockets
        self.port = int(sockets[0].getsockname()[1]) if sockets else port
        self._info_base = self._build_info()
        log.info("Starting pynatsd %s (nats-server protocol level %s)", __version__, NATS_COMPAT_VERSION)
        log.info("  Server ID:   %s", self.server_id)
        log.info("  Server name: %s", self.server_name)
        log.info("Listening for client connections on %s:%d", opts.host, self.port)
        log.info("Server is ready")

    def sublist_for(self, account: str) -> Sublist[Subscription]:
        """The subject space of `account`, created on its first user's connect."""
        sublist = self.account_sublists.get(account)
        if sublist is None:
            sublist = Sublist(cache=not self.options.disable_sublist_cache)
            self.account_sublists[account] = sublist
        return sublist

    @property
    def listening(self) -> bool:
        """True while the client listener accepts connections."""
        return self._listener is not None and self._listener.is_serving()

    @property
    def server_name(self) -> str:
        return self.options.server_name or self.server_id

    async def shutdown(self) -> None:
        """Stop accepting, flush what each client has pending, close every connection."""
        if self._listener is None:
            return
        log.info("Initiating Shutdown...")
        self._listener.close()
        for conn in list(self.clients.values()):
            if conn.out is not None:
                conn.out.flush()
            conn.close(SERVER_SHUTDOWN)
        await self._listener.wait_closed()
        self._listener = None
        if self.monitor is not None:
            await self.monitor.stop()
        log.info("Server Exiting..")
        if self._stopped is not None:
            self._stopped.set()

    async def wait_closed(self) -> None:
        assert self._stopped is not None
        await self._stopped.wait()

    def install_signal_handlers(self) -> None:
        """SIGINT/SIGTERM: graceful stop; SIGHUP: reload the configuration (when a reloader is set)."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                self.loop.add_signal_handler(sig, self._on_stop_signal, sig)
        with contextlib.suppress(NotImplementedError, RuntimeError):
            self.loop.add_signal_handler(signal.SIGHUP, self.reload)

    def reload(self) -> None:
        """Re-reads the configuration: new credentials and permissions apply to connected clients too."""
        if self.reloader is None:
            return
        try:
            new = self.reloader()
        except Exception as exc:  # a bad file keeps the running configuration
            log.error("Failed to reload configuration: %s", exc)
            return
        self.options.extra = new.extra
        for name in (
            "username",
            "password",
            "authorization",
            "no_auth_user",
            "auth_timeout",
            "max_subscriptions",
        ):
            setattr(self.options, name, getattr(new, name))
        self.auth = Authenticator(self.options)
        for conn in list(self.clients.values()):
            conn.perms = self.auth.permissions(conn.user)
        log.info("Reloaded server configuration")

    def _on_stop_signal(self, sig: int) -> None:
        log.debug("Trapped %r signal", signal.Signals(sig).name)
        self.loop.create_task(self.shutdown())

    # -- connections ----------------------------------------------------------------------------------
    def next_cid(self) -> int:
        self._cid += 1
        return self._cid

    def accept(self, conn: Connection) -> bool:
        """Register a new connection; False when max_connections is reached."""
        limit = self.options.max_connections
        if limit >= 0 and len(self.clients) >= limit:
            log.error("%r - maximum connections exceeded", conn)
            return False
        self.clients[conn.cid] = conn
        self.stats.total_connections += 1
        return True

    def forget(self, conn: Connection) -> None:
        """Called once when a connection closes."""
        if self.clients.pop(conn.cid, None) is not None:
            self.stats.add_closed(conn)
            self.closed_clients.append(conn)
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
        if self.auth.required:
            info["auth_required"] = True
        if self.tls_context is not None:
            info["tls_required"] = True
            if opts.tls_verify:
                info["tls_verify"] = True
        info["max_payload"] = opts.max_payload
        return info

    def info_for(self, conn: Connection, connect_info: bool = False) -> bytes:
        """The INFO a connection gets on accept (or, with connect_info, after its first PONG)."""
        info = dict(self._info_base)
        info["client_id"] = conn.cid
        if conn.ip:
            info["client_ip"] = conn.ip
        if self.auth.nkeys and not connect_info:
            info["nonce"] = conn.nonce = self.auth.new_nonce()
        if connect_info:
            info["connect_info"] = True
            info["remote_account"] = conn.account
        info["pynatsd_version"] = __version__
        return encoder.encode_info(info)
