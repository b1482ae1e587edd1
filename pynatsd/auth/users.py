"""Client authentication and authorization.

Mechanisms: one user/password or a token (command line), the `authorization {}` block (token, single
user, `users = [...]` with per-user permissions and default permissions), `accounts {}` (users and nkey
users bound to isolated subject spaces, with the account's default permissions) and `no_auth_user`.
Every password and the token may be a bcrypt hash, as in nats-server. The config schema
(pynatsd.config.schema) validates and normalizes the blocks read here.
`Authenticator.authenticate` returns the client's identity `(user, account)` or None (a violation);
`permissions(user)` gives its publish/subscribe rules. Secrets are compared in constant time.
"""

from __future__ import annotations

import base64
import hmac
import secrets
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from pynatsd.auth.certs import DN, PeerCertificate, dn_equal, dn_rdns_match, parse_dn, peer_certificate
from pynatsd.base.logging import get_logger
from pynatsd.base.options import Options, system_account_of
from pynatsd.base.values import ConfigValueError, parse_duration
from pynatsd.protocol import errors
from pynatsd.protocol.connect import ConnectOptions
from pynatsd.protocol.subjects import matches, matches_wildcards_literally

if TYPE_CHECKING:
    import asyncio
    from concurrent.futures import Executor

    from pynatsd.auth.jwt import JwtAuthenticator, UserGrant
    from pynatsd.auth.python import Applicant, PythonAuthorizer, Verdict

log = get_logger()

DEFAULT_ACCOUNT = "$G"
REVOCATION = "Credentials Revoked"  # the close reason, as nats-server's connz shows it
_CACHE_LIMIT = 1024
# allow_responses: nats-server's defaults (one reply within two minutes) and reply-map pruning cadence.
RESPONSE_MAX_MSGS = 1
RESPONSE_EXPIRES = 120.0
_REPLY_PRUNE_COUNT = 4096
_REPLY_PRUNE_SECONDS = 1.0


class Connecting(Protocol):
    """A client connection as authentication sees it (pynatsd.broker.connection.Connection): who it says
    it is, where from, and how to close it."""

    nonce: str
    opts: ConnectOptions
    user: str
    account: str
    ip: str
    connected: bool

    @property
    def connection_type(self) -> str: ...
    @property
    def transport(self) -> object: ...  # the asyncio transport: a TLS one carries the peer's certificate
    def close(self, reason: str, err_text: str | None = None) -> None: ...
    def account_connections(self, account: str) -> int: ...


def raw_auth_user(opts: ConnectOptions, identity: tuple[str, str] | None) -> str:
    """nats-server's getRawAuthUser: the nkey, else the user name, else a JWT's user key, else "[REDACTED]"
    for a token (never the token: it goes into auth callout requests and is matched against auth_users)."""
    if opts.nkey or opts.user:
        return opts.nkey or opts.user
    if opts.jwt:
        return identity[0] if identity is not None else ""
    return "[REDACTED]" if opts.auth_token else ""


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def is_bcrypt(password: str) -> bool:
    return password.startswith(("$2a$", "$2b$", "$2y$"))


def password_ok(given: str, stored: str) -> bool:
    if is_bcrypt(stored):
        import bcrypt  # only configurations with hashed passwords need it

        try:  # bool(): bcrypt is Any to mypyc's build, where it is not installed
            return bool(bcrypt.checkpw(given.encode(), stored.encode()))
        except ValueError:
            return False
    return _same(given, stored)


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
        if self.allow is not None and not any(matches_wildcards_literally(p, subject) for p in self.allow):
            return False
        # A wildcard subscription overlapping a denied subject is still allowed (nats-server filters
        # the denied messages at delivery); only subjects inside a deny pattern are refused here.
        return not any(matches_wildcards_literally(d, subject) for d in self.deny)


