"""QoS 1 and 2 subscriptions against pynatsd and nats-server with the same `mqtt {}` block (a short ack_wait
and a small max_ack_pending, so that redeliveries and the in-flight bound show quickly): the QoS each
message is delivered with, redelivery with DUP to a persistent session after a dropped connection, QoS 2
exactly once through a reconnect, a session's subscription and its pending message through a kill -9,
a subscriber that never acks holding back nobody else, and the JetStream consumers (as
`$JS.API.CONSUMER.LIST` shows them) made and removed as nats-server makes and removes them."""

from __future__ import annotations

import asyncio
import json
import re
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import nats
import pytest

from pynatsd.base.hashing import base62_sha256
from tests.fairness.test_flood_latency import _handshake
from tests.mqtt.conftest import (
    CONFIG,
    KINDS,
    MQTTServer,
    RawClient,
    mqtt_life,
    packet,
    subscribe_packet,
    unsubscribe_packet,
)
from tests.mqtt.test_differential import Paho, _nats_publish, _session_record, _until_pong

QOS_CONFIG = CONFIG.replace(
    "no_auth_user: alice }", 'no_auth_user: alice, ack_wait: "1s", max_ack_pending: 5 }'
)
MAX_ACK_PENDING = 5


@pytest.fixture(scope="module", params=KINDS)
def qos_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MQTTServer]:
    with mqtt_life(request.param, tmp_path_factory.mktemp(request.param), QOS_CONFIG) as started:
        yield started


def publish_parts(first: int, body: bytes) -> tuple[int, bool, bytes, int, bytes]:
    """(QoS, DUP, topic, packet id, payload) of a PUBLISH a raw client read."""
    assert first & 0xF0 == 0x30, (first, body)
    qos, dup = first >> 1 & 0x03, bool(first & 0x08)
    size = struct.unpack(">H", body[:2])[0]
    topic, rest = body[2 : 2 + size], body[2 + size :]
    pid, payload = (struct.unpack(">H", rest[:2])[0], rest[2:]) if qos else (0, rest)
    return qos, dup, topic, pid, payload


def qos_publish(topic: bytes, pid: int, payload: bytes, qos: int = 1) -> bytes:
    return packet(0x30 | qos << 1, struct.pack(">H", len(topic)) + topic + struct.pack(">H", pid) + payload)


def ack(kind: int, pid: int) -> bytes:
    return packet(kind, struct.pack(">H", pid))


def persistent(server: MQTTServer, client_id: bytes) -> RawClient:
    client = RawClient(server.mqtt_port)
    assert client.connect(client_id=client_id, clean=False) == 0
    return client


def subscribed_persistent(server: MQTTServer, client_id: bytes, topic_filter: bytes, qos: int) -> RawClient:
    client = persistent(server, client_id)
    client.send(subscribe_packet(1, [(topic_filter, qos)]))
    assert client.read() == (0x90, b"\x00\x01" + bytes((qos,)))
    return client


def next_publish(client: RawClient) -> tuple[int, bool, bytes, int, bytes]:
    reply = client.read()
    assert reply is not None
    return publish_parts(*reply)


def forget_session(server: MQTTServer, client_id: bytes) -> None:
    """Connect clean and leave: the stored session and its consumers go."""
    client = RawClient(server.mqtt_port)
    assert client.connect(client_id=client_id) == 0
    client.send(packet(0xE0, b""))
    assert client.closed()


def published_once(server: MQTTServer, topic: bytes, payload: bytes, qos: int = 1) -> None:
    """A raw publisher's QoS 1 (PUBACK) or QoS 2 (PUBREC, PUBREL, PUBCOMP) PUBLISH, done."""
    publisher = RawClient(server.mqtt_port)
    assert publisher.connect(client_id=b"qos-publisher") == 0
    publisher.send(qos_publish(topic, 9, payload, qos))
    if qos == 1:
        assert publisher.read() == (0x40, b"\x00\x09")
    else:
        assert publisher.read() == (0x50, b"\x00\x09")
        publisher.send(ack(0x62, 9))
        assert publisher.read() == (0x70, b"\x00\x09")
    publisher.send(packet(0xE0, b""))
    assert publisher.closed()


