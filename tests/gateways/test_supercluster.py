"""Two clusters joined by gateways, in every mix of pynatsd and nats-server (the all-nats-server row is
the reference): the same client actions, the same outcomes. Servers are shared per mix."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator

import nats
import pytest

from tests.gateways.conftest import Supercluster

MIXES = {
    "pynatsd-nats": {"A": ["pynatsd"], "B": ["nats-server"]},
    "nats-pynatsd": {"A": ["nats-server"], "B": ["pynatsd"]},
    "pynatsd-pynatsd": {"A": ["pynatsd"], "B": ["pynatsd"]},
    "reference": {"A": ["nats-server"], "B": ["nats-server"]},
    # a mixed 2-node cluster on one side: A0 pynatsd routed to A1 nats-server
    "mixed-pynatsd": {"A": ["pynatsd", "nats-server"], "B": ["pynatsd"]},
}


@pytest.fixture(scope="module", params=list(MIXES))
def sc(request: pytest.FixtureRequest) -> Iterator[Supercluster]:
    supercluster = Supercluster(MIXES[request.param])
    try:
        yield supercluster
    finally:
        supercluster.close()


async def _collect(sub: nats.aio.subscription.Subscription, n: int) -> list[bytes]:
    return [(await sub.next_msg(timeout=5)).data for _ in range(n)]


@pytest.mark.parametrize(("pub_side", "sub_side"), [("A", "B"), ("B", "A")])
async def test_pubsub_across(sc: Supercluster, pub_side: str, sub_side: str) -> None:
    publisher, subscriber = sc[pub_side][0], sc[sub_side][-1]
    subject = f"across.{pub_side}{sub_side}"
    nc_sub = await nats.connect(subscriber.url)
    nc_pub = await nats.connect(publisher.url)
    try:
        sub = await nc_sub.subscribe(subject)
        await nc_sub.flush()
        sc.wait_interest(publisher, sub_side, subject)
        for i in range(5):
            await nc_pub.publish(subject, b"m%d" % i, headers={"k": str(i)} if i % 2 else None)
        await nc_pub.flush()
        assert await _collect(sub, 5) == [b"m%d" % i for i in range(5)]
    finally:
        await nc_sub.close()
        await nc_pub.close()


async def test_queue_group_prefers_local_cluster(sc: Supercluster) -> None:
    a_pub, a_member = sc["A"][0], sc["A"][-1]
    b_pub, b_member = sc["B"][0], sc["B"][-1]
    subject = "work.items"
    conns = [await nats.connect(m.url) for m in (a_member, b_member, a_pub, b_pub)]
    nc_a, nc_b, pub_a, pub_b = conns
    try:
        qa = await nc_a.subscribe(subject, queue="workers")
        qb = await nc_b.subscribe(subject, queue="workers")
        await nc_a.flush()
        await nc_b.flush()
        sc.wait_interest(a_pub, "B", subject)
        sc.wait_interest(b_pub, "A", subject)
        for i in range(10):
            await pub_a.publish(subject, b"a%d" % i)
            await pub_b.publish(subject, b"b%d" % i)
        await pub_a.flush()
        await pub_b.flush()
        # each cluster's own member takes all of its cluster's messages
        assert sorted(await _collect(qa, 10)) == sorted(b"a%d" % i for i in range(10))
        assert sorted(await _collect(qb, 10)) == sorted(b"b%d" % i for i in range(10))
        # no member left in B: B's messages cross to A's member
        await qb.unsubscribe()
        await nc_b.flush()
        sc.wait_interest(a_pub, "B", subject, present=False)
        for i in range(5):
            await pub_b.publish(subject, b"c%d" % i)
        await pub_b.flush()
        assert sorted(await _collect(qa, 5)) == sorted(b"c%d" % i for i in range(5))
        with pytest.raises(nats.errors.TimeoutError):
            await qa.next_msg(timeout=0.3)  # each message once, to one member
    finally:
        for nc in conns:
            await nc.close()


@pytest.mark.parametrize(("req_side", "svc_side"), [("A", "B"), ("B", "A")])
async def test_request_reply_across(sc: Supercluster, req_side: str, svc_side: str) -> None:
    requester, responder = sc[req_side][0], sc[svc_side][-1]
    subject = f"svc.{req_side}{svc_side}"
    nc_svc = await nats.connect(responder.url)
    nc_req = await nats.connect(requester.url)
    try:

        async def answer(msg: nats.aio.msg.Msg) -> None:
            await msg.respond(b"re:" + msg.data)

        await nc_svc.subscribe(subject, cb=answer)
        await nc_svc.flush()
        sc.wait_interest(requester, svc_side, subject)
        replies = [await nc_req.request(subject, b"q%d" % i, timeout=5) for i in range(3)]
        assert [r.data for r in replies] == [b"re:q0", b"re:q1", b"re:q2"]
    finally:
        await nc_svc.close()
        await nc_req.close()


async def test_interest_only_sends_nothing_without_interest(sc: Supercluster) -> None:
    """Every account is in interest-only mode once the gateways are up (nats-server 2.9+): a subject
    nobody in B wants never crosses; a wanted one does, once each."""
    publisher, subscriber = sc["A"][0], sc["B"][-1]
    assert sc.account_mode(publisher, "B") == "Interest-Only"
    nc_sub = await nats.connect(subscriber.url)
    nc_pub = await nats.connect(publisher.url)
    try:
        sub = await nc_sub.subscribe("wanted")
        await nc_sub.flush()
        sc.wait_interest(publisher, "B", "wanted")
        before = sc.out_msgs(publisher, "B")
        received_before = subscriber.monitor("/varz")["in_msgs"]
        for _ in range(20):
            await nc_pub.publish("nobody.wants.this", b"x")
        await nc_pub.publish("wanted", b"y")
        await nc_pub.flush()
        assert await _collect(sub, 1) == [b"y"]
        assert sc.out_msgs(publisher, "B") - before == 1
        # the server's totals count what came over its gateway (nats-server counts every connection's)
        assert subscriber.monitor("/varz")["in_msgs"] - received_before == 1
    finally:
        await nc_sub.close()
        await nc_pub.close()


async def test_cluster_lost_and_back(sc: Supercluster) -> None:
    """B goes away: A's clients go on; B comes back: the gateways reconnect and messages cross again."""
    a, b = sc["A"][0], sc["B"][0]
    nc_a = await nats.connect(a.url)
    try:
        local = await nc_a.subscribe("local.only")
        sc.stop(b)
        await nc_a.publish("local.only", b"during")
        await nc_a.publish("across.later", b"lost")
        await nc_a.flush()
        assert await _collect(local, 1) == [b"during"]
        sc.start(b)
        sc.wait_connected()
        nc_b = await nats.connect(b.url)
        try:
            sub = await nc_b.subscribe("across.later")
            await nc_b.flush()
            sc.wait_interest(a, "B", "across.later")
            await nc_a.publish("across.later", b"back")
            await nc_a.flush()
            assert await _collect(sub, 1) == [b"back"]
        finally:
            await nc_b.close()
    finally:
        await nc_a.close()
    await asyncio.sleep(0)


