"""The dialing side of a WebSocket: a leaf node remote with a `ws://` URL (nats-server's
leafNodeSolicitWSConnection).

It sends the upgrade request for the URL's path and `/leafnode` (the path that tells the hub's WebSocket
listener a leaf node is connecting), checks the 101 answer, then runs the remote's leaf connection over
the listener's framing (`WebSocketProtocol`, `WebSocketTransport`): binary frames, masked unless the remote
sets `ws_no_masking` and the hub answers `Nats-No-Masking: true`, deflated when it sets `ws_compression`
and the hub agrees.
"""

from __future__ import annotations

import asyncio
import base64
import os
import urllib.parse
from collections.abc import Callable
from typing import cast

from pynatsd.base.logging import get_logger
from pynatsd.websocket.handshake import MAX_HEAD, accept_key
from pynatsd.websocket.server import Framed, WebSocketProtocol, WebSocketTransport

log = get_logger()

UPGRADE_WAIT = 1.0  # seconds for the hub's answer (nats-server's DEFAULT_LEAFNODE_INFO_WAIT, its deadline)
_PMC_REQUEST = "permessage-deflate; server_no_context_takeover; client_no_context_takeover"


def leaf_upgrade_request(url: str, key: str, compression: bool, no_masking: bool) -> bytes:
    """The HTTP upgrade request a remote sends for `url` (its path, then `/leafnode`)."""
    parts = urllib.parse.urlsplit(url)
    path = parts.path.strip("/")
    target = f"/{path}/leafnode" if path else "/leafnode"
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    lines = [
        f"GET {target} HTTP/1.1",
        f"Host: {host}:{parts.port}" if parts.port else f"Host: {host}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
    ]
    if compression:
        lines.append(f"Sec-WebSocket-Extensions: {_PMC_REQUEST}")
    if no_masking:
        lines.append("Nats-No-Masking: true")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class LeafWebSocketDialer(WebSocketProtocol):
    """A leaf node remote's WebSocket: the upgrade, then `leaf` over the framing (`failed` is called
    instead if the socket closes before)."""

    def __init__(
        self, leaf: Framed, failed: Callable[[], None], url: str, compression: bool, no_masking: bool
    ) -> None:
        self._init_framing()
        self.leaf = leaf
        self.failed = failed
        self.url = url
        self.want_compression = compression
        self.no_masking = no_masking
        self.key = base64.b64encode(os.urandom(16)).decode()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.raw = cast(asyncio.Transport, transport)
        self.raw.write(leaf_upgrade_request(self.url, self.key, self.want_compression, self.no_masking))
        self._timer = self.leaf.server.loop.call_later(
            UPGRADE_WAIT, self._fail, "timeout waiting for the upgrade"
        )

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is None:  # lost before the upgrade: the remote tries again
            self._cancel_timer()
            self.failed()
            return
        super().connection_lost(exc)

    def _handshake(self, data: bytes) -> None:
        raw = self.raw
        assert raw is not None
        self.head += data
        end = self.head.find(b"\r\n\r\n")
        if end < 0:
            if len(self.head) > MAX_HEAD:
                self._fail("response header too large")
            return
        rest = bytes(self.head[end + 4 :])
        lines = bytes(self.head[:end]).decode("latin-1").split("\r\n")
        self.head = bytearray()
        self._cancel_timer()
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        status = lines[0].split(" ", 2)
        if (
            len(status) < 2
            or status[1] != "101"
            or headers.get("upgrade", "").lower() != "websocket"
            or headers.get("connection", "").lower() != "upgrade"
            or headers.get("sec-websocket-accept") != accept_key(self.key)
        ):
            self._fail("invalid websocket connection")
            return
        compress = False
        if self.want_compression:
            params = [p.strip().lower() for p in headers.get("sec-websocket-extensions", "").split(";")]
            if "permessage-deflate" in params:
                if "server_no_context_takeover" not in params or "client_no_context_takeover" not in params:
                    self._fail("compression negotiation error")
                    return
                compress = True
        # As nats-server: our frames are masked unless we asked not to and the hub agreed.
        self.mask = not (self.no_masking and headers.get("nats-no-masking") == "true")
        self.start_framing(self.leaf.server, compress, masked=False)
        log.debug("Leafnode compression=%s masking=%s", compress, self.mask)
        self.conn = self.leaf
        self.leaf.connection_made(WebSocketTransport(self, raw))
        if rest:  # (frames behind the answer)
            self.data_received(rest)

    def _fail(self, reason: str) -> None:
        where = urllib.parse.urlsplit(self.url).netloc.rpartition("@")[2]  # (not its credentials)
        log.error("Error trying to connect as leafnode to remote server %r: %s", where, reason)
        assert self.raw is not None
        self.raw.close()  # (connection_lost then has the remote try again)
