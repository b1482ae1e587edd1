"""MQTT 5.0 (protocol level 5; nats-server 2.15.1 refuses it, so these run against pynatsd alone and check
the MQTT 5.0 specification): byte-exact CONNACK, DISCONNECT and SUBACK reason codes and properties from a
raw client, and paho-mqtt's MQTTv5 client, nats-py and mosquitto's `-V mqttv5` clients for the rest."""

from __future__ import annotations

import asyncio
import json
import queue
import struct
import subprocess
import threading
from pathlib import Path
from typing import Any

import nats
import paho.mqtt.client as paho
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties
from paho.mqtt.subscribeoptions import SubscribeOptions

from pynatsd.mqtt import properties as props
from pynatsd.mqtt.packets import Reader, split_packet
from pynatsd.mqtt.store import session_subject
from tests.mqtt.conftest import MQTTServer, RawClient, connect_packet, packet

# the module's one server: conftest's, pynatsd's only
pytestmark = [pytest.mark.timeout(60), pytest.mark.parametrize("mqtt_server", ["pynatsd"], indirect=True)]


@pytest.fixture
def server(mqtt_server: MQTTServer) -> MQTTServer:
    return mqtt_server


def _string(value: bytes) -> bytes:
    return struct.pack(">H", len(value)) + value


def connect5(properties: bytes = b"\x00", **kwargs: Any) -> bytes:
    """conftest's CONNECT at level 5, with `properties` (after the keep alive) and its will's (none)."""
    raw = connect_packet(level=5, **kwargs)
    split = split_packet(raw, 0, 0)
    assert split is not None
    body = raw[split[1] :]
    after_id = 12 + len(kwargs.get("client_id", b""))
    will_properties = b"\x00" if kwargs.get("will") else b""
    return packet(0x10, body[:10] + properties + body[10:after_id] + will_properties + body[after_id:])


class Raw5(RawClient):
    """A raw MQTT 5.0 client."""

    def connect5(self, **kwargs: Any) -> tuple[int, props.Properties]:
        """(CONNACK reason code, its properties)."""
        self.send(connect5(**kwargs))
        reply = self.read()
        assert reply is not None and reply[0] == 0x20, reply
        self.session_present = reply[1][0]
        r = Reader(reply[1])
        r.pos = 2
        return reply[1][1], props.parse(r, 0x20)

    def reason(self) -> tuple[int, int | None]:
        """(packet type, reason code) of the next packet (None: it has none)."""
        reply = self.read()
        assert reply is not None
        first, body = reply
        kind = first & 0xF0
        if kind in (0xE0, 0x20):
            return kind, body[0 if kind == 0xE0 else 1] if body else 0
        return kind, body[2] if len(body) > 2 else None

    def publish(
        self, topic: bytes, payload: bytes, properties: bytes = b"\x00", qos: int = 0, pid: int = 1
    ) -> None:
        ident = struct.pack(">H", pid) if qos else b""
        self.send(packet(0x30 | qos << 1, _string(topic) + ident + properties + payload))

    def subscribe(self, filters: list[tuple[bytes, int]], properties: bytes = b"\x00", pid: int = 1) -> bytes:
        """SUBSCRIBE (filter, options byte) each; the SUBACK's reason codes."""
        body = struct.pack(">H", pid) + properties + b"".join(_string(f) + bytes((o,)) for f, o in filters)
        self.send(packet(0x82, body))
        reply = self.read()
        assert reply is not None and reply[0] == 0x90, reply
        r = Reader(reply[1])
        r.pos = 2
        props.parse(r, 0x90)
        return reply[1][r.pos :]

    def message(self) -> tuple[int, bytes, props.Properties, bytes]:
        """The next PUBLISH: (first byte, topic, properties, payload)."""
        reply = self.read()
        assert reply is not None and reply[0] & 0xF0 == 0x30, reply
        r = Reader(reply[1])
        topic = r.data("topic")
        p = props.parse(r, 0x30)
        return reply[0], topic, p, reply[1][r.pos :]

    def ping(self) -> list[tuple[int, bytes]]:
        """Everything before the PINGRESP."""
        self.send(b"\xc0\x00")
        seen = []
        while (reply := self.read()) is not None and reply[0] != 0xD0:
            seen.append(reply)
        return seen


