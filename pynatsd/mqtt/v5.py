"""MQTT 5.0 clients (protocol level 5, which nats-server 2.15.1 refuses): what a 5.0 client's connection
adds to a 3.1.1 one (pynatsd.mqtt.connection), its packets and its state.

- CONNACK with a reason code and the server's properties (receive maximum, maximum QoS and retain
  available without JetStream, topic alias maximum, maximum packet size, wildcard, shared subscriptions
  and subscription identifiers available, the assigned client identifier of an empty one); a refused
  CONNECT gets the 5.0 reason code; a malformed packet a DISCONNECT with 0x81 (or 0x82, a Protocol
  Error) before the connection closes; the server's own DISCONNECTs carry their reason (0x8E session
  taken over, 0x8B shutting down, 0x8D keep alive timeout, 0x95 packet too large, 0x97 quota exceeded).
- PUBLISH properties <-> NATS headers and reply subjects (pynatsd.mqtt.properties), both ways; topic
  aliases both ways (the server's limited by the client's Topic Alias Maximum); a packet larger than the
  client's Maximum Packet Size is not sent to it [MQTT-3.1.2-25].
- SUBSCRIBE options (no local, retain as published, retain handling 0/1/2), subscription identifiers,
  shared subscriptions `$share/<group>/<filter>` as NATS queue subscriptions of queue group `<group>`
  (one delivery per group, NATS queue subscribers of that group on that subject included), UNSUBACK and
  SUBACK reason codes.
- Session Expiry Interval (0: the session ends with the connection; else it is kept that long, the
  DISCONNECT's value taking the CONNECT's place), Will Delay Interval.

- QoS 1/2 subscriptions as 3.1.1's (pynatsd.mqtt.delivery: a durable JetStream consumer each, kept while
  the session is), their deliveries with the message's properties (its Message Expiry Interval less the
  time it was stored; not sent once expired) and at most the client's Receive Maximum of them
  unacknowledged at once, the others held until a PUBACK or PUBCOMP frees a place [MQTT-4.9.0-2]. A
  PUBACK or PUBREC with an error reason code acknowledges the message all the same (no PUBREL, no
  redelivery). A shared subscription is granted QoS 0 (its group would have to share a consumer).
"""

from __future__ import annotations

import struct
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pynatsd.base.hashing import base62_sha256
from pynatsd.base.logging import get_logger
from pynatsd.mqtt import delivery, packets
from pynatsd.mqtt import properties as props
from pynatsd.mqtt.packets import PacketError, Reader
from pynatsd.mqtt.properties import Properties, ReasonError, malformed, protocol_error
from pynatsd.mqtt.store import retained

if TYPE_CHECKING:
    from pynatsd.broker.delivery import Message, Subscription
    from pynatsd.mqtt.connection import MQTTConnection
    from pynatsd.mqtt.delivery import Held

log = get_logger()

PROTOCOL_LEVEL = 5
#: QoS 2 PUBLISHes the server holds at once for a client awaiting their PUBREL (its Receive Maximum;
#: QoS 1 ones are acknowledged as they come).
RECEIVE_MAXIMUM = 1024
TOPIC_ALIAS_MAXIMUM = 1024  # (each alias keeps a topic of up to 64 KiB)
NEVER_EXPIRES = 0xFFFFFFFF
SHARE_PREFIX = b"$share/"
_NO_QUEUE_NAME = frozenset(b" \t\r\n\f\v")

