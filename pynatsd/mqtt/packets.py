"""MQTT 3.1.1 packets, sans-IO: framing, the fields nats-server reads and checks (with its error texts),
the packets the server writes, and nats-server's topic <-> subject conversion."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

if TYPE_CHECKING:
    from pynatsd.mqtt.properties import Properties

CONNECT = 0x10
CONNACK = 0x20
PUBLISH = 0x30
PUBACK = 0x40
PUBREC = 0x50
PUBREL = 0x60
PUBCOMP = 0x70
SUBSCRIBE = 0x80
SUBACK = 0x90
UNSUBSCRIBE = 0xA0
UNSUBACK = 0xB0
PINGREQ = 0xC0
PINGRESP = 0xD0
DISCONNECT = 0xE0

PROTOCOL_NAME = b"MQTT"
PROTOCOL_LEVEL = 4  # 3.1.1

# CONNACK return codes
ACCEPTED = 0
UNACCEPTABLE_PROTOCOL_VERSION = 1
IDENTIFIER_REJECTED = 2
SERVER_UNAVAILABLE = 3
BAD_USER_OR_PASSWORD = 4
NOT_AUTHORIZED = 5

SUBACK_FAILURE = 0x80

# CONNECT flags
_CLEAN_SESSION = 0x02
_WILL = 0x04
_WILL_QOS = 0x18
_WILL_RETAIN = 0x20
_PASSWORD = 0x40
_USERNAME = 0x80

WILL_PROPERTIES = 0x100  # where a 5.0 will's properties are read (no packet type)

MAX_REMAINING_LENGTH = 0xFFFFFFF  # four bytes of variable length
NATS_PREFIX = "$MQTT."  # nats-server's internal subjects: no MQTT client subscribes to them

_FIXED_FLAGS = {
    CONNECT: 0,
    PUBACK: 0,
    PUBREC: 0,
    PUBCOMP: 0,
    PINGREQ: 0,
    DISCONNECT: 0,
    PUBREL: 2,
    SUBSCRIBE: 2,
    UNSUBSCRIBE: 2,
}
_FIXED_LENGTH = {PUBACK: 2, PUBREC: 2, PUBREL: 2, PUBCOMP: 2, PINGREQ: 0, DISCONNECT: 0}
_WHITESPACE = frozenset(b" \t\n\r\f")
_INVALID_NAME = frozenset(b" \t\r\n\f.*>")


@mypyc_attr(allow_interpreted_subclasses=True)  # pynatsd.mqtt.properties' ReasonError is one
class PacketError(Exception):
    """A malformed packet: the connection is closed (nats-server's text)."""


class TooLarge(PacketError):
    """A packet longer than the server takes."""


class ConnectRefused(PacketError):
    """A CONNECT answered with a CONNACK return code, then closed."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code


def check_first(buf: bytes | bytearray, start: int) -> None:
    """Before the CONNECT: the packet at `start` must be one, as soon as its first byte says otherwise."""
    kind = buf[start] & 0xF0
    if kind != CONNECT:
        if buf.startswith(b"GET "):
            raise PacketError(
                "MQTT clients over websocket must connect to the Websocket port, not the MQTT port"
            )
        raise PacketError(f"the first packet should be a CONNECT ({CONNECT}), got {kind}")


def split_packet(
    buf: bytes | bytearray, start: int, max_len: int, exact: bool = True
) -> tuple[int, int, int] | None:
    """(first byte, body start, body end) of the packet at `start`, or None when it is not all there yet.
    PacketError for a malformed header, or a packet longer than `max_len` (0: no limit; TooLarge). `exact`:
    the acknowledgements and DISCONNECT have 3.1.1's fixed lengths (5.0's may carry a reason)."""
    end = len(buf)
    if start >= end:
        return None
    first = buf[start]
    kind = first & 0xF0
    expected = _FIXED_FLAGS.get(kind)
    if expected is not None and first & 0x0F != expected:
        raise PacketError(f"invalid fixed header flags {first & 0x0F:x} for packet type {kind:x}")
    length, multiplier, pos = 0, 1, start + 1
    while True:
        if pos >= end:
            return None
        byte = buf[pos]
        pos += 1
        length += (byte & 0x7F) * multiplier
        if not byte & 0x80:
            break
        multiplier *= 0x80
        if multiplier > 0x200000:
            raise PacketError("malformed variable int")
    if max_len and pos - start + length > max_len:
        raise TooLarge(f"maximum payload exceeded: {pos - start + length} > {max_len}")
    fixed = _FIXED_LENGTH.get(kind)
    if fixed is not None and length != fixed and (exact or length < fixed or kind == PINGREQ):
        raise PacketError(f"invalid remaining length {length} for packet type {kind:x}")
    if pos + length > end:
        return None
    return first, pos, pos + length


class Reader:
    """Fields of one packet's body, with nats-server's errors for a short one."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.pos = 0

    def more(self) -> bool:
        return self.pos < len(self.body)

    def byte(self, field: str) -> int:
        if self.pos >= len(self.body):
            raise PacketError(f"error reading {field}: EOF")
        self.pos += 1
        return self.body[self.pos - 1]

    def uint16(self, field: str) -> int:
        if len(self.body) - self.pos < 2:
            raise PacketError(f"error reading {field}: unexpected EOF")
        self.pos += 2
        return int(struct.unpack_from(">H", self.body, self.pos - 2)[0])

    def data(self, field: str) -> bytes:
        n = self.uint16(field)
        if self.pos + n > len(self.body):
            raise PacketError(f"error reading {field}: unexpected EOF")
        self.pos += n
        return self.body[self.pos - n : self.pos]

    def text(self, field: str) -> str:
        return checked_text(self.data(field), field)


