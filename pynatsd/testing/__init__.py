"""An in-process pynatsd for tests (docs/install.md, "In tests"); no nats-server binary needed.

- `async with server(jetstream=True) as srv:` runs one on the running event loop; `srv.url` is where
  clients connect.
- `with server_thread(jetstream=True) as srv:` runs one on a thread and event loop of its own, so it
  serves tests whatever their event loop (or none): what the pytest plugin (pynatsd.testing.plugin:
  fixtures `nats_server`, `nats_url`, `nats_server_session`, `nats_url_session`) uses.

Each listens on a free port of 127.0.0.1 and keeps its JetStream store in a temporary directory, removed
when it stops. `config` is the text of a configuration file (or the path of one); keyword arguments are
Options fields set over it (`port`, `host` and `store_dir` among them)."""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pynatsd.server import Server

__all__ = ["RunningServer", "server", "server_thread"]

#: How long stopping a server thread may take before it counts as hung (JetStream's last writes included).
STOP_TIMEOUT = 30.0


@dataclass(frozen=True)
class RunningServer:
    """A test server while it runs: `url` for clients, its `port`, the JetStream `store_dir`, and the
    `server` itself (pynatsd.Server; from another thread, read it only)."""

    url: str
    port: int
    store_dir: str
    server: Server


@asynccontextmanager
async def server(
    *, jetstream: bool = False, config: str | os.PathLike[str] | None = None, **options: Any
) -> AsyncIterator[RunningServer]:
    """A pynatsd on this event loop, for the time of the `async with` (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="pynatsd-test-") as scratch:
        store_dir = str(Path(scratch) / "jetstream")
        settings: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "store_dir": store_dir, **options}
        if jetstream:
            settings["jetstream"] = True
        if config is None:
            built = Server.from_kwargs(**settings)
        else:
            if isinstance(config, str):  # the file's text, written beside the store (its includes too)
                path = Path(scratch) / "server.conf"
                path.write_text(config)
                config = path
            built = Server.from_config(config, **settings)
        async with built:
            yield RunningServer(built.client_url, built.port, settings["store_dir"], built)


@contextmanager
def server_thread(
    *, jetstream: bool = False, config: str | os.PathLike[str] | None = None, **options: Any
) -> Iterator[RunningServer]:
    """A pynatsd on a thread of its own, for the time of the `with`; a failure to start is raised here."""
    runner = _ServerThread(dict(options, jetstream=jetstream, config=config))
    running = runner.start()
    try:
        yield running
    finally:
        runner.stop()


class _ServerThread:
    """`server(**settings)` run by asyncio.run on a daemon thread, until stop()."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self._settings = settings
        self._ready = threading.Event()
        self._running: RunningServer | None = None
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="pynatsd-testing", daemon=True)

    def start(self) -> RunningServer:
        self._thread.start()
        self._ready.wait()
        if self._running is None:
            self._thread.join()
            assert self._error is not None
            raise self._error
        return self._running

    def stop(self) -> None:
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and self._thread.is_alive():
            loop.call_soon_threadsafe(stopping.set)
        self._thread.join(STOP_TIMEOUT)
        if self._thread.is_alive():
            raise RuntimeError(f"the pynatsd test server did not stop within {STOP_TIMEOUT:g} s")
        if self._error is not None:  # raised while stopping (e.g. its store could not be removed)
            raise self._error

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        try:
            async with server(**self._settings) as running:
                self._running = running
                self._ready.set()
                await self._stopping.wait()
        except BaseException as exc:  # handed to the thread that started or stops it
            self._error = exc
        finally:
            self._ready.set()
