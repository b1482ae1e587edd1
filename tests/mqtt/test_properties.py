"""pynatsd.mqtt.properties and the sans-IO parts of pynatsd.mqtt.v5: MQTT 5.0 properties, their checks
and their NATS headers."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from pynatsd.base.blocks import MQTTOptions
from pynatsd.broker.core import Broker
from pynatsd.mqtt import properties as props
from pynatsd.mqtt.connection import MQTTConnection
from pynatsd.mqtt.listener import MQTTListener
from pynatsd.mqtt.packets import Reader
from pynatsd.mqtt.v5 import V5, split_shared
from tests.mqtt.test_v5 import connect5


def parsed(raw: bytes, where: int = 0x30) -> props.Properties:
    return props.parse(Reader(raw), where)


def test_every_type_round_trips() -> None:
    values: list[tuple[int, int | str | bytes]] = [
        (props.PAYLOAD_FORMAT, 1),
        (props.TOPIC_ALIAS, 300),
        (props.MESSAGE_EXPIRY, 70_000),
        (props.SUBSCRIPTION_ID, 268_435_455),
        (props.CONTENT_TYPE, "text/é"),
        (props.CORRELATION_DATA, b"\x00\xff"),
    ]
    p = parsed(props.encode(values, [("a", "1"), ("a", "2")]))
    assert p.values == dict(values) and p.user == [("a", "1"), ("a", "2")]
    assert p.subscription_ids == [268_435_455]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\x06\x23\x00\x01\x23\x00\x02", props.PROTOCOL_ERROR),  # Topic Alias twice
        (b"\x02\x01\x02", props.PROTOCOL_ERROR),  # Payload Format Indicator 2
        (b"\x03\x23\x00\x00", props.PROTOCOL_ERROR),  # Topic Alias 0
        (b"\x05\x11\x00\x00\x00\x01", props.MALFORMED_PACKET),  # Session Expiry Interval in a PUBLISH
        (b"\x02\x7f\x00", props.MALFORMED_PACKET),  # no such property
        (b"\x02\x23\x00", props.MALFORMED_PACKET),  # a two-byte integer cut short
        (b"\x09\x00", props.MALFORMED_PACKET),  # a length past the packet
        (b"\xff\xff\xff\xff\x01", props.MALFORMED_PACKET),  # a five-byte variable byte integer
    ],
)
def test_refused_properties(raw: bytes, reason: int) -> None:
    with pytest.raises(props.ReasonError) as refused:
        parsed(raw)
    assert refused.value.reason == reason


def test_headers_both_ways() -> None:
    p = props.Properties(
        {props.CONTENT_TYPE: "a/b", props.CORRELATION_DATA: b"id", props.MESSAGE_EXPIRY: 5}, [("x", "1 2")]
    )
    lines = props.header_lines(p)
    assert lines == "Content-Type:a/b\r\nNmqtt-Correlation-Data:aWQ=\r\nNmqtt-Message-Expiry:5\r\nx:1 2\r\n"
    back = props.from_headers(b"NATS/1.0\r\nNmqtt-Pub:1\r\n" + lines.encode() + b"\r\n", b"r.s", b"r/s")
    assert back.values == [
        (props.RESPONSE_TOPIC, "r/s"),
        (props.CONTENT_TYPE, "a/b"),
        (props.CORRELATION_DATA, b"id"),
        (props.MESSAGE_EXPIRY, 5),
    ]
    assert back.user == [("x", "1 2")]
    for name, value in [
        ("a:b", "v"),
        ("a b", "v"),
        ("", "v"),
        ("k", "v\r\n"),
        ("nmqtt-pub", "1"),
        ("content-type", "x"),
    ]:
        with pytest.raises(ValueError):
            props.header_lines(props.Properties(user=[(name, value)]))


def test_shared_filters() -> None:
    assert split_shared(b"$share/g/a/#") == (b"g", b"a/#")
    assert split_shared(b"a/$share/g") == (None, b"a/$share/g")
    for bad in (b"$share/g", b"$share//a", b"$share/g+/a", b"$share/g#/a"):
        with pytest.raises(props.ReasonError):
            split_shared(bad)


def test_an_expired_retained_message_is_not_sent() -> None:
    delivered = props.Delivered([(props.CONTENT_TYPE, "x"), (props.MESSAGE_EXPIRY, 10)], [])
    assert V5._age(delivered, 4) and delivered.values[1] == (props.MESSAGE_EXPIRY, 6)
    assert not V5._age(delivered, 6)


class Transport:
    """What a connection writes."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 1) if name == "peername" else default


async def _without_jetstream(data: bytes, then: str | None = None) -> bytes:
    """What a 5.0 client of a listener without JetStream reads after sending its CONNECT and `data`, and
    the server closing it for `then`."""
    broker = Broker()
    broker.loop = asyncio.get_running_loop()
    listener = MQTTListener(broker, MQTTOptions(), None)
    conn = MQTTConnection(listener.server, listener)
    transport = Transport()
    conn.connection_made(cast(asyncio.Transport, transport))
    conn.data_received(connect5(client_id=b"nojs") + data)
    await asyncio.sleep(0)  # (writes go out at the end of the loop's turn)
    if then is not None:
        conn.close(then)
    return bytes(transport.written)


def test_without_jetstream_and_the_servers_disconnects() -> None:
    connack = asyncio.run(_without_jetstream(b""))
    r = Reader(connack[2:])
    r.pos = 2
    p = props.parse(r, 0x20)
    assert connack[:4] == b"\x20" + bytes((connack[1],)) + b"\x00\x00"
    assert (p.values[props.MAXIMUM_QOS], p.values[props.RETAIN_AVAILABLE]) == (0, 0)
    retained = asyncio.run(_without_jetstream(b"\x31\x04\x00\x01a\x00"))
    assert retained.endswith(b"\xe0\x02" + bytes((props.RETAIN_NOT_SUPPORTED,)) + b"\x00")
    qos1 = asyncio.run(_without_jetstream(b"\x32\x06\x00\x01a\x00\x01\x00"))
    assert qos1.endswith(b"\xe0\x02" + bytes((props.QOS_NOT_SUPPORTED,)) + b"\x00")
    shutdown = asyncio.run(_without_jetstream(b"", "Server Shutdown"))
    assert shutdown.endswith(b"\xe0\x02" + bytes((props.SERVER_SHUTTING_DOWN,)) + b"\x00")
    keep_alive = asyncio.run(_without_jetstream(b"", "Read Error"))
    assert keep_alive.endswith(b"\xe0\x02" + bytes((props.KEEP_ALIVE_TIMEOUT,)) + b"\x00")
    client_closed = asyncio.run(_without_jetstream(b"\xe0\x00"))
    assert client_closed == connack  # nothing after the client's own DISCONNECT
