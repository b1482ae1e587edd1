"""MQTT 3.1.1 against pynatsd and nats-server with the same `mqtt {}` block: the same CONNACK and SUBACK
codes, the same deliveries (topics and payloads) MQTT to MQTT, MQTT to NATS and NATS to MQTT, the same
permissions, and a malformed packet closing only its own connection."""

from __future__ import annotations

import asyncio
import json
import struct
import subprocess
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import nats
import paho.mqtt.client as paho

from pynatsd.mqtt.store import server_origin, session_subject
from tests.mqtt.conftest import (
    MQTTServer,
    RawClient,
    connect_packet,
    packet,
    publish_packet,
    settled_varz,
    start_mqtt_server,
    subscribe_packet,
    subscribed,
    unsubscribe_packet,
    varz,
)


def connack(server: MQTTServer, **kwargs: object) -> int | None:
    client = RawClient(server.mqtt_port)
    try:
        return client.connect(**kwargs)
    finally:
        client.close()


def test_connack_return_codes(mqtt_server: MQTTServer) -> None:
    codes = {
        "alice": connack(mqtt_server, client_id=b"c-alice", user=b"alice", password=b"pw"),
        "anonymous is the no_auth_user": connack(mqtt_server, client_id=b"c-anon"),
        "no client id, clean": connack(mqtt_server),
        "bad password": connack(mqtt_server, client_id=b"c-bad", user=b"alice", password=b"nope"),
        "unknown user": connack(mqtt_server, client_id=b"c-who", user=b"mallory", password=b"pw"),
        "protocol level 3": connack(mqtt_server, client_id=b"c-old", level=3),
        "no client id, not clean": connack(mqtt_server, clean=False),
        "dot in client id": connack(mqtt_server, client_id=b"a.b"),
        "space in client id": connack(mqtt_server, client_id=b"a b"),
        "empty user name": connack(mqtt_server, client_id=b"c-empty", user=b""),
        "an account without JetStream": connack(
            mqtt_server, client_id=b"c-carol", user=b"carol", password=b"pw"
        ),
    }
    assert codes == {
        "alice": 0,
        "anonymous is the no_auth_user": 0,
        "no client id, clean": 0,
        "bad password": 5,
        "unknown user": 5,
        "protocol level 3": 1,
        "no client id, not clean": 2,
        "dot in client id": 2,
        "space in client id": 2,
        "empty user name": 4,
        "an account without JetStream": None,  # closed: the MQTT state lives in JetStream
    }


def test_keep_alive_closes_a_silent_client(mqtt_server: MQTTServer) -> None:
    silent = RawClient(mqtt_server.mqtt_port)
    assert silent.connect(client_id=b"silent", keep_alive=1) == 0
    assert silent.closed()  # 1.5 times its keep-alive later


def test_suback_codes_ping_and_second_connect(mqtt_server: MQTTServer) -> None:
    bob = RawClient(mqtt_server.mqtt_port)
    assert bob.connect(client_id=b"sub-bob", user=b"bob", password=b"pw") == 0
    filters = [
        (b"open/x", 0),
        (b"open/#", 0),  # its parent level `open` is not permitted to bob: refused as a whole
        (b"secret/x", 0),  # not permitted to bob
        (b"$MQTT/sub/x", 0),  # nats-server's own subjects
        (b"with space", 0),  # no NATS subject for it
        (b"open/+/y", 0),
    ]
    bob.send(subscribe_packet(7, filters))
    assert bob.read() == (0x90, struct.pack(">H", 7) + bytes((0, 0x80, 0x80, 0x80, 0x80, 0)))
    bob.send(unsubscribe_packet(8, [b"open/x", b"never/subscribed"]))
    assert bob.read() == (0xB0, struct.pack(">H", 8))
    bob.send(packet(0xC0, b""))
    assert bob.read() == (0xD0, b"")
    bob.send(connect_packet(client_id=b"sub-bob", user=b"bob", password=b"pw"))  # a second CONNECT
    assert bob.closed()


