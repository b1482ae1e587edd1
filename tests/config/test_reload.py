"""SIGHUP reload goes through the same schema as start: a file the schema refuses keeps the running
configuration (no one gets in who could not before), a valid one with nats-server's spellings applies."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.servers import ServerProcess, server_with_config
from tests.wire import WireClient

START = "authorization { users = [ {user: u, password: p} ] }\n"
NEW_USER = "Authorization { Users = [ {User: v, Password: q} ] }\n"


def _admitted(server: ServerProcess, user: str, password: str) -> bool:
    with WireClient(server.port) as client:
        line = json.dumps({"user": user, "pass": password, "verbose": False})
        reply, _ = client.exchange(f"CONNECT {line}\r\n".encode())
    return reply == b""


def _reload_until(server: ServerProcess, user: str, password: str) -> bool:
    """SIGHUP, then poll (bounded, not timed) until `user` is admitted."""
    server.proc.send_signal(signal.SIGHUP)
    for _ in range(200):
        if _admitted(server, user, password):
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
@pytest.mark.parametrize(
    "bad",
    [
        "bogus: 1\n",  # an unknown key
        'authorization { users = [ {user: u, password: p} ] }\noperator: "op.jwt"\n',  # unsupported access
        "authorization { token: t, users = [ {user: x, password: y} ] }\n",  # invalid combination
        'authorization { users = [ {user: x, password: y, permissions: { publish: { denny: "a" } }} ] }\n',
    ],
)
def test_failed_reload_keeps_the_running_config(kind: str, bad: str, tmp_path: Path) -> None:
    conf = tmp_path / "r.conf"
    with server_with_config(kind, conf, START) as server:
        conf.write_text(START.replace("{user: u, password: p}", "{user: w, password: w}") + bad)
        server.proc.send_signal(signal.SIGHUP)
        for _ in range(500):  # bounded wait for the server to report the refused reload
            if "failed to reload" in server.log().lower():
                break
            time.sleep(0.02)
        assert "failed to reload" in server.log().lower()
        assert _admitted(server, "u", "p")
        assert not _admitted(server, "w", "w")
        assert not _admitted(server, "x", "y")
        assert not _admitted(server, "", "")
        assert server.proc.poll() is None


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_reload_applies_nats_server_spellings(kind: str, tmp_path: Path) -> None:
    conf = tmp_path / "r.conf"
    with server_with_config(kind, conf, START) as server:
        conf.write_text(NEW_USER)
        assert _reload_until(server, "v", "q")
        assert not _admitted(server, "u", "p")
        assert not _admitted(server, "", "")


def test_reload_of_an_option_pynatsd_cannot_reload_fails_as_a_whole(tmp_path: Path) -> None:
    """A change pynatsd would not apply (here `max_pending`, which nats-server does not reload either) is
    not silently ignored: the reload fails and the running users stay."""
    conf = tmp_path / "r.conf"
    with server_with_config("pynatsd", conf, START) as server:
        conf.write_text(NEW_USER + "max_pending: 2mb\n")
        server.proc.send_signal(signal.SIGHUP)
        for _ in range(500):  # bounded wait for the refused reload to be logged
            if "config reload not supported for max_pending" in server.log():
                break
            time.sleep(0.02)
        assert "config reload not supported for max_pending: old=67108864, new=2097152" in server.log()
        assert _admitted(server, "u", "p")
        assert not _admitted(server, "v", "q")
