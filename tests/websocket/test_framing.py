"""The sans-IO parts: frame decoding (whole, byte by byte, with trailing bytes), the upgrade, the config."""

from __future__ import annotations

import os
import struct
import zlib

import pytest

from pynatsd.base.options import Options
from pynatsd.config.parser import parse
from pynatsd.config.schema import ConfigValueError, apply_config
from pynatsd.config.websocket import WebSocketOptions, parse_block, tls_options, validate, websocket_options
from pynatsd.websocket import framing
from pynatsd.websocket.framing import Control, Decoder, WebSocketError
from pynatsd.websocket.handshake import HandshakeError, accept_key, parse_request, upgrade
from tests.conftest import need_tool

KEY = b"\x11\x22\x33\x44"


@pytest.fixture(autouse=True, params=["compiled", "int"])
def masker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test with either unmasking implementation (aiohttp's compiled one, the big-integer XOR)."""
    if request.param == "compiled":
        need_tool(framing._mask_in_place is not None, "aiohttp's compiled WebSocket masker")
        monkeypatch.setattr(framing, "unmask", framing.unmask_c)
    else:
        monkeypatch.setattr(framing, "unmask", framing.unmask_int)
    return str(request.param)


@pytest.mark.parametrize("size", [0, 1, 3, 4, 5, 17, 4096, 100_001])
def test_unmask_implementations_agree(size: int) -> None:
    data = os.urandom(size)
    expected = bytes(b ^ KEY[i % 4] for i, b in enumerate(data))
    assert framing.unmask(data, KEY) == expected
    assert framing.unmask(memoryview(data), KEY) == expected


def client_frame(
    payload: bytes,
    opcode: int = framing.BINARY,
    fin: bool = True,
    rsv1: bool = False,
    key: bytes | None = KEY,
) -> bytes:
    """A frame as a client writes it: masked with `key` (None: unmasked)."""
    b0 = opcode | (0x80 if fin else 0) | (0x40 if rsv1 else 0)
    n = len(payload)
    mask_bit = 0x80 if key is not None else 0
    if n <= 125:
        head = bytes((b0, mask_bit | n))
    elif n < 65536:
        head = struct.pack("!BBH", b0, mask_bit | 126, n)
    else:
        head = struct.pack("!BBQ", b0, mask_bit | 127, n)
    if key is None:
        return head + payload
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def compressed(payload: bytes) -> bytes:
    comp = zlib.compressobj(6, zlib.DEFLATED, -15)
    data = comp.compress(payload) + comp.flush(zlib.Z_SYNC_FLUSH)
    assert data.endswith(b"\x00\x00\xff\xff")
    return data[:-4]


def decode_three_ways(stream: bytes, **kw: bool) -> list[bytes | Control]:
    """h11's trio: the stream at once, one byte at a time, and in two halves; data chunks joined per run."""

    def norm(events: list[framing.Data | Control]) -> list[bytes | Control]:
        out: list[bytes | Control] = []
        for e in events:
            if isinstance(e, Control):
                out.append(e)
            elif out and isinstance(out[-1], bytes):
                out[-1] += e
            else:
                out.append(bytes(e))
        return out

    whole = norm(Decoder(**kw).feed(stream))
    dec = Decoder(**kw)
    bytewise = norm([e for i in range(len(stream)) for e in dec.feed(stream[i : i + 1])])
    dec = Decoder(**kw)
    half = len(stream) // 2
    halves = norm(dec.feed(stream[:half]) + dec.feed(stream[half:]))
    assert whole == bytewise == halves
    return whole


def test_binary_and_text_frames_are_nats_bytes() -> None:
    stream = client_frame(b"PUB a 2\r\nhi\r\n") + client_frame(b"PING\r\n", framing.TEXT)
    assert decode_three_ways(stream) == [b"PUB a 2\r\nhi\r\nPING\r\n"]


@pytest.mark.parametrize("size", [125, 126, 65535, 65536, 200_000])
def test_payload_lengths(size: int) -> None:
    payload = os.urandom(size)
    assert decode_three_ways(client_frame(payload)) == [payload]


def test_fragmented_message_with_control_frame_in_between() -> None:
    stream = (
        client_frame(b"PUB a 5\r\n", fin=False)
        + client_frame(b"ping!", framing.PING)
        + client_frame(b"hello", framing.CONTINUATION, fin=False)
        + client_frame(b"\r\n", framing.CONTINUATION)
    )
    assert decode_three_ways(stream) == [b"PUB a 5\r\n", Control(framing.PING, b"ping!"), b"hello\r\n"]


def test_compressed_message_fragmented() -> None:
    body = b"PUB subject 1000\r\n" + b"x" * 1000 + b"\r\n"
    data = compressed(body)
    stream = client_frame(data[:10], fin=False, rsv1=True) + client_frame(data[10:], framing.CONTINUATION)
    assert decode_three_ways(stream, compression=True) == [body]


def test_unmasked_frames_when_no_masking_was_negotiated() -> None:
    assert Decoder(masked=False).feed(client_frame(b"PING\r\n", key=None)) == [b"PING\r\n"]


def test_close_frame_carries_code_and_reason() -> None:
    events = Decoder().feed(client_frame(struct.pack("!H", 1000) + b"bye", framing.CLOSE))
    assert events == [Control(framing.CLOSE, struct.pack("!H", 1000) + b"bye", 1000, "bye")]
    assert Decoder().feed(client_frame(b"", framing.CLOSE)) == [Control(framing.CLOSE)]
    bad_utf8 = Decoder().feed(client_frame(struct.pack("!H", 1000) + b"\xff", framing.CLOSE))
    assert bad_utf8[0] == Control(
        framing.CLOSE, struct.pack("!H", 1000) + b"\xff", 1007, "invalid utf8 body in close frame"
    )


@pytest.mark.parametrize(
    ("stream", "reason"),
    [
        (client_frame(b"x", key=None), "mask bit missing"),
        (bytes([0x80 | 0x20, 0x80]) + KEY, "RSV2 and RSV3 must be clear"),
        (client_frame(b"x", rsv1=True), "compressed frame received without negotiated permessage-deflate"),
        (client_frame(b"x", 0x3), "unknown opcode 3"),
        (client_frame(b"x" * 126, framing.PING), "control frame length bigger than maximum allowed of 125"),
        (client_frame(b"", framing.PING, fin=False), "control frame does not have final bit set"),
        (client_frame(b"x", framing.CONTINUATION), "invalid continuation frame"),
        (
            client_frame(b"a", fin=False) + client_frame(b"b"),
            "new message started before final frame for previous message was received",
        ),
        (client_frame(b"\x03", framing.CLOSE), "close frame payload cannot be 1 byte"),
        (client_frame(struct.pack("!H", 1005), framing.CLOSE), "invalid close status code 1005"),
    ],
)
def test_protocol_errors(stream: bytes, reason: str) -> None:
    with pytest.raises(WebSocketError) as err:
        Decoder().feed(stream)
    assert err.value.code == framing.PROTOCOL_ERROR
    assert err.value.reason.startswith(reason)


def test_compressed_message_over_the_limit() -> None:
    """Inflated past `max_inflated` (nats-server: max_payload): its first `max_inflated` bytes come with
    the error (nats-server parses those); gathered past `max_message`: what came before."""
    body = compressed(b"\x00" * 100_000)  # inflates far beyond the limit
    stream = client_frame(b"PING\r\n") + client_frame(body, rsv1=True)
    with pytest.raises(framing.MessageTooLarge) as err:
        Decoder(compression=True, max_message=10_000, max_inflated=1000).feed(stream)
    assert err.value.code == framing.GOING_AWAY
    assert err.value.events == [b"PING\r\n", b"\x00" * 1000]
    with pytest.raises(framing.MessageTooLarge) as err:
        Decoder(compression=True, max_message=10, max_inflated=1000).feed(stream)
    assert err.value.events == [b"PING\r\n"]


def test_server_frames() -> None:
    assert framing.frame_header(5) == b"\x82\x05"
    assert framing.frame_header(300) == b"\x82\x7e\x01\x2c"
    assert framing.frame_header(70000, compressed=True) == b"\xc2\x7f" + (70000).to_bytes(8, "big")
    assert framing.close_payload(1000, "x" * 200) == b"\x03\xe8" + b"x" * 120 + b"..."
    pieces: list[bytes | memoryview] = [b"MSG a 1 3\r\nabc\r\n", memoryview(b"PING\r\n")]
    inflated = zlib.decompressobj(-15).decompress(framing.deflate(pieces) + b"\x00\x00\xff\xff")
    assert inflated == b"MSG a 1 3\r\nabc\r\nPING\r\n"


# -- the upgrade ------------------------------------------------------------------------------------------
def request(extra: str = "", method: str = "GET") -> bytes:
    return (
        f"{method} / HTTP/1.1\r\nHost: localhost:8080\r\nUpgrade: websocket\r\n"
        "Connection: keep-alive, Upgrade\r\n"
        f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}"
    ).encode()[:-2]  # a head as the protocol hands it over: without the blank line's CRLF


