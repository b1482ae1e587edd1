"""Clustering: pynatsd as a member of a NATS cluster, over nats-server 2.15's route protocol.

Layout: `config` (the `cluster {}` block and the cluster flags, as `ClusterOptions`), `route` (one route
connection: handshake, interest, routed messages, -V tracing), `manager` (the route listener, solicited
routes with retry, interest propagation, gossip, duplicate resolution, connect_urls, lame duck mode),
`tls` (mutual TLS between routes). Route ops are parsed and encoded, purely, by
`pynatsd.protocol.route`. Who receives a routed message is decided by the one delivery policy
(`pynatsd.broker.delivery`): a route is a `delivery.Client` whose subscriptions are the remote interest.

Interface for monitoring and tooling (stable; other branches build on it):

- `Server.cluster` -> `ClusterOptions | None` (None: no clustering). Fields: `name: str` (the effective
  cluster name, adopted from peers when it was not configured), `host: str`, `port: int` (the bound route
  port once started), `advertise: str`, `urls: list[str]` (the configured `routes`), `pool_size: int`,
  `no_advertise: bool`, `connect_retries: int`, `compression: str`, `username: str`, `auth_timeout: float`,
  `tls: dict | None` (cert_file, key_file, ca_file, timeout), `dynamic_name: bool`, `permissions: dict |
  None` (import as `publish`, export as `subscribe`, see `pynatsd.config.cluster.advertised_permissions`
  for nats-server's `import`/`export` view of them). A copy of what was
  configured (`Options.cluster`, which a reload compares).
- `Server.routes` -> iterable of `Route` (the registered routes, handshake done: the first one to each
  remote server, then the other connections of its route pool and its pinned accounts' routes).
- `Route` (`pynatsd.routes.route.Route`), per route: `rid: int`, `remote_id: str`, `remote_name: str`,
  `did_solicit: bool`, `is_configured: bool`, `host: str`, `port: int` (the peer's address),
  `start: datetime`, `last_activity: datetime`, `rtt: float | None` (seconds), `in_msgs`, `out_msgs`,
  `in_bytes`, `out_bytes: int`, `pending_bytes: int`, `pool_idx: int` (its place in the peer's route pool,
  see below), `account: bytes` (the account a pinned route is dedicated to, empty on any other),
  `compression: str` ("off"), `subjects() -> list[str]` (the remote
  interest, `subject` or `subject queue`), `remote_interest() -> list[tuple[bytes, list[Subscription]]]`
  (the remote interest as /routez?subs details it: per subject and queue group, its account and the
  one `delivery.Subscription` standing for it here, a queue group's with its `weight`; their `subject`,
  `queue`, `delivered` are read), `num_subs: int`, `url: str` (the route URL it was solicited
  with, or the peer's route address), `remote_cluster: str`, `connect_urls: list[str]` (the peer's
  client URLs), `remote_import`, `remote_export: dict[str, list[str]] | None` (the peer's advertised
  permissions, `{allow, deny}`), `closed: bool`, `close_reason: str`. Message counters count routed
  messages (RMSG/HMSG) only; the server's totals (`ServerStats.in_msgs` and the like, /varz `in_msgs`)
  include them, and its client counts (`in_client_msgs`, ...) do not.

Pooling: pynatsd advertises `route_pool_size` 1 and pins the system account, as nats-server does by
default; a nats-server peer's larger pool is accepted (and opened when pynatsd solicits), see
`pynatsd.routes.manager`. `pool_size: -1` turns both off (one route, accounts named in every op).
"""

from pynatsd.config.cluster import ClusterOptions, cluster_options

__all__ = ["ClusterOptions", "cluster_options"]
