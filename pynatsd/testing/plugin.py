"""pytest plugin (entry point `pytest11`): an in-process pynatsd per test or per session (docs/install.md,
"In tests").

Fixtures:
- `nats_server` (a pynatsd.testing.RunningServer) and `nats_url` (its `nats://127.0.0.1:<port>`): a
  server for one test, configured by the test's `@pytest.mark.nats_server(jetstream=True, config="...")`
  or by indirect parametrisation (`@pytest.mark.parametrize("nats_server", [{"jetstream": True}],
  indirect=True)`), both pynatsd.testing.server's arguments;
- `nats_server_session` and `nats_url_session`: one server for the whole session, configured by the
  `nats_server_session_options` fixture (JetStream on; override it in a conftest.py).

Each server runs on a thread of its own (pynatsd.testing.server_thread), so the fixtures are plain ones:
they serve async tests on any event loop (pytest-asyncio's, anyio's) and sync tests alike. A server stops
and its store is removed at the fixture's teardown, which pytest runs when the test fails too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pynatsd.testing import RunningServer


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "nats_server(jetstream=False, config=None, **options): settings of the test's `nats_server` "
        "fixture (pynatsd.testing.server's arguments)",
    )


@pytest.fixture
def nats_server(request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    """A pynatsd for this test (see the module docstring)."""
    settings: dict[str, Any] = {}
    marker = request.node.get_closest_marker("nats_server")
    if marker is not None:
        if marker.args:
            raise pytest.UsageError("@pytest.mark.nats_server takes keyword arguments only")
        settings.update(marker.kwargs)
    param: object = getattr(request, "param", None)
    if isinstance(param, dict):
        settings.update(param)
    elif param is not None:
        raise pytest.UsageError(f"nats_server's parameter must be a dict of settings, not {param!r}")
    yield from _serve(settings)


@pytest.fixture
def nats_url(nats_server: RunningServer) -> str:
    """Where this test's pynatsd is reached."""
    return nats_server.url


@pytest.fixture(scope="session")
def nats_server_session_options() -> dict[str, Any]:
    """The session server's settings (pynatsd.testing.server's arguments); override to change them."""
    return {"jetstream": True}


@pytest.fixture(scope="session")
def nats_server_session(nats_server_session_options: dict[str, Any]) -> Iterator[RunningServer]:
    """One pynatsd for the whole session."""
    yield from _serve(nats_server_session_options)


@pytest.fixture(scope="session")
def nats_url_session(nats_server_session: RunningServer) -> str:
    """Where the session's pynatsd is reached."""
    return nats_server_session.url


def _serve(settings: dict[str, Any]) -> Iterator[RunningServer]:
    # Loaded with the first server: a pytest run that asks for none (the plugin is loaded in every run
    # of an environment where pynatsd is installed) does not load the broker.
    from pynatsd.testing import server_thread

    with server_thread(**settings) as running:
        yield running