def test_malformed_packets_close_only_their_connection(mqtt_server: MQTTServer) -> None:
    watcher = RawClient(mqtt_server.mqtt_port)
    assert watcher.connect(client_id=b"watcher") == 0
    watcher.send(subscribe_packet(1, [(b"still/here", 0)]))
    assert watcher.read() is not None
    malformed = [
        b"\x30\x05\x00\x01a",  # PUBLISH before CONNECT
        b"\x10\xff\xff\xff\xff\x7f",  # a remaining length of five bytes
        b"\x10\xff\xff\xff\x7f",  # a CONNECT longer than max_payload
        packet(0x10, b"\x00\x04MQTT\x04\x02\x00\x1e\x00\x05ab"),  # a client ID longer than the packet
        b"\x10\x02\x00\x04",  # CONNECT too short for its protocol name
        packet(0x10, b"\x00\x04MQTT\x04\x03\x00\x1e\x00\x02m2"),  # reserved connect flag set
        b"GET / HTTP/1.1\r\n\r\n",
    ]
    for data in malformed:
        bad = RawClient(mqtt_server.mqtt_port)
        bad.send(data)
        assert bad.closed(), data
    after_connect = [
        b"\xf0\x00",  # packet type 15
        b"\x82\x02\x00\x01",  # SUBSCRIBE without filters
        b"\x80\x05\x00\x01\x00\x01a",  # SUBSCRIBE with reserved flags 0
        b"\x32\x05\x00\x01a\x00\x00",  # QoS 1 PUBLISH with packet id 0 (malformed for both)
        publish_packet(b"wild/+", b"x"),  # a wildcard in a PUBLISH topic
        b"\xc0\x01\x00",  # PINGREQ with a remaining length
    ]
    for data in after_connect:
        bad = RawClient(mqtt_server.mqtt_port)
        assert bad.connect(client_id=b"malformed-" + uuid.uuid4().hex[:8].encode()) == 0
        bad.send(data)
        assert bad.closed(), data
    publisher = RawClient(mqtt_server.mqtt_port)
    assert publisher.connect(client_id=b"publisher") == 0
    publisher.send(publish_packet(b"still/here", b"alive"))
    delivered = watcher.read()
    assert delivered is not None and delivered[0] == 0x30
    assert delivered[1] == struct.pack(">H", 10) + b"still/here" + b"alive"


class Paho:
    """A paho-mqtt MQTTv311 client that records what it receives (`deliveries`: with QoS and RETAIN)."""

    def __init__(
        self, server: MQTTServer, client_id: str, user: str | None = None, websocket_port: int = 0
    ) -> None:
        """(`websocket_port`: over the `websocket {}` port's `/mqtt` path instead of the MQTT port.)"""
        self.received: list[tuple[str, bytes]] = []
        self.deliveries: list[tuple[str, bytes, int, bool]] = []
        self.suback: list[int] = []
        self._got = threading.Condition()
        self.client = paho.Client(
            paho.CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=paho.MQTTv311,
            transport="websockets" if websocket_port else "tcp",
        )
        if websocket_port:
            self.client.ws_set_options(path="/mqtt")
        if user is not None:
            self.client.username_pw_set(user, "pw")
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe
        self.client.connect("127.0.0.1", websocket_port or server.mqtt_port, keepalive=30)
        self.client.loop_start()

    def _on_message(self, client: object, userdata: object, message: paho.MQTTMessage) -> None:
        with self._got:
            self.received.append((message.topic, message.payload))
            self.deliveries.append((message.topic, message.payload, message.qos, bool(message.retain)))
            self._got.notify_all()

    def _on_subscribe(
        self, client: object, userdata: object, mid: int, codes: list[object], props: object
    ) -> None:
        with self._got:
            self.suback.extend(int(getattr(c, "value", c)) for c in codes)
            self._got.notify_all()

    def subscribe(self, *topics: str | tuple[str, int]) -> list[int]:
        """Subscribe to filters (QoS 0, or (filter, QoS)); the SUBACK's codes."""
        with self._got:
            before = len(self.suback)
            self.client.subscribe([(t, 0) if isinstance(t, str) else t for t in topics])
            assert self._got.wait_for(lambda: len(self.suback) >= before + len(topics), timeout=10)
            return self.suback[before:]

    def wait(self, count: int) -> list[tuple[str, bytes]]:
        with self._got:
            assert self._got.wait_for(lambda: len(self.received) >= count, timeout=10), self.received
            return list(self.received)

    def wait_deliveries(self, count: int) -> list[tuple[str, bytes, int, bool]]:
        self.wait(count)
        with self._got:
            return list(self.deliveries)

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False) -> None:
        self.client.publish(topic, payload, qos=qos, retain=retain).wait_for_publish(10)

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


