"""`leafnodes { min_version }`: a hub refuses a leaf whose CONNECT names a lower version (its INFO, then
nats-server's error, closed) and the leaf waits 5 s before it dials again; pynatsd as the hub and as the
leaf, each beside nats-server, and the reference pair."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.leafnodes.test_nkeys import PAIRS
from tests.servers import ServerProcess, free_port, require, start_server, wait_for_port
from tests.wire import WireClient, strip_info

REQUIRED = "2.99.0"  # above either server's version
REFUSED = b"-ERR 'connection rejected since minimum version required is \"2.99.0\"'\r\n"
DROPPED = (
    "Leafnode connection dropped due to minimum version requirement. Delaying attempt to reconnect for 5s"
)


def _hub_config(leaf_port: int) -> str:
    return f'leafnodes {{ listen: 127.0.0.1:{leaf_port}, min_version: "{REQUIRED}" }}\n'


def _wait_for_log(server: ServerProcess, text: str) -> None:
    deadline = time.monotonic() + 20
    while text not in server.log():
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.05)


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_a_lower_version_is_refused_after_the_info(kind: str, tmp_path: Path) -> None:
    """A CONNECT naming 2.15.1, or no version at all: the bound account's INFO, the error, closed; one
    naming the version required is admitted."""
    require("nats-server")
    leaf_port = free_port()
    conf = tmp_path / "hub.conf"
    conf.write_text(_hub_config(leaf_port))
    server = start_server(kind, ["-c", str(conf)])
    try:
        assert server.proc is not None
        wait_for_port(leaf_port, server.proc)
        for connect in ({"version": "2.15.1"}, {}):
            with WireClient(leaf_port) as wire:
                data, closed = wire.exchange(b"CONNECT " + json.dumps(connect).encode() + b"\r\n")
            info = json.loads(data.split(b"\r\n", 1)[0][5:])
            assert (info["connect_info"], info["remote_account"]) == (True, "$G")
            assert (strip_info(data), closed) == (REFUSED, True)
        with WireClient(leaf_port) as wire:
            data, closed = wire.exchange(b'CONNECT {"version": "%s"}\r\n' % REQUIRED.encode())
        assert (b"-ERR" in data, closed) == (False, False)
        if kind == "pynatsd":
            assert "Leafnode connection closed: Minimum Version Required" in server.log()
    finally:
        server.stop()


@pytest.mark.parametrize("pair", list(PAIRS))
def test_the_refused_leaf_waits_before_it_dials_again(pair: str, tmp_path: Path) -> None:
    require("nats-server")
    hub_kind, leaf_kind = PAIRS[pair]
    leaf_port = free_port()
    hub_conf, leaf_conf = tmp_path / "hub.conf", tmp_path / "leaf.conf"
    hub_conf.write_text(_hub_config(leaf_port))
    leaf_conf.write_text(f'leafnodes {{ remotes [ {{ url: "nats-leaf://127.0.0.1:{leaf_port}" }} ] }}\n')
    hub = start_server(hub_kind, ["-c", str(hub_conf)])
    leaf = start_server(leaf_kind, ["-c", str(leaf_conf)])
    try:
        _wait_for_log(leaf, DROPPED)
        if leaf_kind == "pynatsd":
            _wait_for_log(leaf, "in 5.0s")  # its reconnect, delayed
    finally:
        leaf.stop()
        hub.stop()