def raw5(server: MQTTServer, client_id: bytes, properties: bytes = b"\x00") -> Raw5:
    client = Raw5(server.mqtt_port)
    code, _ = client.connect5(client_id=client_id, properties=properties)
    assert code == 0
    return client


def test_connack_properties_and_assigned_client_id(server: MQTTServer) -> None:
    client = Raw5(server.mqtt_port)
    code, p = client.connect5()
    assert code == 0
    assigned = p.values.pop(props.ASSIGNED_CLIENT_ID)
    assert isinstance(assigned, str) and assigned
    assert p.values == {
        props.RECEIVE_MAXIMUM: 1024,
        props.MAXIMUM_PACKET_SIZE: 1024 * 1024 + 70_000,
        props.TOPIC_ALIAS_MAXIMUM: 1024,
        props.WILDCARD_AVAILABLE: 1,
        props.SUBSCRIPTION_IDS_AVAILABLE: 1,
        props.SHARED_AVAILABLE: 1,
    }
    named = Raw5(server.mqtt_port)
    assert named.connect5(client_id=b"named")[1].text(props.ASSIGNED_CLIENT_ID) is None
    # 3.1.1 is untouched: a level it does not know is still return code 1, in 3.1.1's CONNACK
    old = RawClient(server.mqtt_port)
    assert old.connect(client_id=b"level6", level=6) == 1


def test_connect_refusals_have_reason_codes(server: MQTTServer) -> None:
    def refused(**kwargs: Any) -> int:
        client = Raw5(server.mqtt_port)
        code, _ = client.connect5(**kwargs)
        assert client.closed()
        return code

    session_expiry = bytes((props.SESSION_EXPIRY,)) + struct.pack(">I", 5)
    assert refused(client_id=b"r1", user=b"alice", password=b"nope") == props.NOT_AUTHORIZED
    assert refused(client_id=b"a.b") == props.CLIENT_IDENTIFIER_NOT_VALID
    assert refused(client_id=b"r2", user=b"") == props.BAD_USER_NAME_OR_PASSWORD
    twice = props.varint(10) + session_expiry * 2
    assert refused(client_id=b"r3", properties=twice) == props.PROTOCOL_ERROR
    foreign = props.varint(3) + bytes((props.TOPIC_ALIAS,)) + b"\x00\x01"  # a PUBLISH's property
    assert refused(client_id=b"r4", properties=foreign) == props.MALFORMED_PACKET
    method = props.encode([(props.AUTH_METHOD, "SCRAM-SHA-1")])
    assert refused(client_id=b"r5", properties=method) == props.BAD_AUTHENTICATION_METHOD
    zero = props.varint(3) + bytes((props.RECEIVE_MAXIMUM,)) + b"\x00\x00"
    assert refused(client_id=b"r6", properties=zero) == props.PROTOCOL_ERROR


def test_malformed_packets_get_a_disconnect_with_their_reason(server: MQTTServer) -> None:
    alias = bytes((props.TOPIC_ALIAS,)) + b"\x00\x01"
    cases = {
        "a property repeated": (props.varint(6) + alias * 2, props.PROTOCOL_ERROR),
        "a CONNECT's property in a PUBLISH": (
            props.encode([(props.SESSION_EXPIRY, 1)]),
            props.MALFORMED_PACKET,
        ),
        "properties past the packet": (props.varint(50) + alias, props.MALFORMED_PACKET),
        "an alias never set": (props.varint(3) + alias, props.PROTOCOL_ERROR),
        "an alias above the maximum": (props.encode([(props.TOPIC_ALIAS, 5000)]), props.TOPIC_ALIAS_INVALID),
    }
    for name, (properties, reason) in cases.items():
        client = raw5(server, b"bad-" + name.replace(" ", "-").replace("'", "").encode())
        client.publish(b"" if "alias" in name else b"t/x", b"p", properties)
        assert client.reason() == (0xE0, reason), name
        assert client.closed()
    large = raw5(server, b"too-large")
    large.send(b"\x30\xff\xff\xff\x7f")
    assert large.reason() == (0xE0, props.PACKET_TOO_LARGE)
    second = raw5(server, b"second-connect")
    second.send(connect5(client_id=b"second-connect"))
    assert second.reason() == (0xE0, props.MALFORMED_PACKET)


