"""Account imports and exports as specified (pynatsd.accounts.links wires them at run time): the specs read
from `accounts {}` blocks or account JWTs, the subject mappings of imports, and `link`, which checks them as
nats-server does (missing exports, unauthorized or cyclic imports) and returns the links to install.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pynatsd.base.blocks import AccountConfig

from pynatsd.protocol.subjects import has_wildcard, overlap, subset

SINGLETON, STREAMED, CHUNKED = "Singleton", "Stream", "Chunked"
RESPONSE_TYPES = {"single": SINGLETON, "singleton": SINGLETON, "stream": STREAMED, "chunk": CHUNKED,
                  "chunked": CHUNKED}  # fmt: skip
DEFAULT_RESPONSE_THRESHOLD = 120.0  # seconds a response route waits for its (next) response
_HEADS_CACHED = 4096  # mapped subjects remembered per stream import


class LinkError(ValueError):
    """An import or export nats-server would not accept."""


# -- subjects -------------------------------------------------------------------------------------------
def split_tokens(subject: bytes) -> list[bytes]:
    return subject.split(b".")


class Transform:
    """A subject mapping between two patterns whose wildcards correspond: `*` and `>` in the target take the
    source's wildcards in order, `$N` (or `{{wildcard(N)}}`) the N-th. Every source wildcard must be used
    (nats-server's strict transforms for imports)."""

    def __init__(self, source: bytes, target: bytes) -> None:
        src = split_tokens(source)
        self.source = source
        self.wildcards = [i for i, t in enumerate(src) if t in (b"*", b">")]
        self.tail = bool(src) and src[-1] == b">"
        # Each target token: a literal, or the index (into `wildcards`) of the source wildcard it takes.
        self.parts: list[bytes | int] = []
        stars = 0
        used: set[int] = set()
        for token in split_tokens(target):
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
        tokens = split_tokens(subject)
        values = [tokens[i] for i in self.wildcards]
        if self.tail:
            values[-1] = b".".join(tokens[self.wildcards[-1] :])
        return b".".join(p if isinstance(p, bytes) else values[p] for p in self.parts)

    def reverse(self) -> Transform:
        """The mapping back: from the target's subjects to the source's."""
        back = [b">" if isinstance(p, int) and p == len(self.wildcards) - 1 and self.tail else
                b"*" if isinstance(p, int) else p for p in self.parts]  # fmt: skip
        order = [p for p in self.parts if isinstance(p, int)]  # source wildcard per target wildcard
        src = split_tokens(self.source)
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
    tokens = split_tokens(subject)
    return position == 0 or (0 < position <= len(tokens) and tokens[position - 1] == b"*")


def _untokenize(subject: bytes) -> bytes:
    """A mapping target as a subscription subject: its `$N` references become `*`."""
    return b".".join(b"*" if _reference(t) is not None else t for t in split_tokens(subject))


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
    request_info: Callable[[Any, str], bytes] | None = None  # (delivery.Message, importer)

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
        tokens = split_tokens(imp.subject) if imp.subject != export.subject else []
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
        if s.importer != acc.name or not overlap(to, s.local):
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
        if s.importer != acc.name or not overlap(local, s.remote):
            continue
        if s.exporter in visited:
            return True
        nxt = specs.get(s.exporter)
        sub = s.local if subset(s.local, local) else local
        if nxt is not None and _service_cycle(nxt, sub, visited | {acc.name}, done, specs):
            return True
    return False


# -- the running links ------------------------------------------------------------------------------------
def specs_from_config(accounts: dict[str, AccountConfig]) -> dict[str, AccountSpec]:
    """The `accounts {}` blocks (as the config schema normalized them) as AccountSpecs."""
    specs: dict[str, AccountSpec] = {}
    for name, block in accounts.items():
        spec = specs[name] = AccountSpec(name)
        for e in block.exports:
            service = "service" in e
            approved = e.get("accounts")
            spec.exports.append(Export(
                name, str(e["service" if service else "stream"]).encode(), service,
                None if approved is None else frozenset(approved),
                response_type=e.get("response_type", SINGLETON),
                threshold=e.get("threshold", DEFAULT_RESPONSE_THRESHOLD),
                token_position=e.get("account_token_position", 0),
            ))  # fmt: skip
        for i in block.imports:
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
