"""The system account's services and advisories, as nats-server's events.go offers them to operator tooling.

Everything here lives in the system account (`system_account`, `$SYS` by default; none with
`no_system_account`): its subscriptions sit in that account's subject space only, so only users of the
system account can ask or listen, as with nats-server.

Requests (the reply is `{"server": {...}, "data": {...}}`, or `"error"` with a code):
  `$SYS.REQ.SERVER.PING` and `$SYS.REQ.SERVER.PING.<EP>` (every server answers), `$SYS.REQ.SERVER.<id>.<EP>`
  (this one), EP in STATSZ, IDZ, VARZ, CONNZ, SUBSZ, ROUTEZ, GATEWAYZ, LEAFZ, ACCOUNTZ, JSZ, HEALTHZ,
  RAFTZ; the request body is the endpoint's options as JSON (nats-server's names) plus the server filter
  options.
  `$SYS.REQ.SERVER.<id>.KICK` and `.LDM` (`{"cid": N}`) close a client or send it lame duck mode.
  `$SYS.REQ.ACCOUNT.<acc>.<EP>` with EP in CONNZ, SUBSZ, LEAFZ, JSZ, INFO, STATZ, CONNS, and
  `$SYS.REQ.ACCOUNT.PING.STATZ`.
Advisories: `$SYS.ACCOUNT.<acc>.CONNECT` / `.DISCONNECT`, `$SYS.ACCOUNT.<acc>.SERVER.CONNS` (and the old
`$SYS.SERVER.ACCOUNT.<acc>.CONNS`), `$SYS.SERVER.<id>.CLIENT.AUTH.ERR`, and `$SYS.SERVER.<id>.STATSZ`
every few seconds while someone listens (250 ms at start, doubling up to 10 s, as nats-server),
`$SYS.SERVER.<id>.LAMEDUCK` and `$SYS.SERVER.<id>.SHUTDOWN`. Every account also answers a few requests
about itself (see `account_created`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pynatsd.auth.jwt import payload_of
from pynatsd.auth.users import DEFAULT_ACCOUNT
from pynatsd.base.formats import rfc3339nano
from pynatsd.base.ids import event_id
from pynatsd.base.logging import get_logger
from pynatsd.broker.connection import KICKED, Connection
from pynatsd.broker.internal import InternalClient
from pynatsd.jetstream import monitor as js_monitor
from pynatsd.monitor import endpoints as ep
from pynatsd.monitor import raftz
from pynatsd.protocol import gojson

if TYPE_CHECKING:
    import asyncio

    from pynatsd.auth.users import Permissions, Rule
    from pynatsd.leafnodes.leaf import LeafConnection
    from pynatsd.monitor import Monitor
    from pynatsd.node import Node

log = get_logger()

CONNECT_TYPE = "io.nats.server.advisory.v1.client_connect"
DISCONNECT_TYPE = "io.nats.server.advisory.v1.client_disconnect"
ACCOUNT_CONNS_TYPE = "io.nats.server.advisory.v1.account_connections"
STATSZ_FIRST, STATSZ_EVERY = 0.25, 10.0
_HTTP_BAD_REQUEST, _HTTP_ERROR = 400, 500
USER_INFO = b"$SYS.REQ.USER.INFO"
_CONNZ_STATES = {0: "open", 1: "closed", 2: "all"}


class Skip(Exception):
    """A request this server does not answer (filtered out, or nothing to report)."""


def now_text() -> str:
    """Now, as nats-server's JSON times (RFC 3339, UTC, nanosecond digits as needed)."""
    return rfc3339nano(datetime.now(UTC))


def _query(options: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, str]:
    """Request options (JSON, nats-server's names) as the monitoring endpoints' query parameters."""
    query: dict[str, str] = {}
    for key, param in names.items():
        value = options.get(key)
        if value is None or value == "" or value is False or value == 0:
            continue
        query[param] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return query


def _raftz_filters(options: Mapping[str, Any]) -> tuple[str, str]:
    return str(options.get("account") or ""), str(options.get("group") or "")


