"""One gateway connection (see pynatsd.gateways): a route connection (pynatsd.routes.route.Route: the
socket, the reader under the per-turn budget, the route op parser, PINGs, closing) speaking the gateway
dialect of nats-server 2.15 (server/gateway.go).

Gateways are one-way: this server's *outbound* connection to a remote cluster carries our messages there
and brings back the remote's interest (RS+/RS-, and INFO commands switching an account to interest-only
mode); an *inbound* connection, from a server of a remote cluster, brings its messages and carries our
cluster's interest back.

Outbound: the accepting side sends INFO first; we answer CONNECT and our gateway INFO, then register. For
each account the connection holds one `>` subscription in the account's subject space, so the delivery
policy hands it every message published in this server (never one from a route or another gateway);
`send_routed` then sends it only where the remote may want it: in optimistic mode unless the remote said
RS- for the subject, in interest-only mode (the remote's INFO `gateway_iom`, or
its `gateway_cmd` 2/3 for an account) only on its RS+ interest. A queue group the remote has goes there
only if no member of it is in our cluster (local members first). `_GR_.<hash>.` subjects (replies mapped by
a nats-server requester) go to the gateway whose cluster name hashes to it, whatever the interest.

Inbound: after CONNECT and INFO we switch every account to interest-only mode at once (nats-server 2.9+,
our INFO says `gateway_iom`): INFO `gateway_cmd` 2, RS+ of our cluster's interest, INFO `gateway_cmd` 3.
A message received is delivered to this server's subscribers and our cluster's routes, its named queue
groups only.
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import TYPE_CHECKING, Any, cast

from pynatsd.auth.users import password_ok
from pynatsd.base.logging import get_logger
from pynatsd.broker.delivery import Message, Subscription, enqueue, new_head, publish_matched, size_fields
from pynatsd.broker.outbound import Outbound
from pynatsd.broker.trace import TracedTransport
from pynatsd.matcher import Sublist
from pynatsd.protocol import errors
from pynatsd.protocol.route import encode_connect, rmsg_head
from pynatsd.protocol.subjects import matches
from pynatsd.routes.route import Route

if TYPE_CHECKING:
    from pynatsd.gateways.manager import GatewayManager

log = get_logger()

GW_REPLY_PREFIX = b"_GR_."
GW_HASH_LEN = 6
GW_SUBJECT_OFFSET = len(GW_REPLY_PREFIX) + 2 * (GW_HASH_LEN + 1)  # `_GR_.<cluster>.<server>.`
CMD_GOSSIP, CMD_ALL_SUBS_START, CMD_ALL_SUBS_COMPLETE = 1, 2, 3
OPTIMISTIC, TRANSITIONING, INTEREST_ONLY = "Optimistic", "Transitioning", "Interest-Only"
REPLY_MAPPING_TTL = 2.0  # nats-server's defaultGatewayRecentSubExpiration


class RemoteAccount:
    """What an outbound connection knows of the remote's interest in one account."""

    __slots__ = ("mode", "no_interest", "sublist", "subs")

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.no_interest: set[bytes] = set()  # optimistic mode: subjects the remote said RS- for
        self.sublist: Sublist[Subscription] = Sublist(cache=False)  # its RS+ (queue groups always)
        self.subs: dict[tuple[bytes, bytes | None], Subscription] = {}


