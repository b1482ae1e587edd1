"""The plugin's `nats_url` fixture gives each test its own pynatsd (JetStream as the test's
`@pytest.mark.nats_server(...)` asks); the service and a client connect to it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import nats
import pytest
from greeter import Greeter
from nats.aio.client import Client


@pytest.fixture
async def client(nats_url: str) -> AsyncIterator[Client]:
    connection = await nats.connect(nats_url)
    yield connection
    await connection.close()


@pytest.fixture
async def greeter(client: Client) -> AsyncIterator[Greeter]:
    service = Greeter(client)
    await service.start()
    yield service
    await service.stop()