async def _nats_side(
    server: MQTTServer, mqtt_publishes: list[tuple[str, bytes]]
) -> list[tuple[str, bytes, dict[str, str] | None]]:
    """A NATS subscriber on `t.>` and `$sys-like.>` while an MQTT client publishes `mqtt_publishes`."""
    nc = await nats.connect(server.nats_url)
    got: list[tuple[str, bytes, dict[str, str] | None]] = []
    done = asyncio.Event()

    async def on_msg(msg: nats.aio.msg.Msg) -> None:
        got.append((msg.subject, msg.data, msg.headers))
        if len(got) == len(mqtt_publishes):
            done.set()

    await nc.subscribe("t.>", cb=on_msg)
    await nc.flush()
    publisher = Paho(server, "nats-side-publisher")
    for topic, payload in mqtt_publishes:
        publisher.publish(topic, payload)
    await asyncio.wait_for(done.wait(), 10)
    publisher.stop()
    await nc.close()
    return got


def test_mqtt_to_nats_subjects_and_header(mqtt_server: MQTTServer) -> None:
    publishes = [("t/a", b"1"), ("t/a.b", b"2"), ("t//x", b"3"), ("t/x/", b"4"), ("t/ä", b"5")]
    got = asyncio.run(_nats_side(mqtt_server, publishes))
    assert got == [
        ("t.a", b"1", {"Nmqtt-Pub": "0"}),
        ("t.a//b", b"2", {"Nmqtt-Pub": "0"}),
        ("t./.x", b"3", {"Nmqtt-Pub": "0"}),
        ("t.x./", b"4", {"Nmqtt-Pub": "0"}),
        ("t.ä", b"5", {"Nmqtt-Pub": "0"}),
    ]


async def _nats_publish(server: MQTTServer, messages: list[tuple[str, bytes]]) -> None:
    nc = await nats.connect(server.nats_url)
    for subject, payload in messages:
        await nc.publish(subject, payload)
    await nc.flush()
    await nc.close()


def test_deliveries_mqtt_and_nats_to_mqtt(mqtt_server: MQTTServer) -> None:
    sub = Paho(mqtt_server, "deliveries-sub")
    try:
        assert sub.subscribe("d/#", "+/plus", "#", "$own/#") == [0, 0, 0, 0]
        pub = Paho(mqtt_server, "deliveries-pub")
        pub.publish("d", b"parent level")  # `d/#` takes `d` too, and `#`
        pub.publish("d/a.b", b"dotted")
        pub.stop()
        asyncio.run(
            _nats_publish(
                mqtt_server,
                [
                    ("x.plus", b"from nats"),
                    ("d.a//b", b"escaped"),
                    ("$own.x", b"dollar"),
                    ("$other.x", b"none"),
                ],
            )
        )
        got = sub.wait(9)
        time.sleep(0.2)  # (nothing more must come: `#` takes no `$` topic)
        got = sorted(sub.received)
    finally:
        sub.stop()
    assert got == sorted(
        [
            ("d", b"parent level"),
            ("d", b"parent level"),
            ("d/a.b", b"dotted"),
            ("d/a.b", b"dotted"),
            ("x/plus", b"from nats"),
            ("x/plus", b"from nats"),
            ("d/a.b", b"escaped"),
            ("d/a.b", b"escaped"),
            ("$own/x", b"dollar"),
        ]
    )


