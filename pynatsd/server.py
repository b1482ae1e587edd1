"""The composition root: a pynatsd server is a node (the broker core, its listeners and features:
pynatsd.node) with monitoring (HTTP, /metrics, the dashboard) and the system account's services
(pynatsd.monitor.system).

It is also the embedding API (`pynatsd.Server`, docs/install.md): build it from Options, keyword
arguments (`from_kwargs`) or a configuration file (`from_config`), `await start()`, read `client_url`,
then `await stop()` (or `async with`); the command line (pynatsd.cli) runs it the same way."""

from __future__ import annotations

import dataclasses
import os
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pynatsd.base.listener import socket_urls
from pynatsd.base.logging import get_logger
from pynatsd.base.options import Options
from pynatsd.base.tls import monitor_context
from pynatsd.config.load import apply_file, check_options
from pynatsd.lifecycle.files import PidFileError
from pynatsd.node import Node

if TYPE_CHECKING:
    from pynatsd.monitor import Monitor
    from pynatsd.monitor.system import SystemService

__all__ = ["PidFileError", "Server"]


class Server(Node):
    """A pynatsd server (see the module docstring). `Server(options)` takes the Options as given;
    `from_kwargs` and `from_config` check them first, as the command line does. One start per object."""

    def __init__(self, options: Options | None = None) -> None:
        super().__init__(options)
        self.monitor: Monitor | None = None
        self._system: SystemService | None = None  # the same object as `system`, with its full type

    # -- the embedding API ------------------------------------------------------------------------------
    @classmethod
    def from_kwargs(cls, **options: Any) -> Server:
        """A server with these Options fields (`port=0, jetstream=True, store_dir=...`); an unknown name is
        a TypeError, a value a start would refuse a ValueError or OSError (as `pynatsd` reports it)."""
        opts = options_with(Options(), options)
        check_options(opts)
        return cls(opts)

    @classmethod
    def from_config(cls, path: str | os.PathLike[str], **overrides: Any) -> Server:
        """A server configured by the file at `path` (nats-server's format), then `overrides` (Options
        fields, applied over the file as the command line's flags are); refused with the errors `pynatsd -c`
        gives. Its warnings are logged; `reload()` re-reads the file."""
        file = os.fspath(path)
        opts = options_from_config(file, overrides)
        server = cls(opts)
        server.reloader = lambda: options_from_config(file, overrides, log_warnings=False)
        return server

    @property
    def client_url(self) -> str:
        """Where a client on this machine reaches the running server: `nats://host:port` (the bound port
        when the options asked for port 0 or -1; a wildcard host reads as the loopback address)."""
        if not self.listening:
            raise RuntimeError("the server is not running: await start() first")
        host = self.options.host
        if not host or host == "0.0.0.0":
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        if ":" in host:
            host = f"[{host}]"
        scheme = "tls" if self.options.tls_handshake_first else "nats"
        return f"{scheme}://{host}:{self.port}"

    async def start(self) -> None:
        """Bind the ports and serve (Node.start). When that fails part way, what it started is stopped
        again: a process embedding the server lives on after the error (the command line exits)."""
        try:
            await super().start()
        except BaseException:
            if self._listener is not None:
                self._listener.close()
                self._listener = None
            if self.websocket is not None:
                self.websocket.close()
            await self.stop_links()
            await self.stop_services()
            raise

    async def stop(self) -> None:
        """Shut down (see shutdown); a no-op when not running."""
        await self.shutdown()

    async def __aenter__(self) -> Server:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.stop()

    async def start_monitoring(self) -> None:
        opts = self.options
        if opts.http_port or opts.https_port:
            from pynatsd.monitor import Monitor  # loaded only with a monitoring port (idle RSS)

            self.monitor = Monitor(self)
            self.http_port = await self.monitor.start(
                opts.http_host or opts.host, opts.http_port or opts.https_port, monitor_context(opts)
            )

    async def stop_monitoring(self) -> None:
        if self.monitor is not None:
            await self.monitor.stop()

    def start_system(self) -> None:
        """The system account's requests and advisories (pynatsd.monitor.system), when a client can reach
        that account: in operator mode, or with accounts configured (without them nobody can be in it).
        Called at start and after a reload (which may add the accounts); once running, they stay."""
        if self.system is not None:
            return
        opts = self.options
        reachable = self.auth.jwt is not None or bool(opts.accounts or opts.system_account)
        if self.auth.system_account and reachable:
            from pynatsd.monitor.system import SystemService  # with a system account only

            self.system = self._system = SystemService(self, self.auth.system_account, self.monitor)
            self._system.start()

    def monitoring_urls(self) -> list[str]:
        if self.monitor is None:
            return []
        return [url for sock in self.monitor.sockets for url in socket_urls("http", sock.getsockname())]


# Options' field names, and the config file's and the command line's name for the JetStream store directory.
_FIELDS = frozenset(f.name for f in dataclasses.fields(Options))
_ALIASES = {"store_dir": "jetstream_store_dir"}


def options_with(opts: Options, overrides: dict[str, Any]) -> Options:
    """`opts` with `overrides` set (Options fields; `store_dir` for jetstream_store_dir). `jetstream=True`
    keeps a jetstream block the file gave, as `-js` does."""
    for name, value in overrides.items():
        field = _ALIASES.get(name, name)
        if field not in _FIELDS:
            raise TypeError(f"unknown server option: {name!r}")
        if field == "jetstream" and value is True and opts.jetstream:
            continue
        setattr(opts, field, value)
    return opts


def options_from_config(path: str, overrides: dict[str, Any], log_warnings: bool = True) -> Options:
    """Options from the file at `path`, then `overrides`, checked (see Server.from_config)."""
    opts = Options()
    warnings = apply_file(opts, path)
    options_with(opts, overrides)
    check_options(opts)
    if log_warnings:
        for warning in warnings:
            get_logger().warning("config: %s", warning)
    return opts
