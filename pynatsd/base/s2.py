"""S2 streams (klauspost/compress s2, as nats-server's stream snapshots are framed), in pure Python.

The framing is Snappy's: a stream identifier chunk (`S2sTwO`, or Snappy's `sNaPpY`), then chunks of
`type u8 | length u24le | body`: 0x00 a compressed block, 0x01 uncompressed data (both led by the masked
CRC-32C of the uncompressed bytes), 0x80-0xfe skippable, 0x02-0x7f refused. A compressed block is
Snappy's block format (uvarint length, literals, copies with 1, 2 or 4 offset bytes) plus S2's repeat:
a one-byte-offset copy with offset 0 reuses the previous offset, its length code 5-7 extended by 1-3 bytes.

The decoder is incremental (`feed` as chunks arrive); the encoders write no copies (uncompressed chunks,
literal-only blocks), which every S2 and Snappy reader takes.
"""

from __future__ import annotations

from pynatsd.base.varint import put_uvarint, read_uvarint

STREAM_ID = b"\xff\x06\x00\x00S2sTwO"
_IDS = (b"S2sTwO", b"sNaPpY")
MAX_BLOCK = 4 << 20  # S2's largest block: a chunk decoding to more is corrupt
_WRITE_CHUNK = 64 << 10  # Snappy's block size: readers of either framing take it
_MASK_DELTA = 0xA282EAD8


