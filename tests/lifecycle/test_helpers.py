"""The lifecycle helpers on their own: URL formatting for the ports file, the executable name, log reopen."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pynatsd.base.listener import socket_urls
from pynatsd.base.logging import configure, get_logger
from pynatsd.base.options import Options
from pynatsd.lifecycle.files import executable_name
from pynatsd.server import Server


def test_socket_urls_format_ipv4_and_ipv6() -> None:
    assert socket_urls("nats", ("127.0.0.1", 4222)) == ["nats://127.0.0.1:4222"]
    assert socket_urls("http", ("::1", 8222, 0, 0)) == ["http://[::1]:8222"]


def test_socket_urls_expand_the_wildcard_address() -> None:
    urls = socket_urls("nats", ("0.0.0.0", 4222))
    assert "nats://127.0.0.1:4222" in urls
    assert "nats://0.0.0.0:4222" not in urls


@pytest.mark.parametrize(
    ("argv0", "name"),
    [("/opt/pynatsd/bin/pynatsd", "pynatsd"), ("/srv/pynatsd/__main__.py", "pynatsd"), ("natsd", "natsd")],
)
def test_executable_name(monkeypatch: pytest.MonkeyPatch, argv0: str, name: str) -> None:
    monkeypatch.setattr(sys, "argv", [argv0])
    assert executable_name() == name


def test_reopen_into_a_vanished_directory_keeps_the_old_log(tmp_path: Path) -> None:
    """A reopen that cannot create the file logs the error to the file still open, and keeps logging there."""
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    log_file = log_dir / "pynatsd.log"
    logger = get_logger()
    saved = (list(logger.handlers), logger.level, logger.propagate)
    try:
        configure(log_file=str(log_file))
        server = Server(Options(log_file=str(tmp_path / "gone" / "pynatsd.log")))
        server.reopen_log_file()
        get_logger().info("still here")
        for handler in get_logger().handlers:
            handler.flush()
        text = log_file.read_text()
        assert "[ERR] Error re-opening log file" in text and "still here" in text
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()
        for handler in saved[0]:
            logger.addHandler(handler)
        logger.setLevel(saved[1])
        logger.propagate = saved[2]
