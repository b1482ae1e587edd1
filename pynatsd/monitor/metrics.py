"""Prometheus exposition through prometheus-client: a collector that reads the server at scrape time.

Nothing is counted per message for Prometheus beyond two cheap histograms (fan-out per publish, frames per
flush), kept as plain lists of counts by `HistogramCounts` and turned into buckets only when scraped. The
`gnatsd_varz_*` family repeats /varz's numeric fields under the names prometheus-nats-exporter gives them
(and `gnatsd_routez_num_routes` the route count), so the community NATS Grafana dashboards work without an
exporter in between.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from pynatsd.broker.histogram import HistogramCounts
from pynatsd.jetstream import monitor as js_monitor

if TYPE_CHECKING:
    from pynatsd.broker.server import Server
    from pynatsd.monitor.endpoints import CpuSampler

FANOUT_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 1024)
FLUSH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384)
# Per-account metrics: (path in /accstatz's account entry, kind, name, help).
ACCOUNT_METRICS = (
    (("conns",), "gauge", "pynatsd_account_connections", "Open client connections of the account."),
    (("num_subscriptions",), "gauge", "pynatsd_account_subscriptions", "Subscriptions in the account."),
    (("received", "msgs"), "counter", "pynatsd_account_messages_in", "Messages from the account's clients."),
    (("sent", "msgs"), "counter", "pynatsd_account_messages_out", "Messages to the account's clients."),
    (("received", "bytes"), "counter", "pynatsd_account_bytes_in", "Bytes from the account's clients."),
    (("sent", "bytes"), "counter", "pynatsd_account_bytes_out", "Bytes to the account's clients."),
    (("slow_consumers",), "counter", "pynatsd_account_slow_consumers", "Its slow consumers closed."),
)


class PynatsdCollector(Collector):
    """pynatsd_* and gnatsd_varz_* metrics of one server."""

    def __init__(self, server: Server, cpu: CpuSampler) -> None:
        self.server = server
        self.cpu = cpu

    def collect(self) -> Iterator[Metric]:
        from pynatsd.monitor.endpoints import varz

        server = self.server
        stats = server.stats
        sl_stats = server.sublist_stats()
        hits = round(sl_stats.num_matches * sl_stats.cache_hit_rate)
        labels = ["server_id"]
        sid = [server.server_id]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=labels)
            g.add_metric(sid, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=labels)
            c.add_metric(sid, value)
            return c

        yield gauge("pynatsd_connections", "Open client connections.", len(server.clients))
        yield counter(  # exposed as pynatsd_connections_accepted_total: a family apart from the gauge
            "pynatsd_connections_accepted",
            "Client connections accepted since start.",
            stats.total_connections,
        )
        yield gauge("pynatsd_subscriptions", "Subscriptions in the index.", sl_stats.num_subscriptions)
        yield counter("pynatsd_messages_in", "Messages received from clients.", stats.in_client_msgs)
        yield counter("pynatsd_messages_out", "Messages delivered to clients.", stats.out_client_msgs)
        yield counter("pynatsd_bytes_in", "Payload bytes received from clients.", stats.in_client_bytes)
        yield counter("pynatsd_bytes_out", "Payload bytes delivered to clients.", stats.out_client_bytes)
        yield counter("pynatsd_slow_consumers", "Connections closed as slow consumers.", stats.slow_consumers)
        yield counter(
            "pynatsd_stalled_clients",
            "Times a producer was stalled by a consumer past 75% of max_pending.",
            stats.stalled_clients,
        )
        yield counter("pynatsd_stale_connections", "Connections closed as stale.", stats.stale_connections)
        yield counter("pynatsd_auth_failures", "Failed authentications.", stats.auth_failures)
        yield counter("pynatsd_matcher_cache_hits", "Subject matches answered by the cache.", hits)
        yield counter(
            "pynatsd_matcher_cache_misses",
            "Subject matches that walked the index.",
            sl_stats.num_matches - hits,
        )
        yield gauge("pynatsd_matcher_cache_entries", "Cached subject results.", sl_stats.num_cache)
        yield gauge(
            "pynatsd_outbound_pending_bytes",
            "Bytes queued for clients and not yet written to their sockets.",
            sum(c.pending_bytes for c in server.clients.values()),
        )
        yield self._histogram(
            "pynatsd_fanout_per_publish",
            "Subscriptions matched per published message.",
            server.fanout,
            FANOUT_BUCKETS,
        )
        yield self._histogram(
            "pynatsd_flush_batch_frames",
            "Frames written per flush (one socket write).",
            server.scheduler.flush_sizes,
            FLUSH_BUCKETS,
        )
        yield from self._routes()
        yield from self._accounts()
        if server.jetstream is not None:
            for kind, name, doc, value in js_monitor.metrics(server.jetstream):
                yield gauge(name, doc, value) if kind == "gauge" else counter(name, doc, value)
        yield from exporter_families(varz(server, self.cpu, {}), len(server.routes))

    def _routes(self) -> Iterator[Metric]:
        """Route counts, and each route's traffic labelled with its peer (one series per route)."""
        server = self.server
        routes = sorted(server.routes, key=lambda r: r.rid)
        sid = [server.server_id]
        num = GaugeMetricFamily(
            "pynatsd_routes", "Route connections to other cluster members.", labels=["server_id"]
        )
        num.add_metric(sid, len(routes))
        yield num
        labels = ["server_id", "remote_id", "remote_name"]
        families = [
            (
                CounterMetricFamily,
                "pynatsd_route_messages_in",
                "Messages received over the route.",
                "in_msgs",
            ),
            (CounterMetricFamily, "pynatsd_route_messages_out", "Messages sent over the route.", "out_msgs"),
            (
                CounterMetricFamily,
                "pynatsd_route_bytes_in",
                "Payload bytes received over the route.",
                "in_bytes",
            ),
            (
                CounterMetricFamily,
                "pynatsd_route_bytes_out",
                "Payload bytes sent over the route.",
                "out_bytes",
            ),
            (
                GaugeMetricFamily,
                "pynatsd_route_pending_bytes",
                "Bytes queued for the route.",
                "pending_bytes",
            ),
            (
                GaugeMetricFamily,
                "pynatsd_route_subscriptions",
                "Remote interest the peer announced.",
                "num_subs",
            ),
        ]
        for family, name, doc, attr in families:
            metric = family(name, doc, labels=labels)
            for route in routes:
                metric.add_metric([*sid, route.remote_id, route.remote_name], getattr(route, attr))
            yield metric
        rtt = GaugeMetricFamily(
            "pynatsd_route_rtt_seconds", "Last measured round trip to the peer.", labels=labels
        )
        for route in routes:
            if route.rtt is not None:
                rtt.add_metric([*sid, route.remote_id, route.remote_name], route.rtt)
        yield rtt

    def _accounts(self) -> Iterator[Metric]:
        """Per account (label `account`): what /accstatz shows, for every account in use or configured."""
        from pynatsd.monitor.endpoints import accstatz

        stats = accstatz(self.server, unused=True)["account_statz"]
        for path, kind, name, doc in ACCOUNT_METRICS:
            family_type = GaugeMetricFamily if kind == "gauge" else CounterMetricFamily
            family = family_type(name, doc, labels=["server_id", "account"])
            for stat in stats:
                value = stat
                for part in path:
                    value = value[part]
                family.add_metric([self.server.server_id, stat["acc"]], float(value))
            yield family

    def _histogram(self, name: str, doc: str, counts: HistogramCounts, bounds: tuple[int, ...]) -> Metric:
        h = HistogramMetricFamily(name, doc, labels=["server_id"])
        h.add_metric([self.server.server_id], counts.buckets(bounds), float(counts.total))
        return h


def exporter_families(varz: dict[str, Any], num_routes: int) -> Iterator[Metric]:
    """/varz's numeric fields as `gnatsd_varz_*` and the route count as `gnatsd_routez_num_routes`, the
    names prometheus-nats-exporter gives them (for pynatsd's own /metrics and for nats-server's, see
    pynatsd.monitor.exporter)."""
    sid = [str(varz["server_id"])]
    for key, value in varz.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        g = GaugeMetricFamily(
            f"gnatsd_varz_{key}", f"/varz {key} (prometheus-nats-exporter name).", labels=["server_id"]
        )
        g.add_metric(sid, value)
        yield g
    routes = GaugeMetricFamily(
        "gnatsd_routez_num_routes",
        "/routez num_routes (prometheus-nats-exporter name).",
        labels=["server_id"],
    )
    routes.add_metric(sid, num_routes)
    yield routes


def build_registry(server: Server, cpu: CpuSampler) -> CollectorRegistry:
    """A registry of its own per server (several servers may share a process in tests)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PynatsdCollector(server, cpu))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry
