"""/varz message totals in a two-node cluster include routed traffic, as nats-server's do.

Five messages published on node 0 to a subscriber on node 1: node 0 takes them in from a client and
sends them out over the route, node 1 takes them in from the route and sends them out to the client.
Every mix is checked against the same expected deltas, nats-server nodes included (they are the
reference): a nats-server node may count a few of its own $SYS messages on top, a pynatsd node must
count exactly ours. The totals must not go down when the route closes.
"""

from __future__ import annotations

import asyncio

import nats
import pytest

from tests.cluster.conftest import ClusterFactory
from tests.cluster.harness import Node

MESSAGES = 5
SYS_SLACK = 3  # nats-server's own $SYS traffic (account connection events and the like)
FIELDS = ("in_msgs", "out_msgs", "in_client_msgs", "out_client_msgs")


def totals(node: Node) -> dict[str, int]:
    varz = node.get("/varz")
    return {f: int(varz[f]) for f in FIELDS}


def deltas(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {f: after[f] - before[f] for f in FIELDS}


def assert_counts(node: Node, got: dict[str, int], expected: dict[str, int]) -> None:
    for field, want in expected.items():
        slack = SYS_SLACK if node.kind == "nats-server" else 0
        assert want <= got[field] <= want + slack, (node, field, got, expected)


@pytest.mark.parametrize(
    "kinds",
    [
        ("pynatsd", "pynatsd"),
        ("pynatsd", "nats-server"),
        ("nats-server", "pynatsd"),
        ("nats-server", "nats-server"),
    ],
    ids=["py-py", "py-go", "go-py", "go-go"],
)
async def test_varz_totals_count_routed_messages(
    cluster_factory: ClusterFactory, kinds: tuple[str, str], subject: str
) -> None:
    cluster = await asyncio.to_thread(cluster_factory, kinds)
    sender, receiver = cluster[0], cluster[1]
    payload = b"0123456789abcdef"
    async with (
        await nats.connect(receiver.url, allow_reconnect=False) as sub_nc,
        await nats.connect(sender.url, allow_reconnect=False) as pub_nc,
    ):
        sub = await sub_nc.subscribe(subject)
        await sub_nc.flush()
        await asyncio.to_thread(cluster.wait_interest, subject, [sender], [receiver])
        before = {n.index: await asyncio.to_thread(totals, n) for n in (sender, receiver)}
        for _ in range(MESSAGES):
            await pub_nc.publish(subject, payload)
        await pub_nc.flush()
        for _ in range(MESSAGES):
            await sub.next_msg(timeout=10)
        after = {n.index: await asyncio.to_thread(totals, n) for n in (sender, receiver)}
    sent = deltas(before[0], after[0])
    received = deltas(before[1], after[1])
    # the sender: in from its client, out over the route (not to a client)
    assert_counts(sender, sent, {"in_msgs": MESSAGES, "in_client_msgs": MESSAGES, "out_msgs": MESSAGES})
    assert sent["out_client_msgs"] == 0 or sender.kind == "nats-server", sent
    # the receiver: in over the route (not from a client), out to its client
    assert_counts(
        receiver, received, {"in_msgs": MESSAGES, "out_msgs": MESSAGES, "out_client_msgs": MESSAGES}
    )
    assert received["in_client_msgs"] == 0 or receiver.kind == "nats-server", received

    # The route closes with the sender: what it carried stays counted on the receiver.
    await asyncio.to_thread(cluster.stop, sender)
    for _ in range(100):
        if not await asyncio.to_thread(receiver.routes):
            break
        await asyncio.sleep(0.1)
    assert not await asyncio.to_thread(receiver.routes)
    closed = await asyncio.to_thread(totals, receiver)
    assert all(closed[f] >= after[1][f] for f in FIELDS), (closed, after[1])
