"""Fixtures: an in-process pynatsd with JetStream on a temporary store directory, restartable; nats-server
and pynatsd with JetStream side by side, with a client on each; and either server as a subprocess on a
store, for a kill -9 and a restart on the same store."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from pynatsd.base.options import Options
from pynatsd.server import Server
from tests.servers import ServerProcess, jetstream_pair, server_life


class JsServer:
    """A pynatsd with `-js -sd <dir>` in this test's loop; `restart()` keeps the store directory."""

    def __init__(self, store_dir: Path, **extra: Any) -> None:
        self.store_dir = store_dir
        self.extra = extra
        self.server: Server | None = None
        self.port = -1
        self.clients: list[Client] = []

    async def start(self) -> None:
        opts = Options(host="127.0.0.1", port=self.port)
        opts.jetstream = self.extra.get("jetstream", True)
        opts.jetstream_store_dir = str(self.store_dir)
        self.server = Server(opts)
        await self.server.start()
        self.port = self.server.port

    async def stop(self) -> None:
        for nc in self.clients:
            if not nc.is_closed:
                await nc.close()
        self.clients.clear()
        if self.server is not None:
            await self.server.shutdown()
            self.server = None

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def connect(self, **kwargs: Any) -> Client:
        nc = await nats.connect(self.url, allow_reconnect=False, **kwargs)
        self.clients.append(nc)
        return nc


@pytest.fixture
async def js_server(tmp_path: Path) -> AsyncIterator[JsServer]:
    srv = JsServer(tmp_path / "store")
    await srv.start()
    yield srv
    await srv.stop()


@pytest.fixture
async def nc(js_server: JsServer) -> Client:
    return await js_server.connect()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """nats-server and pynatsd with JetStream (reference, ours), shared by a module's tests; a module whose
    tests each need fresh ones defines its own `servers`."""
    with jetstream_pair(tmp_path_factory.mktemp("pair")) as pair:
        yield pair


@pytest.fixture
async def clients(servers: tuple[ServerProcess, ServerProcess]) -> AsyncIterator[tuple[Client, Client]]:
    """A client on each of `servers`: (reference, ours)."""
    ref, ours = servers
    a, b = await nats.connect(ref.url), await nats.connect(ours.url)
    yield a, b
    await a.close()
    await b.close()


@contextlib.asynccontextmanager
async def jetstream_life(
    kind: str, store: Path, *, port: int | None = None, kill: bool = False
) -> AsyncIterator[tuple[ServerProcess, Client]]:
    """`kind` with JetStream on `store` and a client of it (closed on exit), as `server_life` runs it: a
    kill -9 on exit if `kill`, on `port` for a restart where the clients were. A crash test is two in a row:

        async with jetstream_life(kind, store, kill=True) as (srv, nc): ...  # what must survive
        async with jetstream_life(kind, store) as (_, nc): ...  # what did
    """
    with server_life(kind, ["-js", "-sd", str(store)], port=port, kill=kill) as srv:
        nc = await nats.connect(srv.url, allow_reconnect=False)
        try:
            yield srv, nc
        finally:
            await nc.close()
