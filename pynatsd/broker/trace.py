"""Protocol trace (`-V`) in both directions, as nats-server writes it.

`<<- [PUB foo reply 5]` then `<<- MSG_PAYLOAD: ["hello"]` for what a client sends; `->> [MSG foo 1 5]`,
`->> MSG_PAYLOAD: ["hello"]`, `->> [PONG]`, `->> [OK]`, `->> [-ERR …]` for what it is sent (INFO is not
traced, as in nats-server). Payloads are cut at `max_traced_msg_len` bytes (`"hel..."`). Secrets in CONNECT
are never shown, under any spelling pynatsd accepts.

Only used while tracing: incoming ops pass through a `Tracer` handler on their way to the connection, and
outgoing frames are read back from what the connection hands its transport (`TracedTransport`), so the
message path itself has no trace code.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

from pynatsd.base.logging import TRACE, get_logger
from pynatsd.protocol import encoder
from pynatsd.protocol.ops import HPub, Pub, Sub, Unsub, describe

if TYPE_CHECKING:
    from pynatsd.broker.connection import Connection, SlicedReader

log = get_logger()
REDACTED = "[REDACTED]"
# CONNECT keys whose values are never traced: nats-server's (any key starting with `pass` or `auth_token`,
# and sig, proxy_sig, nkey), plus `jwt`, a bearer credential.
_SECRET_PREFIXES = ("pass", "auth_token")
_SECRET_KEYS = {"sig", "proxy_sig", "nkey", "jwt"}


def redact(value: object) -> object:
    """A copy of CONNECT's fields with every secret's value replaced by `[REDACTED]`, at any depth (as
    nats-server's pattern finds them anywhere in the line)."""
    if isinstance(value, dict):
        return {k: REDACTED if _is_secret(str(k)) else redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(item) for item in value]
    return value


def _is_secret(key: str) -> bool:
    low = key.lower()
    return low.startswith(_SECRET_PREFIXES) or low in _SECRET_KEYS


def go_quote(data: bytes) -> str:
    """Go's `%q` of a byte slice: printable UTF-8 as is, `\\n`, `\\"`, other bytes as `\\xNN`."""
    out = ['"']
    text = data.decode("utf-8", "surrogateescape")
    for ch in text:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        elif code < 0x10000:
            out.append(f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
_GO_ESCAPES |= {'"': '\\"', "\\": "\\\\"}


def payload_line(arrow: str, payload: bytes, max_len: int) -> str | None:
    """`<arrow> MSG_PAYLOAD: ["…"]`, cut after `max_len` bytes (0: whole); None for an empty payload."""
    if not payload:
        return None
    if 0 < max_len < len(payload):
        return f'{arrow} MSG_PAYLOAD: ["{go_quote(payload[:max_len])[1:-1]}..."]'
    return f"{arrow} MSG_PAYLOAD: [{go_quote(payload)}]"


class Tracer:
    """The parser's handler while tracing: each op traced as nats-server traces it (`<<- [PUB foo 5]`,
    then its payload), then handled by the connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def _trace(self, text: str, payload: bytes = b"") -> None:
        conn = self.conn
        log.log(TRACE, "%r - <<- [%s]", conn, text)
        line = payload_line("<<-", payload, conn.server.options.max_traced_msg_len)
        if line is not None:
            log.log(TRACE, "%r - %s", conn, line)

    def on_connect(self, options: dict[str, Any]) -> None:
        self._trace(f"CONNECT {encoder.go_json(redact(options))}")
        self.conn.on_connect(options)

    def on_info(self, info: dict[str, Any]) -> None:
        self._trace(f"INFO {encoder.go_json(redact(info))}")
        self.conn.on_info(info)

    def on_pub(self, subject: bytes, reply: bytes | None, size: bytes, payload: bytes) -> None:
        self._trace(describe(Pub(subject, reply, size, payload)), payload)
        self.conn.on_pub(subject, reply, size, payload)

    def on_hpub(
        self, subject: bytes, reply: bytes | None, sizes: bytes, headers: bytes, payload: bytes
    ) -> None:
        self._trace(describe(HPub(subject, reply, sizes, headers, payload)), headers + payload)
        self.conn.on_hpub(subject, reply, sizes, headers, payload)

    def on_sub(self, subject: bytes, queue: bytes | None, sid: bytes) -> None:
        self._trace(describe(Sub(subject, queue, sid)))
        self.conn.on_sub(subject, queue, sid)

    def on_unsub(self, sid: bytes, max_msgs: int | None) -> None:
        self._trace(describe(Unsub(sid, max_msgs)))
        self.conn.on_unsub(sid, max_msgs)

    def on_ping(self) -> None:
        self._trace("PING")
        self.conn.on_ping()

    def on_pong(self) -> None:
        self._trace("PONG")
        self.conn.on_pong()

    def on_ok(self) -> None:
        self._trace("+OK")
        self.conn.on_ok()

    def on_err(self, text: str) -> None:
        self._trace(f"-ERR {text}")
        self.conn.on_err(text)


def retrace(conn: Connection, enabled: bool) -> None:
    """Turn an open connection's trace on or off (a reload changed `trace`): both directions at once."""
    conn._trace = enabled
    conn.parser.set_handler(Tracer(conn) if enabled else conn)
    out = conn.out
    if out is None:
        return
    current = out.transport
    if enabled and not isinstance(current, TracedTransport):
        out.transport = cast(asyncio.Transport, TracedTransport(current, conn))
    elif not enabled and isinstance(current, TracedTransport):
        out.transport = current._transport


class TracedTransport:
    """A transport that traces the frames written through it, then writes them (`->>` lines)."""

    def __init__(self, transport: asyncio.Transport, conn: SlicedReader) -> None:
        self._transport = transport
        self._conn = conn
        self._pending = b""  # the start of a frame whose end is in a later write

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._trace(bytes(data))
        self._transport.write(data)

    def writelines(self, pieces: Any) -> None:
        pieces = list(pieces)
        self._trace(b"".join(pieces))
        self._transport.writelines(pieces)

    def _trace(self, data: bytes) -> None:
        conn = self._conn
        max_len = conn.server.options.max_traced_msg_len
        buf, pos = self._pending + data, 0
        while (end := buf.find(b"\r\n", pos)) >= 0:
            line = buf[pos:end]
            size = _payload_size(line)
            if size is not None:
                if end + 2 + size + 2 > len(buf):
                    break  # the payload is in a later write
                log.log(TRACE, "%r - ->> [%s]", conn, _text(line))
                traced = payload_line("->>", buf[end + 2 : end + 2 + size], max_len)
                if traced is not None:
                    log.log(TRACE, "%r - %s", conn, traced)
                pos = end + 2 + size + 2
                continue
            shown = _OUT_LINES.get(line)
            if shown is None and line.startswith(b"-ERR "):
                shown = "-ERR " + _text(line[5:]).strip("'")
            elif shown is None and line.startswith((b"RS+ ", b"RS- ")):  # a route's interest
                shown = _text(line)
            if shown:
                log.log(TRACE, "%r - ->> [%s]", conn, shown)
            pos = end + 2
        self._pending = buf[pos:]


_OUT_LINES = {b"PING": "PING", b"PONG": "PONG", b"+OK": "OK"}


def _payload_size(line: bytes) -> int | None:
    """The bytes after a MSG, HMSG or (routes) RMSG control line (headers and payload), None for other
    lines."""
    if line.startswith((b"MSG ", b"HMSG ", b"RMSG ")):
        last = line.rsplit(b" ", 1)[-1]
        if last.isdigit():
            return int(last)
    return None


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")
