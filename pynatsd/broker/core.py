"""The broker core every feature takes: the clients, each account's subject space, the flush scheduler, the
caches connections share, the INFO they are sent, and the named hooks through which the layers above
(account links, the system account's services) hear of clients and accounts. It imports nothing above
pynatsd.broker; the composition of listeners and features around it is pynatsd.node."""

from __future__ import annotations

import asyncio
import os
import ssl
from collections import deque
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from pynatsd import __version__
from pynatsd.auth.users import DEFAULT_ACCOUNT, Authenticator
from pynatsd.base.blocks import ClusterOptions
from pynatsd.base.histogram import HistogramCounts
from pynatsd.base.ids import new_server_id, new_server_key
from pynatsd.base.listener import peer_closed
from pynatsd.base.logging import get_logger
from pynatsd.base.options import Options
from pynatsd.broker.connection import (
    AUTHENTICATION_VIOLATION,
    CLIENT_CLOSED,
    SLOW_CONSUMER_DEADLINE,
    SLOW_CONSUMER_PENDING,
    Connection,
)
from pynatsd.broker.delivery import Subscription
from pynatsd.broker.outbound import FlushScheduler, StallGate
from pynatsd.matcher import Sublist, SublistStats, combine_stats
from pynatsd.protocol import encoder

if TYPE_CHECKING:
    from pynatsd.protocol.connect import ConnectOptions
    from pynatsd.protocol.parser import ParsedLine

log = get_logger()


class Counted(Protocol):
    """A connection's message counters (a route's, for the totals)."""

    in_msgs: int
    out_msgs: int
    in_bytes: int
    out_bytes: int


class SystemHooks(Protocol):
    """What the core tells the system account's services (pynatsd.monitor.system), when they run."""

    def client_connected(self, conn: Connection) -> None: ...
    def client_closed(self, conn: Connection, auth_failed: bool) -> None: ...
    def leaf_changed(self, leaf: Any, connected: bool) -> None: ...  # a pynatsd.leafnodes LeafConnection
    def account_created(self, account: str) -> None: ...
    def announce(self, event: str) -> None: ...
    def server_info(self) -> dict[str, Any]: ...
    def stop(self) -> None: ...


class CalloutHooks(Protocol):
    """The auth callout (pynatsd.broker.callout): it decides about the clients it is asked to, replying
    through `done` with the identity (user, account) or None (refused)."""

    def authorize(
        self,
        conn: Connection,
        opts: ConnectOptions,
        identity: tuple[str, str] | None,
        done: Callable[[tuple[str, str] | None], None],
    ) -> None: ...
    def admitted(self, conn: Connection, callout_account: str) -> None: ...
    def forget(self, conn: Connection) -> None: ...
    def stop(self) -> None: ...


class LinkHooks(Protocol):
    """The imports between accounts (pynatsd.accounts.links), as connections and internal clients use
    them: an account's imports made on its first user, and subscriptions shadowed in exporting accounts."""

    def ensure(self, name: str) -> None: ...
    def subscribed(self, account: str, sub: Subscription) -> None: ...
    def unsubscribed(self, sub: Subscription) -> None: ...
    def refresh(self, account: str) -> None: ...
    def describe(self, account: str) -> dict[str, Any]: ...


@dataclass
class ClosedTotals:
    """Message counters of connections that have closed (so totals survive their connections)."""

    in_msgs: int = 0
    out_msgs: int = 0
    in_bytes: int = 0
    out_bytes: int = 0
    slow_consumers: int = 0