def test_session_taken_over(server: MQTTServer) -> None:
    watcher = raw5(server, b"takeover-watcher")
    assert watcher.subscribe([(b"takeover/#", 0)]) == b"\x00"
    will = (b"takeover/will", b"gone")
    keep = props.encode([(props.SESSION_EXPIRY, 60)])
    first = Raw5(server.mqtt_port)
    assert first.connect5(client_id=b"taken", will=will, properties=keep)[0] == 0
    second = Raw5(server.mqtt_port)  # the session goes on: no will
    assert second.connect5(client_id=b"taken", will=will, clean=False, properties=keep)[0] == 0
    assert first.reason() == (0xE0, props.SESSION_TAKEN_OVER)
    assert first.closed()
    assert watcher.ping() == []
    raw5(server, b"taken")  # a clean start ends the session: its will is published
    assert second.reason() == (0xE0, props.SESSION_TAKEN_OVER)
    assert watcher.message()[1:] == (b"takeover/will", props.Properties(), b"gone")
    # a PUBREL for nothing held: PUBCOMP 0x92
    watcher.send(b"\x62\x02\x00\x4d")
    assert watcher.read() == (0x70, b"\x00\x4d" + bytes((props.PACKET_ID_NOT_FOUND,)))


def test_acknowledgements_carry_reason_codes(server: MQTTServer) -> None:
    bob = Raw5(server.mqtt_port)
    assert bob.connect5(client_id=b"bob5", user=b"bob", password=b"pw")[0] == 0
    bob.publish(b"secret/x", b"no", qos=1, pid=3)
    assert bob.reason() == (0x40, props.NOT_AUTHORIZED)
    bob.publish(b"open/x", b"yes", qos=1, pid=4)
    assert bob.read() == (0x40, b"\x00\x04")  # Success: the reason left out
    codes = bob.subscribe(
        [(b"open/x", 0), (b"secret/x", 0), (b"with space", 0), (b"open/q", 1), (b"$share/a b/open/x", 0)]
    )
    invalid = props.TOPIC_FILTER_INVALID
    assert codes == bytes((0, props.NOT_AUTHORIZED, invalid, 1, invalid))
    bob.send(packet(0xA2, b"\x00\x09\x00" + _string(b"open/x") + _string(b"open/never")))
    assert bob.read() == (0xB0, b"\x00\x09\x00" + bytes((0, props.NO_SUBSCRIPTION_EXISTED)))
    bob.publish(b"open/x", b"not utf-8 \xff", props.encode([(props.PAYLOAD_FORMAT, 1)]), qos=1, pid=5)
    assert bob.reason() == (0x40, props.PAYLOAD_FORMAT_INVALID)
    bob.send(b"\xe0\x00")
    assert bob.closed()


