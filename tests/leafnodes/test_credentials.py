"""A remote with `credentials`: a leaf binds its account to a hub in operator mode (a nats-server hub:
pynatsd's hub does not take JWT leaf credentials yet and refuses them) by the creds file's user JWT and
the hub's nonce signed with its seed; pynatsd as the leaf beside the reference nats-server leaf."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from tests.jwt.issuer import creds
from tests.jwt.world import World
from tests.leafnodes.conftest import collect, ready, settled
from tests.servers import ServerProcess, free_port, require, start_server

Servers = tuple[ServerProcess, ServerProcess, Path]


def _remote(port: int, credentials: Path) -> str:
    url = f"nats-leaf://127.0.0.1:{port}"
    return f'leafnodes {{ remotes [ {{ url: "{url}", credentials: "{credentials}" }} ] }}\n'


@pytest.fixture(scope="module", params=["pynatsd", "nats-server"])
def linked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """A nats-server hub in operator mode and a leaf of `kind` dialling it with a creds file of account A."""
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
    hub = start_server("nats-server", ["-c", str(conf)])
    leaf = start_server(request.param, ["-c", str(leaf_conf)])
    yield hub, leaf, client_creds
    leaf.stop()
    hub.stop()


async def test_the_creds_user_binds_the_account(linked: Servers) -> None:
    hub_server, leaf_server, client_creds = linked
    hub = await nats.connect(hub_server.url, user_credentials=str(client_creds), allow_reconnect=False)
    leaf = await nats.connect(leaf_server.url, allow_reconnect=False)
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