def checked_text(raw: bytes, field: str) -> str:
    """`raw` as UTF-8 without NUL (nats-server's mqttValidateString/Topic)."""
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise PacketError(f"invalid utf8 for {field} {raw!r}") from None
    if "\x00" in text:
        raise PacketError(f"invalid null character in {field} {text!r}")
    return text


@dataclass
class Will:
    topic: bytes
    subject: bytes
    message: bytes
    qos: int
    retain: bool


@dataclass
class Connect:
    client_id: str  # empty: the server names it
    clean: bool
    keep_alive: int
    will: Will | None
    username: str | None
    password: str | None
    level: int = PROTOCOL_LEVEL
    properties: Properties | None = None  # 5.0's
    will_properties: Properties | None = None


def parse_connect(body: bytes, v5_properties: Callable[[Reader, int], Properties] | None = None) -> Connect:
    """A CONNECT's fields, checked as nats-server's mqttParseConnect (ConnectRefused where it answers a
    return code). With `v5_properties` (pynatsd.mqtt.properties.parse), a 5.0 one too: its properties,
    its will's, and what 5.0 allows (an empty client ID without clean start, a password alone)."""
    r = Reader(body)
    proto = r.data("protocol name")
    if proto != PROTOCOL_NAME:
        if proto == b"MQIsdp":
            raise PacketError(f"older protocol {proto.decode(errors='replace')!r} not supported")
        raise PacketError(f'expected connect packet with protocol name "MQTT", got {proto!r}')
    level = r.byte("protocol level")
    v5 = level == 5 and v5_properties is not None
    if level != PROTOCOL_LEVEL and not v5:
        raise ConnectRefused(UNACCEPTABLE_PROTOCOL_VERSION, f"unacceptable protocol version of {level}")
    flags = r.byte("flags")
    if flags & 0x01:
        raise PacketError("connect flags reserved bit not set to 0")
    will_qos = (flags & _WILL_QOS) >> 3
    will_retain = bool(flags & _WILL_RETAIN)
    has_will = bool(flags & _WILL)
    if not has_will:
        if will_qos:
            raise PacketError(f"if Will flag is set to 0, Will QoS must be 0 too, got {will_qos}")
        if will_retain:
            raise PacketError("if Will flag is set to 0, Will Retain flag must be 0 too")
    elif will_qos == 3:
        raise PacketError(f"if Will flag is set to 1, Will QoS can be 0, 1 or 2, got {will_qos}")
    has_user, has_password = bool(flags & _USERNAME), bool(flags & _PASSWORD)
    if has_password and not has_user and not v5:
        raise PacketError("password flag set but username flag is not")
    keep_alive = r.uint16("keep alive")
    properties = v5_properties(r, CONNECT) if v5_properties is not None and v5 else None
    raw_cid = r.data("client ID")
    clean = bool(flags & _CLEAN_SESSION)
    if not raw_cid and not clean and not v5:
        raise ConnectRefused(
            IDENTIFIER_REJECTED, "when client ID is empty, clean session flag must be set to 1"
        )
    try:
        client_id = checked_text(raw_cid, "client ID")
    except PacketError as exc:
        raise ConnectRefused(IDENTIFIER_REJECTED, str(exc)) from None
    if raw_cid and _INVALID_NAME.intersection(raw_cid):
        raise ConnectRefused(IDENTIFIER_REJECTED, f"invalid character in client ID {client_id!r}")
    will = None
    will_properties = None
    if has_will:
        if v5_properties is not None and v5:
            will_properties = v5_properties(r, WILL_PROPERTIES)
        topic = r.data("Will topic")
        if not topic:
            raise PacketError("empty Will topic not allowed")
        checked_text(topic, "Will topic")
        will = Will(topic, topic_to_subject(topic), r.data("Will message"), will_qos, will_retain)
    username = password = None
    if has_user:
        raw_user = r.data("user name")
        if not raw_user:
            raise ConnectRefused(BAD_USER_OR_PASSWORD, "empty user name not allowed")
        try:
            username = checked_text(raw_user, "user name")
        except PacketError as exc:
            raise ConnectRefused(BAD_USER_OR_PASSWORD, str(exc)) from None
    if has_password:
        password = r.data("password").decode(errors="replace")
    return Connect(client_id, clean, keep_alive, will, username, password, level, properties, will_properties)


