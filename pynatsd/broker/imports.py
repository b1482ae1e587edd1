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

Configuration (`accounts {}` blocks, or account JWTs in operator mode) is turned into `AccountSpec`s and
checked by `link`, which reports what nats-server reports (missing exports, unauthorized or cyclic
imports) and returns the links `AccountLinks` wires into the server.
"""

from __future__ import annotations

import asyncio
import json
import random
import string
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pynatsd.broker.delivery import Client, Link, Message, Subscription, deliver, publish, size_fields
from pynatsd.broker.logging import get_logger

if TYPE_CHECKING:
    from pynatsd.broker.server import Server

log = get_logger()

SINGLETON, STREAMED, CHUNKED = "Singleton", "Stream", "Chunked"
RESPONSE_TYPES = {"single": SINGLETON, "singleton": SINGLETON, "stream": STREAMED, "chunk": CHUNKED,
                  "chunked": CHUNKED}  # fmt: skip
DEFAULT_RESPONSE_THRESHOLD = 120.0  # seconds a response route waits for its (next) response
REQUEST_INFO = b"Nats-Request-Info"
_JS_ACK = b"$JS.ACK."
_HEADS_CACHED = 4096  # mapped subjects remembered per stream import
_ALPHABET = (string.digits + string.ascii_letters).encode()


class LinkError(ValueError):
    """An import or export nats-server would not accept."""


# -- subjects -------------------------------------------------------------------------------------------
def _tokens(subject: bytes) -> list[bytes]:
    return subject.split(b".")


def has_wildcard(subject: bytes) -> bool:
    return any(t in (b"*", b">") for t in _tokens(subject))


def subset(inner: bytes, outer: bytes) -> bool:
    """True if every subject `inner` matches is matched by `outer` (nats-server's isSubsetMatch)."""
    return _subset(_tokens(inner), _tokens(outer))


def _subset(a: list[bytes], b: list[bytes]) -> bool:
    for i, t in enumerate(b):
        if i >= len(a):
            return False
        if t == b">":
            return True
        if a[i] == b">":
            return False
        if t != b"*" and a[i] != t:
            return False
    return len(a) == len(b)


def collide(a: bytes, b: bytes) -> bool:
    """True if some subject matches both patterns (nats-server's SubjectsCollide)."""
    ta, tb = _tokens(a), _tokens(b)
    for i in range(max(len(ta), len(tb))):
        if i >= len(ta) or i >= len(tb):
            return False
        x, y = ta[i], tb[i]
        if x == b">" or y == b">":
            return True
        if x != y and x != b"*" and y != b"*":
            return False
    return True


class Transform:
    """A subject mapping between two patterns whose wildcards correspond: `*` and `>` in the target take the
    source's wildcards in order, `$N` (or `{{wildcard(N)}}`) the N-th. Every source wildcard must be used
    (nats-server's strict transforms for imports)."""

    def __init__(self, source: bytes, target: bytes) -> None:
        src = _tokens(source)
        self.source = source
        self.wildcards = [i for i, t in enumerate(src) if t in (b"*", b">")]
        self.tail = bool(src) and src[-1] == b">"
        # Each target token: a literal, or the index (into `wildcards`) of the source wildcard it takes.
        self.parts: list[bytes | int] = []
        stars = 0
        used: set[int] = set()
        for token in _tokens(target):
            ref = _reference(token)
            if token in (b"*", b">"):
                if token == b">" and not self.tail:
                    raise LinkError(f"no matching wildcard for {token.decode()!r} in {source.decode()!r}")
                index = len(self.wildcards) - 1 if token == b">" else stars
                stars += token == b"*"
            elif ref is not None:
                index = ref - 1
            else:
                self.parts.append(token)
                continue
            if not 0 <= index < len(self.wildcards) or (src[self.wildcards[index]] == b">") != (
                token == b">"
            ):
                raise LinkError(f"wildcard {token.decode()!r} does not match the source {source.decode()!r}")
            used.add(index)
            self.parts.append(index)
        if used != set(range(len(self.wildcards))):
            raise LinkError(
                f"invalid mapping destination: not using all of the token wildcard(s) in {target.decode()}"
            )
        self.target = target

    def apply(self, subject: bytes) -> bytes:
        tokens = _tokens(subject)
        values = [tokens[i] for i in self.wildcards]
        if self.tail:
            values[-1] = b".".join(tokens[self.wildcards[-1] :])
        return b".".join(p if isinstance(p, bytes) else values[p] for p in self.parts)

    def reverse(self) -> Transform:
        """The mapping back: from the target's subjects to the source's."""
        back = [b">" if isinstance(p, int) and p == len(self.wildcards) - 1 and self.tail else
                b"*" if isinstance(p, int) else p for p in self.parts]  # fmt: skip
        order = [p for p in self.parts if isinstance(p, int)]  # source wildcard per target wildcard
        src = _tokens(self.source)
        out: list[bytes] = []
        for i, token in enumerate(src):
            if i in self.wildcards:
                nth = order.index(self.wildcards.index(i)) + 1
                out.append(b">" if token == b">" else b"$%d" % nth)
            else:
                out.append(token)
        return Transform(b".".join(back), b".".join(out))


def valid_token_position(subject: bytes, position: int) -> bool:
    """An export's account_token_position must point at a `*` of its subject (0: none)."""
    tokens = _tokens(subject)
    return position == 0 or (0 < position <= len(tokens) and tokens[position - 1] == b"*")


def _untokenize(subject: bytes) -> bytes:
    """A mapping target as a subscription subject: its `$N` references become `*`."""
    return b".".join(b"*" if _reference(t) is not None else t for t in _tokens(subject))


def _reference(token: bytes) -> int | None:
    text = token.decode(errors="replace")
    if text.startswith("$") and text[1:].isdigit():
        return int(text[1:])
    inner = text.replace(" ", "")
    if inner.startswith("{{wildcard(") and inner.endswith(")}}") and inner[11:-3].isdigit():
        return int(inner[11:-3])
    if inner.startswith("{{"):
        raise LinkError(f"subject mapping function {text!r} is not supported by pynatsd in imports")
    return None


# -- configuration --------------------------------------------------------------------------------------
@dataclass(eq=False)  # compared by identity: a request remembers the exports it went through
class Export:
    account: str
    subject: bytes
    service: bool
    approved: frozenset[str] | None = None  # private export: these accounts only; None: public
    token_required: bool = False  # operator mode: an activation token signed by the exporter
    response_type: str = SINGLETON
    threshold: float = DEFAULT_RESPONSE_THRESHOLD
    revocations: dict[str, int] = field(default_factory=dict)  # activation subject -> revoked before
    token_position: int = 0  # account_token_position: that token of an import names its importer


@dataclass
class Import:
    service: bool
    account: str  # the exporter
    subject: bytes  # in the exporter's subject space
    to: bytes = b""  # in the importer's: the local subject ("": the same)
    prefix: bytes = b""  # streams: the local subject is prefix + subject
    token: str = ""  # operator mode: the activation JWT


@dataclass
class AccountSpec:
    name: str
    exports: list[Export] = field(default_factory=list)
    imports: list[Import] = field(default_factory=list)


#: Operator mode: does `token` grant `importer` the import `imp` of `export`? (checks signature, subject,
#: expiry and the export's revocations).
TokenCheck = Callable[[Export, Import, str], bool]


@dataclass(eq=False)
class StreamLink:
    importer: str
    exporter: str
    source: bytes  # the export-side subject (nats-server's im.from)
    local: bytes  # the importer's subject (im.to)
    transform: Transform | None  # source -> local, when both have wildcards and differ
    use_published: bool  # wildcard import under the same subject: deliver as published
    _reverse: Transform | None = None
    # published subject -> (local subject, `MSG local `): mapped once per subject, not per message
    _heads: dict[bytes, tuple[bytes, bytes]] = field(default_factory=dict)

    def local_subject(self, subject: bytes) -> bytes:
        if self.transform is not None:
            return self.transform.apply(subject)
        return subject if self.use_published else self.local

    def local_head(self, subject: bytes) -> tuple[bytes, bytes]:
        """The local subject of a message published on `subject`, and its `MSG subject ` head."""
        found = self._heads.get(subject)
        if found is None:
            local = self.local_subject(subject)
            found = (local, b"MSG " + local + b" ")
            if len(self._heads) >= _HEADS_CACHED:
                self._heads.clear()  # a publisher cycling through many subjects: start over
            self._heads[subject] = found
        return found

    def reverse(self) -> Transform:
        if self._reverse is None:
            assert self.transform is not None
            self._reverse = self.transform.reverse()
        return self._reverse


@dataclass(eq=False)
class ServiceLink:
    importer: str
    exporter: str
    local: bytes  # subscribed in the importer (nats-server's si.from)
    remote: bytes  # the export-side subject (si.to)
    transform: Transform | None  # local -> remote
    use_published: bool
    export: Export
    # A request's `Nats-Request-Info` value, from it and the importer (None: nats-server's unshared one).
    request_info: Callable[[Message, str], bytes] | None = None

    def remote_subject(self, subject: bytes) -> bytes:
        if self.transform is not None:
            return self.transform.apply(subject)
        return subject if self.use_published else self.remote


def _find_export(spec: AccountSpec, subject: bytes, service: bool) -> Export | None:
    exports = [e for e in spec.exports if e.service == service]
    for e in exports:  # an exact entry first, then any covering one
        if e.subject == subject:
            return e
    return next((e for e in exports if subset(subject, e.subject)), None)


def _authorized(export: Export, importer: str, imp: Import, check_token: TokenCheck | None) -> bool:
    """nats-server's checkAuth: an account token position first, then a token, then the named accounts."""
    if export.token_position:
        # The importer's name must stand at that token of the imported subject (an import of the export's
        # own wildcard subject names nobody).
        tokens = _tokens(imp.subject) if imp.subject != export.subject else []
        return export.token_position <= len(tokens) and tokens[export.token_position - 1] == importer.encode()
    if export.token_required:
        return bool(imp.token) and check_token is not None and check_token(export, imp, importer)
    return export.approved is None or importer in export.approved


def link(
    specs: dict[str, AccountSpec],
    check_token: TokenCheck | None = None,
    only: str | None = None,
    installed: tuple[list[StreamLink], list[ServiceLink]] = ([], []),
) -> tuple[list[StreamLink], list[ServiceLink], list[str]]:
    """The links of every import of `specs` (or of account `only`'s), and nats-server's errors for those
    it refuses. Links `installed` already (of other accounts) count for the cycle checks."""
    streams, services = list(installed[0]), list(installed[1])
    before = len(streams), len(services)
    errors: list[str] = []
    for spec in specs.values():
        if only is not None and spec.name != only:
            continue
        for imp in spec.imports:
            kind = "service" if imp.service else "stream"
            exporter = specs.get(imp.account)
            if exporter is None:
                errors.append(f'"{imp.account}" account not defined for {kind} import')
                continue
            try:
                if imp.service:
                    services.append(_service_link(spec, exporter, imp, services, specs, check_token))
                else:
                    streams.append(_stream_link(spec, exporter, imp, streams, specs, check_token))
            except LinkError as err:
                errors.append(f'Error adding {kind} import "{imp.subject.decode()}": {err}')
    return streams[before[0] :], services[before[1] :], errors


def _stream_link(
    spec: AccountSpec,
    exporter: AccountSpec,
    imp: Import,
    done: list[StreamLink],
    specs: dict[str, AccountSpec],
    check_token: TokenCheck | None,
) -> StreamLink:
    source = imp.subject
    export = _find_export(exporter, source, service=False)
    if export is None or not _authorized(export, spec.name, imp, check_token):
        raise LinkError("stream import not authorized")
    if imp.prefix and has_wildcard(imp.prefix):
        raise LinkError("stream import prefix can not contain wildcard tokens")
    target = (imp.prefix.rstrip(b".") + b"." + source) if imp.prefix else (imp.to or source)
    local = _untokenize(target)  # `$N` references are wildcards of the local subject
    for subject in (local, source):
        if _stream_cycle(exporter, subject, {spec.name}, done, specs):
            raise LinkError("import forms a cycle")
    if any(s.importer == spec.name and s.exporter == exporter.name and s.source == source for s in done):
        raise LinkError("stream import already exists")
    transform, use_published = None, False
    if has_wildcard(source):
        if target == source:
            use_published = True
        else:
            try:
                transform = Transform(source, target)
            except LinkError as err:
                raise LinkError(
                    f'failed to create mapping transform for stream import subject from "{source.decode()}" '
                    f'to "{target.decode()}": {err}'
                ) from None
    return StreamLink(spec.name, exporter.name, source, local, transform, use_published)


def _stream_cycle(
    acc: AccountSpec, to: bytes, visited: set[str], done: list[StreamLink], specs: dict[str, AccountSpec]
) -> bool:
    """nats-server's checkStreamImportsForCycles over the links made so far."""
    if not any(subset(to, e.subject) for e in acc.exports if not e.service):
        return False
    for s in done:
        if s.importer != acc.name or not collide(to, s.local):
            continue
        if s.exporter in visited:
            return True
        nxt = specs.get(s.exporter)
        sub = s.local if subset(s.local, to) else to
        if nxt is not None and _stream_cycle(nxt, sub, visited | {acc.name}, done, specs):
            return True
    return False


def _service_link(
    spec: AccountSpec,
    exporter: AccountSpec,
    imp: Import,
    done: list[ServiceLink],
    specs: dict[str, AccountSpec],
    check_token: TokenCheck | None,
) -> ServiceLink:
    remote, target = imp.subject, imp.to or imp.subject
    local = _untokenize(target)  # subscribed with `$N` references as wildcards
    export = _find_export(exporter, remote, service=True)
    if export is None or not _authorized(export, spec.name, imp, check_token):
        raise LinkError("service import not authorized")
    if _service_cycle(exporter, local, {spec.name}, done, specs):
        raise LinkError("import forms a cycle")
    for other in done:
        if other.importer == spec.name and other.exporter == exporter.name and other.local == local:
            raise LinkError(
                f'duplicate service import subject "{local.decode()}", previously used in import for '
                f'account "{exporter.name}", subject "{other.remote.decode()}"'
            )
    transform, use_published = None, False
    if has_wildcard(remote):  # else every local subject maps to the one remote subject
        if target == remote:
            use_published = True
        else:
            try:
                transform = Transform(remote, target).reverse()
            except LinkError as err:
                raise LinkError(
                    f'failed to create mapping transform for service import subject from "{target.decode()}" '
                    f'to "{remote.decode()}": {err}'
                ) from None
    return ServiceLink(spec.name, exporter.name, local, remote, transform, use_published, export)


def _service_cycle(
    acc: AccountSpec, local: bytes, visited: set[str], done: list[ServiceLink], specs: dict[str, AccountSpec]
) -> bool:
    """nats-server's checkServiceImportsForCycles over the links made so far."""
    for s in done:
        if s.importer != acc.name or not collide(local, s.remote):
            continue
        if s.exporter in visited:
            return True
        nxt = specs.get(s.exporter)
        sub = s.local if subset(s.local, local) else local
        if nxt is not None and _service_cycle(nxt, sub, visited | {acc.name}, done, specs):
            return True
    return False


# -- the running links ------------------------------------------------------------------------------------
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
        mapped = Message(msg.origin)
        mapped.set(subject, msg.reply, msg.sizes, msg.headers, msg.payload, head)
        return deliver(self.sub, mapped)


class AccountLinks:
    """The imports of every account, wired into the server's subject spaces (see the module docstring)."""

    def __init__(self, server: Server) -> None:
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
            sub = Link(self._client(si.importer), si.local, None, b"si", self._service_forward(si))
            self.server.sublist_for(si.importer).insert(sub)
            self.services.append((si, sub))

    # -- operator mode: links follow the account JWTs -----------------------------------------------------
    def ensure(self, name: str) -> None:
        """Link the imports of account `name` as its current JWT has them (a user of it connected, or it
        was updated). Imports that are not valid are skipped with an error, as nats-server does."""
        from pynatsd.broker import jwt

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
    tokens, local = _tokens(subject), _tokens(im.local)
    if _subset(tokens, local):  # narrower than the import: mapped back
        return im.reverse().apply(subject) if im.transform is not None else (
            subject if im.use_published else im.source)  # fmt: skip
    if not any(t in (b"*", b">") for t in tokens):
        return None
    if _subset(local, tokens):  # wider: the whole import
        return im.source
    # Overlapping wildcards: the subscription narrowed to what the import can deliver.
    overlap = list(tokens)
    for i, t in enumerate(overlap[: len(local)]):
        if t == b"*" and local[i] != b">":
            overlap[i] = local[i]
    if overlap[-1] == b">" and len(local) >= len(overlap):
        overlap[-1] = local[len(overlap) - 1]
        overlap += local[len(overlap) :]
    if not _subset(overlap, local):
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


def specs_from_config(accounts: dict[str, dict[str, Any]]) -> dict[str, AccountSpec]:
    """The `accounts {}` blocks (as the config schema normalized them) as AccountSpecs."""
    specs: dict[str, AccountSpec] = {}
    for name, block in accounts.items():
        spec = specs[name] = AccountSpec(name)
        for e in block.get("exports", []) or []:
            service = "service" in e
            approved = e.get("accounts")
            spec.exports.append(Export(
                name, str(e["service" if service else "stream"]).encode(), service,
                None if approved is None else frozenset(approved),
                response_type=e.get("response_type", SINGLETON),
                threshold=e.get("threshold", DEFAULT_RESPONSE_THRESHOLD),
                token_position=e.get("account_token_position", 0),
            ))  # fmt: skip
        for i in block.get("imports", []) or []:
            service = "service" in i
            source = i["service" if service else "stream"]
            spec.imports.append(Import(
                service, source["account"], source["subject"].encode(),
                to=str(i.get("to", "")).encode(), prefix=str(i.get("prefix", "")).encode(),
            ))  # fmt: skip
    return specs


def links_from_jwt(account: str, nats: dict[str, Any]) -> tuple[list[Export], list[Import]]:
    """The `exports` and `imports` of an account JWT's claims (the jwt library's fields); raises LinkError
    on what pynatsd does not implement (an account JWT with those is not used: fail closed)."""
    exports: list[Export] = []
    for e in nats.get("exports") or []:
        kind = e.get("type")
        if kind not in ("stream", "service") or not isinstance(e.get("subject"), str):
            raise LinkError(f"export {e.get('subject')!r}: invalid export type {kind!r}")
        position = e.get("account_token_position") or 0
        if (
            not isinstance(position, int)
            or position < 0
            or not valid_token_position(e["subject"].encode(), position)
        ):
            raise LinkError(f"export {e['subject']!r}: invalid subject for account_token_position {position}")
        if e.get("service_latency"):
            raise LinkError("service latency tracking is not supported by pynatsd")
        if e.get("allow_trace"):
            raise LinkError("message tracing is not supported by pynatsd")
        threshold = e.get("response_threshold") or 0
        revocations = {k: v for k, v in (e.get("revocations") or {}).items() if isinstance(v, int)}
        exports.append(Export(
            account, e["subject"].encode(), kind == "service",
            token_required=bool(e.get("token_req")),
            response_type=RESPONSE_TYPES.get(str(e.get("response_type") or "").lower(), SINGLETON),
            threshold=threshold / 1e9 if threshold > 0 else DEFAULT_RESPONSE_THRESHOLD,
            revocations=revocations, token_position=position,
        ))  # fmt: skip
    imports: list[Import] = []
    for i in nats.get("imports") or []:
        kind, subject = i.get("type"), i.get("subject")
        if kind not in ("stream", "service") or not isinstance(subject, str) or not i.get("account"):
            raise LinkError(f"import {subject!r}: invalid import")
        if i.get("share"):
            raise LinkError("sharing requester details with services (latency tracking) is not supported")
        if i.get("allow_trace"):
            raise LinkError("message tracing is not supported by pynatsd")
        local, to = str(i.get("local_subject") or "").encode(), str(i.get("to") or "").encode()
        if kind == "stream":  # `to` (deprecated) is a prefix for streams, local_subject a mapping
            imp = Import(False, i["account"], subject.encode(), to=local, prefix=b"" if local else to)
        elif local:  # services: local_subject is the importer's subject
            imp = Import(True, i["account"], subject.encode(), to=local)
        else:  # the older form: `subject` is the importer's, `to` the exporter's
            imp = Import(True, i["account"], (to or subject.encode()), to=subject.encode())
        imp.token = str(i.get("token") or "")
        imports.append(imp)
    return exports, imports