@dataclass(frozen=True)
class ResponsePermission:
    """`allow_responses`: replies allowed per request received, and for how long (<= 0: no limit)."""

    max_msgs: int = RESPONSE_MAX_MSGS
    expires: float = RESPONSE_EXPIRES

    @classmethod
    def parse(cls, value: Any) -> ResponsePermission | None:
        """`true`/`false` or `{max: N, expires: "1m"}`; 0 means the default, negative means unlimited (an
        instance, as a Python authorizer gives it, is taken as it is)."""
        if isinstance(value, ResponsePermission):
            return value
        if isinstance(value, bool):
            return cls() if value else None
        if not isinstance(value, dict):
            raise ConfigValueError("error parsing response permissions, expected a boolean or a map")
        max_msgs, expires = RESPONSE_MAX_MSGS, RESPONSE_EXPIRES
        for key, v in value.items():
            k = key.lower()
            if k in ("max", "max_msgs", "max_messages", "max_responses"):
                if isinstance(v, bool) or not isinstance(v, int):
                    raise ConfigValueError(f"{key}: expected an integer, got {v!r}")
                max_msgs = v or max_msgs
            elif k in ("expires", "expiration", "ttl"):
                if not isinstance(v, str):
                    raise ConfigValueError("error parsing expires, not a duration string")
                expires = _signed_duration(key, v) or expires
            else:
                raise ConfigValueError(f"Unknown field {key!r} parsing permissions")
        return cls(max_msgs, expires)


def _signed_duration(key: str, text: str) -> float:
    text = text.strip()
    if text.startswith("-"):
        return -parse_duration(key, text[1:])
    return parse_duration(key, text.lstrip("+"))


