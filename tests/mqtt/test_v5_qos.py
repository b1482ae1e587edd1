"""MQTT 5.0 clients with QoS 1 and 2 subscriptions (pynatsd alone: nats-server 2.15.1 refuses 5.0): granted
in the SUBACK, deliveries with their properties, the client's Receive Maximum, acknowledgements with error
reason codes, QoS 2 exactly once, and the consumers kept or deleted with the Session Expiry Interval."""

from __future__ import annotations

import asyncio
import json
import struct

import nats
import paho.mqtt.client as paho
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.subscribeoptions import SubscribeOptions

from pynatsd.base.hashing import base62_sha256
from pynatsd.mqtt import properties as props
from pynatsd.mqtt.packets import Reader
from tests.mqtt.conftest import MQTTServer, packet
from tests.mqtt.test_qos_subscriptions import _consumers, published_once
from tests.mqtt.test_v5 import Paho5, Raw5, _props, raw5

pytestmark = [pytest.mark.timeout(60), pytest.mark.parametrize("mqtt_server", ["pynatsd"], indirect=True)]


def qos_message(client: Raw5) -> tuple[int, bool, bytes, int, props.Properties, bytes]:
    """The next PUBLISH: (QoS, DUP, topic, packet identifier, properties, payload)."""
    reply = client.read()
    assert reply is not None and reply[0] & 0xF0 == 0x30, reply
    first, body = reply
    qos = first >> 1 & 0x03
    r = Reader(body)
    topic = r.data("topic")
    pid = r.uint16("packet identifier") if qos else 0
    p = props.parse(r, 0x30)
    return qos, bool(first & 0x08), topic, pid, p, body[r.pos :]


def ack(kind: int, pid: int, reason: int | None = None) -> bytes:
    return packet(kind, struct.pack(">H", pid) + (bytes((reason,)) if reason is not None else b""))


async def _ack_pending(server: MQTTServer, client_id: str) -> dict[str, int]:
    """Messages delivered and not acked, by the session's consumer (its stream and filter)."""
    nc = await nats.connect(server.nats_url)
    found = {}
    prefix = base62_sha256(client_id, 8)
    for stream in ("$MQTT_msgs", "$MQTT_out"):
        answer = await nc.request(f"$JS.API.CONSUMER.LIST.{stream}", b"{}", timeout=5)
        for info in json.loads(answer.data)["consumers"] or []:
            if prefix in info["config"]["durable_name"]:
                key = f"{stream} {info['config']['filter_subject']}"
                found[key] = info["num_ack_pending"] + info["num_pending"]
    await nc.close()
    return found


async def _until_delivered(server: MQTTServer, client_id: str, key: str, count: int) -> None:
    """Until JetStream has delivered `count` messages of a consumer that are not acked."""
    async with asyncio.timeout(10):
        while (await _ack_pending(server, client_id)).get(key) != count:
            await asyncio.sleep(0.02)


def ack_pending(server: MQTTServer, client_id: str) -> dict[str, int]:
    return asyncio.run(_ack_pending(server, client_id))


def test_qos_deliveries_carry_properties(mqtt_server: MQTTServer) -> None:
    subscriber = raw5(mqtt_server, b"v5q-sub")
    sub_id = props.encode([(props.SUBSCRIPTION_ID, 9)])
    assert subscriber.subscribe([(b"v5q/one", 1), (b"v5q/two", 2)], sub_id) == b"\x01\x02"
    publisher = raw5(mqtt_server, b"v5q-pub")
    sent = [
        (props.CONTENT_TYPE, "text/plain"),
        (props.CORRELATION_DATA, b"\x00c"),
        (props.MESSAGE_EXPIRY, 60),
        (props.RESPONSE_TOPIC, "v5q/reply"),
    ]
    user = [("k", "v")]
    for pid, topic in ((1, b"v5q/one"), (2, b"v5q/two")):
        publisher.publish(topic, b"hello", props.encode(sent, user), qos=1, pid=pid)
        assert publisher.read() == (0x40, struct.pack(">H", pid))
    for topic, qos in ((b"v5q/one", 1), (b"v5q/two", 1)):  # (published at QoS 1: the lower)
        got_qos, dup, got_topic, pid, p, payload = qos_message(subscriber)
        assert (got_qos, dup, got_topic, payload) == (qos, False, topic, b"hello")
        assert p.text(props.CONTENT_TYPE) == "text/plain"
        assert p.binary(props.CORRELATION_DATA) == b"\x00c"
        assert p.text(props.RESPONSE_TOPIC) == "v5q/reply"
        assert 0 < p.number(props.MESSAGE_EXPIRY) <= 60
        assert p.user == user and p.subscription_ids == [9]
        subscriber.send(ack(0x40, pid))
    assert subscriber.ping() == []
    assert set(ack_pending(mqtt_server, "v5q-sub").values()) == {0}


