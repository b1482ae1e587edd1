"""Logging in nats-server's format: `[pid] 2006/01/02 15:04:05.000000 [INF] message`."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pynatsd.broker.options import Options

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


class NatsFormatter(logging.Formatter):
    """Formats records as nats-server does, optionally without the timestamp (`-T=false`)."""

    def __init__(self, logtime: bool = True, utc: bool = False) -> None:
        super().__init__()
        self.logtime = logtime
        self.utc = utc
        self.prefix = f"[{os.getpid()}] "

    def format(self, record: logging.LogRecord) -> str:
        tag = _LEVEL_TAGS.get(record.levelno, "INF")
        msg = record.getMessage()
        if record.exc_info:
            msg += "\n" + self.formatException(record.exc_info)
        if not self.logtime:
            return f"{self.prefix}[{tag}] {msg}"
        ts = record.created
        tm = time.gmtime(ts) if self.utc else time.localtime(ts)
        micros = int((ts % 1) * 1_000_000)
        return f"{self.prefix}{time.strftime('%Y/%m/%d %H:%M:%S', tm)}.{micros:06d} [{tag}] {msg}"


def get_logger() -> logging.Logger:
    return logging.getLogger(LOGGER_NAME)


def configure(
    *,
    debug: bool = False,
    trace: bool = False,
    logtime: bool = True,
    utc: bool = False,
    log_file: str = "",
) -> logging.Logger:
    """(Re)configure the server logger: stderr, or `log_file` when given (reopened on each call)."""
    logger = get_logger()
    # The new handler first: when the file cannot be opened (OSError), the old one keeps logging.
    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8") if log_file else logging.StreamHandler(sys.stderr)
    )
    for old in list(logger.handlers):
        logger.removeHandler(old)
        old.close()
    handler.setFormatter(NatsFormatter(logtime=logtime, utc=utc))
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
    )
