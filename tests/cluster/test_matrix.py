"""Messaging across a three-node cluster with nats-py, on every mix of pynatsd and nats-server nodes.

Each test waits until the subscriptions it made have propagated (every publishing node lists them in
/routez?subs=detail) and then checks exact results: nothing lost, nothing duplicated, per-publisher order
kept, headers byte for byte. The all-nats-server cluster (3go) runs the same tests as the reference.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from tests.cluster.harness import Cluster, Node
from tests.interop.spec import WILDCARD_PATTERNS, WILDCARD_SUBJECTS, payload, wildcard_expectation
from tests.wire import WireClient

WAIT = 10.0


@pytest.fixture
async def clients(healthy_cluster: Cluster) -> AsyncIterator[list[Client]]:
    """One nats-py connection per node, in node order."""
    async with AsyncExitStack() as stack:
        ncs = []
        for node in healthy_cluster.nodes:
            nc = await nats.connect(node.url, name=f"matrix-{node.name}", allow_reconnect=False)
            stack.push_async_callback(nc.close)
            ncs.append(nc)
        yield ncs


async def propagated(
    cluster: Cluster, subject: str, at: Sequence[Node], sources: Sequence[Node], queue: str = ""
) -> None:
    await asyncio.to_thread(cluster.wait_interest, subject, at, sources, queue)


async def received_until_end(sub: Subscription, end: Subscription) -> list[Msg]:
    """The messages `sub` got before the one on `end` (same connection, published last by the same
    client through the same node, so everything before it has arrived once it has)."""
    await end.next_msg(timeout=WAIT)
    return [await sub.next_msg(timeout=WAIT) for _ in range(sub.pending_msgs)]


async def test_pubsub_between_every_pair_of_nodes(
    healthy_cluster: Cluster, clients: list[Client], subject: str
) -> None:
    """A subscriber on each node gets every node's messages, each publisher's in order, none twice."""
    count = 30
    subs = [await nc.subscribe(subject) for nc in clients]
    for nc in clients:
        await nc.flush()
    await propagated(healthy_cluster, subject, healthy_cluster.nodes, healthy_cluster.nodes)
    for origin, nc in enumerate(clients):
        for i in range(count):
            await nc.publish(subject, json.dumps([origin, i]).encode() + payload(i))
        await nc.publish(subject, json.dumps([origin, "end"]).encode())
        await nc.flush()
    for sub in subs:
        got: dict[int, list[object]] = {o: [] for o in range(len(clients))}
        while any(not seq or seq[-1] != "end" for seq in got.values()):
            msg = await sub.next_msg(timeout=WAIT)
            head, _, rest = msg.data.partition(b"]")
            origin, seq = json.loads(head + b"]")
            got[origin].append(seq)
            if seq != "end":
                assert rest == payload(seq)
        assert got == {o: [*range(count), "end"] for o in got}
        with pytest.raises(nats.errors.TimeoutError):  # nothing after the end markers either
            await sub.next_msg(timeout=0.3)


async def test_wildcards_across_nodes(healthy_cluster: Cluster, clients: list[Client], subject: str) -> None:
    """Wildcard subscriptions on two nodes match a third node's publications as on one server."""
    publisher, receivers = clients[0], clients[1:]
    end = f"{subject}-end"
    subscribed = []
    for nc in receivers:
        subs = {p: await nc.subscribe(f"{subject}.{p}") for p in WILDCARD_PATTERNS}
        subscribed.append((subs, await nc.subscribe(end)))
        await nc.flush()
    for pattern in (*(f"{subject}.{p}" for p in WILDCARD_PATTERNS), end):
        await propagated(healthy_cluster, pattern, healthy_cluster.nodes[:1], healthy_cluster.nodes[1:])
    for s in WILDCARD_SUBJECTS:
        await publisher.publish(f"{subject}.{s}", s.encode())
    await publisher.publish(subject, b"bare")
    await publisher.publish(end, b"")
    await publisher.flush()
    for subs, end_sub in subscribed:
        await end_sub.next_msg(timeout=WAIT)
        got = {}
        for pattern, sub in subs.items():
            got[pattern] = [(await sub.next_msg(timeout=WAIT)).subject for _ in range(sub.pending_msgs)]
        assert got == wildcard_expectation(subject)


async def test_queue_group_delivers_once_cluster_wide(
    healthy_cluster: Cluster, clients: list[Client], subject: str
) -> None:
    """Queue members on two nodes, publisher on the third: each message reaches exactly one member,
    members on both nodes get some, a plain subscriber gets all."""
    count = 90
    publisher = clients[0]
    members: list[Subscription] = []
    ends = []
    for nc in clients[1:]:
        members += [await nc.subscribe(subject, queue="workers") for _ in range(2)]
        ends.append(await nc.subscribe(f"{subject}-end"))
    plain = await clients[1].subscribe(subject)
    for nc in clients[1:]:
        await nc.flush()
    nodes = healthy_cluster.nodes
    await propagated(healthy_cluster, subject, nodes[:1], nodes[1:], queue="workers")
    await propagated(healthy_cluster, f"{subject}-end", nodes[:1], nodes[1:])
    for i in range(count):
        await publisher.publish(subject, str(i).encode())
    await publisher.publish(f"{subject}-end", b"")
    await publisher.flush()
    for end in ends:
        await end.next_msg(timeout=WAIT)
    per_member = [[int(m.data) for m in await drain(sub)] for sub in members]
    assert sorted(s for seqs in per_member for s in seqs) == list(range(count))
    assert all(seqs == sorted(seqs) for seqs in per_member)
    by_node = [per_member[0] + per_member[1], per_member[2] + per_member[3]]
    # random spread over the two remote nodes: one left empty by 90 messages has odds of 2 * (1/2)**90
    assert all(by_node), by_node
    assert [int(m.data) for m in await drain(plain)] == list(range(count))