def _connz_query(options: Mapping[str, Any]) -> dict[str, str]:
    query = _query(
        options,
        {
            "sort": "sort",
            "auth": "auth",
            "subscriptions": "subs",
            "offset": "offset",
            "limit": "limit",
            "cid": "cid",
            "user": "user",
            "acc": "acc",
        },
    )
    if options.get("subscriptions_detail"):
        query["subs"] = "detail"
    state = options.get("state")
    if isinstance(state, int) and not isinstance(state, bool) and state in _CONNZ_STATES:
        query["state"] = _CONNZ_STATES[state]
    return query


def _routez_query(options: Mapping[str, Any]) -> dict[str, str]:
    """RoutezOptions (`subscriptions`, `subscriptions_detail`) as /routez's `subs` parameter."""
    query = _query(options, {"subscriptions": "subs"})
    if options.get("subscriptions_detail"):
        query["subs"] = "detail"
    return query


_LEAFZ_NAMES = {"subscriptions": "subs", "account": "acc"}  # nats-server's LeafzOptions
_SUBSZ_NAMES = {
    "offset": "offset",
    "limit": "limit",
    "subscriptions": "subs",
    "account": "acc",
    "test": "test",
}


class SystemService:
    """The system account's requests and advisories (see the module docstring)."""

    def __init__(self, server: Node, account: str, monitor: Monitor | None = None) -> None:
        self.server = server
        self.account = account
        self.monitor = monitor  # the monitoring port's CPU sampler and request counts, when it runs
        self.client = InternalClient(server, account, "system")
        self._seq = 0
        self._statsz_every = STATSZ_FIRST
        self._statsz_timer: asyncio.TimerHandle | None = None
        self._cpu: Any = None  # a CpuSampler of our own when there is no monitoring port
        self._in_accounts: dict[str, InternalClient] = {}  # the services every other account has

    @property
    def server_id(self) -> str:
        return self.server.server_id

    # -- life -------------------------------------------------------------------------------------------
    def start(self) -> None:
        sub = self.client.subscribe
        sub(b"$SYS.REQ.SERVER.PING", self._on_statsz)
        for name, handler in self._server_endpoints().items():
            for subject in (f"$SYS.REQ.SERVER.PING.{name}", f"$SYS.REQ.SERVER.{self.server_id}.{name}"):
                sub(subject.encode(), handler)
        for name in ("CONNZ", "SUBSZ", "LEAFZ", "JSZ", "INFO", "STATZ", "CONNS"):
            sub(f"$SYS.REQ.ACCOUNT.*.{name}".encode(), self._on_account_request)
        sub(f"$SYS.REQ.SERVER.{self.server_id}.KICK".encode(), self._on_kick)
        sub(f"$SYS.REQ.SERVER.{self.server_id}.LDM".encode(), self._on_client_ldm)
        sub(USER_INFO, lambda *msg: self._on_user_info(self.client, *msg))
        for account in {*self.server.account_sublists, *self.server.auth.accounts}:
            self.account_created(account)
        self._statsz_timer = self.server.loop.call_later(self._statsz_every, self._statsz_tick)

    def stop(self) -> None:
        if self._statsz_timer is not None:
            self._statsz_timer.cancel()
            self._statsz_timer = None
        self.client.close()
        for client in self._in_accounts.values():
            client.close()
        self._in_accounts.clear()

    def announce(self, event: str) -> None:
        """`$SYS.SERVER.<id>.SHUTDOWN` or `.LAMEDUCK`: the server block alone, as nats-server sends it."""
        self._send(f"$SYS.SERVER.{self.server_id}.{event}", self.server_info())

    def account_created(self, account: str) -> None:
        """Every account but the system one answers a few requests about itself in its own subject space,
        as nats-server's system imports: `$SYS.REQ.USER.INFO` (who am I), `$SYS.REQ.SERVER.PING.CONNZ` and
        `$SYS.REQ.ACCOUNT.PING.CONNZ` (its connections), `$SYS.REQ.ACCOUNT.PING.STATZ` (its statistics)."""
        if account == self.account or account in self._in_accounts or self.client.closed:
            return
        client = self._in_accounts[account] = InternalClient(self.server, account, "system-imports")
        client.subscribe(USER_INFO, lambda *msg: self._on_user_info(client, *msg))
        for subject in (b"$SYS.REQ.SERVER.PING.CONNZ", b"$SYS.REQ.ACCOUNT.PING.CONNZ"):
            client.subscribe(subject, lambda *msg: self._on_scoped(client, account, "CONNZ", *msg))
        client.subscribe(
            b"$SYS.REQ.ACCOUNT.PING.STATZ", lambda *msg: self._on_scoped(client, account, "STATZ", *msg)
        )

    def _on_scoped(
        self,
        client: InternalClient,
        account: str,
        name: str,
        subject: bytes,
        reply: bytes | None,
        headers: bytes | None,
        payload: bytes,
    ) -> None:
        """An account's own CONNZ or STATZ, answered in that account."""
        self._account_request(account, name, reply, payload, client, every=False)

    def _on_user_info(
        self,
        client: InternalClient,
        subject: bytes,
        reply: bytes | None,
        headers: bytes | None,
        payload: bytes,
    ) -> None:
        """nats-server's userInfoReq: the requester's user, account, permissions and expiry."""
        conn = client.origin
        if reply is None or not isinstance(conn, Connection):
            return
        info: dict[str, Any] = {
            "user": _raw_user(conn),
            "account": conn.account,
            "account_name": ep.account_name_tag(self.server, conn.account),
        }
        if conn.perms is not None:
            info["permissions"] = public_permissions(conn.perms)
        expires = payload_of(conn.opts.jwt).get("exp") if conn.opts.jwt else None
        if isinstance(expires, int) and expires > 0:
            info["expires"] = max(int((expires - datetime.now(UTC).timestamp()) * 1e9), 0)
        self._send(reply, {"server": self.server_info(), "data": info}, client)

    # -- the envelope -------------------------------------------------------------------------------------
    def server_info(self) -> dict[str, Any]:
        """nats-server's ServerInfo block, with the next sequence number."""
        info = self.server.info_base()
        self._seq += 1
        # A meta group member is a JetStream server to its cluster: nats-server places stream peers on it.
        jetstream = self.server.jetstream is not None or self.server.meta_member is not None
        cluster = self.server.cluster
        return {
            "name": self.server.server_name,
            "host": info.get("host", self.server.options.host),
            "id": self.server_id,
            **({"cluster": cluster.name} if cluster is not None and cluster.name else {}),
            "ver": info.get("version", ""),
            "jetstream": jetstream,
            "flags": 1 if jetstream else 0,  # nats-server's JetStreamEnabled capability bit
            "seq": self._seq,
            "time": now_text(),
        }

    def _send(self, subject: str | bytes, body: dict[str, Any], client: InternalClient | None = None) -> None:
        """Publish `body` as JSON, in the system account (or through `client`, in its account)."""
        subj = subject.encode() if isinstance(subject, str) else subject
        text = json.dumps(body, separators=(",", ":"), default=_snapshot_json)
        (client or self.client).publish(subj, None, None, text.encode())

    def _interest(self, subject: str) -> bool:
        """Anyone (but us) listening on `subject` in the system account: events are built only then."""
        found = self.client.sublist.match(subject.encode())
        return bool(found.plain) or any(found.groups)

    def _respond(
        self, reply: bytes | None, build: Callable[[], Any], client: InternalClient | None = None
    ) -> None:
        """nats-server's zReq: `data` from `build`, or `error` {code, description}; nothing if skipped."""
        if reply is None:
            return
        body: dict[str, Any]
        try:
            data = build()
        except Skip:
            return
        except _BadOptions as err:
            body = {
                "server": self.server_info(),
                "error": {"code": _HTTP_BAD_REQUEST, "description": str(err)},
            }
        except ValueError as err:  # the endpoints' BadRequest, an account that does not exist
            # nats-server's typed nil: `"data": null` beside the error
            error = {"code": _HTTP_ERROR, "description": str(err)}
            body = {"server": self.server_info(), "data": None, "error": error}
        else:
            body = {"server": self.server_info(), "data": data}
        self._send(reply, body, client)

    def _options(self, payload: bytes, kind: str = "") -> dict[str, Any]:
        """The request's JSON options (`kind`: the endpoint, CONNZ...); raises _BadOptions with nats-server's
        words (bounded depth: a 1,100-deep body raised RecursionError per request), or Skip when its filter
        excludes this server."""
        if not payload.strip():
            return {}
        schema = _options_schema(kind)
        try:
            options = gojson.unmarshal(payload, schema, "server." + schema.name)
        except gojson.GoJsonError as err:
            raise _BadOptions(str(err)) from None
        if self._filtered(options):
            raise Skip
        return options

    def _filtered(self, options: Mapping[str, Any]) -> bool:
        """nats-server's filterRequest: True when the filter options leave this server out."""
        name, host = self.server.server_name, str(self.server.info_base().get("host", ""))
        want_name, want_host = str(options.get("server_name") or ""), str(options.get("host") or "")
        cluster = str(options.get("cluster") or "")
        if options.get("exact_match"):
            if (want_name and want_name != name) or (want_host and want_host != host) or cluster:
                return True
        elif (want_name and want_name not in name) or (want_host and want_host not in host) or cluster:
            return True
        return bool(options.get("tags")) or bool(options.get("domain"))  # no tags, no JetStream domain

    # -- server endpoints -----------------------------------------------------------------------------------
    def _server_endpoints(self) -> dict[str, Callable[[bytes, bytes | None, bytes | None, bytes], None]]:
        s = self.server

        def endpoint(build: Callable[[dict[str, Any]], Any]) -> Callable[..., None]:
            def handle(subject: bytes, reply: bytes | None, headers: bytes | None, payload: bytes) -> None:
                kind = subject.rsplit(b".", 1)[-1].decode(errors="replace")
                self._respond(reply, lambda: build(self._options(payload, kind)))

            return handle

        def healthz(options: dict[str, Any]) -> dict[str, Any]:
            status, body = ep.healthz(s, _query(options, {name: name for name in _HEALTHZ_FIELDS}))
            return {**body, "status_code": status}

        return {
            "STATSZ": self._on_statsz,
            "IDZ": self._on_idz,
            "VARZ": endpoint(lambda o: ep.varz(s, *self._varz_inputs())),
            "CONNZ": endpoint(lambda o: ep.connz(s, _connz_query(o))),
            "SUBSZ": endpoint(lambda o: ep.subsz(s, _query(o, _SUBSZ_NAMES))),
            "ROUTEZ": endpoint(lambda o: ep.routez(s, _routez_query(o))),
            "GATEWAYZ": endpoint(lambda o: ep.gatewayz(s)),
            "LEAFZ": endpoint(lambda o: ep.leafz(s, _query(o, _LEAFZ_NAMES))),
            "ACCOUNTZ": endpoint(lambda o: ep.accountz(s, _query(o, {"account": "acc"}))),
            "JSZ": endpoint(
                lambda o: ep.jsz(
                    s,
                    _query(
                        o,
                        {
                            k: k
                            for k in (
                                "account",
                                "accounts",
                                "streams",
                                "consumer",
                                "config",
                                "offset",
                                "limit",
                            )
                        },
                    ),
                )
            ),
            "HEALTHZ": endpoint(healthz),
            "RAFTZ": endpoint(lambda o: raftz.raftz(s, *_raftz_filters(o))),
        }

    def _varz_inputs(self) -> tuple[Any, Mapping[str, int]]:
        monitor = self.monitor
        if monitor is not None:
            return monitor.cpu, monitor.req_stats
        if self._cpu is None:
            self._cpu = ep.CpuSampler()
        return self._cpu, {}

    def _on_kick(self, subject: bytes, reply: bytes | None, headers: bytes | None, payload: bytes) -> None:
        """`{"cid": N}`: close that client (reason `Kicked`), as nats-server's kickClient."""
        conn = self._client_of(payload)
        if conn is None:
            self._client_error(reply, "no such client or leafnode id")
            return
        conn.close(KICKED)
        if reply is not None:
            self._send(reply, {"server": self.server_info()})

    def _on_client_ldm(
        self, subject: bytes, reply: bytes | None, headers: bytes | None, payload: bytes
    ) -> None:
        """`{"cid": N}`: tell that client the server is in lame duck mode (an INFO with `ldm`), as
        nats-server's ldmClient, so it reconnects elsewhere."""
        conn = self._client_of(payload)
        if conn is None:
            self._client_error(reply, "no such client id")
            return
        if not conn.wants_async_info:
            self._client_error(
                reply, "client does not support Lame Duck Mode or is not ready to receive the notification"
            )
            return
        conn.send_raw(self.server.info_for(conn, ldm=True))
        if reply is not None:
            self._send(reply, {"server": self.server_info()})

    def _client_of(self, payload: bytes) -> Connection | None:
        try:
            cid = gojson.loads(payload)[-1].get("cid")
        except (IndexError, ValueError, AttributeError):
            log.error("Error unmarshalling kick client request")
            return None
        return self.server.clients.get(cid) if isinstance(cid, int) else None

    def _client_error(self, reply: bytes | None, description: str) -> None:
        if reply is not None:
            error = {"code": _HTTP_ERROR, "description": description}
            self._send(reply, {"server": self.server_info(), "error": error})

    def _on_idz(self, subject: bytes, reply: bytes | None, headers: bytes | None, payload: bytes) -> None:
        if reply is not None:  # nats-server's ServerID, bare (no envelope)
            host = str(self.server.info_base().get("host", ""))
            self._send(reply, {"name": self.server.server_name, "host": host, "id": self.server_id})

    def _on_statsz(self, subject: bytes, reply: bytes | None, headers: bytes | None, payload: bytes) -> None:
        """STATSZ, to the reply; without one, on the broadcast subject (nats-server's statszReq)."""
        try:
            self._options(payload, "STATSZ")
        except Skip:
            return
        except _BadOptions as err:
            if reply is not None:  # nats-server answers a bad body with an empty server block
                self._send(
                    reply,
                    {"server": _EMPTY_SERVER, "error": {"code": _HTTP_BAD_REQUEST, "description": str(err)}},
                )
            return
        self._send(reply or f"$SYS.SERVER.{self.server_id}.STATSZ".encode(), self.statsz())

    def statsz(self) -> dict[str, Any]:
        """nats-server's ServerStatsMsg: the server block and `statsz`."""
        s = self.server
        stats = s.stats
        cpu, _ = self._varz_inputs()
        cores = os.cpu_count() or 1
        active = {c.account for c in s.clients.values() if c.connected}
        body: dict[str, Any] = {
            "start": rfc3339nano(s.start_time),
            "mem": ep.process_rss(),
            "cores": cores,
            "cpu": cpu.sample(),
            "connections": len(s.clients) + len(stats.mqtt),  # MQTT clients too, as nats-server's
            "total_connections": stats.total_connections,
            "active_accounts": len(active),
            "subscriptions": s.sublist_stats().num_subscriptions,
            "sent": {"msgs": stats.out_msgs, "bytes": stats.out_bytes},
            "sent_to_clients": {"msgs": stats.out_client_msgs, "bytes": stats.out_client_bytes},
            "received": {"msgs": stats.in_msgs, "bytes": stats.in_bytes},
            "received_from_clients": {"msgs": stats.in_client_msgs, "bytes": stats.in_client_bytes},
            "slow_consumers": stats.slow_consumers,
        }
        if stats.slow_consumers:
            body["slow_consumer_stats"] = stats.slow_consumer_stats()
        if stats.stale_connections:
            body["stale_connections"] = stats.stale_connections
            body["stale_connection_stats"] = stats.stale_connection_stats()
        if stats.stalled_clients:
            body["stalled_clients"] = stats.stalled_clients
        body["active_servers"] = 1
        if s.jetstream is not None:
            body["jetstream"] = js_monitor.varz_block(s.jetstream)
        elif s.meta_member is not None:
            body["jetstream"] = s.meta_member.jetstream_statsz()
        body["gomaxprocs"] = cores
        return {"server": self.server_info(), "statsz": body}

    def _statsz_tick(self) -> None:
        """The periodic STATSZ, sent only while someone listens (nats-server checks interest when alone);
        a clustered server asks every 0.25 s until someone does."""
        self._statsz_timer = None
        if self.client.closed:
            return
        subject = f"$SYS.SERVER.{self.server_id}.STATSZ"
        heard = self._interest(subject)
        if heard:
            self._send(subject, self.statsz())
        if heard or self.server.cluster is None:
            # In a cluster the back-off runs from the first one heard: a server whose routes come up late
            # (a restart, pynatsd's routes up after 1.75 s) announces itself, its JetStream among it, within
            # a tick of them rather than at the next doubled one (3.75, 7.75, then every 10 s).
            self._statsz_every = min(self._statsz_every * 2, STATSZ_EVERY)
        self._statsz_timer = self.server.loop.call_later(self._statsz_every, self._statsz_tick)

    # -- account endpoints --------------------------------------------------------------------------------
    def _on_account_request(
        self,
        subject: bytes,
        reply: bytes | None,
        headers: bytes | None,
        payload: bytes,
        client: InternalClient | None = None,
    ) -> None:
        _, _, _, account, name = subject.decode(errors="replace").split(".")
        if name == "CONNS":
            self._on_conns(account, reply, payload)
            return
        self._account_request(account, name, reply, payload, client, every=account == "PING")

    def _account_request(
        self,
        account: str,
        name: str,
        reply: bytes | None,
        payload: bytes,
        client: InternalClient | None,
        every: bool,
    ) -> None:
        """Endpoint `name` about `account`; `every`: STATZ of every account (or those the body lists),
        only for the system account's `$SYS.REQ.ACCOUNT.PING.STATZ`, never for a scoped request."""
        s = self.server

        def build() -> Any:
            options = self._options(payload, name)
            if name == "CONNZ":
                return ep.connz(s, {**_connz_query(options), "acc": account})
            if name == "SUBSZ":
                return ep.subsz(s, {**_query(options, _SUBSZ_NAMES), "subs": "true", "acc": account})
            if name == "LEAFZ":
                return ep.leafz(s, {**_query(options, _LEAFZ_NAMES), "acc": account})
            if name == "JSZ":
                return ep.jsz(s, {"acc": account})
            if name == "INFO":
                return ep.account_info(s, account)
            # STATZ: `PING` is the broadcast form (every account); an account without connections is
            # not reported unless asked (include_unused).
            listed = options.get("accounts")
            wanted = [str(a) for a in listed] if every and isinstance(listed, list) and listed else None
            if not every:
                wanted = [account]
            statz = ep.accstatz(s, accounts=wanted, unused=bool(options.get("include_unused")))
            if not statz["account_statz"] and not options.get("include_unused"):
                raise Skip
            return statz

        self._respond(reply, build, client)

    def _on_conns(self, account: str, reply: bytes | None, payload: bytes) -> None:
        """nats-server's connsRequest: the account's connection counts, when it has local connections."""
        if payload.strip():
            try:
                asked = gojson.loads(payload)[-1]
            except (IndexError, ValueError):
                log.error("Error unmarshalling account connections request message")
                return
            if not isinstance(asked, dict) or asked.get("acc", account) != account:
                return
        if reply is not None and any(
            c.account == account and c.connected for c in self.server.clients.values()
        ):
            self._send(reply, self._account_conns(account))

    def _account_conns(self, account: str) -> dict[str, Any]:
        return {
            "type": ACCOUNT_CONNS_TYPE,
            "id": event_id(),
            "timestamp": now_text(),
            "server": self.server_info(),
            **ep.account_stat(self.server, account),
        }

    # -- advisories ----------------------------------------------------------------------------------------
    def client_connected(self, conn: Connection) -> None:
        """A client authenticated: the account's connection counts (not for $G), then CONNECT."""
        self._account_conns_changed(conn.account)
        subject = f"$SYS.ACCOUNT.{conn.account}.CONNECT"
        if self._interest(subject):
            self._connect_event(subject, self._client_info(conn))

    def client_closed(self, conn: Connection, auth_failed: bool) -> None:
        """A client closed: the authentication error advisory when that was why, then DISCONNECT."""
        if auth_failed:
            self._disconnect_event(f"$SYS.SERVER.{self.server_id}.CLIENT.AUTH.ERR", conn)
        if conn.connected:
            self._account_conns_changed(conn.account)
        self._disconnect_event(f"$SYS.ACCOUNT.{conn.account}.DISCONNECT", conn)

    def _account_conns_changed(self, account: str) -> None:
        if account == DEFAULT_ACCOUNT:
            return
        subjects = [f"$SYS.SERVER.ACCOUNT.{account}.CONNS", f"$SYS.ACCOUNT.{account}.SERVER.CONNS"]
        wanted = [subject for subject in subjects if self._interest(subject)]
        if wanted:
            event = self._account_conns(account)
            for subject in wanted:  # one event, each message with its own server block (sequence)
                self._send(subject, {**event, "server": self.server_info()})

    def leaf_changed(self, leaf: LeafConnection, connected: bool) -> None:
        """A leaf node connection registered or closed: its account's connection counts, then CONNECT (from
        the soliciting side only: nats-server's accepting side announces none) or DISCONNECT, whose client
        is of kind `Leafnode`."""
        self._account_conns_changed(leaf.account)
        subject = f"$SYS.ACCOUNT.{leaf.account}.{'CONNECT' if connected else 'DISCONNECT'}"
        if (connected and leaf.remote is None) or not self._interest(subject):
            return
        accepted = leaf.remote is None  # its CONNECT named the other side's user, server and version
        info: dict[str, Any] = {
            "start": rfc3339nano(leaf.start),
            "host": leaf.host,
            "id": leaf.cid,
            "acc": leaf.account,
            "user": leaf.auth_user if accepted else "",
            "name": leaf.remote_name if accepted else "",
            "ver": leaf.version if accepted else "",
            "rtt": int(leaf.rtt * 1e9) if leaf.rtt and not connected else 0,
            "stop": "" if connected else now_text(),
            "name_tag": ep.account_name_tag(self.server, leaf.account),
            "kind": "Leafnode",
        }
        info = {k: v for k, v in info.items() if v not in ("", 0)}
        if connected:
            self._connect_event(subject, info)
        else:
            counts = (leaf.in_msgs, leaf.in_bytes, leaf.out_msgs, leaf.out_bytes)
            self._send(subject, self._disconnect_body(info, counts, leaf.close_reason))

    def _connect_event(self, subject: str, client: dict[str, Any]) -> None:
        event = {
            "type": CONNECT_TYPE,
            "id": event_id(),
            "timestamp": now_text(),
            "server": self.server_info(),
            "client": client,
        }
        self._send(subject, event)

    def _disconnect_event(self, subject: str, conn: Connection) -> None:
        if not self._interest(subject):
            return
        counts = (conn.in_msgs, conn.in_bytes, conn.out_msgs, conn.out_bytes)
        self._send(subject, self._disconnect_body(self._client_info(conn), counts, conn.close_reason))

    def _disconnect_body(
        self, info: dict[str, Any], counts: tuple[int, int, int, int], reason: str
    ) -> dict[str, Any]:
        """nats-server's DisconnectEventMsg; `counts`: messages and bytes in, then out."""
        return {
            "type": DISCONNECT_TYPE,
            "id": event_id(),
            "timestamp": info.get("stop", now_text()),
            "server": self.server_info(),
            "client": info,
            "sent": {"msgs": counts[0], "bytes": counts[1]},
            "received": {"msgs": counts[2], "bytes": counts[3]},
            "reason": reason,
        }

    def _client_info(self, conn: Connection) -> dict[str, Any]:
        """nats-server's ClientInfo for an advisory (empty fields left out, as its omitempty does)."""
        user_claims = payload_of(conn.opts.jwt) if conn.opts.jwt else {}
        info: dict[str, Any] = {
            "start": rfc3339nano(conn.start),
            "host": conn.ip,
            "id": conn.cid,
            "acc": conn.account,
            "user": _raw_user(conn),
            "name": conn.opts.name,
            "lang": conn.opts.lang,
            "ver": conn.opts.version,
            "rtt": int(conn.rtt * 1e9) if conn.rtt else 0,
            "stop": rfc3339nano(conn.stop) if conn.stop is not None else "",
            "jwt": conn.opts.jwt,
            "issuer_key": str(user_claims.get("iss", "")) if conn.connected else "",
            "name_tag": ep.account_name_tag(self.server, conn.account),
            "tags": (user_claims.get("nats") or {}).get("tags") or [],
            "kind": "Client",
            "client_type": "websocket" if conn.is_websocket else "nats",
        }
        return {k: v for k, v in info.items() if v not in ("", 0, [], None)}


