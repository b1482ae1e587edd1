"""pynatsd's asyncio layer: server, connections, outbound queues, CLI."""

__version__ = "0.1.0"
#: The nats-server feature level whose client protocol we speak (sent as INFO `version`).
NATS_COMPAT_VERSION = "2.12.0"
