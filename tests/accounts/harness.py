"""Shared pieces of the account tests: a server of either kind on a config file, raw clients that log in
as a user, and what they receive, normalized where the two servers differ by design (the random part of
`_R_` reply subjects, the measured round-trip time in `Nats-Request-Info`).

Every test runs the same config and the same client actions on pynatsd and on nats-server and asserts the
same expected outcome on both.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.config.test_differential import _run
from tests.servers import ServerProcess, require, start_server
from tests.wire import WireClient

KINDS = ["pynatsd", "nats-server"]
_FRAME = re.compile(rb"(MSG|HMSG) (\S+) (\S+)(?: (\S+))? (?:(\d+) )?(\d+)\r\n")
_RESPONSE_SUBJECT = re.compile(rb"^_R_\.[0-9A-Za-z]{6}\.[0-9A-Za-z]+$")


@contextmanager
def serve(kind: str, tmp_path: Path, text: str) -> Iterator[ServerProcess]:
    require(kind)
    conf = tmp_path / f"{kind}.conf"
    conf.write_text(text)
    server = start_server(kind, ["-c", str(conf)])
    try:
        yield server
    finally:
        server.stop()


def refusal(kind: str, tmp_path: Path, text: str) -> str:
    """Start `kind` on `text` expecting it to refuse: what it printed (the test fails if it ran)."""
    require(kind)
    conf = tmp_path / f"{kind}-refused.conf"
    conf.write_text(text)
    try:
        result = _run(kind, ["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{kind} started on a config it should refuse")
    assert result.returncode != 0
    return result.stdout + result.stderr


class Peer(WireClient):
    """A raw client logged in as `user` (password = user name), or with the CONNECT fields of `login`, or
    those `login_with` makes of the INFO's nonce."""

    def __init__(
        self,
        port: int,
        user: str | None = None,
        *,
        headers: bool = True,
        no_responders: bool = False,
        login: dict[str, object] | None = None,
        login_with: Callable[[str], dict[str, object]] | None = None,
    ) -> None:
        super().__init__(port)
        connect: dict[str, object] = {"verbose": False, "pedantic": False, "headers": headers}
        if no_responders:
            connect["no_responders"] = True
        if user is not None:
            connect.update(user=user, **{"pass": user})
        connect.update(login or {})
        if login_with is not None:  # credentials made from this connection's nonce (nkey or JWT users)
            connect.update(login_with(self.info.get("nonce", "")))
        out, closed = self.exchange(f"CONNECT {json.dumps(connect)}\r\n".encode())
        assert (out, closed) == (b"", False), out

    def do(self, ops: bytes) -> list[tuple[bytes, ...]]:
        """Send `ops`, wait for the server to have processed them: what came back, normalized."""
        out, _ = self.exchange(ops)
        return frames(out)

    def received(self) -> list[tuple[bytes, ...]]:
        """What arrived so far (everything queued for us before a PING we send now)."""
        return self.do(b"")


def frames(data: bytes) -> list[tuple[bytes, ...]]:
    """MSG/HMSG frames as (kind, subject, sid, reply, headers, payload); -ERR and other lines as (line,).
    `_R_` reply subjects become `_R_`, the rtt in Nats-Request-Info is dropped."""
    out: list[tuple[bytes, ...]] = []
    while data:
        m = _FRAME.match(data)
        if m is None:
            line, _, data = data.partition(b"\r\n")
            if line != b"PING":  # the server's keepalive, whenever it comes
                out.append((line,))
            continue
        kind, subject, sid, reply, hsize, size = m.groups()
        if kind == b"MSG" and hsize is not None:  # MSG subject sid reply size: the regex took reply as hsize
            reply, hsize = hsize, None
        if kind == b"HMSG" and hsize is None:  # HMSG subject sid hsize size (no reply)
            hsize, reply = reply, None
        start = m.end()
        body = data[start : start + int(size)]
        data = data[start + int(size) + 2 :]
        headers = b""
        if kind == b"HMSG":
            assert hsize is not None
            headers, body = _normalize_headers(body[: int(hsize)]), body[int(hsize) :]
        if reply is not None and _RESPONSE_SUBJECT.match(reply):
            reply = b"_R_"
        out.append((kind, subject, sid, reply or b"", headers, body))
    return out


def _normalize_headers(block: bytes) -> bytes:
    lines = block.split(b"\r\n")
    kept = []
    for line in lines:
        if line.startswith(b"Nats-Request-Info:"):
            info = json.loads(line.partition(b":")[2])
            info.pop("rtt", None)
            line = b"Nats-Request-Info: " + json.dumps(info, sort_keys=True).encode()
        kept.append(line)
    return b"\r\n".join(kept)


def by_sid(received: list[tuple[bytes, ...]]) -> dict[bytes, list[tuple[bytes, ...]]]:
    """Messages grouped per subscription, in order (the order across subscriptions is not specified)."""
    groups: dict[bytes, list[tuple[bytes, ...]]] = {}
    for f in received:
        groups.setdefault(f[2] if len(f) > 2 else b"-", []).append(f)
    return groups


def msg(subject: str, sid: str, payload: str, reply: str = "") -> tuple[bytes, ...]:
    return (b"MSG", subject.encode(), sid.encode(), reply.encode(), b"", payload.encode())


def hmsg(subject: str, sid: str, payload: str, headers: bytes, reply: str = "") -> tuple[bytes, ...]:
    return (b"HMSG", subject.encode(), sid.encode(), reply.encode(), headers, payload.encode())


def request_info(account: str, svc: str | None = None) -> bytes:
    """The normalized header block a request gets crossing a service import."""
    info: dict[str, str] = {"acc": account}
    if svc is not None:
        info["svc"] = svc
    return b"NATS/1.0\r\nNats-Request-Info: " + json.dumps(info, sort_keys=True).encode() + b"\r\n\r\n"