async def _nats_round_trip(server: MQTTServer) -> None:
    nc = await nats.connect(server.nats_url)
    try:
        got = await nc.subscribe("props.>")
        await nc.flush()
        loop = asyncio.get_running_loop()
        mqtt = await loop.run_in_executor(None, raw5, server, b"props-pub")
        user = [("color", "red"), ("color", "blue"), ("Trace-Id", "a b:c")]
        properties = props.encode(
            [
                (props.CONTENT_TYPE, "application/json"),
                (props.CORRELATION_DATA, b"\x00\x01id"),
                (props.PAYLOAD_FORMAT, 1),
                (props.MESSAGE_EXPIRY, 30),
                (props.RESPONSE_TOPIC, "props/reply/1"),
            ],
            user,
        )
        mqtt.publish(b"props/a", b'{"x": 1}', properties)
        msg = await got.next_msg(timeout=10)
        assert msg.subject == "props.a" and msg.reply == "props.reply.1" and msg.data == b'{"x": 1}'
        raw = msg.header
        assert raw == {
            "Nmqtt-Pub": "0",
            "Content-Type": "application/json",
            "Nmqtt-Correlation-Data": "AAFpZA==",
            "Nmqtt-Payload-Format": "1",
            "Nmqtt-Message-Expiry": "30",
            "color": "blue",  # (nats-py keeps a repeated header's last value)
            "Trace-Id": "a b:c",
        }
        bad = props.encode([], [("no:colon", "x")])
        mqtt.publish(b"props/b", b"refused", bad, qos=1, pid=2)
        assert await loop.run_in_executor(None, mqtt.reason) == (0x40, props.IMPLEMENTATION_SPECIFIC_ERROR)
        spoof = props.encode([], [("Nmqtt-Pub", "2")])
        mqtt.publish(b"props/b", b"refused", spoof, qos=1, pid=3)
        assert await loop.run_in_executor(None, mqtt.reason) == (0x40, props.IMPLEMENTATION_SPECIFIC_ERROR)

        # NATS headers reach an MQTT 5 subscriber as user properties (the mapped ones as their properties)
        assert await loop.run_in_executor(None, mqtt.subscribe, [(b"from/nats", 0)]) == b"\x00"
        headers = {"k1": "v1", "Content-Type": "text/plain", "Nmqtt-Correlation-Data": "aWQ="}
        await nc.publish("from.nats", b"hi", reply="resp.here", headers=headers)
        await nc.flush()
        first, topic, p, payload = await loop.run_in_executor(None, mqtt.message)
        assert (first, topic, payload) == (0x30, b"from/nats", b"hi")
        assert p.user == [("k1", "v1")]
        assert p.values == {
            props.RESPONSE_TOPIC: "resp/here",
            props.CONTENT_TYPE: "text/plain",
            props.CORRELATION_DATA: b"id",
        }
    finally:
        await nc.close()


def test_properties_are_nats_headers_both_ways(server: MQTTServer) -> None:
    asyncio.run(_nats_round_trip(server))


class Paho5:
    """A paho-mqtt MQTTv5 client that records what it receives."""

    def __init__(
        self, server: MQTTServer, client_id: str, connect: PahoProperties | None = None, clean: bool = True
    ) -> None:
        self.messages: queue.Queue[paho.MQTTMessage] = queue.Queue()
        self.connacks: queue.Queue[tuple[bool, int]] = queue.Queue()
        self.disconnects: queue.Queue[int] = queue.Queue()
        self.subacks: queue.Queue[list[int]] = queue.Queue()
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5)
        self.client.on_message = lambda _c, _u, m: self.messages.put(m)
        self.client.on_connect = lambda _c, _u, flags, code, _p: self.connacks.put(
            (flags.session_present, code.value)
        )
        self.client.on_disconnect = lambda _c, _u, _f, code, _p: self.disconnects.put(code.value)
        self.client.on_subscribe = lambda _c, _u, _m, codes, _p: self.subacks.put([c.value for c in codes])
        self.client.connect(
            "127.0.0.1", server.mqtt_port, keepalive=30, clean_start=clean, properties=connect
        )
        self.client.loop_start()
        self.session_present, code = self.connacks.get(timeout=10)
        assert code == 0

    def subscribe(self, topic: str, properties: PahoProperties | None = None, **options: Any) -> list[int]:
        self.client.subscribe(topic, options=SubscribeOptions(qos=0, **options), properties=properties)
        return self.subacks.get(timeout=10)

    def publish(
        self, topic: str, payload: bytes, properties: PahoProperties | None = None, retain: bool = False
    ) -> None:
        self.client.publish(topic, payload, qos=1, retain=retain, properties=properties).wait_for_publish(10)

    def get(self) -> paho.MQTTMessage:
        return self.messages.get(timeout=10)

    def until_marker(self) -> list[paho.MQTTMessage]:
        """What comes before a round trip through the server (a PUBLISH to itself)."""
        marker = f"marker/{id(self)}"
        self.subscribe(marker)
        self.client.publish(marker, b"marker", qos=0)
        before = []
        while (msg := self.get()).topic != marker:
            before.append(msg)
        return before

    def nothing_more(self) -> bool:
        """True when nothing else came before a round trip through the server."""
        return not self.until_marker()

    def stop(self, properties: PahoProperties | None = None) -> None:
        self.client.disconnect(properties=properties)
        self.client.loop_stop()


