"""MQTT 5.0 properties, sans-IO: variable byte integers, every property identifier with its type and the
packets it may appear in, their checks (a wrong or repeated one is a Malformed Packet or a Protocol Error,
with its DISCONNECT reason code), and the mapping of a PUBLISH's properties to and from NATS headers.

The NATS side of a PUBLISH's properties (what a NATS subscriber sees and a NATS publisher sets):

- each User Property is a header of that name and value (in order; a name repeated is a header repeated);
- Content Type is `Content-Type`; Response Topic is the message's reply subject (the topic converted as
  any topic is), so requests and replies cross between MQTT 5 and NATS;
- Correlation Data is `Nmqtt-Correlation-Data` (base64, since it is binary), Payload Format Indicator is
  `Nmqtt-Payload-Format` (0 or 1), Message Expiry Interval is `Nmqtt-Message-Expiry` (seconds left).

A User Property that a NATS header cannot carry (a name with `:`, whitespace or a control character, a
value with CR or LF) or that would pose as one of the headers above or the server's own (`Nmqtt-*`,
`Content-Type`) is refused (see `publish_headers`), never altered.
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass, field

from pynatsd.mqtt.packets import WILL_PROPERTIES, PacketError, Reader
from pynatsd.mqtt.packets import _length as varint  # (a Variable Byte Integer, as the remaining length)

# Reason codes (MQTT 5.0 section 2.4)
SUCCESS = 0x00
DISCONNECT_WITH_WILL = 0x04
NO_MATCHING_SUBSCRIBERS = 0x10
NO_SUBSCRIPTION_EXISTED = 0x11
UNSPECIFIED_ERROR = 0x80
MALFORMED_PACKET = 0x81
PROTOCOL_ERROR = 0x82
IMPLEMENTATION_SPECIFIC_ERROR = 0x83
UNSUPPORTED_PROTOCOL_VERSION = 0x84
CLIENT_IDENTIFIER_NOT_VALID = 0x85
BAD_USER_NAME_OR_PASSWORD = 0x86
NOT_AUTHORIZED = 0x87
SERVER_UNAVAILABLE = 0x88
SERVER_SHUTTING_DOWN = 0x8B
BAD_AUTHENTICATION_METHOD = 0x8C
KEEP_ALIVE_TIMEOUT = 0x8D
SESSION_TAKEN_OVER = 0x8E
TOPIC_FILTER_INVALID = 0x8F
TOPIC_NAME_INVALID = 0x90
PACKET_ID_NOT_FOUND = 0x92
RECEIVE_MAXIMUM_EXCEEDED = 0x93
TOPIC_ALIAS_INVALID = 0x94
PACKET_TOO_LARGE = 0x95
QUOTA_EXCEEDED = 0x97
PAYLOAD_FORMAT_INVALID = 0x99
RETAIN_NOT_SUPPORTED = 0x9A
QOS_NOT_SUPPORTED = 0x9B
SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2

# Property identifiers
PAYLOAD_FORMAT = 0x01
MESSAGE_EXPIRY = 0x02
CONTENT_TYPE = 0x03
RESPONSE_TOPIC = 0x08
CORRELATION_DATA = 0x09
SUBSCRIPTION_ID = 0x0B
SESSION_EXPIRY = 0x11
ASSIGNED_CLIENT_ID = 0x12
SERVER_KEEP_ALIVE = 0x13
AUTH_METHOD = 0x15
AUTH_DATA = 0x16
REQUEST_PROBLEM_INFO = 0x17
WILL_DELAY = 0x18
REQUEST_RESPONSE_INFO = 0x19
RESPONSE_INFO = 0x1A
SERVER_REFERENCE = 0x1C
REASON_STRING = 0x1F
RECEIVE_MAXIMUM = 0x21
TOPIC_ALIAS_MAXIMUM = 0x22
TOPIC_ALIAS = 0x23
MAXIMUM_QOS = 0x24
RETAIN_AVAILABLE = 0x25
USER_PROPERTY = 0x26
MAXIMUM_PACKET_SIZE = 0x27
WILDCARD_AVAILABLE = 0x28
SUBSCRIPTION_IDS_AVAILABLE = 0x29
SHARED_AVAILABLE = 0x2A

# Where properties appear: packet types (the fixed header's high nibble) and WILL for a CONNECT's will.
WILL = WILL_PROPERTIES
_CONNECT, _CONNACK, _PUBLISH, _PUBACK, _PUBREC, _PUBREL, _PUBCOMP = 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70
_SUBSCRIBE, _SUBACK, _UNSUBSCRIBE, _UNSUBACK, _DISCONNECT, _AUTH = 0x80, 0x90, 0xA0, 0xB0, 0xE0, 0xF0
_ACKS = (_PUBACK, _PUBREC, _PUBREL, _PUBCOMP, _SUBACK, _UNSUBACK, _DISCONNECT, _AUTH, _CONNACK)
_ALL = (_CONNECT, _PUBLISH, WILL, _SUBSCRIBE, _UNSUBSCRIBE, *_ACKS)

BYTE, UINT16, UINT32, VARINT, TEXT, BINARY, PAIR = range(7)

#: identifier -> (name, type, where it may appear)
PROPERTIES: dict[int, tuple[str, int, tuple[int, ...]]] = {
    PAYLOAD_FORMAT: ("Payload Format Indicator", BYTE, (_PUBLISH, WILL)),
    MESSAGE_EXPIRY: ("Message Expiry Interval", UINT32, (_PUBLISH, WILL)),
    CONTENT_TYPE: ("Content Type", TEXT, (_PUBLISH, WILL)),
    RESPONSE_TOPIC: ("Response Topic", TEXT, (_PUBLISH, WILL)),
    CORRELATION_DATA: ("Correlation Data", BINARY, (_PUBLISH, WILL)),
    SUBSCRIPTION_ID: ("Subscription Identifier", VARINT, (_PUBLISH, _SUBSCRIBE)),
    SESSION_EXPIRY: ("Session Expiry Interval", UINT32, (_CONNECT, _CONNACK, _DISCONNECT)),
    ASSIGNED_CLIENT_ID: ("Assigned Client Identifier", TEXT, (_CONNACK,)),
    SERVER_KEEP_ALIVE: ("Server Keep Alive", UINT16, (_CONNACK,)),
    AUTH_METHOD: ("Authentication Method", TEXT, (_CONNECT, _CONNACK, _AUTH)),
    AUTH_DATA: ("Authentication Data", BINARY, (_CONNECT, _CONNACK, _AUTH)),
    REQUEST_PROBLEM_INFO: ("Request Problem Information", BYTE, (_CONNECT,)),
    WILL_DELAY: ("Will Delay Interval", UINT32, (WILL,)),
    REQUEST_RESPONSE_INFO: ("Request Response Information", BYTE, (_CONNECT,)),
    RESPONSE_INFO: ("Response Information", TEXT, (_CONNACK,)),
    SERVER_REFERENCE: ("Server Reference", TEXT, (_CONNACK, _DISCONNECT)),
    REASON_STRING: ("Reason String", TEXT, _ACKS),
    RECEIVE_MAXIMUM: ("Receive Maximum", UINT16, (_CONNECT, _CONNACK)),
    TOPIC_ALIAS_MAXIMUM: ("Topic Alias Maximum", UINT16, (_CONNECT, _CONNACK)),
    TOPIC_ALIAS: ("Topic Alias", UINT16, (_PUBLISH,)),
    MAXIMUM_QOS: ("Maximum QoS", BYTE, (_CONNACK,)),
    RETAIN_AVAILABLE: ("Retain Available", BYTE, (_CONNACK,)),
    USER_PROPERTY: ("User Property", PAIR, _ALL),
    MAXIMUM_PACKET_SIZE: ("Maximum Packet Size", UINT32, (_CONNECT, _CONNACK)),
    WILDCARD_AVAILABLE: ("Wildcard Subscription Available", BYTE, (_CONNACK,)),
    SUBSCRIPTION_IDS_AVAILABLE: ("Subscription Identifier Available", BYTE, (_CONNACK,)),
    SHARED_AVAILABLE: ("Shared Subscription Available", BYTE, (_CONNACK,)),
}
_BOOLEAN = (PAYLOAD_FORMAT, REQUEST_PROBLEM_INFO, REQUEST_RESPONSE_INFO, MAXIMUM_QOS, RETAIN_AVAILABLE)
_NOT_ZERO = (RECEIVE_MAXIMUM, MAXIMUM_PACKET_SIZE, SUBSCRIPTION_ID, TOPIC_ALIAS)
MAX_VARINT = 268_435_455


class ReasonError(PacketError):
    """A packet the server answers with `reason` (a DISCONNECT's, or a CONNACK's before the session)."""

    def __init__(self, reason: int, text: str) -> None:
        super().__init__(text)
        self.reason = reason


def malformed(text: str) -> ReasonError:
    return ReasonError(MALFORMED_PACKET, text)


def protocol_error(text: str) -> ReasonError:
    return ReasonError(PROTOCOL_ERROR, text)


def read_varint(r: Reader, what: str) -> int:
    """A Variable Byte Integer at `r`'s position; Malformed Packet past 4 bytes or the body's end."""
    value = 0
    for shift in range(0, 28, 7):
        if not r.more():
            raise malformed(f"error reading {what}: EOF")
        byte = r.byte(what)
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
    raise malformed(f"malformed variable byte integer in {what}")


@dataclass
class Properties:
    """The properties of one packet: each by identifier (the last, see `parse`), user properties in order,
    and every Subscription Identifier (a PUBLISH the server sends may carry several)."""

    values: dict[int, int | str | bytes] = field(default_factory=dict)
    user: list[tuple[str, str]] = field(default_factory=list)
    subscription_ids: list[int] = field(default_factory=list)

    def number(self, pid: int, default: int = 0) -> int:
        value = self.values.get(pid, default)
        return value if isinstance(value, int) else default

    def text(self, pid: int) -> str | None:
        value = self.values.get(pid)
        return value if isinstance(value, str) else None

    def binary(self, pid: int) -> bytes | None:
        value = self.values.get(pid)
        return value if isinstance(value, bytes) else None


def parse(r: Reader, where: int) -> Properties:
    """(See _parse; a short field is a Malformed Packet too.)"""
    try:
        return _parse(r, where)
    except ReasonError:
        raise
    except PacketError as exc:
        raise malformed(str(exc)) from None


def _parse(r: Reader, where: int) -> Properties:
    """The properties at `r`'s position (their length first) of a packet of type `where` (or WILL): a
    property foreign to it, or of a wrong size, is a Malformed Packet; one repeated (but User Property), a
    boolean not 0 or 1, or a zero where it may not be, a Protocol Error [MQTT-2.2.2-1/2]."""
    length = read_varint(r, "properties length")
    end = r.pos + length
    if end > len(r.body):
        raise malformed("properties length past the end of the packet")
    props = Properties()
    body = Reader(r.body[:end])
    body.pos = r.pos
    while body.more():
        pid = read_varint(body, "property identifier")
        known = PROPERTIES.get(pid)
        if known is None or where not in known[2]:
            raise malformed(f"property 0x{pid:02x} not allowed in this packet")
        name, kind, _where = known
        value: int | str | bytes
        if kind == BYTE:
            value = body.byte(name)
        elif kind == UINT16:
            value = body.uint16(name)
        elif kind == UINT32:
            if len(body.body) - body.pos < 4:
                raise malformed(f"error reading {name}: unexpected EOF")
            value = int(struct.unpack_from(">I", body.body, body.pos)[0])
            body.pos += 4
        elif kind == VARINT:
            value = read_varint(body, name)
        elif kind == TEXT:
            value = body.text(name)
        elif kind == BINARY:
            value = body.data(name)
        else:
            props.user.append((body.text(name), body.text(name)))
            continue
        if pid in props.values:
            raise protocol_error(f"{name} included more than once")
        if pid in _BOOLEAN and value not in (0, 1):
            raise protocol_error(f"{name} must be 0 or 1, got {value!r}")
        if pid in _NOT_ZERO and value == 0:
            raise protocol_error(f"{name} cannot be 0")
        props.values[pid] = value
        if pid == SUBSCRIPTION_ID:
            props.subscription_ids.append(int(value))
    r.pos = end
    return props


def _string(raw: bytes) -> bytes:
    return struct.pack(">H", len(raw)) + raw


def encode(values: list[tuple[int, int | str | bytes]], user: list[tuple[str, str]] | None = None) -> bytes:
    """Properties as a packet carries them, their length first (`values` in order; repeats are the
    caller's, e.g. Subscription Identifiers)."""
    out = bytearray()
    for pid, value in values:
        kind = PROPERTIES[pid][1]
        out += varint(pid)
        if kind == BYTE:
            out.append(int(value))
        elif kind == UINT16:
            out += struct.pack(">H", int(value))
        elif kind == UINT32:
            out += struct.pack(">I", int(value))
        elif kind == VARINT:
            out += varint(int(value))
        elif isinstance(value, str):
            out += _string(value.encode())
        elif isinstance(value, bytes):
            out += _string(value)
    for name, text in user or ():
        out.append(USER_PROPERTY)
        out += _string(name.encode()) + _string(text.encode())
    return varint(len(out)) + bytes(out)


# -- PUBLISH properties <-> NATS headers -----------------------------------------------------------------
CONTENT_TYPE_HEADER = "Content-Type"
CORRELATION_HEADER = "Nmqtt-Correlation-Data"
PAYLOAD_FORMAT_HEADER = "Nmqtt-Payload-Format"
MESSAGE_EXPIRY_HEADER = "Nmqtt-Message-Expiry"
_SERVER_PREFIX = "nmqtt-"
_BAD_NAME = frozenset(":") | frozenset(chr(c) for c in range(33)) | {"\x7f"}


def header_lines(props: Properties) -> str:
    """The header lines (each ending in CRLF) of a PUBLISH's properties but Response Topic (the reply
    subject) and Topic Alias; ValueError naming a User Property that no NATS header can carry."""
    lines = []
    content_type = props.text(CONTENT_TYPE)
    if content_type is not None:
        if "\r" in content_type or "\n" in content_type:
            raise ValueError("Content Type with CR or LF")
        lines.append(f"{CONTENT_TYPE_HEADER}:{content_type}\r\n")
    correlation = props.binary(CORRELATION_DATA)
    if correlation is not None:
        lines.append(f"{CORRELATION_HEADER}:{base64.b64encode(correlation).decode()}\r\n")
    if PAYLOAD_FORMAT in props.values:
        lines.append(f"{PAYLOAD_FORMAT_HEADER}:{props.number(PAYLOAD_FORMAT)}\r\n")
    if MESSAGE_EXPIRY in props.values:
        lines.append(f"{MESSAGE_EXPIRY_HEADER}:{props.number(MESSAGE_EXPIRY)}\r\n")
    for name, value in props.user:
        if not name or _BAD_NAME.intersection(name) or "\r" in value or "\n" in value:
            raise ValueError(f"user property {name!r} cannot be a NATS header")
        lowered = name.lower()
        if lowered.startswith(_SERVER_PREFIX) or lowered == CONTENT_TYPE_HEADER.lower():
            raise ValueError(f"user property {name!r} is a name the server's headers use")
        lines.append(f"{name}:{value}\r\n")
    return "".join(lines)


_ONCE = frozenset(
    h.lower() for h in (CONTENT_TYPE_HEADER, CORRELATION_HEADER, PAYLOAD_FORMAT_HEADER, MESSAGE_EXPIRY_HEADER)
)


@dataclass
class Delivered:
    """The PUBLISH properties a NATS message's headers give an MQTT 5 subscriber."""

    values: list[tuple[int, int | str | bytes]]
    user: list[tuple[str, str]]


def from_headers(headers: bytes | None, reply: bytes | None, reply_topic: bytes | None) -> Delivered:
    """The properties of a NATS message with `headers` (the status line and the server's `Nmqtt-*`
    headers left out) and `reply` (its topic, `reply_topic`, as Response Topic)."""
    values: list[tuple[int, int | str | bytes]] = []
    user: list[tuple[str, str]] = []
    seen: set[str] = set()
    if reply is not None and reply_topic is not None:
        values.append((RESPONSE_TOPIC, reply_topic.decode(errors="replace")))
    if headers:
        for line in headers.decode(errors="replace").split("\r\n")[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name:
                continue
            value = value.strip()
            lowered = name.lower()
            if lowered in seen:  # (a property the server sends once: its first header)
                continue
            if lowered in _ONCE:
                seen.add(lowered)
            if lowered == CONTENT_TYPE_HEADER.lower():
                values.append((CONTENT_TYPE, value))
            elif lowered == CORRELATION_HEADER.lower():
                try:
                    values.append((CORRELATION_DATA, base64.b64decode(value, validate=True)))
                except (binascii.Error, ValueError):
                    user.append((name, value))
            elif lowered == PAYLOAD_FORMAT_HEADER.lower():
                if value in ("0", "1"):
                    values.append((PAYLOAD_FORMAT, int(value)))
            elif lowered == MESSAGE_EXPIRY_HEADER.lower():
                if value.isdigit():
                    values.append((MESSAGE_EXPIRY, min(int(value), 0xFFFFFFFF)))
            elif not lowered.startswith(_SERVER_PREFIX):
                user.append((name, value))
    return Delivered(values, user)
