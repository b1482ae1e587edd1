"""Fixtures for end-to-end tests: an in-process pynatsd on the test's own event loop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from pynatsd.base.options import Options
from pynatsd.server import Server

MakeServer = Callable[..., Awaitable[Server]]


@pytest.fixture
async def make_server() -> AsyncIterator[MakeServer]:
    """Factory: `await make_server(max_payload=...)` starts a Server on 127.0.0.1 at a random port."""
    servers: list[Server] = []

    async def make(**overrides: Any) -> Server:
        server = Server(Options(host="127.0.0.1", port=-1, **overrides))
        await server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.shutdown()


@pytest.fixture
async def server(make_server: MakeServer) -> Server:
    return await make_server()


@pytest.fixture
def url(server: Server) -> str:
    return f"nats://127.0.0.1:{server.port}"
