"""nats-server's signals: SIGINT/SIGTERM stop, SIGHUP reloads the configuration (when a reloader is set),
SIGUSR1 reopens the log file, SIGUSR2 enters lame duck mode. SIGTERM does not cut lame duck mode short."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

from pynatsd.base.logging import get_logger

if TYPE_CHECKING:
    from pynatsd.lifecycle.daemon import Daemon

log = get_logger()

# How nats-server (Go's syscall.Signal.String) names the signals in its "Trapped" log line.
_GO_SIGNAL_NAMES = {
    signal.SIGINT: "interrupt",
    signal.SIGTERM: "terminated",
    signal.SIGHUP: "hangup",
    signal.SIGUSR1: "user defined signal 1",
    signal.SIGUSR2: "user defined signal 2",
}


def install(server: Daemon) -> None:
    """Handle the signals on the server's loop."""

    def stop(sig: int) -> None:
        if sig == signal.SIGTERM and server.ldm:
            return  # as nats-server: SIGTERM does not cut a lame duck shutdown short (SIGINT does)
        server.loop.create_task(server.shutdown())

    handlers: dict[int, Callable[[int], None]] = {
        signal.SIGINT: stop,
        signal.SIGTERM: stop,
        signal.SIGHUP: lambda sig: server.reload(),
        signal.SIGUSR1: lambda sig: server.reopen_log_file(),
        signal.SIGUSR2: lambda sig: server.enter_lame_duck_mode(),
    }

    def trapped(sig: int) -> None:
        name = signal.Signals(sig)
        log.info('Trapped "%s" signal', _GO_SIGNAL_NAMES.get(name, name.name))
        handlers[name](sig)

    for sig in handlers:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            server.loop.add_signal_handler(sig, trapped, sig)
