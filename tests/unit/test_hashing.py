"""FNV-1a (32 bits), against the published test vectors (Go's hash/fnv gives the same)."""

from __future__ import annotations

from pynatsd.base.hashing import fnv1a32


def test_fnv1a32_vectors() -> None:
    assert fnv1a32(b"") == 0x811C9DC5
    assert fnv1a32(b"a") == 0xE40C292C
    assert fnv1a32(b"foobar") == 0xBF9CF968
