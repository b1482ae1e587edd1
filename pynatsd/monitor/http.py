"""The monitoring HTTP server: aiohttp on the broker's own event loop."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from pynatsd.base.listener import dual_stack_socket
from pynatsd.base.logging import get_logger
from pynatsd.base.options import HTTP_READ_TIMEOUT
from pynatsd.monitor import endpoints, raftz
from pynatsd.monitor.metrics import build_registry

if TYPE_CHECKING:
    from pynatsd.node import Node

log = get_logger()
STATIC = Path(__file__).parent / "static"
JSON_PATHS = (
    "varz",
    "connz",
    "subsz",
    "routez",
    "gatewayz",
    "leafz",
    "accountz",
    "accstatz",
    "jsz",
    "healthz",
    "raftz",
)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _dumps(data: Any, indent: int | None = 2) -> str:
    """nats-server's JSON (indented by two spaces, or compact); snapshots taken by the builders (e.g.
    `endpoints.SubscriptionsSnapshot`) are expanded here."""
    if indent:
        return json.dumps(data, indent=indent, ensure_ascii=False, default=_expand)
    return json.dumps(data, separators=(",", ":"), default=_expand)


def _encoded(data: Any) -> bytes:
    return _dumps(data).encode()


def _expand(value: Any) -> Any:
    if isinstance(value, endpoints.SubscriptionsSnapshot):
        return value.to_json()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _json(data: Any, status: int = 200, indent: int | None = 2) -> web.Response:
    return web.Response(text=_dumps(data, indent), status=status, content_type="application/json")


def _json_handler(build: Callable[[web.Request], dict[str, Any]]) -> Handler:
    """An aiohttp handler for a synchronous endpoint builder: the page is built on the loop (a bounded
    snapshot of live state), and serialized in a worker thread, so a large response (200k subscriptions
    in /connz?subs=detail) does not hold the loop: the GIL is handed back every few milliseconds."""

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await asyncio.to_thread(_encoded, build(request))
        return web.Response(body=body, content_type="application/json", charset="utf-8")

    return handle


class Monitor:
    """Serves /varz, /connz, … /metrics and the dashboard for one server."""

    def __init__(self, server: Node) -> None:
        self.server = server
        self.cpu = endpoints.CpuSampler()
        self.req_stats: Counter[str] = Counter()
        self.registry = build_registry(server, self.cpu)
        self.runner: web.AppRunner | None = None
        self.port = 0
        self.sockets: list[socket.socket] = []  # the listening sockets (for the ports file)
        self.read_timeout = HTTP_READ_TIMEOUT  # for a request to arrive whole, or between two requests

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware])
        s = self.server
        app.router.add_get("/", self.index)
        routes: dict[str, Callable[[web.Request], dict[str, Any]]] = {
            "/varz": lambda r: endpoints.varz(s, self.cpu, self.req_stats),
            "/connz": lambda r: endpoints.connz(s, r.query),
            "/subsz": lambda r: endpoints.subsz(s, r.query),
            "/subscriptionsz": lambda r: endpoints.subsz(s, r.query),
            "/routez": lambda r: endpoints.routez(s, r.query),
            "/gatewayz": lambda r: endpoints.gatewayz(s, r.query),
            "/leafz": lambda r: endpoints.leafz(s, r.query),
            "/accountz": lambda r: endpoints.accountz(s, r.query),
            "/accstatz": lambda r: endpoints.accstatz_query(s, r.query),
            "/jsz": lambda r: endpoints.jsz(s, r.query),
        }
        for path, build in routes.items():
            app.router.add_get(path, _json_handler(build))
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/raftz", self.raftz)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_static("/static/", STATIC)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.req_stats[request.path] += 1
        try:
            response = await handler(request)
        except endpoints.BadRequest as exc:
            response = web.Response(status=400, text=str(exc))
        response.headers["Access-Control-Allow-Origin"] = "*"
        return response

    async def index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html")

    async def healthz(self, request: web.Request) -> web.Response:
        status, body = endpoints.healthz(self.server, request.query)
        return _json(body, status=status, indent=None)

    async def raftz(self, request: web.Request) -> web.Response:
        try:
            groups = raftz.http_raftz(self.server, request.query)
        except raftz.NotFound as missing:
            return web.Response(status=404, text=str(missing))
        return _json(groups, indent=3)  # nats-server indents this one by three spaces

    async def metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        # The 0.0.4 text format: what every Prometheus release scrapes (Debian's 2.42 included).
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4})

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> int:
        """Serve on `host:port` (-1: a random port), over HTTPS when `ssl_context` is given."""
        self.runner = web.AppRunner(
            self.app(), access_log=None, handle_signals=False, keepalive_timeout=self.read_timeout
        )
        await self.runner.setup()
        port = 0 if port == -1 else port
        dual = dual_stack_socket(host, port)  # 0.0.0.0 takes [::1] too, as the client listener
        site: web.BaseSite = (
            web.SockSite(self.runner, dual, ssl_context=ssl_context)
            if dual is not None
            else web.TCPSite(self.runner, host or None, port, reuse_address=True, ssl_context=ssl_context)
        )
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.sockets = list(sockets)
        self.port = int(sockets[0].getsockname()[1]) if sockets else port
        log.info("Starting %s monitor on %s:%d", "https" if ssl_context else "http", host, self.port)
        return self.port

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
