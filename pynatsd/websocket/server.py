"""The WebSocket listener: an HTTP upgrade, then an ordinary client `Connection` over a framing transport.

    socket -> WebSocketProtocol (upgrade, Decoder) -> Connection.data_received(NATS bytes)
    Connection/Outbound -> WebSocketTransport.write/writelines -> frame header (+ deflate) -> socket

Nothing of the message path is WebSocket-specific: the connection, its parser, delivery policy and outbound
queue are the TCP client's. `WebSocketTransport` implements what they use of an `asyncio.Transport` and
frames each flush as one binary message (nats-server: one frame per flush, 4 KiB frames for browsers).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Protocol, cast

from pynatsd.auth.users import Authenticator, Connecting
from pynatsd.base.listener import listener_urls
from pynatsd.base.logging import get_logger
from pynatsd.base.options import Options
from pynatsd.base.tls import server_context, session_info
from pynatsd.broker import connection as c
from pynatsd.broker.connection import Connection
from pynatsd.config.websocket import WebSocketOptions, tls_options, validate
from pynatsd.protocol.connect import ConnectOptions
from pynatsd.websocket import framing
from pynatsd.websocket.handshake import (
    MAX_HEAD,
    UNREADABLE_RESPONSE,
    HandshakeError,
    Upgrade,
    error_response,
    is_mqtt_path,
    parse_request,
    upgrade,
)

if TYPE_CHECKING:
    from pynatsd.broker.core import Broker

log = get_logger()

BROWSER_FRAME = 4096  # nats-server's wsFrameSizeForBrowsers: browsers cope better with small frames
_MAX_MESSAGE_MULTIPLE = 8  # a compressed message may carry 8 x max_payload (nats-server), up to 64 MiB
_MAX_MESSAGE_LIMIT = 64 << 20

# The close code nats-server sends for each close reason (wsEnqueueCloseMessage).
_CLOSE_CODES = {
    c.CLIENT_CLOSED: framing.NORMAL_CLOSURE,
    c.AUTHENTICATION_TIMEOUT: framing.POLICY_VIOLATION,
    c.AUTHENTICATION_VIOLATION: framing.POLICY_VIOLATION,
    c.SLOW_CONSUMER_PENDING: framing.POLICY_VIOLATION,
    c.SLOW_CONSUMER_DEADLINE: framing.POLICY_VIOLATION,
    c.MAX_CONNECTIONS_EXCEEDED: framing.POLICY_VIOLATION,
    c.MAX_CONTROL_LINE_EXCEEDED: framing.POLICY_VIOLATION,
    c.TLS_HANDSHAKE_FAILURE: framing.TLS_HANDSHAKE,
    c.PARSE_ERROR: framing.PROTOCOL_ERROR,
    c.PROTOCOL_VIOLATION: framing.PROTOCOL_ERROR,
    c.MAX_PAYLOAD_EXCEEDED: framing.MESSAGE_TOO_BIG,
    c.WRITE_ERROR: framing.GOING_AWAY,
    c.READ_ERROR: framing.GOING_AWAY,
    c.STALE_CONNECTION: framing.GOING_AWAY,
    c.SERVER_SHUTDOWN: framing.GOING_AWAY,
}


class Framed(Protocol):
    """What the framing drives: a client's `WebSocketConnection`, or a leaf node's connection."""

    server: Broker
    closed: bool
    close_reason: str

    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...
    def data_received(self, data: bytes) -> None: ...
    def connection_lost(self, exc: Exception | None) -> None: ...
    def pause_writing(self) -> None: ...
    def resume_writing(self) -> None: ...
    def holds_input(self) -> bool: ...
    def close(self, reason: str, err_text: str | None = None) -> None: ...


class LeafAcceptor(Protocol):
    """The leaf node manager, as the listener sees it (pynatsd.leafnodes names no WebSocket type)."""

    def accept_websocket(self) -> Framed | None:
        """A new accepted leaf node connection; None if this server takes none (no leafnode port)."""


class MQTTAcceptor(Protocol):
    """The MQTT listener, as the WebSocket listener sees it (pynatsd.mqtt names no WebSocket type)."""

    def accept_websocket(self) -> Framed:
        """A new MQTT client connection, over WebSocket."""


class WebSocketAuthenticator(Authenticator):
    """The server's users, with the `websocket {}` block's single user, token or no_auth_user in place of
    the server's when it sets any (nats-server's authOverride), and credentials from cookies."""

    def __init__(self, options: Options, ws: WebSocketOptions) -> None:
        if ws.auth_override:
            options = dataclasses.replace(
                options,
                username=ws.username,
                password=ws.password,
                authorization=ws.token,
                no_auth_user=ws.no_auth_user,
            )
        super().__init__(options)
        self.ws = ws

    def authenticate(self, conn: Connecting, opts: ConnectOptions) -> tuple[str, str] | None:
        cookies = conn.upgrade.cookies if isinstance(conn, WebSocketConnection) else {}
        ws = self.ws
        if cookies and (ws.user_cookie or ws.pass_cookie or ws.token_cookie):
            # As nats-server: a credential missing from CONNECT is taken from its cookie.
            opts = dataclasses.replace(
                opts,
                user=opts.user or cookies.get(ws.user_cookie, ""),
                password=opts.password or cookies.get(ws.pass_cookie, ""),
                auth_token=opts.auth_token or cookies.get(ws.token_cookie, ""),
            )
        return super().authenticate(conn, opts)


class WebSocketConnection(Connection):
    """A client connection whose transport is a WebSocket."""

    is_websocket = True

    def __init__(self, server: Broker, listener: WebSocketListener, accepted: Upgrade) -> None:
        self.listener = listener
        self.upgrade = accepted
        super().__init__(server)

    def authenticator(self) -> Authenticator:
        return self.listener.authenticator()

    def adjust_info(self, info: dict[str, Any]) -> None:
        self.listener.adjust_info(info)

    def ping_interval(self) -> float:
        return self.listener.ws.ping_interval or super().ping_interval()

    def address_tag(self) -> str:
        # nats-server's log prefix for WebSocket clients: "wid", and the X-Forwarded-For address first.
        cip = self.upgrade.client_ip
        forwarded = (f"[{cip}]/" if ":" in cip else f"{cip}/") if cip else ""
        return f"{forwarded}{self.ip}:{self.port} - wid:{self.cid}"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.tls_version, self.tls_cipher = session_info(transport)  # wss: the listener's handshake
        timeout = self.listener.ws.auth_timeout
        if timeout and self._auth_timer is not None:
            # The block's `authorization { timeout }` replaces the server's for WebSocket clients.
            self._auth_timer.cancel()
            self._auth_timer = self.server.loop.call_later(timeout, self._auth_timeout)


class WebSocketTransport(asyncio.Transport):
    """What Connection and Outbound use of a transport, framing writes as WebSocket messages."""

    def __init__(self, proto: WebSocketProtocol, raw: asyncio.Transport) -> None:
        super().__init__()
        self._proto = proto
        self._raw = raw

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._proto.send_message([data])

    def writelines(self, list_of_data: Any) -> None:
        self._proto.send_message(list(list_of_data))

    def close(self) -> None:
        conn = self._proto.conn
        reason = conn.close_reason if conn is not None else c.SERVER_SHUTDOWN
        self._proto.send_close(_CLOSE_CODES.get(reason, framing.INTERNAL_ERROR), reason)
        self._raw.close()

    def abort(self) -> None:
        self._raw.abort()

    def is_closing(self) -> bool:
        return self._raw.is_closing()

    def pause_reading(self) -> None:
        self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._raw.resume_reading()

    def is_reading(self) -> bool:
        return self._raw.is_reading()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._raw.get_extra_info(name, default)

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._raw.set_write_buffer_limits(high, low)

    def can_write_eof(self) -> bool:
        return False


class WebSocketProtocol(asyncio.Protocol):
    """One socket on the WebSocket port: the upgrade, then frames to and from its `Connection`."""

    def __init__(self, listener: WebSocketListener) -> None:
        self.listener = listener
        self._init_framing()

    def _init_framing(self) -> None:
        self.raw: asyncio.Transport | None = None
        self.conn: Framed | None = None
        self.read_failed = False  # a read error ends reading; the connection closes once its input is taken
        self.decoder: framing.Decoder | None = None
        self.head = bytearray()  # the request head as it arrives (appends are amortized O(1))
        self.close_sent = False
        self.compress = False
        self.frame_limit = 0  # 0: one frame per message
        self.fragment_compressed = True
        self.mask = False  # a client's frames are masked (a leaf node remote's, unless the hub waived it)
        self._timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol -------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.raw = cast(asyncio.Transport, transport)
        timeout = self.listener.ws.handshake_timeout
        if timeout > 0:
            self._timer = self.listener.server.loop.call_later(timeout, self._handshake_timeout)

    def data_received(self, data: bytes) -> None:
        if self.decoder is None:
            self._handshake(data)
            return
        conn = self.conn
        if conn is None or conn.closed or self.read_failed:
            return
        too_large = False
        try:
            events = self.decoder.feed(data)
        except framing.MessageTooLarge as err:
            events, too_large = err.events, True
        except framing.WebSocketError as err:
            log.debug("%r - websocket protocol error: %s", conn, err.reason)
            self.send_close(err.code, err.reason)
            conn.close(c.READ_ERROR)
            return
        if too_large:
            # As nats-server: what came before (and the first max_payload bytes inflated) is taken, then a
            # read error closes the connection (its CLOSE: 1001 "Read Error"); nothing more is read.
            log.error("%r - read error: maximum payload exceeded", conn)
            self.read_failed = True
            self._handle(conn, events)
            self._close_when_taken(conn)
            return
        self._handle(conn, events)

    def _close_when_taken(self, conn: Framed) -> None:
        """Close `conn` with a read error once the input it holds (a slice per turn) is processed."""
        if conn.closed:
            return
        if conn.holds_input():
            conn.server.loop.call_soon(self._close_when_taken, conn)
            return
        conn.close(c.READ_ERROR)

    def _handle(self, conn: Framed, events: list[framing.Data | framing.Control]) -> None:
        """Hand the NATS bytes among `events` to the connection, and handle its control frames, in order."""
        pending: list[framing.Data] = []
        for event in events:
            if not isinstance(event, framing.Control):
                pending.append(event)
                continue
            if pending:
                conn.data_received(b"".join(pending))  # bytes; a lone bytes is passed on as is
                pending = []
                if conn.closed:
                    return
            self._control(event)
            if conn.closed:
                return
        if pending:
            conn.data_received(b"".join(pending))

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        if self.conn is not None:
            self.conn.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.conn.pause_writing()

    def resume_writing(self) -> None:
        if self.conn is not None:
            self.conn.resume_writing()

    # -- the upgrade ------------------------------------------------------------------------------------
    def _handshake(self, data: bytes) -> None:
        assert self.raw is not None
        searched = max(0, len(self.head) - 3)  # never rescan: a byte-at-a-time head stays O(n)
        self.head += data
        end = self.head.find(b"\r\n\r\n", searched)
        if end < 0:
            if len(self.head) > MAX_HEAD:
                self._refuse(HandshakeError(431, "request header too large"))
            return
        listener = self.listener
        try:
            if end > MAX_HEAD:
                raise HandshakeError(431, "request header too large")
            if len(self.head) > end + 4:
                raise HandshakeError(400, "client sent data before handshake is complete")
            req = parse_request(bytes(self.head[:end]))
            mqtt = cast("MQTTAcceptor | None", getattr(listener.server, "mqtt", None))
            accepted = upgrade(req, listener.ws, listener.tls, mqtt is not None)
        except HandshakeError as err:
            self._refuse(err)
            return
        self._cancel_timer()
        self.head = bytearray()
        server = listener.server
        self.raw.write(accepted.response)  # (nats-server answers the upgrade before it looks at the kind)
        conn: Framed | None = None
        if req.path.split("?", 1)[0].endswith("/leafnode"):
            # A leaf node's connection (nats-server: the path names it), if this server takes leaf nodes.
            manager = cast("LeafAcceptor | None", getattr(server, "leaf_manager", None))
            conn = manager.accept_websocket() if manager is not None else None
            if conn is None:
                log.error("Not configured to accept leaf node connections")
                self.raw.close()
                return
        elif mqtt is not None and is_mqtt_path(req.path):
            conn = mqtt.accept_websocket()  # (its CONNECT and every packet after it come in frames)
        self.frame_limit = BROWSER_FRAME if accepted.browser else 0
        self.fragment_compressed = not accepted.no_compressed_fragments
        self.start_framing(server, accepted.compress, accepted.masked)
        self.conn = conn or WebSocketConnection(server, listener, accepted)
        self.conn.connection_made(WebSocketTransport(self, self.raw))

    def start_framing(self, server: Broker, compress: bool, masked: bool) -> None:
        """Frames from now on: deflated when `compress`, the peer's masked when `masked`."""
        self.compress = compress
        max_payload = server.options.max_payload
        max_message = min(max_payload * _MAX_MESSAGE_MULTIPLE, _MAX_MESSAGE_LIMIT)
        self.decoder = framing.Decoder(compress, masked, max_message, max_payload)

    def _refuse(self, err: HandshakeError) -> None:
        assert self.raw is not None
        peer = self.raw.get_extra_info("peername")
        where = f"{peer[0]}:{peer[1]}" if peer else "?"
        level = logging.DEBUG if err.unreadable else logging.ERROR
        log.log(level, "%s - websocket handshake error: %s", where, err.reason)
        self._cancel_timer()
        self.raw.write(UNREADABLE_RESPONSE if err.unreadable else error_response(err.status))
        self.raw.close()

    def _handshake_timeout(self) -> None:
        self._timer = None
        if self.decoder is None and self.raw is not None:
            log.debug("websocket handshake timeout")
            self.raw.abort()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- frames -----------------------------------------------------------------------------------------
    def _control(self, event: framing.Control) -> None:
        assert self.conn is not None
        if event.opcode == framing.PING:
            self._write_control(framing.PONG, event.payload)
        elif event.opcode == framing.CLOSE:
            # Echo the close (none for "no status"), then close as the client asked (nats-server's way).
            if event.code == framing.NO_STATUS_RECEIVED:
                self._write_control(framing.CLOSE, b"")
            else:
                self._write_control(framing.CLOSE, framing.close_payload(event.code, event.reason))
            self.close_sent = True
            self.conn.close(c.CLIENT_CLOSED)

    def _write_control(self, opcode: int, payload: bytes) -> None:
        if self.raw is not None and not self.close_sent and not self.raw.is_closing():
            if self.mask:
                self.raw.write(framing.masked_frame(payload, opcode))
            else:
                self.raw.write(framing.control_frame(opcode, payload))

    def send_close(self, code: int, reason: str) -> None:
        """Send a CLOSE frame once; nothing is written after it."""
        if not self.close_sent:
            self._write_control(framing.CLOSE, framing.close_payload(code, reason))
            self.close_sent = True

    def send_message(self, pieces: list[Any]) -> None:
        """Frame one flush of NATS bytes as a binary message (compressed when negotiated and worth it)."""
        raw = self.raw
        if raw is None or self.close_sent:
            return
        total = sum(len(p) for p in pieces)
        if not total:
            return
        limit = self.frame_limit
        if self.mask:  # (a leaf node remote: one frame per flush, no browser limit)
            compressed = self.compress and total > framing.COMPRESS_THRESHOLD
            payload = framing.deflate(pieces) if compressed else b"".join(pieces)
            raw.write(framing.masked_frame(payload, compressed=compressed))
        elif self.compress and total > framing.COMPRESS_THRESHOLD:
            payload = framing.deflate(pieces)
            if limit and self.fragment_compressed and len(payload) > limit:
                raw.writelines(_fragments(payload, limit))
            else:
                raw.writelines((framing.frame_header(len(payload), compressed=True), payload))
        elif limit and total > limit:
            raw.writelines(_split(b"".join(pieces), limit))
        elif len(pieces) == 1 and total <= 1024:
            raw.write(framing.frame_header(total) + pieces[0])  # one small send beats a vectored one
        else:
            raw.writelines([framing.frame_header(total), *pieces])


