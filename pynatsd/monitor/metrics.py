"""Prometheus exposition through prometheus-client: a collector that reads the server at scrape time.

Nothing is counted per message for Prometheus beyond two cheap histograms (fan-out per publish, frames per
flush), kept as plain lists of counts by `HistogramCounts` and turned into buckets only when scraped. The
`gnatsd_varz_*` family repeats /varz's numeric fields under the names prometheus-nats-exporter gives them
(and `gnatsd_routez_num_routes` the route count), so the community NATS Grafana dashboards work without an
exporter in between.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from pynatsd.base.histogram import HistogramCounts
from pynatsd.jetstream import monitor as js_monitor

if TYPE_CHECKING:
    from pynatsd.monitor.endpoints import CpuSampler
    from pynatsd.node import Node

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

    def __init__(self, server: Node, cpu: CpuSampler) -> None:
        self.server = server
        self.cpu = cpu

    def collect(self) -> Iterator[Metric]:
        from pynatsd.monitor.endpoints import jsz, varz

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

        mqtt = server.mqtt
        mqtt_clients = len(mqtt.clients) if mqtt is not None else 0
        # MQTT clients are clients, as nats-server counts them (/varz `connections`)
        yield gauge("pynatsd_connections", "Open client connections.", len(server.clients) + mqtt_clients)
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
        if mqtt is not None:
            delivered, delivered_bytes = mqtt.delivered()
            yield gauge("pynatsd_mqtt_connections", "Open MQTT client connections.", mqtt_clients)
            yield counter(
                "pynatsd_mqtt_messages_in",
                "PUBLISHes received from MQTT clients.",
                sum(c.in_msgs for c in mqtt.clients) + mqtt.closed_in_msgs,
            )
            yield counter("pynatsd_mqtt_messages_out", "PUBLISHes delivered to MQTT clients.", delivered)
            yield counter(
                "pynatsd_mqtt_bytes_out", "Payload bytes delivered to MQTT clients.", delivered_bytes
            )
        yield from self._routes()
        yield from self._leafnodes()
        yield from self._accounts()
        if server.jetstream is not None:
            for kind, name, doc, value in js_monitor.metrics(server.jetstream):
                yield gauge(name, doc, value) if kind == "gauge" else counter(name, doc, value)
        yield from exporter_families(varz(server, self.cpu, {}), len(server.routes))
        if server.jetstream is not None:
            yield from jetstream_families(jsz(server, JSZ_ALL), server.server_id, server.server_name)

    def _routes(self) -> Iterator[Metric]:
        """Route counts, and each route's traffic labelled with its peer (one series per route)."""
        server = self.server
        routes = sorted(server.routes, key=lambda r: r.rid)
        num = GaugeMetricFamily(
            "pynatsd_routes", "Route connections to other cluster members.", labels=["server_id"]
        )
        num.add_metric([server.server_id], len(routes))
        yield num
        peers = [((route.remote_id, route.remote_name), route) for route in routes]
        yield from self._links("route", "the route", ["remote_id", "remote_name"], peers)

    def _leafnodes(self) -> Iterator[Metric]:
        """Leaf node connections per account, and their traffic per account and other side's server name:
        the series stay as many as the configured links (its server id, new at each restart, is no label;
        leafs of one name in one account are summed)."""
        server = self.server
        leafs = sorted(server.leafnodes, key=lambda leaf: leaf.cid)
        num = GaugeMetricFamily(
            "pynatsd_leafnode_connections",
            "Leaf node connections (either side: solicited or accepted).",
            labels=["server_id", "account"],
        )
        per_account: dict[str, int] = {}
        for leaf in leafs:
            per_account[leaf.account] = per_account.get(leaf.account, 0) + 1
        for account, count in sorted(per_account.items()):
            num.add_metric([server.server_id, account], count)
        yield num
        peers = [((leaf.account, leaf.remote_name), leaf) for leaf in leafs]
        yield from self._links("leafnode", "leaf node connections", ["account", "remote_name"], peers)

    def _links(
        self, kind: str, what: str, labels: list[str], links: list[tuple[tuple[str, str], Any]]
    ) -> Iterator[Metric]:
        """`pynatsd_<kind>_*`: traffic, queue and interest of server links (routes, leaf nodes), each
        labelled with the server id and its `labels` (values summed over links of the same labels)."""
        families = [
            (CounterMetricFamily, "messages_in", f"Messages received over {what}.", "in_msgs"),
            (CounterMetricFamily, "messages_out", f"Messages sent over {what}.", "out_msgs"),
            (CounterMetricFamily, "bytes_in", f"Payload bytes received over {what}.", "in_bytes"),
            (CounterMetricFamily, "bytes_out", f"Payload bytes sent over {what}.", "out_bytes"),
            (GaugeMetricFamily, "pending_bytes", f"Bytes queued for {what}.", "pending_bytes"),
            (GaugeMetricFamily, "subscriptions", "Remote interest the peer announced.", "num_subs"),
        ]
        sid = self.server.server_id
        for family, suffix, doc, attr in families:
            metric = family(f"pynatsd_{kind}_{suffix}", doc, labels=["server_id", *labels])
            for key, value in _summed(links, attr).items():
                metric.add_metric([sid, *key], value)
            yield metric
        rtt = GaugeMetricFamily(
            f"pynatsd_{kind}_rtt_seconds",
            "Last measured round trip to the peer.",
            labels=["server_id", *labels],
        )
        for key, seconds in {key: link.rtt for key, link in links if link.rtt is not None}.items():
            rtt.add_metric([sid, *key], seconds)
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