def test_delivered_qos_is_the_lower_of_publish_and_subscription(qos_server: MQTTServer) -> None:
    subscriber = Paho(qos_server, "qd-sub")
    publisher = Paho(qos_server, "qd-pub")
    try:
        assert subscriber.subscribe(("qd/zero", 0), ("qd/one", 1), ("qd/two", 2)) == [0, 1, 2]
        for topic in ("qd/zero", "qd/one", "qd/two"):
            for qos in (0, 1, 2):
                publisher.publish(topic, b"q%d" % qos, qos)
        asyncio.run(_nats_publish(qos_server, [("qd.one", b"nats"), ("qd.two", b"nats")]))
        assert sorted(subscriber.wait_deliveries(11)) == [
            ("qd/one", b"nats", 0, False),  # a NATS message to a QoS 1/2 subscriber: QoS 0
            ("qd/one", b"q0", 0, False),
            ("qd/one", b"q1", 1, False),
            ("qd/one", b"q2", 1, False),
            ("qd/two", b"nats", 0, False),
            ("qd/two", b"q0", 0, False),
            ("qd/two", b"q1", 1, False),
            ("qd/two", b"q2", 2, False),
            ("qd/zero", b"q0", 0, False),
            ("qd/zero", b"q1", 0, False),
            ("qd/zero", b"q2", 0, False),
        ]
        publisher.publish("qd/kept", b"retained q2", 2, retain=True)
        publisher.publish("qd/kept1", b"retained q1", 1, retain=True)
        late = Paho(qos_server, "qd-late")
        try:  # retained: the lower of its QoS and the subscription's, with RETAIN
            assert late.subscribe(("qd/kept", 1), ("qd/kept1", 2)) == [1, 2]
            assert sorted(late.wait_deliveries(2)) == [
                ("qd/kept", b"retained q2", 1, True),
                ("qd/kept1", b"retained q1", 1, True),
            ]
        finally:
            late.stop()
    finally:
        subscriber.stop()
        publisher.stop()


def test_qos1_redelivered_with_dup_after_a_dropped_connection(qos_server: MQTTServer) -> None:
    subscriber = subscribed_persistent(qos_server, b"qr-sub", b"qr/x", 1)
    published_once(qos_server, b"qr/x", b"again")
    qos, dup, topic, _pid, payload = next_publish(subscriber)
    assert (qos, dup, topic, payload) == (1, False, b"qr/x", b"again")
    subscriber.close()  # dropped without a PUBACK
    subscriber = persistent(qos_server, b"qr-sub")
    assert subscriber.session_present == 1
    qos, dup, topic, pid, payload = next_publish(subscriber)
    assert (qos, dup, topic, payload) == (1, True, b"qr/x", b"again")
    subscriber.send(ack(0x40, pid))
    published_once(qos_server, b"qr/x", b"next")
    qos, dup, topic, pid, payload = next_publish(subscriber)
    assert (qos, dup, topic, payload) == (1, False, b"qr/x", b"next")  # `again` acked: not sent again
    subscriber.send(ack(0x40, pid))
    subscriber.close()
    forget_session(qos_server, b"qr-sub")


def test_qos1_redelivery_after_a_reconnect_keeps_its_packet_id(qos_server: MQTTServer) -> None:
    """The packet identifiers in flight belong to the session: the one redelivered after a reconnect goes
    out under the identifier it had (the second one, its first having been acked)."""
    subscriber = subscribed_persistent(qos_server, b"qp-sub", b"qp/x", 1)
    published_once(qos_server, b"qp/x", b"acked")
    published_once(qos_server, b"qp/x", b"pending")
    first, second = next_publish(subscriber), next_publish(subscriber)
    assert (first[4], second[4]) == (b"acked", b"pending")
    assert first[3] != second[3]
    subscriber.send(ack(0x40, first[3]))
    assert _until_pong(subscriber) == []
    subscriber.close()  # dropped without acking the second
    subscriber = persistent(qos_server, b"qp-sub")
    qos, dup, topic, pid, payload = next_publish(subscriber)
    assert (qos, dup, topic, pid, payload) == (1, True, b"qp/x", second[3], b"pending")
    subscriber.send(ack(0x40, pid))
    assert _until_pong(subscriber) == []
    subscriber.close()
    forget_session(qos_server, b"qp-sub")


