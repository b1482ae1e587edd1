"""Account imports and exports: streams and services shared between accounts, as nats-server does them.

An account *exports* a stream (messages published on its subjects) or a service (requests to its
subjects), to everyone or to named accounts (in operator mode: to holders of an activation token the
exporter signed). Another account *imports* it under a subject of its own (`prefix`/`to` for streams,
`to` for services).

- A stream import works through *shadow subscriptions*: when a client of the importer subscribes to a
  subject that overlaps the import's local subject, a copy of its subscription goes into the exporter's
  subject space on the export-side subject. A message published there reaches the shadow, which maps the
  subject and hands the message to the delivery policy for the client's own subscription (its deny
  permissions, echo, auto-unsubscribe apply as usual). Shadows are made for clients' subscriptions
  only, so streams are not passed on through a chain of imports (nats-server's rule).
- A service import is a subscription in the importer on the local subject. A request published there is
  published again in the exporter, under the export-side subject, with a `Nats-Request-Info` header and a
  fresh `_R_.<prefix>.<id>` reply subject whose route leads back to the original reply in the importer:
  one response (Singleton), or any number until the export's response threshold passes without one
  (Stream, Chunked; an empty message ends them).
- Both kinds of link are subscriptions whose `forward` hook the delivery policy calls (`delivery.deliver`);
  what they forward goes through `delivery.publish`/`deliver` again, in the other account. A request keeps
  the exports it went through (`Message.hops`): a second pass through the same export is a cycle and is
  dropped, and a request that came in through a service import is not forwarded to stream imports.

"""

from __future__ import annotations

import asyncio
import json
import random
import string
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pynatsd.auth.specs import (
    SINGLETON,
    STREAMED,
    AccountSpec,
    Export,
    Import,
    ServiceLink,
    StreamLink,
    link,
    split_tokens,
)
from pynatsd.base.logging import get_logger
from pynatsd.broker.delivery import (
    SERVICE_IMPORT_SID,
    Client,
    Link,
    Message,
    Subscription,
    deliver,
    publish,
    size_fields,
)
from pynatsd.protocol.subjects import has_wildcard, tokens_subset

if TYPE_CHECKING:
    from pynatsd.broker.core import Broker

log = get_logger()

log = get_logger()

REQUEST_INFO = b"Nats-Request-Info"
_FAST_BATCH = b".$FI"  # the end of a JetStream fast batch's reply subject
_JS_ACK = b"$JS.ACK."
_ALPHABET = (string.digits + string.ascii_letters).encode()


class AccountClient(Client):
    """The owner of an account's service-import and response subscriptions (no socket, never closed)."""

    def __init__(self, account: str) -> None:
        super().__init__()
        self.account = account
        self.cid = 0
        self.headers = True

    def remove_sub(self, sub: Subscription) -> None:
        """Never auto-unsubscribed."""


@dataclass(eq=False)
class ResponseRoute:
    """A `_R_` reply subject in one account that leads responses back to a reply in another."""

    subject: bytes  # the `_R_.<prefix>.<id>` subject, in `account`
    account: str  # where the responder publishes
    target: str  # where the requester waits
    reply: bytes  # the requester's reply subject, in `target`
    export: Export
    last: float = 0.0  # monotonic time of creation or of the last response
    timer: asyncio.TimerHandle | None = None  # its expiry (cancelled when it ends before)


class _StreamShadow:
    """`forward` of a shadow subscription: deliver to the client's subscription under the local subject."""

    __slots__ = ("link", "sub")

    def __init__(self, link: StreamLink, sub: Subscription) -> None:
        self.link = link
        self.sub = sub

    def __call__(self, shadow: Subscription, msg: Message) -> bool:
        if msg.hops:  # a request that came in through a service import is not re-exported (nats-server)
            return False
        subject, head = self.link.local_head(msg.subject)
        if msg.reply is not None and msg.head[4:-1] != msg.subject:
            head = msg.head  # a JetStream delivery, shown with its message's own subject wherever it goes
        mapped = Message(msg.origin)
        mapped.set(subject, msg.reply, msg.sizes, msg.headers, msg.payload, head)
        return deliver(self.sub, mapped)


