"""A raw-socket NATS client for exact-bytes tests: send bytes, read what the server answers."""

from __future__ import annotations

import json
import re
import socket
import time
from typing import Any

_INFO_LINE = re.compile(rb"INFO \{.*?\} ?\r\n")


class WireClient:
    """A blocking loopback socket with helpers to read replies until a sentinel, EOF or idle."""

    def __init__(self, port: int, host: str = "127.0.0.1", read_info: bool = True) -> None:
        self.sock = socket.create_connection((host, port), timeout=5)
        self.buf = b""
        self.info: dict[str, Any] = {}
        if read_info:
            line = self.read_line()
            assert line.startswith(b"INFO "), line
            self.info = json.loads(line[5:])

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, timeout: float) -> bool:
        """Read once; False on EOF (or reset)."""
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return False
        if not chunk:
            return False
        self.buf += chunk
        return True

    def read_line(self, timeout: float = 5.0) -> bytes:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            if not self._fill(max(0.01, deadline - time.monotonic())):
                raise EOFError(self.buf)
        line, _, self.buf = self.buf.partition(b"\n")
        return line + b"\n"

    def read_until(self, sentinel: bytes, timeout: float = 5.0) -> tuple[bytes, bool]:
        """Everything up to and including `sentinel`, or up to EOF: (bytes, closed)."""
        deadline = time.monotonic() + timeout
        while sentinel not in self.buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {sentinel!r} after {timeout}s; got {self.buf!r}")
            try:
                if not self._fill(remaining):
                    data, self.buf = self.buf, b""
                    return data, True
            except TimeoutError:
                continue
        idx = self.buf.index(sentinel) + len(sentinel)
        data, self.buf = self.buf[:idx], self.buf[idx:]
        return data, False

    def exchange(self, data: bytes, timeout: float = 5.0) -> tuple[bytes, bool]:
        """Send `data` then a PING; return what came back before the last PONG, or up to EOF if closed.

        Every PING line in `data` is answered too, so this waits for one PONG more than `data` asks for.
        """
        self.send(data + b"PING\r\n")
        wanted = data.upper().count(b"PING") + 1
        out = b""
        for _ in range(wanted):
            chunk, closed = self.read_until(b"PONG\r\n", timeout)
            out += chunk
            if closed:
                return out, True
        return out[: -len(b"PONG\r\n")], False


def strip_info(data: bytes) -> bytes:
    """Remove INFO lines (their contents differ between servers by design)."""
    return _INFO_LINE.sub(b"", data)
