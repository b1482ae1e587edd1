"""Accounts stay apart across gateways: a message crosses in its publisher's account only."""

from __future__ import annotations

import nats
import pytest

from tests.gateways.conftest import Supercluster

ACCOUNTS = "accounts { X { users: [{user: x, password: x}] }, Y { users: [{user: y, password: y}] } }"
PAIRS = [("pynatsd", "nats-server"), ("nats-server", "pynatsd"), ("nats-server", "nats-server")]


@pytest.mark.parametrize(("a", "b"), PAIRS)
async def test_accounts_stay_apart(a: str, b: str) -> None:
    sc = Supercluster({"A": [a], "B": [b]}, top=ACCOUNTS)
    publisher, subscriber = sc["A"][0], sc["B"][0]
    conns = []
    try:
        for user, member in (("x", subscriber), ("y", subscriber), ("x", publisher), ("y", publisher)):
            conns.append(await nats.connect(member.url.replace("nats://", f"nats://{user}:{user}@")))
        sub_x, sub_y, pub_x, pub_y = conns
        in_x = await sub_x.subscribe("shared")
        in_y = await sub_y.subscribe("shared")
        await sub_x.flush()
        await sub_y.flush()
        for account in ("X", "Y"):
            sc.wait_interest(publisher, "B", "shared", account=account)
        await pub_x.publish("shared", b"for x")
        await pub_x.flush()
        await pub_y.publish("shared", b"for y")  # after x's, on the same gateway connection
        await pub_y.flush()
        assert (await in_x.next_msg(timeout=5)).data == b"for x"
        assert (await in_y.next_msg(timeout=5)).data == b"for y"  # x's never reached account Y
    finally:
        for nc in conns:
            await nc.close()
        sc.close()