# 3.1.1 CONNACK return codes -> 5.0 reason codes
_REFUSALS = {
    packets.UNACCEPTABLE_PROTOCOL_VERSION: props.UNSUPPORTED_PROTOCOL_VERSION,
    packets.IDENTIFIER_REJECTED: props.CLIENT_IDENTIFIER_NOT_VALID,
    packets.SERVER_UNAVAILABLE: props.SERVER_UNAVAILABLE,
    packets.BAD_USER_OR_PASSWORD: props.BAD_USER_NAME_OR_PASSWORD,
    packets.NOT_AUTHORIZED: props.NOT_AUTHORIZED,
}
# why the server closes a connection (MQTTConnection.close's reason) -> its DISCONNECT's reason code
_CLOSE_REASONS = {
    "Duplicate Client ID": props.SESSION_TAKEN_OVER,
    "Server Shutdown": props.SERVER_SHUTTING_DOWN,
    "Read Error": props.KEEP_ALIVE_TIMEOUT,  # (the keep-alive's; a lost connection reads nothing)
    "Maximum Payload Exceeded": props.PACKET_TOO_LARGE,
    "Slow Consumer (Pending Bytes)": props.QUOTA_EXCEEDED,
    "Protocol Violation": props.PROTOCOL_ERROR,
}


HELD_REPLY = b"Nmqtt-Reply:"  # a held QoS 2 or retained message's Response Topic (its reply subject)
# A stored QoS 1/2 message's 5.0 publisher (a hash of its client ID), for its No Local subscriptions
HELD_PUBLISHER = b"Nmqtt-Publisher:"


def nats_headers(qos: int, lines: bytes) -> bytes | None:
    """The NATS headers of an MQTT 5.0 message with header `lines` (None: `Nmqtt-Pub` alone)."""
    return b"NATS/1.0\r\nNmqtt-Pub:%d\r\n%s\r\n" % (qos, lines) if lines else None


def is_v5(body: bytes) -> bool:
    """Whether a CONNECT's body asks for protocol level 5."""
    return len(body) > 6 and body[:6] == b"\x00\x04MQTT" and body[6] == PROTOCOL_LEVEL


def _packet(first: int, body: bytes) -> bytes:
    return bytes((first,)) + props.varint(len(body)) + body


def disconnect(reason: int) -> bytes:
    return _packet(packets.DISCONNECT, bytes((reason,)) + b"\x00")


def connack(
    reason: int, present: bool = False, values: list[tuple[int, int | str | bytes]] | None = None
) -> bytes:
    flags = 1 if present and reason == props.SUCCESS else 0
    return _packet(packets.CONNACK, bytes((flags, reason)) + props.encode(values or []))


def ack(kind: int, packet_id: int, reason: int) -> bytes:
    """A PUBACK, PUBREC, PUBREL or PUBCOMP (the reason left out when it is Success [MQTT-3.4.2.1])."""
    if reason == props.SUCCESS:
        return bytes((kind | (0x02 if kind == packets.PUBREL else 0), 2)) + struct.pack(">H", packet_id)
    return _packet(kind, struct.pack(">H", packet_id) + bytes((reason,)))


def split_shared(topic_filter: bytes) -> tuple[bytes | None, bytes]:
    """(share group or None, topic filter) of a SUBSCRIBE's filter; Protocol Error for a malformed
    `$share/` one [MQTT-4.8.2-1/2]."""
    if not topic_filter.startswith(SHARE_PREFIX):
        return None, topic_filter
    group, sep, rest = topic_filter[len(SHARE_PREFIX) :].partition(b"/")
    if not sep or not group or not rest or b"+" in group or b"#" in group:
        raise protocol_error(f"malformed shared subscription {topic_filter!r}")
    return group, rest


@dataclass
class SubOptions:
    """A 5.0 subscription's options, kept by the sids of its NATS subscriptions."""

    no_local: bool
    retain_as_published: bool
    subscription_id: int