def test_receive_maximum_and_error_reason_codes(mqtt_server: MQTTServer) -> None:
    subscriber = raw5(mqtt_server, b"v5rm-sub", props.encode([(props.RECEIVE_MAXIMUM, 2)]))
    assert subscriber.subscribe([(b"v5rm/x", 1), (b"v5rm/y", 2)]) == b"\x01\x02"
    for n in range(4):
        published_once(mqtt_server, b"v5rm/x", b"m%d" % n)
    first = [qos_message(subscriber) for _ in range(2)]
    assert [(m[0], m[5]) for m in first] == [(1, b"m0"), (1, b"m1")]
    # JetStream delivered all four; two wait for the Receive Maximum's places
    asyncio.run(_until_delivered(mqtt_server, "v5rm-sub", "$MQTT_msgs $MQTT.msgs.v5rm.x", 4))
    assert subscriber.ping() == []
    subscriber.send(ack(0x40, first[0][3]))
    third = qos_message(subscriber)
    assert (third[1], third[5]) == (False, b"m2")
    subscriber.send(ack(0x40, first[1][3], 0x80))  # an error reason code: acked, not sent again
    fourth = qos_message(subscriber)
    assert fourth[5] == b"m3"
    assert subscriber.ping() == []
    subscriber.send(ack(0x40, third[3]) + ack(0x40, fourth[3]))
    assert subscriber.ping() == []
    assert ack_pending(mqtt_server, "v5rm-sub")["$MQTT_msgs $MQTT.msgs.v5rm.x"] == 0
    # a PUBREC with an error reason code ends the exchange: acked, no PUBREL
    published_once(mqtt_server, b"v5rm/y", b"q2", qos=2)
    qos, _dup, _topic, pid, _p, payload = qos_message(subscriber)
    assert (qos, payload) == (2, b"q2")
    subscriber.send(ack(0x50, pid, 0x83))
    assert subscriber.ping() == []
    assert set(ack_pending(mqtt_server, "v5rm-sub").values()) == {0}


class QoS2Paho(Paho5):
    def qos2(self, topic: str) -> list[int]:
        self.client.subscribe(topic, options=SubscribeOptions(qos=2))
        return self.subacks.get(timeout=10)

    def publish2(self, topic: str, payload: bytes) -> None:
        user = _props(PacketTypes.PUBLISH, UserProperty=[("n", payload.decode())])
        self.client.publish(topic, payload, qos=2, properties=user).wait_for_publish(10)


def test_qos2_exactly_once_through_session_expiry(mqtt_server: MQTTServer) -> None:
    keep = _props(PacketTypes.CONNECT, SessionExpiryInterval=60)
    subscriber = QoS2Paho(mqtt_server, "v5x-sub", keep)
    assert subscriber.qos2("v5x/t") == [2]
    subscriber.stop()
    publisher = QoS2Paho(mqtt_server, "v5x-pub")
    for n in range(3):
        publisher.publish2("v5x/t", b"%d" % n)
    subscriber = QoS2Paho(mqtt_server, "v5x-sub", keep, clean=False)
    assert subscriber.session_present  # its consumer kept: what came meanwhile, once each
    got: list[paho.MQTTMessage] = [subscriber.get() for _ in range(3)]
    assert [(m.payload, m.qos, m.properties.UserProperty) for m in got] == [
        (b"%d" % n, 2, [("n", str(n))]) for n in range(3)
    ]
    publisher.publish2("v5x/t", b"3")
    assert subscriber.get().payload == b"3"
    assert subscriber.nothing_more()
    publisher.stop()
    subscriber.stop()


def test_session_expiry_zero_deletes_the_consumers(mqtt_server: MQTTServer) -> None:
    expiry = props.encode([(props.SESSION_EXPIRY, 60)])
    for client_id, properties, kept in ((b"v5e-keep", expiry, True), (b"v5e-gone", b"\x00", False)):
        client = raw5(mqtt_server, client_id, properties)
        assert client.subscribe([(b"v5e/one", 1), (b"v5e/two", 2)]) == b"\x01\x02"
        assert len(asyncio.run(_consumers(mqtt_server, client_id.decode()))) == 3  # (and PUBREL's)
        client.send(b"\xe0\x00")
        assert client.closed()
        assert len(asyncio.run(_consumers(mqtt_server, client_id.decode()))) == (3 if kept else 0)
    # a clean start deletes the kept session's
    client = raw5(mqtt_server, b"v5e-keep")
    assert len(asyncio.run(_consumers(mqtt_server, "v5e-keep"))) == 0
    client.send(b"\xe0\x00")
    assert client.closed()


