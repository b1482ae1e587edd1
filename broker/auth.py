"""Client authentication and authorization.

Mechanisms: one user/password or a token (command line), the `authorization {}` block (token, single
user, `users = [...]` with plain or bcrypt passwords and per-user permissions), `accounts {}` (users bound
to isolated subject spaces) and `no_auth_user`. `Authenticator.authenticate` returns the client's identity
`(user, account)` or None (a violation); `permissions(user)` gives its publish/subscribe rules.
Secrets are compared in constant time.
"""

from __future__ import annotations

import base64
import hmac
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.options import Options
from protocol.connect import ConnectOptions

if TYPE_CHECKING:
    from broker.connection import Connection

DEFAULT_ACCOUNT = "$G"
_CACHE_LIMIT = 1024


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def _password_ok(given: str, stored: str) -> bool:
    if stored.startswith(("$2a$", "$2b$", "$2y$")):
        import bcrypt  # only configurations with hashed passwords need it

        try:
            return bcrypt.checkpw(given.encode(), stored.encode())
        except ValueError:
            return False
    return _same(given, stored)


def subject_within(subject: bytes, pattern: bytes) -> bool:
    """True if `pattern` matches `subject`, whose own wildcards count as literal tokens (as nats-server's
    permission sublists do)."""
    s, p = subject.split(b"."), pattern.split(b".")
    for i, pt in enumerate(p):
        if pt == b">":
            return len(s) > i
        if i >= len(s):
            return False
        if pt == b"*":
            continue
        if s[i] != pt:
            return False
    return len(s) == len(p)


def _patterns(value: Any) -> list[bytes]:
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    return [str(v).encode() for v in items]


@dataclass
class Rule:
    """Allow/deny patterns for one direction. Empty allow means everything not denied is allowed."""

    allow: list[bytes] | None = None
    deny: list[bytes] = field(default_factory=list)

    @classmethod
    def parse(cls, value: Any) -> Rule:
        if isinstance(value, dict):
            allow = value.get("allow")
            return cls(None if allow is None else _patterns(allow), _patterns(value.get("deny")))
        return cls(_patterns(value), [])

    def permits(self, subject: bytes) -> bool:
        if self.allow is not None and not any(subject_within(subject, p) for p in self.allow):
            return False
        # A wildcard subscription overlapping a denied subject is still allowed (nats-server filters
        # the denied messages at delivery); only subjects inside a deny pattern are refused here.
        return not any(subject_within(subject, d) for d in self.deny)


