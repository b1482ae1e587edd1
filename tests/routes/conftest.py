"""Clusters of real servers (pynatsd and nats-server) for the route tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import nats
import pytest

from tests.servers import ServerProcess, free_port, require, start_server

Start = Callable[..., ServerProcess]


@pytest.fixture
def node() -> Iterator[Start]:
    """`node(kind, routes=[other nodes], **)`: a cluster member on free ports, stopped after the test."""
    require("nats-server")
    started: list[ServerProcess] = []

    def start(
        kind: str,
        routes: list[ServerProcess] | None = None,
        cluster_port: int | None = None,
        args: list[str] | None = None,
        name: str | None = "T",
        http: bool = False,
        listen_flag: bool = True,
    ) -> ServerProcess:
        """`routes`: the nodes to solicit; `name` None: a dynamic cluster name; `listen_flag` False: the
        route port comes from a config file in `args` (--cluster would override its authorization)."""
        rport = cluster_port or free_port()
        cmd = ["--cluster", f"nats://127.0.0.1:{rport}"] if listen_flag else []
        if name is not None:
            cmd += ["--cluster_name", name]
        if routes:
            cmd += ["--routes", ",".join(f"nats://127.0.0.1:{r.extra['route_port']}" for r in routes)]
        port = free_port()
        while port == rport:  # two free ports asked in a row may be the same one
            port = free_port()
        server = start_server(kind, cmd + (args or []), port=port, http_port=free_port() if http else None)
        server.extra["route_port"] = rport
        started.append(server)
        # pynatsd opens its route port after its client port (route INFOs carry the client URLs); a test
        # that dials the route port at once must not find it closed
        wait_logged(server, "Listening for route connections")
        return server

    yield start
    for server in started:
        server.stop()


def wait_logged(server: ServerProcess, line: str, timeout: float = 15.0) -> None:
    """Until `server` has logged `line`."""
    deadline = time.monotonic() + timeout
    while line not in server.log():
        assert time.monotonic() < deadline, f"{server.kind} never logged {line!r}:\n{server.log()}"
        time.sleep(0.02)


async def connect(server: ServerProcess, **kwargs: Any) -> nats.NATS:
    return await nats.connect(server.url, allow_reconnect=False, **kwargs)


async def wait_routed(pub: nats.NATS, sub: nats.NATS, timeout: float = 15.0, subject: str = "") -> None:
    """Until a message published on `pub`'s server reaches a subscriber on `sub`'s (route up, interest
    propagated), on `subject` if given."""
    subject = subject or "probe." + uuid.uuid4().hex
    got = asyncio.Event()

    async def seen(_: Any) -> None:
        got.set()

    s = await sub.subscribe(subject, cb=seen)
    await sub.flush()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not got.is_set():
        assert loop.time() < deadline, "no route between the two servers"
        await pub.publish(subject, b"")
        await pub.flush()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(got.wait(), 0.2)
    await s.unsubscribe()


async def settle(*clients: nats.NATS) -> None:
    """Flush every client, then give interest a moment to cross the routes."""
    for c in clients:
        await c.flush()
    await asyncio.sleep(0.3)


def routez(server: ServerProcess) -> dict[str, Any]:
    """nats-server's /routez (the reference's view of its routes)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/routez?subs=1", timeout=5) as resp:
        return dict(json.load(resp))
