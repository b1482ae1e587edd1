"""One route connection to another server of the cluster (see pynatsd.routes for the interface).

The handshake, as nats-server 2.15 does it: the accepting side sends its route INFO at once and expects
CONNECT first; the soliciting side sends CONNECT and its INFO at once. Each side, on the peer's first
INFO, registers the route with the manager (which resolves duplicates, gossips the new server to the
others and sends our interest), then both exchange RS+/RS- and routed messages. PINGs measure the RTT
and detect a stale peer.

A route is the peer's first (pool index 0, `account` empty), another connection of the peer's route pool
(`pool_idx` > 0, the soliciting side's INFO names it in `route_pool_idx`), or pinned to one account
(`account`, the soliciting side's INFO names it in `route_account`; its ops name no account).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, cast

from mypy_extensions import mypyc_attr

from pynatsd.auth.certs import admits_route, peer_certificate
from pynatsd.auth.users import password_ok
from pynatsd.base.logging import TRACE, get_logger
from pynatsd.broker.connection import SLOW_CONSUMER_PENDING, SlicedReader
from pynatsd.broker.delivery import (
    HEADS_CACHED,
    Client,
    Message,
    Subscription,
    enqueue,
    new_head,
    publish,
    size_fields,
)
from pynatsd.broker.outbound import Outbound
from pynatsd.broker.trace import TracedTransport, payload_line, redact
from pynatsd.protocol import encoder, errors
from pynatsd.protocol.route import (
    RouteOpHandler,
    RouteParser,
    encode_connect,
    encode_rsub,
    encode_runsub,
    rmsg_head,
)

if TYPE_CHECKING:
    from pynatsd.base.blocks import ClusterOptions
    from pynatsd.matcher import Sublist
    from pynatsd.routes.manager import RouteManager

log = get_logger()

# Close reasons, as nats-server names them (/routez, logs).
DUPLICATE_ROUTE = "Duplicate Route"
CLUSTER_NAME_CONFLICT = "Cluster Name Conflict"
DUPLICATE_SERVER_NAME = "Duplicate Server Name"
WRONG_PORT = "Incorrect Port"
FIRST_PING = 1.0  # seconds to the first PING: an RTT soon after the handshake
ROUTE_MAX_PING_INTERVAL = 60.0  # nats-server caps the route ping interval at a minute


class RemoteQueueSubscription(Subscription):
    """A queue group's interest on the other server: one subscription standing for `weight` members
    there (pynatsd.matcher shadows it `weight` times in match results)."""

    __slots__ = ("weight",)

    def __init__(self, route: Client, subject: bytes, queue: bytes, account: bytes, weight: int) -> None:
        super().__init__(route, subject, queue, account)
        self.weight = weight


@mypyc_attr(allow_interpreted_subclasses=True)  # pynatsd.leafnodes' connection is one
class LinkReader(SlicedReader):
    """What a route and a leaf node connection read alike (nats-server's ROUTER and LEAF clients): the
    route grammar under the per-turn budget, a parser error closing with nats-server's words, the
    transport's callbacks, frames sent. Gateways are routes."""

    parser: RouteParser
    cid: int  # the stall gate's producer id

    def _link_names(self) -> tuple[str, str]:
        """How its log lines name it: nats-server's parser-error word, and the data's."""
        return "Router", "route"

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self._input:  # earlier input still waits for its turn: this comes after it
            self._input.append(data)
            return
        self.last_activity = datetime.now(UTC)
        self._take_slice(data)

    def _parse_slice(self, data: bytes, start: int, budget: int) -> int:
        scheduler = self.server.scheduler
        scheduler.reading = True
        stop = len(data)
        try:
            stop = self.parser.take(data, start, budget)
        except errors.ProtocolError as err:
            if not self.closed:
                log.error("%r - %s parser ERROR: %s", self, self._link_names()[0], err)
                text = errors.UNKNOWN_OPERATION if isinstance(err, errors.UnknownOperation) else None
                self.close("Protocol Violation", text)
        except Exception:
            log.exception("%r - unexpected error while processing %s data", self, self._link_names()[1])
            self.close("Protocol Violation")
        finally:
            scheduler.reading = False
            scheduler.flush_touched()
            scheduler.stall.after_read(self)
        return stop

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.close("Read Error" if exc is not None else "Client Closed")

    def pause_writing(self) -> None:
        if self.out is not None:
            self.out.pause()

    def resume_writing(self) -> None:
        if self.out is not None:
            self.out.resume()

    def send(self, data: bytes) -> None:
        """Queue a frame (INFO, interest, PING, ...) and flush it."""
        if self.out is not None and not self.closed:
            self.out.push(data)
            self.out.flush()

    def _write_failed(self, exc: BaseException) -> None:
        log.debug("%r - write error: %s", self, exc)
        self.close("Write Error")

    def close(self, reason: str, err_text: str | None = None) -> None:
        raise NotImplementedError


class Route(LinkReader):
    """A route: a `delivery.Client` whose subscriptions are the remote server's interest, and the
    asyncio protocol of its socket (duck-typed, as broker.connection.Connection), reading under the
    same per-turn budget as a client connection (connection.SlicedReader)."""

    def __init__(
        self,
        manager: RouteManager,
        did_solicit: bool,
        url: str = "",
        is_configured: bool = False,
        account: bytes = b"",
        pool_idx: int = 0,
    ) -> None:
        server = manager.server
        super().__init__(server)
        self.is_route = True
        self.manager = manager
        self.rid = server.next_cid()  # nats-server numbers routes and clients from one counter
        self.cid = self.rid  # the stall gate's producer id
        self.did_solicit = did_solicit
        self.is_configured = is_configured  # solicited because it is in `routes` (explicit)
        self.url = url
        self.remote_id = ""
        self.remote_name = ""
        self.remote_cluster = ""
        self.host = ""
        self.port = 0
        self.start = datetime.now(UTC)
        self.last_activity = self.start
        self.rtt: float | None = None
        self.in_msgs = 0
        self.in_bytes = 0
        self.pool_idx = pool_idx  # its place in the peer's route pool (0: the first route, or pinned)
        self.account = account  # the account a pinned route is dedicated to; empty on any other route
        self.remote_pool_size = 0  # the peer's `route_pool_size` (0: it neither pools nor pins)
        self.compression = "off"
        self.close_reason = ""
        self.connect_urls: list[str] = []  # the peer's client URLs (its INFO's connect_urls)
        self.info: dict[str, object] = {}  # the peer's first INFO (gossiped to the other routes)
        self.registered = False  # accepted by the manager (handshake done, not a duplicate)
        self.retry = False  # reconnect if closed, though not solicited (a duplicate was dropped for it)
        self.no_reconnect = False
        self.gossip_mode = 0  # the gossip mode of the INFO that made us solicit this route
        # this server has a gateway (pynatsd.gateways, set before any route): a routed `_GR_.` subject
        # is one of its mapped replies (a native bool: nothing more per routed message without one)
        self._gateway_replies = manager.gateway is not None
        # (account, subject, queue) -> the remote interest's subscription in that account's sublist (a
        # queue group's: one RemoteQueueSubscription with its weight)
        self.remote_subs: dict[tuple[bytes, bytes, bytes | None], Subscription] = {}
        # The export permission (nats-server's route perms: export as subscribe): the peer's RS+ outside it
        # are ignored, and delivery.deliver drops the messages its deny matches (a wildcard interest may
        # overlap it). Its own copy: the result caches are per connection.
        perms = manager.permissions
        self.perms = perms.copy() if perms is not None else None
        self.remote_import: dict[str, list[str]] | None = None  # the peer's permissions (its INFO's)
        self.remote_export: dict[str, list[str]] | None = None
        self._trace = log.isEnabledFor(TRACE)
        handler: RouteOpHandler = RouteTracer(self) if self._trace else self
        self.parser = RouteParser(handler, max_control_line=server.options.max_control_line)
        self.parser.account = account
        self._connect_received = did_solicit  # only the accepting side waits for CONNECT
        self._info_received = False
        self._msg = Message(self)
        self._fanout = server.fanout.counts
        self._sublists: dict[bytes, Sublist[Subscription]] = {}  # account -> its subject space here
        self._heads: dict[bytes, bytes] = {}  # subject -> `MSG subject ` (bounded: see delivery.new_head)
        self._rheads: dict[bytes, dict[bytes, bytes]] = {}  # account -> subject -> `RMSG account subject `
        self._pings_out = 0
        self._ping_sent = 0.0
        self._ping_timer: asyncio.TimerHandle | None = None
        self._auth_timer: asyncio.TimerHandle | None = None

    # -- what monitoring reads ------------------------------------------------------------------------

    @property
    def pending_bytes(self) -> int:
        return self.out.pending_bytes if self.out is not None else 0

    @property
    def num_subs(self) -> int:
        return len(self.remote_subs)

    def subjects(self) -> list[str]:
        """The remote interest: `subject`, or `subject queue` for a queue group's."""
        return sorted((s + b" " + q if q else s).decode("utf-8", "replace") for _, s, q in self.remote_subs)

    def remote_interest(self) -> list[tuple[bytes, list[Subscription]]]:
        """The remote interest, one entry per subject (and queue group): its account and the
        subscription that stands for it in the account's sublist (a queue group's carries its `weight`)."""
        return [(account, [sub]) for (account, _, _), sub in self.remote_subs.items()]

    def idle_for(self) -> timedelta:
        return datetime.now(UTC) - self.last_activity

    def __repr__(self) -> str:
        return f"{self.host}:{self.port} - rid:{self.rid}"

    # -- asyncio protocol -----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        peer: object = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.host, self.port = str(peer[0]), int(peer[1])
        server = self.server
        traced = cast(asyncio.Transport, TracedTransport(transport, self)) if self._trace else transport
        self.out = Outbound(traced, server.scheduler, server.options.max_pending)
        self.out.start(self._write_failed)
        manager = self.manager
        manager.connecting(self)  # (for a solicited route: its connect attempt is over)
        if self.did_solicit:
            self.out.push(encode_connect(manager.connect_options(self.url)))
            self.out.push(manager.route_info(self.link_fields()))
        else:
            self.out.push(manager.route_info())
        self.out.flush()
        log.info("%r - Route connection created", self)
        loop = server.loop
        self._ping_timer = loop.call_later(FIRST_PING, self._ping_tick)
        if not self.did_solicit and manager.cluster.auth_required:
            timeout = manager.cluster.auth_timeout or server.options.effective_auth_timeout
            self._auth_timer = loop.call_later(timeout, self._auth_timeout)

    def link_fields(self) -> dict[str, object]:
        """What a soliciting side's INFO says about the connection: the account it is pinned to, or its
        place in the pool (nats-server's `route_account`, `route_pool_idx`)."""
        if self.account:
            return {"route_account": self.account.decode()}
        return {"route_pool_idx": self.pool_idx} if self.pool_idx else {}

    # -- route ops (protocol.route.RouteOpHandler) ----------------------------------------------------
    def _admitted(self) -> bool:
        """The accepting side takes nothing before CONNECT (nats-server: an authorization violation)."""
        if self._connect_received:
            return True
        self.close("Authentication Failure", errors.AUTHORIZATION_VIOLATION)
        return False

    def on_connect(self, options: dict[str, object]) -> None:
        if options.get("lang"):  # a client library's CONNECT, whenever it comes
            log.error("%r - a client connected to the route port", self)
            self.close(WRONG_PORT, "attempted to connect to route port")
            return
        if options.get("gateway"):
            text = f"Rejecting connection from gateway {options['gateway']!r} on the Route port"
            self.close("Wrong Gateway", text)
            return
        if self.did_solicit or self._connect_received:
            return  # the handshake is done; nothing more to learn from it
        cluster = self.manager.cluster
        if not self._authorized(cluster, options):
            self.server.stats.auth_failures += 1
            log.error("%r - authentication error", self)
            self.close("Authentication Failure", errors.AUTHORIZATION_VIOLATION)
            return
        remote_cluster = str(options.get("cluster", ""))
        if not self.manager.agree_cluster_name(remote_cluster, bool(options.get("cluster_dynamic"))):
            text = f'Rejecting connection, cluster name "{remote_cluster}" does not match "{cluster.name}"'
            log.error("%r - %s", self, text)
            self.close(CLUSTER_NAME_CONFLICT, text)
            return
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        self._connect_received = True
        self.remote_id = str(options.get("name", ""))
        self.headers = self.server.options.headers and bool(options.get("headers"))

    def _authorized(self, cluster: ClusterOptions, options: dict[str, object]) -> bool:
        """nats-server's isRouterAuthorized: with verify_and_map or verify_cert_and_check_known_urls the
        peer's certificate decides; otherwise the cluster user and password, when there is one."""
        check = cluster.certificate_check()
        if check is not None:
            return admits_route(peer_certificate(self.transport), *check)
        if not cluster.auth_required:
            return True
        return options.get("user") == cluster.username and password_ok(
            str(options.get("pass", "")), cluster.password
        )

    def on_info(self, info: dict[str, object]) -> None:
        if not self._admitted():
            return
        if self._info_received:
            self._async_info(info)
            return
        manager = self.manager
        server_id = str(info.get("server_id", ""))
        if server_id == self.server.server_id:
            manager.route_to_self(self)
            self.no_reconnect = True
            self.close(DUPLICATE_ROUTE)
            return
        remote_cluster = str(info.get("cluster", ""))
        if remote_cluster and not manager.agree_cluster_name(
            remote_cluster, bool(info.get("cluster_dynamic"))
        ):
            log.error("%r - cluster name %r does not match %r", self, remote_cluster, manager.cluster.name)
            self.close(CLUSTER_NAME_CONFLICT)
            return
        name = str(info.get("server_name", ""))
        if not self.did_solicit and name == self.server.server_name:
            log.error("%r - Remote server has a duplicate name: %r", self, name)
            self.close(DUPLICATE_SERVER_NAME)
            return
        self._info_received = True
        self.remote_id = server_id
        self.remote_name = name
        self.remote_cluster = remote_cluster
        self.headers = self.server.options.headers and bool(info.get("headers"))
        self.remote_import = _shown_permission(info.get("import"))
        self.remote_export = _shown_permission(info.get("export"))
        urls = info.get("connect_urls")
        self.connect_urls = [str(u) for u in urls] if isinstance(urls, list) else []
        port = info.get("port")
        if not info.get("ip") and isinstance(port, int):
            # nats-server's: where the peer's route port is, as seen from here (what gossip hands on).
            info["ip"] = f"nats-route://{_join(self.host, port)}/"
        if not self.url and info.get("ip"):
            self.url = str(info["ip"])  # an accepted route's way back (its INFO's host may be 0.0.0.0)
        pool_size = info.get("route_pool_size")
        self.remote_pool_size = pool_size if isinstance(pool_size, int) and pool_size > 0 else 0
        if not self.did_solicit:  # the soliciting side says what this connection is
            account, idx = info.get("route_account"), info.get("route_pool_idx")
            if isinstance(account, str) and account:
                self.account = self.parser.account = account.encode()
            elif isinstance(idx, int):
                self.pool_idx = idx
        for key in ("nonce", "route_account", "route_pool_idx"):
            info.pop(key, None)
        self.info = info
        problem, reason = manager.link_problem(self)
        if problem:
            # nats-server's answer to a pinned route or pool index it cannot take: logged, told, closed
            log.error("%r - %s", self, problem)
            self.no_reconnect = True
            self.close(reason, problem)
            return
        if not manager.add_route(self):
            log.debug("%r - Detected duplicate remote route %r", self, server_id)
            self.close(DUPLICATE_ROUTE)

    def _async_info(self, info: dict[str, object]) -> None:
        """An INFO after the first: about another server (gossip), or the peer entering lame duck mode."""
        server_id = str(info.get("server_id", ""))
        if info.get("gateway"):  # about a gateway (pynatsd.gateways), not a server of this cluster
            if self.manager.gateway is not None:
                self.manager.gateway.route_gateway_info(info)
        elif server_id and server_id != self.remote_id:
            self.manager.implicit_route(info)
        elif info.get("ldm"):
            self.manager.peer_lame_duck(self)
        else:
            before = self.remote_export
            self.remote_import = _shown_permission(info.get("import"))
            self.remote_export = _shown_permission(info.get("export"))
            if self.remote_export != before:
                self.manager.peer_exports_changed(self, before)

    def on_ping(self) -> None:
        if not self._admitted():
            return
        self._send(encoder.PONG)

    def on_pong(self) -> None:
        self._pings_out = 0
        if self._ping_sent:
            self.rtt = time.monotonic() - self._ping_sent
            self._ping_sent = 0.0

    def on_ok(self) -> None:
        pass

    def on_err(self, text: str) -> None:
        log.error("%r - Router Error %s", self, text)
        if self.account or self.pool_idx:
            self.no_reconnect = True  # a pool or pinned connection the peer refuses is not retried
        self.close("Parse Error")

    def on_rsub(self, account: bytes, subject: bytes, queue: bytes | None, weight: int) -> None:
        if not self._admitted():
            return
        perms = self.perms
        if perms is not None and not perms.can_subscribe(subject, None):
            log.debug('%r - Can not export "%s", ignoring remote subscription request', self, _text(subject))
            return
        key = (account, subject, queue)
        known = self.remote_subs.get(key)
        if known is not None:
            if isinstance(known, RemoteQueueSubscription) and known.weight != weight:
                # a new weight for the group: re-indexed, the matcher's results then shadow the new one
                sublist = self.account_space(account)
                if sublist is not None:
                    sublist.remove(known)
                    known.weight = weight
                    sublist.insert(known)
            return  # else a repeat
        sublist = self.account_space(account)
        if sublist is None:
            # nats-server (static accounts): logged, ignored, the route stays; no account is made for it
            log.error(
                '%r - Unknown account "%s" for remote subject "%s"', self, _text(account), _text(subject)
            )
            return
        # sid: the account as RMSG names it (none on a pinned route). A queue group is one subscription
        # whatever its weight (its members there): the matcher shadows it that many times, as
        # nats-server's sublist does, so a member is picked fairly across the cluster; the route gets one
        # routed message.
        named = b"" if self.account else account
        if queue is None:
            sub = Subscription(self, subject, None, named)
        else:
            sub = RemoteQueueSubscription(self, subject, queue, named, weight)
        try:
            sublist.insert(sub)
        except ValueError:
            log.error("%r - Could not insert subscription: %r", self, subject)
            self._send(encoder.encode_err("Invalid Subscription"))
            return
        self.remote_subs[key] = sub

    def on_runsub(self, account: bytes, subject: bytes, queue: bytes | None) -> None:
        if not self._admitted():
            return
        sub = self.remote_subs.pop((account, subject, queue), None)
        if sub is not None:
            sublist = self.server.account_sublists.get(account.decode("utf-8", "replace"))
            if sublist is not None:
                sublist.remove(sub)

    def account_space(self, account: bytes) -> Sublist[Subscription] | None:
        """The subject space of `account` for the peer's interest, None for an account unknown here: as
        nats-server's route, interest never creates an account, only names the ones configured (or in
        use, or that the account resolver has)."""
        name = account.decode("utf-8", "replace")
        server = self.server
        sublist = server.account_sublists.get(name)
        if sublist is not None:
            return sublist
        auth = server.auth
        if name in auth.accounts:
            return server.sublist_for(name)
        jwt = auth.jwt
        if jwt is not None and (jwt.store is not None or jwt.account(name) is not None):
            # nats-server: a directory resolver's route registers the account (to be fetched when used);
            # the memory resolver's knows its preloaded ones only
            return server.sublist_for(name)
        return None

    def on_rmsg(
        self,
        account: bytes,
        subject: bytes,
        reply: bytes | None,
        queues: list[bytes] | None,
        headers: bytes | None,
        payload: bytes,
    ) -> None:
        if not self._admitted():
            return
        size = len(payload) if headers is None else len(headers) + len(payload)
        self.in_msgs += 1
        self.in_bytes += size
        if self._gateway_replies and subject.startswith(b"_GR_."):
            # a reply to a request this server sent over a gateway, forwarded by the cluster's server
            # that received it (pynatsd.gateways): delivered here with its own subject
            gateway = self.manager.gateway
            subject = gateway.routed_reply(subject) if gateway is not None else b""
            if not subject:
                return
        sublist = self._sublists.get(account)
        if sublist is None:
            sublist = self.server.account_sublists.get(account.decode("utf-8", "replace"))
            if sublist is None:
                return  # nobody here has ever used that account
            self._sublists[account] = sublist
        head = self._heads.get(subject)
        if head is None:
            head = new_head(self._heads, subject)
        if reply is not None and reply.startswith(b"$JS.ACK."):
            head, reply = shown_delivery(head, reply)
        msg = self._msg
        msg.set(subject, reply, size_fields(headers, payload), headers, payload, head)
        msg.queues = queues
        publish(sublist, msg, self._fanout)

    # -- sending --------------------------------------------------------------------------------------
    def send_routed(self, sub: Subscription, msg: Message) -> bool:
        """One RMSG (HMSG with headers, when the peer takes them) for `msg` in `sub`'s account, naming
        the queue groups in `msg.queues`; called by delivery.deliver only. Queued and counted as the
        policy queues a client's (delivery.enqueue), from the message's shared frame parts."""
        out = self.out
        if out is None or self.closed:
            return False
        with_headers = msg.headers is not None and self.headers
        queues = msg.queues
        account = sub.sid  # a route's subscription: the account RMSG names as its sid (none if pinned)
        assert isinstance(account, bytes)
        cached: bytes | None = None
        reply = routed_reply(msg)
        if queues or reply is not msg.reply:
            head = rmsg_head(account, msg.subject, reply, queues, with_headers)
            if with_headers:
                tail = b"%d %d\r\n%s%s\r\n" % (len(msg.headers or b""), msg.size, msg.headers, msg.payload)
            else:
                tail = b"%d\r\n%s\r\n" % (msg.nbytes, msg.payload)
        else:
            # `RMSG account subject` (the shared tail brings the space), cached per account and subject
            # (bounded)
            heads = self._rheads.get(account)
            if heads is None:
                heads = self._rheads[account] = {}
            cached = heads.get(msg.subject) if not with_headers else None
            if cached is None:
                named = account + b" " + msg.subject if account else msg.subject
                head = (b"HMSG " if with_headers else b"RMSG ") + named
                if not with_headers:
                    if len(heads) >= HEADS_CACHED:
                        heads.clear()
                    heads[msg.subject] = head
            else:
                head = cached
            if not msg.framed:
                msg.frame()
            tail = msg.htail if with_headers else msg.tail
        return enqueue(self, out, head, b"", tail, msg.size if with_headers else msg.nbytes)

    def slow_consumer(self, reason: str = SLOW_CONSUMER_PENDING) -> None:
        """Past max_pending (connection.SlicedReader.backlogged): counted as a route's and closed."""
        if self.closed:
            return
        stats = self.server.stats
        stats.slow_consumers += 1
        stats.route_slow_consumers += 1
        log.warning("%r - Slow Consumer Detected", self)
        self.close(reason)

    def _send(self, data: bytes) -> None:
        if self.out is not None:
            self.out.push(data)

    # -- timers, closing ------------------------------------------------------------------------------
    def _ping_tick(self) -> None:
        self._ping_timer = None
        if self.closed:
            return
        cluster = self.manager.cluster
        opts = self.server.options
        if self._pings_out + 1 > (cluster.ping_max or opts.ping_max):
            stats = self.server.stats
            stats.stale_connections += 1
            stats.route_stale_connections += 1
            log.debug("%r - Stale Route Connection - Closing", self)
            self.close("Stale Connection", errors.STALE_CONNECTION)
            return
        self._pings_out += 1
        self._ping_sent = time.monotonic()
        self.send(encoder.PING)
        interval = cluster.ping_interval or min(opts.ping_interval, ROUTE_MAX_PING_INTERVAL)
        self._ping_timer = self.server.loop.call_later(interval, self._ping_tick)

    def _auth_timeout(self) -> None:
        self._auth_timer = None
        if not self._connect_received and not self.closed:
            self.close("Authentication Timeout", errors.AUTHENTICATION_TIMEOUT)

    def close(self, reason: str, err_text: str | None = None) -> None:
        """Close with `reason` (after `-ERR '<err_text>'` if given); drops the remote interest. Idempotent."""
        if self.closed:
            return
        out = self.out
        if out is not None:
            if err_text is not None:
                out.push(encoder.encode_err(err_text))
            out.flush()
        self.closed = True
        self.close_reason = reason
        for timer in (self._ping_timer, self._auth_timer):
            if timer is not None:
                timer.cancel()
        self._ping_timer = self._auth_timer = None
        server = self.server
        for (account, _, _), sub in self.remote_subs.items():
            sublist = server.account_sublists.get(account.decode("utf-8", "replace"))
            if sublist is not None:
                sublist.remove(sub)
        self.remote_subs = {}
        server.scheduler.stall.forget(self)
        self.parser.stop()
        self._input = []
        if out is not None:
            out.close()
        if self.transport is not None:
            self.transport.close()
        self.out = None
        log.info("%r - Router connection closed: %s", self, reason)
        self.manager.route_closed(self)


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class RouteTracer:
    """The route parser's handler while tracing (-V): each op traced as nats-server traces a route's
    (`<<- [RS+ $G foo]`, `<<- [RMSG $G foo 5]` and its payload), then handled by the route."""

    def __init__(self, route: Route) -> None:
        self.route = route

    def _trace(self, text: str, payload: bytes = b"") -> None:
        route = self.route
        log.log(TRACE, "%r - <<- [%s]", route, text)
        line = payload_line("<<-", payload, route.server.options.max_traced_msg_len)
        if line is not None:
            log.log(TRACE, "%r - %s", route, line)

    def on_info(self, info: dict[str, object]) -> None:
        self._trace(f"INFO {encoder.go_json(redact(info))}")
        self.route.on_info(info)

    def on_connect(self, options: dict[str, object]) -> None:
        self._trace(f"CONNECT {encoder.go_json(redact(options))}")
        self.route.on_connect(options)

    def on_ping(self) -> None:
        self._trace("PING")
        self.route.on_ping()

    def on_pong(self) -> None:
        self._trace("PONG")
        self.route.on_pong()

    def on_ok(self) -> None:
        self._trace("+OK")
        self.route.on_ok()

    def on_err(self, text: str) -> None:
        self._trace(f"-ERR {text}")
        self.route.on_err(text)

    def on_rsub(self, account: bytes, subject: bytes, queue: bytes | None, weight: int) -> None:
        self._trace(_text(encode_rsub(account, subject, queue, weight)[:-2]))
        self.route.on_rsub(account, subject, queue, weight)

    def on_runsub(self, account: bytes, subject: bytes, queue: bytes | None) -> None:
        self._trace(_text(encode_runsub(account, subject, queue)[:-2]))
        self.route.on_runsub(account, subject, queue)

    def on_rmsg(
        self,
        account: bytes,
        subject: bytes,
        reply: bytes | None,
        queues: list[bytes] | None,
        headers: bytes | None,
        payload: bytes,
    ) -> None:
        head = rmsg_head(account, subject, reply, queues, headers is not None)
        self._trace(_text(head + size_fields(headers, payload)), (headers or b"") + payload)
        self.route.on_rmsg(account, subject, reply, queues, headers, payload)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _shown_permission(value: object) -> dict[str, list[str]] | None:
    """A peer's INFO `import` or `export` (`{allow, deny}` subject lists), None when absent or not one."""
    if not isinstance(value, dict):
        return None
    shown: dict[str, list[str]] = {}
    for kind in ("allow", "deny"):
        subjects = value.get(kind)
        if isinstance(subjects, list):
            shown[kind] = [str(s) for s in subjects]
    return shown


def routed_reply(msg: Message) -> bytes | None:
    """The reply `msg` crosses a route, leaf node or gateway with: a JetStream delivery (matched on its
    deliver subject, shown with its own) carries its own subject after `@` in its `$JS.ACK.` reply, as
    nats-server sends it (see `js_ack_shown_at`); any other message, its reply as is."""
    reply = msg.reply
    if reply is None or not reply.startswith(b"$JS.ACK."):
        return reply
    shown = msg.head[4:-1]  # `MSG subject `
    if shown == msg.subject or js_ack_shown_at(reply) > 0:
        return reply
    return reply + b"@" + shown


def shown_delivery(head: bytes, reply: bytes) -> tuple[bytes, bytes]:
    """The `MSG subject ` head and reply of a message that crossed a link with a `$JS.ACK.` reply: a
    JetStream delivery (matched on its deliver subject) is shown with the subject after `@` and answered
    without it (see `routed_reply`)."""
    at = js_ack_shown_at(reply)
    if at > 0:
        return b"MSG " + reply[at + 1 :] + b" ", reply[:at]
    return head, reply


def js_ack_shown_at(reply: bytes) -> int:
    """Where `@<subject>` starts in a routed JetStream ack reply (`$JS.ACK.` and eight dots before it), or
    -1. nats-server routes a push delivery to its deliver subject with the message's own subject appended to
    the reply that way; the receiving server shows that subject to its clients and strips it from the
    reply (names may hold `@` themselves: only the first one after the eighth dot counts)."""
    dots = 0
    for i, c in enumerate(reply):
        if c == 46:  # "."
            dots += 1
        elif c == 64 and dots >= 8 and i < len(reply) - 1:  # "@", with a subject after it
            return i
    return -1