def _split(data: bytes, limit: int) -> list[bytes | memoryview]:
    """`data` as whole binary messages of at most `limit` bytes each (nats-server's browser framing)."""
    view = memoryview(data)
    out: list[bytes | memoryview] = []
    for i in range(0, len(data), limit):
        chunk = view[i : i + limit]
        out += (framing.frame_header(len(chunk)), chunk)
    return out


def _fragments(payload: bytes, limit: int) -> list[bytes | memoryview]:
    """One compressed message as frames of at most `limit` bytes: RSV1 on the first, FIN on the last."""
    view = memoryview(payload)
    out: list[bytes | memoryview] = []
    for i in range(0, len(payload), limit):
        chunk = view[i : i + limit]
        first, final = i == 0, i + limit >= len(payload)
        opcode = framing.BINARY if first else framing.CONTINUATION
        out += (framing.frame_header(len(chunk), opcode, fin=final, compressed=first), chunk)
    return out


class WebSocketListener:
    """The `websocket {}` port of a server."""

    def __init__(self, server: Broker, ws: WebSocketOptions) -> None:
        self.server = server
        self.ws = ws
        self.tls = False
        self.port = ws.port
        self._listener: asyncio.base_events.Server | None = None
        self._auth: Authenticator | None = None
        self._auth_base: Authenticator | None = None

    async def start(self) -> None:
        """Validate the block against the rest of the configuration and bind the port."""
        opts = self.server.options
        validate(self.ws, opts)
        tls_opts = tls_options(self.ws, opts)
        ctx = server_context(tls_opts, verify_clients=True) if tls_opts is not None else None
        self.tls = ctx is not None
        ws = self.ws
        self._listener = await self.server.loop.create_server(
            lambda: WebSocketProtocol(self),
            host=ws.host or None,
            port=0 if ws.port == -1 else ws.port,
            reuse_address=True,
            backlog=1024,
            ssl=ctx,
            ssl_handshake_timeout=tls_opts.tls_timeout if tls_opts is not None else None,
        )
        sockets = self._listener.sockets
        self.port = int(sockets[0].getsockname()[1]) if sockets else ws.port
        scheme = "wss" if self.tls else "ws"
        log.info("Listening for websocket clients on %s://%s:%d", scheme, ws.host, self.port)
        if not self.tls:
            log.warning("Websocket not configured with TLS. DO NOT USE IN PRODUCTION!")

    def close(self) -> None:
        """Stop accepting (connected clients are the server's to close)."""
        if self._listener is not None:
            self._listener.close()

    async def wait_closed(self) -> None:
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None

    def urls(self) -> list[str]:
        """`ws://` or `wss://` URLs of the listener's sockets (the ports file's "websocket" entry)."""
        if self._listener is None:
            return []
        return listener_urls("wss" if self.tls else "ws", self._listener)

    def authenticator(self) -> Authenticator:
        """The authenticator for WebSocket clients, rebuilt when the server's is (a reload)."""
        base = self.server.auth
        if self._auth is None or self._auth_base is not base:
            ws = self.ws
            cookies = ws.user_cookie or ws.pass_cookie or ws.token_cookie
            if ws.auth_override or cookies:
                self._auth = WebSocketAuthenticator(self.server.options, ws)
                # The auth callout's grants are the server's, not this block's: a reload keeps them.
                self._auth.callout_grants = base.callout_grants
            else:
                self._auth = base
            self._auth_base = base
        return self._auth

    def adjust_info(self, info: dict[str, Any]) -> None:
        """nats-server's INFO for WebSocket clients: this listener's host, port and TLS; its auth."""
        info["host"], info["port"] = self.ws.host, self.port
        for key in ("tls_required", "tls_available", "tls_verify"):
            info.pop(key, None)
        if self.tls:
            info["tls_required"] = info["tls_available"] = True
        if self.authenticator().required:
            info["auth_required"] = True

    def varz(self) -> dict[str, Any]:
        """/varz `websocket`: nats-server's WebsocketOptsVarz (empty fields left out, as its omitempty)."""
        ws = self.ws
        fields: dict[str, Any] = {
            "host": ws.host,
            "port": self.port,
            "advertise": ws.advertise,
            "no_auth_user": ws.no_auth_user,
            "handshake_timeout": int(ws.handshake_timeout * 1e9),
            "auth_timeout": ws.auth_timeout,
            "no_tls": ws.no_tls,
            "same_origin": ws.same_origin,
            "allowed_origins": list(ws.allowed_origins),
            "compression": ws.compression,
        }
        return {k: v for k, v in fields.items() if v}
