"""Fixtures for the interop suite: drivers built once per session, servers of both kinds."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.conftest import need_tool
from tests.interop.drivers import Driver, build_c, build_go, c_available, go_available
from tests.interop.drivers import python_driver as pydriver_command
from tests.servers import ServerProcess, free_port, nats_server_binary, start_server

SERVER_KINDS = ("pynatsd", "nats-server")

ServerFactory = Callable[..., ServerProcess]


@pytest.fixture(scope="session")
def go_driver() -> Driver:
    need_tool(go_available(), "Go toolchain with nats.go (golang-go, golang-github-nats-io-go-nats-dev)")
    return Driver("go", (str(build_go()),))


@pytest.fixture(scope="session")
def c_driver() -> Driver:
    need_tool(c_available(), "gcc with libnats (gcc, pkg-config, libnats-dev)")
    return Driver("c", (str(build_c()),))


@pytest.fixture(scope="session")
def python_driver() -> Driver:
    return pydriver_command()


@pytest.fixture(params=["go", "c", "python"])
def driver(request: pytest.FixtureRequest) -> Driver:
    """Each scenario runs with the Go, the C and the Python (nats-py) client."""
    lang: str = request.param
    driver: Driver = request.getfixturevalue(f"{lang}_driver")
    return driver


@pytest.fixture(params=["go", "c"])
def native_driver(request: pytest.FixtureRequest) -> Driver:
    """Go and C only, for checks nats-py has no API for."""
    lang: str = request.param
    driver: Driver = request.getfixturevalue(f"{lang}_driver")
    return driver


@pytest.fixture(params=SERVER_KINDS)
def server_kind(request: pytest.FixtureRequest) -> str:
    """Each scenario runs against pynatsd and, as the reference, the real nats-server."""
    kind: str = request.param
    if kind == "nats-server":
        need_tool(nats_server_binary() is not None, "nats-server")
    return kind


@pytest.fixture(scope="session")
def _shared_servers() -> Iterator[dict[str, ServerProcess]]:
    servers: dict[str, ServerProcess] = {}
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture
def server(server_kind: str, _shared_servers: dict[str, ServerProcess]) -> ServerProcess:
    """A plain server of the wanted kind with monitoring, shared by the tests (each uses own subjects)."""
    current = _shared_servers.get(server_kind)
    if current is None or current.proc.poll() is not None:
        current = start_server(server_kind, http_port=free_port())
        _shared_servers[server_kind] = current
    return current


@pytest.fixture
def server_factory(server_kind: str) -> Iterator[ServerFactory]:
    """Dedicated servers (auth, TLS, restarts) of the wanted kind, stopped after the test."""
    started: list[ServerProcess] = []

    def start(args: list[str] | None = None, port: int | None = None) -> ServerProcess:
        srv = start_server(server_kind, args, port=port)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture
def subject() -> str:
    """A subject no other test uses, so tests can share one server."""
    return f"interop.{uuid.uuid4().hex[:10]}"
