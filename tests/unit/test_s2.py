"""base/s2: S2 stream framing and blocks, as nats-server's snapshots are framed."""

from __future__ import annotations

import hashlib

import pytest

from pynatsd.base.s2 import (
    MAX_BLOCK,
    S2Decoder,
    S2Error,
    crc32c,
    decode_block,
    encode_block,
    encode_stream,
    masked_crc,
)

# A snapshot nats-server 2.15.1 sent (`STREAM.SNAPSHOT`, 8 messages, a durable): one compressed chunk
# whose block has literals, 1- and 2-byte offset copies and S2 repeats (codes 1 and 5). Its CRC-32C,
# computed by nats-server over the true bytes, checks the decoding.
NATS_SERVER_SNAPSHOT = bytes.fromhex(
    "ff06000053327354774f00c30200589ee0eab107c44e415453415243310abaf092f8cba9f6eb310000c1017374617465"
    "2e6a736f6e7b226d65737361676573223a382c22627974010a403334362c2266697273745f736571223a31110e9c7473"
    "223a22323032362d31312d32375431343a31373a35352e3733383332363633355a222c226c61153900300d0e66390054"
    "34313137353033375a222c226e756d5f7375626a65630130003309117864656c65746564223a322c22636f6e73756d65"
    "725f636f756e74223a317d0b1dd904ec03112078732f447b22636f6e666967223a7b2264757261626c655f6e616d6522"
    "3a2244016b190b6464656c697665725f706f6c696379223a22616c6c222c2261636b19131c6578706c696369740d1820"
    "77616974223a3330301102142c226d61785f0d4a2c223a2d312c2266696c74657211d04c223a22732e5c753030336522"
    "2c227265706c6179195f14696e7374616e015e3c6d61785f77616974696e67223a35313209591c61636b5f70656e6405"
    "1600310570146e756d5f72650196386173223a302c226d6574616461746101f15c5f6e6174732e7265712e6c6576656c"
    "223a2230227d7d2c2225f901210daa046564010d313629ed003301270c7265616d29c304337d09f310666c6f6f72462e"
    "0000311500060c317d2c2215a9087b22320105b853657175656e6365223a322c2254696d657374616d70223a31373935"
    "3738393037353733383739373230307d2c223336330000331500113c393330323331357d7d7d7d03d6d9c7ee45de3001"
    "0002732e30783003a09281ef051214021202732e3161084c2f312e300d0a483a20310d0a0d0a783103d6e6be09240003"
    "01361c32783203b08c8df00512000501121831783403c2abb2091200060148003215000500350500143503e2a6d0f005"
    "48000701361830783603de90ed091200080136367e0000370500143703be8d87f1053630090002732e32783800000000"
    "00"
)
DECODED_SHA256 = "19bdf03a3b2d9c1197d624fa323a44785e3742119b14d19d2d26d81639c220a6"


def test_crc32c_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the Castagnoli polynomial's published check value
    assert crc32c(b"") == 0
    assert crc32c(b"6789", crc32c(b"12345")) == 0xE3069283  # continued, as Go's crc32.Update


def test_decodes_nats_server_output() -> None:
    decoded = S2Decoder().feed(NATS_SERVER_SNAPSHOT)
    assert len(decoded) == 945 and hashlib.sha256(decoded).hexdigest() == DECODED_SHA256
    assert decoded.startswith(b"NATSARC1") and b"state.json" in decoded


def test_decodes_byte_by_byte() -> None:
    decoder = S2Decoder()
    out = b"".join(decoder.feed(NATS_SERVER_SNAPSHOT[i : i + 1]) for i in range(len(NATS_SERVER_SNAPSHOT)))
    assert hashlib.sha256(out).hexdigest() == DECODED_SHA256 and decoder.at_chunk_boundary
    half = S2Decoder()
    half.feed(NATS_SERVER_SNAPSHOT[:-1])
    assert not half.at_chunk_boundary


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (b"\x04\x0cabcd", b"abcd"),  # a literal
        (b"\x0a\x0cabcd\x09\x04", b"abcdabcdab"),  # copy, 1-byte offset 4, length 6 (overlapping)
        (b"\x0e\x0cabcd\x09\x04\x01\x00", b"abcdabcdabcdab"),  # then S2's repeat: offset 4 again, length 4
        (b"\x18\x0cabcd\x09\x04\x15\x00\x06", b"abcd" * 6),  # repeat code 5: length byte + 8
        (b"\x0a\x0cabcd\x16\x04\x00", b"abcdabcdab"),  # copy, 2-byte offset
        (b"\x0a\x0cabcd\x17\x04\x00\x00\x00", b"abcdabcdab"),  # copy, 4-byte offset
        (b"\x46\xf0\x45" + b"x" * 70, b"x" * 70),  # a literal with its length in the next byte
    ],
)
def test_block_elements(block: bytes, expected: bytes) -> None:
    assert decode_block(block) == expected


@pytest.mark.parametrize(
    "block",
    [
        b"\x08\x0cabcd\x01\x00",  # a repeat before any offset
        b"\x0a\x0cabcd\x09\x05",  # an offset before the start
        b"\x05\x0cabcd",  # shorter than it says
        b"\x04\x0cab",  # a literal past the end
        b"\x08\x0cabcd\x16\x04",  # a cut copy
    ],
)
def test_corrupt_blocks(block: bytes) -> None:
    with pytest.raises(S2Error):
        decode_block(block)


def test_stream_round_trip_and_checks() -> None:
    data = bytes(range(256)) * 600  # past one 64 KiB chunk
    framed = encode_stream(data)
    assert S2Decoder().feed(framed) == data
    assert S2Decoder().feed(b"\xff\x06\x00\x00sNaPpY" + framed[10:]) == data  # Snappy's identifier too
    bad_crc = bytearray(framed)
    bad_crc[15] ^= 1
    with pytest.raises(S2Error, match="crc"):
        S2Decoder().feed(bytes(bad_crc))
    with pytest.raises(S2Error):
        S2Decoder().feed(b"garbage")  # no identifier first
    with pytest.raises(S2Error, match="unsupported"):
        S2Decoder().feed(encode_stream(b"") + b"\x02\x01\x00\x00x")  # a reserved unskippable chunk
    skippable = encode_stream(b"") + b"\xfe\x02\x00\x00pd" + framed[10:]
    assert S2Decoder().feed(skippable) == data
    chunk = b"hello"
    assert framed[10:14] == bytes((1, 0x04, 0x00, 0x01))  # 65536 + 4 bytes, uncompressed
    assert encode_stream(chunk)[14:18] == masked_crc(chunk).to_bytes(4, "little")


@pytest.mark.parametrize("size", [0, 1, 60, 61, 256, 257, 65536, 65537, 200_000])
def test_block_encoder_round_trips(size: int) -> None:
    data = bytes((i * 7) & 0xFF for i in range(size))
    assert decode_block(encode_block(data)) == data


def test_block_encoder_layout() -> None:
    # What s2.Encode writes for input too short to search for copies: the length, one literal.
    assert encode_block(b"abcd") == b"\x04\x0cabcd"
    assert encode_block(b"") == b"\x00"
    assert encode_block(b"x" * 70)[:3] == b"\x46\xf0\x45"  # length 70 as a uvarint, then 69 in one byte
    assert encode_block(b"x" * 300)[:5] == b"\xac\x02\xf4\x2b\x01"  # 299 in two bytes
    with pytest.raises(S2Error):
        encode_block(bytes(MAX_BLOCK + 1))
