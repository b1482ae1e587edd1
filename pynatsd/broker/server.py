"""The server: listener, connection registry, shared state and lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import platform
import random
import signal
import ssl
import sys
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pynatsd import NATS_COMPAT_VERSION, __version__, extensions
from pynatsd.broker import trace
from pynatsd.broker.auth import DEFAULT_ACCOUNT, Authenticator
from pynatsd.broker.build import git_commit
from pynatsd.broker.connection import CLIENT_CLOSED, SERVER_SHUTDOWN, Connection
from pynatsd.broker.delivery import Subscription
from pynatsd.broker.histogram import HistogramCounts
from pynatsd.broker.ids import new_server_id
from pynatsd.broker.listener import dual_stack_socket, peer_closed
from pynatsd.broker.logging import TRACE, configure_from, get_logger
from pynatsd.broker.options import RELOADABLE, Options, reload_changes, unreloadable_changes
from pynatsd.broker.outbound import FlushScheduler, StallGate
from pynatsd.broker.tls import monitor_context, server_context
from pynatsd.matcher import Sublist, SublistStats, combine_stats
from pynatsd.protocol import encoder
from pynatsd.websocket import start_websocket

if TYPE_CHECKING:
    from pynatsd.jetstream import JetStream
    from pynatsd.monitor import Monitor
    from pynatsd.websocket.server import WebSocketListener

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

    def __init__(self, clients: dict[int, Connection], stall: StallGate) -> None:
        self._clients = clients
        self._stall = stall
        self.closed = ClosedTotals()
        self.slow_consumers = 0
        self.stale_connections = 0
        self.total_connections = 0
        self.auth_failures = 0

    @property
    def stalled_clients(self) -> int:
        """Producers stalled at a consumer's gate so far (nats-server's count)."""
        return self._stall.stalled_total

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
        self.pub_lines: dict[bytes, tuple[bytes, bytes | None, bytes, int]] = {}
        self.msg_heads: dict[bytes, bytes] = {}
        self.fanout = HistogramCounts(1024)  # subscriptions matched per publish (monitoring)
        self.monitor: Monitor | None = None
        self.websocket: WebSocketListener | None = None  # the `websocket {}` port (pynatsd.websocket)
        self.jetstream: JetStream | None = None  # set by start() when -js / a jetstream block is given
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
        self._pid_file_written = ""
        self._ports_file_written = ""

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
        self._start_jetstream()
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
        if opts.pid_file:
            try:
                write_pid_file(opts.pid_file)
            except OSError as exc:
                self._listener.close()
                if self.monitor is not None:
                    await self.monitor.stop()
                raise PidFileError(f"Could not write pidfile: {exc}") from exc
            self._pid_file_written = opts.pid_file
        self.websocket = await start_websocket(self)
        log.info("Listening for client connections on %s:%d", opts.host, self.port)
        if self.tls_context is not None:
            log.info("TLS required for client connections")
        if opts.ports_file_dir:
            self._write_ports_file(opts.ports_file_dir)
        log.info("Server is ready")

    def _log_banner(self) -> None:
        """nats-server's start banner, line for line, with our own name, version and build."""
        opts = self.options
        log.info("Starting pynatsd")
        log.info(
            "  Version:  %s (nats-server protocol level %s, message path %s)",
            __version__,
            NATS_COMPAT_VERSION,
            extensions.describe(),
        )
        log.info("  Git:      [%s]", git_commit() or "not set")
        log.debug("  Python:   %s", sys.version.split()[0])
        log.info("  Name:     %s", self.server_name)
        log.info("  ID:       %s", self.server_id)
        if self.auth.has_plaintext_passwords():
            log.warning("Plaintext passwords detected, use nkeys or bcrypt")
        if opts.config_file:
            digest = f"({opts.config_digest})" if opts.config_digest else ""
            log.info("Using configuration file: %s %s", opts.config_file, digest)

    def _start_jetstream(self) -> None:
        from pynatsd.jetstream import JetStream, from_options

        js_config = from_options(self.options)
        if js_config is not None:
            self.jetstream = JetStream(self, js_config)
            self.jetstream.start()

    def sublist_for(self, account: str) -> Sublist[Subscription]:
        """The subject space of `account`, created on its first user's connect."""
        sublist = self.account_sublists.get(account)
        if sublist is None:
            sublist = Sublist(cache=not self.options.disable_sublist_cache)
            self.account_sublists[account] = sublist
        return sublist

    def sublist_stats(self) -> SublistStats:
        """Index counters summed over every account's subject space."""
        return combine_stats([sl.stats() for sl in self.account_sublists.values()])

    def subscriptions(self) -> Iterator[Subscription]:
        """Every subscription, in every account."""
        for sublist in self.account_sublists.values():
            yield from sublist.subscriptions()

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
        self._listener.close()
        if self.websocket is not None:
            self.websocket.close()
        for conn in list(self.clients.values()):
            if conn.out is not None:
                conn.out.flush()
            conn.close(SERVER_SHUTDOWN)
        await self._listener.wait_closed()
        self._listener = None
        if self.websocket is not None:
            await self.websocket.wait_closed()
        if self.jetstream is not None:
            self.jetstream.stop()
        if self.monitor is not None:
            await self.monitor.stop()
        self._remove_lifecycle_files()
        self.auth_workers.shutdown(wait=False, cancel_futures=True)
        log.info("Server Exiting..")
        if self._stopped is not None:
            self._stopped.set()

    # -- pid and ports files --------------------------------------------------------------------------
    def _write_ports_file(self, directory: str) -> None:
        """`<dir>/<exe>_<pid>.ports`: the URLs clients and monitoring answer on, as nats-server writes it."""
        path = Path(directory) / f"{executable_name()}_{os.getpid()}.ports"
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
        try:
            write_atomically(path, json.dumps(ports, separators=(",", ":")))
        except OSError as exc:
            log.error("Error writing ports file (%s): %s", path, exc)
            return
        self._ports_file_written = str(path)

    def _remove_lifecycle_files(self) -> None:
        # nats-server leaves its pid file behind; pynatsd removes it on a clean exit, so a stale file can
        # never point `--signal` at an unrelated process that reused the pid.
        for path, what in ((self._ports_file_written, "ports"), (self._pid_file_written, "pid")):
            if path:
                try:
                    os.remove(path)
                except OSError as exc:
                    log.error("Error cleaning up %s file %s: %s", what, path, exc)
        self._ports_file_written = self._pid_file_written = ""

    async def wait_closed(self) -> None:
        assert self._stopped is not None
        await self._stopped.wait()

    def install_signal_handlers(self) -> None:
        """nats-server's signals: SIGINT/SIGTERM stop, SIGHUP reloads the configuration (when a reloader is
        set), SIGUSR1 reopens the log file, SIGUSR2 enters lame duck mode."""
        handlers = {
            signal.SIGINT: self._on_stop_signal,
            signal.SIGTERM: self._on_stop_signal,
            signal.SIGHUP: self._on_reload_signal,
            signal.SIGUSR1: self._on_reopen_signal,
            signal.SIGUSR2: self._on_ldm_signal,
        }
        for sig, handler in handlers.items():
            with contextlib.suppress(NotImplementedError, RuntimeError):
                self.loop.add_signal_handler(sig, handler, sig)

    def _trapped(self, sig: int) -> None:
        name = signal.Signals(sig)
        log.info('Trapped "%s" signal', _GO_SIGNAL_NAMES.get(name, name.name))

    def _on_reload_signal(self, sig: int) -> None:
        self._trapped(sig)
        self.reload()

    def _on_reopen_signal(self, sig: int) -> None:
        self._trapped(sig)
        self.reopen_log_file()

    def _on_ldm_signal(self, sig: int) -> None:
        self._trapped(sig)
        self.enter_lame_duck_mode()

    def reopen_log_file(self) -> None:
        """Reopen the `-l` log file (after logrotate renamed it, new lines go to a new file at its path)."""
        opts = self.options
        if not opts.log_file:
            log.info("File log re-open ignored, not a file logger")
            return
        try:
            configure_from(opts)
        except OSError as exc:
            log.error("Error re-opening log file %s: %s", opts.log_file, exc)
            return
        log.info("File log re-opened")

    # -- lame duck mode -------------------------------------------------------------------------------
    def enter_lame_duck_mode(self) -> None:
        """Start lame duck mode (a no-op when already in it or shutting down); see `_lame_duck`."""
        if self.ldm or self._shutting_down or self._listener is None:
            return
        self.ldm = True
        self._ldm_task = self.loop.create_task(self._lame_duck())

    async def _lame_duck(self) -> None:
        """nats-server's lame duck mode: close the listener, tell protocol-1 clients with an INFO carrying
        `ldm: true`, wait the grace period, then close the clients spread over the rest of
        `lame_duck_duration` (so they do not all reconnect elsewhere at once), then shut down."""
        assert self._listener is not None
        opts = self.options
        log.info("Entering lame duck mode, stop accepting new clients")
        self._listener.close()
        if self.websocket is not None:
            self.websocket.close()
        if not self.clients:
            await self.shutdown()
            return
        grace = abs(opts.lame_duck_grace_period)
        spread = opts.lame_duck_duration - grace
        if spread <= 0:
            spread = 1.0
        clients = list(self.clients.values())
        interval = min(spread / len(clients), 1.0)  # never more than a second between two closes
        for conn in clients:
            if conn.wants_async_info and not conn.closed:
                conn.send_raw(self.info_for(conn, ldm=True))
        await asyncio.sleep(grace)
        log.info("Closing existing clients")
        for i, conn in enumerate(clients):
            if conn.out is not None:
                conn.out.flush()
            conn.close(SERVER_SHUTDOWN)
            if i < len(clients) - 1:
                await asyncio.sleep(random.uniform(interval / 2, interval))
        await self.shutdown()

    def reload(self) -> None:
        """Re-reads the configuration: new credentials and permissions apply to connected clients too."""
        if self.reloader is None:
            return
        try:
            new = self.reloader()
        except Exception as exc:  # a bad file keeps the running configuration
            log.error("Failed to reload configuration: %s", exc)
            return
        unsupported = unreloadable_changes(self.options, new)
        if unsupported:  # not silently ignored: the running configuration stays, as a whole
            log.error("Failed to reload configuration: %s", "; ".join(unsupported))
            return
        changes = reload_changes(self.options, new)
        for name in RELOADABLE:
            setattr(self.options, name, getattr(new, name))
        self.options.config_digest = new.config_digest
        before, self.auth = self.auth, Authenticator(self.options)
        for conn in list(self.clients.values()):
            auth = conn.authenticator()  # a WebSocket listener's own block is not reloaded
            conn.revalidate(auth, before if auth is self.auth else auth)
        self._reload_logging()
        for line in changes:
            log.info("%s", line)
        digest = f"({new.config_digest})" if new.config_digest else ""
        log.info("Reloaded server configuration %s", digest)

    def _reload_logging(self) -> None:
        """The new logging settings, as a reload applies them; a destination that fails keeps the old."""
        try:
            configure_from(self.options)
        except OSError as exc:
            log.error("Failed to apply the new logging settings: %s", exc)
        tracing = log.isEnabledFor(TRACE)
        for conn in list(self.clients.values()):
            trace.retrace(conn, tracing)

    def _on_stop_signal(self, sig: int) -> None:
        self._trapped(sig)
        if sig == signal.SIGTERM and self.ldm:
            return  # as nats-server: SIGTERM does not cut a lame duck shutdown short (SIGINT does)
        self.loop.create_task(self.shutdown())

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

    def info_for(self, conn: Connection, connect_info: bool = False, ldm: bool = False) -> bytes:
        """The INFO a connection gets on accept (or, with connect_info, after its first PONG; with ldm,
        the async one announcing lame duck mode)."""
        info = dict(self._info_base)
        info["client_id"] = conn.cid
        if conn.ip:
            info["client_ip"] = conn.ip
        if self.auth.nkeys and not connect_info and not ldm:
            info["nonce"] = conn.nonce = self.auth.new_nonce()
        if connect_info:
            info["connect_info"] = True
            info["remote_account"] = conn.account
        if ldm:
            info["ldm"] = True
        info["pynatsd_version"] = __version__
        conn.adjust_info(info)
        return encoder.encode_info(info)


