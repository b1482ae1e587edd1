"""The system account's dedicated (pinned) route and nats-server's route pool, in clusters of pynatsd and
nats-server 2.15 started in both orders: no error in either log, system-account requests answered by every
server across the pinned route, an ordinary account's messages crossing both ways, /routez naming the
pinned route's account."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.routes.conftest import Start, connect, routez, wait_routed
from tests.servers import ServerProcess

ACCOUNTS = """
accounts {
  SYS { users = [{user: sys, password: sys}] }
  A { users = [{user: a, password: a}] }
}
system_account: SYS
"""
PING_TIMEOUT = 15.0


async def server_ping_answers(nc: nats.NATS, servers: int) -> set[str]:
    """The ids of the servers that answer `$SYS.REQ.SERVER.PING`, asked again until `servers` of them
    have (the other server's interest crosses the pinned route after the route forms)."""
    inbox = nc.new_inbox()
    answered: set[str] = set()
    everyone = asyncio.Event()

    async def answer(msg: Any) -> None:
        answered.add(json.loads(msg.data)["server"]["id"])
        if len(answered) >= servers:
            everyone.set()

    await nc.subscribe(inbox, cb=answer)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PING_TIMEOUT
    while not everyone.is_set() and loop.time() < deadline:
        await nc.publish("$SYS.REQ.SERVER.PING", b"", reply=inbox)
        await nc.flush()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(everyone.wait(), 0.5)
    return answered


def errors_logged(server: ServerProcess) -> list[str]:
    return [line for line in server.log().splitlines() if "[ERR]" in line]


@pytest.mark.parametrize(
    ("kinds", "pinned"),
    [
        (("pynatsd", "nats-server"), ["SYS"]),
        (("nats-server", "pynatsd"), ["SYS"]),
        (("nats-server", "pynatsd"), ["A", "SYS"]),
        (("pynatsd", "pynatsd"), ["A", "SYS"]),
    ],
    ids=["pynatsd-first", "nats-server-first", "nats-server-first-pinning-A", "pynatsd-only-pinning-A"],
)
async def test_system_account_route_is_pinned(
    node: Start, tmp_path: Path, kinds: tuple[str, str], pinned: list[str]
) -> None:
    """`pinned`: the accounts with a route of their own (the system account's always, `A` when the
    `cluster {}` block names it in `accounts`)."""
    conf = tmp_path / "accounts.conf"
    conf.write_text(ACCOUNTS + ("cluster { accounts: [A] }" if "A" in pinned else ""))
    first = node(kinds[0], args=["-c", str(conf)], http=True)
    second = node(kinds[1], routes=[first], args=["-c", str(conf)], http=True)
    servers = (first, second)
    ordinary = [await connect(s, user="a", password="a") for s in servers]
    system = [await connect(s, user="sys", password="sys") for s in servers]
    try:
        await wait_routed(ordinary[0], ordinary[1])
        await wait_routed(ordinary[1], ordinary[0])
        ids = {str(nc._server_info["server_id"]) for nc in system}
        for nc in system:  # each server's request reaches the other's system account and comes back
            assert await server_ping_answers(nc, 2) == ids
        for server, nc in zip(servers, system, strict=True):
            routes = routez(server)["routes"]
            peer = ids - {str(nc._server_info["server_id"])}
            assert sorted(r["account"] for r in routes if "account" in r) == pinned, server.kind
            assert {r["remote_id"] for r in routes} == peer
        # nats-server logged `Not possible to have a dedicated route for account "SYS"` here before
        assert [errors_logged(s) for s in servers] == [[], []]
    finally:
        for nc in ordinary + system:
            await nc.close()


@pytest.mark.parametrize("seed", ["pynatsd", "nats-server"])
async def test_servers_that_met_through_gossip_pin_the_system_account(node: Start, seed: str) -> None:
    """Two nats-servers joining through the seed learn of each other from its gossip: the seed hands on
    each one's pinned route too (its INFO naming `$SYS`), so they open one between them, as three
    nats-servers do. Without it, two nats-servers meeting through pynatsd had no `$SYS` route, and their
    JetStream meta group (RAFT in `$SYS`) never elected a leader."""
    first = node(seed)
    joiners = [node("nats-server", routes=[first], http=True) for _ in range(2)]
    ids = [str(routez(server)["server_id"]) for server in joiners]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PING_TIMEOUT
    pinned: list[set[str]] = []
    while loop.time() < deadline:
        pinned = [
            {r["remote_id"] for r in routez(server)["routes"] if r.get("account") == "$SYS"}
            for server in joiners
        ]
        if ids[1] in pinned[0] and ids[0] in pinned[1]:
            break
        await asyncio.sleep(0.1)
    assert ids[1] in pinned[0] and ids[0] in pinned[1], pinned
    assert [errors_logged(s) for s in (first, *joiners)] == [[], [], []]


SERVICE_ACCOUNTS = """
accounts {
  S { users = [{user: s, password: s}], exports = [{service: "svc.>"}] }
  I { users = [{user: i, password: i}], imports = [{service: {account: S, subject: "svc.>"}}] }
}
"""


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
async def test_a_service_import_is_not_advertised_as_interest(node: Start, tmp_path: Path, kind: str) -> None:
    """A service import's subscription in the importer (`svc.>` in I) is its own way to the exporter:
    never sent to the routes as interest (nats-server subscribes it without forwarding), while a client's
    subscription in the same account is."""
    conf = tmp_path / "services.conf"
    conf.write_text(SERVICE_ACCOUNTS)
    ours = node(kind, args=["-c", str(conf)])
    reference = node("nats-server", routes=[ours], args=["-c", str(conf)], http=True)
    nc = await connect(ours, user="i", password="i")
    try:
        await nc.subscribe("seen.by.peer")
        await nc.flush()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PING_TIMEOUT
        subjects: list[str] = []
        while "seen.by.peer" not in subjects and loop.time() < deadline:
            await asyncio.sleep(0.1)
            subjects = [s for r in routez(reference)["routes"] for s in r.get("subscriptions_list", [])]
        assert "seen.by.peer" in subjects
        assert "svc.>" not in subjects
    finally:
        await nc.close()