class Permissions:
    """A user's publish/subscribe rules with per-subject result caches (cheap on the hot path)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.publish = Rule.parse(spec["publish"]) if "publish" in spec else None
        self.subscribe = Rule.parse(spec["subscribe"]) if "subscribe" in spec else None
        self._pub_cache: dict[bytes, bool] = {}

    def can_publish(self, subject: bytes) -> bool:
        if self.publish is None:
            return True
        hit = self._pub_cache.get(subject)
        if hit is None:
            if len(self._pub_cache) >= _CACHE_LIMIT:
                self._pub_cache.clear()
            hit = self._pub_cache[subject] = self.publish.permits(subject)
        return hit

    def can_subscribe(self, subject: bytes, queue: bytes | None) -> bool:
        if self.subscribe is None:
            return True
        rule = self.subscribe
        if queue is None:
            return rule.permits(subject)

        # "subject queue" entries restrict a subject to the named queue group.
        def ok(pats: list[bytes]) -> bool:
            for pat in pats:
                subj, _, q = pat.partition(b" ")
                if subject_within(subject, subj) and (not q or q == queue):
                    return True
            return False

        if rule.allow is not None and not ok(rule.allow):
            return False
        return not ok(rule.deny)

    def copy(self) -> Permissions:
        """A fresh instance (its own cache) for one connection."""
        clone = Permissions({})
        clone.publish, clone.subscribe = self.publish, self.subscribe
        return clone


@dataclass
class _User:
    name: str
    password: str
    account: str
    permissions: Permissions | None


class Authenticator:
    """Checks CONNECT credentials against the configured users, token or single user/password."""

    def __init__(self, options: Options) -> None:
        block: dict[str, Any] = options.extra.get("authorization", {}) or {}
        self.username = options.username
        self.password = options.password
        self.token = options.authorization
        self.users: dict[str, _User] = {}
        default_perms = block.get("permissions") or block.get("default_permissions")
        for spec in block.get("users", []) or []:
            self._add_user(spec, DEFAULT_ACCOUNT, default_perms)
        accounts: dict[str, Any] = options.extra.get("accounts", {}) or {}
        self.accounts = [DEFAULT_ACCOUNT, *accounts]
        for name, acc in accounts.items():
            for spec in (acc or {}).get("users", []) or []:
                self._add_user(spec, name, None)
        self.no_auth_user = options.no_auth_user
        self.nkeys: dict[str, _User] = {}
        for spec in block.get("users", []) or []:
            if "nkey" in spec:
                perms = spec.get("permissions", default_perms)
                key = str(spec["nkey"])
                self.nkeys[key] = _User(key, "", DEFAULT_ACCOUNT, Permissions(perms) if perms else None)
                self.users.pop("", None)

    @staticmethod
    def new_nonce() -> str:
        """A fresh random challenge for one connection's INFO."""
        return base64.urlsafe_b64encode(secrets.token_bytes(11)).decode().rstrip("=")

    def _nkey_ok(self, conn: Connection, opts: ConnectOptions) -> bool:
        import nacl.signing  # only configurations with nkey users need it (comes with `nkeys`)

        if not conn.nonce or not opts.sig:
            return False
        try:
            sig = base64.urlsafe_b64decode(opts.sig + "=" * (-len(opts.sig) % 4))
            # A user public key is base32(prefix byte 'U' + 32-byte ed25519 key + CRC16).
            raw = base64.b32decode(opts.nkey + "=" * (-len(opts.nkey) % 8))
            if len(raw) != 35 or not opts.nkey.startswith("U"):
                return False
            nacl.signing.VerifyKey(raw[1:33]).verify(conn.nonce.encode(), sig)
        except Exception:  # any malformed key or signature is simply a failed login
            return False
        return True

    def _add_user(self, spec: dict[str, Any], account: str, default_perms: Any) -> None:
        name = str(spec.get("user", spec.get("username", "")))
        perms = spec.get("permissions", default_perms)
        password = str(spec.get("password", spec.get("pass", "")))
        self.users[name] = _User(name, password, account, Permissions(perms) if perms else None)

    @property
    def required(self) -> bool:
        return bool(self.username or self.token or self.users or self.nkeys)

    def permissions(self, user: str) -> Permissions | None:
        entry = self.users.get(user) or self.nkeys.get(user)
        return entry.permissions.copy() if entry and entry.permissions else None

    def authenticate(self, conn: Connection, opts: ConnectOptions) -> tuple[str, str] | None:
        if opts.nkey and self.nkeys:
            entry = self.nkeys.get(opts.nkey)
            return (entry.name, entry.account) if entry and self._nkey_ok(conn, opts) else None
        if self.users or self.nkeys:
            if not opts.user and not opts.password and not opts.auth_token and self.no_auth_user:
                entry = self.users.get(self.no_auth_user)
                return (entry.name, entry.account) if entry else None
            entry = self.users.get(opts.user)
            if entry is None:
                _password_ok(opts.password, "x" * 8)  # similar work for unknown users
                return None
            return (entry.name, entry.account) if _password_ok(opts.password, entry.password) else None
        if self.token:
            return ("", DEFAULT_ACCOUNT) if _same(opts.auth_token, self.token) else None
        if self.username:
            ok = _same(opts.user, self.username) & _same(opts.password, self.password)
            return (opts.user, DEFAULT_ACCOUNT) if ok else None
        return ("", DEFAULT_ACCOUNT)
