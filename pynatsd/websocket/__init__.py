"""WebSocket: a transport under the same client connection (nats-server's `websocket {}` listener).

`framing` and `handshake` are sans-IO; `server` holds the asyncio listener, the protocol doing the upgrade
and the transport adapter that carries an ordinary `pynatsd.broker.connection.Connection`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pynatsd.base.logging import get_logger
from pynatsd.base.values import ConfigValueError
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
    try:
        await listener.start()
    except ConfigValueError as exc:
        # Checks that needed the whole file (see config.apply): stop as nats-server does on bad options.
        get_logger().critical("nats-server: %s", exc)
        raise SystemExit(1) from None
    except OSError as exc:
        get_logger().critical("Unable to listen for websocket connections: %s", exc)
        raise SystemExit(1) from None
    return listener
