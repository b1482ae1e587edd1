"""pynatsd.mqtt.connection with a fake listener: a fault of ours while processing a packet closes that
connection (and is not replayed with the next input), as client connections do."""

from __future__ import annotations

from typing import Any, cast

from pynatsd.base.blocks import MQTTOptions
from pynatsd.broker.core import Broker
from pynatsd.mqtt.connection import MQTTConnection
from pynatsd.mqtt.listener import MQTTListener
from tests.mqtt.conftest import connect_packet


class BrokenListener:
    """A listener whose authenticator fails unexpectedly."""

    def __init__(self) -> None:
        self.mqtt = MQTTOptions()
        self.jetstream = None
        self.clients: set[Any] = set()
        self.forgotten: list[Any] = []

    def authenticator(self) -> Any:
        raise RuntimeError("a bug")

    def forget(self, conn: Any) -> None:
        self.forgotten.append(conn)


def test_an_unexpected_error_closes_only_the_connection() -> None:
    listener = BrokenListener()
    conn = MQTTConnection(Broker(), cast(MQTTListener, listener))
    conn.data_received(connect_packet(client_id=b"x"))
    assert conn.closed and conn.close_reason == "Protocol Violation"
    assert listener.forgotten == [conn]