def _props(kind: int, **values: Any) -> PahoProperties:
    p: PahoProperties = PahoProperties(kind)  # type: ignore[no-untyped-call]
    for name, value in values.items():
        setattr(p, name, value)
    return p


def _prop(msg: paho.MQTTMessage, name: str) -> Any:
    """A received message's property."""
    return getattr(msg.properties, name)


async def _requests(server: MQTTServer) -> None:
    loop = asyncio.get_running_loop()
    nc = await nats.connect(server.nats_url)
    try:
        # a NATS responder answers an MQTT 5 requester on its Response Topic
        async def respond(msg: Any) -> None:
            await msg.respond(b"answer to " + msg.data)

        await nc.subscribe("svc.nats", cb=respond)
        await nc.flush()
        requester = await loop.run_in_executor(None, Paho5, server, "requester")
        await loop.run_in_executor(None, requester.subscribe, "replies/requester")
        request = _props(PacketTypes.PUBLISH, ResponseTopic="replies/requester", CorrelationData=b"c-1")
        await loop.run_in_executor(None, requester.publish, "svc/nats", b"q1", request)
        answer = await loop.run_in_executor(None, requester.get)
        assert (answer.topic, answer.payload) == ("replies/requester", b"answer to q1")

        # a NATS request reaches an MQTT 5 responder, whose answer on the Response Topic comes back
        responder = await loop.run_in_executor(None, Paho5, server, "responder")

        def on_request(_c: object, _u: object, msg: paho.MQTTMessage) -> None:
            reply = _props(PacketTypes.PUBLISH, CorrelationData=_prop(msg, "CorrelationData"))
            responder.client.publish(
                _prop(msg, "ResponseTopic"), b"mqtt says " + msg.payload, properties=reply
            )

        responder.client.on_message = on_request
        await loop.run_in_executor(None, responder.subscribe, "svc/mqtt")
        got = await nc.request("svc.mqtt", b"q2", timeout=10, headers={"Nmqtt-Correlation-Data": "YWJj"})
        assert got.data == b"mqtt says q2"
        assert got.headers is not None and got.headers["Nmqtt-Correlation-Data"] == "YWJj"
        requester.stop()
        responder.stop()
    finally:
        await nc.close()


def test_requests_cross_between_mqtt5_and_nats(server: MQTTServer) -> None:
    asyncio.run(_requests(server))


