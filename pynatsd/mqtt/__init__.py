"""MQTT 3.1.1 clients (nats-server's `mqtt {}` listener): a feature that takes the Broker.

`packets` is sans-IO (framing, fields, topic <-> subject); `connection` is one client (an asyncio
protocol and a delivery Client whose frames are PUBLISH packets); `listener` holds the port; `store` and
`delivery` are what is kept in JetStream (streams, session records; QoS 1/2 subscriptions' consumers).
MQTT 5.0 clients too: `properties` (sans-IO: 5.0 properties and their NATS headers) and `v5` (what a
5.0 client's connection adds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pynatsd.base.listener import start_or_exit
from pynatsd.config.mqtt import mqtt_options

if TYPE_CHECKING:
    from pynatsd.broker.core import Broker
    from pynatsd.jetstream import JetStream
    from pynatsd.mqtt.listener import MQTTListener

__all__ = ["start_mqtt"]


async def start_mqtt(server: Broker, jetstream: JetStream | None) -> MQTTListener | None:
    """Start the server's MQTT listener when its options configure one (`jetstream`: this server's own,
    which nats-server requires of a standalone MQTT server, and where QoS 1 messages are stored)."""
    mqtt = mqtt_options(server.options)
    if mqtt is None:
        return None
    from pynatsd.mqtt.listener import MQTTListener

    listener = MQTTListener(server, mqtt, jetstream)
    await start_or_exit(listener.start(), "MQTT")
    return listener
