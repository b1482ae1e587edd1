"""Go's unsigned varints (encoding/binary's PutUvarint and Uvarint): the one place for the S2 block lengths,
the backup archive's fields and RAFT's lterm."""

from __future__ import annotations


def put_uvarint(value: int) -> bytes:
    """`value` (0 <= value < 2**64) as Go's binary.PutUvarint writes it: 7 bits a byte, low first."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(buf: bytes, at: int = 0) -> tuple[int, int]:
    """The varint at `at` and where it ends, as Go's binary.Uvarint reads it; ValueError when it is cut short
    or overflows 64 bits (a tenth byte above 1, or an eleventh)."""
    value = shift = 0
    for i in range(at, min(len(buf), at + 10)):
        byte = buf[i]
        if byte < 0x80:
            if i - at == 9 and byte > 1:
                break
            return value | byte << shift, i + 1
        value |= (byte & 0x7F) << shift
        shift += 7
    raise ValueError("varint: truncated or overflowing")
