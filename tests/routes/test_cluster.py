"""pynatsd in clusters with nats-server 2.15 (both directions), driven by nats-py clients."""

from __future__ import annotations

import asyncio
import collections
import signal
from typing import Any

import nats
import pytest
from nats.errors import NoRespondersError

from tests.routes.conftest import Start, connect, routez, settle, wait_routed
from tests.servers import free_port

pytestmark = pytest.mark.asyncio

PAIRS = [("pynatsd", "nats-server"), ("nats-server", "pynatsd"), ("pynatsd", "pynatsd")]


class Inbox:
    def __init__(self) -> None:
        self.msgs: list[Any] = []

    async def add(self, msg: Any) -> None:
        self.msgs.append(msg)

    def data(self) -> list[bytes]:
        return [m.data for m in self.msgs]


@pytest.mark.parametrize(("seed_kind", "joiner_kind"), PAIRS)
async def test_pub_sub_both_ways_with_wildcards(node: Start, seed_kind: str, joiner_kind: str) -> None:
    seed = node(seed_kind)
    joiner = node(joiner_kind, routes=[seed])
    a, b = await connect(seed), await connect(joiner)
    try:
        await wait_routed(a, b)
        await wait_routed(b, a)
        on_a, on_b = Inbox(), Inbox()
        await a.subscribe("orders.*", cb=on_a.add)
        await a.subscribe("orders.>", cb=on_a.add)
        await b.subscribe("events.>", cb=on_b.add)
        await settle(a, b)
        await b.publish("orders.new", b"1")
        await a.publish("events.x.y", b"2")
        await a.publish("elsewhere", b"3")
        await settle(a, b)
        # both of a's subscriptions match: each gets it, over one routed message
        assert on_a.data() == [b"1", b"1"]
        assert on_b.data() == [b"2"]
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize(("seed_kind", "joiner_kind"), PAIRS)
async def test_queue_group_gets_each_message_exactly_once_cluster_wide(
    node: Start, seed_kind: str, joiner_kind: str
) -> None:
    seed = node(seed_kind)
    joiner = node(joiner_kind, routes=[seed])
    a, b = await connect(seed), await connect(joiner)
    try:
        await wait_routed(a, b)
        await wait_routed(b, a)
        members = [Inbox() for _ in range(4)]
        for i, inbox in enumerate(members):
            await (a if i % 2 else b).subscribe("work", queue="workers", cb=inbox.add)
        plain = Inbox()
        await a.subscribe("work", cb=plain.add)
        await settle(a, b)
        for i in range(100):
            await (a if i % 2 else b).publish("work", b"%d" % i)
        await settle(a, b)
        await asyncio.sleep(0.5)
        delivered = collections.Counter(d for inbox in members for d in inbox.data())
        assert sorted(delivered) == sorted(b"%d" % i for i in range(100))
        assert set(delivered.values()) == {1}  # exactly once each, cluster-wide
        assert sum(1 for inbox in members if inbox.msgs) >= 2  # both servers' members take part
        assert len(plain.msgs) == 100
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize(("seed_kind", "joiner_kind"), PAIRS)
async def test_request_reply_headers_and_no_responders(node: Start, seed_kind: str, joiner_kind: str) -> None:
    seed = node(seed_kind)
    joiner = node(joiner_kind, routes=[seed])
    a, b = await connect(seed), await connect(joiner)
    try:
        await wait_routed(a, b)

        async def echo(msg: Any) -> None:
            await msg.respond(msg.data + b"!" + (msg.headers or {}).get("X-Tag", "").encode())

        await a.subscribe("svc.echo", cb=echo)
        await settle(a, b)
        reply = await b.request("svc.echo", b"hi", timeout=5, headers={"X-Tag": "t1"})
        assert reply.data == b"hi!t1"
        with pytest.raises(NoRespondersError):
            await b.request("svc.nobody", b"x", timeout=5)
        with pytest.raises(NoRespondersError):
            await a.request("svc.nobody", b"x", timeout=5)
        got = Inbox()
        await b.subscribe("h", cb=got.add)
        await settle(a, b)
        await a.publish("h", b"body", headers={"K": "V"})
        await settle(a, b)
        assert [(m.data, m.headers) for m in got.msgs] == [(b"body", {"K": "V"})]
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize(
    "kinds",
    [("pynatsd", "nats-server", "pynatsd"), ("nats-server", "pynatsd", "nats-server"), ("pynatsd",) * 3],
)
async def test_third_node_given_one_seed_learns_the_mesh(node: Start, kinds: tuple[str, str, str]) -> None:
    """C knows only A; B joined A before. Messages are never forwarded route to route, so B's
    subscriber hearing C's publisher proves that C and B connected through gossip."""
    seed = node(kinds[0])
    second = node(kinds[1], routes=[seed])
    third = node(kinds[2], routes=[seed])
    b, c = await connect(second), await connect(third)
    try:
        await wait_routed(c, b)
        await wait_routed(b, c)
    finally:
        await b.close()
        await c.close()


