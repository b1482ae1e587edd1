"""Decentralized (JWT) authentication: NATS v2 JWTs and the operator → account → user chain.

A NATS JWT is `base64url(header).base64url(claims).base64url(signature)`, the signature an ed25519 one by
the claims' issuer (a public nkey) over `header.claims`. Operators are trusted from the config
(`operator` JWTs or `trusted_keys`); accounts come from the resolver (`MEMORY` with `resolver_preload`)
and must be issued by a trusted operator key; users present their JWT in CONNECT, issued by their
account or one of its signing keys, and sign the INFO nonce with their nkey (unless a bearer token).
`JwtAuthenticator.authenticate` mirrors nats-server's processClientOrLeafAuthentication for that path.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import itertools
import json
import logging
import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pynatsd.auth.nkeys import valid_public_nkey
from pynatsd.auth.specs import Export, Import, LinkError, links_from_jwt
from pynatsd.auth.users import Connecting, Permissions, ResponsePermission, Rule
from pynatsd.protocol import errors
from pynatsd.protocol.subjects import is_valid_subject, subset

if TYPE_CHECKING:
    from pynatsd.base.blocks import TrustedOperators
    from pynatsd.base.options import Options
    from pynatsd.protocol.connect import ConnectOptions

log = logging.getLogger("pynatsd.jwt")

MAX_TOKEN_SIZE = 1024 * 1024  # the jwt library's limit
NO_LIMIT = -1
# Which key may issue which claim (the jwt library's ExpectedPrefixes).
_ISSUER_PREFIX = {"operator": "O", "account": "O", "user": "A", "activation": "A",
                  "authorization_response": "A"}  # fmt: skip
_SUBJECT_PREFIX = {"operator": "O", "account": "A", "user": "U", "activation": "A",
                   "authorization_response": "U"}  # fmt: skip
_KNOWN_CONNECTION_TYPES = frozenset({"STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS",
                                     "IN_PROCESS"})  # fmt: skip
_DECORATION = "-----"
_GRANTS_KEPT = 4096
MAX_ACCOUNT_CONNECTIONS = "Maximum Account Connections Exceeded"  # the close reason (nats-server's)


class JwtError(ValueError):
    """A token that cannot be decoded, is not signed by its issuer or is of the wrong kind."""


_B64URL = re.compile(r"[A-Za-z0-9_-]*")


def _b64(text: str) -> bytes:
    if not _B64URL.fullmatch(text):  # RawURLEncoding: its alphabet only, no padding
        raise JwtError("illegal base64 data")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as err:
        raise JwtError(f"bad base64: {err}") from None


def ed25519_key(public: str, prefix: str) -> bytes | None:
    """The raw 32-byte ed25519 key inside a public nkey with `prefix`, or None if it is not one."""
    if not valid_public_nkey(public, prefix):
        return None
    return base64.b32decode(public + "=" * (-len(public) % 8))[1:33]


def verify_signature(public: str, prefix: str, data: bytes, sig: bytes) -> bool:
    import nacl.exceptions
    import nacl.signing  # comes with `nkeys`

    raw = ed25519_key(public, prefix)
    if raw is None:
        return False
    try:
        nacl.signing.VerifyKey(raw).verify(data, sig)
    except (nacl.exceptions.BadSignatureError, ValueError):
        return False
    return True


@dataclass(frozen=True)
class Claims:
    """The fields of a verified JWT that authentication reads; `nats` is the type-specific part."""

    kind: str
    issuer: str
    subject: str
    issued_at: int
    expires: int
    not_before: int
    name: str
    nats: dict[str, Any]

    def time_problem(self, now: float | None = None) -> str:
        """The jwt library's time checks: "" when valid now, else why not."""
        now_s = int(now if now is not None else time.time())
        if self.expires > 0 and now_s > self.expires:
            return "claim is expired"
        if self.not_before > 0 and self.not_before > now_s:
            return "claim is not yet valid"
        return ""


def _int(payload: dict[str, Any], key: str) -> int:
    value = payload.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise JwtError(f"{key}: not an integer")
    return value


