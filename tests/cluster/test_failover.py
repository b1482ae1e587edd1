"""Nodes dying and coming back: client failover through gossiped connect_urls, interest re-propagation
after a restart, and traffic across a kill/restart compared with the all-nats-server cluster.

Every test gets private clusters (kills would disturb a shared one). The node killed is node 0, the
seed: pynatsd in every mix but the reference, and the one the others must route around (1 and 2 know
each other only through gossip).
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from tests.cluster.conftest import ClusterFactory
from tests.cluster.harness import MATRIX, Cluster, Node, build_cluster, wait_until
from tests.conftest import need_tool
from tests.interop.drivers import Driver
from tests.servers import nats_server_binary

WAIT = 10.0
RECONNECT = {"reconnect_time_wait": 0.2, "max_reconnect_attempts": -1, "connect_timeout": 2}


def node_of(cluster: Cluster, nc: Client) -> Node:
    """The node a client is connected to now."""
    assert nc.connected_url is not None
    return next(n for n in cluster.nodes if n.port == nc.connected_url.port)


async def wait_for(predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def connected(url: str, **opts: object) -> AsyncIterator[Client]:
    nc = await nats.connect(url, **{**RECONNECT, **opts})
    try:
        yield nc
    finally:
        await nc.close()


async def test_client_fails_over_to_a_gossiped_node(
    mix: tuple[str, ...], cluster_factory: ClusterFactory, subject: str
) -> None:
    """A client given only node 0's URL learns the others from INFO connect_urls; when node 0 is killed
    it reconnects to one of them, its subscription is restored there, and messages flow again."""
    cluster = cluster_factory(mix)
    victim, publisher_node = cluster[0], cluster[1]
    async with connected(victim.url, name="failover-sub") as sub_nc, connected(publisher_node.url) as pub_nc:
        others = {cluster[1].port, cluster[2].port}
        await wait_for(lambda: {u.port for u in sub_nc.discovered_servers} >= others, "connect_urls gossip")
        sub = await sub_nc.subscribe(subject)
        await sub_nc.flush()
        await asyncio.to_thread(cluster.wait_interest, subject, [publisher_node], [victim])
        await pub_nc.publish(subject, b"before")
        assert (await sub.next_msg(timeout=WAIT)).data == b"before"

        await asyncio.to_thread(cluster.kill, victim)
        await wait_for(
            lambda: sub_nc.is_connected and node_of(cluster, sub_nc).port in others, "reconnect", 20
        )
        new_home = node_of(cluster, sub_nc)
        await asyncio.to_thread(cluster.wait_interest, subject, [publisher_node], [new_home])
        for i in range(5):
            await pub_nc.publish(subject, f"after{i}".encode())
        await pub_nc.flush()
        assert [(await sub.next_msg(timeout=WAIT)).data for _ in range(5)] == [
            f"after{i}".encode() for i in range(5)
        ]


async def test_restarted_node_relearns_interest(
    mix: tuple[str, ...], cluster_factory: ClusterFactory, subject: str
) -> None:
    """After node 0 restarts (same ports, new server id) it rejoins the mesh, learns the interest that
    existed while it was down, and its own clients' subscriptions reach the others again."""
    cluster = cluster_factory(mix)
    async with connected(cluster[1].url) as nc1, connected(cluster[2].url) as nc2:
        far = await nc1.subscribe(subject)
        await nc1.flush()
        await asyncio.to_thread(cluster.kill, cluster[0])
        await asyncio.to_thread(cluster.start, cluster[0])
        await asyncio.to_thread(cluster.wait_mesh)
        await asyncio.to_thread(cluster.wait_interest, subject, [cluster[0]], [cluster[1]])
        async with connected(cluster[0].url) as nc0:
            near = await nc0.subscribe(f"{subject}.back")
            await nc0.flush()
            await asyncio.to_thread(cluster.wait_interest, f"{subject}.back", [cluster[2]], [cluster[0]])
            await nc0.publish(subject, b"from-restarted")
            await nc0.flush()
            await nc2.publish(f"{subject}.back", b"to-restarted")
            await nc2.flush()
            assert (await far.next_msg(timeout=WAIT)).data == b"from-restarted"
            assert (await near.next_msg(timeout=WAIT)).data == b"to-restarted"


@dataclass
class ChaosResult:
    """What the subscribers saw of `published` numbered messages."""

    published: int
    good: list[int] = field(default_factory=list)  # on node 2: its node and the publisher's stay up
    victim: list[int] = field(default_factory=list)  # started on node 0, which is killed and restarted
    victim_resumed: bool = False