def test_qos0_publishes_of_every_length_field_in_pieces(mqtt_server: MQTTServer) -> None:
    """QoS 0 PUBLISHes around the 1- and 2-byte remaining lengths' limits, each topic twice (pynatsd
    checks and converts a topic once, then takes a shorter path), written in pieces that split them."""
    sub = subscribed(mqtt_server.mqtt_port, b"pieces-sub", b"fast/#")
    pub = RawClient(mqtt_server.mqtt_port)
    try:
        assert pub.connect(client_id=b"pieces-pub") == 0
        sent = [
            (topic, bytes([65 + i % 26]) * size)
            for size in (0, 1, 119, 120, 16375, 16376, 20000)
            for topic in (b"fast/a", b"fast/b.c", b"fast/a", b"fast/b.c")
            for i in (size,)
        ]
        stream = b"".join(publish_packet(topic, payload) for topic, payload in sent)
        for at in range(0, len(stream), 997):
            pub.send(stream[at : at + 997])
        got = [sub.read() for _ in sent]
    finally:
        pub.close()
        sub.close()
    assert got == [(0x30, struct.pack(">H", len(topic)) + topic + payload) for topic, payload in sent]


def test_permissions_apply_to_mqtt_clients(mqtt_server: MQTTServer) -> None:
    watcher = Paho(mqtt_server, "perm-watcher")
    bob = Paho(mqtt_server, "perm-bob", user="bob")
    try:
        watcher.subscribe("secret/#", "open/#", "_GR_/#", "$NRG/#")
        assert bob.subscribe("secret/x", "open/x") == [0x80, 0]
        bob.publish("secret/x", b"denied")
        for reserved in ("_GR_/x/y", "$NRG/x"):  # no client may publish there
            watcher.publish(reserved, b"reserved")
        bob.publish("open/x", b"allowed")
        assert watcher.wait(1) == [("open/x", b"allowed")]
        assert bob.wait(1) == [("open/x", b"allowed")]
    finally:
        watcher.stop()
        bob.stop()


def test_will_and_client_id_takeover(mqtt_server: MQTTServer) -> None:
    watcher = Paho(mqtt_server, "will-watcher")
    try:
        watcher.subscribe("will/#")
        first = RawClient(mqtt_server.mqtt_port)
        assert first.connect(client_id=b"dup", will=(b"will/first", b"first gone")) == 0
        second = RawClient(mqtt_server.mqtt_port)
        assert second.connect(client_id=b"dup", will=(b"will/second", b"second gone")) == 0
        assert first.closed()  # replaced, without its will
        clean = RawClient(mqtt_server.mqtt_port)
        assert clean.connect(client_id=b"clean", will=(b"will/clean", b"never")) == 0
        clean.send(packet(0xE0, b""))  # DISCONNECT discards the will
        assert clean.closed()
        second.close()  # dropped: its will goes out
        assert watcher.wait(1) == [("will/second", b"second gone")]
        kept = RawClient(mqtt_server.mqtt_port)
        will = (b"will/kept", b"kept gone")
        assert kept.connect(client_id=b"kept", will=will, will_qos=1, will_retain=True) == 0
        kept.close()  # a QoS 1 retained will: published as such
        assert watcher.wait(2) == [("will/second", b"second gone"), ("will/kept", b"kept gone")]
        time.sleep(0.2)
        assert watcher.received == [("will/second", b"second gone"), ("will/kept", b"kept gone")]
        late = RawClient(mqtt_server.mqtt_port)
        assert late.connect(client_id=b"late") == 0
        late.send(subscribe_packet(1, [(b"will/+", 0)]))
        assert late.read() == (0x90, b"\x00\x01\x00")
        assert late.read() == (0x31, b"\x00\x09will/kept" + b"kept gone")  # retained
        late.close()
    finally:
        watcher.stop()