class Gateway(Route):
    """A gateway connection, outbound (`did_solicit`) or inbound."""

    def __init__(self, manager: GatewayManager, outbound: bool, name: str = "", url: str = "") -> None:
        # the Route machinery reads `manager.server`, `.cluster` (ping settings) and `.route_closed`
        super().__init__(cast(Any, manager), did_solicit=outbound, url=url)
        self.gateways = manager
        self.outbound = outbound
        self.is_route = outbound  # an outbound's `>` subscriptions are remote interest to the policy
        self.is_gateway = outbound
        self.name = name  # the remote cluster's gateway name (an inbound learns it from CONNECT)
        self.remote_hash = manager.hash_of(name) if name else b""
        self.remote_iom = False  # the remote switches every account to interest-only mode at once
        self.accounts: dict[bytes, RemoteAccount] = {}  # outbound: the remote's interest per account
        self.switched: set[str] = set()  # inbound: accounts whose interest we send (interest-only)
        # outbound: replies of requests a nats-server sent us mapped (`_GR_.<cluster>.<server>.<reply>`):
        # our clients see `<reply>`, and what they publish on it goes back here mapped again, until
        # REPLY_MAPPING_TTL after the last request (nats-server's trackGWReply). (account, reply) ->
        # (the `_GR_.` prefix, when it expires)
        self.mapped: dict[tuple[bytes, bytes], tuple[bytes, float]] = {}
        self._sweep: asyncio.TimerHandle | None = None

    def __repr__(self) -> str:
        return f"{self.host}:{self.port} - gid:{self.rid}"

    # -- asyncio protocol -----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast("asyncio.Transport", transport)
        self.transport = transport
        peer: object = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.host, self.port = str(peer[0]), int(peer[1])
        server = self.server
        traced = cast("asyncio.Transport", TracedTransport(transport, self)) if self._trace else transport
        self.out = Outbound(traced, server.scheduler, server.options.max_pending)
        self.out.start(self._write_failed)
        manager = self.gateways
        manager.connections.add(self)
        if self.outbound:
            log.info("%r - Creating outbound gateway connection to %r", self, self.name)
        else:
            log.info("%r - Processing inbound gateway connection", self)
            self.send(manager.gateway_info())
            timeout = manager.options.auth_timeout or server.options.effective_auth_timeout
            self._auth_timer = server.loop.call_later(timeout, self._auth_timeout)

    # -- handshake ------------------------------------------------------------------------------------
    def on_connect(self, options: dict[str, object]) -> None:
        if self.outbound or self._connect_received:
            return
        manager = self.gateways
        gateway = str(options.get("gateway") or "")
        if not gateway:
            self.close("Incorrect Port", "Attempted To Connect To Gateway Port")
            return
        if manager.options.reject_unknown_cluster and gateway not in manager.remotes:
            log.error("%r - Rejecting connection from gateway %r", self, gateway)
            self.close("Wrong Gateway", f'Connection to gateway "{manager.name}" rejected')
            return
        opts = manager.options
        if opts.auth_required and not (
            options.get("user") == opts.username and password_ok(str(options.get("pass", "")), opts.password)
        ):
            log.error("%r - authentication error", self)
            self.close("Authentication Failure", errors.AUTHORIZATION_VIOLATION)
            return
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        self._connect_received = True
        self.name = gateway
        self.remote_hash = manager.hash_of(gateway)
        self.remote_id = str(options.get("name", ""))

    def on_info(self, info: dict[str, object]) -> None:
        if not self._admitted():
            return
        manager = self.gateways
        first = not self._info_received
        self._info_received = True
        gateway = str(info.get("gateway") or "")
        if first:
            self.remote_id = str(info.get("server_id", ""))
            self.remote_name = str(info.get("server_name", ""))
            self.headers = self.server.options.headers and bool(info.get("headers"))
        if not self.outbound:
            if first:
                self.remote_iom = bool(info.get("gateway_iom"))
                manager.register_inbound(self, info)
            return
        if not gateway:
            self.close("Incorrect Port", f'Attempt to connect to gateway "{self.name}" using wrong port')
            return
        urls = info.get("gateway_urls")
        if isinstance(urls, list):
            manager.add_remote_urls(self.name, [str(u) for u in urls])
        if gateway != self.name:
            if not first and info.get("gateway_cmd") == CMD_GOSSIP:
                manager.implicit_gateway(info)
                return
            log.error(
                "%r - Failing connection to gateway %r, remote gateway name is %r", self, self.name, gateway
            )
            text = (
                f'Connection from "{manager.name}" rejected, wanted to connect to "{self.name}", '
                f'this is "{gateway}"'
            )
            self.no_reconnect = True
            self.close("Wrong Gateway", text)
            return
        if first:
            self.remote_iom = bool(info.get("gateway_iom"))
            self.send(encode_connect(manager.connect_options(self.name, self.url)) + manager.gateway_info())
            if not manager.register_outbound(self):
                self.no_reconnect = True
                self.close("Wrong Gateway")
                return
            for account in list(self.server.account_sublists):
                self.watch_account(account)
            manager.forward_to_cluster(info)
            return
        command = info.get("gateway_cmd")
        if command in (CMD_ALL_SUBS_START, CMD_ALL_SUBS_COMPLETE):
            named = _command_account(info)
            if named is None:
                self.close("Protocol Violation", "Account absent from receive-all-subscriptions command")
                return
            state = self.accounts.get(named)
            if state is None:
                state = self.accounts[named] = RemoteAccount(TRANSITIONING)
            if command == CMD_ALL_SUBS_START:
                state.mode = TRANSITIONING
            else:
                state.mode = INTEREST_ONLY
                state.no_interest.clear()
                log.debug("%r - Gateway %r: switching account %r to Interest-Only mode", self, gateway, named)

    def watch_account(self, account: str) -> None:
        """Receive every message published here in `account` (an outbound's `>` subscription)."""
        if not self.outbound or self.closed or not self.gateways.carries(account):
            return
        acc = account.encode()
        key = (acc, b">", None)
        if key in self.remote_subs:
            return
        sub = Subscription(self, b">", None, acc)
        self.server.sublist_for(account).insert(sub)
        self.remote_subs[key] = sub

    # -- the remote's interest (outbound) -------------------------------------------------------------
    def on_rsub(self, account: bytes, subject: bytes, queue: bytes | None, weight: int) -> None:
        if not self._admitted() or not self.outbound:
            return
        state = self.accounts.get(account)
        if state is None:
            if queue is None:
                return  # nothing was suppressed: no entry, nothing to undo
            state = self.accounts[account] = RemoteAccount(INTEREST_ONLY if self.remote_iom else OPTIMISTIC)
        if queue is None and state.mode == OPTIMISTIC:
            text = subject.decode("utf-8", "replace")
            if "*" in text or ">" in text:
                state.no_interest = {s for s in state.no_interest if not matches(subject, s)}
            else:
                state.no_interest.discard(subject)
            return
        key = (subject, queue)
        if key in state.subs:
            return
        sub = Subscription(self, subject, queue, account)
        try:
            state.sublist.insert(sub)
        except ValueError:
            return
        state.subs[key] = sub

    def on_runsub(self, account: bytes, subject: bytes, queue: bytes | None) -> None:
        if not self._admitted() or not self.outbound:
            return
        state = self.accounts.get(account)
        if state is None:
            if queue is not None:
                return
            state = self.accounts[account] = RemoteAccount(INTEREST_ONLY if self.remote_iom else OPTIMISTIC)
        if queue is None and state.mode == OPTIMISTIC:
            state.no_interest.add(subject)
            return
        sub = state.subs.pop((subject, queue), None)
        if sub is not None:
            state.sublist.remove(sub)

    def interest_count(self) -> int:
        return sum(len(state.subs) for state in self.accounts.values())

    # -- messages -------------------------------------------------------------------------------------
    def send_routed(self, sub: Subscription, msg: Message) -> bool:
        """An outbound's: send `msg` (published in `sub`'s account) if the remote may want it."""
        if isinstance(msg.origin, Gateway):
            return False  # what came over a gateway never goes to another one
        account = sub.sid
        assert isinstance(account, bytes)
        subject = msg.subject
        if self.mapped:
            mapping = self.mapped.get((account, subject))
            if mapping is not None:
                return self._send_as(account, mapping[0] + subject, msg.reply, msg)
        queues: list[bytes] | None = None
        if subject.startswith(GW_REPLY_PREFIX):
            if subject[5 : 5 + GW_HASH_LEN] != self.remote_hash or len(subject) <= GW_SUBJECT_OFFSET:
                return False
        else:
            state = self.accounts.get(account)
            if state is None:
                plain = not self.remote_iom
            else:
                plain = state.mode != INTEREST_ONLY and subject not in state.no_interest
                if state.subs:
                    matched, groups = state.sublist.match(subject)
                    plain = plain or bool(matched)
                    if groups:
                        queues = self._remote_only(account, subject, groups)
            if not plain and not queues:
                return False
        reply = msg.reply
        if reply is not None and self.gateways.map_reply(account, reply):
            return self._send_as(account, subject, self.gateways.reply_prefix + reply, msg, queues)
        msg.queues = queues
        try:
            return super().send_routed(sub, msg)
        finally:
            msg.queues = None

    def _send_as(
        self,
        account: bytes,
        subject: bytes,
        reply: bytes | None,
        msg: Message,
        queues: list[bytes] | None = None,
    ) -> bool:
        """`msg` as one RMSG (HMSG) with its subject or reply mapped (`_GR_.`)."""
        out = self.out
        if out is None or self.closed:
            return False
        with_headers = msg.headers is not None and self.headers
        head = rmsg_head(account, subject, reply, queues, with_headers)
        if with_headers:
            tail = b"%d %d\r\n%s%s\r\n" % (len(msg.headers or b""), msg.size, msg.headers, msg.payload)
        else:
            tail = b"%d\r\n%s\r\n" % (msg.nbytes, msg.payload)
        return enqueue(self, out, head, b"", tail, msg.size if with_headers else msg.nbytes)

    def track_reply(self, account: bytes, routed: bytes) -> None:
        """Answers on `routed`'s own reply subject go back here mapped (see `mapped`)."""
        if not self.outbound or self.closed:
            return
        expires = time.monotonic() + REPLY_MAPPING_TTL
        self.mapped[(account, routed[GW_SUBJECT_OFFSET:])] = (routed[:GW_SUBJECT_OFFSET], expires)
        if self._sweep is None:
            self._sweep = self.server.loop.call_later(REPLY_MAPPING_TTL, self._expire_replies)

    def _expire_replies(self) -> None:
        self._sweep = None
        now = time.monotonic()
        self.mapped = {key: mapping for key, mapping in self.mapped.items() if mapping[1] > now}
        if self.mapped and not self.closed:
            self._sweep = self.server.loop.call_later(REPLY_MAPPING_TTL, self._expire_replies)

    def _remote_only(
        self, account: bytes, subject: bytes, groups: tuple[tuple[Subscription, ...], ...]
    ) -> list[bytes] | None:
        """The remote's queue groups for `subject` that have no member in our cluster (local first)."""
        sublist = self.server.account_sublists.get(account.decode("utf-8", "replace"))
        here = {g[0].queue for g in sublist.match(subject)[1]} if sublist is not None else set()
        queues = [g[0].queue for g in groups if g[0].queue is not None and g[0].queue not in here]
        return queues or None

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
        if self.outbound:
            return  # messages come on the inbound connection only
        if subject.startswith(GW_REPLY_PREFIX):
            # a reply mapped by our cluster: to us if the cluster hash is ours, with its own subject
            if subject[5 : 5 + GW_HASH_LEN] != self.gateways.own_hash or len(subject) <= GW_SUBJECT_OFFSET:
                return
            subject = subject[GW_SUBJECT_OFFSET:]
        name = account.decode("utf-8", "replace")
        sublist = self.server.account_sublists.get(name)
        if sublist is None or not self.gateways.carries(name):
            return
        if reply is not None and reply.startswith(GW_REPLY_PREFIX) and len(reply) > GW_SUBJECT_OFFSET:
            self.gateways.track_reply(account, reply)
            reply = reply[GW_SUBJECT_OFFSET:]
        head = self._heads.get(subject)
        if head is None:
            head = new_head(self._heads, subject)
        msg = self._msg
        msg.set(subject, reply, size_fields(headers, payload), headers, payload, head)
        plain, groups = sublist.match(subject)
        named = tuple(g for g in groups if queues and g[0].queue in queues)
        publish_matched(plain, named, msg, self._fanout)

    # -- our interest (inbound) -----------------------------------------------------------------------
    def send_all_subs(self, account: str, frames: bytes) -> None:
        """Switch `account` to interest-only mode: the start command, all our interest, the end."""
        if self.closed or account in self.switched:
            return
        self.switched.add(account)
        self.send(
            self.gateways.command_info(CMD_ALL_SUBS_START, account)
            + frames
            + self.gateways.command_info(CMD_ALL_SUBS_COMPLETE, account)
        )

    def close(self, reason: str, err_text: str | None = None) -> None:
        if self.closed:
            return
        self.accounts = {}
        self.mapped = {}
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        super().close(reason, err_text)


def _command_account(info: dict[str, object]) -> bytes | None:
    """The account of an INFO command: its `gateway_cmd_payload` (Go's []byte, base64 in JSON)."""
    payload = info.get("gateway_cmd_payload")
    if not isinstance(payload, str) or not payload:
        return None
    try:
        return base64.b64decode(payload)
    except ValueError:
        return None