async def chaos_run(cluster: Cluster, subject: str, total: int = 2000, batch: int = 20) -> ChaosResult:
    """Node 1 publishes `total` numbered messages in paced batches; subscribers on nodes 2 and 0 count
    them while node 0 is killed (at a third) and restarted (at two thirds)."""
    result = ChaosResult(total)

    def counter(into: list[int]) -> Callable[[Msg], Awaitable[None]]:
        async def on_msg(msg: Msg) -> None:
            into.append(int(msg.data))

        return on_msg

    async with (
        connected(cluster[1].url) as pub_nc,
        connected(cluster[2].url) as good_nc,
        connected(cluster[0].url) as victim_nc,
    ):
        await good_nc.subscribe(subject, cb=counter(result.good))
        await victim_nc.subscribe(subject, cb=counter(result.victim))
        await good_nc.flush()
        await victim_nc.flush()
        await asyncio.to_thread(cluster.wait_interest, subject, [cluster[1]], [cluster[0], cluster[2]])
        for start in range(0, total, batch):
            if start == total // 3 // batch * batch:
                await asyncio.to_thread(cluster.kill, cluster[0])
            if start == 2 * total // 3 // batch * batch:
                await asyncio.to_thread(cluster.start, cluster[0])
            for i in range(start, start + batch):
                await pub_nc.publish(subject, str(i).encode())
            await asyncio.sleep(0.01)
        await pub_nc.flush()
        await wait_for(lambda: len(result.good) >= total, "the good subscriber's messages")
        # The victim's client keeps receiving once back: a tail of numbers past `total` reaches it.
        seen = len(result.victim)
        tail = total
        deadline = asyncio.get_running_loop().time() + 20
        while asyncio.get_running_loop().time() < deadline and not any(
            n >= total for n in result.victim[seen:]
        ):
            await pub_nc.publish(subject, str(tail).encode())
            tail += 1
            await asyncio.sleep(0.05)
        result.victim_resumed = any(n >= total for n in result.victim)
        await asyncio.sleep(0.2)  # anything still in flight to the good subscriber
    result.good = [n for n in result.good if n < total]
    return result


def check_chaos(result: ChaosResult) -> None:
    """What nats-server itself gives in this run: the good subscriber, whose node and route to the
    publisher's node stay up, gets every message once and in order; the victim's client loses what was
    sent while it was away but never gets a message twice or out of order, and receives again after."""
    assert result.good == list(range(result.published))
    assert result.victim == sorted(set(result.victim)), "duplicates or reordering at the victim"
    assert result.victim_resumed, "the victim's client never received again"


@pytest.fixture(scope="session")
def chaos_runs() -> dict[tuple[str, ...], ChaosResult]:
    """The chaos run's result per kinds of cluster: the all-nats-server reference runs once, not once more
    beside every mix (2.2 s each). Session-scoped: the session's mixes take turns across the modules."""
    return {}


async def test_chaos_kill_and_restart_under_load(
    mix: tuple[str, ...],
    cluster_factory: ClusterFactory,
    subject: str,
    chaos_runs: dict[tuple[str, ...], ChaosResult],
) -> None:
    """The same run on this mix and on the all-nats-server cluster: the same invariants hold for both,
    and the good subscriber's count is the same (all of them)."""
    for name, kinds in {"reference": MATRIX["3go"], "mix": mix}.items():
        if kinds not in chaos_runs:
            cluster = cluster_factory(kinds)
            chaos_runs[kinds] = await chaos_run(cluster, f"{subject}.{name}")
            cluster.stop_all()
    reference, result = chaos_runs[MATRIX["3go"]], chaos_runs[mix]
    check_chaos(reference)
    check_chaos(result)
    assert len(result.good) == len(reference.good)


# Nodes started one after another while a client is connected to the first, then stopped one after
# another: (kinds, client library). The seed, node 0, is the one the client starts on: in the mix a
# nats-server, whose clients must hear of the pynatsd nodes from their route INFO.
GROWING: dict[str, tuple[tuple[str, ...], str]] = {
    "3py-python": (MATRIX["3py"], "python"),
    "5mix-go": (("nats-server", "pynatsd", "nats-server", "pynatsd", "pynatsd"), "go"),
    "3go-go": (MATRIX["3go"], "go"),
}


def _port(url: str) -> int:
    port = urllib.parse.urlsplit(url if "//" in url else f"nats://{url}").port
    assert port is not None, url
    return port


@pytest.mark.parametrize("case", list(GROWING))
def test_client_learns_nodes_started_after_it(
    case: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A client connected to the first node learns each node started after it (async INFO
    connect_urls, as nats-server sends on every new route), so as the nodes are stopped one by one it
    always reconnects to one still up: nats.go and nats-py, 3 and 5 nodes, pynatsd and mixed clusters."""
    kinds, lang = GROWING[case]
    if "nats-server" in kinds:
        need_tool(nats_server_binary() is not None, "nats-server")
    driver: Driver = request.getfixturevalue(f"{lang}_driver")
    cluster = build_cluster(kinds, tmp_path)
    cluster.start(cluster[0])
    client = driver.start("failover", cluster[0].url)
    try:
        client.expect("ready")
        for node in cluster.nodes[1:]:
            cluster.start(node)
        cluster.wait_mesh()
        later = {n.port for n in cluster.nodes[1:]}

        def known() -> set[int]:
            client.send("servers")
            return {_port(u) for u in client.expect("servers")["urls"]}

        wait_until(lambda: known() >= later, WAIT, lambda: f"{case}: the client knows only {known()}")
        home = cluster[0]
        for _ in cluster.nodes[1:]:  # each time, the node the client is on goes away
            cluster.stop(home)
            port = _port(client.expect("reconnected", timeout=WAIT)["url"])
            home = next(n for n in cluster.nodes if n.port == port)
            assert home.running, f"{case}: reconnected to {home}, which was stopped"
        client.send("quit")
        client.finish()
    finally:
        client.kill()
        cluster.stop_all()