def mosquitto_sub(port: int, *args: str) -> subprocess.Popen[bytes]:
    """mosquitto_sub on `m/#` for 3 messages (20 s at most), line-buffered: with -d its debug lines say
    when the SUBACK came."""
    where = ["-h", "127.0.0.1", "-p", str(port), "-V", "mqttv311", "-i", "mosq-sub"]
    command = ["stdbuf", "-oL", "mosquitto_sub", *where, "-t", "m/#", "-v", "-C", "3", "-W", "20", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_mosquitto_clients(mqtt_server: MQTTServer) -> None:
    port = str(mqtt_server.mqtt_port)
    # bob may not subscribe to m/#: the SUBACK refuses it and mosquitto_sub says so. Then alice's.
    out, err = mosquitto_sub(mqtt_server.mqtt_port, "-u", "bob", "-P", "pw").communicate(timeout=30)
    assert b"All subscription requests were denied" in out + err, (out, err)
    sub = mosquitto_sub(mqtt_server.mqtt_port, "-d")
    assert sub.stdout is not None
    lines = []
    for line in sub.stdout:
        lines.append(line)
        if b"received SUBACK" in line:
            break
    assert b"received SUBACK" in lines[-1], lines
    for topic, message in (("m/one", "1"), ("m/two/three", "2 3"), ("m", "top")):
        subprocess.run(
            ["mosquitto_pub", "-h", "127.0.0.1", "-p", port, "-V", "mqttv311", "-t", topic, "-m", message],
            check=True,
            timeout=20,
        )
    out, err = sub.communicate(timeout=30)
    assert sub.returncode == 0, err
    received = [line for line in out.decode().splitlines() if not line.startswith(("Client ", "Subscribed "))]
    assert received == ["m/one 1", "m/two/three 2 3", "m top"]


def _varz_mqtt(server: MQTTServer) -> dict[str, object]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.server.http_port}/varz", timeout=10) as answer:
        return dict(json.load(answer)["mqtt"])


def test_varz_mqtt_block(mqtt_server: MQTTServer) -> None:
    assert _varz_mqtt(mqtt_server) == {
        "host": "127.0.0.1",
        "port": mqtt_server.mqtt_port,
        "no_auth_user": "alice",
        "tls_timeout": 2,
    }


def test_qos1_and_qos2_subscriptions_granted(mqtt_server: MQTTServer) -> None:
    """QoS 1 and 2 are granted (JetStream consumers: tests/mqtt/test_qos_subscriptions.py)."""
    client = RawClient(mqtt_server.mqtt_port)
    assert client.connect(client_id=b"qos1") == 0
    client.send(subscribe_packet(3, [(b"q/1", 1), (b"q/0", 0), (b"q/2", 2)]))
    assert client.read() == (0x90, b"\x00\x03" + bytes((1, 0, 2)))
    client.close()


async def _qos1(server: MQTTServer) -> list[tuple[str, bytes, dict[str, str] | None]]:
    nc = await nats.connect(server.nats_url)
    got: list[tuple[str, bytes, dict[str, str] | None]] = []
    arrived = asyncio.Event()

    async def on_msg(msg: nats.aio.msg.Msg) -> None:
        got.append((msg.subject, msg.data, msg.headers))
        arrived.set()

    await nc.subscribe("q1.>", cb=on_msg)
    await nc.flush()
    subscriber = subscribed(server.mqtt_port, b"qos1-sub", b"q1/#")
    publisher = RawClient(server.mqtt_port)
    assert publisher.connect(client_id=b"qos1-pub") == 0
    publisher.send(packet(0x32, b"\x00\x04q1/x\x00\x05" + b"at least once"))
    assert publisher.read() == (0x40, b"\x00\x05")  # PUBACK
    assert subscriber.read() == (0x30, b"\x00\x04q1/x" + b"at least once")  # to a QoS 0 subscriber as QoS 0
    publisher.send(packet(0x40, b"\x00\x09"))  # a PUBACK for nothing pending: ignored
    publisher.send(packet(0x62, b"\x00\x07"))  # a PUBREL for nothing held: PUBCOMP all the same
    assert publisher.read() == (0x70, b"\x00\x07")
    publisher.send(packet(0xC0, b""))
    assert publisher.read() == (0xD0, b"")
    await asyncio.wait_for(arrived.wait(), 10)
    await nc.close()
    publisher.close()
    subscriber.close()
    return got


