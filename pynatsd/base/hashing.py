"""Hashes nats-server places things by, to land where it does (route pool connections, partitions)."""

from __future__ import annotations

import hashlib

_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def fnv1a32(data: bytes) -> int:
    """FNV-1a, 32 bits (Go's hash/fnv New32a)."""
    digest = 0x811C9DC5
    for byte in data:
        digest = ((digest ^ byte) * 0x01000193) & 0xFFFFFFFF
    return digest


def base62_sha256(text: str, length: int) -> str:
    """nats-server's getHash (8 characters: stream identities, sourcing names, MQTT session subjects) and
    getGWHash (6: gateway reply prefixes): `length` base-62 digits from the SHA-256 of `text`."""
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(_BASE62[b % 62] for b in digest[:length])