@dataclass
class Publish:
    topic: bytes
    subject: bytes
    qos: int
    retain: bool
    dup: bool
    packet_id: int
    payload: bytes


# PUBLISH topics already checked, and their subjects (read by pynatsd.mqtt.connection's QoS 0 path too): a
# publisher sends the same few topics again and again, and checking and converting one took about a fifth
# of the QoS 0 path's time (interpreted, cProfile). Cleared, not grown, past CACHED_TOPICS (many topics).
CACHED_TOPICS = 4096
publish_subjects: dict[bytes, bytes] = {}
_topics: dict[bytes, bytes] = {}  # subject -> topic (subject_to_topic's)
_topic_fields: dict[bytes, bytes] = {}  # topic -> its length-prefixed field (publish_header's)


def _cache(cache: dict[bytes, bytes], key: bytes, value: bytes) -> bytes:
    if len(cache) >= CACHED_TOPICS:
        cache.clear()
    cache[key] = value
    return value


def parse_publish(first: int, body: bytes) -> Publish:
    """A PUBLISH's fields, checked as nats-server's mqttParsePub."""
    qos = (first & 0x06) >> 1
    if qos > 2:
        raise PacketError(f"QoS={qos} is invalid in MQTT")
    pos = 2 + (body[0] << 8 | body[1]) if len(body) >= 2 else 0
    topic = body[2:pos]
    subject = publish_subjects.get(topic) if 2 < pos <= len(body) else None
    if subject is None:  # (not checked yet, or no topic: the checks' errors)
        r = Reader(body)
        topic = r.data("topic")
        if not topic:
            raise PacketError("topic cannot be empty")
        checked_text(topic, "topic")
        subject = _cache(publish_subjects, topic, topic_to_subject(topic))
        pos = r.pos
    packet_id = 0
    if qos:
        if len(body) - pos < 2:
            raise PacketError("error reading packet identifier: unexpected EOF")
        packet_id = body[pos] << 8 | body[pos + 1]
        pos += 2
        if packet_id == 0:
            raise PacketError(f"with QoS={qos}, packet identifier cannot be 0")
    return Publish(topic, subject, qos, bool(first & 0x01), bool(first & 0x08), packet_id, body[pos:])


def parse_filters(body: bytes, subscribe: bool) -> tuple[int, list[tuple[bytes, bytes | None, int]]]:
    """(packet id, [(topic filter, NATS subject or None if it has none, requested QoS)]) of a SUBSCRIBE or
    UNSUBSCRIBE, checked as nats-server's mqttParseSubsOrUnsubs."""
    r = Reader(body)
    packet_id = r.uint16("packet identifier")
    filters: list[tuple[bytes, bytes | None, int]] = []
    while r.more():
        topic = r.data("topic filter")
        if not topic:
            raise PacketError("topic filter cannot be empty")
        checked_text(topic, "topic filter")
        subject: bytes | None
        try:
            subject = filter_to_subject(topic)
        except PacketError:
            subject = None  # refused in the SUBACK, not a malformed packet
        qos = 0
        if subscribe:
            qos = r.byte("QoS")
            if qos > 2:
                raise PacketError(f"subscribe QoS value must be 0, 1 or 2, got {qos}")
        filters.append((topic, subject, qos))
    if not filters:
        action = "" if subscribe else "un"
        raise PacketError(f"{action}subscribe protocol must contain at least 1 topic filter")
    return packet_id, filters


