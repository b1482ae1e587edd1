"""Monitoring of real clusters: /routez, /varz's cluster fields, /metrics and the dashboard.

Field names and order are compared with what nats-server 2.15 itself answers (a two-node nats-server
cluster started once for the session); values are checked against the cluster's actual layout on every
node of every mix, nats-server nodes included (they are the reference for the checks themselves).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from prometheus_client.parser import text_string_to_metric_families
from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.cluster.conftest import ClusterFactory
from tests.cluster.harness import Cluster, Node, running_cluster
from tests.conftest import need_tool
from tests.monitor.test_dashboard import browser, eventually, text_of  # noqa: F401 (browser: a fixture)
from tests.routes.test_tls import route_certs
from tests.servers import nats_server_binary
from tests.wire import WireClient


@pytest.fixture(scope="session")
def reference() -> Iterator[dict[str, list[str]]]:
    """Key lists of nats-server's answers: /routez, a route entry (plain, with subscriptions_list, one
    subscriptions_list_detail entry of a queue subscription) and /varz `cluster` of a node with routes."""
    need_tool(nats_server_binary() is not None, "nats-server")
    with (
        tempfile.TemporaryDirectory(prefix="pynatsd-refcluster-") as workdir,
        running_cluster(("nats-server", "nats-server"), Path(workdir)) as ref,
        WireClient(ref[1].port) as client,
    ):
        client.exchange(b'CONNECT {"verbose":false}\r\nSUB ref.x q 1\r\n')
        ref.wait_interest("ref.x", [ref[0]], [ref[1]], queue="q")
        plain = own_routes(ref[0], "")[0]
        listed = next(r for r in own_routes(ref[0], "?subs=1") if r.get("subscriptions_list"))
        detailed = next(r for r in own_routes(ref[0], "?subs=detail") if r.get("subscriptions_list_detail"))
        yield {
            "routez": list(ref[0].get("/routez")),
            "route": list(plain),
            "route_subs": list(listed),
            "detail": list(detailed["subscriptions_list_detail"][0]),
            "cluster": list(ref[1].get("/varz")["cluster"]),
        }


def own_routes(node: Node, query: str) -> list[dict[str, Any]]:
    """Routes that carry the global account: nats-server's pinned $SYS route (`account`) set aside."""
    routes: list[dict[str, Any]] = node.get(f"/routez{query}")["routes"]
    return [r for r in routes if "account" not in r]


def routes_to(node: Node, peer_id: str, query: str = "") -> list[dict[str, Any]]:
    return [r for r in own_routes(node, query) if r["remote_id"] == peer_id]


def test_routez_fields_and_layout(healthy_cluster: Cluster, reference: dict[str, list[str]]) -> None:
    """Every node's /routez has nats-server's fields in its order, one or more routes to each other node,
    solicited and configured towards the seed, and the peers' real addresses."""
    cluster = healthy_cluster
    ids = {n.index: n.server_id() for n in cluster.nodes}
    for node in cluster.nodes:
        routez = node.get("/routez")
        assert list(routez) == reference["routez"]
        assert (routez["server_id"], routez["server_name"]) == (ids[node.index], node.name)
        assert routez["num_routes"] == len(routez["routes"])
        for peer in cluster.nodes:
            if peer is node:
                continue
            routes = routes_to(node, ids[peer.index])
            assert routes, f"{node} has no route to {peer}"
            for route in routes:
                assert list(route) == reference["route"], route
                assert route["remote_name"] == peer.name
                assert route["ip"] == "127.0.0.1"
                assert route["is_configured"] == (route["did_solicit"] and peer.index == 0)
                if route["did_solicit"]:
                    assert route["port"] == peer.cluster_port
            if node.index > 0 and peer.index == 0:  # the configured seed route
                assert all(r["did_solicit"] and r["is_configured"] for r in routes)


async def test_routez_interest_and_traffic(
    healthy_cluster: Cluster, reference: dict[str, list[str]], subject: str
) -> None:
    """A subscription on node 1 is listed by node 0's routes to it (subjects, or details with the queue
    group); five messages from node 0 count as out on that side and in on the other."""
    cluster = healthy_cluster
    ids = {n.index: n.server_id() for n in cluster.nodes}
    async with (
        await nats.connect(cluster[1].url, allow_reconnect=False) as sub_nc,
        await nats.connect(cluster[0].url, allow_reconnect=False) as pub_nc,
    ):
        sub = await sub_nc.subscribe(subject)
        await sub_nc.subscribe(subject, queue="workers")
        await sub_nc.flush()
        await asyncio.to_thread(cluster.wait_interest, subject, [cluster[0]], [cluster[1]], "workers")
        await asyncio.to_thread(cluster.wait_interest, subject, [cluster[0]], [cluster[1]])
        listed = [r for r in routes_to(cluster[0], ids[1], "?subs=1") if r.get("subscriptions_list")]
        assert listed and all(list(r) == reference["route_subs"] for r in listed)
        assert sum(r["subscriptions_list"].count(subject) for r in listed) == 2  # plain and queue
        details = [
            d
            for r in routes_to(cluster[0], ids[1], "?subs=detail")
            for d in r.get("subscriptions_list_detail") or ()
        ]
        queued = [d for d in details if d["subject"] == subject and d.get("qgroup") == "workers"]
        assert len(queued) == 1 and list(queued[0]) == reference["detail"]
        assert queued[0]["sid"].endswith(f"$G {subject} workers")  # nats-server prefixes "R " when pooling

        def counted() -> tuple[int, int]:
            out = sum(r["out_msgs"] for r in routes_to(cluster[0], ids[1]))
            into = sum(r["in_msgs"] for r in routes_to(cluster[1], ids[0]))
            return out, into

        out_before, in_before = await asyncio.to_thread(counted)
        for i in range(5):
            await pub_nc.publish(subject, f"m{i}".encode())
        await pub_nc.flush()
        for _ in range(5):
            await sub.next_msg(timeout=10)
        out_after, in_after = await asyncio.to_thread(counted)
        # at least ours (a queue member may also be served by node 1's own copy: still one route message)
        assert out_after - out_before >= 5 and in_after - in_before >= 5