async def _shared(server: MQTTServer) -> None:
    loop = asyncio.get_running_loop()
    nc = await nats.connect(server.nats_url)
    try:
        nats_got: list[bytes] = []
        nats_count = asyncio.Condition()

        async def on_msg(msg: Any) -> None:
            async with nats_count:
                nats_got.append(msg.data)
                nats_count.notify_all()

        await nc.subscribe("work.>", queue="g1", cb=on_msg)
        workers = [await loop.run_in_executor(None, Paho5, server, f"worker{i}") for i in range(2)]
        for worker in workers:
            assert await loop.run_in_executor(None, worker.subscribe, "$share/g1/work/#") == [0]
        watcher = await loop.run_in_executor(None, Paho5, server, "watcher")
        await loop.run_in_executor(None, watcher.subscribe, "work/#")
        await nc.flush()
        sent = [b"job %d" % i for i in range(30)]
        for data in sent:
            await nc.publish("work.items", data)
        await nc.flush()
        seen = [(await loop.run_in_executor(None, watcher.get)).payload for _ in sent]
        assert seen == sent  # the plain subscription gets every one
        assert await loop.run_in_executor(None, watcher.nothing_more)
        shared: list[bytes] = []
        for worker in workers:  # (a marker round trip: each worker's deliveries are all in)
            shared += [m.payload for m in await loop.run_in_executor(None, worker.until_marker)]
        async with nats_count:  # the rest went to the NATS member of the group
            await asyncio.wait_for(nats_count.wait_for(lambda: len(nats_got) >= len(sent) - len(shared)), 10)
        shared += nats_got
        assert sorted(shared) == sorted(sent)  # one delivery per group, NATS's queue member included
        for worker in [*workers, watcher]:
            worker.stop()
    finally:
        await nc.close()


def test_shared_subscriptions_are_queue_groups(server: MQTTServer) -> None:
    asyncio.run(_shared(server))


def test_subscription_options_and_identifiers(server: MQTTServer) -> None:
    client = Paho5(server, "options")
    sub_id = _props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=42)
    assert client.subscribe("opt/local", sub_id, noLocal=True) == [0]
    assert client.subscribe("opt/other", retainAsPublished=True) == [0]
    client.publish("opt/local", b"mine")  # no local: not back to its publisher
    client.publish("opt/other", b"kept", retain=True)
    got = client.get()
    assert (got.topic, got.payload, got.retain) == ("opt/other", b"kept", True)  # retain as published
    assert client.nothing_more()
    other = Paho5(server, "options-other")
    other.publish("opt/local", b"theirs")
    got = client.get()
    assert (got.topic, _prop(got, "SubscriptionIdentifier")) == ("opt/local", [42])
    # retain handling: 0 sends retained messages at each SUBSCRIBE, 1 only at a new one, 2 never
    fresh = Paho5(server, "retain-handling")
    assert fresh.subscribe("opt/other", retainHandling=2) == [0]
    assert fresh.nothing_more()
    assert fresh.subscribe("opt/+", retainHandling=1) == [0]
    assert (fresh.get().payload, fresh.subscribe("opt/+", retainHandling=1)) == (b"kept", [0])
    assert fresh.nothing_more()
    assert fresh.subscribe("opt/+", retainHandling=0) == [0]
    got = fresh.get()
    assert (got.payload, got.retain) == (b"kept", True)
    other.publish("opt/other", b"", retain=True)  # (the retained message removed)
    for c in (client, other, fresh):
        c.stop()


def test_topic_aliases_both_ways(server: MQTTServer) -> None:
    receiver = raw5(server, b"aliases-in", props.encode([(props.TOPIC_ALIAS_MAXIMUM, 1)]))
    assert receiver.subscribe([(b"alias/+", 0)]) == b"\x00"
    sender = raw5(server, b"aliases-out")
    sender.publish(b"alias/one", b"1", props.encode([(props.TOPIC_ALIAS, 7)]))
    sender.publish(b"", b"2", props.encode([(props.TOPIC_ALIAS, 7)]))  # the topic by its alias
    sender.publish(b"alias/two", b"3")
    sender.publish(b"alias/one", b"4")
    seen = [receiver.message() for _ in range(4)]
    # the server's aliases, up to the receiver's maximum (1): alias/one's; alias/two in full
    assert [(t, p.values.get(props.TOPIC_ALIAS), body) for _f, t, p, body in seen] == [
        (b"alias/one", 1, b"1"),
        (b"", 1, b"2"),
        (b"alias/two", None, b"3"),
        (b"", 1, b"4"),
    ]


