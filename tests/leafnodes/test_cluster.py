"""A leaf node on a hub cluster: the leaf dials one member (H1); clients on the other member (H2) and on
the leaf reach each other both ways, their interest carried over the route and the leaf connection as
nats-server carries it (a hub leaf's interest goes to the routes; a routed message goes on to the leafs),
and a queue group prefers its members in the cluster over the leaf's. Mixed with nats-server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.leafnodes.conftest import collect, ready, settled, track
from tests.routes.conftest import connect
from tests.servers import ServerProcess, free_port, require, start_server

# (H1 with the leafnode port, H2, the leaf)
TOPOLOGIES = {
    "pynatsd-hub-in-mixed-cluster": ("pynatsd", "nats-server", "pynatsd"),
    "pynatsd-behind-the-route": ("nats-server", "pynatsd", "pynatsd"),
    "nats-server": ("nats-server", "nats-server", "nats-server"),
}


@pytest.fixture(scope="module", params=list(TOPOLOGIES))
def servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[ServerProcess]]:
    require("nats-server")
    h1_kind, h2_kind, leaf_kind = TOPOLOGIES[request.param]
    directory = tmp_path_factory.mktemp("cluster")
    leaf_port, r1, r2 = free_port(), free_port(), free_port()
    started: list[ServerProcess] = []
    try:
        conf = directory / "h1.conf"
        conf.write_text(f"leafnodes {{ listen: 127.0.0.1:{leaf_port} }}\n")
        cluster = ["--cluster_name", "HUB"]
        started.append(
            start_server(h1_kind, ["-c", str(conf), "--cluster", f"nats://127.0.0.1:{r1}", *cluster])
        )
        routes = ["--routes", f"nats://127.0.0.1:{r1}"]
        started.append(start_server(h2_kind, ["--cluster", f"nats://127.0.0.1:{r2}", *cluster, *routes]))
        conf = Path(directory / "leaf.conf")
        conf.write_text(f'leafnodes {{ remotes [ {{ url: "nats-leaf://127.0.0.1:{leaf_port}" }} ] }}\n')
        started.append(start_server(leaf_kind, ["-c", str(conf)]))
        yield started
    finally:
        for server in reversed(started):
            server.stop()


async def test_leaf_and_the_far_hub_member_reach_each_other(servers: list[ServerProcess]) -> None:
    h1, h2, leaf = [track(await connect(server)) for server in servers]
    on_h2 = await collect(h2, "to.h2.>")
    on_leaf = await collect(leaf, "to.leaf.>")
    await ready(h2, leaf)
    await ready(leaf, h2)
    await leaf.publish("to.h2.a", b"up")
    await h2.publish("to.leaf.b", b"down")
    await settled(leaf, h2, on_h2, "to.h2.mark")
    await settled(h2, leaf, on_leaf, "to.leaf.mark")
    assert on_h2 == [("to.h2.a", b"up")]
    assert on_leaf == [("to.leaf.b", b"down")]
    for nc in (h1, h2, leaf):
        await nc.close()


async def test_queue_members_in_the_cluster_first(servers: list[ServerProcess]) -> None:
    h1, h2, leaf = [track(await connect(server)) for server in servers]
    in_cluster = await collect(h2, "jobs", queue="q")
    on_leaf = await collect(leaf, "jobs", queue="q")
    h2_marks, leaf_marks = await collect(h2, "mark.h2"), await collect(leaf, "mark.leaf")
    await ready(h2, h1)
    await ready(leaf, h1)
    for i in range(10):
        await h1.publish("jobs", b"%d" % i)
    await settled(h1, h2, h2_marks, "mark.h2")
    await settled(h1, leaf, leaf_marks, "mark.leaf")
    assert len(in_cluster) == 10
    assert on_leaf == []
    for nc in (h1, h2, leaf):
        await nc.close()
