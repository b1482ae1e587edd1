"""pynatsd.mqtt.properties and the sans-IO parts of pynatsd.mqtt.v5: MQTT 5.0 properties, their checks
and their NATS headers."""

from __future__ import annotations

import pytest

from pynatsd.mqtt import properties as props
from pynatsd.mqtt.packets import Reader
from pynatsd.mqtt.v5 import V5, split_shared


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
