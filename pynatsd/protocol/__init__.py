"""Sans-IO NATS client protocol: bytes in, ops out; ops in, bytes out. No asyncio, no sockets."""

from pynatsd.protocol import encoder, errors, ops
from pynatsd.protocol.connect import ConnectOptions, parse_connect
from pynatsd.protocol.parser import Parser, parse_size

__all__ = ["ConnectOptions", "Parser", "encoder", "errors", "ops", "parse_connect", "parse_size"]
