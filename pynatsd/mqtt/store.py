"""Where nats-server keeps MQTT state in an account's JetStream, as far as pynatsd keeps it, created with
nats-server's configurations at an account's first MQTT client: the `$MQTT_msgs` stream (interest
retention, `$MQTT.msgs.>`) that a QoS 1 PUBLISH is stored in under `$MQTT.msgs.<subject>`, and the
`$MQTT_rmsgs` stream (one message per subject) of retained messages, each under `$MQTT.rmsgs.<subject>`
with nats-server's `Nmqtt-R*` headers (its topic, its flags, `-` before them for a deletion, the
publishing user), and the `$MQTT_sess` stream of session records (one per client ID, at
`$MQTT.sess.[<domain>.]<hash>`, JSON: origin, id, clean, subs) that persistent sessions come back from."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pynatsd.base.hashing import base62_sha256
from pynatsd.jetstream import requests
from pynatsd.jetstream.stream import normalize_config

if TYPE_CHECKING:
    from pynatsd.jetstream import JetStream

MSGS_STREAM = "$MQTT_msgs"
MSGS_PREFIX = b"$MQTT.msgs."


RETAINED_STREAM = "$MQTT_rmsgs"
RETAINED_PREFIX = b"$MQTT.rmsgs."
_DELETE_MARKER = "-"


QOS2_STREAM = "$MQTT_qos2in"
QOS2_PREFIX = b"$MQTT.qos2.in."
SESSIONS_STREAM = "$MQTT_sess"
SESSIONS_PREFIX = "$MQTT.sess."


def session_subject(domain: str, client_id: str) -> bytes:
    """Where a client ID's session record is kept: `$MQTT.sess.[<domain>.]<hash>`, nats-server's getHash
    (8 characters of base 62 from its SHA-256)."""
    token = base62_sha256(client_id, 8)
    return f"{SESSIONS_PREFIX}{domain + '.' if domain else ''}{token}".encode()


def server_origin(server_name: str) -> str:
    """What nats-server writes as the origin of a session record or retained message: its NodeName, the
    8-character getHash of its name (server name, else ID), so that servers sharing a store agree."""
    return base62_sha256(server_name, 8)


def ensure_streams(js: JetStream, account: str, replicas: int, domain: str) -> bool:
    """The account's `$MQTT_sess`, `$MQTT_msgs` and `$MQTT_rmsgs` streams, created if missing; False when
    the account has no JetStream."""
    acc = js.accounts.get(account)
    if acc is None:
        return False
    sessions = f"{SESSIONS_PREFIX}{domain + '.' if domain else ''}>"
    once = {"discard": "new", "max_msgs_per_subject": 1, "discard_new_per_subject": True}
    wanted: list[dict[str, Any]] = [
        {"name": SESSIONS_STREAM, "subjects": [sessions], "max_msgs_per_subject": 1},
        {"name": MSGS_STREAM, "subjects": [MSGS_PREFIX.decode() + ">"], "retention": "interest"},
        {"name": QOS2_STREAM, "subjects": [QOS2_PREFIX.decode() + ">"], **once},
        {"name": "$MQTT_out", "subjects": ["$MQTT.out.>"], "retention": "interest"},  # (PUBRELs we send)
        {"name": RETAINED_STREAM, "subjects": [RETAINED_PREFIX.decode() + ">"], "max_msgs_per_subject": 1},
    ]
    for request in wanted:
        name = str(request["name"])
        if name not in acc.streams:
            request.update(storage="file", num_replicas=max(replicas, 1))
            cfg = requests.parse(json.dumps(request).encode(), requests.STREAM_CONFIG)
            acc.create_stream(normalize_config(cfg, name, create=True))
    return True


def retained_headers(
    topic: bytes, flags: int, deleted: bool, origin: str, source: str, extra: bytes = b""
) -> bytes:
    """nats-server's mqttEncodeRetainedMessage headers for a retained message (`deleted`: an empty one,
    which removes it), and `extra` header lines (an MQTT 5.0 message's properties, pynatsd.mqtt.v5)."""
    lines = [
        "NATS/1.0",
        f"Nmqtt-RTopic:{topic.decode()}",
        f"Nmqtt-RFlags:{_DELETE_MARKER if deleted else ''}{flags:x}",
        f"Nmqtt-ROrigin:{origin}",
    ]
    if source:
        lines.append(f"Nmqtt-RSource:{source}")
    return ("\r\n".join(lines) + "\r\n").encode() + extra + b"\r\n"


def retained(
    js: JetStream, account: str, subject_filter: bytes
) -> list[tuple[bytes, bytes, bytes, int, bytes, int]]:
    """(subject, topic, payload, QoS, headers, when stored in ns since the epoch) of the retained messages
    whose subjects `subject_filter` matches, by subject."""
    acc = js.accounts.get(account)
    stream = acc.streams.get(RETAINED_STREAM) if acc is not None else None
    if stream is None:
        return []
    found = []
    for stored_subject in sorted(stream.subject_counts((RETAINED_PREFIX + subject_filter).decode())):
        msg = stream.store.load(stream.store.last_for(stored_subject.encode()))
        if msg is None or msg.hdrs is None:
            continue
        fields = dict(line.split(":", 1) for line in msg.hdrs.decode().split("\r\n")[1:] if ":" in line)
        flags = fields.get("Nmqtt-RFlags", _DELETE_MARKER)
        if flags.startswith(_DELETE_MARKER):
            continue
        subject = stored_subject.encode()[len(RETAINED_PREFIX) :]
        try:
            qos = min(int(flags, 16) >> 1 & 0x03, 2)
        except ValueError:
            qos = 0
        found.append((subject, fields.get("Nmqtt-RTopic", "").encode(), msg.data, qos, msg.hdrs, msg.ts))
    return found


def load_session(js: JetStream, account: str, subject: bytes) -> tuple[int, dict[str, Any]] | None:
    """(sequence, record) of the session record at `subject`; None if there is none (or it is not JSON)."""
    acc = js.accounts.get(account)
    stream = acc.streams.get(SESSIONS_STREAM) if acc is not None else None
    seq = stream.store.last_for(subject) if stream is not None else 0
    msg = stream.store.load(seq) if stream is not None and seq else None
    if msg is None:
        return None
    try:
        record = json.loads(msg.data)
    except ValueError:
        return None
    return (seq, record) if isinstance(record, dict) else None


def session_record(
    origin: str,
    client_id: str,
    clean: bool,
    subs: dict[str, int],
    cons: dict[str, dict[str, Any]] | None = None,
    pubrel: dict[str, Any] | None = None,
    expires: float | None = None,
    v5: dict[str, list[Any]] | None = None,
) -> bytes:
    """nats-server's mqttPersistedSession as its json.Marshal writes it (empty fields left out): `cons`, the
    QoS 1/2 filters' consumer configs by sid, `pubrel` the PUBREL consumer's (pynatsd.mqtt.delivery); and
    pynatsd's fields of an MQTT 5.0 session that nats-server's reading ignores: `expires` (epoch seconds)
    and `v5`, its subscriptions' options and shared ones (pynatsd.mqtt.v5)."""
    record: dict[str, Any] = {"origin": origin, "id": client_id}
    if clean:
        record["clean"] = True
    if subs:
        record["subs"] = dict(sorted(subs.items()))
    if cons:
        record["cons"] = dict(sorted(cons.items()))
    if pubrel:
        record["pubrel"] = pubrel
    if expires is not None:
        record["expires"] = round(expires, 3)
    if v5:
        record["v5"] = dict(sorted(v5.items()))
    return json.dumps(record, separators=(",", ":")).encode()


def delete_session(js: JetStream, account: str, seq: int) -> None:
    """Remove the session record at `seq` (a clean session's, when it ends or is cleared)."""
    acc = js.accounts.get(account)
    stream = acc.streams.get(SESSIONS_STREAM) if acc is not None else None
    if stream is not None and seq in stream.store:
        stream.delete_message(seq)


def qos2_subject(client_id: str, packet_id: int) -> bytes:
    """Where a QoS 2 PUBLISH waits for its PUBREL: `$MQTT.qos2.in.<client ID>.<packet id>`."""
    return QOS2_PREFIX + b"%s.%d" % (client_id.encode(), packet_id)


def qos2_headers(subject: bytes, flags: int, extra: bytes = b"") -> bytes:
    """nats-server's headers of a QoS 2 message held until its PUBREL: its QoS and PUBLISH flags, and its
    subject; then `extra` header lines (an MQTT 5.0 PUBLISH's properties, pynatsd.mqtt.v5)."""
    return b"NATS/1.0\r\nNmqtt-Pub:2%x\r\nNmqtt-Subject:%s\r\n%s\r\n" % (flags & 0x0F, subject, extra)


def take_qos2(js: JetStream, account: str, subject: bytes) -> tuple[bytes, bool, bytes, bytes] | None:
    """The QoS 2 message held at `subject`, removed: (its subject, RETAIN, payload, its `extra` header
    lines); None if none is held. ValueError for a message that is not one."""
    acc = js.accounts.get(account)
    stream = acc.streams.get(QOS2_STREAM) if acc is not None else None
    seq = stream.store.last_for(subject) if stream is not None else 0
    msg = stream.store.load(seq) if stream is not None and seq else None
    if stream is None or msg is None:
        return None
    stream.delete_message(seq)
    lines = [line for line in (msg.hdrs or b"").split(b"\r\n")[1:] if b":" in line]
    fields = dict(line.split(b":", 1) for line in lines)
    extra = b"".join(
        line + b"\r\n" for line in lines if not line.startswith((b"Nmqtt-Pub:", b"Nmqtt-Subject:"))
    )
    pub, target = fields.get(b"Nmqtt-Pub", b""), fields.get(b"Nmqtt-Subject", b"")
    if not pub.startswith(b"2") or not target:
        raise ValueError("invalid message in QoS2 PUBREL stream")
    flags = int(pub[1:2], 16) if pub[1:2] else 0
    return target, bool(flags & 0x01), msg.data, extra
