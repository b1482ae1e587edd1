"""The composition root: a pynatsd server is a node (the broker core, its listeners and features:
pynatsd.node) with monitoring (HTTP, /metrics, the dashboard) and the system account's services
(pynatsd.monitor.system). `await start()`, then `await wait_closed()` or `await shutdown()`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pynatsd.base.listener import socket_urls
from pynatsd.base.tls import monitor_context
from pynatsd.lifecycle.files import PidFileError
from pynatsd.node import Node

if TYPE_CHECKING:
    from pynatsd.base.options import Options
    from pynatsd.monitor import Monitor
    from pynatsd.monitor.system import SystemService

__all__ = ["PidFileError", "Server"]


class Server(Node):
    """A pynatsd server (see the module docstring)."""

    def __init__(self, options: Options | None = None) -> None:
        super().__init__(options)
        self.monitor: Monitor | None = None
        self._system: SystemService | None = None  # the same object as `system`, with its full type

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
