"""Server identities: nats-server's 56-character server id is the public nkey of a fresh server key."""

from __future__ import annotations

import base64
import os

_SERVER_PREFIX = 13 << 3  # nkeys PrefixByteServer: encodes to a leading "N"


def _crc16(data: bytes) -> int:
    """CRC-16/XMODEM, as nkeys uses for its checksum."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def new_server_id() -> str:
    """A random server public nkey: 56 base32 characters starting with N."""
    raw = bytes([_SERVER_PREFIX]) + os.urandom(32)
    raw += _crc16(raw).to_bytes(2, "little")
    return base64.b32encode(raw).decode().rstrip("=")


def new_server_key() -> tuple[str, bytes]:
    """A fresh server identity: (its id, the public nkey; its 32-byte ed25519 seed, which signs what the
    server issues, e.g. the authorization requests of an auth callout)."""
    seed = os.urandom(32)
    from nacl.signing import SigningKey  # comes with `nkeys`; only its public half is needed here

    raw = bytes([_SERVER_PREFIX]) + bytes(SigningKey(seed).verify_key)
    raw += _crc16(raw).to_bytes(2, "little")
    return base64.b32encode(raw).decode().rstrip("="), seed
