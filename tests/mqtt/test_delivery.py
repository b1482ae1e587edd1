"""pynatsd.mqtt.delivery's bookkeeping, without a server: packet identifiers for JetStream ack replies."""

from __future__ import annotations

from pynatsd.mqtt.delivery import (
    Delivery,
    Held,
    Session,
    ack_info,
    ack_time,
    message_qos,
    publish_header,
    pubrel_id,
)


def _ack(seq: int, deliveries: int = 1) -> bytes:
    return b"$JS.ACK.$MQTT_msgs.dur.%d.%d.%d.1700000000000000000.0" % (deliveries, seq, seq)


def test_ack_reply_fields_in_both_layouts() -> None:
    assert ack_info(_ack(7, 3)) == (7, 3)
    assert ack_info(b"$JS.ACK.hub.ACCHASH.$MQTT_msgs.dur.2.9.4.1700000000000000000.0.token") == (9, 2)
    assert ack_info(b"$JS.ACK.short") == (0, 0)


def test_headers_read_as_nats_server_reads_them() -> None:
    assert message_qos(b"NATS/1.0\r\nNmqtt-Pub:1\r\n\r\n") == 1
    assert message_qos(b"NATS/1.0\r\nNmqtt-Pub:24\r\nNmqtt-Subject:a\r\n\r\n") == 2
    assert message_qos(None) == message_qos(b"NATS/1.0\r\nOther:1\r\n\r\n") == 0
    assert pubrel_id(b"NATS/1.0\r\nNmqtt-PubRel:513\r\n\r\n") == 513
    assert pubrel_id(b"NATS/1.0\r\nNmqtt-PubRel:70000\r\n\r\n") == pubrel_id(None) == 0


def test_publish_header_flags_and_packet_id() -> None:
    assert publish_header(b"a/b", 2, 0, 0, False, False) == b"\x30\x07\x00\x03a/b"
    assert publish_header(b"a/b", 2, 1, 258, True, False) == b"\x3a\x09\x00\x03a/b\x01\x02"
    assert publish_header(b"a", 200, 2, 1, False, True)[:3] == b"\x35\xcd\x01"  # 205: a two-byte length


def test_packet_ids_follow_redeliveries_and_max_pending() -> None:
    session = Session("client", max_pending=2)
    assert session.track_publish("dur", _ack(1)) == (1, False)
    assert session.track_publish("dur", _ack(2)) == (2, False)
    assert session.track_publish("dur", _ack(3)) == (0, False)  # two in flight: JetStream redelivers later
    assert session.track_publish("dur", _ack(1, 2)) == (1, True)  # a redelivery: its identifier, DUP
    assert session.untrack_publish(1) == _ack(1, 2)
    assert session.untrack_publish(1) == b""  # acked already
    assert session.track_publish("dur", _ack(3)) == (3, False)  # (identifiers roll on, not reused at once)
    session.track_pubrel(3, b"")
    assert session.untrack_publish(3) == _ack(3)
    assert session.track_publish("dur", _ack(4)) == (4, False)  # 3 waits for its PUBCOMP
    session.forget("dur")
    assert session.pending_publish == {} and session.untrack_pubrel(3) == b""
    assert session.track_retained(b"r.x") == 5 and session.untrack_publish(5) == b""


def test_receive_maximum_holds_new_messages_in_order() -> None:
    session = Session("client", max_pending=10, receive_maximum=2)
    found = Delivery("dur", 1, False)
    assert ack_time(_ack(1)) == 1700000000000000000 and ack_time(b"$JS.ACK.short") == 0
    assert session.track_publish("dur", _ack(1)) == (1, False)
    session.track_pubrel(9, b"")  # a QoS 2 exchange until its PUBCOMP counts too
    assert session.must_wait("dur", _ack(2)) and not session.must_wait("dur", _ack(1, 2))  # (a redelivery)
    for seq in (2, 3):
        session.hold(Held(found, b"$MQTT.msgs.x", None, b"m%d" % seq, _ack(seq)))
    session.hold(Held(found, b"$MQTT.msgs.x", None, b"m2", _ack(2, 2)))  # redelivered: its place, new reply
    assert session.next_held() is None
    session.untrack_publish(1)
    held = session.next_held()
    assert held is not None and (held.payload, held.ack) == (b"m2", _ack(2, 2))
    session.forget("dur")
    assert session.held == {}
