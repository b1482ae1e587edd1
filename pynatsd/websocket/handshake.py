"""The HTTP/1.1 upgrade (RFC 6455 4.2), sans-IO: a request head in, a 101 or an HTTP error out.

The checks, their order, statuses and the response headers are nats-server's (wsUpgrade); error responses
are what Go's http.Error writes.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
from dataclasses import dataclass, field
from email.utils import formatdate
from http.cookies import CookieError, SimpleCookie

from pynatsd.config.websocket import WebSocketOptions, origin_parts

MAX_HEAD = 16 * 1024  # bytes of request line and headers we accept before answering 431
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_PMC = "permessage-deflate"
_PMC_RESPONSE = (
    b"Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; "
    b"client_no_context_takeover\r\n"
)
_REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
}


# Control characters but HTAB: not allowed in a header value (RFC 9110 5.5; Go's HTTP server refuses them).
_CTL = re.compile("[\x00-\x08\x0a-\x1f\x7f]")
# What Go's HTTP server answers a request it cannot read, before nats-server's handler sees it.
UNREADABLE_RESPONSE = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
    b"400 Bad Request"
)


class HandshakeError(Exception):
    """The upgrade is refused: answer `status`; `reason` is for the log. `unreadable`: a request Go's HTTP
    server refuses itself (its bare 400, nothing logged by nats-server)."""

    def __init__(self, status: int, reason: str, unreadable: bool = False) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.unreadable = unreadable


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, list[str]] = field(default_factory=dict)  # lower-case names

    def get(self, name: str) -> str:
        values = self.headers.get(name.lower())
        return values[0] if values else ""

    def has_token(self, name: str, token: str) -> bool:
        """True if a comma-separated header carries `token` (case-insensitive)."""
        return any(
            t.strip(" \t").lower() == token.lower()
            for v in self.headers.get(name.lower(), [])
            for t in v.split(",")
        )


@dataclass
class Upgrade:
    """An accepted upgrade: what the connection needs to know of it."""

    response: bytes
    compress: bool
    masked: bool  # False when the client asked for Nats-No-Masking
    browser: bool  # a User-Agent starting with Mozilla/ (frames of 4 KiB, as nats-server sends them)
    no_compressed_fragments: bool  # Safari cannot take fragmented compressed messages
    client_ip: str  # a valid X-Forwarded-For
    cookies: dict[str, str]
    path: str


def is_mqtt_path(path: str) -> bool:
    """An MQTT client's upgrade (nats-server: the path, without its query, ends with `/mqtt`)."""
    return path.split("?", 1)[0].endswith("/mqtt")