class V5:
    """The 5.0 state and packets of one MQTTConnection (its `v5`)."""

    def __init__(self, conn: MQTTConnection) -> None:
        self.conn = conn
        self.session_expiry = 0  # seconds the session outlives the connection (NEVER_EXPIRES: always)
        self.client_receive_maximum = 65535
        self.client_max_packet = 0  # 0: no limit but the protocol's
        self.client_alias_maximum = 0
        self.will_delay = 0
        self.will_headers: bytes | None = None
        self.will_reply: bytes | None = None
        self.assigned = False  # the server named the client
        self.sent_disconnect = False
        self.client_disconnected = False
        self.in_aliases: dict[int, bytes] = {}
        self.out_aliases: dict[bytes, int] = {}
        self.options: dict[bytes | int, SubOptions] = {}
        self.held_qos2: set[int] = set()
        # retained messages a SUBSCRIBE matched, waiting for the client's Receive Maximum to let them go:
        # (the filter's subject, topic, payload, QoS, properties, subscription ids)
        self.waiting_retained: deque[tuple[bytes, bytes, bytes, int, props.Delivered, list[int]]] = deque()
        self._publisher = b""
        # its subscriptions as the session record keeps them: sid -> [subject, share group, options, id]
        self.stored: dict[str, list[Any]] = {}

    # -- CONNECT / CONNACK ----------------------------------------------------------------------------
    def connect(self, connect: packets.Connect) -> None:
        """Take a 5.0 CONNECT's properties (ReasonError for one the server does not serve)."""
        p = connect.properties or Properties()
        if props.AUTH_METHOD in p.values:
            raise ReasonError(props.BAD_AUTHENTICATION_METHOD, "enhanced authentication is not supported")
        if props.AUTH_DATA in p.values:
            raise protocol_error("Authentication Data without Authentication Method")
        self.session_expiry = p.number(props.SESSION_EXPIRY)
        self.client_receive_maximum = p.number(props.RECEIVE_MAXIMUM, 65535)
        self.client_max_packet = p.number(props.MAXIMUM_PACKET_SIZE)
        self.client_alias_maximum = p.number(props.TOPIC_ALIAS_MAXIMUM)
        if connect.will is not None:
            wp = connect.will_properties or Properties()
            self.will_delay = wp.number(props.WILL_DELAY)
            lines, self.will_reply = self.headers_of(wp)
            self.will_headers = nats_headers(connect.will.qos, lines)
        if not connect.client_id:
            self.assigned = True

    def headers_of(self, p: Properties) -> tuple[bytes, bytes | None]:
        """(NATS header lines, reply subject or None) of a PUBLISH's (or will's) properties. ReasonError
        for one a NATS message cannot carry."""
        try:
            lines = props.header_lines(p)
        except ValueError as exc:
            raise ReasonError(props.IMPLEMENTATION_SPECIFIC_ERROR, str(exc)) from None
        reply = None
        response_topic = p.text(props.RESPONSE_TOPIC)
        if response_topic is not None:
            try:
                reply = packets.topic_to_subject(response_topic.encode())
            except PacketError:
                raise protocol_error(f"invalid Response Topic {response_topic!r}") from None
        return lines.encode(), reply

    def released(self, extra: bytes) -> tuple[bytes | None, bytes | None]:
        """(NATS headers, reply) of a QoS 2 message held with `extra` header lines (see `publish`)."""
        reply = None
        lines = []
        for line in extra.split(b"\r\n"):
            if line.startswith(HELD_REPLY):
                reply = line[len(HELD_REPLY) :]
            elif line:
                lines.append(line + b"\r\n")
        return nats_headers(2, b"".join(lines)), reply

    def connack(self, present: bool, max_payload: int) -> bytes:
        """The CONNACK accepting it (`max_payload`: the longest packet the server takes)."""
        conn = self.conn
        values: list[tuple[int, int | str | bytes]] = [(props.RECEIVE_MAXIMUM, RECEIVE_MAXIMUM)]
        if conn.listener.jetstream is None:
            values += [(props.MAXIMUM_QOS, 0), (props.RETAIN_AVAILABLE, 0)]
        values += [
            (props.MAXIMUM_PACKET_SIZE, max_payload),
            (props.TOPIC_ALIAS_MAXIMUM, TOPIC_ALIAS_MAXIMUM),
            (props.WILDCARD_AVAILABLE, 1),
            (props.SUBSCRIPTION_IDS_AVAILABLE, 1),
            (props.SHARED_AVAILABLE, 1),
        ]
        if self.assigned:
            values.append((props.ASSIGNED_CLIENT_ID, conn.client_id))
        return connack(props.SUCCESS, present, values)

    def refused(self, code: int) -> bytes:
        """The CONNACK of a CONNECT refused with 3.1.1 return code `code`."""
        return connack(_REFUSALS.get(code, props.UNSPECIFIED_ERROR))

    def refuse(self, exc: PacketError) -> None:
        """A packet the server refuses: CONNACK or DISCONNECT with its reason, then (the caller) close."""
        reason = exc.reason if isinstance(exc, ReasonError) else props.MALFORMED_PACKET
        if isinstance(exc, packets.TooLarge):
            reason = props.PACKET_TOO_LARGE
        if not self.conn.connected:
            self.conn._write(connack(reason))
        else:
            self.conn._write(disconnect(reason))
        self.sent_disconnect = True

    # -- packets after the CONNECT ---------------------------------------------------------------------
    def packet(self, first: int, body: bytes) -> bool:
        """A packet that 5.0 reads differently; False for one MQTTConnection reads as for 3.1.1."""
        kind = first & 0xF0
        if kind == packets.PUBLISH:
            self.publish(first, body)
        elif kind == packets.SUBSCRIBE:
            self.subscribe(body)
        elif kind == packets.UNSUBSCRIBE:
            self.unsubscribe(body)
        elif kind == packets.DISCONNECT:
            self.disconnected(body)
        elif kind == packets.PUBREL:
            pid = packets.packet_id(body)
            self.held_qos2.discard(pid)
            self.conn._release(pid)
        elif kind == packets.PUBACK:  # (an error reason code too: the message is not sent again)
            self.conn._acked(packets.packet_id(body))
        elif kind == packets.PUBREC:
            pid = packets.packet_id(body)
            if len(body) > 2 and body[2] >= 0x80:  # the exchange ends: no PUBREL [MQTT-4.3.3]
                self.conn._acked(pid)
            else:
                self.conn._received(pid)
        elif kind == packets.PUBCOMP:
            self.conn._completed(packets.packet_id(body))
        elif kind == 0xF0:
            raise protocol_error("AUTH without an Authentication Method in the CONNECT")
        else:
            return False
        return True

    def disconnected(self, body: bytes) -> None:
        """The client's DISCONNECT: its reason (0x04 keeps the will) and a new Session Expiry Interval."""
        conn = self.conn
        r = Reader(body)
        reason = r.byte("reason code") if r.more() else props.SUCCESS
        p = props.parse(r, packets.DISCONNECT) if r.more() else Properties()
        if props.SESSION_EXPIRY in p.values:
            expiry = p.number(props.SESSION_EXPIRY)
            if self.session_expiry == 0 and expiry:
                raise protocol_error("Session Expiry Interval set at DISCONNECT after 0 at CONNECT")
            self.session_expiry = expiry
            conn.clean = expiry == 0
        self.client_disconnected = True
        if reason != props.DISCONNECT_WITH_WILL:
            conn.will = None
        conn.close("Client Closed")

    def publish(self, first: int, body: bytes) -> None:
        conn = self.conn
        qos = (first & 0x06) >> 1
        if qos > 2:
            raise malformed(f"QoS={qos} is invalid in MQTT")
        retain = bool(first & 0x01)
        js = conn.listener.jetstream
        if js is None and qos:
            raise ReasonError(props.QOS_NOT_SUPPORTED, f"QoS {qos} is not available without JetStream")
        if js is None and retain:
            raise ReasonError(props.RETAIN_NOT_SUPPORTED, "retain is not available without JetStream")
        r = Reader(body)
        topic = r.data("topic")
        packet_id = r.uint16("packet identifier") if qos else 0
        if qos and packet_id == 0:
            raise protocol_error(f"with QoS={qos}, packet identifier cannot be 0")
        p = props.parse(r, packets.PUBLISH)
        if p.subscription_ids:
            raise protocol_error("a PUBLISH to the server with a Subscription Identifier")
        alias = p.values.get(props.TOPIC_ALIAS)
        if isinstance(alias, int):
            if alias > TOPIC_ALIAS_MAXIMUM:
                raise ReasonError(props.TOPIC_ALIAS_INVALID, f"topic alias {alias} above the maximum")
            if topic:
                self.in_aliases[alias] = topic
            else:
                known = self.in_aliases.get(alias)
                if known is None:
                    raise protocol_error(f"topic alias {alias} not set")
                topic = known
        if not topic:
            raise protocol_error("topic cannot be empty")
        try:
            packets.checked_text(topic, "topic")
            subject = packets.topic_to_subject(topic)
        except PacketError as exc:
            raise ReasonError(props.TOPIC_NAME_INVALID, str(exc)) from None
        payload = body[r.pos :]
        kind = packets.PUBREC if qos == 2 else packets.PUBACK
        if p.number(props.PAYLOAD_FORMAT) == 1:
            try:
                payload.decode()
            except UnicodeDecodeError:
                self._refuse_publish(kind, qos, packet_id, props.PAYLOAD_FORMAT_INVALID, "not UTF-8")
                return
        try:
            lines, reply = self.headers_of(p)
        except ReasonError as exc:
            if exc.reason == props.PROTOCOL_ERROR:
                raise
            self._refuse_publish(kind, qos, packet_id, exc.reason, str(exc))
            return
        if not conn.may_publish(subject):
            if qos:
                conn._write(ack(kind, packet_id, props.NOT_AUTHORIZED))
            return
        if qos == 2:
            if packet_id not in self.held_qos2 and len(self.held_qos2) >= RECEIVE_MAXIMUM:
                raise ReasonError(props.RECEIVE_MAXIMUM_EXCEEDED, "receive maximum exceeded")
            self.held_qos2.add(packet_id)
            conn._hold_qos2(
                packets.Publish(topic, subject, qos, retain, bool(first & 0x08), packet_id, payload),
                lines if reply is None else lines + HELD_REPLY + reply + b"\r\n",
            )
        elif (
            conn._deliver(topic, subject, payload, qos, retain, nats_headers(qos, lines), reply) and qos == 1
        ):
            conn._write(ack(packets.PUBACK, packet_id, props.SUCCESS))

    @staticmethod
    def not_found(packet_id: int) -> bytes:
        """The PUBCOMP of a PUBREL for a packet identifier the server holds nothing for."""
        return ack(packets.PUBCOMP, packet_id, props.PACKET_ID_NOT_FOUND)

    def _refuse_publish(self, kind: int, qos: int, packet_id: int, reason: int, why: str) -> None:
        log.error("%r - PUBLISH refused (reason 0x%02x): %s", self.conn, reason, why)
        if qos:
            self.conn._write(ack(kind, packet_id, reason))

    # -- SUBSCRIBE / UNSUBSCRIBE -----------------------------------------------------------------------
    def subscribe(self, body: bytes) -> None:
        conn = self.conn
        r = Reader(body)
        packet_id = r.uint16("packet identifier")
        p = props.parse(r, packets.SUBSCRIBE)
        sub_id = p.subscription_ids[0] if p.subscription_ids else 0
        wanted: list[tuple[bytes | None, bytes | None, int, int]] = []
        while r.more():
            raw = r.data("topic filter")
            options = r.byte("subscription options")
            if options & 0xC0:
                raise malformed("reserved bits of the subscription options set")
            if (options >> 4) & 0x03 == 3:
                raise protocol_error("retain handling 3")
            group, topic_filter = split_shared(raw)
            if group is not None and options & 0x04:
                raise protocol_error("no local on a shared subscription")
            if not topic_filter:
                raise malformed("topic filter cannot be empty")
            try:
                packets.checked_text(raw, "topic filter")
                subject: bytes | None = packets.filter_to_subject(topic_filter)
            except PacketError:
                subject = None
            if group is not None and _NO_QUEUE_NAME.intersection(group):
                subject = None  # (a NATS queue group has no whitespace)
            wanted.append((group, subject, options, options & 0x03))
        if not wanted:
            raise protocol_error("subscribe protocol must contain at least 1 topic filter")
        granted: list[int] = []
        retained: list[tuple[bytes, int, int]] = []
        for group, subject, options, qos in wanted:
            if subject is None or subject.startswith(packets.NATS_PREFIX.encode()):
                granted.append(props.TOPIC_FILTER_INVALID)
                continue
            existed = self._sid(subject, group) in conn.subs
            code = conn._add_filter(subject, qos, group)
            if code == packets.SUBACK_FAILURE and qos:
                code = conn._add_filter(subject, 0, group)  # (QoS 1/2 deliveries are not served yet)
            if code == packets.SUBACK_FAILURE:
                granted.append(props.NOT_AUTHORIZED)
                continue
            granted.append(code)
            self._set_options(subject, group, options, sub_id)
            self.stored[self._sid(subject, group).decode()] = [
                subject.decode(),
                (group or b"").decode(),
                options & 0x0C,
                sub_id,
            ]
            handling = (options >> 4) & 0x03
            if group is None and (handling == 0 or (handling == 1 and not existed)):
                retained.append((subject, sub_id, code))
            if group is None:
                conn.session_subs[subject.decode()] = code
        conn._write(_packet(packets.SUBACK, struct.pack(">H", packet_id) + b"\x00" + bytes(granted)))
        js = conn.listener.jetstream
        if js is None:
            return
        conn._save_session()
        for subject, sub_id, code in retained:
            self.send_retained(subject, sub_id, code)

    def _set_options(self, subject: bytes, group: bytes | None, options: int, sub_id: int) -> None:
        opts = SubOptions(bool(options & 0x04), bool(options & 0x08), sub_id)
        for sid in self._sids(subject, group):
            self.options[sid] = opts

    def restore(self, record: dict[str, Any]) -> None:
        """A stored session's 5.0 subscriptions: their options, and the shared ones (the others are in
        the record's `subs`, as 3.1.1's)."""
        conn = self.conn
        stored = record.get("v5")
        for key, entry in (stored if isinstance(stored, dict) else {}).items():
            try:
                subject, group, options, sub_id = entry
                queue = group.encode() or None
                # (one not shared is restored from the record's `subs`, with its QoS)
                restored = (
                    queue is None or conn._add_filter(subject.encode(), 0, queue) != packets.SUBACK_FAILURE
                )
            except (TypeError, ValueError, AttributeError):
                restored = False
            if not restored:
                log.error("%r - subscription %r of the stored session not restored", conn, key)
                continue
            self._set_options(subject.encode(), queue, int(options), int(sub_id))
            self.stored[key] = entry

    def _sid(self, subject: bytes, group: bytes | None) -> bytes:
        return subject if group is None else subject + b" $share " + group

    def _sids(self, subject: bytes, group: bytes | None) -> list[bytes]:
        sids = [self._sid(subject, group)]
        if len(subject) > 2 and subject.endswith(b".>"):
            sids.append(self._sid(subject[:-2] + b" fwc", group))
        return sids

    def unsubscribe(self, body: bytes) -> None:
        conn = self.conn
        r = Reader(body)
        packet_id = r.uint16("packet identifier")
        props.parse(r, packets.UNSUBSCRIBE)
        codes: list[int] = []
        while r.more():
            raw = r.data("topic filter")
            group, topic_filter = split_shared(raw)
            try:
                subject = packets.filter_to_subject(topic_filter)
            except PacketError:
                codes.append(props.TOPIC_FILTER_INVALID)
                continue
            found = False
            for sid in self._sids(subject, group):
                found |= sid in conn.subs
                conn._drop(sid)
                conn._drop_consumer(sid)
                self.options.pop(sid, None)
            self.stored.pop(self._sid(subject, group).decode(), None)
            if group is None:
                conn.session_subs.pop(subject.decode(), None)
            codes.append(props.SUCCESS if found else props.NO_SUBSCRIPTION_EXISTED)
        if not codes:
            raise protocol_error("unsubscribe protocol must contain at least 1 topic filter")
        conn._write(_packet(packets.UNSUBACK, struct.pack(">H", packet_id) + b"\x00" + bytes(codes)))
        if conn.listener.jetstream is not None:
            conn._save_session()

    def send_retained(self, subject: bytes, sub_id: int, sub_qos: int) -> None:
        """The retained messages a new subscription matches (RETAIN set), with their properties, each with
        the lower of its QoS and the subscription's."""
        conn = self.conn
        js = conn.listener.jetstream
        if js is None:
            return
        found = retained(js, conn.account, subject)
        if len(subject) > 2 and subject.endswith(b".>"):
            found += retained(js, conn.account, subject[:-2])
        perms = conn.perms
        now = time.time_ns()
        for stored_subject, topic, payload, stored_qos, headers, stored_at in found:
            if perms is not None and perms.sub_deny and perms.delivery_denied(stored_subject):
                continue
            delivered = self._delivered(headers, (now - stored_at) // 1_000_000_000)
            if delivered is not None:
                ids = [sub_id] if sub_id else []
                self.waiting_retained.append(
                    (subject, topic, payload, min(stored_qos, sub_qos), delivered, ids)
                )
        self.send_waiting()

    def send_waiting(self) -> None:
        """The retained messages waiting, in order, as far as the client's Receive Maximum lets QoS 1/2 ones
        go (each with a packet identifier of its own, nothing to ack in JetStream)."""
        conn, session, waiting = self.conn, self.conn.session, self.waiting_retained
        while waiting:
            subject, topic, payload, qos, delivered, ids = waiting[0]
            pi = 0
            if qos and session is not None:
                if session.receive_full():
                    return
                pi = session.track_retained(subject)
                if not pi:
                    return
            waiting.popleft()
            packet = self.publish_packet(topic, payload, True, delivered, ids, qos if pi else 0, pi)
            if packet is not None:
                conn._write(packet)
            elif pi and session is not None:
                session.untrack_publish(pi)

    def publisher(self) -> bytes:
        """What a stored message this client publishes says of its publisher (a hash of its client ID)."""
        if not self._publisher:
            self._publisher = base62_sha256(self.conn.client_id, 16).encode()
        return self._publisher

    def is_local(self, found: delivery.Delivery, headers: bytes | None) -> bool:
        """Whether a consumer's message is one this client published and its filter is No Local."""
        opts = self.options.get(found.sid)
        if opts is None or not opts.no_local or not headers:
            return False
        return b"\r\n" + HELD_PUBLISHER + self.publisher() + b"\r\n" in headers

    def stored_packet(self, held: Held, topic: bytes, qos: int, packet_id: int, dup: bool) -> bytes | None:
        """The QoS 1/2 PUBLISH of a consumer's message (as `publish_packet`); None if it is not sent (too
        large, or expired: its Message Expiry Interval is counted from when it was stored)."""
        stored_at = delivery.ack_time(held.ack)
        age = (time.time_ns() - stored_at) // 1_000_000_000 if stored_at else 0
        delivered = self._delivered(held.headers or b"", max(age, 0))
        if delivered is None:
            return None
        opts = self.options.get(held.found.sid)
        ids = [opts.subscription_id] if opts is not None and opts.subscription_id else []
        return self.publish_packet(topic, held.payload, False, delivered, ids, qos, packet_id, dup)

    def _delivered(self, headers: bytes, age: int) -> props.Delivered | None:
        """The properties of a held message (its Response Topic a `Nmqtt-Reply` header) `age` seconds old;
        None once expired."""
        reply = None
        for line in headers.split(b"\r\n"):
            if line.startswith(HELD_REPLY):
                reply = line[len(HELD_REPLY) :]
        delivered = props.from_headers(headers, reply, packets.subject_to_topic(reply or b""))
        return delivered if self._age(delivered, age) else None

    @staticmethod
    def _age(delivered: props.Delivered, seconds: int) -> bool:
        """Take `seconds` off the message's expiry; False once it has expired."""
        for i, (pid, value) in enumerate(delivered.values):
            if pid == props.MESSAGE_EXPIRY and isinstance(value, int):
                if value <= seconds:
                    return False
                delivered.values[i] = (pid, value - seconds)
        return True

    # -- deliveries --------------------------------------------------------------------------------------
    def deliver(self, sub: Subscription, msg: Message, topic: bytes, retain: bool) -> bytes | None:
        """The PUBLISH of `msg` for `sub`, or None when it is not sent (no local, too large)."""
        opts = self.options.get(sub.sid)
        if opts is not None and opts.no_local and msg.origin is self.conn:
            return None
        reply = msg.reply
        reply_topic = packets.subject_to_topic(reply) if reply is not None else None
        delivered = props.from_headers(msg.headers, reply, reply_topic)
        ids = [opts.subscription_id] if opts is not None and opts.subscription_id else []
        keep_retain = retain and opts is not None and opts.retain_as_published
        return self.publish_packet(topic, msg.payload, keep_retain, delivered, ids)

    def publish_packet(
        self,
        topic: bytes,
        payload: bytes,
        retain: bool,
        delivered: props.Delivered,
        ids: list[int],
        qos: int = 0,
        packet_id: int = 0,
        dup: bool = False,
    ) -> bytes | None:
        """A PUBLISH to the client (with a topic alias where it takes them; `packet_id` with QoS 1/2); None if
        it would be larger than the client's Maximum Packet Size (not sent, as the spec says)."""
        values = list(delivered.values)
        values += [(props.SUBSCRIPTION_ID, sub_id) for sub_id in ids]
        alias = self.out_aliases.get(topic, 0)
        new_alias = 0
        if not alias and len(self.out_aliases) < self.client_alias_maximum:
            new_alias = len(self.out_aliases) + 1
        if alias or new_alias:
            values.append((props.TOPIC_ALIAS, alias or new_alias))
        sent_topic = b"" if alias else topic
        ident = struct.pack(">H", packet_id) if qos else b""
        encoded = props.encode(values, delivered.user)
        body = struct.pack(">H", len(sent_topic)) + sent_topic + ident + encoded + payload
        first = packets.PUBLISH | (0x08 if dup else 0) | qos << 1 | (0x01 if retain else 0)
        packet = _packet(first, body)
        if self.client_max_packet and len(packet) > self.client_max_packet:
            log.debug("%r - PUBLISH of %d bytes above the client's maximum: not sent", self.conn, len(packet))
            return None
        if new_alias:
            self.out_aliases[topic] = new_alias
        return packet

    # -- the end -------------------------------------------------------------------------------------------
    def closing(self, reason: str) -> None:
        """The connection closes (its packets not flushed yet): the server's DISCONNECT with its reason,
        unless the client disconnected or the server already said why."""
        conn = self.conn
        if not conn.connected or self.client_disconnected or self.sent_disconnect:
            return
        code = _CLOSE_REASONS.get(reason)
        if code is not None:
            conn._pending.append(disconnect(code))
            self.sent_disconnect = True

    def delay_will(self, will: packets.Will) -> bool:
        """Hold the will for its Will Delay Interval (or the session's expiry, if sooner); True when held.
        A new connection for the session before then discards it (`resumed`)."""
        delay = min(self.will_delay, self.session_expiry)
        if delay <= 0:
            return False
        conn = self.conn
        key = (conn.account, conn.client_id)

        def publish_will() -> None:
            conn.listener.delayed_wills.pop(key, None)
            self.publish_will(will)

        timer = conn.server.loop.call_later(delay, publish_will)
        conn.listener.delayed_wills[key] = (timer, publish_will)
        return True

    def publish_will(self, will: packets.Will) -> None:
        self.conn._deliver(
            will.topic, will.subject, will.message, will.qos, will.retain, self.will_headers, self.will_reply
        )

    def resumed(self, fresh: bool) -> None:
        """This client connected: a will delayed for its session is dropped, or published now when the
        session does not go on (a clean start) [MQTT-3.1.3-9]."""
        conn = self.conn
        held = conn.listener.delayed_wills.pop((conn.account, conn.client_id), None)
        if held is None:
            return
        timer, publish_will = held
        timer.cancel()
        if fresh:
            publish_will()

    def expires(self) -> float | None:
        """When this session's record expires (epoch seconds), from now; None: never."""
        if self.session_expiry >= NEVER_EXPIRES:
            return None
        return time.time() + self.session_expiry