def test_maximum_packet_size_of_the_client(server: MQTTServer) -> None:
    small = raw5(server, b"small", props.encode([(props.MAXIMUM_PACKET_SIZE, 64)]))
    assert small.subscribe([(b"size/+", 0)]) == b"\x00"
    sender = raw5(server, b"size-sender")
    sender.publish(b"size/big", b"x" * 100)  # not sent to `small`
    sender.publish(b"size/fit", b"y" * 10)
    assert small.message()[1:] == (b"size/fit", props.Properties(), b"y" * 10)


async def _nats_publish(server: MQTTServer, subject: str, data: bytes) -> None:
    nc = await nats.connect(server.nats_url)
    await nc.publish(subject, data)
    await nc.close()


def test_session_expiry(server: MQTTServer) -> None:
    keep = _props(PacketTypes.CONNECT, SessionExpiryInterval=60)
    expiry_60 = props.encode([(props.SESSION_EXPIRY, 60)])
    first = Paho5(server, "expiring", keep)
    first.subscribe("expiry/t", _props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=7), noLocal=True)
    first.subscribe("$share/grp/expiry/s")
    first.stop()
    again = Paho5(server, "expiring", keep, clean=False)
    assert again.session_present
    publisher = Paho5(server, "expiry-pub")
    publisher.publish("expiry/t", b"still subscribed")
    got = again.get()  # with its subscription identifier
    assert (got.payload, _prop(got, "SubscriptionIdentifier")) == (b"still subscribed", [7])
    publisher.publish("expiry/s", b"shared too")
    assert again.get().payload == b"shared too"
    again.publish("expiry/t", b"no local still")
    assert again.nothing_more()
    publisher.stop()
    again.stop()
    # the DISCONNECT's Session Expiry Interval 0 ends it (raw: its connection closed once it is read)
    raw = Raw5(server.mqtt_port)
    assert raw.connect5(client_id=b"expiring", clean=False, properties=expiry_60)[0] == 0
    assert raw.session_present
    raw.send(packet(0xE0, b"\x00" + props.encode([(props.SESSION_EXPIRY, 0)])))
    assert raw.closed()
    raw = Raw5(server.mqtt_port)
    assert raw.connect5(client_id=b"expiring", clean=False)[0] == 0
    assert not raw.session_present
    assert raw.subscribe([(b"expiry/z", 0)]) == b"\x00"
    raw.send(b"\xe0\x00")  # Session Expiry Interval 0 (the default): it ends with its connection
    assert raw.closed()
    raw = Raw5(server.mqtt_port)
    assert raw.connect5(client_id=b"expiring", clean=False)[0] == 0
    assert not raw.session_present
    # a record past its expiry is no session
    record = json.dumps({"origin": "x", "id": "expired", "subs": {"a": 0}, "expires": 1}).encode()
    asyncio.run(_nats_publish(server, session_subject("", "expired").decode(), record))
    raw = Raw5(server.mqtt_port)
    assert raw.connect5(client_id=b"expired", clean=False, properties=expiry_60)[0] == 0
    assert not raw.session_present
    # a DISCONNECT setting an expiry after 0 at CONNECT is a Protocol Error
    raw = raw5(server, b"expiry-raw")
    raw.send(packet(0xE0, b"\x00" + props.encode([(props.SESSION_EXPIRY, 10)])))
    assert raw.reason() == (0xE0, props.PROTOCOL_ERROR)