class Permissions:
    """A user's publish/subscribe rules with per-subject result caches (cheap on the hot path).

    With `allow_responses`, each request delivered to the connection (a message with a reply subject it
    may not otherwise publish to) opens that reply subject for `max_msgs` publishes within `expires`, as
    nats-server's per-client `replies` map does. A connection needs its own instance (`copy()`).
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        self.publish = Rule.parse(spec["publish"]) if "publish" in spec else None
        self.subscribe = Rule.parse(spec["subscribe"]) if "subscribe" in spec else None
        raw = spec.get("allow_responses", spec.get("publish_allow_responses"))
        self.responses = None if raw is None else ResponsePermission.parse(raw)
        if self.responses is not None and (self.publish is None or self.publish.allow is None):
            # Responses only make sense with publishing restricted: the blanket allow is turned off.
            self.publish = Rule([], self.publish.deny if self.publish else [])
        self._pub_cache: dict[bytes, bool] = {}
        self._set_sub_deny()
        self._reset_replies()

    def _set_sub_deny(self) -> None:
        # Subscribe-deny patterns (without a queue restriction) checked at delivery: a subscription on a
        # wildcard that overlaps a denied subject is allowed, its denied messages are not delivered.
        deny = self.subscribe.deny if self.subscribe is not None else []
        self.sub_deny = [pat for pat in deny if b" " not in pat]
        self._deny_cache: dict[bytes, bool] = {}

    def delivery_denied(self, subject: bytes) -> bool:
        """True if a message on `subject` may not be delivered to this user (nats-server's checkDenySub)."""
        hit = self._deny_cache.get(subject)
        if hit is None:
            hit = any(matches(pat, subject) for pat in self.sub_deny)
            if len(self._deny_cache) >= _CACHE_LIMIT:
                self._deny_cache.clear()
            self._deny_cache[subject] = hit
        return hit

    def _reset_replies(self) -> None:
        # reply subject -> [time it was delivered, responses published]
        self.replies: dict[bytes, list[float]] | None = {} if self.responses is not None else None
        self._since_prune = 0
        self._last_prune = time.monotonic()

    def can_publish(self, subject: bytes) -> bool:
        if self.publish is None:
            return True
        hit = self._pub_cache.get(subject)
        if hit is None:
            hit = self.publish.permits(subject)
            if not hit and self.replies is not None:
                return self._response_allowed(subject)  # never cached: it changes per request
            if len(self._pub_cache) >= _CACHE_LIMIT:
                self._pub_cache.clear()
            self._pub_cache[subject] = hit
        return hit

    def _response_allowed(self, subject: bytes) -> bool:
        assert self.replies is not None and self.responses is not None
        entry = self.replies.get(subject)
        if entry is None:
            return False
        entry[1] += 1
        rp = self.responses
        if (rp.max_msgs > 0 and entry[1] > rp.max_msgs) or (
            rp.expires > 0 and time.monotonic() - entry[0] > rp.expires
        ):
            del self.replies[subject]
            return False
        return True

    def track_reply(self, reply: bytes) -> None:
        """A message with `reply` was delivered to this connection: allow responses to it.

        As nats-server, the subject is first checked like a publish, so a reply subject the user may
        already publish to is not tracked and a repeated delivery counts against a pending allowance.
        """
        replies = self.replies
        if replies is None or self.can_publish(reply):
            return
        now = time.monotonic()
        replies[reply] = [now, 0]
        self._since_prune += 1
        if self._since_prune > _REPLY_PRUNE_COUNT or now - self._last_prune > _REPLY_PRUNE_SECONDS:
            self._prune(now)

    def _prune(self, now: float) -> None:
        """Drop used-up and expired reply subjects (nats-server's pruneReplyPerms)."""
        assert self.replies is not None and self.responses is not None
        mm, ttl = self.responses.max_msgs, self.responses.expires
        for subject, (since, n) in list(self.replies.items()):
            if (mm > 0 and n >= mm) or (ttl > 0 and now - since > ttl):
                del self.replies[subject]
        self._since_prune = 0
        self._last_prune = now

    def deny_publish(self, subject: bytes) -> None:
        """Add `subject` to the publish denials (nats-server's mergeDenyPermissions)."""
        if self.publish is None:
            self.publish = Rule(None, [])
        if subject not in self.publish.deny:
            self.publish.deny.append(subject)
        self._pub_cache.clear()

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
                if matches_wildcards_literally(subj, subject) and (not q or q == queue):
                    return True
            return False

        if rule.allow is not None and not ok(rule.allow):
            return False
        return not ok(rule.deny)

    def copy(self) -> Permissions:
        """A fresh instance (its own cache) for one connection."""
        clone = Permissions({})
        clone.publish, clone.subscribe, clone.responses = self.publish, self.subscribe, self.responses
        clone._set_sub_deny()
        clone._reset_replies()
        return clone


@dataclass
class _User:
    name: str
    password: str
    account: str
    permissions: Permissions | None
    connection_types: frozenset[str] | None = None  # None: any kind of client connection


def _describe_user(entry: _User | None) -> tuple[str, ...]:
    if entry is None:
        return ("",)
    types = ",".join(sorted(entry.connection_types)) if entry.connection_types is not None else "*"
    return (entry.name, entry.password, entry.account, types)


class Authenticator:
    """Checks CONNECT credentials against the configured users, token or single user/password.

    Reads the normalized blocks the config schema leaves in `options` (`users` and `default_permissions`
    of the authorization block, `accounts` with each account's "users" and "default_permissions"); a
    user's own permissions win over its block's defaults.
    """

    def __init__(self, options: Options) -> None:
        self.username = options.username
        self.password = options.password
        self.token = options.authorization
        self.users: dict[str, _User] = {}
        self.nkeys: dict[str, _User] = {}
        self._add_users(options.users or [], DEFAULT_ACCOUNT, options.default_permissions)
        accounts = options.accounts
        self.accounts = [DEFAULT_ACCOUNT, *accounts]
        self.system_account = system_account_of(options)  # pynatsd.monitor.system serves it
        if self.system_account and self.system_account not in self.accounts:
            self.accounts.append(self.system_account)
        for name, acc in accounts.items():
            self._add_users(acc.users, name, acc.default_permissions)
        self.no_auth_user = options.no_auth_user
        self.tls_map = options.tls_map  # verify_and_map: client certificates name their users
        self._dns: list[tuple[_User, DN]] | None = None
        self.callout = options.auth_callout
        # What the auth callout granted each user it admitted (its nkey -> grant), while connected: the
        # callout's own dict (pynatsd.broker.callout), handed to every authenticator (reload, WebSocket).
        self.callout_grants: dict[str, UserGrant] = {}
        self.jwt: JwtAuthenticator | None = None
        if options.trusted is not None:  # operator mode: every client needs a user JWT
            from pynatsd.auth.jwt import JwtAuthenticator

            self.jwt = JwtAuthenticator(options, options.trusted)
        self.python: PythonAuthorizer | None = None
        if options.python_authorizer is not None:  # a callable decides every client (pynatsd.auth.python)
            from pynatsd.auth.python import PythonAuthorizer

            timeout = options.effective_auth_timeout
            self.python = PythonAuthorizer(options.python_authorizer, timeout, self.accounts)

    @staticmethod
    def new_nonce() -> str:
        """A fresh random challenge for one connection's INFO."""
        return base64.urlsafe_b64encode(secrets.token_bytes(11)).decode().rstrip("=")

    def _nkey_ok(self, conn: Connecting, opts: ConnectOptions) -> bool:
        return nonce_signed(conn.nonce, opts.nkey, opts.sig)

    def _add_users(self, specs: list[dict[str, Any]], account: str, default_perms: Any) -> None:
        for spec in specs:
            perms = spec.get("permissions", default_perms)
            types = spec.get("connection_types")
            user = _User(
                str(spec.get("nkey") or spec.get("user", "")),
                str(spec.get("password", "")),
                account,
                Permissions(perms) if perms else None,
                None if types is None else frozenset(types),
            )
            (self.nkeys if spec.get("nkey") else self.users)[user.name] = user

    def has_plaintext_passwords(self) -> bool:
        """True when a password is not bcrypt-hashed (nats-server warns at start)."""
        users = [u.password for u in self.users.values()]
        return any(p and not is_bcrypt(p) for p in (self.password, *users))

    @property
    def required(self) -> bool:
        return bool(self.username or self.token or self.users or self.nkeys or self.jwt or self.python)

    @property
    def wants_nonce(self) -> bool:
        """INFO carries a nonce for clients to sign (nkey users, and JWT users in operator mode)."""
        return bool(self.nkeys or self.jwt or self.python)

    def grant(self, user: str) -> UserGrant | None:
        """A JWT user's (or an auth callout user's) permissions, limits and expiry from its latest admission
        (None for the configured users)."""
        if self.callout_grants:
            granted = self.callout_grants.get(user)
            if granted is not None:
                return granted
        return self.jwt.grants.get(user) if self.jwt is not None else None

    def permissions(self, user: str) -> Permissions | None:
        if self.callout_grants:
            granted = self.callout_grants.get(user)
            if granted is not None:
                return granted.permissions.copy() if granted.permissions else None
        if self.jwt is not None:
            grant = self.jwt.grants.get(user)
            return grant.permissions.copy() if grant and grant.permissions else None
        entry = self.users.get(user) or self.nkeys.get(user)
        return entry.permissions.copy() if entry and entry.permissions else None

    def _checked_secret(self, opts: ConnectOptions) -> tuple[str, ...]:
        """What `authenticate` compares `opts` against: the mechanism and the stored secret (and account)
        it would use. Two authenticators that give the same answer here admit that client alike."""
        if self.python is not None:  # the callable is asked again (pynatsd.broker.connection.revalidate)
            return ("python",)
        if self.jwt is not None:  # JWTs are always checked again (account updates; cheap, no bcrypt)
            return ("jwt",)
        if opts.nkey and self.nkeys:
            entry = self.nkeys.get(opts.nkey)
            return ("nkey", *_describe_user(entry))
        if self.users or self.nkeys:
            if self._anonymous(opts):
                return ("no_auth_user", self.no_auth_user, *_describe_user(self._no_auth_entry()))
            return ("user", *_describe_user(self.users.get(opts.user)))
        if self.token:
            return ("token", self.token)
        if self.username:
            return ("single", self.username, self.password)
        return ("open",)

    def is_slow(self, opts: ConnectOptions) -> bool:
        """True when checking `opts` means a bcrypt hash (run off the event loop)."""
        secret = self._checked_secret(opts)
        kind = secret[0]
        if kind == "user" and len(secret) > 2:  # ("user", name, password, account, types)
            return is_bcrypt(secret[2])
        if kind == "token":
            return is_bcrypt(secret[1])
        if kind == "single":
            return is_bcrypt(secret[2])
        return False

    def still_admits(self, conn: Connecting, before: Authenticator) -> bool:
        """After a reload (self is the new configuration, `before` the old): does `conn`, connected with
        its CONNECT options, still get in as the same user and account? Unchanged credentials need no new
        check (no bcrypt on the loop); changed ones are checked again, as nats-server does. As there, a
        user the auth callout admitted is not (its credentials alone do not give its identity): it goes,
        here or in `user_moved`."""
        opts = conn.opts
        if self.jwt is not None and self.jwt.revoked(opts):
            # nats-server tells a live client its JWT was revoked (not a plain violation).
            conn.close(REVOCATION, errors.AUTHENTICATION_REVOKED)
            return False
        if self._maps(conn):  # cheap, and it depends on the certificate: checked again
            return self.authenticate(conn, opts) == (conn.user, conn.account)
        if self.jwt is None and self._checked_secret(opts) == before._checked_secret(opts):
            return True
        return self.authenticate(conn, opts) == (conn.user, conn.account)

    def user_moved(self, conn: Connecting) -> bool:
        """After a reload: the client's nkey or user is gone, or now belongs to another account. nats-server
        closes such a client at once, as a client closed, before checking its credentials again
        (clientHasMovedToDifferentAccount); JWT users, anonymous, token and single-user clients never have."""
        opts = conn.opts
        if self._maps(conn) and not opts.nkey:  # nats-server keeps the mapped user as the CONNECT's
            entry = self.users.get(conn.user)
            return entry is None or entry.account != conn.account
        if self.jwt is not None or not (self.users or self.nkeys) or not (opts.nkey or opts.user):
            return False
        entry = self.nkeys.get(opts.nkey) if opts.nkey else self.users.get(opts.user)
        return entry is None or entry.account != conn.account

    def decide(self, conn: Applicant, opts: ConnectOptions, workers: Executor) -> asyncio.Future[Verdict]:
        """The Python authorizer's verdict on `opts` (only with one configured: see `python`)."""
        assert self.python is not None
        verified = bool(opts.nkey) and self._nkey_ok(conn, opts)
        return self.python.decide(conn, opts, verified, workers)

    def authenticate(self, conn: Connecting, opts: ConnectOptions) -> tuple[str, str] | None:
        if self.python is not None:  # only `decide` asks the callable (it may take its time)
            return None
        if self.jwt is not None:
            return self.jwt.authenticate(conn, opts, conn.nonce)
        if opts.nkey and self.nkeys:
            entry = self.nkeys.get(opts.nkey)
            # As nats-server: the no_auth_user's own nkey needs no signature (anyone gets in as it).
            ok = entry is not None and (entry.name == self.no_auth_user or self._nkey_ok(conn, opts))
            return self._identity(conn, entry) if ok else None
        if self._maps(conn) and not (self._anonymous(opts) and self.no_auth_user in self.nkeys):
            return self._mapped(conn, opts)
        if self.users or self.nkeys:
            if self._anonymous(opts):
                return self._identity(conn, self._no_auth_entry())
            entry = self.users.get(opts.user)
            if entry is None:
                password_ok(opts.password, "x" * 8)  # similar work for unknown users
                return None
            if self._certificate_only(entry):
                return None
            return self._identity(conn, entry) if password_ok(opts.password, entry.password) else None
        if self.token:  # may be a bcrypt hash, as the passwords
            return ("", DEFAULT_ACCOUNT) if password_ok(opts.auth_token, self.token) else None
        if self.username:
            ok = _same(opts.user, self.username) & password_ok(opts.password, self.password)
            return (opts.user, DEFAULT_ACCOUNT) if ok else None
        return ("", DEFAULT_ACCOUNT)

    def _maps(self, conn: Connecting) -> bool:
        """verify_and_map decides who `conn` is: users are configured and it came to the client port."""
        return self.tls_map and bool(self.users) and self.jwt is None and conn.connection_type == "STANDARD"

    def identified(
        self, conn: Connecting, opts: ConnectOptions, identity: tuple[str, str] | None
    ) -> ConnectOptions:
        """`opts` as the server knows the client: with verify_and_map, the user its certificate named in
        place of the one it claimed (nats-server overwrites the CONNECT's user name), so the auth callout
        and its `auth_users` see who the client is, not who it says it is."""
        if identity is None or not self._maps(conn) or opts.user == identity[0]:
            return opts
        return replace(opts, user=identity[0])

    def _mapped(self, conn: Connecting, opts: ConnectOptions) -> tuple[str, str] | None:
        """The user the client's certificate names, in nats-server's order: its emails, DNS names and
        URIs, its subject as a DN (same order of RDNs, then any), its subject as Go prints it."""
        cert = peer_certificate(conn.transport)
        entry = self._user_of(cert, conn.connection_type) if cert is not None else None
        if entry is None:
            return None
        if opts.user:  # this CONNECT's (conn.opts: the previous one's, if any)
            log.warning('User "%s" found in connect proto, but user required from cert', opts.user)
        return entry.name, entry.account

    def _certificate_only(self, entry: _User) -> bool:
        """As nats-server: with mapping on, a user without a password that the client port may map is a
        certificate identity, not one anyone may claim by name (over WebSocket, say) with no password."""
        types = entry.connection_types
        return (
            self.tls_map
            and not entry.password
            and entry.name != self.no_auth_user
            and (types is None or "STANDARD" in types)
        )

    def _user_dns(self) -> list[tuple[_User, DN]]:
        """The users whose names are distinguished names, with the DN (parsed once)."""
        if self._dns is None:
            parsed = [(entry, parse_dn(entry.name)) for entry in self.users.values()]
            self._dns = [(entry, dn) for entry, dn in parsed if dn is not None]
        return self._dns

    def _user_of(self, cert: PeerCertificate, kind: str) -> _User | None:
        def allowed(entry: _User | None) -> _User | None:
            if entry is None or (entry.connection_types is not None and kind not in entry.connection_types):
                return None
            return entry

        for name, _dns in cert.names():
            entry = allowed(self.users.get(name))
            if entry is not None:
                return entry
        if cert.dn is not None:
            candidates = []
            for entry, dn in self._user_dns():
                if not allowed(entry):
                    continue
                if dn_equal(dn, cert.dn):
                    return entry
                candidates.append((entry, dn))
            for entry, dn in candidates:
                if dn_rdns_match(dn, cert.dn):
                    return entry
        for name in cert.subject_names:
            entry = allowed(self.users.get(name))
            if entry is not None:
                return entry
        return None

    def callout_role(self, opts: ConnectOptions, identity: tuple[str, str] | None) -> str:
        """What the auth callout has to do with this client (nats-server's processClientOrLeafAuthentication):
        "" nothing, "bypass" (one of the `auth_users`: the configured users decide), "ask" (anyone else).
        Config mode: everyone is delegated, admitted by the configured users or not (a client they refuse is
        in the global account, always delegated), but the users of an account `allowed_accounts` leaves
        out. Operator mode: the users of an account whose JWT delegates them (`authorization`)."""
        if self.jwt is not None:
            acc = self.jwt.account(identity[1]) if identity is not None else None
            external = acc.external_auth if acc is not None else None
            if external is None:
                return ""
            return "bypass" if raw_auth_user(opts, identity) in external["auth_users"] else "ask"
        callout = self.callout
        if callout is None:
            return ""
        account = identity[1] if identity is not None else DEFAULT_ACCOUNT
        allowed = callout.allowed_accounts
        if account != DEFAULT_ACCOUNT and allowed and account not in allowed:
            return ""
        return "bypass" if raw_auth_user(opts, identity) in callout.auth_users else "ask"

    def _anonymous(self, opts: ConnectOptions) -> bool:
        """A CONNECT without credentials, taken as the `no_auth_user` when there is one."""
        return bool(self.no_auth_user) and not (opts.user or opts.password or opts.auth_token)

    def _no_auth_entry(self) -> _User | None:
        """The `no_auth_user`: a user, or an nkey user (nats-server looks at nkeys first)."""
        return self.nkeys.get(self.no_auth_user) or self.users.get(self.no_auth_user)

    @staticmethod
    def _identity(conn: Connecting, entry: _User | None) -> tuple[str, str] | None:
        """(user, account) of `entry`, or None when absent or not allowed on this kind of connection."""
        if entry is None:
            return None
        kind = conn.connection_type
        if entry.connection_types is not None and kind not in entry.connection_types:
            return None
        return entry.name, entry.account


def nonce_signed(nonce: str, nkey: str, sig: str) -> bool:
    """True if `sig` (base64url, as a CONNECT carries it) is the user `nkey`'s signature of `nonce`."""
    import nacl.signing  # only configurations with nkey users need it (comes with `nkeys`)

    if not nonce or not sig:
        return False
    try:
        signature = base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4))
        # A user public key is base32(prefix byte 'U' + 32-byte ed25519 key + CRC16).
        raw = base64.b32decode(nkey + "=" * (-len(nkey) % 8))
        if len(raw) != 35 or not nkey.startswith("U"):
            return False
        nacl.signing.VerifyKey(raw[1:33]).verify(nonce.encode(), signature)
    except Exception:  # any malformed key or signature is simply a failed login
        return False
    return True
