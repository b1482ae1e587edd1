"""A minimal blocking NATS connection for executor-side stream reads: no event loop, no thread hand-off.

A Spark task reads its sequence range with a handful of requests whose answers are long runs of frames;
nats-py would turn every frame into a coroutine call and an object on another thread. Here the task's own
thread sends the requests and takes the frames straight from large socket reads (see
`pynatsd.spark.directget`, which parses the direct-get frames it expects with one regular expression each).

Only what such a read needs: plain `nats://` URLs (user/password or token in the URL), no TLS, no
reconnects. `RawConnection.open` raises `Unsupported` for anything else, and the caller falls back to
nats-py.
"""

from __future__ import annotations

import json
import secrets
import socket
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

READ_SIZE = 1 << 20
MAX_CONTROL_LINE = 4096


class Unsupported(Exception):
    """This server or URL needs what RawConnection does not do (TLS, nkeys, creds): use nats-py."""


class ProtocolError(RuntimeError):
    pass


@dataclass
class Frame:
    """A frame that is not a plain run of expected messages: op, its arguments, headers and payload."""

    op: bytes
    args: list[bytes]
    headers: bytes
    payload: bytes


class RawConnection:
    """One connection with one subscription (`inbox`, sid 1). `buf[pos:]` holds what was read and not yet
    parsed; readers parse what they expect from there and call `next_frame` for anything else."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self.sock = sock
        self.timeout = timeout
        self.inbox = b"_INBOX." + secrets.token_hex(11).encode()
        self.buf = b""
        self.pos = 0

    @classmethod
    def open(cls, servers: list[str], timeout: float, name: str) -> RawConnection:
        """Connect to the first server that answers; raises Unsupported when nats-py must do it."""
        errors: list[str] = []
        for url in servers:
            parts = urlsplit(url if "://" in url else f"nats://{url}")
            if parts.scheme != "nats":
                raise Unsupported(f"scheme {parts.scheme}")
            try:
                sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222), timeout)
            except OSError as exc:
                errors.append(f"{url}: {exc}")
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # requests are small: no Nagle wait
            conn = cls(sock, timeout)
            try:
                conn._handshake(parts.username, parts.password, name)
            except BaseException:
                sock.close()
                raise
            return conn
        raise ConnectionError("pynatsd: no server reachable: " + "; ".join(errors))

    def _handshake(self, user: str | None, password: str | None, name: str) -> None:
        frame = self.next_frame()
        if frame.op != b"INFO":
            raise ProtocolError(f"expected INFO, got {frame.op!r}")
        info = json.loads(frame.args[0]) if frame.args else {}
        if info.get("tls_required") or info.get("nonce"):
            raise Unsupported("TLS or nkey authentication")
        connect: dict[str, object] = {
            "verbose": False,
            "pedantic": False,
            "lang": "python-raw",
            "version": "0",
            "protocol": 1,
            "headers": True,
            "no_responders": True,
            "name": name,
        }
        if user and password is not None:
            connect.update(user=unquote(user), **{"pass": unquote(password)})
        elif user:
            connect["auth_token"] = unquote(user)
        self.sock.sendall(b"CONNECT %s\r\nSUB %s 1\r\nPING\r\n" % (json.dumps(connect).encode(), self.inbox))
        while True:
            frame = self.next_frame()
            if frame.op == b"PONG":
                return
            if frame.op == b"-ERR":
                raise ConnectionError(f"pynatsd: server refused the connection: {frame.args}")

    def close(self) -> None:
        self.sock.close()

    def publish(self, subject: bytes, payload: bytes) -> None:
        """A request: `payload` to `subject`, the answer to this connection's inbox."""
        self.sock.sendall(b"PUB %s %s %d\r\n%s\r\n" % (subject, self.inbox, len(payload), payload))

    def fill(self) -> None:
        """Read more bytes (dropping what was parsed); raises on EOF or timeout."""
        try:
            data = self.sock.recv(READ_SIZE)
        except TimeoutError:
            raise TimeoutError(f"pynatsd: no answer from the server for {self.timeout}s") from None
        if not data:
            raise ConnectionError("pynatsd: connection closed by the server")
        self.buf = self.buf[self.pos :] + data
        self.pos = 0

    def next_frame(self) -> Frame:
        """The next whole frame other than PING (answered here) and +OK."""
        while True:
            buf, pos = self.buf, self.pos
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if len(buf) - pos > MAX_CONTROL_LINE:
                    raise ProtocolError("control line too long")
                self.fill()
                continue
            line = buf[pos:eol]
            op, _, rest = line.partition(b" ")
            op = op.upper()
            if op in (b"MSG", b"HMSG"):
                args = rest.split()
                hlen = int(args[-2]) if op == b"HMSG" else 0
                total = int(args[-1])
                end = eol + 2 + total
                if end + 2 > len(buf):
                    self.fill()
                    continue
                self.pos = end + 2
                body = buf[eol + 2 : end]
                return Frame(op, args, body[:hlen], body[hlen:])
            self.pos = eol + 2
            if op == b"PING":
                self.sock.sendall(b"PONG\r\n")
            elif op != b"+OK":
                return Frame(op, [rest], b"", b"")


def parse_headers(block: bytes) -> tuple[bytes, dict[str, str]]:
    """(status line after NATS/1.0, headers) of a header block."""
    lines = block.split(b"\r\n")
    status = lines[0][8:].strip()
    out: dict[str, str] = {}
    for line in lines[1:]:
        key, sep, value = line.partition(b":")
        if sep:
            out[key.decode()] = value.strip().decode()
    return status, out
