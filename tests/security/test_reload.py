"""SIGHUP reload: a connected user's permissions change without dropping the connection."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.servers import server_with_config
from tests.wire import WireClient

BEFORE = 'authorization { users = [ {user: u, password: p, permissions: {publish: ["a"]}} ] }\n'
AFTER = 'authorization { users = [ {user: u, password: p, permissions: {publish: ["b"]}} ] }\n'


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_sighup_reloads_permissions_of_connected_user(kind: str, tmp_path: Path) -> None:
    conf = tmp_path / "r.conf"
    with server_with_config(kind, conf, BEFORE) as server, WireClient(server.port) as c:
        reply, _ = c.exchange(b'CONNECT {"user":"u","pass":"p","verbose":false}\r\nPUB a 1\r\nx\r\nPING\r\n')
        assert reply == b"PONG\r\n"
        conf.write_text(AFTER)
        server.proc.send_signal(signal.SIGHUP)
        # Poll until the new rules apply (for 10 s: a loaded machine delays the reload, nats-server's
        # too); the connection itself must stay open.
        deadline = time.monotonic() + 10
        while True:
            reply, closed = c.exchange(b"PUB a 1\r\nx\r\nPING\r\n")
            assert not closed
            if reply.startswith(b"-ERR") or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert reply == b"-ERR 'Permissions Violation for Publish to \"a\"'\r\nPONG\r\n"
        reply, _ = c.exchange(b"PUB b 1\r\nx\r\nPING\r\n")
        assert reply == b"PONG\r\n"