def _summed(links: list[tuple[tuple[str, str], Any]], attr: str) -> dict[tuple[str, str], float]:
    """`attr` of each link, summed per label values (in first-seen order)."""
    sums: dict[tuple[str, str], float] = {}
    for key, link in links:
        sums[key] = sums.get(key, 0) + getattr(link, attr)
    return sums


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


# prometheus-nats-exporter's JetStream series (its -jsz=all): (name, help, path in the /jsz entry)
JS_SERVER_SERIES = (
    ("jetstream_server_jetstream_disabled", "JetStream disabled or not", ("disabled",)),
    ("jetstream_server_max_memory", "JetStream Max Memory", ("config", "max_memory")),
    ("jetstream_server_max_storage", "JetStream Max Storage", ("config", "max_storage")),
    ("jetstream_server_total_streams", "Total number of streams in JetStream", ("streams",)),
    ("jetstream_server_total_consumers", "Total number of consumers in JetStream", ("consumers",)),
    ("jetstream_server_total_messages", "Total number of stored messages in JetStream", ("messages",)),
    ("jetstream_server_total_message_bytes", "Total number of bytes stored in JetStream", ("bytes",)),
)
JS_STREAM_SERIES = (
    ("jetstream_stream_total_messages", "Total number of messages from a stream", ("state", "messages")),
    ("jetstream_stream_total_bytes", "Total stored bytes from a stream", ("state", "bytes")),
    ("jetstream_stream_first_seq", "First sequence from a stream", ("state", "first_seq")),
    ("jetstream_stream_last_seq", "Last sequence from a stream", ("state", "last_seq")),
    (
        "jetstream_stream_consumer_count",
        "Total number of consumers from a stream",
        ("state", "consumer_count"),
    ),
)
JS_CONSUMER_SERIES = (
    (
        "jetstream_consumer_delivered_consumer_seq",
        "Latest sequence number of a stream consumer",
        ("delivered", "consumer_seq"),
    ),
    (
        "jetstream_consumer_delivered_stream_seq",
        "Latest sequence number of a stream",
        ("delivered", "stream_seq"),
    ),
    ("jetstream_consumer_num_ack_pending", "Number of pending acks from a consumer", ("num_ack_pending",)),
    (
        "jetstream_consumer_num_redelivered",
        "Number of redelivered messages from a consumer",
        ("num_redelivered",),
    ),
    (
        "jetstream_consumer_num_waiting",
        "Number of inflight fetch requests from a pull consumer",
        ("num_waiting",),
    ),
    ("jetstream_consumer_num_pending", "Number of pending messages from a consumer", ("num_pending",)),
    (
        "jetstream_consumer_ack_floor_stream_seq",
        "Number of ack floor stream seq from a consumer",
        ("ack_floor", "stream_seq"),
    ),
    (
        "jetstream_consumer_ack_floor_consumer_seq",
        "Number of ack floor consumer seq from a consumer",
        ("ack_floor", "consumer_seq"),
    ),
)
JSZ_ALL = {"accounts": "true", "streams": "true", "consumers": "true", "config": "true"}
JS_SERVER_LABELS = ["server_id", "server_name", "cluster", "domain", "meta_leader", "is_meta_leader"]
JS_STREAM_LABELS = [
    *JS_SERVER_LABELS,
    "account",
    "account_id",
    "stream_name",
    "stream_leader",
    "is_stream_leader",
]
JS_CONSUMER_LABELS = [
    *JS_STREAM_LABELS,
    *("consumer_name", "consumer_leader", "is_consumer_leader", "consumer_desc", "consumer_created"),
]


