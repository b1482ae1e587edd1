"""Reload in operator mode: an account JWT that now revokes a connected user closes it, as nats-server."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.jwt.world import KINDS, World, connect_as, running
from tests.wire import WireClient, strip_info


@pytest.mark.parametrize("kind", KINDS)
def test_revocation_on_reload_closes_the_user(kind: str, tmp_path: Path) -> None:
    world = World()
    token, key = world.user("victim")
    bystander_token, bystander = world.user("bystander")
    conf = world.config(tmp_path)
    with running(kind, conf) as server, WireClient(server.port) as victim, WireClient(server.port) as other:
        for client, jwt, signer in ((victim, token, key), (other, bystander_token, bystander)):
            assert connect_as(client, jwt, signer) == (b"", False)
        world.accounts[world.a.public] = world.revoke(key)
        world.config(tmp_path)
        server.proc.send_signal(signal.SIGHUP)
        rest, _ = victim.read_until(b"Revoked'\r\n", timeout=15)
        assert rest.endswith(b"-ERR 'User Authentication Revoked'\r\n")
        reply, closed = other.exchange(b"PING\r\n")
        assert (strip_info(reply), closed) == (b"PONG\r\n", False)  # the account's other users stay