class ServerStats:
    """Server-wide counters read by monitoring.

    Message and byte totals are not bumped on the hot path: each connection (client or route) counts
    its own, and the totals are the open connections' counts plus those of closed ones. `in_msgs` and
    the like include routed messages, as nats-server's do; `in_client_msgs` and the like count clients'
    only. Slow consumers and stale connections are counted in all, and routes' apart (`route_*`).
    """

    def __init__(self, clients: dict[int, Connection], stall: StallGate) -> None:
        self._clients = clients
        self._stall = stall
        self.closed = ClosedTotals()
        self.closed_by_account: dict[str, ClosedTotals] = {}  # per account (accstatz, /metrics)
        self.routes: Collection[Counted] = ()  # the open route connections (the route manager's)
        self.leafs: Collection[Counted] = ()  # the open leaf node connections (pynatsd.leafnodes), as routes
        self.gateways: Collection[Counted] = ()  # the open gateway connections (pynatsd.gateways), as routes
        self.mqtt: Collection[Counted] = ()  # the open MQTT clients (pynatsd.mqtt): clients, as nats-server's
        self.closed_routes = ClosedTotals()
        self.slow_consumers = 0
        self.stale_connections = 0
        self.route_slow_consumers = 0
        self.route_stale_connections = 0
        self.total_connections = 0
        self.auth_failures = 0

    @property
    def stalled_clients(self) -> int:
        """Producers stalled at a consumer's gate so far (nats-server's count)."""
        return self._stall.stalled_total

    def _total(self, field: str) -> int:
        mqtt = sum(int(getattr(c, field)) for c in self.mqtt)
        clients = sum(int(getattr(c, field)) for c in self._clients.values())
        return int(getattr(self.closed, field)) + clients + mqtt

    def _routed(self, field: str) -> int:
        links = sum(int(getattr(r, field)) for r in self.routes)
        links += sum(int(getattr(leaf, field)) for leaf in self.leafs)
        links += sum(int(getattr(gateway, field)) for gateway in self.gateways)
        return int(getattr(self.closed_routes, field)) + links

    def slow_consumer_stats(self) -> dict[str, int]:
        """nats-server's `slow_consumer_stats`: slow consumers by connection kind."""
        routes = self.route_slow_consumers
        return {"clients": self.slow_consumers - routes, "routes": routes, "gateways": 0, "leafs": 0}

    def stale_connection_stats(self) -> dict[str, int]:
        """nats-server's `stale_connection_stats`: stale connections by connection kind."""
        routes = self.route_stale_connections
        return {"clients": self.stale_connections - routes, "routes": routes, "gateways": 0, "leafs": 0}

    @property
    def in_client_msgs(self) -> int:
        return self._total("in_msgs")

    @property
    def out_client_msgs(self) -> int:
        return self._total("out_msgs")

    @property
    def in_client_bytes(self) -> int:
        return self._total("in_bytes")

    @property
    def out_client_bytes(self) -> int:
        return self._total("out_bytes")

    @property
    def in_msgs(self) -> int:
        return self._total("in_msgs") + self._routed("in_msgs")

    @property
    def out_msgs(self) -> int:
        return self._total("out_msgs") + self._routed("out_msgs")

    @property
    def in_bytes(self) -> int:
        return self._total("in_bytes") + self._routed("in_bytes")

    @property
    def out_bytes(self) -> int:
        return self._total("out_bytes") + self._routed("out_bytes")

    def add_closed_route(self, route: Counted) -> None:
        """Keep a closing route's (or leaf connection's) counters in the totals (called once, as it
        leaves `routes` or `leafs`)."""
        closed = self.closed_routes
        closed.in_msgs += route.in_msgs
        closed.out_msgs += route.out_msgs
        closed.in_bytes += route.in_bytes
        closed.out_bytes += route.out_bytes

    def add_closed(self, conn: Connection) -> None:
        account = self.closed_by_account.get(conn.account)
        if account is None:
            account = self.closed_by_account[conn.account] = ClosedTotals()
        for closed in (self.closed, account):
            closed.in_msgs += conn.in_msgs
            closed.out_msgs += conn.out_msgs
            closed.in_bytes += conn.in_bytes
            closed.out_bytes += conn.out_bytes
        if conn.close_reason in (SLOW_CONSUMER_PENDING, SLOW_CONSUMER_DEADLINE):
            account.slow_consumers += 1

    def __repr__(self) -> str:
        return (
            f"ServerStats(in_msgs={self.in_msgs}, out_msgs={self.out_msgs}, in_bytes={self.in_bytes}, "
            f"out_bytes={self.out_bytes}, slow_consumers={self.slow_consumers}, "
            f"stale_connections={self.stale_connections}, total_connections={self.total_connections}, "
            f"auth_failures={self.auth_failures})"
        )


