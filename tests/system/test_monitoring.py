"""Per-account monitoring: /accountz (the list and `?acc=` detail) and /accstatz with nats-server's
fields, in config and operator mode, and per-account series in pynatsd's /metrics."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import nats
import pytest

from tests.jwt.issuer import creds
from tests.jwt.world import World, running
from tests.servers import free_port
from tests.system.common import KINDS, assert_same_shape, client, require, system_server

PAGES = ["/accountz", "/accountz?acc=A", "/accountz?acc=SYS", "/accountz?acc=$G", "/accstatz",
         "/accstatz?unused=1", "/accountz?acc=NOPE"]  # fmt: skip
# nats-server gives every account service imports of its system services (and the system account the
# exports behind them); pynatsd answers those requests in the system account only.
SYSTEM_IMPORTS = {"account_detail.imports", "account_detail.exports"}


async def _get(port: int, paths: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with aiohttp.ClientSession() as session:
        for path in paths:
            async with session.get(f"http://127.0.0.1:{port}{path}") as resp:
                text = await resp.text()
                out[path] = json.loads(text) if resp.status == 200 else (resp.status, text.strip())
    return out


async def _pages(kind: str, tmp_path: Path) -> dict[str, Any]:
    with system_server(kind, tmp_path) as server:
        async with client(server.url, "a") as a:
            await a.subscribe("x")
            await a.publish("x", b"hi")
            await a.flush()
            assert server.http_port is not None
            return await _get(server.http_port, PAGES)


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = {}
    for kind in KINDS:
        require(kind)
        out[kind] = asyncio.run(_pages(kind, tmp_path_factory.mktemp(kind)))
    return out


@pytest.mark.parametrize("path", PAGES)
def test_config_mode_pages_as_nats_server(pages: dict[str, dict[str, Any]], path: str) -> None:
    ours, theirs = pages["pynatsd"][path], pages["nats-server"][path]
    if isinstance(theirs, tuple):
        assert ours == theirs == (400, "Account NOPE does not exist")
        return
    assert_same_shape(ours, theirs, only_theirs=SYSTEM_IMPORTS)


@pytest.mark.parametrize("kind", KINDS)
def test_config_mode_values(pages: dict[str, dict[str, Any]], kind: str) -> None:
    got = pages[kind]
    listing = got["/accountz"]
    assert listing["system_account"] == "SYS" and sorted(listing["accounts"]) == ["$G", "A", "SYS"]
    assert got["/accountz?acc=SYS"]["account_detail"]["is_system"] is True
    detail = got["/accountz?acc=A"]["account_detail"]
    assert "is_system" not in detail and detail["client_connections"] == 1 and detail["name_tag"] == "A"
    # Only accounts with connections unless `unused`; A sent and received the one message.
    assert [s["acc"] for s in got["/accstatz"]["account_statz"]] == ["A"]
    (stat,) = got["/accstatz"]["account_statz"]
    assert (stat["conns"], stat["sent"]["msgs"], stat["received"]["msgs"]) == (1, 1, 1)
    assert stat["received"]["bytes"] == 2
    assert sorted(s["acc"] for s in got["/accstatz?unused=1"]["account_statz"]) == ["$G", "A", "SYS"]


async def _operator_pages(kind: str, world: World, tmp_path: Path) -> dict[str, Any]:
    http_port = free_port()
    conf = world.config(tmp_path)
    conf.write_text(conf.read_text() + f"http_port: {http_port}\n")
    user = creds(tmp_path / "a.creds", *world.user("in a"))
    with running(kind, conf) as server:
        nc = await nats.connect(server.url, user_credentials=str(user))
        try:
            return await _get(http_port, [f"/accountz?acc={world.a.public}", "/accstatz", "/accountz"])
        finally:
            await nc.close()


async def test_operator_mode_account_detail(tmp_path: Path) -> None:
    """A JWT account's detail: its JWT, issuer, name tag, decoded claims and revocations; the pages with
    nats-server's key paths."""
    world = World()
    got = {}
    for kind in KINDS:
        require(kind)
        (tmp_path / kind).mkdir()
        got[kind] = await _operator_pages(kind, world, tmp_path / kind)
    for kind, pages in got.items():
        detail = pages[f"/accountz?acc={world.a.public}"]["account_detail"]
        assert detail["jwt"] == world.accounts[world.a.public], kind
        assert detail["issuer_key"] == world.operator.public and detail["name_tag"] == "account", kind
        assert detail["decoded_jwt"]["sub"] == world.a.public, kind
        assert set(detail["revoked_user"]) == {world.revoked.public}, kind
        assert pages["/accountz"]["system_account"] == world.system.public, kind
        (stat,) = pages["/accstatz"]["account_statz"]
        assert (stat["acc"], stat["name"], stat["conns"]) == (world.a.public, "account", 1), kind
    for path, page in got["nats-server"].items():
        # nats-server decodes the JWT with every claim field, empty ones included, and lists the jwt
        # library's validation issues; pynatsd shows the claims as issued.
        extra = {"account_detail.decoded_jwt", "account_detail.validation_result_jwt"}
        assert_same_shape(got["pynatsd"][path], page, only_theirs=SYSTEM_IMPORTS | extra)


async def _metrics(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return await resp.text()


async def test_metrics_per_account(tmp_path: Path) -> None:
    with system_server("pynatsd", tmp_path) as server:
        async with client(server.url, "a") as a:
            await a.subscribe("x")
            await a.publish("x", b"hello")
            await a.flush()
            text = await _metrics(f"http://127.0.0.1:{server.http_port}/metrics")

    def value(name: str, account: str) -> float:
        found = re.search(rf'^{name}\{{account="{re.escape(account)}",[^}}]*\}} (\S+)$', text, re.M)
        assert found, (name, account, text)
        return float(found.group(1))

    assert value("pynatsd_account_connections", "A") == 1
    assert value("pynatsd_account_connections", "SYS") == 0
    assert value("pynatsd_account_subscriptions", "A") == 5  # its own and the 4 system services in it
    assert value("pynatsd_account_subscriptions", "SYS") > 0  # the system services' own
    assert value("pynatsd_account_messages_in_total", "A") == 1
    assert value("pynatsd_account_messages_out_total", "A") == 1
    assert value("pynatsd_account_bytes_in_total", "A") == 5
    assert value("pynatsd_account_bytes_out_total", "A") == 5
    assert value("pynatsd_account_slow_consumers_total", "A") == 0