def test_qos2_exactly_once_through_a_reconnect(qos_server: MQTTServer) -> None:
    subscriber = subscribed_persistent(qos_server, b"q2-sub", b"q2e/x", 2)
    published_once(qos_server, b"q2e/x", b"once", qos=2)
    qos, dup, topic, pid, payload = next_publish(subscriber)
    assert (qos, dup, topic, payload) == (2, False, b"q2e/x", b"once")
    subscriber.send(ack(0x50, pid))  # PUBREC
    assert subscriber.read() == (0x62, struct.pack(">H", pid))  # PUBREL
    subscriber.close()  # dropped before its PUBCOMP
    subscriber = persistent(qos_server, b"q2-sub")
    assert subscriber.read() == (0x62, struct.pack(">H", pid))  # the PUBREL again, not the message
    subscriber.send(ack(0x70, pid))  # PUBCOMP
    assert _until_pong(subscriber) == []
    published_once(qos_server, b"q2e/x", b"second", qos=2)
    qos, dup, topic, pid, payload = next_publish(subscriber)
    assert (qos, dup, topic, payload) == (2, False, b"q2e/x", b"second")
    subscriber.send(ack(0x50, pid))
    assert subscriber.read() == (0x62, struct.pack(">H", pid))
    subscriber.send(ack(0x70, pid))
    assert _until_pong(subscriber) == []
    subscriber.close()
    forget_session(qos_server, b"q2-sub")


