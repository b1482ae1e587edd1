"""Public nkeys (the ed25519 identities of operators, accounts and users) as nats-server checks them."""

from __future__ import annotations

import base64


def valid_public_nkey(key: str, prefix: str) -> bool:
    """A public nkey: base32 of a prefix byte, a 32-byte ed25519 key and a CRC16 (little endian)."""
    import nkeys  # comes with the nkey support

    if not key.startswith(prefix):
        return False
    try:
        raw = base64.b32decode(key + "=" * (-len(key) % 8))
    except ValueError:
        return False
    if len(raw) != 35:
        return False
    return bool(nkeys.crc16(raw[:-2]) == int.from_bytes(raw[-2:], "little"))
