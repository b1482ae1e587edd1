"""The `cluster {}` block and the cluster flags (`--cluster`, `--routes`, ...): `ClusterOptions`.

The parsed block lives in `opts.extra["cluster"]`; `cluster_options(opts)` returns it, or None when no
cluster listener is configured. Security fails closed: a key that decides who may connect or what peers
may do and that pynatsd does not implement (route permissions, TLS for routes, pinned accounts) stops
the server with a clear error; unknown keys are errors, as in nats-server.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pynatsd.broker.options import Options

_EXTRA_KEY = "cluster"
DEFAULT_POOL_SIZE = 3
DEFAULT_CONNECT_RETRIES = 0  # explicit routes retry forever; implicit ones (gossiped) give up
DEFAULT_AUTH_TIMEOUT = 2.0


@dataclass
class ClusterOptions:
    """Everything the `cluster {}` block and the cluster flags configure. Durations in seconds."""

    name: str = ""  # empty: dynamic (a random name, replaced by a configured peer's)
    host: str = "0.0.0.0"
    port: int = 0  # -1: a random port; after start, the bound one
    advertise: str = ""
    urls: list[str] = field(default_factory=list)  # the configured routes (nats-route://[user:pass@]h:p)
    pool_size: int = DEFAULT_POOL_SIZE  # accepted; pynatsd keeps one route per server (see pynatsd.routes)
    no_advertise: bool = False
    connect_retries: int = DEFAULT_CONNECT_RETRIES
    compression: str = "off"
    username: str = ""
    password: str = ""
    auth_timeout: float = 0.0  # 0: DEFAULT_AUTH_TIMEOUT
    dynamic_name: bool = False  # set at start when `name` was not configured

    @property
    def auth_required(self) -> bool:
        return bool(self.username)


def cluster_options(opts: Options) -> ClusterOptions | None:
    """The configured cluster, or None."""
    cluster = opts.extra.get(_EXTRA_KEY)
    return cluster if isinstance(cluster, ClusterOptions) and cluster.port != 0 else None