_FILTER_FIELDS = {
    "server_name": "string",
    "cluster": "string",
    "host": "string",
    "tags": ("[]", "string"),
    "domain": "string",
    "exact_match": "bool",
}
_HEALTHZ_FIELDS = {
    "js-enabled": "bool",
    "js-enabled-only": "bool",
    "js-server-only": "bool",
    "js-meta-only": "bool",
    "account": "string",
    "stream": "string",
    "consumer": "string",
    "details": "bool",
}
# The endpoints' own options, typed as nats-server's structs type them (a wrong type is a 400).
_KIND_FIELDS: dict[str, dict[str, Any]] = {
    "HEALTHZ": _HEALTHZ_FIELDS,
    "RAFTZ": {"account": "string", "group": "string"},
}
_GO_NAMES = {"JSZ": "JSz"}
_SCHEMAS: dict[str, gojson.Struct] = {}


def _options_schema(kind: str) -> gojson.Struct:
    """An endpoint's options as nats-server types them: its filter fields; others kept as sent."""
    schema = _SCHEMAS.get(kind)
    if schema is None:
        name = _GO_NAMES.get(kind, kind.capitalize()) + "EventOptions"
        fields = {**_FILTER_FIELDS, **_KIND_FIELDS.get(kind, {})}
        schema = _SCHEMAS[kind] = gojson.Struct(name, fields, strict=False)
    return schema


