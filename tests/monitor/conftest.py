"""Fixtures for monitoring tests: an in-process server with its HTTP monitor, and a JSON getter."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import pytest

from pynatsd.base.options import Options
from pynatsd.server import Server
from tests.servers import ServerProcess, free_port, start_server

Get = Callable[..., Awaitable[Any]]


@pytest.fixture
async def mserver() -> AsyncIterator[Server]:
    server = Server(Options(host="127.0.0.1", port=-1, http_port=-1, ping_interval=3600))
    await server.start()
    yield server
    await server.shutdown()


@pytest.fixture
async def get(mserver: Server) -> AsyncIterator[Get]:
    """`await get("/varz")` → decoded JSON; `await get(path, raw=True)` → (status, headers, text)."""
    async with aiohttp.ClientSession() as session:

        async def fetch(path: str, raw: bool = False) -> Any:
            async with session.get(f"http://127.0.0.1:{mserver.http_port}{path}") as resp:
                text = await resp.text()
                if raw:
                    return resp.status, resp.headers, text
                assert resp.status == 200, (path, resp.status, text)
                return json.loads(text)

        yield fetch


@pytest.fixture
def monitored() -> Iterator[ServerProcess]:
    """A pynatsd subprocess with its HTTP monitor on a free port."""
    server = start_server("pynatsd", http_port=free_port())
    yield server
    server.stop()