class AccountLinks:
    """The imports of every account, wired into the server's subject spaces (see the module docstring)."""

    def __init__(self, server: Broker) -> None:
        self.server = server
        self.streams: dict[str, list[StreamLink]] = {}  # importer -> its stream imports
        self.services: list[tuple[ServiceLink, Subscription]] = []
        self.shadows: dict[Subscription, list[Link]] = {}  # a client's subscription -> its shadows
        self.routes: dict[bytes, ResponseRoute] = {}
        # account -> the `_R_.<6 chars>.` prefix of its response routes, and its subscription on them
        self._prefixes: dict[str, tuple[bytes, Subscription]] = {}
        self._clients: dict[str, AccountClient] = {}
        # Operator mode: the account JWT (verified, as the resolver has it) whose imports are installed,
        # and which importers depend on which exporter (re-linked when the exporter's JWT changes).
        self._registered: dict[str, object] = {}
        self._importers: dict[str, set[str]] = {}
        self._expiry: dict[str, asyncio.TimerHandle] = {}  # importer -> when its first activation expires
        self.exports: dict[str, list[Export]] = {}  # account -> its exports (monitoring)

    # -- setup ----------------------------------------------------------------------------------------
    def install(self, streams: Iterable[StreamLink], services: Iterable[ServiceLink]) -> None:
        """Add links (a service import becomes a subscription in its importer)."""
        for s in streams:
            self.streams.setdefault(s.importer, []).append(s)
        for si in services:
            sub = Link(
                self._client(si.importer), si.local, None, SERVICE_IMPORT_SID, self._service_forward(si)
            )
            self.server.sublist_for(si.importer).insert(sub)
            self.services.append((si, sub))

    # -- operator mode: links follow the account JWTs -----------------------------------------------------
    def ensure(self, name: str) -> None:
        """Link the imports of account `name` as its current JWT has them (a user of it connected, or it
        was updated). Imports that are not valid are skipped with an error, as nats-server does."""
        from pynatsd.auth import jwt

        auth = self.server.auth.jwt
        if auth is None:
            return
        acc = auth.account(name)
        if self._registered.get(name, False) is acc:
            return
        self.remove_account(name)
        self._registered[name] = acc
        self.exports[name] = list(acc.exports) if acc is not None else []
        if acc is None or not acc.imports:
            return
        specs = {name: AccountSpec(name, list(acc.exports), list(acc.imports))}
        exporters: dict[str, jwt.Account] = {}
        for imp in acc.imports:
            self._importers.setdefault(imp.account, set()).add(name)
            exporter = exporters.get(imp.account) or auth.account(imp.account)
            if exporter is None:
                kind = "service" if imp.service else "stream"
                log.error(
                    "Can't locate account [%s] for import of [%s] %s", imp.account, imp.subject.decode(), kind
                )
                continue
            exporters[imp.account] = exporter
            self.exports[imp.account] = list(exporter.exports)
            specs.setdefault(imp.account, AccountSpec(imp.account, list(exporter.exports)))

        expiries: list[int] = []

        def token_ok(export: Export, imp: Import, importer: str) -> bool:
            exporter = exporters.get(export.account)
            if exporter is None or not jwt.activation_ok(exporter, export, imp, importer):
                return False
            expiries.append(jwt.decode(imp.token, "activation").expires)
            return True

        # The other accounts' links count for cycles (nats-server skips an import that closes one).
        installed = ([s for k, v in self.streams.items() if k != name for s in v],
                     [si for si, _ in self.services if si.importer != name])  # fmt: skip
        exporters_seen = {s.exporter for s in installed[0]} | {si.exporter for si in installed[1]}
        for other in exporters_seen - specs.keys():
            known = auth.account(other)
            specs[other] = AccountSpec(other, list(known.exports) if known is not None else [])
        streams, services, errors = link(specs, token_ok, only=name, installed=installed)
        for message in errors:
            log.error("account %s: %s", name, message)
        self.install(streams, services)
        ends = [e for e in expiries if e > 0]
        if ends:  # an activation that expires ends its import then (linked again without it)
            delay = max(0.0, min(ends) - time.time() + 0.5)
            self._expiry[name] = self.server.loop.call_later(delay, self.refresh, name)
        self.resubscribe(name)

    def refresh(self, name: str) -> None:
        """Account `name`'s JWT changed: link it again, and the accounts importing from it."""
        for account in {name, *self._importers.get(name, ())}:
            if account in self._registered:
                self._registered.pop(account)
                self.ensure(account)

    def refresh_all(self) -> None:
        """After a reload (preloaded account JWTs may have changed)."""
        for account in list(self._registered):
            self._registered.pop(account, None)
            self.ensure(account)

    def uninstall(self) -> None:
        """Remove every link from the server's subject spaces (pending response routes are dropped)."""
        for si, sub in self.services:
            self.server.sublist_for(si.importer).remove(sub)
        for sub in list(self.shadows):
            self.unsubscribed(sub)
        for account, (_, sub) in self._prefixes.items():
            self.server.sublist_for(account).remove(sub)
        for route in list(self.routes.values()):
            self._drop(route)
        self.services, self.streams, self._prefixes = [], {}, {}

    def remove_account(self, importer: str) -> None:
        """Drop the imports of `importer` (its account is reconfigured); its clients' shadows go too."""
        timer = self._expiry.pop(importer, None)
        if timer is not None:
            timer.cancel()
        self.streams.pop(importer, None)
        for si, sub in [x for x in self.services if x[0].importer == importer]:
            self.server.sublist_for(importer).remove(sub)
            self.services.remove((si, sub))
        for sub in [s for s in self.shadows if getattr(s.conn, "account", None) == importer]:
            self.unsubscribed(sub)

    def resubscribe(self, account: str | None = None) -> None:
        """Make the shadows of the subscriptions in `account` (default: every account) again, clients' and
        internal ones alike (after the imports changed)."""
        spaces = self.server.account_sublists
        for name in [account] if account is not None else list(spaces):
            sublist = spaces.get(name)
            for sub in list(sublist.subscriptions()) if sublist is not None else []:
                if not isinstance(sub, Link):  # not a link's own subscription
                    self.unsubscribed(sub)
                    self.subscribed(name, sub)

    def _client(self, account: str) -> AccountClient:
        client = self._clients.get(account)
        if client is None:
            client = self._clients[account] = AccountClient(account)
        return client

    def _service_forward(self, si: ServiceLink) -> Callable[[Subscription, Message], bool]:
        return lambda sub, msg: self.request(si, msg)

    # -- monitoring ------------------------------------------------------------------------------------
    def describe(self, account: str) -> dict[str, Any]:
        """/accountz's `exports`, `imports` and `responses` of `account`, in nats-server's shapes."""
        exports = []
        for e in self.exports.get(account, []):
            entry: dict[str, Any] = {
                "subject": e.subject.decode(),
                "type": "service" if e.service else "stream",
            }
            if e.token_required:
                entry["token_req"] = True
            if e.service:
                entry["response_type"] = "Streamed" if e.response_type == STREAMED else e.response_type
            if e.token_position:
                entry["account_token_position"] = e.token_position
            if e.approved:
                entry["approved_accounts"] = sorted(e.approved)
            exports.append(entry)
        imports: list[dict[str, Any]] = [
            {"subject": s.source.decode(), "account": s.exporter, "local_subject": s.local.decode(),
             "type": "stream", "invalid": False, "share": False, "tracking": False}
            for s in self.streams.get(account, [])
        ]  # fmt: skip
        imports += [_service_import_info(si.remote, si.exporter, si.local) for si, _ in self.services
                    if si.importer == account]  # fmt: skip
        responses = {r.subject.decode(): _service_import_info(r.reply, r.target, r.subject)
                     for r in self.routes.values() if r.account == account}  # fmt: skip
        out: dict[str, Any] = {}
        for key, value in (("exports", exports), ("imports", imports), ("responses", responses)):
            if value:
                out[key] = value
        return out

    # -- stream imports: shadow subscriptions ------------------------------------------------------------
    def subscribed(self, account: str, sub: Subscription) -> None:
        """A client of `account` subscribed: shadow it in the accounts whose streams it imports."""
        links = self.streams.get(account)
        if not links:
            return
        shadows: list[Link] = []
        for im in links:
            subject = _shadow_subject(im, sub.subject)
            if subject is None:
                continue
            shadow = Link(sub.conn, subject, sub.queue, sub.sid, _StreamShadow(im, sub))
            try:
                self.server.sublist_for(im.exporter).insert(shadow)
            except ValueError:
                continue
            shadows.append(shadow)
        if shadows:
            self.shadows[sub] = shadows

    def unsubscribed(self, sub: Subscription) -> None:
        """A client's subscription went: its shadows go too."""
        shadows = self.shadows.pop(sub, None)
        if shadows is None:
            return
        for shadow in shadows:
            forward = shadow.forward
            assert isinstance(forward, _StreamShadow)
            self.server.sublist_for(forward.link.exporter).remove(shadow)

    # -- service imports: requests and their responses ---------------------------------------------------
    def request(self, si: ServiceLink, msg: Message) -> bool:
        """A request published on a service import: publish it in the exporter. True if anyone got it."""
        export = si.export
        if any(h is export for h in msg.hops):
            return False  # a cycle through the same export
        subject = si.remote_subject(msg.subject)
        route, reply = None, msg.reply
        # JetStream acks keep their reply (as nats-server: pull consumers across accounts need it).
        if reply is not None and not reply.startswith(_JS_ACK):
            route = self._route(si.exporter, si.importer, reply, export)
            reply = route.subject
        shared = si.request_info
        info = shared(msg, si.importer) if shared is not None else _request_info(msg, si.importer)
        if msg.reply is not None and msg.reply.endswith(_FAST_BATCH) and route is not None:
            # A fast batch is named in its reply subject: nats-server keeps the original for the stream.
            info = info[:-1] + b',"reply":' + json.dumps(msg.reply.decode(errors="replace")).encode() + b"}"
        headers = _with_request_info(msg.headers, info)
        out = Message(msg.origin)
        out.hops = (*msg.hops, export)
        out.set(
            subject, reply, size_fields(headers, msg.payload), headers, msg.payload, b"MSG " + subject + b" "
        )
        delivered = publish(self.server.sublist_for(si.exporter), out, self.server.fanout.counts)
        if not delivered and route is not None:
            self._drop(route)
        return delivered

    def _route(self, account: str, target: str, reply: bytes, export: Export) -> ResponseRoute:
        known = self._prefixes.get(account)
        if known is None:
            prefix = b"_R_." + _random(6) + b"."
            sub = Link(self._client(account), prefix + b">", None, b"rsi", self.respond)
            self.server.sublist_for(account).insert(sub)
            self._prefixes[account] = (prefix, sub)
        else:
            prefix = known[0]
        route = ResponseRoute(prefix + _random(6), account, target, reply, export, time.monotonic())
        self.routes[route.subject] = route
        route.timer = self.server.loop.call_later(export.threshold, self._expire, route)
        return route

    def _drop(self, route: ResponseRoute) -> None:
        """End a response route before its expiry."""
        if self.routes.pop(route.subject, None) is not None and route.timer is not None:
            route.timer.cancel()
            route.timer = None

    def _expire(self, route: ResponseRoute) -> None:
        if self.routes.get(route.subject) is not route:
            return
        left = route.last + route.export.threshold - time.monotonic()
        if left > 0:
            route.timer = self.server.loop.call_later(left, self._expire, route)
        else:
            del self.routes[route.subject]
            route.timer = None

    def respond(self, sub: Subscription, msg: Message) -> bool:
        """A message on an account's `_R_` subjects: a response, delivered to the requester's reply."""
        route = self.routes.get(msg.subject)
        if route is None:
            return False
        nested = None
        if msg.reply is not None:  # a response that asks for an answer: routed back the same way
            nested = self._route(route.target, route.account, msg.reply, route.export)
        out = Message(msg.origin)
        out.hops = (*msg.hops, route.export)
        reply = route.reply
        out.set(reply, nested.subject if nested else None, msg.sizes, msg.headers, msg.payload,
                b"MSG " + reply + b" ")  # fmt: skip
        delivered = publish(self.server.sublist_for(route.target), out, self.server.fanout.counts)
        last = msg.headers is None and not msg.payload  # an empty message ends a stream of responses
        if not delivered or route.export.response_type == SINGLETON or last:
            self._drop(route)
        else:
            route.last = time.monotonic()
        return delivered


