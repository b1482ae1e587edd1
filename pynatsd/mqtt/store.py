"""Where nats-server keeps MQTT state in an account's JetStream, as far as pynatsd keeps it: the
`$MQTT_msgs` stream (interest retention, `$MQTT.msgs.>`) that a QoS 1 PUBLISH is stored in under
`$MQTT.msgs.<subject>`, created with nats-server's configuration at an account's first MQTT client."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pynatsd.jetstream import requests
from pynatsd.jetstream.stream import normalize_config

if TYPE_CHECKING:
    from pynatsd.jetstream import JetStream

MSGS_STREAM = "$MQTT_msgs"
MSGS_PREFIX = b"$MQTT.msgs."


def ensure_msgs_stream(js: JetStream, account: str, replicas: int) -> bool:
    """The account's `$MQTT_msgs` stream, created if missing; False when the account has no JetStream."""
    acc = js.accounts.get(account)
    if acc is None:
        return False
    if MSGS_STREAM not in acc.streams:
        request = {
            "name": MSGS_STREAM,
            "subjects": [MSGS_PREFIX.decode() + ">"],
            "storage": "file",
            "retention": "interest",
            "num_replicas": max(replicas, 1),
        }
        cfg = requests.parse(json.dumps(request).encode(), requests.STREAM_CONFIG)
        acc.create_stream(normalize_config(cfg, MSGS_STREAM, create=True))
    return True