def test_upgrade_response() -> None:
    up = upgrade(parse_request(request()), WebSocketOptions(port=1), tls=False)
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455's example
    assert up.response == (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
    )
    assert (up.compress, up.masked, up.browser) == (False, True, False)
    ext = "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\nNats-No-Masking: true\r\n"
    head = request(ext + "User-Agent: Mozilla/5.0\r\n")
    up = upgrade(
        parse_request(head), WebSocketOptions(compression=True, headers={"X-Frame-Options": "DENY"}), False
    )
    assert up.response.endswith(b"\r\nX-Frame-Options: DENY\r\n\r\n")
    assert b"permessage-deflate; server_no_context_takeover; client_no_context_takeover\r\n" in up.response
    assert b"Nats-No-Masking: true\r\n" in up.response
    assert (up.compress, up.masked, up.browser) == (True, False, True)


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (request(method="POST"), 405),
        (request().replace(b"Upgrade: websocket", b"Upgrade: h2c"), 400),
        (request().replace(b"keep-alive, Upgrade", b"keep-alive"), 400),
        (request().replace(b"dGhlIHNhbXBsZSBub25jZQ==", b"c2hvcnQ="), 400),
        (request().replace(b"Version: 13", b"Version: 8"), 400),
        (request("Origin: http://evil.example\r\n"), 403),
    ],
)
def test_refused_upgrades(head: bytes, status: int) -> None:
    ws = WebSocketOptions(same_origin=True)
    with pytest.raises(HandshakeError) as err:
        upgrade(parse_request(head), ws, tls=False)
    assert err.value.status == status


