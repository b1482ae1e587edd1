"""QoS 1 and 2 subscriptions as nats-server has them: each one a durable JetStream consumer.

A QoS 1/2 filter of a session gets a push consumer on `$MQTT_msgs` (durable `<session hash>_<NUID>`,
filter `$MQTT.msgs.<subject>`, deliver subject `$MQTT.sub.<NUID>`, explicit acks, the `mqtt {}` block's
ack_wait and max_ack_pending), kept in the session record's `cons` under the filter's sid; a session
with a QoS 2 filter also gets `$MQTT_PUBREL_<session hash>` on `$MQTT_out`, which holds the PUBRELs
the server owes (`$MQTT.out.pubrel.<hash>`, header `Nmqtt-PubRel`) and delivers them to
`$MQTT.deliver.pubrel.<hash>`. A delivered message's JetStream ack reply is kept under the packet
identifier it went out with (`Session`): the client's PUBACK (QoS 1) or PUBCOMP (QoS 2, after PUBREC)
acks it, else JetStream redelivers it after ack_wait (DUP set), on this connection or the session's next.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pynatsd.base.hashing import base62_sha256
from pynatsd.base.ids import event_id
from pynatsd.jetstream import consumer as consumer_mod
from pynatsd.jetstream import requests
from pynatsd.jetstream.errors import ApiError
from pynatsd.mqtt.store import MSGS_PREFIX, MSGS_STREAM, RETAINED_STREAM

if TYPE_CHECKING:
    from pynatsd.base.blocks import MQTTOptions
    from pynatsd.jetstream import JetStream

DEFAULT_ACK_WAIT = 30.0  # seconds (nats-server's mqttDefaultAckWait)
DEFAULT_MAX_ACK_PENDING = 1024  # nats-server's mqttDefaultMaxAckPending
MAX_ACK_TOTAL = 0xFFFF  # a session's consumers' max_ack_pending together (nats-server's mqttMaxAckTotalLimit)
SUB_PREFIX = "$MQTT.sub."
OUT_STREAM = "$MQTT_out"
PUBREL_PREFIX = b"$MQTT.out.pubrel."
PUBREL_DELIVERY_PREFIX = "$MQTT.deliver.pubrel."
PUBREL_DURABLE_PREFIX = "$MQTT_PUBREL_"
_PUB_HEADER = b"Nmqtt-Pub:"
_RETAINED = RETAINED_STREAM + "/"  # (retained_key's prefix)
_PUBREL_HEADER = b"Nmqtt-PubRel:"


def publish_header(topic: bytes, size: int, qos: int, packet_id: int, dup: bool, retain: bool) -> bytes:
    """The header of a PUBLISH of `size` payload bytes (a packet identifier with QoS 1 and 2)."""
    first = 0x30 | (0x08 if dup else 0) | (qos << 1) | (0x01 if retain else 0)
    length = 2 + len(topic) + size + (2 if qos else 0)
    out = bytearray((first,))
    while True:
        byte, length = length & 0x7F, length >> 7
        out.append(byte | 0x80 if length else byte)
        if not length:
            break
    out += struct.pack(">H", len(topic)) + topic
    if qos:
        out += struct.pack(">H", packet_id)
    return bytes(out)


def pubrel_packet(packet_id: int) -> bytes:
    return bytes((0x62, 2)) + struct.pack(">H", packet_id)


def _header(headers: bytes | None, name: bytes) -> bytes:
    if not headers:
        return b""
    at = headers.find(b"\r\n" + name)
    if at < 0:
        return b""
    start = at + 2 + len(name)
    return headers[start : headers.find(b"\r\n", start)].strip()


def message_qos(headers: bytes | None) -> int:
    """The QoS an MQTT publisher gave a message (its `Nmqtt-Pub` header); 0 for a NATS message."""
    value = _header(headers, _PUB_HEADER)
    return value[0] - 0x30 if value and 0x30 <= value[0] <= 0x32 else 0


def pubrel_headers(packet_id: int) -> bytes:
    return b"NATS/1.0\r\n%s%d\r\n\r\n" % (_PUBREL_HEADER, packet_id)


def pubrel_id(headers: bytes | None) -> int:
    """The packet identifier of a PUBREL held in `$MQTT_out`; 0 if none."""
    value = _header(headers, _PUBREL_HEADER)
    return int(value) if value.isdigit() and int(value) <= 0xFFFF else 0


def ack_info(reply: bytes) -> tuple[int, int]:
    """(stream sequence, deliveries) of a JetStream ack reply subject (either token layout)."""
    tokens = reply.split(b".")
    at = 4 if len(tokens) == 9 else 6  # `$JS.ACK.<domain>.<account hash>.<stream>...` has 12 or more
    try:
        return int(tokens[at + 1]), int(tokens[at])
    except (IndexError, ValueError):
        return 0, 0


def ack_time(reply: bytes) -> int:
    """When the message of a JetStream ack reply subject was stored (ns since the epoch; 0 if unknown)."""
    tokens = reply.split(b".")
    at = 4 if len(tokens) == 9 else 6
    try:
        return int(tokens[at + 3])
    except (IndexError, ValueError):
        return 0


def retained_key(sid: bytes) -> str:
    """Where a subscription's retained QoS 1/2 deliveries are tracked (they have no consumer)."""
    return _RETAINED + sid.decode()


