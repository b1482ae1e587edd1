"""pynatsd: a standalone NATS-protocol pub/sub broker.

Packages, lowest layer first (README "The code"; tests/unit/test_layers.py keeps imports running down):
`protocol` and `matcher` (pure), `base` (options, values, logging, listeners, TLS), `auth`, `config`,
`broker` (the core: Broker, connections, delivery, outbound), `accounts`, the features `jetstream`,
`routes` and `websocket`, `lifecycle`, `node` (the broker with its listeners and features), `monitor`,
`server` (the composition root), `cli`; and `spark` (the PySpark connector, an extra, over the wire only).
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