def test_origin_checks() -> None:
    same = WebSocketOptions(same_origin=True)
    upgrade(parse_request(request("Origin: http://localhost:8080\r\n")), same, False)
    upgrade(parse_request(request()), same, False)  # no Origin at all: not a browser, allowed
    with pytest.raises(HandshakeError):
        upgrade(parse_request(request("Origin: https://localhost:8080\r\n")), same, False)
    listed = WebSocketOptions(allowed_origins=["https://app.example", "http://other:81"])
    upgrade(parse_request(request("Origin: https://app.example:443\r\n")), listed, False)
    upgrade(parse_request(request("Origin: http://OTHER:81\r\n")), listed, False)
    with pytest.raises(HandshakeError):
        upgrade(parse_request(request("Origin: http://app.example\r\n")), listed, False)


# -- the config block -------------------------------------------------------------------------------------
def options(text: str) -> Options:
    opts = Options()
    apply_config(opts, parse(text))
    return opts


def test_config_block() -> None:
    opts = options(
        """
        websocket {
            listen: "127.0.0.1:9443"
            no_tls: true
            compression: true
            same_origin: true
            allowed_origins: ["http://a.example", "https://b.example:8443"]
            handshake_timeout: "3s"
            authorization { user: ws, password: pw }
            headers { X-Custom: yes-please }
        }
        """
    )
    ws = websocket_options(opts)
    assert ws is not None
    assert (ws.host, ws.port, ws.no_tls) == ("127.0.0.1", 9443, True)
    assert (ws.compression, ws.same_origin) == (True, True)
    assert ws.allowed_origins == ["http://a.example", "https://b.example:8443"]
    assert (ws.handshake_timeout, ws.username, ws.password, ws.auth_override) == (3.0, "ws", "pw", True)
    validate(ws, opts)
    assert websocket_options(options("websocket { port: 0 }")) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("websocket { port: 1, bogus: 1 }", "unknown field 'bogus'"),
        ("websocket { port: 1, authorization { users: [] } }", "unknown field 'users'"),
        ("websocket { port: 1, jwt_cookie: jwt }", "JWT authentication is not supported"),
        ("websocket { port: 1, compression: 1 }", "expected a boolean"),
    ],
)
def test_config_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigValueError, match=message):
        options(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("websocket { port: 1 }", "websocket requires TLS configuration"),
        (
            'websocket { port: 1, no_tls: true, allowed_origins: ["ftp://x"] }',
            "allowed origins must be absolute",
        ),
        ("websocket { port: 1, no_tls: true, no_auth_user: nobody }", "users/nkeys are not defined"),
        (
            "authorization { users: [{user: a, password: b}] }\n"
            "websocket { port: 1, no_tls: true, no_auth_user: x }",
            'no_auth_user: "x" not present',
        ),
        (
            "authorization { users: [{user: a, password: b}] }\nwebsocket { port: 1, no_tls: true, "
            "authorization { token: t } }",
            "token not compatible with presence of users",
        ),
        ("websocket { port: 1, no_tls: true, headers { Upgrade: x } }", 'invalid header "Upgrade"'),
    ],
)
def test_config_validation(text: str, message: str) -> None:
    """Checks of the block alone fail while the file is read; those against users when the listener starts."""
    with pytest.raises(ConfigValueError, match=message):
        opts = options(text)
        validate(opts.websocket, opts)  # type: ignore[arg-type]


def test_block_must_be_a_map() -> None:
    with pytest.raises(ConfigValueError, match="Expected websocket to be a map"):
        parse_block(1)


def test_tls_block_keys_pynatsd_does_not_implement_are_refused() -> None:
    with pytest.raises(ConfigValueError, match=r"unsupported field.*verify_and_map"):
        options('websocket { port: 1, tls { cert_file: "c.pem", key_file: "k.pem", verify_and_map: true } }')
    opts = options('websocket { port: 1, tls { cert_file: "c.pem", key_file: "k.pem" } }')
    ws = websocket_options(opts)
    assert ws is not None
    ws.tls = {"cert_file": "c.pem", "key_file": "k.pem", "verify": True, "timeout": "3s"}
    tls = tls_options(ws, opts)
    assert tls is not None
    assert (tls.tls_cert, tls.tls_key, tls.tls_verify, tls.tls_timeout) == ("c.pem", "k.pem", True, 3.0)