def decode(token: str, kind: str) -> Claims:
    """Decodes a JWT of `kind` ("operator", "account" or "user"), v2 or v1 (its fields moved where v2 has
    them), and verifies its signature by its issuer; raises JwtError. Expiry is not checked here (see
    `Claims.time_problem`)."""
    if len(token) > MAX_TOKEN_SIZE:
        raise JwtError("token too large")
    chunks = token.split(".")
    if len(chunks) != 3:
        raise JwtError("expected 3 chunks")
    try:
        header = json.loads(_b64(chunks[0]))
        payload = json.loads(_b64(chunks[1]))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise JwtError(f"not JSON: {err}") from None
    if not isinstance(header, dict) or not isinstance(payload, dict):
        raise JwtError("not a JSON object")
    if str(header.get("typ", "")).upper() != "JWT":
        raise JwtError(f"not supported type {header.get('typ')!r}")
    if str(header.get("alg", "")).lower() not in ("ed25519", "ed25519-nkey"):
        raise JwtError(f"unexpected {header.get('alg')!r} algorithm")
    nats = payload.get("nats") or {}
    if not isinstance(nats, dict):
        raise JwtError("nats claims are not a JSON object")
    # v1 JWTs carry their type at the top level; v2 ones in `nats` with a version.
    v1 = bool(payload.get("type"))
    version = 1 if v1 else nats.get("version", 0)
    if not isinstance(version, int) or version > 2:
        raise JwtError("JWT was generated by a newer version")
    if (payload.get("type") if v1 else nats.get("type")) != kind:
        raise JwtError(f"not a {kind} JWT")
    issuer, subject = payload.get("iss"), payload.get("sub")
    if not isinstance(issuer, str) or not isinstance(subject, str):
        raise JwtError("issuer or subject missing")
    sig = _b64(chunks[2])
    # v1 signatures cover the claims only, v2 ones the header too.
    signed = (chunks[1] if version <= 1 else token[: len(chunks[0]) + len(chunks[1]) + 1]).encode()
    if not verify_signature(issuer, _ISSUER_PREFIX[kind], signed, sig):
        raise JwtError(
            f"claim failed V{max(version, 1)} signature verification or issuer is not an {kind} issuer"
        )
    if version <= 1:
        nats = _migrate_v1(kind, payload, nats)
    if not valid_public_nkey(subject, _SUBJECT_PREFIX[kind]):
        raise JwtError(f"subject is not a public {kind} key")
    return Claims(kind, issuer, subject, _int(payload, "iat"), _int(payload, "exp"), _int(payload, "nbf"),
                  str(payload.get("name", "")), nats)  # fmt: skip


def decode_generic(token: str) -> Claims:
    """A JWT of any kind (the jwt library's DecodeGeneric), its signature verified by its issuer, whatever
    kind of key that is: the claims `nats` holds its free-form data. Raises JwtError."""
    chunks = token.split(".")
    if len(chunks) != 3:
        raise JwtError("expected 3 chunks")
    try:
        header = json.loads(_b64(chunks[0]))
        payload = json.loads(_b64(chunks[1]))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise JwtError(f"not JSON: {err}") from None
    if not isinstance(header, dict) or not isinstance(payload, dict):
        raise JwtError("not a JSON object")
    issuer, subject = payload.get("iss"), payload.get("sub")
    if not isinstance(issuer, str) or not isinstance(subject, str) or not issuer:
        raise JwtError("issuer or subject missing")
    v1 = str(header.get("alg", "")).lower() == "ed25519"
    signed = (chunks[1] if v1 else token[: len(chunks[0]) + len(chunks[1]) + 1]).encode()
    if not verify_signature(issuer, issuer[0], signed, _b64(chunks[2])):
        raise JwtError(f"claim failed V{1 if v1 else 2} signature verification")
    nats = payload.get("nats") or {}
    times = _int(payload, "iat"), _int(payload, "exp"), _int(payload, "nbf")
    return Claims("generic", issuer, subject, *times, str(payload.get("name", "")),
                  nats if isinstance(nats, dict) else {})  # fmt: skip


def _migrate_v1(kind: str, payload: dict[str, Any], nats: dict[str, Any]) -> dict[str, Any]:
    """A v1 claim's fields where v2 keeps them (the jwt library's migrateV1)."""
    nats = dict(nats)
    if kind == "user":
        for key in ("subs", "data", "payload"):  # v1 users default to no limits
            nats.setdefault(key, NO_LIMIT)
        if payload.get("issuer_account"):
            nats["issuer_account"] = payload["issuer_account"]
        if isinstance(nats.get("src"), str):
            nats["src"] = [c.strip() for c in nats["src"].split(",") if c.strip()]
    if payload.get("tags"):
        nats["tags"] = payload["tags"]
    return nats


def parse_decorated(text: str) -> str:
    """The JWT in `text`: bare, or the first block of a decorated file (`-----BEGIN ... JWT-----`)."""
    lines = [line.strip() for line in text.splitlines()]
    for i, line in enumerate(lines):
        if line.startswith(_DECORATION) and "JWT" in line and "BEGIN" in line:
            for inner in lines[i + 1 :]:
                if inner:
                    return inner
    return text.strip()


def read_operator(value: str) -> Claims:
    """An `operator` entry: a JWT file path, or (as nats-server allows) an inline JWT."""
    try:
        text = Path(value).read_text()
    except OSError as err:
        if not value.startswith("eyJ"):
            raise JwtError(f"error parsing operator JWT: {err}") from None
        text = value
    try:
        return decode(parse_decorated(text), "operator")
    except JwtError as err:
        raise JwtError(f"error parsing operator JWT: {err}") from None


