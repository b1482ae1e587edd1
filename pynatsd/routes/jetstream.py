"""The cluster's JetStream for a pynatsd node without one: nats-server's mixed mode.

A clustered nats-server with JetStream off still serves JetStream to its clients: its system account
exports `$JS.API.>`, and every JetStream-enabled account imports it, sharing the requester's details
(`Nats-Request-Info` with account, server and cluster: the JetStream nodes pick the account and the stream's
placement from it). A request published in the account is published again in the system account, where the
JetStream nodes' `$JS.API.>` subscriptions (propagated over the routes) take it, and the response comes back
through a `_R_` reply subject of the system account (pynatsd.accounts.links' response routes). Everything else
(publishes to stream subjects and their acks, `$JS.ACK`, `$JS.FC`, push deliveries, `$KV`, direct gets and
pull requests, which stream and consumer leaders subscribe in the account itself) is plain account traffic
the routes already carry. As nats-server, direct gets and pull requests do not take the import (they would
only pile up response routes), and a request that came from a route is not re-published.

A node that is a member of the cluster's meta group (pynatsd.raft.member) answers a request itself, as
nats-server's JetStream nodes do, only while the group has no leader: 10008, never silence.

Which accounts: without configured accounts (nor operator mode) the global account, as nats-server does for
a simple mixed cluster; else the configured accounts with `jetstream` enabled, and in operator mode those
whose JWT has JetStream limits.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pynatsd.accounts.links import AccountClient, AccountLinks
from pynatsd.auth.jwt import grants_jetstream
from pynatsd.auth.specs import Export, ServiceLink
from pynatsd.auth.users import DEFAULT_ACCOUNT
from pynatsd.base.formats import rfc3339nano
from pynatsd.broker.delivery import SERVICE_IMPORT_SID, Link, Message
from pynatsd.broker.internal import InternalClient
from pynatsd.protocol.subjects import is_literal_subject

if TYPE_CHECKING:
    from pynatsd.broker.core import Broker
    from pynatsd.raft.member import MetaMember

JS_API = b"$JS.API.>"
# Served by subscriptions in the account itself (stream replicas, consumer leaders): never imported.
_DIRECT = (b"$JS.API.DIRECT.GET.", b"$JS.API.CONSUMER.MSG.NEXT.")


class ClusterJetStream:
    """The `$JS.API.>` imports of a JetStream-less clustered server (see the module docstring)."""

    def __init__(self, server: Broker, system_account: str, member: MetaMember | None = None) -> None:
        self.server = server
        self.system = system_account
        self.member = member
        self.answerers: dict[str, InternalClient] = {}  # per account: the leaderless answers' publisher
        self.export = Export(system_account, JS_API, True)
        # Response routes of our own (not the configured imports', which a reload replaces).
        self.responses = AccountLinks(server)
        self.imports: dict[str, Link] = {}

    def start(self) -> None:
        for account in list(self.server.account_sublists):
            self.account_created(account)
        for account in self._configured():
            self.server.sublist_for(account)  # account_created follows

    def stop(self) -> None:
        for account, sub in self.imports.items():
            self.server.sublist_for(account).remove(sub)
        self.imports.clear()
        self.responses.uninstall()
        for client in self.answerers.values():
            client.close()
        self.answerers.clear()

    def _configured(self) -> list[str]:
        accounts = self.server.options.accounts
        if self.server.auth.jwt is not None:
            return []
        if not accounts:
            return [DEFAULT_ACCOUNT]
        return [name for name, block in accounts.items() if block.jetstream]

    def enabled(self, account: str) -> bool:
        """Does `account` have JetStream (and so the import)?"""
        if account == self.system:
            return False
        jwt_auth = self.server.auth.jwt
        if jwt_auth is None:
            return account in self._configured()
        acc = jwt_auth.account(account)
        if acc is None:
            return False
        return grants_jetstream(acc.claims.nats.get("limits") or {})

    def account_created(self, account: str) -> None:
        """An account's subject space appeared: import the cluster's JetStream API if it has JetStream."""
        if account in self.imports or not self.enabled(account):
            return
        si = ServiceLink(account, self.system, JS_API, JS_API, None, True, self.export, self._request_info)
        sub = Link(
            AccountClient(account), JS_API, None, SERVICE_IMPORT_SID, lambda _, msg: self._forward(si, msg)
        )
        self.imports[account] = sub
        self.server.sublist_for(account).insert(sub)

    def _forward(self, si: ServiceLink, msg: Message) -> bool:
        origin = msg.origin
        # Not forwarded: what a route brought (its own server forwarded it, or it is a delivery of the
        # cluster's JetStream), and what this server published itself (a `$SYS` answer to a reply subject
        # inside `$JS.API`, a service import's message): forwarded, it would run with the account's rights.
        if origin is not None and (origin.is_route or isinstance(origin, InternalClient)):
            return False
        if msg.subject.startswith(_DIRECT):
            return False
        if self.member is not None and self.member.leaderless():
            return self._answer_leaderless(si.importer, msg)
        return self.responses.request(si, msg)

    def _answer_leaderless(self, account: str, msg: Message) -> bool:
        from pynatsd.jetstream.api import leaderless_answer

        answer = leaderless_answer(msg.subject)
        if answer is None or not msg.reply or not is_literal_subject(msg.reply):
            return False
        client = self.answerers.get(account)
        if client is None:
            client = self.answerers[account] = InternalClient(self.server, account, "jetstream")
        client.publish(msg.reply, None, None, answer)
        return True

    def _request_info(self, msg: Message, account: str) -> bytes:
        """nats-server's shared `Nats-Request-Info`: the requester's details, this server and cluster."""
        conn: Any = msg.origin
        info: dict[str, Any] = {}
        start = getattr(conn, "start", None)
        if start is not None:
            info["start"] = rfc3339nano(start)
        host = getattr(conn, "ip", None)
        if host:
            info["host"] = host
        cid = getattr(conn, "cid", 0)
        if cid:
            info["id"] = cid
        info["acc"] = account
        opts = getattr(conn, "opts", None)
        user = getattr(opts, "nkey", "") or getattr(opts, "user", "") or getattr(conn, "user", "")
        named = (("name", "name"), ("lang", "lang"), ("ver", "version"))
        for key, value in (("user", user), *((k, getattr(opts, a, "")) for k, a in named)):
            if value:
                info[key] = value
        rtt = getattr(conn, "rtt", None)
        if rtt:
            info["rtt"] = int(rtt * 1e9)
        info["server"] = self.server.server_name
        cluster = self.server.cluster
        if cluster is not None and cluster.name:
            info["cluster"] = cluster.name
        info["kind"] = "Client"
        info["client_type"] = "nats"
        return json.dumps(info, separators=(",", ":")).encode()
