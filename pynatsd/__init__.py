"""pynatsd: a standalone NATS-protocol pub/sub broker.

Layers (see README "How a message flows"): `protocol` (pure: bytes <-> typed ops), `matcher` (pure: the
subscription index), `broker` (asyncio: server, connections, delivery, outbound), `lifecycle` (the
daemon's life), `monitor` (HTTP), and `spark` (the PySpark connector, an extra).
"""

from pynatsd import extensions

if extensions.disabled():
    extensions.prefer_source()

__version__ = "0.1.0"
#: The nats-server release whose behaviour pynatsd implements (its tests compare against that binary):
#: INFO's `version`, which clients parse as a plain semver to gate features (headers since 2.2…); the
#: JetStream features served are named by the API level (pynatsd.jetstream.stream.API_LEVEL), which newer
#: clients check instead.
NATS_COMPAT_VERSION = "2.15.1"
#: /varz `version`: the level, with pynatsd's own release as semver build metadata (ignored when versions
#: are compared, so tools gate as for that nats-server; read by people as pynatsd's).
VARZ_VERSION = f"{NATS_COMPAT_VERSION}+pynatsd.{__version__}"