async def _stream_config(server: MQTTServer, name: str, *fields: str) -> dict[str, object]:
    """The named fields of the stream's configuration, as the JetStream API gives it."""
    nc = await nats.connect(server.nats_url)
    config = (await nc.jetstream().stream_info(name)).config
    await nc.close()
    return {field: getattr(config, field) for field in fields}


def test_qos1_publish_acknowledged_and_stored(mqtt_server: MQTTServer) -> None:
    assert asyncio.run(_qos1(mqtt_server)) == [("q1.x", b"at least once", {"Nmqtt-Pub": "1"})]
    stream = asyncio.run(
        _stream_config(mqtt_server, "$MQTT_msgs", "subjects", "retention", "storage", "num_replicas")
    )
    assert stream == {
        "subjects": ["$MQTT.msgs.>"],
        "retention": "interest",
        "storage": "file",
        "num_replicas": 1,
    }


def _until_pong(client: RawClient) -> list[tuple[int, bytes]]:
    """The packets before the PINGRESP to a PINGREQ sent now (the server answers in order)."""
    client.send(packet(0xC0, b""))
    got = []
    while (reply := client.read()) != (0xD0, b""):
        assert reply is not None
        got.append(reply)
    return got


def test_retained_messages(mqtt_server: MQTTServer) -> None:
    publisher = RawClient(mqtt_server.mqtt_port)
    assert publisher.connect(client_id=b"retain-pub") == 0
    publisher.send(packet(0x31, b"\x00\x03r/a" + b"kept"))  # retained
    publisher.send(packet(0x31, b"\x00\x05r/b/c" + b"also"))
    publisher.send(packet(0x30, b"\x00\x03r/n" + b"not kept"))
    publisher.send(packet(0x31, b"\x00\x03r/d" + b"old"))
    publisher.send(packet(0x31, b"\x00\x03r/d" + b"new"))  # replaces the one before
    assert _until_pong(publisher) == []
    first = RawClient(mqtt_server.mqtt_port)
    assert first.connect(client_id=b"retain-first") == 0
    first.send(subscribe_packet(1, [(b"r/#", 0)]))
    assert first.read() == (0x90, b"\x00\x01\x00")
    assert sorted(_until_pong(first)) == sorted(
        [
            (0x31, b"\x00\x03r/a" + b"kept"),
            (0x31, b"\x00\x05r/b/c" + b"also"),
            (0x31, b"\x00\x03r/d" + b"new"),
        ]
    )
    publisher.send(packet(0x31, b"\x00\x03r/a"))  # empty: removes it; subscribers get it as it is
    assert _until_pong(publisher) == []
    assert _until_pong(first) == [(0x30, b"\x00\x03r/a")]
    second = RawClient(mqtt_server.mqtt_port)
    assert second.connect(client_id=b"retain-second") == 0
    second.send(subscribe_packet(2, [(b"r/b/+", 0), (b"r", 0)]))
    assert second.read() == (0x90, b"\x00\x02\x00\x00")
    assert _until_pong(second) == [(0x31, b"\x00\x05r/b/c" + b"also")]
    for client in (publisher, first, second):
        client.close()
    assert asyncio.run(_retained_origin(mqtt_server, "$MQTT.rmsgs.r.b.c")) == _origin(mqtt_server)
    fields = ("subjects", "retention", "storage", "max_msgs_per_subject")
    assert asyncio.run(_stream_config(mqtt_server, "$MQTT_rmsgs", *fields)) == {
        "subjects": ["$MQTT.rmsgs.>"],
        "retention": "limits",
        "storage": "file",
        "max_msgs_per_subject": 1,
    }


async def _retained_origin(server: MQTTServer, subject: str) -> str | None:
    nc = await nats.connect(server.nats_url)
    try:
        stored = await nc.jetstream().get_last_msg("$MQTT_rmsgs", subject)
    finally:
        await nc.close()
    return (stored.headers or {}).get("Nmqtt-ROrigin")


