"""nats.go, libnats and nats-py (the tests/interop drivers) talking across the nodes of each cluster mix."""

from __future__ import annotations

import asyncio

import pytest

from tests.cluster.harness import Cluster
from tests.interop.drivers import Driver
from tests.interop.spec import as_seen_by, payload, reply_pairs, sent_pairs

COUNT = 10  # every payload size of the spec once, 64 KiB included


async def test_pub_on_one_node_sub_on_another(driver: Driver, healthy_cluster: Cluster, subject: str) -> None:
    """A subscriber on node 2 gets node 0's messages: payloads and headers intact, in order."""
    nodes = healthy_cluster.nodes
    listener = driver.start("sub", nodes[2].url, subject, COUNT)
    try:
        listener.expect("ready")
        await asyncio.to_thread(healthy_cluster.wait_interest, subject, nodes[:1], nodes[2:])
        await asyncio.to_thread(driver.run, "pub", nodes[0].url, subject, COUNT)
        got = [listener.expect("msg") for _ in range(COUNT)]
        listener.finish()
    finally:
        listener.kill()
    for i, msg in enumerate(got):
        assert (msg["subject"], bytes.fromhex(msg["data"])) == (subject, payload(i))
        assert msg["hdr"] == as_seen_by(sent_pairs(i, driver.lang), driver.lang)


@pytest.mark.parametrize("style", ["old", "new"])
async def test_request_reply_across_nodes(
    driver: Driver, healthy_cluster: Cluster, subject: str, style: str
) -> None:
    """A responder on node 1, requests from node 2 (fresh inbox per request, or one muxed inbox)."""
    count = 6
    nodes = healthy_cluster.nodes
    responder = driver.start("respond", nodes[1].url, subject, count)
    try:
        responder.expect("ready")
        await asyncio.to_thread(healthy_cluster.wait_interest, subject, nodes[2:], nodes[1:2])
        replies = await asyncio.to_thread(driver.run, "request", nodes[2].url, subject, count, style)
        responder.finish()
    finally:
        responder.kill()
    assert len(replies) == count
    for i, reply in enumerate(replies):
        assert bytes.fromhex(reply["data"]) == b"re:" + payload(i)
        inbox = reply["subject"]
        assert inbox.startswith("_INBOX.")
        assert reply["hdr"] == reply_pairs(i, driver.lang, driver.lang, style, inbox)


def test_no_responders_in_a_cluster(driver: Driver, healthy_cluster: Cluster, subject: str) -> None:
    """Nobody anywhere in the cluster listens: both request styles get no-responders at once."""
    events = driver.run("noresp", healthy_cluster.nodes[1].url, subject)
    assert {e["style"]: e["result"] for e in events} == {"new": "no_responders", "old": "no_responders"}
