"""pynatsd: a standalone NATS-protocol pub/sub broker.

Layers (see README "How a message flows"): `protocol` (pure: bytes <-> typed ops), `matcher` (pure: the
subscription index), `broker` (asyncio: server, connections, delivery, outbound), `lifecycle` (the
daemon's life), `monitor` (HTTP), and `spark` (the PySpark connector, an extra).
"""

from pynatsd import extensions

if extensions.disabled():
    extensions.prefer_source()

__version__ = "0.1.0"
#: The nats-server feature level whose client protocol we speak (sent as INFO `version`).
NATS_COMPAT_VERSION = "2.12.0"