@dataclass
class Delivery:
    """A QoS 1/2 filter's delivery subscription (on its consumer's deliver subject)."""

    durable: str
    qos: int
    reserved: bool  # a filter starting with a wildcard: no `$` topics [MQTT-4.7.2-1]
    sid: bytes = b""  # the filter's subscription (a 5.0 one's options are kept by it)


@dataclass
class Held:
    """A consumer's message held back by an MQTT 5.0 client's Receive Maximum (unacked in JetStream: sent
    once an acknowledgement frees a place, or redelivered by JetStream if this connection goes)."""

    found: Delivery
    subject: bytes  # its stored subject (`$MQTT.msgs.<subject>`)
    headers: bytes | None
    payload: bytes
    ack: bytes


@dataclass
class Session:
    """A session's QoS 1/2 state: its consumers (as its record keeps them) and the packet identifiers in
    flight, each with the JetStream ack reply it stands for (nats-server's mqttSession)."""

    client_id: str
    max_pending: int
    receive_maximum: int = 0  # an MQTT 5.0 client's: QoS 1/2 PUBLISHes unacknowledged at once (0: none)
    id_hash: str = ""
    cons: dict[str, dict[str, Any]] = field(default_factory=dict)  # sid -> consumer config
    pubrel: dict[str, Any] | None = None  # the PUBREL consumer's config
    total_ack_pending: int = 0
    last_pi: int = 0
    pending_publish: dict[int, tuple[str, int, bytes]] = field(default_factory=dict)  # pi -> (dur, sseq, ack)
    pending_pubrel: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # pi -> (sseq, ack)
    by_sequence: dict[str, dict[int, int]] = field(default_factory=dict)  # durable -> sseq -> pi
    held: dict[tuple[str, int], Held] = field(default_factory=dict)  # (durable, sseq) -> held back, in order

    def __post_init__(self) -> None:
        self.id_hash = base62_sha256(self.client_id, 8)

    def restore(self, record: dict[str, Any]) -> None:
        """The consumers a stored session record names."""
        cons = record.get("cons")
        if isinstance(cons, dict):
            self.cons = {k: v for k, v in cons.items() if isinstance(v, dict) and v.get("durable_name")}
        pubrel = record.get("pubrel")
        self.pubrel = pubrel if isinstance(pubrel, dict) and pubrel.get("durable_name") else None
        self.total_ack_pending = sum(_max_ack(c) for c in self.consumers())

    def resume(self, before: Session) -> None:
        """Take over the packet identifiers `before` (this session's previous connection) had in flight, as
        nats-server keeps them with the session: a redelivery after a reconnect goes out under the same one.
        (Not those of retained messages, which nothing sends again, nor messages held back by a Receive
        Maximum: JetStream redelivers them.)"""
        self.last_pi = before.last_pi
        self.pending_publish = {
            pi: pending
            for pi, pending in before.pending_publish.items()
            if pending[2]  # (retained: no ack)
        }
        self.pending_pubrel = dict(before.pending_pubrel)
        self.by_sequence = {
            durable: dict(pis)
            for durable, pis in before.by_sequence.items()
            if not durable.startswith(_RETAINED)
        }

    def consumers(self) -> list[dict[str, Any]]:
        return [*self.cons.values(), *([self.pubrel] if self.pubrel is not None else [])]

    def next_pi(self) -> int:
        """A packet identifier in use by no PUBLISH nor PUBREL in flight; 0 if all are."""
        pi = self.last_pi
        for _ in range(0xFFFF):
            pi = pi % 0xFFFF + 1
            if pi not in self.pending_publish and pi not in self.pending_pubrel:
                self.last_pi = pi
                return pi
        return 0

    def track_publish(self, durable: str, ack: bytes) -> tuple[int, bool]:
        """(packet identifier, DUP) for a delivery of a consumer's message: the one it went out with before
        if it is a redelivery; (0, False) when it is not to be sent now (max_ack_pending in flight, or its
        PUBREL is pending already)."""
        sseq, deliveries = ack_info(ack)
        by_seq = self.by_sequence.setdefault(durable, {})
        pi = by_seq.get(sseq, 0)
        if pi:
            if pi in self.pending_pubrel:
                return 0, False
        else:
            if len(self.pending_publish) >= self.max_pending:
                return 0, False  # JetStream redelivers it after ack_wait
            pi = self.next_pi()
            if not pi:
                return 0, False
            by_seq[sseq] = pi
        self.pending_publish[pi] = (durable, sseq, ack)
        return pi, deliveries > 1

    def must_wait(self, durable: str, ack: bytes) -> bool:
        """Whether a consumer's message is to wait for a place under the client's Receive Maximum (QoS 1
        PUBLISHes until their PUBACK and QoS 2 ones until their PUBCOMP count [MQTT-4.9.0-2]); a
        redelivery of one in flight never waits."""
        return self.receive_full() and ack_info(ack)[0] not in self.by_sequence.get(durable, {})

    def receive_full(self) -> bool:
        in_flight = len(self.pending_publish) + len(self.pending_pubrel)
        return bool(self.receive_maximum) and in_flight >= self.receive_maximum

    def hold(self, held: Held) -> None:
        """Keep `held` for `next_held` (a redelivery of one held takes its place, with its new ack reply)."""
        self.held[(held.found.durable, ack_info(held.ack)[0])] = held

    def next_held(self) -> Held | None:
        """The first message held back, now that the Receive Maximum has a place for it; None if none."""
        if not self.held or self.receive_full():
            return None
        return self.held.pop(next(iter(self.held)))

    def track_retained(self, sid: bytes) -> int:
        """A packet identifier for a retained QoS 1/2 delivery (nothing to ack in JetStream); 0 if none."""
        pi = self.next_pi()
        if pi:
            key = retained_key(sid)
            self.by_sequence.setdefault(key, {})[pi] = pi
            self.pending_publish[pi] = (key, pi, b"")
        return pi

    def untrack_publish(self, pi: int) -> bytes:
        """The JetStream ack reply of the PUBLISH `pi` went out as (b"" if none), no longer in flight."""
        pending = self.pending_publish.pop(pi, None)
        if pending is None:
            return b""
        durable, sseq, ack = pending
        self.by_sequence.get(durable, {}).pop(sseq, None)
        return ack

    def track_pubrel(self, pi: int, ack: bytes) -> None:
        sseq = ack_info(ack)[0] if ack else 0
        self.pending_pubrel[pi] = (sseq, ack)

    def untrack_pubrel(self, pi: int) -> bytes:
        pending = self.pending_pubrel.pop(pi, None)
        return pending[1] if pending is not None else b""

    def forget(self, durable: str) -> None:
        """Drop what is in flight for a consumer (or a retained key) that goes."""
        for pi in self.by_sequence.pop(durable, {}).values():
            self.pending_publish.pop(pi, None)
        for key in [key for key in self.held if key[0] == durable]:
            del self.held[key]