async def _session_record(server: MQTTServer, client_id: str) -> dict[str, object] | None:
    nc = await nats.connect(server.nats_url)
    js = nc.jetstream()
    config = (await js.stream_info("$MQTT_sess")).config
    assert (config.subjects, config.max_msgs_per_subject) == (["$MQTT.sess.>"], 1)
    try:
        stored = await js.get_last_msg("$MQTT_sess", session_subject("", client_id).decode())
    except nats.js.errors.NotFoundError:
        return None
    finally:
        await nc.close()
    record = json.loads(stored.data or b"")
    assert record.pop("origin") == _origin(server)  # nats-server's 8-character hash of its name
    return dict(record)


def _origin(server: MQTTServer) -> str:
    return server_origin(str(varz(server)["server_name"]))


def test_persistent_session(mqtt_server: MQTTServer) -> None:
    def connect(clean: bool) -> tuple[RawClient, int]:
        client = RawClient(mqtt_server.mqtt_port)
        assert client.connect(client_id=b"persist", clean=clean) == 0
        return client, client.session_present

    def leave(client: RawClient) -> None:
        client.send(packet(0xE0, b""))
        assert client.closed()

    client, present = connect(clean=False)
    assert present == 0
    client.send(subscribe_packet(1, [(b"p/x", 0), (b"p/y", 0)]))
    assert client.read() == (0x90, b"\x00\x01\x00\x00")
    client.send(unsubscribe_packet(2, [b"p/y"]))
    assert client.read() == (0xB0, b"\x00\x02")
    leave(client)
    assert asyncio.run(_session_record(mqtt_server, "persist")) == {"id": "persist", "subs": {"p.x": 0}}
    client, present = connect(clean=False)
    assert present == 1  # its subscription is back without a SUBSCRIBE
    publisher = RawClient(mqtt_server.mqtt_port)
    assert publisher.connect(client_id=b"session-pub") == 0
    publisher.send(publish_packet(b"p/x", b"back"))
    assert client.read() == (0x30, b"\x00\x03p/x" + b"back")
    publisher.close()
    leave(client)
    client, present = connect(clean=True)  # a clean session discards the stored one
    assert present == 0
    assert asyncio.run(_session_record(mqtt_server, "persist")) == {"id": "persist", "clean": True}
    leave(client)
    assert asyncio.run(_session_record(mqtt_server, "persist")) is None  # and leaves none behind
    client, present = connect(clean=False)
    assert present == 0
    leave(client)


async def _copy_session_record(source: MQTTServer, target: MQTTServer, client_id: str) -> bytes:
    """The session record `source` keeps for `client_id`, stored as it is in `target`'s `$MQTT_sess`."""
    subject = session_subject("", client_id).decode()
    from_nc, to_nc = await nats.connect(source.nats_url), await nats.connect(target.nats_url)
    try:
        record = (await from_nc.jetstream().get_last_msg("$MQTT_sess", subject)).data or b""
        await to_nc.jetstream().publish(subject, record, stream="$MQTT_sess")
    finally:
        await from_nc.close()
        await to_nc.close()
    return record


def test_nats_server_takes_up_a_session_pynatsd_stored(tmp_path: Path) -> None:
    """A persistent session's record as pynatsd writes it is one nats-server takes up: its subscription
    comes back at the client's next CONNECT there."""
    ours, theirs = (start_mqtt_server(kind, tmp_path) for kind in ("pynatsd", "nats-server"))
    try:
        client = RawClient(ours.mqtt_port)
        assert client.connect(client_id=b"cross", clean=False) == 0
        client.send(subscribe_packet(1, [(b"cross/x", 0)]))
        assert client.read() == (0x90, b"\x00\x01\x00")
        client.send(packet(0xE0, b""))
        assert client.closed()
        first = RawClient(theirs.mqtt_port)  # (nats-server makes its MQTT streams at a first client)
        assert first.connect(client_id=b"cross-first") == 0
        first.close()
        record = asyncio.run(_copy_session_record(ours, theirs, "cross"))
        assert json.loads(record)["origin"] == _origin(ours)
        client = RawClient(theirs.mqtt_port)
        assert client.connect(client_id=b"cross", clean=False) == 0
        assert client.session_present == 1
        publisher = RawClient(theirs.mqtt_port)
        assert publisher.connect(client_id=b"cross-pub") == 0
        publisher.send(publish_packet(b"cross/x", b"taken up"))
        assert client.read() == (0x30, b"\x00\x07cross/x" + b"taken up")
        publisher.close()
        client.close()
    finally:
        ours.server.stop()
        theirs.server.stop()