class _BadOptions(ValueError):
    """A request body that is not JSON options (answered with code 400)."""


_EMPTY_SERVER = {
    "name": "",
    "host": "",
    "id": "",
    "ver": "",
    "jetstream": False,
    "flags": 0,
    "seq": 0,
    "time": "0001-01-01T00:00:00Z",
}


def _snapshot_json(value: Any) -> Any:
    """The monitoring endpoints' deferred parts (e.g. a connection's subscriptions) as JSON."""
    to_json = getattr(value, "to_json", None)
    if to_json is None:
        raise TypeError(f"not JSON serializable: {type(value).__name__}")
    return to_json()


def public_permissions(perms: Permissions) -> dict[str, Any]:
    """nats-server's publicPermissions: the user's publish, subscribe and response rules."""

    def side(rule: Rule | None) -> dict[str, list[str]] | None:
        if rule is None:
            return None
        out: dict[str, list[str]] = {}
        if rule.allow:
            out["allow"] = [p.decode(errors="replace") for p in rule.allow]
        if rule.deny:
            out["deny"] = [p.decode(errors="replace") for p in rule.deny]
        return out or None

    result: dict[str, Any] = {}
    for key, rule in (("publish", perms.publish), ("subscribe", perms.subscribe)):
        described = side(rule)
        if described is not None:
            result[key] = described
    if perms.responses is not None:
        result["responses"] = {"max": perms.responses.max_msgs, "ttl": int(perms.responses.expires * 1e9)}
    return result


def _raw_user(conn: Connection) -> str:
    """nats-server's getRawAuthUser: the nkey, user name, JWT user key or a redacted token."""
    opts = conn.opts
    if opts.nkey:
        return opts.nkey
    if opts.user:
        return opts.user
    if opts.jwt:
        return conn.user
    if opts.auth_token:
        return "[REDACTED]"
    return ""