def _service_import_info(remote: bytes, account: str, local: bytes) -> dict[str, Any]:
    return {"subject": remote.decode(), "account": account, "to": local.decode(),
            "local_subject": local.decode(), "type": "service", "invalid": False, "share": False,
            "tracking": False}  # fmt: skip


def _random(n: int) -> bytes:
    return bytes(random.choice(_ALPHABET) for _ in range(n))


def _shadow_subject(im: StreamLink, subject: bytes) -> bytes | None:
    """The subject of the shadow of a subscription on `subject` (nats-server's addShadowSubscriptions), or
    None when the subscription does not overlap the import."""
    if subject == im.local:
        return im.source
    tokens, local = split_tokens(subject), split_tokens(im.local)
    if tokens_subset(tokens, local):  # narrower than the import: mapped back
        return im.reverse().apply(subject) if im.transform is not None else (
            subject if im.use_published else im.source)  # fmt: skip
    if not has_wildcard(subject):
        return None
    if tokens_subset(local, tokens):  # wider: the whole import
        return im.source
    # Overlapping wildcards: the subscription narrowed to what the import can deliver.
    overlap = list(tokens)
    for i, t in enumerate(overlap[: len(local)]):
        if t == b"*" and local[i] != b">":
            overlap[i] = local[i]
    if overlap[-1] == b">" and len(local) >= len(overlap):
        overlap[-1] = local[len(overlap) - 1]
        overlap += local[len(overlap) :]
    if not tokens_subset(overlap, local):
        return None
    joined = b".".join(overlap)
    if im.transform is not None:
        return im.reverse().apply(joined)
    return joined if im.use_published else im.source


