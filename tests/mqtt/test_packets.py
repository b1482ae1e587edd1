"""pynatsd.mqtt.packets, sans-IO: nats-server's topic <-> subject conversion and the framing checks."""

from __future__ import annotations

import pytest

from pynatsd.mqtt import packets
from pynatsd.mqtt.packets import PacketError


@pytest.mark.parametrize(
    ("topic", "subject"),
    [
        (b"foo", b"foo"),
        (b"foo/bar", b"foo.bar"),
        (b"/foo", b"/.foo"),
        (b"foo/", b"foo./"),
        (b"foo//bar", b"foo./.bar"),
        (b"//", b"/././"),
        (b"/", b"/./"),
        (b"foo.bar", b"foo//bar"),
        (b"foo.", b"foo//"),
        (b"a/b.c/d", b"a.b//c.d"),
    ],
)
def test_topic_subject_both_ways(topic: bytes, subject: bytes) -> None:
    assert packets.topic_to_subject(topic) == subject
    assert packets.subject_to_topic(subject) == topic


def test_filters_and_refusals() -> None:
    assert packets.filter_to_subject(b"a/+/#") == b"a.*.>"
    assert packets.filter_to_subject(b"#") == b">"
    for bad in (b"a b", b"a\tb", b"a\x7fb"):
        with pytest.raises(PacketError, match="character not supported for MQTT topics"):
            packets.topic_to_subject(bad)
    with pytest.raises(PacketError, match="wildcards not allowed"):
        packets.topic_to_subject(b"a/+")
    assert packets.is_reserved_filter(b">") and packets.is_reserved_filter(b"*.x")
    assert not packets.is_reserved_filter(b"$x.>")


def test_split_packet() -> None:
    body = b"x" * 200
    data = bytes((0x30,)) + bytes((200 & 0x7F | 0x80, 200 >> 7)) + body
    assert packets.split_packet(data, 0, 0) == (0x30, 3, 203)
    assert packets.split_packet(data[:100], 0, 0) is None  # not all there yet
    with pytest.raises(PacketError, match="maximum payload exceeded"):
        packets.split_packet(data, 0, 100)
    with pytest.raises(PacketError, match="malformed variable int"):
        packets.split_packet(b"\x30\xff\xff\xff\xff\x01", 0, 0)
    with pytest.raises(PacketError, match="invalid fixed header flags"):
        packets.split_packet(b"\x81\x00", 0, 0)
    with pytest.raises(PacketError, match="invalid remaining length"):
        packets.split_packet(b"\xe0\x01\x00", 0, 0)