# How nats-server (Go's syscall.Signal.String) names the signals in its "Trapped" log line.
_GO_SIGNAL_NAMES = {
    signal.SIGINT: "interrupt",
    signal.SIGTERM: "terminated",
    signal.SIGHUP: "hangup",
    signal.SIGUSR1: "user defined signal 1",
    signal.SIGUSR2: "user defined signal 2",
}


class PidFileError(OSError):
    """The `-P` pid file could not be written (the server does not start)."""


def write_pid_file(path: str) -> None:
    """The pid, without a trailing newline, as nats-server writes it."""
    write_atomically(Path(path), str(os.getpid()))


def write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file and a rename, so a reader never sees the file empty or half written; in
    place (as nats-server does) when the directory does not let us create the temporary file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        path.write_text(text)


def executable_name() -> str:
    """The base name nats-server puts in the ports file name; `pynatsd` when run as `python -m pynatsd`."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name and not name.endswith(".py") else "pynatsd"


def listener_urls(scheme: str, listener: asyncio.base_events.Server) -> list[str]:
    """URLs of every socket of `listener`; a wildcard address lists every interface's address."""
    urls: list[str] = []
    for sock in listener.sockets:
        for url in socket_urls(scheme, sock.getsockname()):
            if url not in urls:
                urls.append(url)
    return urls