def _max_ack(cfg: dict[str, Any]) -> int:
    value = cfg.get("max_ack_pending")
    return value if isinstance(value, int) else 0


def _limits(mqtt: MQTTOptions) -> dict[str, Any]:
    ack_wait = mqtt.ack_wait or DEFAULT_ACK_WAIT
    fields: dict[str, Any] = {  # (with the fields Go's JSON writes even when zero: the session record)
        "ack_policy": "explicit",
        "deliver_policy": "new",
        "ack_wait": int(ack_wait * 1e9),
        "max_ack_pending": mqtt.max_ack_pending or DEFAULT_MAX_ACK_PENDING,
        "num_replicas": 0,
        "replay_policy": "instant",
    }
    if mqtt.consumer_memory_storage:
        fields["mem_storage"] = True
    if mqtt.consumer_inactive_threshold > 0:
        fields["inactive_threshold"] = int(mqtt.consumer_inactive_threshold * 1e9)
    return fields


def subscription_consumer(mqtt: MQTTOptions, session: Session, subject: bytes) -> dict[str, Any]:
    """A new QoS 1/2 filter's consumer config (nats-server's processJSConsumer)."""
    return {
        "durable_name": f"{session.id_hash}_{event_id()}",
        "deliver_subject": SUB_PREFIX + event_id(),
        "filter_subject": (MSGS_PREFIX + subject).decode(),
        **_limits(mqtt),
    }


