"""The `mqtt {}` port of a server: its asyncio listener, its authenticator, its clients by client ID."""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from pynatsd.auth.users import Authenticator
from pynatsd.base.blocks import MQTTOptions
from pynatsd.base.listener import listener_urls
from pynatsd.base.logging import get_logger
from pynatsd.base.tls import server_context
from pynatsd.base.values import ConfigValueError
from pynatsd.config.mqtt import validate
from pynatsd.config.websocket import block_tls_options
from pynatsd.mqtt.connection import MQTTConnection

if TYPE_CHECKING:
    from pynatsd.broker.core import Broker
    from pynatsd.jetstream import JetStream
    from pynatsd.mqtt.delivery import Session

log = get_logger()

DEFAULT_TLS_TIMEOUT = 2  # seconds, nats-server's TLS_TIMEOUT


def cert_not_after(path: str) -> str:
    """When the PEM certificate at `path` expires, as nats-server's /varz says it (RFC 3339, UTC); empty if
    it cannot be read. (The standard library reads certificates only through this private helper.)"""
    try:
        decoded = ssl._ssl._test_decode_cert(path)  # type: ignore[attr-defined]
        seconds = ssl.cert_time_to_seconds(decoded["notAfter"])
    except (AttributeError, KeyError, OSError, ValueError):
        return ""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class MQTTListener:
    """The `mqtt {}` port (see pynatsd.mqtt)."""

    def __init__(self, server: Broker, mqtt: MQTTOptions, jetstream: JetStream | None) -> None:
        self.server = server
        self.mqtt = mqtt
        self.jetstream = jetstream  # this server's own (a clustered one may serve its cluster's instead)
        self.port = mqtt.port
        self.scheme = "mqtt"
        self.domain = ""
        self.tls_timeout: float = DEFAULT_TLS_TIMEOUT  # (nats-server shows its default without TLS too)
        self.cert_not_after = ""  # the TLS certificate's expiry (RFC 3339), for /varz
        self.clients: set[MQTTConnection] = set()
        # The last closed ones, for /connz?state=closed (beside the server's ring of client connections)
        self.closed: deque[MQTTConnection] = deque(maxlen=server.options.max_closed_clients)
        self.closed_delivered = (0, 0)  # messages and bytes delivered to the closed ones (/metrics)
        self.closed_in_msgs = 0  # PUBLISHes received from the closed ones (/metrics)
        self.by_client_id: dict[tuple[str, str], MQTTConnection] = {}  # (account, client ID) -> client
        # The QoS 1/2 state of each persistent session, kept between its connections (as nats-server's
        # session manager keeps its sessions): its packet identifiers in flight
        self.sessions: dict[tuple[str, str], Session] = {}
        # MQTT 5.0 wills waiting for their delay (pynatsd.mqtt.v5): (account, client ID) -> (timer, publish)
        self.delayed_wills: dict[tuple[str, str], tuple[asyncio.TimerHandle, Callable[[], None]]] = {}
        self._listener: asyncio.base_events.Server | None = None
        self._auth: Authenticator | None = None
        self._auth_base: Authenticator | None = None

    async def start(self) -> None:
        """Validate the block against the rest of the configuration and bind the port."""
        opts = self.server.options
        validate(self.mqtt, opts, self.jetstream is not None)
        own = self.jetstream.domain or "" if self.jetstream is not None else ""
        if self.mqtt.js_domain and self.mqtt.js_domain != own:
            # Fail closed: nats-server would keep the MQTT state in that domain's JetStream (a hub's).
            raise ConfigValueError(
                f"mqtt js_domain: pynatsd keeps MQTT state in its own JetStream (domain {own!r}), not in "
                f"domain {self.mqtt.js_domain!r}"
            )
        self.domain = own  # the session records' subject token (nats-server's domainTk)
        mqtt = self.mqtt
        tls = block_tls_options(mqtt.tls, opts, "mqtt") if mqtt.tls is not None else None
        ctx = server_context(tls, verify_clients=True) if tls is not None else None
        if tls is not None:
            self.tls_timeout = tls.tls_timeout
            self.cert_not_after = cert_not_after(tls.tls_cert)
        self.server.stats.mqtt = self.clients  # their counters in /varz while they are open
        self._listener = await self.server.loop.create_server(
            lambda: cast(asyncio.Protocol, MQTTConnection(self.server, self)),
            host=mqtt.host or None,
            port=0 if mqtt.port == -1 else mqtt.port,
            reuse_address=True,
            backlog=1024,
            ssl=ctx,
            ssl_handshake_timeout=self.tls_timeout if ctx is not None else None,
        )
        sockets = self._listener.sockets
        self.port = int(sockets[0].getsockname()[1]) if sockets else mqtt.port
        self.scheme = "tls" if ctx is not None else "mqtt"
        log.info("Listening for MQTT clients on %s://%s:%d", self.scheme, mqtt.host, self.port)

    def accept_websocket(self) -> MQTTConnection:
        """A client of the `websocket {}` port's `/mqtt` path (nats-server's MQTT over WebSocket): this
        listener's client, its frames undone by the WebSocket listener."""
        conn = MQTTConnection(self.server, self)
        conn.is_websocket = True
        return conn

    def authenticator(self) -> Authenticator:
        """The server's users, with this block's single user, token or no_auth_user in place of the
        server's when it sets any (nats-server's authOverride); rebuilt when the server's is (a reload)."""
        base = self.server.auth
        if self._auth is None or self._auth_base is not base:
            mqtt = self.mqtt
            if mqtt.auth_override:
                options = dataclasses.replace(
                    self.server.options,
                    username=mqtt.username,
                    password=mqtt.password,
                    authorization=mqtt.token,
                    no_auth_user=mqtt.no_auth_user,
                )
                self._auth = Authenticator(options)
            else:
                self._auth = base
            self._auth_base = base
        return self._auth

    def take_over(self, conn: MQTTConnection) -> None:
        """`conn` connected: a client already connected with its client ID is closed, without its will
        [MQTT-3.1.4-2] (but a 5.0 one's when `conn`'s clean start ends its session)."""
        key = (conn.account, conn.client_id)
        before = self.by_client_id.get(key)
        self.by_client_id[key] = conn
        if before is not None and before is not conn:
            log.warning(
                "%r - Replacing old client %r since both have the same client ID %r",
                conn,
                before,
                conn.client_id,
            )
            if before.v5 is None or not conn.fresh:  # 5.0: a clean start ends its session, will and all
                before.will = None
            before.close("Duplicate Client ID")

    def forget(self, conn: MQTTConnection) -> None:
        self.clients.discard(conn)
        key = (conn.account, conn.client_id)
        if self.by_client_id.get(key) is conn:
            del self.by_client_id[key]
        stats = self.server.stats
        stats.closed.in_msgs += conn.in_msgs
        stats.closed.in_bytes += conn.in_bytes
        stats.closed.out_msgs += conn.out_msgs
        stats.closed.out_bytes += conn.out_bytes
        msgs, size = self.closed_delivered
        self.closed_delivered = (msgs + conn.delivered_msgs, size + conn.delivered_bytes)
        self.closed_in_msgs += conn.in_msgs
        self.closed.append(conn)

    def delivered(self) -> tuple[int, int]:
        """Messages and bytes delivered to MQTT clients so far (open and closed)."""
        msgs, size = self.closed_delivered
        for conn in self.clients:
            msgs += conn.delivered_msgs
            size += conn.delivered_bytes
        return msgs, size

    def account_connections(self, account: str) -> int:
        return sum(1 for c in self.clients if c.connected and not c.closed and c.account == account)

    def close(self) -> None:
        """Stop accepting (lame duck mode, shutdown)."""
        if self._listener is not None:
            self._listener.close()

    def close_clients(self) -> None:
        """Close the MQTT clients (shutdown): they are this listener's, not in the server's clients."""
        for conn in list(self.clients):
            conn.close("Server Shutdown")

    async def wait_closed(self) -> None:
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None

    def urls(self) -> list[str]:
        """`mqtt://` URLs of the listener's sockets."""
        return [] if self._listener is None else listener_urls(self.scheme, self._listener)

    def varz(self) -> dict[str, Any]:
        """/varz `mqtt`: nats-server's MQTTOptsVarz (empty fields left out, as its omitempty)."""
        mqtt = self.mqtt
        fields: dict[str, Any] = {
            "host": mqtt.host,
            "port": self.port,
            "no_auth_user": mqtt.no_auth_user,
            "auth_timeout": mqtt.auth_timeout,
            "tls_timeout": self.tls_timeout,
            "js_domain": mqtt.js_domain,
            "ack_wait": int(mqtt.ack_wait * 1e9),
            "max_ack_pending": mqtt.max_ack_pending,
            "tls_cert_not_after": self.cert_not_after,
        }
        return {k: v for k, v in fields.items() if v}
