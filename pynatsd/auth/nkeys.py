"""Public nkeys (the ed25519 identities of operators, accounts and users) as nats-server checks them."""

from __future__ import annotations

import base64
from typing import Any


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


def valid_user_seed(seed: str) -> bool:
    """A user's seed (`SU...`), as a leaf node remote's `nkey` must be."""
    import nkeys

    try:
        prefix, _ = nkeys.decode_seed(seed.encode())
    except Exception:  # any malformed seed (nkeys raises its own errors and binascii's)
        return False
    return bool(prefix == nkeys.PREFIX_BYTE_USER)


CURVE_PREFIX = 23 << 3  # nkeys PrefixByteCurve: an x25519 public key ("xkey"), encodes to a leading "X"
_SEED_PREFIX = 18 << 3  # nkeys PrefixByteSeed: encodes to a leading "S"
XKEY_VERSION = b"xkv1"  # what nkeys puts before the nonce of a sealed message
_NONCE_SIZE = 24


def _crc16(data: bytes) -> int:
    import nkeys

    return int(nkeys.crc16(data))


def encode_public(prefix: int, raw: bytes) -> str:
    """A public nkey: base32 of `prefix`, the 32-byte key and its CRC16."""
    data = bytes([prefix]) + raw
    return base64.b32encode(data + _crc16(data).to_bytes(2, "little")).decode().rstrip("=")


def public_key_bytes(key: str, prefix: str) -> bytes | None:
    """The raw 32 bytes inside a public nkey with `prefix` ("X" for an xkey), or None if it is not one."""
    if not valid_public_nkey(key, prefix):
        return None
    return base64.b32decode(key + "=" * (-len(key) % 8))[1:33]


class XKeyError(ValueError):
    """A sealed message that cannot be opened (the nkeys library's words)."""


class XKey:
    """An x25519 key pair ("xkey", nkeys' curve keys): seals for and opens from another xkey, as nkeys
    does (NaCl box: `xkv1` + 24-byte nonce + box)."""

    def __init__(self, private: bytes | None = None) -> None:
        import nacl.public  # comes with `nkeys`

        self._private = (
            nacl.public.PrivateKey(private) if private is not None else nacl.public.PrivateKey.generate()
        )
        self.public = encode_public(CURVE_PREFIX, bytes(self._private.public_key))

    @property
    def seed(self) -> str:
        """The seed text nkeys writes for a curve key ("SX...")."""
        raw = bytes([_SEED_PREFIX | (CURVE_PREFIX >> 5), (CURVE_PREFIX & 31) << 3]) + bytes(self._private)
        return base64.b32encode(raw + _crc16(raw).to_bytes(2, "little")).decode().rstrip("=")

    @classmethod
    def from_seed(cls, seed: str) -> XKey:
        raw = base64.b32decode(seed + "=" * (-len(seed) % 8))
        if len(raw) != 36 or _crc16(raw[:-2]) != int.from_bytes(raw[-2:], "little"):
            raise XKeyError("nkeys: invalid seed")
        return cls(raw[2:34])

    def _box(self, other: str) -> Any:
        import nacl.public

        raw = public_key_bytes(other, "X")
        if raw is None:
            raise XKeyError("nkeys: invalid recipient")
        return nacl.public.Box(self._private, nacl.public.PublicKey(raw))

    def seal(self, data: bytes, recipient: str) -> bytes:
        return XKEY_VERSION + bytes(self._box(recipient).encrypt(data))

    def open(self, data: bytes, sender: str) -> bytes:
        import nacl.exceptions

        if len(data) <= len(XKEY_VERSION) + _NONCE_SIZE:
            raise XKeyError("nkeys: encrypted input is not valid")
        if not data.startswith(XKEY_VERSION):
            raise XKeyError("nkeys: encrypted input wrong version")
        box = self._box(sender)
        try:
            return bytes(box.decrypt(data[len(XKEY_VERSION) :]))
        except nacl.exceptions.CryptoError:
            raise XKeyError("nkeys: could not decrypt input") from None
