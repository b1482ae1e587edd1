"""Logging in nats-server's format: `[pid] 2006/01/02 15:04:05.000000 [INF] message`.

Destinations as nats-server's: stderr, a file (`-l`, rotated past `log_size_limit`), the local syslog
(`-s`) or a remote one (`-r udp://host:514`, `tcp://…`, `unix:///path`). Trace (`-V`) and debug (`-D`) are
independent: trace alone shows `[TRC]` lines but no `[DBG]` ones.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import stat
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from pynatsd.base.options import Options

LOGGER_NAME = "pynatsd"
TRACE = 5  # below DEBUG, as nats-server's -V
logging.addLevelName(TRACE, "TRACE")

_LEVEL_TAGS = {
    TRACE: "TRC",
    logging.DEBUG: "DBG",
    logging.INFO: "INF",
    logging.WARNING: "WRN",
    logging.ERROR: "ERR",
    logging.CRITICAL: "FTL",
}
# What rotation appends to a log file's name: `.YYYY.MM.DD.hh.mm.ss.nnnnnnnnn` (sorts oldest first).
_BACKUP_SUFFIX = re.compile(r"\.\d{4}(?:\.\d\d){5}\.\d{9}")
# Where the local syslog daemon listens, first found wins (Linux, macOS, BSD).
SYSLOG_SOCKETS = ("/dev/log", "/var/run/syslog", "/var/run/log")


class LoggingError(OSError):
    """A log destination could not be set up (nats-server: `error connecting to syslog`)."""


class NatsFormatter(logging.Formatter):
    """Formats records as nats-server does, optionally without the timestamp (`-T=false`)."""

    def __init__(self, logtime: bool = True, utc: bool = False) -> None:
        super().__init__()
        self.logtime = logtime
        self.utc = utc
        self.prefix = f"[{os.getpid()}] "

    def format(self, record: logging.LogRecord) -> str:
        tag = _LEVEL_TAGS.get(record.levelno, "INF")
        msg = _message(self, record)
        if not self.logtime:
            return f"{self.prefix}[{tag}] {msg}"
        return f"{self.prefix}{self.timestamp(record.created)} [{tag}] {msg}"

    def timestamp(self, ts: float) -> str:
        tm = time.gmtime(ts) if self.utc else time.localtime(ts)
        return f"{time.strftime('%Y/%m/%d %H:%M:%S', tm)}.{int((ts % 1) * 1_000_000):06d}"


class SyslogFormatter(logging.Formatter):
    """Just the message: syslog carries the time, host, tag and severity itself (as nats-server's)."""

    def format(self, record: logging.LogRecord) -> str:
        return _message(self, record)


def _message(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    msg = record.getMessage()
    if record.exc_info:
        msg += "\n" + formatter.formatException(record.exc_info)
    return msg


class SizeLimitedFileHandler(logging.FileHandler):
    """A log file renamed to `<file>.YYYY.MM.DD.hh.mm.ss.nnnnnnnnn` once it passes `limit` bytes, then
    reopened, with nats-server's `Rotated log, backup saved as "…"` as the new file's first line; with
    `max_files`, only the newest `max_files - 1` backups are kept (`Purged log file "…"`)."""

    def __init__(self, filename: str, limit: int, max_files: int = 0) -> None:
        super().__init__(filename, encoding="utf-8")
        self.limit = limit
        self.max_files = max_files

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        if self.stream is not None and self.stream.tell() > self.limit:  # appending: tell() is the size
            self._rotate(record)

    def _rotate(self, record: logging.LogRecord) -> None:
        now = time.time_ns()
        stamp = time.strftime("%Y.%m.%d.%H.%M.%S", time.localtime(now // 1_000_000_000))
        backup = f"{self.baseFilename}.{stamp}.{now % 1_000_000_000:09d}"
        self.close()
        try:
            os.rename(self.baseFilename, backup)
        except OSError:
            self.limit *= 2  # nats-server's answer too: try again at twice the size
        self.stream = self._open()
        self._note(record, 'Rotated log, backup saved as "%s"', backup)
        if self.max_files > 0:
            self._purge(record)

    def _purge(self, record: logging.LogRecord) -> None:
        base = Path(self.baseFilename)
        prefix = len(base.name)
        candidates = base.parent.glob(base.name + ".*")
        backups = sorted(p for p in candidates if _BACKUP_SUFFIX.fullmatch(p.name[prefix:]))
        for old in backups[: max(0, len(backups) - (self.max_files - 1))]:
            try:
                old.unlink()
            except OSError:
                return  # tried again at the next rotation
            self._note(record, 'Purged log file "%s"', str(old))

    def _note(self, record: logging.LogRecord, msg: str, arg: str) -> None:
        """A line of the handler's own, written directly (not through the logger: no recursion)."""
        note = logging.LogRecord(record.name, logging.INFO, __file__, 0, msg, (arg,), None)
        assert self.stream is not None
        self.stream.write(self.format(note) + self.terminator)
        self.flush()


def syslog_handler(remote: str = "", local_socket: str = "") -> logging.Handler:
    """The local syslog (`local_socket`, else the first of SYSLOG_SOCKETS), or `remote`: `udp://host:port`,
    `tcp://host:port` or `unix:///path`. Raises LoggingError when it cannot be reached."""
    address: str | tuple[str, int]
    kind = socket.SOCK_DGRAM
    if remote:
        url = urlsplit(remote)
        if url.scheme in ("udp", "tcp"):
            if not url.hostname:
                raise LoggingError(f"error invalid syslog address: {remote!r}")
            address = (url.hostname, url.port or 514)
            kind = socket.SOCK_DGRAM if url.scheme == "udp" else socket.SOCK_STREAM
        elif url.scheme == "unix":
            address = url.path
        else:
            raise LoggingError(f"error invalid network type: {url.scheme!r}")
    else:
        address = local_socket or next((p for p in SYSLOG_SOCKETS if _is_socket(p)), SYSLOG_SOCKETS[0])
    if isinstance(address, str):
        _check_unix_socket(address)  # SysLogHandler ignores this failure and would drop every line
    # Imported here: logging.handlers brings pickle, queue and threading machinery that a server without
    # syslog never uses (idle RSS).
    import logging.handlers

    class NatsSysLogHandler(logging.handlers.SysLogHandler):
        """Syslog with nats-server's severities (trace as notice) and its tag: the executable's name."""

        def mapPriority(self, levelName: str) -> str:  # the stdlib names it so
            if levelName == "TRACE" or levelName == "INFO":
                return "notice"  # nats-server's Noticef and Tracef both write notices
            return super().mapPriority(levelName)

    try:
        handler = NatsSysLogHandler(address, logging.handlers.SysLogHandler.LOG_DAEMON, kind)
    except OSError as exc:
        raise LoggingError(f"error connecting to syslog: {exc}") from None
    handler.ident = f"{_executable()}[{os.getpid()}]: "
    handler.setFormatter(SyslogFormatter())
    return handler


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def _check_unix_socket(path: str) -> None:
    error: OSError | None = None
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        with socket.socket(socket.AF_UNIX, kind) as probe:
            try:
                probe.connect(path)
                return
            except OSError as exc:
                error = error or exc
    raise LoggingError(f"error connecting to syslog: {error}")


def _executable() -> str:
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name and not name.endswith(".py") else "pynatsd"


def _no_debug(record: logging.LogRecord) -> bool:
    """Under trace without debug, nats-server prints [TRC] lines but no [DBG] ones."""
    return record.levelno != logging.DEBUG


def get_logger() -> logging.Logger:
    return logging.getLogger(LOGGER_NAME)


def configure(
    *,
    debug: bool = False,
    trace: bool = False,
    logtime: bool = True,
    utc: bool = False,
    log_file: str = "",
    log_size_limit: int = 0,
    log_max_num: int = 0,
    syslog: bool = False,
    remote_syslog: str = "",
    syslog_socket: str = "",
) -> logging.Logger:
    """(Re)configure the server logger: a file (reopened on each call) when `log_file` is given, else the
    local or remote syslog, else stderr (nats-server's precedence)."""
    logger = get_logger()
    # The new handler first: when it cannot be opened (OSError), the old one keeps logging.
    handler: logging.Handler
    if log_file:
        handler = (
            SizeLimitedFileHandler(log_file, log_size_limit, log_max_num)
            if log_size_limit > 0
            else logging.FileHandler(log_file, encoding="utf-8")
        )
        handler.setFormatter(NatsFormatter(logtime=logtime, utc=utc))
    elif syslog or remote_syslog:
        handler = syslog_handler("" if syslog else remote_syslog, syslog_socket)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(NatsFormatter(logtime=logtime, utc=utc))
    for old in list(logger.handlers):
        logger.removeHandler(old)
        old.close()
    if trace and not debug:
        handler.addFilter(_no_debug)
    logger.addHandler(handler)
    logger.setLevel(TRACE if trace else logging.DEBUG if debug else logging.INFO)
    logger.propagate = False
    return logger


def configure_from(options: Options) -> logging.Logger:
    """`configure` with the logging settings of `options` (start-up, and SIGUSR1's reopen)."""
    return configure(
        debug=options.debug,
        trace=options.trace,
        logtime=options.logtime,
        utc=options.logtime_utc,
        log_file=options.log_file,
        log_size_limit=options.log_size_limit,
        log_max_num=options.log_max_num,
        syslog=options.syslog,
        remote_syslog=options.remote_syslog,
    )