def test_varz_cluster_fields(healthy_cluster: Cluster, reference: dict[str, list[str]]) -> None:
    """/varz `cluster` as nats-server's (the seed has no `urls`), connect_urls of all nodes, routes and
    remotes counts."""
    cluster = healthy_cluster
    everyone = {f"127.0.0.1:{n.port}" for n in cluster.nodes}
    for node in cluster.nodes:
        varz = node.get("/varz")
        block = varz["cluster"]
        expected_keys = [k for k in reference["cluster"] if node.index > 0 or k != "urls"]
        assert list(block) == expected_keys, block
        assert (block["name"], block["addr"], block["cluster_port"]) == (
            "pyc",
            "127.0.0.1",
            node.cluster_port,
        )
        if node.index > 0:
            assert block["urls"] == [f"127.0.0.1:{cluster[0].cluster_port}"]
        assert set(varz["connect_urls"]) == everyone
        assert varz["remotes"] == len(cluster.nodes) - 1
        assert varz["routes"] == len(node.get("/routez")["routes"])


def metric_samples(node: Node) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(node.monitor_url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, s.labels.get("remote_name", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_count_routes(cluster_factory: ClusterFactory) -> None:
    """The pynatsd nodes of a mixed cluster count their routes and label each route's series by peer."""
    cluster = cluster_factory(("pynatsd", "pynatsd", "nats-server"))
    for node in cluster.nodes[:2]:
        samples = metric_samples(node)
        routez = node.get("/routez")
        assert samples[("pynatsd_routes", "")] == routez["num_routes"]
        assert samples[("gnatsd_routez_num_routes", "")] == routez["num_routes"]
        assert samples[("gnatsd_varz_remotes", "")] == 2
        peers = {p.name for p in cluster.nodes if p is not node}
        assert {name for (metric, name) in samples if metric == "pynatsd_route_subscriptions"} == peers


async def test_dashboard_shows_routes(cluster_factory: ClusterFactory, browser: webdriver.Chrome) -> None:  # noqa: F811
    """A pynatsd node's dashboard lists the cluster and one row per route with the peers' names."""
    cluster = cluster_factory(("pynatsd", "pynatsd", "nats-server"))
    browser.get(cluster[0].monitor_url + "/")
    assert await eventually(lambda: text_of(browser, "status") == "live")
    assert await eventually(lambda: "Cluster pyc" in text_of(browser, "cluster-name"))

    def peers() -> set[str]:
        rows = browser.find_elements(By.CSS_SELECTOR, "#routes tr")
        return {r.find_elements(By.TAG_NAME, "td")[1].text for r in rows}

    assert await eventually(lambda: peers() == {"n1-py", "n2-go"}), peers()
    errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert errors == [], json.dumps(errors)


def test_varz_cluster_fields_with_route_tls(cluster_factory: ClusterFactory, tmp_path: Path) -> None:
    """Routes over mutual TLS: pynatsd's /varz `cluster` block has nats-server's keys and values (TLS
    required and verified, the TLS timeout, the authorization timeout derived from it)."""
    certs = route_certs(tmp_path)
    tls = (
        f'  tls {{ cert_file: "{certs["cert"]}", key_file: "{certs["key"]}", ca_file: "{certs["ca"]}",'
        " timeout: 3 }\n"
    )
    cluster = cluster_factory(("pynatsd", "nats-server", "pynatsd"), cluster_extra=tls)
    blocks = [node.get("/varz")["cluster"] for node in cluster.nodes]
    assert blocks[1]["tls_required"] is True  # the reference: nats-server's view of the same settings
    # Not reported by pynatsd (its client TLS block does not either): the certificate's expiry date.
    assert "tls_cert_not_after" in blocks[1]
    del blocks[1]["tls_cert_not_after"]
    for block, node in zip(blocks, cluster.nodes, strict=True):
        assert {k: v for k, v in block.items() if k not in ("cluster_port", "urls")} == {
            k: v for k, v in blocks[1].items() if k not in ("cluster_port", "urls")
        }, node
        assert list(block) == [k for k in blocks[1] if node.index > 0 or k != "urls"], node