async def test_queue_group_members_and_publishers_on_every_node(
    healthy_cluster: Cluster, clients: list[Client], subject: str
) -> None:
    """A member on every node and every node publishing: each message exactly once, each member some
    (nats-server picks a member at random among local and remote ones for a client's message)."""
    count = 20
    members = [await nc.subscribe(subject, queue="everywhere") for nc in clients]
    ends = [await nc.subscribe(f"{subject}-end") for nc in clients]
    for nc in clients:
        await nc.flush()
    nodes = healthy_cluster.nodes
    await propagated(healthy_cluster, subject, nodes, nodes, queue="everywhere")
    await propagated(healthy_cluster, f"{subject}-end", nodes, nodes)
    for origin, nc in enumerate(clients):
        for i in range(count):
            await nc.publish(subject, f"{origin}.{i}".encode())
        await nc.publish(f"{subject}-end", str(origin).encode())
        await nc.flush()
    for end in ends:
        for _ in clients:
            await end.next_msg(timeout=WAIT)
    got = [[m.data.decode() for m in await drain(sub)] for sub in members]
    every = [f"{origin}.{i}" for origin in range(len(clients)) for i in range(count)]
    assert sorted(m for seqs in got for m in seqs) == sorted(every)
    assert all(got), got  # odds of a member left empty by 60 messages: 3 * (2/3)**60


async def drain(sub: Subscription) -> list[Msg]:
    return [await sub.next_msg(timeout=WAIT) for _ in range(sub.pending_msgs)]


@pytest.mark.parametrize("old_style", [False, True], ids=["muxed-inbox", "inbox-per-request"])
async def test_request_reply_across_nodes(
    healthy_cluster: Cluster, clients: list[Client], subject: str, old_style: bool
) -> None:
    """A responder on node 1 answers requests from node 2; headers travel both ways."""
    responder_nc, requester = clients[1], clients[2]

    async def answer(msg: Msg) -> None:
        headers = {**(msg.headers or {}), "X-Responder": "node1"}
        await responder_nc.publish(msg.reply, b"re:" + msg.data, headers=headers)

    await responder_nc.subscribe(subject, cb=answer)
    await responder_nc.flush()
    nodes = healthy_cluster.nodes
    await propagated(healthy_cluster, subject, nodes[2:], nodes[1:2])
    for i in range(8):
        headers = None if old_style else {"X-Seq": str(i)}  # nats-py drops headers on old-style requests
        reply = await requester.request(
            subject, payload(i), timeout=WAIT, old_style=old_style, headers=headers
        )
        assert reply.data == b"re:" + payload(i)
        assert reply.headers is not None
        assert reply.headers["X-Responder"] == "node1"
        if headers:
            assert reply.headers["X-Seq"] == str(i)


async def test_no_responders_follows_cluster_interest(
    healthy_cluster: Cluster, clients: list[Client], subject: str
) -> None:
    """No subscriber anywhere: 503 no responders. A responder on another node: replies. It leaves (and
    its unsubscribe propagates): no responders again."""
    requester, responder_nc = clients[0], clients[2]
    with pytest.raises(nats.errors.NoRespondersError):
        await requester.request(subject, b"anyone?", timeout=WAIT)

    async def answer(msg: Msg) -> None:
        await responder_nc.publish(msg.reply, b"here")

    sub = await responder_nc.subscribe(subject, cb=answer)
    await responder_nc.flush()
    nodes = healthy_cluster.nodes
    await propagated(healthy_cluster, subject, nodes[:1], nodes[2:])
    assert (await requester.request(subject, b"anyone?", timeout=WAIT)).data == b"here"
    await sub.unsubscribe()
    await responder_nc.flush()
    await asyncio.to_thread(healthy_cluster.wait_no_interest, subject, nodes[:1])
    with pytest.raises(nats.errors.NoRespondersError):
        await requester.request(subject, b"anyone?", timeout=WAIT)


async def test_headers_cross_routes_byte_for_byte(
    healthy_cluster: Cluster, clients: list[Client], subject: str
) -> None:
    """A raw subscriber on node 2 receives node 0's HPUB with the exact header block and payload."""
    nodes = healthy_cluster.nodes
    with WireClient(nodes[2].port) as raw:
        connect = {"verbose": False, "pedantic": False, "headers": True, "protocol": 1}
        out, closed = raw.exchange(f"CONNECT {json.dumps(connect)}\r\nSUB {subject} 7\r\n".encode())
        assert (out, closed) == (b"", False)
        await propagated(healthy_cluster, subject, nodes[:1], nodes[2:])
        headers = {"X-One": "1", "X-Spaces": "a  b", "X-Colon": "k:v"}
        await clients[0].publish(subject, b"body\r\nwith CRLF", headers=headers)
        await clients[0].flush()
        block = b"NATS/1.0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) + b"\r\n"
        body = b"body\r\nwith CRLF"
        frame = (
            f"HMSG {subject} 7 {len(block)} {len(block) + len(body)}\r\n".encode() + block + body + b"\r\n"
        )
        data, closed = await asyncio.to_thread(raw.read_until, b"with CRLF\r\n", WAIT)
        assert not closed
        assert data[data.index(b"HMSG") :] == frame
