"""RFC 6455 framing, sans-IO: bytes in, NATS bytes and control events out; frame headers for the way back.

NATS is a byte stream, so the decoder hands on the payload of data frames as it arrives, across frame and
message boundaries, without waiting for a message to end (as nats-server does). Only a compressed message
(RFC 7692 permessage-deflate) is gathered until its final frame, then inflated on its own: pynatsd
negotiates `client_no_context_takeover`, so every message starts a fresh inflater.

Errors raise `WebSocketError`, carrying the close code and text nats-server sends back before closing.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass

# Opcodes (RFC 6455 5.2).
CONTINUATION = 0x0
TEXT = 0x1
BINARY = 0x2
CLOSE = 0x8
PING = 0x9
PONG = 0xA

FIN = 0x80
RSV1 = 0x40  # "compressed" under permessage-deflate
RSV23 = 0x30
MASK = 0x80
MAX_CONTROL_PAYLOAD = 125

# Close codes (RFC 6455 7.4.1).
NORMAL_CLOSURE = 1000
GOING_AWAY = 1001
PROTOCOL_ERROR = 1002
NO_STATUS_RECEIVED = 1005
INVALID_PAYLOAD_DATA = 1007
POLICY_VIOLATION = 1008
MESSAGE_TOO_BIG = 1009
INTERNAL_ERROR = 1011
TLS_HANDSHAKE = 1015

# What a deflate stream flushed with Z_SYNC_FLUSH ends with; RFC 7692 drops it from each message.
_DEFLATE_TAIL = b"\x00\x00\xff\xff"
# Only payloads above this many bytes are worth compressing (nats-server's wsCompressThreshold).
COMPRESS_THRESHOLD = 64

_H16 = struct.Struct("!BBH")
_H64 = struct.Struct("!BBQ")
_U16 = struct.Struct("!H")

# NATS bytes out of the decoder: a bytearray when unmasking produced it (`b"".join` makes bytes of them, as
# the parser needs: it keeps slices as dict keys).
Data = bytes | bytearray


class WebSocketError(Exception):
    """A violation of RFC 6455 by the peer: close with `code` and `reason`."""

    def __init__(self, reason: str, code: int = PROTOCOL_ERROR) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class MessageTooLarge(WebSocketError):
    """A compressed message past its bounds (nats-server's ErrMaxPayload on its websocket read: not a
    protocol error, a read error). `events`: what was decoded before it, and of a message that inflates
    past the limit its first `max_inflated` bytes (nats-server parses those, then closes)."""

    def __init__(self, events: list[Data | Control]) -> None:
        super().__init__("maximum payload exceeded", GOING_AWAY)
        self.events = events


@dataclass(frozen=True, slots=True)
class Control:
    """A control frame received: PING (answer with its payload), PONG, or CLOSE with its code/reason."""

    opcode: int
    payload: bytes = b""
    code: int = NO_STATUS_RECEIVED
    reason: str = ""


def unmask_int(data: bytes | bytearray | memoryview, key: bytes) -> bytes | bytearray:
    """XOR `data` with the 4-byte `key` repeated, done on two big integers so that it runs in C."""
    n = len(data)
    if not n:
        return b""
    mask = key * (n // 4 + 1)
    return (int.from_bytes(data, "little") ^ int.from_bytes(mask[:n], "little")).to_bytes(n, "little")


try:
    # aiohttp (already a dependency) ships a compiled masker, the one its own WebSocket reader uses: about
    # 50x the big-integer XOR on 64 KiB frames (bench/websocket/framing.py). It is a private module, so the
    # pure-Python way stays as the fallback, tested the same.
    from aiohttp._websocket.mask import _websocket_mask_cython as _mask_in_place
except ImportError:  # pragma: no cover - depends on the aiohttp build
    _mask_in_place = None


def unmask_c(data: bytes | bytearray | memoryview, key: bytes) -> bytes | bytearray:
    buf = bytearray(data)  # the one copy: the caller joins the chunks of a read into bytes anyway
    _mask_in_place(key, buf)
    return buf


unmask = unmask_c if _mask_in_place is not None else unmask_int


def frame_header(length: int, opcode: int = BINARY, fin: bool = True, compressed: bool = False) -> bytes:
    """The header of an unmasked (server-to-client) frame carrying `length` payload bytes."""
    b0 = opcode | (FIN if fin else 0) | (RSV1 if compressed else 0)
    if length <= 125:
        return bytes((b0, length))
    if length < 65536:
        return _H16.pack(b0, 126, length)
    return _H64.pack(b0, 127, length)


def masked_frame(payload: bytes, opcode: int = BINARY, compressed: bool = False) -> bytes:
    """A whole client-to-server frame: `payload` masked with a fresh random key (RFC 6455 5.3)."""
    header = bytearray(frame_header(len(payload), opcode, compressed=compressed))
    header[1] |= MASK
    key = os.urandom(4)
    return bytes(header) + key + bytes(unmask(payload, key))


def close_payload(code: int, reason: str = "") -> bytes:
    """A CLOSE frame's payload: the code, then the reason cut to fit a control frame ("..." when cut)."""
    text = reason.encode()
    if len(text) > MAX_CONTROL_PAYLOAD - 2:
        text = text[: MAX_CONTROL_PAYLOAD - 5] + b"..."
    return _U16.pack(code) + text


