"""Hashes nats-server places things by, to land where it does (route pool connections, partitions)."""

from __future__ import annotations


def fnv1a32(data: bytes) -> int:
    """FNV-1a, 32 bits (Go's hash/fnv New32a)."""
    digest = 0x811C9DC5
    for byte in data:
        digest = ((digest ^ byte) * 0x01000193) & 0xFFFFFFFF
    return digest