class S2Error(ValueError):
    """The bytes are not a valid S2 stream (the text says how, as klauspost's errors do)."""


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C (Castagnoli), as Go's crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))."""
    table = _TABLE
    c = crc ^ 0xFFFFFFFF
    for byte in data:
        c = table[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """The framing's checksum: CRC-32C rotated right by 15 bits plus a constant."""
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def uvarint(buf: bytes, at: int) -> tuple[int, int]:
    """The unsigned varint at `at`, and where it ends; S2Error when cut or too long."""
    try:
        return read_uvarint(buf, at)
    except ValueError:
        raise S2Error("s2: corrupt input") from None


def decode_block(src: bytes) -> bytes:
    """One S2 (or Snappy) block: literals and copies, S2's repeat offsets included."""
    length, s = uvarint(src, 0)
    if length > MAX_BLOCK:
        raise S2Error("s2: corrupt input")
    dst = bytearray()
    offset = 0
    end = len(src)
    while s < end:
        tag = src[s]
        kind = tag & 3
        if kind == 0:  # literal
            x = tag >> 2
            if x < 60:
                s += 1
            else:
                extra = x - 59
                if s + 1 + extra > end:
                    raise S2Error("s2: corrupt input")
                x = int.from_bytes(src[s + 1 : s + 1 + extra], "little")
                s += 1 + extra
            n = x + 1
            if n > length - len(dst) or n > end - s:
                raise S2Error("s2: corrupt input")
            dst += src[s : s + n]
            s += n
            continue
        if kind == 1:  # copy, 1-byte offset (offset 0: S2's repeat of the last offset)
            if s + 2 > end:
                raise S2Error("s2: corrupt input")
            n = (tag >> 2) & 7
            new_offset = ((tag & 0xE0) << 3) | src[s + 1]
            s += 2
            if new_offset == 0:
                if n >= 5:
                    extra = n - 4
                    if s + extra > end:
                        raise S2Error("s2: corrupt input")
                    n = int.from_bytes(src[s : s + extra], "little") + (4, 1 << 8, 1 << 16)[extra - 1]
                    s += extra
            else:
                offset = new_offset
            n += 4
        elif kind == 2:  # copy, 2-byte offset
            if s + 3 > end:
                raise S2Error("s2: corrupt input")
            n = 1 + (tag >> 2)
            offset = src[s + 1] | src[s + 2] << 8
            s += 3
        else:  # copy, 4-byte offset
            if s + 5 > end:
                raise S2Error("s2: corrupt input")
            n = 1 + (tag >> 2)
            offset = int.from_bytes(src[s + 1 : s + 5], "little")
            s += 5
        d = len(dst)
        if offset <= 0 or d < offset or n > length - d:
            raise S2Error("s2: corrupt input")
        if offset >= n:
            dst += dst[d - offset : d - offset + n]
        else:  # overlapping: the pattern of `offset` bytes repeats
            pattern = bytes(dst[d - offset : d])
            dst += (pattern * (n // offset + 1))[:n]
    if len(dst) != length:
        raise S2Error("s2: corrupt input")
    return bytes(dst)


class S2Decoder:
    """An S2 stream decoded as its bytes arrive: `feed` returns what the complete chunks so far hold."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._started = False

    @property
    def at_chunk_boundary(self) -> bool:
        """No chunk half-received (the stream may end here)."""
        return not self._buf

    def feed(self, data: bytes) -> bytes:
        self._buf += data
        buf = self._buf
        out: list[bytes] = []
        at = 0
        if not self._started and buf and buf[0] != 0xFF:
            raise S2Error("s2: corrupt input")  # as soon as the first byte shows it is no S2 stream
        while len(buf) - at >= 4:
            kind = buf[at]
            size = buf[at + 1] | buf[at + 2] << 8 | buf[at + 3] << 16
            if len(buf) - at - 4 < size:
                break
            body = bytes(buf[at + 4 : at + 4 + size])
            at += 4 + size
            if not self._started:
                if kind != 0xFF:
                    raise S2Error("s2: corrupt input")
                self._started = True
            if kind == 0xFF:
                if body not in _IDS:
                    raise S2Error("s2: corrupt input")
            elif kind in (0x00, 0x01):
                if size < 4:
                    raise S2Error("s2: corrupt input")
                data_out = decode_block(body[4:]) if kind == 0 else body[4:]
                if len(data_out) > MAX_BLOCK:
                    raise S2Error("s2: corrupt input")
                if masked_crc(data_out) != int.from_bytes(body[:4], "little"):
                    raise S2Error("s2: corrupt input, crc mismatch")
                out.append(data_out)
            elif kind <= 0x7F:
                raise S2Error("s2: unsupported input")
            # 0x80-0xfe: skippable (padding, S2's index)
        del buf[:at]
        return b"".join(out)


def encode_stream(data: bytes) -> bytes:
    """`data` as an S2 stream of uncompressed chunks (an empty stream is its identifier alone)."""
    parts = [STREAM_ID]
    for at in range(0, len(data), _WRITE_CHUNK):
        chunk = data[at : at + _WRITE_CHUNK]
        size = len(chunk) + 4
        parts.append(bytes((1, size & 0xFF, (size >> 8) & 0xFF, size >> 16)))
        parts.append(masked_crc(chunk).to_bytes(4, "little"))
        parts.append(chunk)
    return b"".join(parts)


_LITERAL_MAX = 1 << 16  # one literal's length in at most 2 extra bytes (S2's encoder emits no longer ones)


def encode_block(data: bytes) -> bytes:
    """`data` as one S2 block (what s2.Encode writes and s2.Decode reads) of literals only: the uvarint
    length, then literals of at most 64 KiB, each tagged with its length - 1 in the tag or 1-2 more bytes."""
    if len(data) > MAX_BLOCK:
        raise S2Error("s2: block too large")  # readers refuse a larger block as corrupt
    parts = [put_uvarint(len(data))]
    for at in range(0, len(data), _LITERAL_MAX):
        chunk = data[at : at + _LITERAL_MAX]
        n = len(chunk) - 1
        if n < 60:
            parts.append(bytes((n << 2,)))
        elif n < 1 << 8:
            parts.append(bytes((60 << 2, n)))
        else:
            parts.append(bytes((61 << 2, n & 0xFF, n >> 8)))
        parts.append(chunk)
    return b"".join(parts)
