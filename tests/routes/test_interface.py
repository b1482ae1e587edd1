"""The clustering interface monitoring builds on (pynatsd.routes docstring): `Server.cluster`,
`Server.routes` and each route's fields, on two in-process pynatsd servers."""

from __future__ import annotations

import asyncio
from datetime import datetime

import nats
from nats.aio.msg import Msg

from pynatsd.base.options import Options
from pynatsd.config.cluster import ClusterOptions
from pynatsd.routes.route import Route
from pynatsd.server import Server


def clustered(**cluster: object) -> Server:
    opts = Options(host="127.0.0.1", port=-1)
    opts.cluster = ClusterOptions(name="I", host="127.0.0.1", port=-1, **cluster)  # type: ignore[arg-type]
    return Server(opts)


async def until(check: object, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():  # type: ignore[operator]
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


async def test_routes_and_their_fields() -> None:
    seed = clustered()
    await seed.start()
    assert seed.cluster is not None and seed.cluster.port > 0  # the bound port
    joiner = clustered(urls=[f"nats-route://127.0.0.1:{seed.cluster.port}"])
    await joiner.start()
    try:
        # the first route and the system account's pinned one, to the other server
        pinned = [b"", b"$SYS"]
        await until(
            lambda: (
                sorted(r.account for r in seed.routes) == sorted(r.account for r in joiner.routes) == pinned
            )
        )
        a = await nats.connect(f"nats://127.0.0.1:{seed.port}")
        b = await nats.connect(f"nats://127.0.0.1:{joiner.port}")
        got: list[bytes] = []

        async def take(msg: Msg) -> None:
            got.append(msg.data)

        await a.subscribe("iface.>", cb=take)
        await a.subscribe("iface.q", queue="workers", cb=take)
        await a.subscribe("iface.q", queue="workers", cb=take)  # a group of two: weight 2 over there
        await a.flush()
        out_route = next(r for r in joiner.routes if not r.account)
        await until(lambda: "iface.>" in out_route.subjects())
        assert out_route.subjects() == ["iface.>", "iface.q workers"]

        # per subject and queue group: the account and its one stand-in here (a queue group's weighted)
        def interest() -> list[tuple[bytes, list[tuple[bytes, bytes | None, int]]]]:
            return sorted(
                (acc, [(s.subject, s.queue, getattr(s, "weight", 1)) for s in subs])
                for acc, subs in out_route.remote_interest()
            )

        expected = [(b"$G", [(b"iface.>", None, 1)]), (b"$G", [(b"iface.q", b"workers", 2)])]
        await until(lambda: interest() == expected)
        await b.publish("iface.q", b"x")
        await b.flush()
        await until(lambda: len(got) == 2)
        in_route = next(r for r in seed.routes if not r.account)
        await until(lambda: in_route.rtt is not None and out_route.rtt is not None)
        for route, other, solicited in ((in_route, joiner, False), (out_route, seed, True)):
            assert isinstance(route, Route)
            assert isinstance(route.rid, int) and route.rid > 0
            assert route.remote_id == other.server_id and route.remote_name == other.server_name
            assert route.did_solicit is solicited and route.is_configured is solicited
            assert route.host == "127.0.0.1" and isinstance(route.port, int)
            assert isinstance(route.start, datetime) and isinstance(route.last_activity, datetime)
            assert isinstance(route.rtt, float)
            assert route.pool_idx == 0 and route.compression == "off"
            assert isinstance(route.pending_bytes, int)
        # one routed message for two matching interests (a plain one, a queue group's)
        assert (out_route.out_msgs, out_route.out_bytes) == (1, 1)
        assert (in_route.in_msgs, in_route.in_bytes) == (1, 1)
        cluster = joiner.cluster
        assert cluster is not None
        assert (cluster.name, cluster.pool_size, cluster.no_advertise) == ("I", 3, False)
        assert cluster.urls == [f"nats-route://127.0.0.1:{seed.cluster.port}"]
        await a.close()
        await b.close()
    finally:
        await joiner.shutdown()
        await seed.shutdown()
    assert seed.routes == [] and joiner.routes == []


async def test_a_server_without_cluster_has_none() -> None:
    server = Server(Options(host="127.0.0.1", port=-1))
    await server.start()
    try:
        assert server.cluster is None and server.routes == []
    finally:
        await server.shutdown()