def _convert(topic: bytes, wildcards: bool) -> bytes:
    """nats-server's mqttToNATSSubjectConversion: `/` -> `.` (an empty level: `/.` first, `./` before
    another `/` or last), `.` -> `//`, `+` -> `*` and `#` -> `>` (filters only); whitespace and DEL are
    refused."""
    out = bytearray()
    last = len(topic) - 1
    for i, c in enumerate(topic):
        if c == 0x2F:  # '/'
            if i == 0 or out[-1] == 0x2E:
                out += b"/."
            elif i == last or topic[i + 1] == 0x2F:
                out += b"./"
            else:
                out.append(0x2E)
        elif c in _WHITESPACE or c == 0x7F:
            raise PacketError("character not supported for MQTT topics")
        elif c == 0x2E:  # '.'
            out += b"//"
        elif c in (0x2B, 0x23):  # '+', '#'
            if not wildcards:
                raise PacketError(f"wildcards not allowed in publish's topic: {topic!r}")
            out.append(0x2A if c == 0x2B else 0x3E)
        else:
            out.append(c)
    if out and out[-1] == 0x2E:
        out.append(0x2F)
    return bytes(out)


def topic_to_subject(topic: bytes) -> bytes:
    """The NATS subject of a PUBLISH topic (no wildcards)."""
    return _convert(topic, False)


def filter_to_subject(topic_filter: bytes) -> bytes:
    """The NATS subject of a SUBSCRIBE topic filter."""
    return _convert(topic_filter, True)


def subject_to_topic(subject: bytes) -> bytes:
    """nats-server's natsSubjectToMQTTTopic, the reverse: `.` -> `/`, `//` -> `.`, `/.` -> `/`, and
    a `/` before anything else is dropped."""
    topic = _topics.get(subject)
    return topic if topic is not None else _cache(_topics, subject, _subject_to_topic(subject))


def _subject_to_topic(subject: bytes) -> bytes:
    out = bytearray()
    i, last = 0, len(subject) - 1
    while i <= last:
        c = subject[i]
        if c == 0x2F:
            if i < last and subject[i + 1] in (0x2E, 0x2F):
                out.append(0x2F if subject[i + 1] == 0x2E else 0x2E)
                i += 1
        elif c == 0x2E:
            out.append(0x2F)
        else:
            out.append(c)
        i += 1
    return bytes(out)


def is_reserved_filter(subject: bytes) -> bool:
    """A filter starting with a wildcard (`#`, `+`, `+/...`): it takes no `$` topics [MQTT-4.7.2-1]."""
    return subject in (b">", b"*") or subject.startswith(b"*.")


def _length(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | 0x80 if n else byte)
        if not n:
            return bytes(out)


def connack(code: int, session_present: bool = False) -> bytes:
    return bytes((CONNACK, 2, 1 if session_present and code == ACCEPTED else 0, code))


def suback(packet_id: int, granted: list[int]) -> bytes:
    return bytes((SUBACK,)) + _length(2 + len(granted)) + struct.pack(">H", packet_id) + bytes(granted)


def unsuback(packet_id: int) -> bytes:
    return bytes((UNSUBACK, 2)) + struct.pack(">H", packet_id)


def packet_id(body: bytes) -> int:
    """The packet identifier of a PUBACK, PUBREC, PUBREL or PUBCOMP (nats-server's mqttParsePIPacket)."""
    pid = Reader(body).uint16("packet identifier")
    if pid == 0:
        raise PacketError("packet identifier cannot be 0")
    return pid


def puback(pid: int) -> bytes:
    return bytes((PUBACK, 2)) + struct.pack(">H", pid)


def pubrec(pid: int) -> bytes:
    return bytes((PUBREC, 2)) + struct.pack(">H", pid)


def pubcomp(pid: int) -> bytes:
    return bytes((PUBCOMP, 2)) + struct.pack(">H", pid)


PINGRESP_PACKET = bytes((PINGRESP, 0))


def publish_header(topic: bytes, size: int, retain: bool = False) -> bytes:
    """The header of a QoS 0 PUBLISH of `size` payload bytes on `topic` (the payload follows)."""
    first = PUBLISH | 0x01 if retain else PUBLISH
    field = _topic_fields.get(topic)
    if field is None:
        field = _cache(_topic_fields, topic, struct.pack(">H", len(topic)) + topic)
    remaining = len(field) + size
    if remaining < 0x80:  # (a one-byte remaining length)
        return bytes((first, remaining)) + field
    return bytes((first,)) + _length(remaining) + field