def test_publish_past_max_payload_closes_its_connection(mqtt_server: MQTTServer) -> None:
    big = RawClient(mqtt_server.mqtt_port)
    assert big.connect(client_id=b"big") == 0
    big.send(publish_packet(b"big", b"x" * (1024 * 1024 - 10)))  # with the Nmqtt-Pub header: past 1 MiB
    assert big.closed()
    fits = RawClient(mqtt_server.mqtt_port)
    assert fits.connect(client_id=b"fits") == 0
    fits.send(subscribe_packet(1, [(b"fits", 0)]))
    assert fits.read() == (0x90, b"\x00\x01\x00")
    fits.send(publish_packet(b"fits", b"y" * (1024 * 1024 - 100)))
    delivered = fits.read()
    assert delivered is not None and delivered[1] == b"\x00\x04fits" + b"y" * (1024 * 1024 - 100)
    fits.close()


async def _qos2(server: MQTTServer) -> list[tuple[str, bytes, dict[str, str] | None]]:
    nc = await nats.connect(server.nats_url)
    got: list[tuple[str, bytes, dict[str, str] | None]] = []

    async def on_msg(msg: nats.aio.msg.Msg) -> None:
        got.append((msg.subject, msg.data, msg.headers))

    await nc.subscribe("q2.>", cb=on_msg)
    await nc.flush()
    subscriber = subscribed(server.mqtt_port, b"qos2-sub", b"q2/#")
    publisher = RawClient(server.mqtt_port)
    assert publisher.connect(client_id=b"qos2-pub") == 0
    publisher.send(packet(0x34, b"\x00\x04q2/x\x00\x09" + b"exactly once"))
    assert publisher.read() == (0x50, b"\x00\x09")  # PUBREC: held, not delivered yet
    assert _until_pong(subscriber) == []
    publisher.send(packet(0x3C, b"\x00\x04q2/x\x00\x09" + b"exactly once"))  # the same again (DUP)
    assert publisher.read() == (0x50, b"\x00\x09")
    publisher.send(packet(0x62, b"\x00\x09"))  # PUBREL: delivered, once
    assert publisher.read() == (0x70, b"\x00\x09")
    assert _until_pong(subscriber) == [(0x30, b"\x00\x04q2/x" + b"exactly once")]
    publisher.send(packet(0x62, b"\x00\x09"))  # released already: PUBCOMP, nothing more
    assert publisher.read() == (0x70, b"\x00\x09")
    assert _until_pong(subscriber) == []
    await nc.flush()
    await nc.close()
    publisher.close()
    subscriber.close()
    return got


def test_qos2_publish_delivered_once(mqtt_server: MQTTServer) -> None:
    got = asyncio.run(_qos2(mqtt_server))
    assert [m for m in got if m[0] == "q2.x"] == [("q2.x", b"exactly once", {"Nmqtt-Pub": "2"})]
    fields = ("subjects", "discard", "max_msgs_per_subject", "discard_new_per_subject")
    assert asyncio.run(_stream_config(mqtt_server, "$MQTT_qos2in", *fields)) == {
        "subjects": ["$MQTT.qos2.in.>"],
        "discard": "new",
        "max_msgs_per_subject": 1,
        "discard_new_per_subject": True,
    }


def test_varz_counts_mqtt_clients(mqtt_server: MQTTServer) -> None:
    before = settled_varz(mqtt_server)  # (not before nats-server took its start-up probe's connection)
    client = RawClient(mqtt_server.mqtt_port)
    assert client.connect(client_id=b"counted") == 0
    during = varz(mqtt_server)
    client.send(packet(0xE0, b""))
    assert client.closed()
    assert during["connections"] == before["connections"] + 1
    assert during["total_connections"] == before["total_connections"] + 1
