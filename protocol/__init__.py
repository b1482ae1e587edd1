"""Sans-IO NATS client protocol: bytes in, ops out; ops in, bytes out."""