def pubrel_consumer(mqtt: MQTTOptions, session: Session) -> dict[str, Any]:
    """The session's PUBREL consumer config (nats-server's ensurePubRelConsumerSubscription)."""
    return {
        "durable_name": PUBREL_DURABLE_PREFIX + session.id_hash,
        "deliver_subject": PUBREL_DELIVERY_PREFIX + session.id_hash,
        "filter_subject": (PUBREL_PREFIX + session.id_hash.encode()).decode(),
        **_limits(mqtt),
    }


def ensure_consumer(js: JetStream, account: str, stream_name: str, config: dict[str, Any]) -> None:
    """The durable consumer `config` names on the account's `stream_name`, created unless it exists.
    ApiError if it cannot be."""
    acc = js.accounts.get(account)
    stream = acc.streams.get(stream_name) if acc is not None else None
    if acc is None or stream is None:
        raise ApiError(503, 10039, "jetstream not enabled for account")
    durable = str(config["durable_name"])
    if durable in stream.consumers:
        return
    body = json.dumps({"stream_name": stream_name, "config": config}).encode()
    raw = {**requests.parse(body, requests.CONSUMER_CREATE)["config"], "name": durable}
    cfg = consumer_mod.normalize_config(raw, stream)
    acc.check_ack_pending(raw, cfg)
    # Saved now: the session record naming it may be stored before a save_soon would run.
    acc.add_consumer(stream, cfg, "").save()


def delete_consumer(js: JetStream, account: str, stream_name: str, durable: str) -> None:
    """Delete a session's consumer; one already gone is no error."""
    acc = js.accounts.get(account)
    stream = acc.streams.get(stream_name) if acc is not None else None
    if acc is not None and stream is not None and durable in stream.consumers:
        acc.delete_consumer(stream, durable)


def delete_consumers(js: JetStream, account: str, session: Session) -> None:
    """A session's consumers go (a clean session, or one cleared)."""
    for cfg in session.cons.values():
        delete_consumer(js, account, MSGS_STREAM, str(cfg["durable_name"]))
    if session.pubrel is not None:
        delete_consumer(js, account, OUT_STREAM, str(session.pubrel["durable_name"]))
    session.cons = {}
    session.pubrel = None
    session.total_ack_pending = 0
    session.pending_publish.clear()
    session.pending_pubrel.clear()
    session.by_sequence.clear()
    session.held.clear()