def parse_request(head: bytes) -> Request:
    """Parse a request head (up to and without the blank line)."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, path, version = lines[0].split(" ")
    except ValueError:
        raise HandshakeError(400, "malformed HTTP request") from None
    if not version.startswith("HTTP/1."):
        raise HandshakeError(400, "unsupported HTTP version")
    req = Request(method, path)
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HandshakeError(400, "malformed HTTP header")
        if _CTL.search(value):
            raise HandshakeError(400, f"invalid value for header {name!r}", unreadable=True)
        req.headers.setdefault(name.lower(), []).append(value.strip(" \t"))
    if len(req.headers.get("host", ())) > 1:
        raise HandshakeError(400, "too many Host headers", unreadable=True)
    return req


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()


def check_origin(req: Request, ws: WebSocketOptions, tls: bool) -> None:
    """nats-server's Origin check: none configured or no Origin sent passes; else same_origin compares with
    Host, and allowed_origins must list the scheme, host and port."""
    if not ws.same_origin and not ws.allowed_origins:
        return
    origin = req.get("Origin") or req.get("Sec-WebSocket-Origin")
    if not origin:
        return  # a dedicated (non-browser) client can claim any origin anyway (RFC 6455 1.6)
    try:
        scheme, host, port = origin_parts(origin)
    except ValueError as exc:
        raise HandshakeError(403, f"origin not allowed: {exc}") from None
    if ws.same_origin:
        req_host, _, req_port = req.get("Host").rpartition(":")
        if not req_host or not req_port.isdigit():
            req_host, req_port = req.get("Host"), "443" if tls else "80"
        same = (host, port, scheme) == (req_host.strip("[]").lower(), req_port, "https" if tls else "http")
        if not same:
            raise HandshakeError(403, "origin not allowed: not same origin")
    if ws.allowed_origins:
        allowed = {origin_parts(o) for o in ws.allowed_origins}
        if (scheme, host, port) not in allowed:
            raise HandshakeError(403, "origin not allowed: not in the allowed list")


def upgrade(req: Request, ws: WebSocketOptions, tls: bool, mqtt: bool = False) -> Upgrade:
    """Validate an upgrade request as nats-server does; raise HandshakeError or return the 101 to send.
    A path ending in `/mqtt` is an MQTT client's (`mqtt`: this server has an MQTT port, else refused
    before anything else is looked at), answered with the `mqtt` subprotocol."""
    is_mqtt = is_mqtt_path(req.path)
    if is_mqtt and not mqtt:
        raise HandshakeError(404, "mqtt websocket endpoint not enabled")
    if req.method != "GET":
        raise HandshakeError(405, "request method must be GET")
    if not req.get("Host"):
        raise HandshakeError(400, "'Host' missing in request")
    if not req.has_token("Upgrade", "websocket"):
        raise HandshakeError(400, "invalid value for header 'Upgrade'")
    if not req.has_token("Connection", "Upgrade"):
        raise HandshakeError(400, "invalid value for header 'Connection'")
    key = req.get("Sec-WebSocket-Key")
    if not key:
        raise HandshakeError(400, "key missing")
    try:
        valid_key = len(base64.b64decode(key, validate=True)) == 16
    except ValueError:
        valid_key = False
    if not valid_key:
        raise HandshakeError(400, "invalid websocket key")
    if not req.has_token("Sec-WebSocket-Version", "13"):
        raise HandshakeError(400, "invalid version")
    check_origin(req, ws, tls)
    compress = ws.compression and any(
        p.strip(" \t").lower() == _PMC
        for v in req.headers.get("sec-websocket-extensions", [])
        for ext in v.split(",")
        for p in ext.split(";")
    )
    no_masking = req.get("Nats-No-Masking") == "true"
    parts = [
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n",
        b"Sec-WebSocket-Accept: ",
        accept_key(key).encode(),
        b"\r\n",
    ]
    if compress:
        parts.append(_PMC_RESPONSE)
    if no_masking:
        parts.append(b"Nats-No-Masking: true\r\n")
    if is_mqtt:
        parts.append(b"Sec-Websocket-Protocol: mqtt\r\n")  # (nats-server's spelling)
    parts.extend(f"{k}: {v}\r\n".encode() for k, v in ws.headers.items())
    parts.append(b"\r\n")
    ua = req.get("User-Agent")
    browser = ua.startswith("Mozilla/")
    client_ip = req.get("X-Forwarded-For")
    try:
        ipaddress.ip_address(client_ip)
    except ValueError:
        client_ip = ""
    return Upgrade(
        response=b"".join(parts),
        compress=compress,
        masked=not no_masking,
        browser=browser,
        no_compressed_fragments=browser and compress and "Version/" in ua and "Safari/" in ua,
        client_ip=client_ip,
        cookies=_cookies(req),
        path=req.path,
    )


def _cookies(req: Request) -> dict[str, str]:
    jar: dict[str, str] = {}
    for header in req.headers.get("cookie", []):
        cookie: SimpleCookie = SimpleCookie()
        try:
            cookie.load(header)
        except CookieError:
            continue
        jar.update({name: morsel.value for name, morsel in cookie.items()})
    return jar


def error_response(status: int) -> bytes:
    """What Go's http.Error writes (with nats-server's Sec-Websocket-Version header)."""
    text = _REASONS.get(status, "Error")
    body = f"{text}\n".encode()
    head = (
        f"HTTP/1.1 {status} {text}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        "Sec-Websocket-Version: 13\r\n"
        "X-Content-Type-Options: nosniff\r\n"
        f"Date: {formatdate(usegmt=True)}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body