@pytest.mark.parametrize(("kind", "peer_kind"), [("pynatsd", "nats-server"), ("nats-server", "pynatsd")])
async def test_interest_is_sent_again_after_a_peer_restarts(node: Start, kind: str, peer_kind: str) -> None:
    peer_route_port = None
    peer = node(peer_kind)
    peer_route_port = peer.extra["route_port"]
    here = node(kind, routes=[peer])
    a = await connect(here)
    inbox = Inbox()
    await a.subscribe("kept", cb=inbox.add)
    await a.flush()
    peer.stop(signal.SIGKILL)
    peer = node(peer_kind, cluster_port=int(str(peer_route_port)))
    b = await connect(peer)
    try:
        await wait_routed(b, a)
        await b.publish("kept", b"after")
        await settle(a, b)
        assert inbox.data() == [b"after"]
    finally:
        await a.close()
        await b.close()


ACCOUNTS = """
accounts {
  A { users = [{user: a, password: a}] }
  B { users = [{user: b, password: b}] }
}
"""


@pytest.mark.parametrize(("seed_kind", "joiner_kind"), PAIRS[:2])
async def test_accounts_are_kept_apart_across_routes(
    node: Start, tmp_path: Any, seed_kind: str, joiner_kind: str
) -> None:
    conf = tmp_path / "accounts.conf"
    conf.write_text(ACCOUNTS)
    seed = node(seed_kind, args=["-c", str(conf)])
    joiner = node(joiner_kind, routes=[seed], args=["-c", str(conf)])
    a1 = await connect(seed, user="a", password="a")
    a2 = await connect(joiner, user="a", password="a")
    b2 = await connect(joiner, user="b", password="b")
    try:
        await wait_routed(a2, a1)
        got = Inbox()
        await a1.subscribe("shared", cb=got.add)
        await settle(a1, a2, b2)
        await b2.publish("shared", b"from-B")
        await a2.publish("shared", b"from-A")
        await settle(a1, a2, b2)
        assert got.data() == [b"from-A"]
        with pytest.raises(NoRespondersError):
            await b2.request("shared", b"x", timeout=5)
    finally:
        for c in (a1, a2, b2):
            await c.close()