# -- accounts -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Account:
    """A verified account JWT: what user authentication needs of it."""

    claims: Claims
    signing_keys: dict[str, dict[str, Any] | None]  # key -> its user scope (None: unscoped)
    revocations: dict[str, int]
    disallow_bearer: bool
    default_permissions: dict[str, Any] | None
    subs: int
    payload: int
    connections: int  # active client connections the account may have
    exports: tuple[Export, ...] = ()
    imports: tuple[Import, ...] = ()
    jetstream: dict[str, Any] | None = None  # its JetStream limits as account info reports them; None: none
    jetstream_tier: str = ""  # "R1" when those are the R1 tier of tiered limits
    # Its users delegated to an auth callout (`authorization`): {"auth_users", "allowed_accounts", "xkey"}
    external_auth: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.claims.subject

    def user_revoked(self, user: str, issued_at: int) -> bool:
        """nats-server's isRevoked: revoked when a revocation (for the key or "*") is at or after iat."""
        for key in (user, "*"):
            at = self.revocations.get(key)
            if at is not None and at >= issued_at:
                return True
        return False


def _limit(limits: dict[str, Any], key: str) -> int:
    """A limit as the jwt library decodes it: absent is Go's zero value, 0 (nothing allowed), as in
    nats-server; -1 is no limit."""
    value = limits.get(key, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _tiered(limits: dict[str, Any]) -> bool:
    """JetStream limits given by tier (nats-server reads tiers only when the flat storage limits are 0)."""
    tiers = limits.get("tiered_limits")
    return (
        isinstance(tiers, dict)
        and bool(tiers)
        and not (limits.get("mem_storage") or limits.get("disk_storage"))
    )


def grants_jetstream(limits: dict[str, Any]) -> bool:
    """Do an account JWT's `limits` give it JetStream at any replica count (flat storage, or any tier's)?
    The cluster's JetStream serves every tier; a single server only R1 (see _jetstream_limits)."""
    tiers = [t for t in (limits.get("tiered_limits") or {}).values() if isinstance(t, dict)]
    return any(t.get(k) for t in (limits, *tiers) for k in ("mem_storage", "disk_storage"))


def _jetstream_limits(limits: dict[str, Any]) -> dict[str, Any] | None:
    """An account JWT's JetStream limits as nats-server reads them: on when its memory or disk storage is
    not 0, or with tiered limits (a server without clustering stores R1 streams only: the R1 tier's);
    values of 0 or less are no limit for the stream bytes and ack pending, as there."""
    if _tiered(limits):
        flat = limits["tiered_limits"].get("R1")
        if not isinstance(flat, dict):
            return None  # no tier applies to R1 streams: nothing may be stored (nats-server's 10120)
    elif limits.get("mem_storage") or limits.get("disk_storage"):
        flat = limits
    else:
        return None

    def number(key: str, unlimited_below: int = 0) -> int:
        value = flat.get(key, 0)
        value = value if isinstance(value, int) and not isinstance(value, bool) else 0
        return -1 if unlimited_below and value < unlimited_below else value

    return {
        "max_memory": number("mem_storage"),
        "max_storage": number("disk_storage"),
        "max_streams": number("streams"),
        "max_consumers": number("consumer"),
        "max_ack_pending": number("max_ack_pending", 1),
        "memory_max_stream_bytes": number("mem_max_stream_bytes", 1),
        "storage_max_stream_bytes": number("disk_max_stream_bytes", 1),
        "max_bytes_required": bool(flat.get("max_bytes_required")),
    }


def load_account(token: str) -> Account:
    claims = decode(token, "account")
    nats = claims.nats
    keys: dict[str, dict[str, Any] | None] = {claims.subject: None}  # the account signs its users too
    for entry in nats.get("signing_keys") or []:
        if isinstance(entry, str):
            keys[entry] = None
        elif isinstance(entry, dict) and isinstance(entry.get("key"), str):
            keys[entry["key"]] = entry
        else:
            raise JwtError("malformed signing key")
    revocations = {k: v for k, v in (nats.get("revocations") or {}).items() if isinstance(v, int)}
    # Of the limits, nats-server enforces subs, payload and conn for clients (data it does not enforce;
    # leaf, imports, exports and wildcards restrict what pynatsd does not have).
    limits = nats.get("limits") or {}
    if nats.get("mappings"):
        raise JwtError("account mappings are not supported by pynatsd")
    external_auth = _external_auth(nats.get("authorization"))
    try:
        exports, imports = links_from_jwt(claims.subject, nats)
    except LinkError as err:
        raise JwtError(str(err)) from None
    _validate_imports(claims.subject, nats.get("imports") or [])
    return Account(claims, keys, revocations, bool(limits.get("disallow_bearer")),
                   nats.get("default_permissions") or None, _limit(limits, "subs"),
                   _limit(limits, "payload"), _limit(limits, "conn"), tuple(exports),
                   tuple(imports), _jetstream_limits(limits),
                   "R1" if _tiered(limits) else "", external_auth)  # fmt: skip


def _external_auth(value: Any) -> dict[str, Any] | None:
    """An account's `authorization` (the jwt library's ExternalAuthorization, validated as it does): None
    when it delegates nobody (no `auth_users`)."""
    if not isinstance(value, dict):
        return None
    users, accounts = value.get("auth_users") or [], value.get("allowed_accounts") or []
    xkey = value.get("xkey") or ""
    if accounts and not users:
        raise JwtError("External authorization cannot have accounts without users specified")
    for user in users:
        if not isinstance(user, str) or not valid_public_nkey(user, "U"):
            raise JwtError(f"AuthUser {user!r} is not a valid user public key")
    for acc in accounts:
        if acc == "*" and len(accounts) > 1:
            raise JwtError('AllowedAccounts can only be a list of accounts or "*"')
        if acc != "*" and not (isinstance(acc, str) and valid_public_nkey(acc, "A")):
            raise JwtError(f"Account {acc!r} is not a valid account public key")
    if xkey and not (isinstance(xkey, str) and valid_public_nkey(xkey, "X")):
        raise JwtError(f"XKey {xkey!r} is not a valid public xkey")
    if not users:
        return None
    return {"auth_users": list(users), "allowed_accounts": list(accounts), "xkey": xkey}


def _validate_imports(account: str, imports: list[dict[str, Any]]) -> None:
    """The jwt library's blocking checks of an account's imports (an account JWT failing them is not
    valid): activation tokens made for this account by the exporter, for the import's type and subject;
    service imports from one account not overlapping. Expiry is checked when linking, not here."""
    services: dict[str, list[bytes]] = {}
    for i in imports:
        subject = str(i.get("subject") or "")
        if i.get("local_subject") and i.get("to"):
            raise JwtError("Local Subject replaces To")
        if i.get("type") == "service":
            local = str(i.get("to") or i.get("local_subject") or subject).encode()
            others = services.setdefault(str(i.get("account")), [])
            if any(subset(local, o) or subset(o, local) for o in others):
                raise JwtError(
                    f'overlapping subject namespace for "{local.decode()}" in account {i.get("account")}'
                )
            others.append(local)
        token = i.get("token")
        if not token:
            continue
        try:
            act = decode(str(token), "activation")
        except JwtError:
            raise JwtError(f'import "{subject}" contains an invalid activation token') from None
        if i.get("account") not in (act.issuer, act.nats.get("issuer_account")):
            raise JwtError(f'activation token doesn\'t match account for import "{subject}"')
        if act.subject != account:
            raise JwtError(f'activation token doesn\'t match account it is being included in, "{subject}"')
        if act.nats.get("kind") != i.get("type"):
            kinds = f"{act.nats.get('kind')} and type of import {i.get('type')}"
            raise JwtError(f"mismatch between token import type {kinds}")
        granted = str(act.nats.get("subject") or "")
        checked = str(i.get("to") or subject) if i.get("type") == "service" else subject
        if not subset(checked.encode(), granted.encode()):
            raise JwtError(f'activation token import subject "{granted}" doesn\'t match import "{subject}"')


def activation_ok(exporter: Account, export: Export, imp: Import, importer: str) -> bool:
    """An import's activation token (nats-server's checkActivation): signed by the exporter (or one of
    its signing keys, naming it as issuer_account), for `importer`, of the import's type, covering its
    subject, in its time window and not revoked by the export."""
    try:
        act = decode(imp.token, "activation")
    except JwtError as err:
        log.error("activation token of import %r not valid: %s", imp.subject, err)
        return False
    issuer_account = act.nats.get("issuer_account") or ""
    if issuer_account:
        if issuer_account != exporter.name or act.issuer not in exporter.signing_keys:
            return False
    elif act.issuer != exporter.name:
        return False
    kind = "service" if export.service else "stream"
    granted = act.nats.get("subject")
    if act.subject != importer or act.nats.get("kind") != kind:
        return False
    if not isinstance(granted, str) or not subset(imp.subject, granted.encode()) or act.time_problem():
        return False
    for key in (act.subject, "*"):
        revoked_before = export.revocations.get(key)
        if revoked_before is not None and revoked_before >= act.issued_at:
            return False
    return True


# -- users ----------------------------------------------------------------------------------------------
def permissions_from_jwt(spec: dict[str, Any] | None) -> Permissions | None:
    """nats-server's buildPermissionsFromJwt: None when the JWT restricts nothing."""
    if not spec:
        return None

    def rule(side: Any) -> Rule | None:
        side = side if isinstance(side, dict) else {}
        allow = [str(s).encode() for s in side.get("allow") or []]
        deny = [str(s).encode() for s in side.get("deny") or []]
        return Rule(allow or None, deny) if allow or deny else None

    pub, sub, resp = rule(spec.get("pub")), rule(spec.get("sub")), spec.get("resp")
    if pub is None and sub is None and resp is None:
        return None
    perms = Permissions({})
    perms.publish, perms.subscribe = pub, sub
    if isinstance(resp, dict):
        max_msgs, ttl_ns = resp.get("max", 0), resp.get("ttl", 0)
        # Zero means nats-server's default (validateResponsePermissions).
        default = ResponsePermission()
        perms.responses = ResponsePermission(int(max_msgs) or default.max_msgs,
                                             (int(ttl_ns) / 1e9) or default.expires)  # fmt: skip
        if perms.publish is None or perms.publish.allow is None:
            perms.publish = Rule([], perms.publish.deny if perms.publish else [])
    return perms.copy()


def source_allowed(cidrs: list[Any], host: str) -> bool:
    """nats-server's validateSrc."""
    if not cidrs:
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    for cidr in cidrs:
        try:
            net = ipaddress.ip_network(str(cidr), strict=False)
        except ValueError:
            return False
        if ip in net:
            return True
    return False


def _clock(text: str) -> tuple[int, int, int]:
    parts = text.split(":")
    if len(parts) != 3 or not all(len(p) == 2 and p.isdigit() for p in parts):
        raise ValueError(text)
    h, m, s = (int(p) for p in parts)
    if h > 23 or m > 59 or s > 59:
        raise ValueError(text)
    return h, m, s


def time_window(ranges: list[Any], location: str, now: datetime | None = None) -> tuple[bool, float]:
    """nats-server's validateTimes: (allowed now, seconds the allowance lasts; 0 = unbounded)."""
    if not ranges:
        return True, 0.0
    try:
        tz = ZoneInfo(location) if location else None
    except (ZoneInfoNotFoundError, ValueError):
        return False, 0.0
    current = (now or datetime.now().astimezone()).astimezone(tz)
    best: float | None = None
    for spec in ranges:
        if not isinstance(spec, dict):
            return False, 0.0
        try:
            start_t, end_t = _clock(str(spec.get("start", ""))), _clock(str(spec.get("end", "")))
        except ValueError:
            return False, 0.0
        start = current.replace(hour=start_t[0], minute=start_t[1], second=start_t[2], microsecond=0)
        end = current.replace(hour=end_t[0], minute=end_t[1], second=end_t[2], microsecond=0)
        left = _time_left(start, end, current)
        if left is not None and (best is None or left > best):
            best = left
    return best is not None, best or 0.0


def _time_left(start: datetime, end: datetime, now: datetime) -> float | None:
    if start < now < end:
        return (end - now).total_seconds()
    if start > end:  # the range crosses midnight
        if now > start:
            return (end + timedelta(days=1) - now).total_seconds()
        if now < end:
            return (end - now).total_seconds()
    return None


def connection_types(raw: list[Any]) -> frozenset[str] | None:
    """`allowed_connection_types`: None for any; the known ones otherwise (an unknown one is skipped, and
    a list of only unknown ones admits nothing, as nats-server)."""
    if not raw:
        return None
    return frozenset(str(t).upper() for t in raw if str(t).upper() in _KNOWN_CONNECTION_TYPES)


@dataclass(frozen=True)
class UserGrant:
    """What an admitted JWT user gets: its permissions, limits and when its authentication expires."""

    permissions: Permissions | None
    subs: int
    payload: int
    expires_in: float  # seconds until the JWT (or its time window, or its account) ends; 0 = never
    expiry_error: str = errors.AUTHENTICATION_EXPIRED  # what the client is told then


# Accounts deleted from a directory (`$SYS.REQ.CLAIMS.DELETE`), per directory: they mask a preloaded JWT
# of the same account, and survive a reload (which builds a new store on the same directory).
_DELETED: dict[Path, set[str]] = {}
NO_DELETE, RENAME_DELETED, HARD_DELETE = "none", "rename", "hard"


class DirectoryStore:
    """An account resolver's directory: one `<account>.jwt` file per account, as nats-server keeps it
    (unsharded). Preloaded JWTs count as stored when newer than the file (nats-server stores them at
    start); nothing is written until an update arrives.

    `full` resolvers keep every account (`limit` reached: an error) and may delete (`delete`: rename to
    `.jwt.deleted` or remove); `cache` ones (`evict`) drop the least recently used file at the limit and
    files older than `ttl` seconds (see `sweep`)."""

    def __init__(
        self, directory: str, limit: int, delete: str = NO_DELETE, evict: bool = False, ttl: float = 0.0
    ) -> None:
        self.directory = Path(directory)
        self.limit = limit
        self.delete_mode = delete
        self.evict = evict
        self.ttl = ttl
        # JWTs read or saved, so a connect reads the disk at most once per account (updates come through
        # save); a file that is not there yet is looked for again next time.
        self._cache: dict[str, str] = {}
        self.deleted = _DELETED.setdefault(self.directory.resolve(), set())
        for tomb in self.directory.glob("*.jwt.deleted"):  # renamed by an earlier run
            name = tomb.name.removesuffix(".jwt.deleted")
            if not (self.directory / f"{name}.jwt").exists():
                self.deleted.add(name)

    def _path(self, name: str) -> Path | None:
        return self.directory / f"{name}.jwt" if valid_public_nkey(name, "A") else None

    def load(self, name: str) -> str | None:
        token = self._cache.get(name)
        if token is not None:
            return token
        path = self._path(name)
        if path is None:
            return None
        try:
            token = path.read_text().strip() or None
        except OSError:
            return None
        if token is not None:
            self._cache[name] = token
        return token

    def names(self) -> list[str]:
        """The accounts stored (nats-server's `$SYS.REQ.CLAIMS.LIST`)."""
        return sorted(p.name.removesuffix(".jwt") for p in self.directory.glob("*.jwt"))

    def save(self, name: str, token: str) -> None:
        """Stores `token` for account `name` (replacing any); raises OSError or JwtError."""
        path = self._path(name)
        if path is None:
            raise JwtError("invalid public key")
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.limit > 0 and not path.exists():
            stored = list(self.directory.glob("*.jwt"))
            if len(stored) >= self.limit:
                if not self.evict:
                    raise JwtError("jwt store is full")
                oldest = min(stored, key=lambda p: p.stat().st_mtime)  # least recently updated
                oldest.unlink(missing_ok=True)
                self._cache.pop(oldest.name.removesuffix(".jwt"), None)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(token)
        tmp.replace(path)  # readers never see half a JWT
        self._cache[name] = token
        self.deleted.discard(name)

    def delete(self, name: str) -> None:
        """Deletes account `name` (a missing file is not an error, as nats-server); raises OSError."""
        path = self._path(name)
        if path is None:
            raise JwtError("invalid public key")
        if self.delete_mode == RENAME_DELETED:
            if path.exists():
                path.replace(path.with_name(path.name + ".deleted"))
        else:
            path.unlink(missing_ok=True)
        self._cache.pop(name, None)
        self.deleted.add(name)

    def sweep(self, now: float | None = None) -> None:
        """A cache resolver's `ttl`: files stored longer ago are removed (accounts already in use stay
        known, as nats-server keeps them in memory)."""
        if self.ttl <= 0:
            return
        limit = (now if now is not None else time.time()) - self.ttl
        for path in self.directory.glob("*.jwt"):
            try:
                if path.stat().st_mtime < limit:
                    path.unlink()
            except OSError:
                continue


def payload_of(token: str) -> dict[str, Any]:
    """The claims of a JWT as JSON, unverified ({} if unreadable): for display of verified tokens."""
    try:
        claims = json.loads(_b64(token.split(".")[1]))
    except (JwtError, IndexError, ValueError, UnicodeDecodeError):
        return {}
    return claims if isinstance(claims, dict) else {}


def _newer(a: str | None, b: str | None) -> str | None:
    """The more recently issued of two account JWTs (either may be missing or undecodable)."""
    if a is None or b is None:
        return a or b

    def issued(token: str) -> int:
        try:
            return int(json.loads(_b64(token.split(".")[1])).get("iat", 0))
        except (JwtError, IndexError, ValueError, AttributeError):
            return -1

    return b if issued(b) > issued(a) else a


class JwtAuthenticator:
    """Trusted operator keys plus the account resolver (MEMORY with preloads, or a `full` directory),
    checking user JWTs."""

    def __init__(self, options: Options, trusted: TrustedOperators) -> None:
        """From the options the config schema checked (`trusted`, `resolver`, `resolver_preload`, ...)."""
        self.trusted = frozenset(trusted.keys)
        # Operators with strict_signing_key_usage: their own key may not issue accounts.
        self.strict_operators = frozenset(trusted.strict_operators)
        # Their signing keys: the accounts these issue may sign users with signing keys only.
        self.strict_signers = frozenset(trusted.strict_signers)
        self.preload = dict(options.resolver_preload)
        self.system_account: str = options.system_account
        resolver = options.resolver
        directory = resolver is not None and resolver.directory
        self.resolver_type = resolver.type if resolver is not None and directory else "MEMORY"
        self.store: DirectoryStore | None = None
        if resolver is not None and directory:
            evict = self.resolver_type == "cache"
            # A cache deletes for good (nats-server's cache store is a hard-deleting one).
            delete = HARD_DELETE if evict else (resolver.delete or NO_DELETE)
            self.store = DirectoryStore(resolver.dir, resolver.limit, delete, evict, resolver.ttl)
        self._accounts: dict[str, tuple[str, Account | None]] = {}
        self.grants: dict[str, UserGrant] = {}  # user nkey -> grant of its latest admission

    def token(self, name: str) -> str | None:
        """The resolver's JWT of account `name` (the newer of preload and directory), unverified."""
        token = self.preload.get(name)
        if self.store is not None:
            if name in self.store.deleted:
                return None
            token = _newer(self.store.load(name), token)
        return token

    def known(self, name: str) -> bool:
        """The account was looked up already (a cache resolver takes updates for these only)."""
        return name in self._accounts or name in self.preload

    def payload(self, name: str) -> dict[str, Any]:
        """The claims of account `name`'s JWT, as JSON (monitoring's `decoded_jwt`)."""
        token = self.token(name)
        return payload_of(token) if token else {}

    def account(self, name: str) -> Account | None:
        """The resolver's account `name`, verified (nats-server's fetchAccountClaims); None if unknown
        or not valid."""
        token = self.token(name)
        if token is None:
            return None
        cached = self._accounts.get(name)
        if cached is None or cached[0] != token:
            try:
                acc: Account | None = load_account(token)
            except JwtError as err:
                log.error("account %s: JWT not valid: %s", name, err)
                acc = None
            if acc is not None and (acc.name != name or acc.claims.issuer not in self.trusted):
                log.error("account %s: JWT not issued by a trusted operator", name)
                acc = None
            if acc is not None and acc.claims.issuer in self.strict_signers:
                acc.signing_keys.pop(acc.name, None)
            cached = (token, acc)
            self._accounts[name] = cached
        acc = cached[1]
        if acc is not None and acc.claims.time_problem():
            return None  # expired accounts stay known but admit nobody
        return acc

    @staticmethod
    def _account_full(conn: Connecting, acc: Account) -> bool:
        """The account's `conn` limit reached (checked when connecting only: a reload or update does
        not close connections already in)."""
        if acc.connections == NO_LIMIT:
            return False
        return conn.account_connections(acc.name) >= acc.connections

    def revoked(self, opts: ConnectOptions) -> bool:
        """True when the account of a connected user's JWT now revokes it (checked on reload)."""
        try:
            user = decode(opts.jwt, "user")
        except JwtError:
            return False
        acc = self.account(user.nats.get("issuer_account") or user.issuer)
        return acc is not None and acc.user_revoked(user.subject, user.issued_at)

    def authenticate(self, conn: Connecting, opts: ConnectOptions, nonce: str) -> tuple[str, str] | None:
        """(user nkey, account) for a valid user JWT in CONNECT, or None (Authorization Violation)."""
        try:
            user = decode(opts.jwt, "user")
        except JwtError as err:
            log.debug("%r - user JWT not valid: %s", conn, err)
            return None
        if user.time_problem():
            return None
        nats = user.nats
        if nats.get("proxy_required"):  # pynatsd has no trusted proxies: never from one
            return None
        issuer_account = nats.get("issuer_account") or ""
        acc = self.account(issuer_account or user.issuer)
        if acc is None or user.issuer not in acc.signing_keys:
            return None
        scope = acc.signing_keys[user.issuer]
        if scope is not None:
            scoped = _scoped(scope, user, acc)
            if scoped is None:
                return None
            nats = scoped
        bearer = bool(nats.get("bearer_token"))
        if bearer and acc.disallow_bearer:
            return None
        types = connection_types(nats.get("allowed_connection_types") or [])
        if types is not None and conn.connection_type not in types:
            return None
        if not bearer and not _nonce_signed(user.subject, nonce, opts.sig):
            return None
        if acc.user_revoked(user.subject, user.issued_at):
            return None
        if not source_allowed(nats.get("src") or [], conn.ip):
            log.error("%r - Bad src Ip %s", conn, conn.ip)
            return None
        allowed, window = time_window(nats.get("times") or [], str(nats.get("times_location") or ""))
        if not allowed:
            log.error("%r - Outside connect times", conn)
            return None
        if not conn.connected and self._account_full(conn, acc):
            # As nats-server: admitted, then refused by the account with a text of its own.
            conn.close(MAX_ACCOUNT_CONNECTIONS, errors.MAX_ACCOUNT_CONNECTIONS)
            return None
        perms = permissions_from_jwt(nats)
        if perms is None and acc.default_permissions:
            perms = permissions_from_jwt(acc.default_permissions)
        expires = float(user.expires - time.time()) if user.expires else 0.0
        if window and (not expires or window < expires):
            expires = window
        expiry_error = errors.AUTHENTICATION_EXPIRED
        if acc.claims.expires:
            acc_left = float(acc.claims.expires - time.time())
            if not expires or acc_left < expires:
                expires, expiry_error = acc_left, errors.ACCOUNT_AUTHENTICATION_EXPIRED
        subs = _min_limit(_limit(nats, "subs"), acc.subs)
        payload = _min_limit(_limit(nats, "payload"), acc.payload)
        self.grants.pop(user.subject, None)
        if len(self.grants) >= _GRANTS_KEPT:  # only read right after admission: the oldest can go
            del self.grants[next(iter(self.grants))]
        self.grants[user.subject] = UserGrant(perms, subs, payload, max(expires, 0.0), expiry_error)
        return user.subject, acc.name


def _min_limit(a: int, b: int) -> int:
    if a == NO_LIMIT:
        return b
    return a if b == NO_LIMIT else min(a, b)


def _scoped(scope: dict[str, Any], user: Claims, acc: Account) -> dict[str, Any] | None:
    """A user issued by a scoped signing key: it must not carry permissions of its own and gets the
    scope's template (nats-server's ValidateScopedSigner), its subjects expanded for this user."""
    nats = user.nats
    if scope.get("kind", "user_scope") != "user_scope":
        return None
    # nats-server requires the user's permission and limit fields to be all zero values.
    if any(_set(nats.get(k)) for k in _USER_PERMISSION_FIELDS):
        return None
    template = dict(scope.get("template") or {})
    try:
        for side in ("pub", "sub"):
            spec = dict(template.get(side) or {})
            allow_given = bool(spec.get("allow"))
            spec["allow"] = expand_subjects(spec.get("allow") or [], user, acc, strict=False)
            spec["deny"] = expand_subjects(spec.get("deny") or [], user, acc, strict=True)
            if allow_given and not spec["allow"]:  # nothing left to allow: deny everything instead
                spec["deny"].append(">")
            template[side] = spec
    except JwtError as err:
        log.error("user %s: scoped permissions template: %s", user.subject, err)
        return None
    return {**nats, **template}


_MUSTACHE = re.compile(r"\{\{([^}]+)\}\}")
_MAX_EXPANSIONS = 4096  # nats-server's cap on subjects one template may generate


def _template_values(op: str, user: Claims, acc: Account) -> tuple[list[str], bool]:
    """The values one `{{op}}` stands for, and whether it was a tag lookup (several values)."""
    low = op.lower()
    if low == "name()":
        return [user.name], False
    if low == "subject()":
        return [user.subject], False
    if low == "account-name()":
        return [acc.claims.name], False
    if low == "account-subject()":
        return [str(user.nats.get("issuer_account", ""))], False
    for prefix, tags in (("tag(", user.nats.get("tags")), ("account-tag(", acc.claims.nats.get("tags"))):
        if low.startswith(prefix) and low.endswith(")"):
            wanted = op[len(prefix) : -1].lower() + ":"
            return [t[len(wanted) :] for t in tags or [] if str(t).startswith(wanted)], True
    raise JwtError(f"template operation {op!r} is not defined")


def expand_subjects(subjects: list[Any], user: Claims, acc: Account, strict: bool) -> list[str]:
    """nats-server's processUserPermissionsTemplate for one list: `{{name()}}`, `{{subject()}}`,
    `{{account-name()}}`, `{{account-subject()}}`, `{{tag(x)}}`, `{{account-tag(x)}}`. Invalid results
    are dropped (`strict`: they fail the user, as for deny lists)."""
    out: list[str] = []
    for raw in subjects:
        subject = str(raw)
        found = _MUSTACHE.findall(subject)
        if not found:
            out.append(subject)
            continue
        sources = [f"{{{{{op}}}}}" for op in found]
        values, tagged = [], False
        for op in found:
            vals, is_tag = _template_values(op.strip(), user, acc)
            if is_tag and not vals:
                if strict:
                    raise JwtError(f"generated invalid subject {subject!r}: {op.strip()!r} is not defined")
                vals = [" "]
            values.append(vals)
            tagged = tagged or is_tag
        combos = list(itertools.product(*values)) if tagged else [tuple(v[0] for v in values)]
        if len(out) + len(combos) > _MAX_EXPANSIONS:
            raise JwtError(f"template expansion exceeds limit: {_MAX_EXPANSIONS}")
        for combo in combos:
            result = subject
            for src, value in zip(sources, combo, strict=True):
                result = result.replace(src, value)
            if is_valid_subject(result.encode()):
                out.append(result)
            elif strict:
                raise JwtError("generated invalid subject")
    return out


# The user claims' UserPermissionLimits fields (permissions, limits, bearer, connection types).
_USER_PERMISSION_FIELDS = ("pub", "sub", "resp", "src", "times", "times_location", "subs", "data", "payload",
                           "bearer_token", "allowed_connection_types", "proxy_required")  # fmt: skip


def _set(value: Any) -> bool:
    """Not a zero value (Go's): none of None, 0, False, "", and no list or map holding a set value."""
    if isinstance(value, dict):
        return any(_set(v) for v in value.values())
    if isinstance(value, list):
        return bool(value)
    return bool(value)


def _nonce_signed(user: str, nonce: str, sig_text: str) -> bool:
    if not nonce or not sig_text:
        return False
    try:
        sig = base64.urlsafe_b64decode(sig_text + "=" * (-len(sig_text) % 4))
    except (binascii.Error, ValueError):
        try:  # nats-server falls back to standard base64
            sig = base64.b64decode(sig_text)
        except (binascii.Error, ValueError):
            return False
    return verify_signature(user, "U", nonce.encode(), sig)
