"""Where nats-server keeps MQTT state in an account's JetStream, as far as pynatsd keeps it, created with
nats-server's configurations at an account's first MQTT client: the `$MQTT_msgs` stream (interest
retention, `$MQTT.msgs.>`) that a QoS 1 PUBLISH is stored in under `$MQTT.msgs.<subject>`, and the
`$MQTT_rmsgs` stream (one message per subject) of retained messages, each under `$MQTT.rmsgs.<subject>`
with nats-server's `Nmqtt-R*` headers (its topic, its flags, `-` before them for a deletion, the
publishing user)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pynatsd.jetstream import requests
from pynatsd.jetstream.stream import normalize_config

if TYPE_CHECKING:
    from pynatsd.jetstream import JetStream

MSGS_STREAM = "$MQTT_msgs"
MSGS_PREFIX = b"$MQTT.msgs."


RETAINED_STREAM = "$MQTT_rmsgs"
RETAINED_PREFIX = b"$MQTT.rmsgs."
_DELETE_MARKER = "-"


def ensure_streams(js: JetStream, account: str, replicas: int) -> bool:
    """The account's `$MQTT_msgs` and `$MQTT_rmsgs` streams, created if missing; False when the account
    has no JetStream."""
    acc = js.accounts.get(account)
    if acc is None:
        return False
    wanted: list[dict[str, Any]] = [
        {"name": MSGS_STREAM, "subjects": [MSGS_PREFIX.decode() + ">"], "retention": "interest"},
        {"name": RETAINED_STREAM, "subjects": [RETAINED_PREFIX.decode() + ">"], "max_msgs_per_subject": 1},
    ]
    for request in wanted:
        name = str(request["name"])
        if name not in acc.streams:
            request.update(storage="file", num_replicas=max(replicas, 1))
            cfg = requests.parse(json.dumps(request).encode(), requests.STREAM_CONFIG)
            acc.create_stream(normalize_config(cfg, name, create=True))
    return True


def retained_headers(topic: bytes, flags: int, deleted: bool, origin: str, source: str) -> bytes:
    """nats-server's mqttEncodeRetainedMessage headers for a retained message (`deleted`: an empty one,
    which removes it)."""
    lines = [
        "NATS/1.0",
        f"Nmqtt-RTopic:{topic.decode()}",
        f"Nmqtt-RFlags:{_DELETE_MARKER if deleted else ''}{flags:x}",
        f"Nmqtt-ROrigin:{origin}",
    ]
    if source:
        lines.append(f"Nmqtt-RSource:{source}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def retained(js: JetStream, account: str, subject_filter: bytes) -> list[tuple[bytes, bytes, bytes]]:
    """(subject, topic, payload) of the retained messages whose subjects `subject_filter` matches, by
    subject."""
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
        if fields.get("Nmqtt-RFlags", _DELETE_MARKER).startswith(_DELETE_MARKER):
            continue
        subject = stored_subject.encode()[len(RETAINED_PREFIX) :]
        found.append((subject, fields.get("Nmqtt-RTopic", "").encode(), msg.data))
    return found
