"""WebSocket: a transport under the same client connection (nats-server's `websocket {}` listener).

`framing` and `handshake` are sans-IO; `server` holds the asyncio listener, the protocol doing the upgrade
and the transport adapter that carries an ordinary `pynatsd.broker.connection.Connection`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pynatsd.base.listener import start_or_exit
from pynatsd.config.websocket import WebSocketOptions, websocket_options

if TYPE_CHECKING:
    from pynatsd.broker.core import Broker
    from pynatsd.websocket.server import WebSocketListener

__all__ = ["WebSocketOptions", "start_websocket", "websocket_options"]


async def start_websocket(server: Broker) -> WebSocketListener | None:
    """Start the server's WebSocket listener when its options configure one."""
    ws = websocket_options(server.options)
    if ws is None:
        return None
    from pynatsd.websocket.server import WebSocketListener

    listener = WebSocketListener(server, ws)
    await start_or_exit(listener.start(), "websocket")
    return listener
