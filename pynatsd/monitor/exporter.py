"""A small Prometheus exporter for a nats-server (which serves JSON monitoring only): its /varz,
/routez and /jsz as the `gnatsd_varz_*`, `gnatsd_routez_num_routes` and `jetstream_*` series pynatsd
serves itself, so a mixed cluster is scraped under one set of names.
Run: `python -m pynatsd.monitor.exporter URL [--port 7777]`.

Every scrape reads the server anew; when it cannot be read the scrape fails (HTTP 503), so Prometheus
shows the node's target down rather than stale numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from pynatsd.monitor.metrics import JSZ_ALL, exporter_families, jetstream_families

SCRAPE_TIMEOUT = 3.0


class NatsServerCollector(Collector):
    """The series of the nats-server whose monitoring port is at `url` (http://host:port)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + path, timeout=SCRAPE_TIMEOUT) as resp:
            body: dict[str, Any] = json.load(resp)
        return body

    def collect(self) -> Iterator[Metric]:
        varz = self._get("/varz")
        num_routes = int(self._get("/routez")["num_routes"])
        yield from exporter_families(varz, num_routes)
        if varz.get("jetstream", {}).get("config"):  # JetStream enabled
            jsz = self._get("/jsz?" + urllib.parse.urlencode(JSZ_ALL))
            yield from jetstream_families(jsz, str(varz["server_id"]), str(varz["server_name"]))


def registry_for(url: str) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NatsServerCollector(url))
    return registry


def serve(url: str, host: str, port: int) -> None:
    registry = registry_for(url)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            try:
                body = generate_latest(registry)
            except (OSError, ValueError, KeyError) as e:
                self.send_error(503, f"cannot read {url}: {e}")
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: one line per scrape would flood the container log."""

    ThreadingHTTPServer((host, port), Handler).serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pynatsd.monitor.exporter", description=__doc__)
    parser.add_argument("url", help="the nats-server's monitoring URL, e.g. http://nats-server:8222")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=7777)
    args = parser.parse_args(argv)
    # A container's first process gets no default SIGTERM action: without a handler `docker-compose down`
    # waited its 20 s and killed it (the cluster stack's teardown took 27.7 s)
    signal.signal(signal.SIGTERM, _stop)
    with contextlib.suppress(KeyboardInterrupt):
        serve(args.url, args.host, args.port)


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    main()
