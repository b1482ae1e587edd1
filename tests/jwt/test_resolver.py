"""The `full` directory resolver: account JWTs pushed over $SYS (as `nsc push`), looked up, and applied
to live connections, on pynatsd and nats-server alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NATS

from tests.jwt.issuer import Key, account_jwt, creds
from tests.jwt.world import KINDS, World, connect_as, running
from tests.wire import WireClient


def _full_resolver_config(world: World, directory: Path) -> Path:
    conf = world.config(directory)
    text = conf.read_text().replace(
        "resolver: MEMORY", f'resolver: {{ type: full, dir: "{directory / "jwt"}" }}'
    )
    conf.write_text(text)
    return conf


async def _connects(url: str, path: Path) -> bool:
    client = NATS()
    try:
        await client.connect(url, user_credentials=str(path), allow_reconnect=False)
        return True
    except nats.errors.Error:
        return False
    finally:
        await client.close()


async def _request(nc: NATS, subject: str, payload: str) -> dict[str, Any]:
    reply = await nc.request(subject, payload.encode(), timeout=5)
    body: dict[str, Any] = json.loads(reply.data)
    body.pop("server")  # differs between servers by design
    return body


@pytest.mark.parametrize("kind", KINDS)
async def test_pushed_accounts_apply(kind: str, tmp_path: Path) -> None:
    world = World()
    c = Key("A")
    c_jwt = account_jwt(world.op_signer, c)
    c_user = creds(tmp_path / "c.creds", *world.user("in c", issuer=c))
    sys_user = creds(tmp_path / "sys.creds", *world.user("sys", issuer=world.system))
    victim_token, victim = world.user("victim")
    with running(kind, _full_resolver_config(world, tmp_path)) as server, WireClient(server.port) as live:
        assert connect_as(live, victim_token, victim) == (b"", False)
        assert not await _connects(server.url, c_user)  # C is not known yet
        sys = await nats.connect(server.url, user_credentials=str(sys_user))
        try:
            assert await _request(sys, "$SYS.REQ.CLAIMS.UPDATE", c_jwt) == {
                "data": {"account": c.public, "code": 200, "message": "jwt updated"}
            }
            assert await _connects(server.url, c_user)
            lookup = await sys.request(f"$SYS.REQ.ACCOUNT.{c.public}.CLAIMS.LOOKUP", b"", timeout=5)
            assert lookup.data.decode() == c_jwt
            mismatch = await _request(
                sys, f"$SYS.REQ.ACCOUNT.{c.public}.CLAIMS.UPDATE", world.accounts[world.a.public]
            )
            assert mismatch["error"]["description"].endswith("subject does not match jwt content")
            assert mismatch["error"]["code"] == 500
            garbage = await _request(sys, "$SYS.REQ.CLAIMS.UPDATE", "not-a-jwt")
            assert garbage["error"]["description"].startswith("jwt update resulted in error - ")
            revoking = world.revoke(victim)
            updated = await _request(sys, f"$SYS.REQ.ACCOUNT.{world.a.public}.CLAIMS.UPDATE", revoking)
            assert updated["data"]["message"] == "jwt updated"
        finally:
            await sys.close()
        rest, _ = live.read_until(b"Revoked'\r\n", timeout=15)
        assert rest.endswith(b"-ERR 'User Authentication Revoked'\r\n")