@pytest.mark.parametrize(("seed_kind", "joiner_kind"), PAIRS[:2])
async def test_clients_hear_of_every_server_in_connect_urls(
    node: Start, seed_kind: str, joiner_kind: str
) -> None:
    seed = node(seed_kind)
    a = await nats.connect(seed.url, allow_reconnect=False)
    joiner = node(joiner_kind, routes=[seed])
    b = await connect(joiner)
    try:
        await wait_routed(a, b)
        await asyncio.sleep(0.3)
        # a connected before the joiner existed: an async INFO told it (nats-py adds the URLs it hears
        # of to its server pool)
        for client, other in ((a, joiner), (b, seed)):
            pool = [srv.uri.netloc for srv in client._server_pool]
            assert any(netloc.endswith(f":{other.port}") for netloc in pool), (pool, other.port)
        assert b._server_info.get("cluster") == "T"
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("pynatsd_solicits", [True, False])
async def test_nats_server_pools_and_pins_the_system_account_with_pynatsd(
    node: Start, pynatsd_solicits: bool
) -> None:
    """pynatsd advertises `route_pool_size` 1: a 2.15 peer keeps its pool of 3 (whichever side solicits)
    and the system account's pinned route, which it lists with its `account`; an account's interest
    crosses on one route of the pool."""
    if pynatsd_solicits:
        reference = node("nats-server", http=True)
        ours = node("pynatsd", routes=[reference])
    else:
        ours = node("pynatsd")
        reference = node("nats-server", routes=[ours], http=True)
    a, b = await connect(ours), await connect(reference)
    try:
        await a.subscribe("seen.by.peer", cb=Inbox().add)
        await wait_routed(a, b)
        await wait_routed(b, a)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10.0
        while (view := routez(reference))["num_routes"] < 4 and loop.time() < deadline:
            await asyncio.sleep(0.1)
        routes = view["routes"]
        assert sorted(str(r.get("account")) for r in routes) == ["$SYS", "None", "None", "None"], view
        assert all(r["did_solicit"] is (not pynatsd_solicits) for r in routes)
        carrying = [r for r in routes if "seen.by.peer" in r.get("subscriptions_list", [])]
        assert len(carrying) == 1 and "account" not in carrying[0], view
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("kinds", [("pynatsd", "nats-server"), ("pynatsd", "pynatsd")])
async def test_servers_soliciting_each_other_keep_one_route(node: Start, kinds: tuple[str, str]) -> None:
    """Both sides configure the other: the duplicate is resolved and messages flow once."""
    first_port = free_port()
    second = node(
        kinds[1], args=["--routes", f"nats://127.0.0.1:{first_port}"], http=kinds[1] == "nats-server"
    )
    first = node(kinds[0], routes=[second], cluster_port=first_port)
    a, b = await connect(first), await connect(second)
    try:
        await wait_routed(a, b)
        await wait_routed(b, a)
        await asyncio.sleep(2.5)  # past any reconnect of a dropped duplicate
        got = Inbox()
        await b.subscribe("once", cb=got.add)
        await settle(a, b)
        await wait_routed(a, b)
        await a.publish("once", b"1")
        await settle(a, b)
        assert got.data() == [b"1"]
        if kinds[1] == "nats-server":  # one route per slot: its pool of 3 and the pinned $SYS one
            assert routez(second)["num_routes"] == 4
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize(
    "kinds", [("pynatsd", "nats-server"), ("nats-server", "pynatsd"), ("pynatsd", "pynatsd")]
)
async def test_dynamic_cluster_names_converge(node: Start, kinds: tuple[str, str]) -> None:
    seed = node(kinds[0], name=None)
    joiner = node(kinds[1], routes=[seed], name=None)
    a, b = await connect(seed), await connect(joiner)
    try:
        await wait_routed(a, b)
        await wait_routed(b, a)
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("kinds", [("pynatsd", "nats-server"), ("nats-server", "pynatsd")])
async def test_different_cluster_names_do_not_route(node: Start, kinds: tuple[str, str]) -> None:
    seed = node(kinds[0], name="ONE")
    joiner = node(kinds[1], routes=[seed], name="TWO")
    a, b = await connect(seed), await connect(joiner)
    try:
        with pytest.raises(AssertionError, match="no route"):
            await wait_routed(b, a, timeout=2.0)
    finally:
        await a.close()
        await b.close()


ROUTE_AUTH = (
    'cluster {{ name: T, listen: "127.0.0.1:{port}", authorization {{ user: ruser, password: {pw} }} }}'
)