CONNECTION_KEYS = {
    "cid", "kind", "ip", "port", "start", "last_activity", "rtt", "uptime", "idle", "pending_bytes",
    "in_msgs", "out_msgs", "in_bytes", "out_bytes", "subscriptions", "name",
}  # fmt: skip


def test_monitoring_fields(sc: Supercluster) -> None:
    """/gatewayz and the /varz `gateway` block: nats-server's fields, on every server of the mix."""
    for name, members in sc.clusters.items():
        other = "B" if name == "A" else "A"
        for member in members:
            gatewayz = member.gatewayz("?accs=1")
            assert set(gatewayz) == {
                "server_id", "now", "name", "host", "port", "outbound_gateways", "inbound_gateways",
            }  # fmt: skip
            assert (gatewayz["name"], gatewayz["port"]) == (name, member.gateway_port)
            outbound = gatewayz["outbound_gateways"][other]
            assert set(outbound) == {"configured", "connection", "accounts"}
            assert outbound["configured"] is True
            connection = outbound["connection"]
            assert set(connection) == CONNECTION_KEYS
            assert connection["kind"] == "Gateway"
            accounts = {acc["name"]: acc for acc in outbound["accounts"]}
            assert accounts["$G"]["interest_mode"] == "Interest-Only"
            assert accounts["$G"]["interest_only_threshold"] == 1000
            for entries in gatewayz["inbound_gateways"].values():
                for entry in entries:
                    assert entry["configured"] is False
                    assert set(entry["connection"]) == CONNECTION_KEYS
            with urllib.request.urlopen(f"http://127.0.0.1:{member.http_port}/varz", timeout=5) as resp:
                varz = json.load(resp)["gateway"]
            assert set(varz) == {"name", "host", "port", "auth_timeout", "tls_timeout", "gateways"}
            assert (varz["name"], varz["port"]) == (name, member.gateway_port)
            assert [g["name"] for g in varz["gateways"]] == [other]


async def test_no_responders_across(sc: Supercluster) -> None:
    """A request nobody in the supercluster answers gets its no-responders status, as without gateways."""
    nc = await nats.connect(sc["A"][0].url)
    try:
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request("nobody.answers", b"?", timeout=5)
    finally:
        await nc.close()
