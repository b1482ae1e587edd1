"""Configuration reload (SIGHUP, `--signal reload`) and log file reopening (SIGUSR1)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pynatsd.auth.users import Authenticator
from pynatsd.base.logging import TRACE, configure_from, get_logger
from pynatsd.base.options import RELOADABLE, reload_changes, unreloadable_changes
from pynatsd.broker import trace

if TYPE_CHECKING:
    from pynatsd.lifecycle.daemon import Daemon

log = get_logger()


def apply(server: Daemon) -> None:
    """Re-read the configuration: new credentials and permissions apply to connected clients too (those
    no longer admitted are closed, subscriptions no longer permitted are dropped); logging settings apply
    at once. A file that fails, or that changes what cannot be reloaded, keeps the running configuration."""
    if server.reloader is None:
        return
    try:
        new = server.reloader()
    except Exception as exc:  # a bad file keeps the running configuration
        log.error("Failed to reload configuration: %s", exc)
        return
    unsupported = unreloadable_changes(server.options, new)
    if unsupported:  # not silently ignored: the running configuration stays, as a whole
        log.error("Failed to reload configuration: %s", "; ".join(unsupported))
        return
    changes = reload_changes(server.options, new)
    for name in RELOADABLE:
        setattr(server.options, name, getattr(new, name))
    server.options.config_digest = new.config_digest
    server.limits_changed()  # max_payload and max_control_line, for new and connected clients
    before, server.auth = server.auth, Authenticator(server.options)
    # What the auth callout granted: its users are closed by the revalidation below, as nats-server does,
    # but never looked up in an empty table meanwhile.
    server.auth.callout_grants = before.callout_grants
    for conn in list(server.clients.values()):
        auth = conn.authenticator()  # a WebSocket listener's own block is not reloaded
        conn.revalidate(auth, before if auth is server.auth else auth)
    server.configure_links()  # imports and exports as the file now has them
    server.start_system()  # accounts added to a file that had none make the system account reachable
    _reload_logging(server)
    for line in changes:
        log.info("%s", line)
    digest = f"({new.config_digest})" if new.config_digest else ""
    log.info("Reloaded server configuration %s", digest)


def _reload_logging(server: Daemon) -> None:
    """The new logging settings, as a reload applies them; a destination that fails keeps the old."""
    try:
        configure_from(server.options)
    except OSError as exc:
        log.error("Failed to apply the new logging settings: %s", exc)
    tracing = log.isEnabledFor(TRACE)
    for conn in list(server.clients.values()):
        trace.retrace(conn, tracing)


def reopen_log_file(server: Daemon) -> None:
    """Reopen the `-l` log file (after logrotate renamed it, new lines go to a new file at its path)."""
    opts = server.options
    if not opts.log_file:
        log.info("File log re-open ignored, not a file logger")
        return
    try:
        configure_from(opts)
    except OSError as exc:
        log.error("Error re-opening log file %s: %s", opts.log_file, exc)
        return
    log.info("File log re-opened")