def socket_urls(scheme: str, sockname: Any) -> list[str]:
    """`scheme://host:port` for a bound address; for 0.0.0.0 or ::, one per interface address (nats-server's
    resolveHostPorts)."""
    host, port = str(sockname[0]), int(sockname[1])
    hosts = interface_addresses() if ipaddress.ip_address(host).is_unspecified else [host]
    return [f"{scheme}://[{h}]:{port}" if ":" in h else f"{scheme}://{h}:{port}" for h in hosts or [host]]


def interface_addresses() -> list[str]:
    """Every address of every network interface (IPv4 by ioctl, IPv6 from /proc); Linux, best effort."""
    import fcntl
    import socket
    import struct

    v4: dict[str, list[str]] = {}
    v6: dict[str, list[str]] = {}
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _index, name in socket.if_nameindex():
            with contextlib.suppress(OSError):
                req = struct.pack("256s", name.encode()[:15])
                raw = fcntl.ioctl(s.fileno(), 0x8915, req)  # SIOCGIFADDR
                v4.setdefault(name, []).append(socket.inet_ntoa(raw[20:24]))
    with contextlib.suppress(OSError), open("/proc/net/if_inet6") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 6:
                v6.setdefault(fields[5], []).append(str(ipaddress.IPv6Address(bytes.fromhex(fields[0]))))
    names = list(dict.fromkeys([*v4, *v6]))
    return [addr for name in names for addr in (*v4.get(name, []), *v6.get(name, []))]
