"""nkey authentication of leaf nodes: a remote's `seed` (CONNECT carries its public key and its signature of
the hub's nonce) and the hub's `authorization { nkey, account }`, or without one the server's nkey users;
pynatsd as the leaf and as the hub, each beside nats-server, and the reference pair. A wrong signature, an
unknown key or a missing signature is refused as nats-server refuses it."""

from __future__ import annotations

import base64
import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nats
import nkeys
import pytest

from tests.leafnodes.conftest import collect, ready, settled, track
from tests.servers import ServerProcess, free_port, require, start_server, wait_for_port
from tests.wire import WireClient

VIOLATION = b"-ERR 'Authorization Violation'"


def _user() -> tuple[str, str]:
    """(seed, public key) of a fresh user nkey."""
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    return seed.decode(), nkeys.from_seed(seed).public_key.decode()


LEAF_SEED, LEAF_KEY = _user()
OTHER_SEED, OTHER_KEY = _user()

# (hub, leaf)
PAIRS = {
    "pynatsd-leaf": ("nats-server", "pynatsd"),
    "pynatsd-hub": ("pynatsd", "nats-server"),
    "pynatsd-both": ("pynatsd", "pynatsd"),
    "nats-server": ("nats-server", "nats-server"),
}


def _hub_config(leaf_port: int) -> str:
    return (
        "accounts { A { users [ {user: a, password: a} ] } }\n"
        f"leafnodes {{ listen: 127.0.0.1:{leaf_port}, authorization {{ nkey: {LEAF_KEY}, account: A }} }}\n"
    )


def _server_users_config(leaf_port: int) -> str:
    """No leafnode authorization: the server's users decide, an nkey user of account A here."""
    users = f"accounts {{ A {{ users [ {{nkey: {LEAF_KEY}}} ] }} }}\n"
    return users + f"leafnodes {{ listen: 127.0.0.1:{leaf_port} }}\n"


@pytest.fixture(scope="module", params=list(PAIRS))
def linked(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """A hub whose leafnode authorization is one user nkey bound to account A, and a leaf with its seed."""
    require("nats-server")
    directory = tmp_path_factory.mktemp("nkeys")
    leaf_port = free_port()
    hub_conf, leaf_conf = directory / "hub.conf", directory / "leaf.conf"
    hub_conf.write_text(_hub_config(leaf_port))
    leaf_conf.write_text(
        f'leafnodes {{ remotes [ {{ url: "nats-leaf://127.0.0.1:{leaf_port}", seed: {LEAF_SEED} }} ] }}\n'
    )
    hub_kind, leaf_kind = PAIRS[request.param]
    hub = start_server(hub_kind, ["-c", str(hub_conf)])
    leaf = start_server(leaf_kind, ["-c", str(leaf_conf)])
    yield hub, leaf
    leaf.stop()
    hub.stop()


async def test_the_seed_binds_the_hubs_account(linked: tuple[ServerProcess, ServerProcess]) -> None:
    hub_server, leaf_server = linked
    hub = track(await nats.connect(hub_server.url, user="a", password="a", allow_reconnect=False))
    leaf = track(await nats.connect(leaf_server.url, allow_reconnect=False))
    on_hub = await collect(hub, "nk.>")
    on_leaf = await collect(leaf, "down.>")
    await ready(hub, leaf)
    await ready(leaf, hub)
    await leaf.publish("nk.up", b"1")
    await hub.publish("down.x", b"2")
    await settled(leaf, hub, on_hub, "nk.mark")
    await settled(hub, leaf, on_leaf, "down.mark")
    assert (on_hub, on_leaf) == ([("nk.up", b"1")], [("down.x", b"2")])


def _signed_connect(wire: WireClient, seed: str, key: str | None = None, sig: str | None = None) -> bytes:
    pair = nkeys.from_seed(seed.encode())
    signature = base64.urlsafe_b64encode(pair.sign(wire.info["nonce"].encode())).decode().rstrip("=")
    connect = {"nkey": key or pair.public_key.decode(), "sig": signature if sig is None else sig}
    return b"CONNECT " + json.dumps(connect).encode() + b"\r\n"


def _admissions(leaf_port: int) -> list[bool]:
    """Admitted or not: the right seed; a key the hub does not know; the right key with another's
    signature; the right key without a signature; a signature that is not base64."""
    seen = []
    for seed, key, sig in (
        (LEAF_SEED, None, None),
        (OTHER_SEED, None, None),
        (OTHER_SEED, LEAF_KEY, None),
        (LEAF_SEED, None, ""),
        (LEAF_SEED, None, "!!"),
    ):
        with WireClient(leaf_port) as wire:
            data, closed = wire.exchange(_signed_connect(wire, seed, key, sig))
        seen.append(VIOLATION not in data and not closed)
    return seen


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_only_the_keys_signature_is_admitted(kind: str, tmp_path: Path) -> None:
    """The hub's `authorization { nkey }`, and without one the server's nkey users (an account's): the
    same answers from both servers, each refusal counted as an authentication failure by pynatsd."""
    require("nats-server")
    for n, leafnodes in enumerate((_hub_config, _server_users_config)):
        leaf_port = free_port()
        conf = tmp_path / f"{n}.conf"
        conf.write_text(leafnodes(leaf_port))
        http_port = free_port()
        server = start_server(kind, ["-c", str(conf)], http_port=http_port)
        try:
            assert server.proc is not None
            wait_for_port(leaf_port, server.proc)
            assert _admissions(leaf_port) == [True, False, False, False, False]
            if kind == "pynatsd":
                with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/varz", timeout=10) as answer:
                    assert json.load(answer)["pynatsd"]["auth_failures"] == 4
        finally:
            server.stop()