@pytest.mark.parametrize("kinds", [("pynatsd", "nats-server"), ("nats-server", "pynatsd")])
async def test_route_authorization(node: Start, tmp_path: Any, kinds: tuple[str, str]) -> None:
    """The accepting side checks the route's credentials (from the soliciting side's route URL)."""
    port = free_port()
    conf = tmp_path / "routes.conf"
    conf.write_text(ROUTE_AUTH.format(port=port, pw="s3cret"))
    proc = node(kinds[0], args=["-c", str(conf)], cluster_port=port, name=None, listen_flag=False)
    good = node(kinds[1], args=["--routes", f"nats://ruser:s3cret@127.0.0.1:{port}"])
    bad = node(kinds[1], args=["--routes", f"nats://ruser:wrong@127.0.0.1:{port}"])
    a, b, c = await connect(proc), await connect(good), await connect(bad)
    try:
        await wait_routed(b, a)
        await wait_routed(a, b)
        with pytest.raises(AssertionError, match="no route"):
            await wait_routed(c, a, timeout=2.0)
    finally:
        for client in (a, b, c):
            await client.close()


async def test_every_node_given_the_same_routes_list_including_itself(node: Start) -> None:
    """The usual deployment: one routes list for all (each node's own URL in it is recognized as itself)."""
    ports = [free_port() for _ in range(3)]
    urls = ",".join(f"nats://127.0.0.1:{p}" for p in ports)
    kinds = ("pynatsd", "nats-server", "pynatsd")
    servers = [
        node(kind, cluster_port=port, args=["--routes", urls])
        for kind, port in zip(kinds, ports, strict=True)
    ]
    clients = [await connect(server) for server in servers]
    try:
        for pub in clients:
            for sub in clients:
                if pub is not sub:
                    await wait_routed(pub, sub)
        got = Inbox()
        await clients[0].subscribe("all", cb=got.add)
        await settle(*clients)
        await asyncio.sleep(1.0)
        for i, client in enumerate(clients):
            await client.publish("all", b"%d" % i)
        await settle(*clients)
        assert sorted(got.data()) == [b"0", b"1", b"2"]  # once each: no duplicate routes
    finally:
        for client in clients:
            await client.close()


async def test_route_traffic_is_traced_like_nats_server(node: Start) -> None:
    """-V: a route's ops in both directions, with nats-server's arrows and words."""
    peer = node("nats-server")
    ours = node("pynatsd", routes=[peer], args=["-V"])
    a, b = await connect(ours), await connect(peer)
    try:
        await a.subscribe("traced.here", cb=Inbox().add)
        await b.subscribe("traced.there", cb=Inbox().add)
        await wait_routed(a, b)
        await wait_routed(b, a)
        await a.publish("traced.there", b"out")
        await b.publish("traced.here", b"in")
        await settle(a, b)
        await asyncio.sleep(0.3)
    finally:
        await a.close()
        await b.close()
    log = ours.log()
    for expected in (
        "rid:",
        "- ->> [RS+ $G traced.here]",
        "- <<- [RS+ $G traced.there]",
        "- ->> [RMSG $G traced.there 3]",
        '- ->> MSG_PAYLOAD: ["out"]',
        "- <<- [RMSG $G traced.here 2]",
        '- <<- MSG_PAYLOAD: ["in"]',
    ):
        assert expected in log, expected


async def test_interest_churn_keeps_stable_subscribers_exact(node: Start) -> None:
    """Subscriptions on the same subject come and go on every node while messages flow: the stable
    subscribers get every message once (interest counted per subject, RS- only at the last one)."""
    seed = node("pynatsd")
    servers = [seed, node("nats-server", routes=[seed]), node("pynatsd", routes=[seed])]
    clients = [await connect(server) for server in servers]
    try:
        for pub in clients:
            for sub in clients:
                if pub is not sub:
                    await wait_routed(pub, sub)
        stable = [Inbox() for _ in clients]
        for client, inbox in zip(clients, stable, strict=True):
            await client.subscribe("churn", cb=inbox.add)
        await settle(*clients)
        for i in range(200):
            churner = clients[i % 3]
            extra = await churner.subscribe("churn", cb=Inbox().add)
            await clients[(i + 1) % 3].publish("churn", b"%d" % i)
            await extra.unsubscribe()
        await settle(*clients)
        await asyncio.sleep(0.5)
        for inbox in stable:
            assert sorted(inbox.data(), key=int) == [b"%d" % i for i in range(200)]
    finally:
        for client in clients:
            await client.close()