def test_a_subscriber_that_never_acks_holds_back_nobody(qos_server: MQTTServer) -> None:
    stalled = subscribed_persistent(qos_server, b"qn-stalled", b"qn/x", 1)
    other = Paho(qos_server, "qn-other")
    publisher = Paho(qos_server, "qn-pub")
    try:
        assert other.subscribe(("qn/x", 1)) == [1]
        count = 3 * MAX_ACK_PENDING
        for n in range(count):
            publisher.publish("qn/x", b"%d" % n, 1)
        assert [m[1] for m in other.wait_deliveries(count)] == [b"%d" % n for n in range(count)]
        alice = b'{"verbose":false,"user":"alice","pass":"pw"}'
        took = sorted(_handshake(qos_server.server.port, alice) for _ in range(5))
    finally:
        other.stop()
        publisher.stop()
    first_sent: list[bytes] = []
    stalled.sock.settimeout(0.5)
    deadline = time.monotonic() + 1.5  # (redeliveries every ack_wait: read a while, never ack)
    try:
        while time.monotonic() < deadline and (reply := stalled.read()) is not None:
            _qos, dup, _topic, _pid, payload = publish_parts(*reply)
            if not dup:
                first_sent.append(payload)
    except TimeoutError:
        pass
    assert first_sent == [b"%d" % n for n in range(MAX_ACK_PENDING)]  # max_ack_pending in flight
    assert (
        took[len(took) // 2] <= 0.1
    )  # a fresh NATS client's CONNECT -> PONG (the median), as tests/fairness
    stalled.close()
    forget_session(qos_server, b"qn-stalled")


def masked(cfg: dict[str, Any], *fields: str) -> dict[str, Any]:
    """`fields` of a consumer config, the NUIDs in its durable name and deliver subject masked."""
    out = {k: cfg[k] for k in fields}
    out["durable_name"] = re.sub(r"_[0-9A-Za-z]{22}$", "_<nuid>", cfg["durable_name"])
    out["deliver_subject"] = re.sub(r"\.[0-9A-Za-z]{22}$", ".<nuid>", cfg["deliver_subject"])
    return out


async def _consumers(server: MQTTServer, client_id: str) -> list[dict[str, Any]]:
    """The session's consumers on `$MQTT_msgs` and `$MQTT_out`, as `$JS.API.CONSUMER.LIST` shows them (the
    NUIDs in their names masked)."""
    nc = await nats.connect(server.nats_url)
    found = []
    prefix = base62_sha256(client_id, 8)
    for stream in ("$MQTT_msgs", "$MQTT_out"):
        answer = await nc.request(f"$JS.API.CONSUMER.LIST.{stream}", b"{}", timeout=5)
        for info in json.loads(answer.data)["consumers"] or []:
            cfg = info["config"]
            if prefix not in cfg["durable_name"]:
                continue
            found.append(
                {
                    "stream": stream,
                    **masked(cfg, "durable_name", "deliver_subject"),
                    "filter_subject": cfg.get("filter_subject"),
                    **{
                        k: cfg.get(k) for k in ("ack_policy", "deliver_policy", "ack_wait", "max_ack_pending")
                    },
                }
            )
    await nc.close()
    return sorted(found, key=lambda c: (c["stream"], c["filter_subject"]))


def test_consumers_made_and_removed_as_nats_server_does(qos_server: MQTTServer) -> None:
    client = persistent(qos_server, b"qc-sub")
    client.send(subscribe_packet(1, [(b"qc/a", 1), (b"qc/b/#", 2), (b"qc/zero", 0)]))
    assert client.read() == (0x90, b"\x00\x01\x01\x02\x00")
    h = base62_sha256("qc-sub", 8)
    limits = {
        "ack_policy": "explicit",
        "deliver_policy": "new",
        "ack_wait": 1_000_000_000,
        "max_ack_pending": 5,
    }

    def sub_consumer(subject: str) -> dict[str, Any]:
        return {
            "stream": "$MQTT_msgs",
            "durable_name": f"{h}_<nuid>",
            "deliver_subject": "$MQTT.sub.<nuid>",
            "filter_subject": f"$MQTT.msgs.{subject}",
            **limits,
        }

    pubrel = {
        "stream": "$MQTT_out",
        "durable_name": f"$MQTT_PUBREL_{h}",
        "deliver_subject": f"$MQTT.deliver.pubrel.{h}",
        "filter_subject": f"$MQTT.out.pubrel.{h}",
        **limits,
    }
    everything = [sub_consumer("qc.a"), sub_consumer("qc.b"), sub_consumer("qc.b.>"), pubrel]
    assert asyncio.run(_consumers(qos_server, "qc-sub")) == everything
    client.send(unsubscribe_packet(2, [b"qc/a"]))
    assert client.read() == (0xB0, b"\x00\x02")
    client.send(subscribe_packet(3, [(b"qc/b/#", 0)]))  # now QoS 0: its consumers go
    assert client.read() == (0x90, b"\x00\x03\x00")
    assert asyncio.run(_consumers(qos_server, "qc-sub")) == [pubrel]
    client.send(subscribe_packet(4, [(b"qc/c", 1)]))
    assert client.read() == (0x90, b"\x00\x04\x01")
    client.send(packet(0xE0, b""))
    assert client.closed()
    assert asyncio.run(_consumers(qos_server, "qc-sub")) == [sub_consumer("qc.c"), pubrel]  # (persistent)
    record = asyncio.run(_session_record(qos_server, "qc-sub"))
    assert record is not None
    cons = cast(dict[str, dict[str, Any]], record.pop("cons"))
    stored = [masked(c, *c) for c in [*cons.values(), cast(dict[str, Any], record.pop("pubrel"))]]
    go_zeros = {"num_replicas": 0, "replay_policy": "instant"}  # the session record: as Go's JSON writes it
    expected = [{k: v for k, v in c.items() if k != "stream"} for c in (sub_consumer("qc.c"), pubrel)]
    assert stored == [{**c, **go_zeros} for c in expected]
    assert (list(cons), record) == (
        ["qc.c"],
        {"id": "qc-sub", "subs": {"qc.b.>": 0, "qc.c": 1, "qc.zero": 0}},
    )
    forget_session(qos_server, b"qc-sub")  # a clean session clears the stored one, consumers and all
    assert asyncio.run(_consumers(qos_server, "qc-sub")) == []


@pytest.mark.parametrize("kind", KINDS)
def test_qos1_session_and_pending_message_survive_kill_9(kind: str, tmp_path: Path) -> None:
    with mqtt_life(kind, tmp_path, QOS_CONFIG, kill=True) as started:
        client = persistent(started, b"qk-sub")
        client.send(subscribe_packet(1, [(b"qk/x", 1)]))
        assert client.read() == (0x90, b"\x00\x01\x01")
        client.send(packet(0xE0, b""))
        assert client.closed()
        published_once(started, b"qk/x", b"pending")  # stored for the absent session
        before = asyncio.run(_consumers(started, "qk-sub"))
    with mqtt_life(kind, tmp_path, QOS_CONFIG, restart_of=started) as restarted:
        assert asyncio.run(_consumers(restarted, "qk-sub")) == before
        client = persistent(restarted, b"qk-sub")
        assert client.session_present == 1
        qos, _dup, topic, pid, payload = next_publish(client)
        assert (qos, topic, payload) == (1, b"qk/x", b"pending")
        client.send(ack(0x40, pid))
        assert _until_pong(client) == []
        client.close()