def test_will_delay(server: MQTTServer) -> None:
    watcher = Paho5(server, "will-watcher")
    watcher.subscribe("wills/#")

    def with_will(client_id: str, delay: int) -> paho.Client:
        client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5)
        will = _props(PacketTypes.WILLMESSAGE, WillDelayInterval=delay, UserProperty=[("why", "gone")])
        client.will_set(f"wills/{client_id}", b"bye " + client_id.encode(), properties=will)
        client.connect(
            "127.0.0.1", server.mqtt_port, properties=_props(PacketTypes.CONNECT, SessionExpiryInterval=30)
        )
        client.loop_start()
        return client

    def drop(client: paho.Client) -> None:
        client.loop_stop()
        sock = client.socket()
        assert sock is not None
        sock.close()  # no DISCONNECT: the will is due

    resumed = with_will("resumes", 3600)
    drop(resumed)
    back = Paho5(server, "resumes", _props(PacketTypes.CONNECT, SessionExpiryInterval=30), clean=False)
    back.stop()  # back before the delay: no will
    delayed = with_will("delayed", 1)
    drop(delayed)
    got = watcher.get()
    assert (got.topic, got.payload, _prop(got, "UserProperty")) == (
        "wills/delayed",
        b"bye delayed",
        [("why", "gone")],
    )
    assert watcher.nothing_more()
    watcher.stop()


def test_mosquitto_clients_v5(server: MQTTServer, tmp_path: Path) -> None:
    port = str(server.mqtt_port)
    sub = subprocess.Popen(
        [
            "mosquitto_sub",
            "-V",
            "mqttv5",
            "-p",
            port,
            "-i",
            "mosq5-sub",
            "-t",
            "mosq/#",
            "-C",
            "1",
            "-F",
            "%t %p %P",
        ],
        stdout=subprocess.PIPE,
    )
    ready = threading.Event()
    watcher = Paho5(server, "mosq-watch")
    watcher.subscribe("mosq/#")
    ready.set()
    args = [
        "mosquitto_pub",
        "-V",
        "mqttv5",
        "-p",
        port,
        "-t",
        "mosq/x",
        "-m",
        "hello5",
        "-D",
        "publish",
        "user-property",
        "k",
        "v",
    ]
    for _ in range(50):  # until mosquitto_sub's subscription is in place (it gets exactly one)
        subprocess.run(args, check=True, timeout=10)
        assert watcher.get().payload == b"hello5"
        if sub.poll() is not None:
            break
    out, _ = sub.communicate(timeout=10)
    assert out.decode().strip() == "mosq/x hello5 k:v"
    watcher.stop()


async def _stored_with_properties(server: MQTTServer) -> None:
    loop = asyncio.get_running_loop()
    nc = await nats.connect(server.nats_url)
    try:
        got = await nc.subscribe("held.>")
        await nc.flush()
        publisher = await loop.run_in_executor(None, Paho5, server, "held-pub")
        publish = _props(
            PacketTypes.PUBLISH,
            UserProperty=[("k", "v")],
            ResponseTopic="held/reply",
            MessageExpiryInterval=3600,
            ContentType="text/plain",
        )

        def qos2_and_retained() -> None:
            publisher.client.publish("held/q2", b"two", qos=2, properties=publish).wait_for_publish(10)
            publisher.publish("held/kept", b"kept", publish, retain=True)

        await loop.run_in_executor(None, qos2_and_retained)
        for topic in ("held.q2", "held.kept"):  # held until PUBREL, and retained: their properties kept
            msg = await got.next_msg(timeout=10)
            assert (msg.subject, msg.reply) == (topic, "held.reply")
            assert msg.headers is not None
            assert (msg.headers["k"], msg.headers["Content-Type"]) == ("v", "text/plain")
        late = await loop.run_in_executor(None, Paho5, server, "held-late")
        await loop.run_in_executor(None, late.subscribe, "held/kept")
        kept = await loop.run_in_executor(None, late.get)
        assert (kept.payload, kept.retain, _prop(kept, "UserProperty")) == (b"kept", True, [("k", "v")])
        assert (_prop(kept, "ResponseTopic"), _prop(kept, "ContentType")) == ("held/reply", "text/plain")
        assert 3590 < _prop(kept, "MessageExpiryInterval") <= 3600  # what is left of it
        await loop.run_in_executor(None, lambda: publisher.publish("held/kept", b"", retain=True))
        for client in (publisher, late):
            client.stop()
    finally:
        await nc.close()


def test_held_and_retained_messages_keep_their_properties(server: MQTTServer) -> None:
    asyncio.run(_stored_with_properties(server))