class Broker:
    """The core: clients, account sublists, the scheduler and the shared caches (see the module docstring)."""

    def __init__(self, options: Options | None = None) -> None:
        self.options = options or Options()
        # The server's nkey identity: a key pair where the server signs what it issues (the auth callout's
        # requests: config mode, or operator mode's accounts), else a public key only.
        if self.options.auth_callout is not None or self.options.trusted is not None:
            self.server_id, self.server_seed = new_server_key()
        else:
            self.server_id, self.server_seed = new_server_id(), b""
        self.start_time = datetime.now(UTC)
        self.clients: dict[int, Connection] = {}
        self.scheduler = FlushScheduler()
        self.stats = ServerStats(self.clients, self.scheduler.stall)
        self.sublist: Sublist[Subscription] = Sublist(cache=not self.options.disable_sublist_cache)
        self.auth = Authenticator(self.options)
        # bcrypt checks of CONNECTs run here, off the event loop (bcrypt releases the GIL).
        self.auth_workers = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="auth")
        # Each account is an isolated subject space; $G is the default one (`self.sublist`).
        self.account_sublists: dict[str, Sublist[Subscription]] = {DEFAULT_ACCOUNT: self.sublist}
        # Caches every connection shares, since what they hold depends on nothing but their keys: parsed
        # PUB control lines, and `MSG subject ` per published subject (only subjects that may be
        # published to: not reserved). Bounded; each starts over when full.
        self.pub_lines: dict[bytes, ParsedLine] = {}
        self.msg_heads: dict[bytes, bytes] = {}
        self.fanout = HistogramCounts(1024)  # subscriptions matched per publish (monitoring)
        self.system: SystemHooks | None = None  # the system account's services, once started
        self.links: LinkHooks | None = None  # imports between accounts, when any
        self.callout: CalloutHooks | None = None  # the auth callout, when configured
        self.tls_context: ssl.SSLContext | None = None  # set at start when TLS is configured
        self.closed_clients: deque[Connection] = deque(maxlen=self.options.max_closed_clients)
        self.port = self.options.port
        self.loop: asyncio.AbstractEventLoop  # set at start
        self._cid = 0
        self._info_base: dict[str, Any] = {}
        self.ldm = False  # lame duck mode: no new clients, the connected ones closed gradually
        # The `cluster {}` settings, None without one. A copy: the running cluster's name and port change
        # (dynamic name, random port); the options keep what was configured, which a reload compares.
        self.cluster: ClusterOptions | None = None

    @property
    def server_name(self) -> str:
        return self.options.server_name or self.server_id

    # -- hooks the node fills in ------------------------------------------------------------------------
    def account_created(self, account: str, sublist: Sublist[Subscription]) -> None:
        """An account's subject space was just made: the features that serve every account join it."""
        if self.system is not None:  # the system services every account answers in itself
            self.system.account_created(account)

    def client_connected(self, conn: Connection) -> None:
        """Called once when a client is authenticated (its CONNECT advisory)."""
        if self.system is not None:
            self.system.client_connected(conn)

    # -- accounts -------------------------------------------------------------------------------------
    def sublist_for(self, account: str) -> Sublist[Subscription]:
        """The subject space of `account`, created on its first user's connect."""
        sublist = self.account_sublists.get(account)
        if sublist is None:
            sublist = Sublist(cache=not self.options.disable_sublist_cache)
            self.account_sublists[account] = sublist
            self.account_created(account, sublist)
        return sublist

    def sublist_stats(self) -> SublistStats:
        """Index counters summed over every account's subject space."""
        return combine_stats([sl.stats() for sl in self.account_sublists.values()])

    def subscriptions(self) -> Iterator[Subscription]:
        """Every subscription, in every account."""
        for sublist in self.account_sublists.values():
            yield from sublist.subscriptions()

    # -- connections ----------------------------------------------------------------------------------
    def next_cid(self) -> int:
        self._cid += 1
        return self._cid

    def accept(self, conn: Connection) -> bool:
        """Register a new connection; False when max_connections is reached."""
        limit = self.options.max_connections
        # nats-server's meaning: negative (`max_connections: 0` in a file) refuses everyone; 0 = no limit.
        # MQTT clients count too (nats-server's clients map holds them).
        full = limit > 0 and len(self.clients) + len(self.stats.mqtt) >= limit
        if limit < 0 or (full and not self._reap_closed_peers(limit)):
            log.error("%r - maximum connections exceeded", conn)
            return False
        self.clients[conn.cid] = conn
        self.stats.total_connections += 1
        return True

    def _reap_closed_peers(self, limit: int) -> bool:
        """At the limit: close the connections whose peer has already hung up but whose end of file is not
        read yet (a TCP probe closed just before the next client connected: nats-server does not count it
        either); True when that made room. Only connections that never sent CONNECT are looked at."""
        for other in [c for c in self.clients.values() if not c.connected]:
            if other.transport is not None and peer_closed(other.transport):
                other.close(CLIENT_CLOSED)
        return len(self.clients) + len(self.stats.mqtt) < limit

    def forget(self, conn: Connection) -> None:
        """Called once when a connection closes."""
        if self.clients.pop(conn.cid, None) is not None:
            if self.callout is not None:
                self.callout.forget(conn)
            self.stats.add_closed(conn)
            self.closed_clients.append(conn)
            if self.system is not None:
                self.system.client_closed(conn, auth_failed=conn.close_reason == AUTHENTICATION_VIOLATION)
        conn.transport = None

    # -- INFO -----------------------------------------------------------------------------------------
    def info_base(self) -> dict[str, Any]:
        """The server's INFO fields common to every connection."""
        return dict(self._info_base)

    def limits_changed(self) -> None:
        """After a reload: the INFO and every client's parser take the new max_payload and
        max_control_line (a JWT user's own smaller payload limit stays), as nats-server applies them."""
        opts = self.options
        self._info_base["max_payload"] = opts.max_payload
        for conn in list(self.clients.values()):
            conn.parser.max_control_line = opts.max_control_line
            conn.parser.max_payload = opts.max_payload  # revalidate applies a JWT user's own limit

    def advertise_cluster(self, name: str, connect_urls: list[str] | None, notify: bool = True) -> None:
        """The cluster's name or its servers' client URLs changed (`connect_urls` None: not advertised):
        the client INFO says so, and clients that take async INFOs are told (nats-server's
        sendAsyncInfoToClients)."""
        self._info_base["cluster"] = name
        if connect_urls is None:
            return
        self._info_base["connect_urls"] = connect_urls
        if notify and not self.ldm:
            for conn in list(self.clients.values()):
                if conn.wants_async_info and not conn.closed:
                    conn.send_raw(self.info_for(conn, update=True))

    def info_for(
        self, conn: Connection, connect_info: bool = False, ldm: bool = False, update: bool = False
    ) -> bytes:
        """The INFO a connection gets on accept (or, with connect_info, after its first PONG; with ldm,
        the async one announcing lame duck mode; with update, the async one about the cluster)."""
        info = dict(self._info_base)
        info["client_id"] = conn.cid
        if conn.ip:
            info["client_ip"] = conn.ip
        if self.auth.wants_nonce and not connect_info and not ldm and not update:
            info["nonce"] = conn.nonce = self.auth.new_nonce()
        if connect_info:
            info["connect_info"] = True
            info["remote_account"] = conn.account
        if ldm:
            info["ldm"] = True
        info["pynatsd_version"] = __version__
        conn.adjust_info(info)
        return encoder.encode_info(info)