def _number(entry: dict[str, Any], path: tuple[str, ...]) -> float:
    value: Any = entry
    for key in path:
        value = value.get(key, 0) if isinstance(value, dict) else 0
    return float(value or 0)


def _leader_labels(entry: dict[str, Any], server_name: str) -> list[str]:
    """(leader, is_leader) as the exporter derives them: a standalone server leads everything."""
    cluster = entry.get("cluster") or entry.get("meta_cluster")
    if not cluster:
        return ["", "true"]
    leader = str(cluster.get("leader", ""))
    return [leader, "true" if leader == server_name else "false"]


def _rfc3339_local(stamp: str) -> str:
    """A /jsz time as the exporter labels it (Go's RFC3339, in local time, to the second)."""
    try:
        moment = datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", stamp).replace("Z", "+00:00"))
    except ValueError:
        return stamp
    text = moment.astimezone().isoformat(timespec="seconds")
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def jetstream_families(jsz: dict[str, Any], server_id: str, server_name: str) -> Iterator[Metric]:
    """/jsz (with accounts, streams, consumers and config) as the `jetstream_server_*`,
    `jetstream_stream_*` and `jetstream_consumer_*` gauges prometheus-nats-exporter makes of it, same
    names and labels, so the NATS JetStream dashboards work (for pynatsd's /metrics and, through
    pynatsd.monitor.exporter, for nats-server's)."""
    meta = jsz.get("meta_cluster") or {}
    server = [
        server_id,
        server_name,
        str(meta.get("name", "")),
        str((jsz.get("config") or {}).get("domain", "")),
    ]
    server += _leader_labels(jsz, server_name)
    families = {
        name: GaugeMetricFamily(name, doc, labels=labels)
        for series, labels in (
            (JS_SERVER_SERIES, JS_SERVER_LABELS),
            (JS_STREAM_SERIES, JS_STREAM_LABELS),
            (JS_CONSUMER_SERIES, JS_CONSUMER_LABELS),
        )
        for name, doc, _ in series
    }
    for name, _, path in JS_SERVER_SERIES:
        families[name].add_metric(server, _number(jsz, path))
    for account in jsz.get("account_details") or ():
        for stream in account.get("stream_detail") or ():
            labels = [*server, str(account.get("name", "")), str(account.get("id", "")), str(stream["name"])]
            labels += _leader_labels(stream, server_name)
            for name, _, path in JS_STREAM_SERIES:
                families[name].add_metric(labels, _number(stream, path))
            for consumer in stream.get("consumer_detail") or ():
                more = [str(consumer["name"]), *_leader_labels(consumer, server_name)]
                more += [str((consumer.get("config") or {}).get("description", ""))]
                more += [_rfc3339_local(str(consumer.get("created", "")))]
                for name, _, path in JS_CONSUMER_SERIES:
                    families[name].add_metric([*labels, *more], _number(consumer, path))
    yield from families.values()


def build_registry(server: Node, cpu: CpuSampler) -> CollectorRegistry:
    """A registry of its own per server (several servers may share a process in tests)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PynatsdCollector(server, cpu))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry
