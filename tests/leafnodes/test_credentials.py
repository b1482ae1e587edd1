"""A remote with `credentials`: a leaf binds its account to a hub in operator mode by the creds file's user
JWT and the hub's nonce signed with its seed; pynatsd as the leaf and as the hub, each beside nats-server,
and the reference pair."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from tests.jwt.issuer import creds
from tests.jwt.world import World
from tests.leafnodes.conftest import collect, ready, settled, track
from tests.servers import ServerProcess, free_port, require, start_server

Servers = tuple[ServerProcess, ServerProcess, Path]


def _remote(port: int, credentials: Path) -> str:
    url = f"nats-leaf://127.0.0.1:{port}"
    return f'leafnodes {{ remotes [ {{ url: "{url}", credentials: "{credentials}" }} ] }}\n'


# (hub, leaf)
PAIRS = {
    "pynatsd-leaf": ("nats-server", "pynatsd"),
    "pynatsd-hub": ("pynatsd", "nats-server"),
    "pynatsd-both": ("pynatsd", "pynatsd"),
    "nats-server": ("nats-server", "nats-server"),
}


@pytest.fixture(scope="module", params=list(PAIRS))
def linked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """A hub in operator mode and a leaf dialling it with a creds file of account A's user."""
    require("nats-server")
    directory = tmp_path_factory.mktemp("creds")
    world = World()
    conf = world.config(directory)
    leaf_port = free_port()
    conf.write_text(conf.read_text() + f"leafnodes {{ listen: 127.0.0.1:{leaf_port} }}\n")
    token, key = world.user("leaf")
    leaf_creds = creds(directory / "leaf.creds", token, key)
    client_token, client_key = world.user("client")
    client_creds = creds(directory / "client.creds", client_token, client_key)
    leaf_conf = directory / "leaf.conf"
    leaf_conf.write_text(_remote(leaf_port, leaf_creds))
    hub_kind, leaf_kind = PAIRS[request.param]
    hub = start_server(hub_kind, ["-c", str(conf)])
    leaf = start_server(leaf_kind, ["-c", str(leaf_conf)])
    yield hub, leaf, client_creds
    leaf.stop()
    hub.stop()


async def test_the_creds_user_binds_the_account(linked: Servers) -> None:
    hub_server, leaf_server, client_creds = linked
    hub = track(await nats.connect(hub_server.url, user_credentials=str(client_creds), allow_reconnect=False))
    leaf = track(await nats.connect(leaf_server.url, allow_reconnect=False))
    on_hub = await collect(hub, "creds.>")
    on_leaf = await collect(leaf, "down.>")
    await ready(hub, leaf)
    await ready(leaf, hub)
    await leaf.publish("creds.up", b"1")
    await hub.publish("down.x", b"2")
    await settled(leaf, hub, on_hub, "creds.mark")
    await settled(hub, leaf, on_leaf, "down.mark")
    assert (on_hub, on_leaf) == ([("creds.up", b"1")], [("down.x", b"2")])
    await hub.close()
    await leaf.close()


def test_an_unreadable_creds_file_keeps_the_remote_down(tmp_path: Path) -> None:
    """The file is read at each connect: missing, the link never comes up, the error named without a path."""
    require("nats-server")
    hub_port = free_port()
    hub_conf = tmp_path / "hub.conf"
    hub_conf.write_text(f"leafnodes {{ listen: 127.0.0.1:{hub_port} }}\n")
    hub = start_server("nats-server", ["-c", str(hub_conf)])
    leaf_conf = tmp_path / "leaf.conf"
    missing = tmp_path / "missing.creds"
    leaf_conf.write_text(_remote(hub_port, missing))
    leaf = start_server("pynatsd", ["-c", str(leaf_conf)])
    try:
        deadline = time.monotonic() + 10
        while "credentials file cannot be read" not in leaf.log():
            assert time.monotonic() < deadline, leaf.log()
            time.sleep(0.05)
        assert str(missing) not in leaf.log()
    finally:
        leaf.stop()
        hub.stop()


def test_a_leaf_user_with_permissions_is_refused(tmp_path: Path) -> None:
    """pynatsd does not apply a JWT user's permissions to a leaf connection: such a user is refused rather
    than let in with none (fail closed)."""
    world = World()
    conf = world.config(tmp_path)
    leaf_port = free_port()
    conf.write_text(conf.read_text() + f"leafnodes {{ listen: 127.0.0.1:{leaf_port} }}\n")
    token, key = world.user("limited", pub={"allow": ["only.this"]})
    leaf_conf = tmp_path / "leaf.conf"
    leaf_conf.write_text(_remote(leaf_port, creds(tmp_path / "limited.creds", token, key)))
    hub = start_server("pynatsd", ["-c", str(conf)])
    leaf = start_server("pynatsd", ["-c", str(leaf_conf)])
    try:
        deadline = time.monotonic() + 10
        while "does not support permissions on leaf node users" not in hub.log():
            assert time.monotonic() < deadline, hub.log()
            time.sleep(0.05)
    finally:
        leaf.stop()
        hub.stop()