def control_frame(opcode: int, payload: bytes = b"") -> bytes:
    return frame_header(len(payload), opcode) + payload


def valid_close_code(code: int) -> bool:
    """Codes a peer may send (RFC 6455 7.4): 1000-1015 less the reserved ones, and 3000-4999."""
    if code in (1004, 1005, 1006, 1015):
        return False
    return 1000 <= code <= 1015 or 3000 <= code <= 4999


def deflate(pieces: list[bytes | memoryview]) -> bytes:
    """One outgoing message's compressed payload; a fresh compressor each time (server_no_context_takeover:
    no window shared between messages)."""
    comp = zlib.compressobj(1, zlib.DEFLATED, -15)  # level 1: nats-server's flate.BestSpeed
    out = [comp.compress(p) for p in pieces]
    out.append(comp.flush(zlib.Z_SYNC_FLUSH))
    data = b"".join(out)
    return data[:-4] if data.endswith(_DEFLATE_TAIL) else data


class Decoder:
    """Decodes client frames. `feed(data)` returns NATS bytes (data frames, unmasked, inflated; `Data`) and
    control events in arrival order; raises WebSocketError on a protocol violation (the connection is then
    done).

    `max_message` bounds a compressed message, gathered whole before it can be inflated (nats-server:
    8 x max_payload, at most 64 MiB), and `max_inflated` what it inflates to (nats-server: max_payload);
    past either, MessageTooLarge.
    """

    __slots__ = (
        "_buf",
        "_compressed",
        "_gathered",
        "_gathered_size",
        "_in_message",
        "_key",
        "_key_pos",
        "_remaining",
        "compression",
        "masked",
        "max_inflated",
        "max_message",
    )

    def __init__(
        self,
        compression: bool = False,
        masked: bool = True,
        max_message: int = 64 << 20,
        max_inflated: int = 64 << 20,
    ) -> None:
        self.compression = compression
        self.masked = masked  # clients must mask (RFC 6455 5.1), unless they asked for Nats-No-Masking
        self.max_message = max_message
        self.max_inflated = max_inflated
        self._buf = b""
        self._remaining = 0  # payload bytes of the current data frame still to come
        self._key = b""
        self._key_pos = 0
        self._in_message = False  # a data message whose final frame has not come yet
        self._compressed = False
        self._gathered: list[Data] = []
        self._gathered_size = 0

    def feed(self, data: bytes) -> list[Data | Control]:
        buf = self._buf + data if self._buf else data
        self._buf = b""
        view = memoryview(buf)  # masked payloads are copied once, by the unmasking
        out: list[Data | Control] = []
        pos, end = 0, len(buf)
        while pos < end:
            if self._remaining:
                n = min(self._remaining, end - pos)
                self._payload(view[pos : pos + n] if self._key else buf[pos : pos + n], out)
                pos += n
                continue
            header = self._header(buf, pos, end, out)
            if header < 0:
                self._buf = buf[pos:]
                break
            pos = header
        return out

    def _header(self, buf: bytes, pos: int, end: int, out: list[Data | Control]) -> int:
        """Parses one frame header at `pos` (and a whole control frame); returns the position after it, or
        -1 when more bytes are needed."""
        if end - pos < 2:
            return -1
        b0, b1 = buf[pos], buf[pos + 1]
        opcode, fin, rsv1 = b0 & 0x0F, bool(b0 & FIN), bool(b0 & RSV1)
        if b0 & RSV23:
            raise WebSocketError("RSV2 and RSV3 must be clear")
        if rsv1 and not self.compression:
            raise WebSocketError("compressed frame received without negotiated permessage-deflate")
        masked = bool(b1 & MASK)
        if self.masked and not masked:
            raise WebSocketError("mask bit missing")
        length = b1 & 0x7F
        at = pos + 2
        if opcode >= CLOSE:
            if opcode > PONG:
                raise WebSocketError(f"unknown opcode {opcode}")
            if length > MAX_CONTROL_PAYLOAD:
                raise WebSocketError(
                    f"control frame length bigger than maximum allowed of {MAX_CONTROL_PAYLOAD} bytes"
                )
            if not fin:
                raise WebSocketError("control frame does not have final bit set")
            if rsv1:
                raise WebSocketError("control frame must not be compressed")
        elif opcode in (TEXT, BINARY):
            if self._in_message:
                raise WebSocketError(
                    "new message started before final frame for previous message was received"
                )
            self._compressed = rsv1
        elif opcode == CONTINUATION:
            if not self._in_message or rsv1:
                raise WebSocketError("invalid continuation frame")
        else:
            raise WebSocketError(f"unknown opcode {opcode}")
        if length == 126:
            if end - at < 2:
                return -1
            length = _U16.unpack_from(buf, at)[0]
            at += 2
        elif length == 127:
            if end - at < 8:
                return -1
            length = int.from_bytes(buf[at : at + 8], "big")
            if length >> 63:
                raise WebSocketError("invalid 64-bit payload length")
            at += 8
        key = b""
        if masked:
            if end - at < 4:
                return -1
            key = buf[at : at + 4]
            at += 4
        if opcode >= CLOSE:
            if end - at < length:
                return -1
            payload = buf[at : at + length]
            out.append(_control(opcode, bytes(unmask(payload, key)) if masked else payload))
            return at + length
        # A data frame: from here on its payload streams through `_payload`.
        self._in_message = not fin
        self._key, self._key_pos = key, 0
        self._remaining = length
        if self._compressed and length > self.max_message - self._gathered_size:
            raise MessageTooLarge(out)
        if fin and not length:
            self._message_done(out)
        return at

    def _payload(self, chunk: bytes | memoryview, out: list[Data | Control]) -> None:
        if self._key:
            key = self._key
            if self._key_pos:
                key = key[self._key_pos :] + key[: self._key_pos]
            self._key_pos = (self._key_pos + len(chunk)) & 3
            data = unmask(chunk, key)
        else:
            data = bytes(chunk)  # a bytes slice already: returned as is
        self._remaining -= len(data)
        if self._compressed:
            self._gathered.append(data)
            self._gathered_size += len(data)
        elif data:
            out.append(data)
        if not self._remaining and not self._in_message:
            self._message_done(out)

    def _message_done(self, out: list[Data | Control]) -> None:
        if not self._compressed:
            return
        self._compressed = False
        data = b"".join(self._gathered)
        self._gathered, self._gathered_size = [], 0
        inflater = zlib.decompressobj(-15)
        try:
            plain = inflater.decompress(data + _DEFLATE_TAIL, self.max_inflated + 1)
        except zlib.error as exc:
            raise WebSocketError(f"invalid compressed data: {exc}", INVALID_PAYLOAD_DATA) from None
        if len(plain) > self.max_inflated:
            out.append(plain[: self.max_inflated])
            raise MessageTooLarge(out)
        if plain:
            out.append(plain)


def _control(opcode: int, payload: bytes) -> Control:
    if opcode != CLOSE:
        return Control(opcode, payload)
    if not payload:
        return Control(CLOSE)
    if len(payload) == 1:
        raise WebSocketError("close frame payload cannot be 1 byte")
    code = _U16.unpack_from(payload)[0]
    if not valid_close_code(code):
        raise WebSocketError(f"invalid close status code {code}")
    try:
        reason = payload[2:].decode()
    except UnicodeDecodeError:
        return Control(CLOSE, payload, INVALID_PAYLOAD_DATA, "invalid utf8 body in close frame")
    return Control(CLOSE, payload, code, reason)
