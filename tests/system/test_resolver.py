"""Directory resolvers beyond updates and lookups (tests/jwt/test_resolver.py): deletes signed by the
operator (`allow_delete`), the stored accounts' list, and the `cache` resolver, as nats-server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
from nats.aio.client import Client as NATS

from tests.jwt.issuer import Key, account_jwt, creds
from tests.jwt.world import KINDS, World, connect_as, running
from tests.servers import ServerProcess
from tests.wire import WireClient


def _config(world: World, directory: Path, resolver: str) -> Path:
    conf = world.config(directory)
    conf.write_text(conf.read_text().replace("resolver: MEMORY", f"resolver: {resolver}"))
    return conf


def _full(directory: Path, extra: str = "") -> str:
    return f'{{ type: full, dir: "{directory / "jwt"}", {extra} }}'


def delete_request(signer: Key, accounts: list[str], subject: str | None = None) -> bytes:
    """What `nsc delete account` sends: a generic JWT by the operator, to itself, listing the accounts."""
    return signer.issue(subject or signer.public, "generic", {"accounts": accounts}).encode()


async def _ask(nc: NATS, subject: str, payload: bytes) -> dict[str, Any]:
    reply = await nc.request(subject, payload, timeout=5)
    body: dict[str, Any] = json.loads(reply.data)
    assert set(body["server"]) >= {"name", "host", "id", "ver", "seq", "time"}
    body.pop("server")  # differs between servers by design
    return body


@asynccontextmanager
async def _system_user(world: World, server: ServerProcess, tmp_path: Path) -> AsyncIterator[NATS]:
    path = creds(tmp_path / "sys.creds", *world.user("sys", issuer=world.system))
    nc = await nats.connect(server.url, user_credentials=str(path))
    try:
        yield nc
    finally:
        await nc.close()


async def _connects(url: str, path: Path) -> bool:
    nc = NATS()
    try:
        await nc.connect(url, user_credentials=str(path), allow_reconnect=False, max_reconnect_attempts=0)
        return True
    except nats.errors.Error:
        return False
    finally:
        await nc.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_delete_needs_allow_delete(kind: str, tmp_path: Path) -> None:
    world = World()
    with running(kind, _config(world, tmp_path, _full(tmp_path))) as server:
        async with _system_user(world, server, tmp_path) as sys:
            body = await _ask(sys, "$SYS.REQ.CLAIMS.DELETE", delete_request(world.operator, [world.b.public]))
    assert body == {
        "error": {
            "code": 500,
            "description": f"delete accounts request by {world.operator.public}"
            " failed - delete must be enabled in server config",
        }
    }


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("hard", [False, True])
async def test_delete_expires_the_account(kind: str, hard: bool, tmp_path: Path) -> None:
    """A pushed account deleted by the operator: its file goes (renamed unless hard_delete), its live
    clients are told the account expired, new ones are refused; it can be pushed again."""
    world = World()
    c = Key("A")
    c_jwt = account_jwt(world.op_signer, c)
    c_user = creds(tmp_path / "c.creds", *world.user("in c", issuer=c))
    live_token, live_key = world.user("live", issuer=c)
    resolver = _full(tmp_path, f"allow_delete: true, hard_delete: {str(hard).lower()}")
    jwt_dir = tmp_path / "jwt"
    with running(kind, _config(world, tmp_path, resolver)) as server:
        async with _system_user(world, server, tmp_path) as sys:
            assert (await _ask(sys, "$SYS.REQ.CLAIMS.UPDATE", c_jwt.encode()))["data"]["code"] == 200
            listed = await _ask(sys, "$SYS.REQ.CLAIMS.LIST", b"")
            assert c.public in listed["data"]
            with WireClient(server.port) as live:
                assert connect_as(live, live_token, live_key) == (b"", False)
                body = await _ask(sys, "$SYS.REQ.CLAIMS.DELETE", delete_request(world.operator, [c.public]))
                assert body == {"data": {"code": 200, "message": "deleted 1 accounts"}}
                rest, _ = live.read_until(b"Expired'\r\n", timeout=10)
                assert rest.endswith(b"-ERR 'Account Authentication Expired'\r\n")
            assert not (jwt_dir / f"{c.public}.jwt").exists()
            assert (jwt_dir / f"{c.public}.jwt.deleted").exists() is not hard
            assert c.public not in (await _ask(sys, "$SYS.REQ.CLAIMS.LIST", b""))["data"]
            assert not await _connects(server.url, c_user)
            lookup = await sys.request(f"$SYS.REQ.ACCOUNT.{c.public}.CLAIMS.LOOKUP", b"", timeout=5)
            assert lookup.data == b""
            # Deleting what is not there is no error (as nats-server).
            again = await _ask(sys, "$SYS.REQ.CLAIMS.DELETE", delete_request(world.op_signer, [c.public]))
            assert again == {"data": {"code": 200, "message": "deleted 1 accounts"}}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "case", ["not self signed", "not trusted", "system account", "malformed", "not a jwt"]
)
async def test_bad_delete_requests(kind: str, case: str, tmp_path: Path) -> None:
    world = World()
    with running(kind, _config(world, tmp_path, _full(tmp_path, "allow_delete: true"))) as server:
        requests = {
            "not self signed": (delete_request(world.operator, [world.b.public], world.b.public),
                                world.b.public, "not self signed"),
            "not trusted": (delete_request(world.stranger, [world.b.public]), world.stranger.public,
                            "not trusted"),
            "system account": (delete_request(world.operator, [world.system.public]), world.operator.public,
                               "not allowed to delete system account"),
            "malformed": (delete_request(world.operator, ["nope"]), world.operator.public,
                          "malformed request"),
        }  # fmt: skip
        async with _system_user(world, server, tmp_path) as sys:
            if case == "not a jwt":
                body = await _ask(sys, "$SYS.REQ.CLAIMS.DELETE", b"garbage")
                assert body["error"]["description"].startswith("delete accounts request by  failed - ")
                return
            payload, by, problem = requests[case]
            body = await _ask(sys, "$SYS.REQ.CLAIMS.DELETE", payload)
            b_user = creds(tmp_path / "b.creds", *world.user("in b", issuer=world.b))
            assert await _connects(server.url, b_user)  # nothing was deleted
    assert body == {
        "error": {"code": 500, "description": f"delete accounts request by {by} failed - {problem}"}
    }


@pytest.mark.parametrize("kind", KINDS)
async def test_cache_resolver(kind: str, tmp_path: Path) -> None:
    """A cache takes updates for the accounts in use only, answers no lookups, deletes."""
    world = World()
    cache = f'{{ type: cache, dir: "{tmp_path / "jwt"}", ttl: "1h", limit: 10 }}'
    c = Key("A")
    with running(kind, _config(world, tmp_path, cache)) as server:
        async with _system_user(world, server, tmp_path) as sys:
            skipped = await _ask(sys, "$SYS.REQ.CLAIMS.UPDATE", account_jwt(world.op_signer, c).encode())
            assert skipped == {
                "data": {"account": c.public, "code": 200, "message": "jwt update cache skipped"}
            }
            b_user = creds(tmp_path / "b.creds", *world.user("in b", issuer=world.b))
            assert await _connects(server.url, b_user)  # B (preloaded) is in use now
            newer = account_jwt(world.op_signer, world.b, signing_keys=[world.b_signer.public])
            updated = await _ask(sys, f"$SYS.REQ.ACCOUNT.{world.b.public}.CLAIMS.UPDATE", newer.encode())
            assert updated == {
                "data": {"account": world.b.public, "code": 200, "message": "jwt updated cache"}
            }
            assert (tmp_path / "jwt" / f"{world.b.public}.jwt").read_text() == newer
            with pytest.raises(nats.errors.NoRespondersError):
                await sys.request(f"$SYS.REQ.ACCOUNT.{world.b.public}.CLAIMS.LOOKUP", b"", timeout=2)
            # A cache deletes for good, without allow_delete (nats-server's cache store hard-deletes).
            deleted = await _ask(
                sys, "$SYS.REQ.CLAIMS.DELETE", delete_request(world.operator, [world.b.public])
            )
            assert deleted == {"data": {"code": 200, "message": "deleted 1 accounts"}}
            assert not (tmp_path / "jwt" / f"{world.b.public}.jwt").exists()
            assert not await _connects(server.url, b_user)


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        ('type: cache, dir: {dir}, interval: "1m"', "CACHE does not accept sync"),
        ("type: cache, dir: {dir}, allow_delete: true", "CACHE does not accept allow_delete"),
        ("type: cache, dir: {dir}, hard_delete: true", "CACHE does not accept hard_delete"),
        ('type: full, dir: {dir}, ttl: "1m"', "FULL does not accept ttl"),
        ("type: full, dir: {dir}, ttl: 1m", "interface conversion: interface {} is int64, not string"),
        ("type: full, dir: {dir}, hard_delete: true", "hard_delete has no effect without delete"),
        ("type: full", "dir has no value and needs to point to a directory"),
        ("type: nope, dir: {dir}", "error parsing account resolver, should be MEM or"),
    ],
)
@pytest.mark.parametrize("kind", KINDS)
def test_resolver_options_refused_as_nats_server(kind: str, block: str, problem: str, tmp_path: Path) -> None:
    """Both servers refuse the same resolver blocks, in the same words."""
    import subprocess

    from tests.servers import nats_server_binary, pynatsd_command, require

    require(kind)
    world = World()
    conf = _config(world, tmp_path, "{ " + block.format(dir=f'"{tmp_path / "jwt"}"') + " }")
    cmd = pynatsd_command() if kind == "pynatsd" else [str(nats_server_binary())]
    result = subprocess.run([*cmd, "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30)
    assert result.returncode != 0 and problem in result.stdout + result.stderr, result


@pytest.mark.parametrize("kind", KINDS)
def test_resolver_timing_options_accepted(kind: str, tmp_path: Path) -> None:
    """`interval` and `timeout` (syncing with and fetching from other servers) are accepted: standalone,
    there are none."""
    world = World()
    resolver = _full(tmp_path, 'interval: "2m", timeout: "1.5s", allow_delete: true, limit: 100')
    with running(kind, _config(world, tmp_path, resolver)) as server, WireClient(server.port) as wire:
        token, key = world.user("plain")
        assert connect_as(wire, token, key) == (b"", False)


def test_directory_store_cache_eviction_ttl_and_tombstones(tmp_path: Path) -> None:
    """The store itself: a cache evicts the least recently stored file at its limit and drops files older
    than its ttl; a full store refuses at its limit; deletions outlive the store object (a reload)."""
    import os
    import time

    from pynatsd.auth import jwt

    keys = [Key("A").public for _ in range(3)]
    cache = jwt.DirectoryStore(str(tmp_path / "cache"), 2, jwt.HARD_DELETE, evict=True, ttl=60.0)
    cache.save(keys[0], "jwt0")
    os.utime(tmp_path / "cache" / f"{keys[0]}.jwt", (time.time() - 30, time.time() - 30))
    cache.save(keys[1], "jwt1")
    cache.save(keys[2], "jwt2")  # at the limit: the oldest goes
    assert cache.names() == sorted(keys[1:])
    os.utime(tmp_path / "cache" / f"{keys[1]}.jwt", (time.time() - 120, time.time() - 120))
    cache.sweep()
    assert cache.names() == [keys[2]]

    full = jwt.DirectoryStore(str(tmp_path / "full"), 1, jwt.RENAME_DELETED)
    full.save(keys[0], "jwt0")
    with pytest.raises(jwt.JwtError, match="jwt store is full"):
        full.save(keys[1], "jwt1")
    full.delete(keys[0])
    assert (tmp_path / "full" / f"{keys[0]}.jwt.deleted").read_text() == "jwt0"
    again = jwt.DirectoryStore(str(tmp_path / "full"), 1, jwt.RENAME_DELETED)
    assert keys[0] in again.deleted and again.load(keys[0]) is None
    again.save(keys[0], "jwt0-new")  # pushed again: known again
    assert keys[0] not in again.deleted and again.load(keys[0]) == "jwt0-new"