def test_no_local_for_qos_deliveries(mqtt_server: MQTTServer) -> None:
    """A No Local QoS 1/2 filter gets no message its client published [MQTT-3.8.3-3], though it comes from
    the filter's consumer (acked there, not left pending); another client's it gets."""
    client = raw5(mqtt_server, b"v5nl-self")
    assert client.subscribe([(b"v5nl/one", 0x04 | 1), (b"v5nl/two", 0x04 | 2)]) == b"\x01\x02"
    client.publish(b"v5nl/one", b"mine", qos=1, pid=1)
    assert client.read() == (0x40, b"\x00\x01")
    client.publish(b"v5nl/two", b"mine", qos=2, pid=2)
    assert client.read() == (0x50, b"\x00\x02")
    client.send(ack(0x62, 2))
    assert client.read() == (0x70, b"\x00\x02")
    published_once(mqtt_server, b"v5nl/one", b"theirs")
    qos, _dup, topic, pid, _p, payload = qos_message(client)
    assert (qos, topic, payload) == (1, b"v5nl/one", b"theirs")
    client.send(ack(0x40, pid))
    assert client.ping() == []
    assert set(ack_pending(mqtt_server, "v5nl-self").values()) == {0}


def test_retained_qos_messages_wait_for_the_receive_maximum(mqtt_server: MQTTServer) -> None:
    """Retained QoS 1 messages sent at SUBSCRIBE count in the client's Receive Maximum [MQTT-4.9.0-2]:
    one at a time for a maximum of 1, the next as the one before is acknowledged."""
    publisher = raw5(mqtt_server, b"v5rr-pub")
    for n in range(3):
        topic = b"v5rr/%d" % n
        publisher.send(
            packet(
                0x33, struct.pack(">H", len(topic)) + topic + struct.pack(">H", n + 1) + b"\x00kept %d" % n
            )
        )
        assert publisher.read() == (0x40, struct.pack(">H", n + 1))
    subscriber = raw5(mqtt_server, b"v5rr-sub", props.encode([(props.RECEIVE_MAXIMUM, 1)]))
    assert subscriber.subscribe([(b"v5rr/+", 1)]) == b"\x01"
    got = []
    for _ in range(3):
        qos, _dup, _topic, pid, _p, payload = qos_message(subscriber)
        assert qos == 1
        assert subscriber.ping() == []  # nothing more until it is acknowledged
        got.append(payload)
        subscriber.send(ack(0x40, pid))
    assert sorted(got) == [b"kept 0", b"kept 1", b"kept 2"]
    assert subscriber.ping() == []


def test_an_unacked_retained_message_holds_no_place_after_a_reconnect(mqtt_server: MQTTServer) -> None:
    """The packet identifier of a retained QoS 1 message left unacknowledged is not kept with the session
    (nothing sends it again): after a reconnect the Receive Maximum's place is free for the next."""
    keep = props.encode([(props.SESSION_EXPIRY, 60), (props.RECEIVE_MAXIMUM, 1)])
    publisher = raw5(mqtt_server, b"v5ru-pub")
    publisher.send(packet(0x33, b"\x00\x06v5ru/k\x00\x01\x00kept"))
    assert publisher.read() == (0x40, b"\x00\x01")
    subscriber = raw5(mqtt_server, b"v5ru-sub", keep)
    assert subscriber.subscribe([(b"v5ru/+", 1)]) == b"\x01"
    assert qos_message(subscriber)[5] == b"kept"
    subscriber.close()  # dropped without its PUBACK
    subscriber = Raw5(mqtt_server.mqtt_port)
    assert subscriber.connect5(client_id=b"v5ru-sub", properties=keep, clean=False)[0] == 0
    publisher.publish(b"v5ru/n", b"new", qos=1, pid=2)
    assert publisher.read() == (0x40, b"\x00\x02")
    qos, _dup, topic, pid, _p, payload = qos_message(subscriber)
    assert (qos, topic, payload) == (1, b"v5ru/n", b"new")
    subscriber.send(ack(0x40, pid))
    assert subscriber.ping() == []
