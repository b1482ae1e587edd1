"""Server identities (nats-server's 56-character server id is the public nkey of a fresh server key) and the
unique ids of the events the server publishes (NUIDs)."""

from __future__ import annotations

import base64
import os

_SERVER_PREFIX = 13 << 3  # nkeys PrefixByteServer: encodes to a leading "N"
_BASE62 = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


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


class Nuid:
    """NATS unique ids (22 base-62 characters, as nats-server's `nuid.Next()`): a random 12-character
    prefix and a 10-character sequence moved on by a random step, the prefix renewed when it runs out."""

    _MAX_SEQ = 62**10

    def __init__(self) -> None:
        self._prefix = b""
        self._seq = 0
        self._step = 0
        self._renew()

    def _renew(self) -> None:
        self._prefix = bytes(_BASE62[b % 62] for b in os.urandom(12))
        rand = int.from_bytes(os.urandom(8), "big")
        self._seq = rand % (self._MAX_SEQ // 2)
        self._step = 33 + rand % 300

    def next(self) -> str:
        self._seq += self._step
        if self._seq >= self._MAX_SEQ:
            self._renew()
        n, digits = self._seq, bytearray(10)
        for i in range(9, -1, -1):
            n, digits[i] = divmod(n, 62)
            digits[i] = _BASE62[digits[i]]
        return (self._prefix + bytes(digits)).decode()


_nuid = Nuid()


def event_id() -> str:
    """A unique id for an advisory or event, of nats-server's shape (a NUID)."""
    return _nuid.next()
