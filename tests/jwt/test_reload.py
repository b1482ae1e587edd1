"""Reload in operator mode: an account JWT that now revokes a connected user closes it, as nats-server."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.jwt.issuer import account_jwt, b64
from tests.jwt.world import KINDS, World, running
from tests.wire import WireClient, strip_info


@pytest.mark.parametrize("kind", KINDS)
def test_revocation_on_reload_closes_the_user(kind: str, tmp_path: Path) -> None:
    world = World()
    token, key = world.user("victim")
    bystander_token, bystander = world.user("bystander")
    conf = world.config(tmp_path)
    with running(kind, conf) as server, WireClient(server.port) as victim, WireClient(server.port) as other:
        for client, jwt, signer in ((victim, token, key), (other, bystander_token, bystander)):
            sig = b64(signer.sign(client.info["nonce"].encode()))
            connect = json.dumps({"jwt": jwt, "sig": sig, "verbose": False, "protocol": 1})
            assert client.exchange(f"CONNECT {connect}\r\n".encode()) == (b"", False)
        world.accounts[world.a.public] = account_jwt(
            world.operator, world.a, signing_keys=[world.a_signer.public],
            revocations={key.public: int(time.time()) + 5},
        )  # fmt: skip
        world.config(tmp_path)
        server.proc.send_signal(signal.SIGHUP)
        rest, _ = victim.read_until(b"Revoked'\r\n", timeout=15)
        assert rest.endswith(b"-ERR 'User Authentication Revoked'\r\n")
        reply, closed = other.exchange(b"PING\r\n")
        assert (strip_info(reply), closed) == (b"PONG\r\n", False)  # the account's other users stay
