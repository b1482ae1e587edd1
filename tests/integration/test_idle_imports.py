"""What a plain server loads: the parts a plain configuration does not use stay out of the process (idle
RSS, docs/performance.md "Memory"). Read from the real `python -m pynatsd` with
`PYTHONPROFILEIMPORTTIME=1`, which logs every module imported; a monitoring port shows that the check sees
them when they do load.

ssl is not on the list: asyncio and uvloop import it themselves, whatever pynatsd does."""

from __future__ import annotations

import re

from tests.servers import ServerProcess, free_port, start_server
from tests.wire import WireClient

# Loaded only when configured: a config file (-c), monitoring (-m), account links and resolvers, operator
# mode (JWTs), JetStream, WebSocket, file logging.
UNUSED_WHEN_PLAIN = (
    "aiohttp",
    "prometheus_client",
    "pynatsd.monitor",
    "pynatsd.accounts",
    "pynatsd.auth.jwt",
    "pynatsd.auth.specs",
    "pynatsd.config.parser",
    "pynatsd.config.schema",
    "pynatsd.jetstream.stream",
    "pynatsd.websocket.server",
    "logging.handlers",
    "tempfile",
)
_IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$", re.M)


def imported(server: ServerProcess) -> set[str]:
    """The modules `server` has imported, after a client has subscribed, published and received."""
    with WireClient(server.port) as client:
        out, closed = client.exchange(b'CONNECT {"verbose":false}\r\nSUB a 1\r\nPUB a 1\r\nx\r\nPING\r\n')
    assert b"MSG a 1 1\r\nx\r\n" in out and not closed
    modules = set(_IMPORTED.findall(server.log()))
    assert "pynatsd.server" in modules  # the log does list the server's imports
    return modules


def test_a_plain_server_does_not_load_what_it_does_not_use() -> None:
    server = start_server("pynatsd", env={"PYTHONPROFILEIMPORTTIME": "1"})
    try:
        modules = imported(server)
    finally:
        server.stop()
    loaded = sorted(m for m in modules if any(m == u or m.startswith(u + ".") for u in UNUSED_WHEN_PLAIN))
    assert loaded == []


def test_a_monitoring_port_loads_its_parts() -> None:
    server = start_server("pynatsd", http_port=free_port(), env={"PYTHONPROFILEIMPORTTIME": "1"})
    try:
        modules = imported(server)
    finally:
        server.stop()
    assert {"aiohttp", "prometheus_client", "pynatsd.monitor"} <= modules