def _request_info(msg: Message, account: str) -> bytes:
    """The `Nats-Request-Info` value nats-server adds to a request crossing a service import (without
    `share`: the requester's account and round-trip time; through a chain, the first one's and `svc`)."""
    previous = _header_value(msg.headers, REQUEST_INFO) if msg.hops else None
    if previous is not None:
        try:
            before: dict[str, Any] = json.loads(previous)
        except ValueError:
            before = {}
        before["svc"] = account
        ordered = {k: before[k] for k in ("acc", "svc", "rtt") if k in before}
        return json.dumps({**ordered, **before}, separators=(",", ":")).encode()
    info: dict[str, object] = {"acc": account}
    rtt = getattr(msg.origin, "rtt", None)
    if rtt:
        info["rtt"] = int(rtt * 1e9)
    return json.dumps(info, separators=(",", ":")).encode()


def _header_value(headers: bytes | None, name: bytes) -> bytes | None:
    if headers is None:
        return None
    for line in headers.split(b"\r\n")[1:]:
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == name.lower():
            return value.strip()
    return None


def _with_request_info(headers: bytes | None, info: bytes) -> bytes:
    line = REQUEST_INFO + b": " + info + b"\r\n"
    if headers is None:
        return b"NATS/1.0\r\n" + line + b"\r\n"
    lines = headers.rstrip(b"\r\n").split(b"\r\n")
    kept = [lines[0]] + [x for x in lines[1:] if x.partition(b":")[0].strip().lower() != REQUEST_INFO.lower()]
    return b"\r\n".join(kept) + b"\r\n" + line + b"\r\n"
