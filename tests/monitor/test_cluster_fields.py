"""/routez, /varz's cluster fields and the route metrics, built from routes set up by hand on an in-process
server (the JSON shaping alone; tests/cluster checks the same endpoints on real clusters against
nats-server's)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pynatsd.broker.delivery import Subscription
from pynatsd.config.cluster import ClusterOptions
from pynatsd.routes.manager import RouteManager
from pynatsd.routes.route import RemoteQueueSubscription, Route
from pynatsd.server import Server
from tests.monitor.conftest import Get

# A nats-server 2.15 /routez entry's keys in order, for a route of the global account (not pinned).
ROUTE_KEYS = [
    "rid", "remote_id", "remote_name", "did_solicit", "is_configured", "ip", "port", "start",
    "last_activity", "rtt", "uptime", "idle", "pending_size", "in_msgs", "out_msgs", "in_bytes",
    "out_bytes", "subscriptions",
]  # fmt: skip


def add_route(server: Server, rid: int, name: str, solicited: bool) -> Route:
    """A registered route with traffic and remote interest (a plain subscription, and a queue group of
    weight 2: two members there)."""
    manager = server.route_manager
    assert manager is not None
    url = "nats-route://127.0.0.1:7001" if solicited else ""
    route = Route(manager, did_solicit=solicited, url=url, is_configured=solicited)
    route.rid = rid
    route.remote_id, route.remote_name = f"N{name.upper()}ID", name
    route.host, route.port = "127.0.0.1", 7000 + rid
    route.start = datetime.now(UTC) - timedelta(seconds=75)
    route.last_activity = datetime.now(UTC) - timedelta(seconds=3)
    route.rtt = 0.000412
    route.in_msgs, route.in_bytes, route.out_msgs, route.out_bytes = 5, 50, 7, 70
    plain = Subscription(route, b"orders.>", None, b"internal")
    plain.delivered = 2
    group = RemoteQueueSubscription(route, b"work", b"q", b"internal", 2)
    group.delivered = 4
    route.remote_subs[(b"$G", b"orders.>", None)] = plain
    route.remote_subs[(b"$G", b"work", b"q")] = group
    manager.routes[route.remote_id] = route
    return route


@pytest.fixture
def clustered(mserver: Server) -> Server:
    cluster = ClusterOptions(
        name="blue", host="127.0.0.1", port=6222, urls=["nats-route://u:p@10.0.0.1:6222"]
    )
    mserver.cluster = cluster
    mserver.route_manager = RouteManager(mserver, cluster)
    add_route(mserver, 4, "beta", solicited=False)
    add_route(mserver, 3, "alpha", solicited=True)
    return mserver


async def test_routez_fields_as_nats_server(clustered: Server, get: Get) -> None:
    routez = await get("/routez")
    assert list(routez) == ["server_id", "server_name", "now", "num_routes", "routes"]
    assert routez["num_routes"] == 2
    alpha, beta = routez["routes"]  # by rid
    assert list(alpha) == [*ROUTE_KEYS, "compression"]
    assert alpha["rid"] == 3 and beta["rid"] == 4
    assert (alpha["remote_id"], alpha["remote_name"]) == ("NALPHAID", "alpha")
    assert (alpha["did_solicit"], alpha["is_configured"], beta["did_solicit"]) == (True, True, False)
    assert (alpha["ip"], alpha["port"]) == ("127.0.0.1", 7003)
    assert (alpha["rtt"], alpha["uptime"], alpha["idle"]) == ("412µs", "1m15s", "3s")
    assert [alpha[k] for k in ("in_msgs", "in_bytes", "out_msgs", "out_bytes")] == [5, 50, 7, 70]
    assert (alpha["pending_size"], alpha["subscriptions"], alpha["compression"]) == (0, 2, "off")


async def test_routez_subscription_lists(clustered: Server, get: Get) -> None:
    (listed, _) = (await get("/routez?subs=1"))["routes"]
    assert list(listed) == [*ROUTE_KEYS, "subscriptions_list", "compression"]
    assert sorted(listed["subscriptions_list"]) == ["orders.>", "work"]  # subjects only, as nats-server
    (detailed, _) = (await get("/routez?subs=detail"))["routes"]
    assert sorted(detailed["subscriptions_list_detail"], key=lambda d: d["subject"]) == [
        # sid as nats-server's for a route without pooling: account, subject and queue
        {"subject": "orders.>", "sid": "$G orders.>", "msgs": 2, "cid": 3},
        {"subject": "work", "qgroup": "q", "sid": "$G work q", "msgs": 4, "cid": 3},  # weight 2
    ]
    status, _headers, text = await get("/routez?subs=maybe", raw=True)
    assert status == 400 and "subs" in text


async def test_varz_cluster_block_and_counts(clustered: Server, get: Get) -> None:
    varz = await get("/varz")
    assert varz["cluster"] == {
        "name": "blue",
        "addr": "127.0.0.1",
        "cluster_port": 6222,
        "auth_timeout": 2,
        "urls": ["10.0.0.1:6222"],  # the configured routes without their credentials
        "tls_timeout": 2,
        "pool_size": 3,
    }
    assert (varz["routes"], varz["remotes"]) == (2, 2)


async def test_standalone_varz_has_no_cluster(mserver: Server, get: Get) -> None:
    varz = await get("/varz")
    assert varz["cluster"] == {} and varz["routes"] == 0 and varz["remotes"] == 0
    assert "connect_urls" not in varz
    assert (await get("/routez"))["routes"] == []


async def test_route_metrics(clustered: Server, get: Get) -> None:
    _status, _headers, text = await get("/metrics", raw=True)
    samples = {
        (s.name, s.labels.get("remote_name", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("pynatsd_routes", "")] == 2
    assert samples[("gnatsd_routez_num_routes", "")] == 2
    assert samples[("gnatsd_varz_remotes", "")] == 2
    assert samples[("pynatsd_route_messages_in_total", "alpha")] == 5
    assert samples[("pynatsd_route_bytes_out_total", "beta")] == 70
    assert samples[("pynatsd_route_subscriptions", "alpha")] == 2
    assert samples[("pynatsd_route_rtt_seconds", "beta")] == pytest.approx(0.000412)


async def test_varz_cluster_block_with_route_tls(clustered: Server, get: Get) -> None:
    """Route TLS configured: required and verified (mutual), and the default authorization timeout is the
    handshake limit plus a second, as nats-server's."""
    assert clustered.cluster is not None
    clustered.cluster.tls = {"timeout": 3.0, "cert_file": "c.pem", "key_file": "k.pem"}
    block = (await get("/varz"))["cluster"]
    assert list(block) == [
        "name", "addr", "cluster_port", "auth_timeout", "urls", "tls_timeout", "tls_required", "tls_verify",
        "pool_size",
    ]  # fmt: skip
    assert (block["auth_timeout"], block["tls_timeout"]) == (4, 3)
    assert block["tls_required"] is True and block["tls_verify"] is True
