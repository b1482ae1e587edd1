"""The structured blocks of `Options`, typed: the cluster and websocket listeners, the account resolver,
operator trust. The config schema (pynatsd.config) fills them; auth, the features and reload read them.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DEFAULT_POOL_SIZE = 3
DEFAULT_CONNECT_RETRIES = 0  # explicit routes retry forever; implicit ones (gossiped) give up


@dataclass
class ClusterOptions:
    """Everything the `cluster {}` block and the cluster flags configure. Durations in seconds."""

    name: str = ""  # empty: dynamic (a random name, replaced by a configured peer's)
    host: str = "0.0.0.0"
    port: int = 0  # -1: a random port; after start, the bound one
    advertise: str = ""
    urls: list[str] = field(default_factory=list)  # the configured routes (nats-route://[user:pass@]h:p)
    pool_size: int = DEFAULT_POOL_SIZE  # -1: no pool, no pinned accounts; else pynatsd's own is 1 (routes)
    # pinned accounts: a route of their own to each server (the system account's is added at start)
    accounts: list[str] = field(default_factory=list)
    no_advertise: bool = False
    connect_retries: int = DEFAULT_CONNECT_RETRIES
    compression: str = "off"
    username: str = ""
    password: str = ""
    auth_timeout: float = 0.0  # 0: pynatsd.config.cluster's DEFAULT_AUTH_TIMEOUT
    dynamic_name: bool = False  # set at start when `name` was not configured
    ping_interval: float = 0.0  # 0: the server's, at most ROUTE_MAX_PING_INTERVAL
    ping_max: int = 0  # 0: the server's
    # `tls {}`: cert_file, key_file, ca_file, timeout (seconds), verify_and_map and
    # verify_cert_and_check_known_urls (booleans, when set). Routes then run mutual TLS, as
    # nats-server's: each side presents its certificate and verifies the other's against ca_file.
    tls: dict[str, Any] | None = None
    # `permissions`: the routes' import (what this server asks its peers for: the RS+ it sends) and export
    # (what they may ask of it: the RS+ it takes, the messages it sends), normalized as a user's
    # permissions, import as `publish`, export as `subscribe` (nats-server's mapping); None: no limits
    permissions: dict[str, Any] | None = None

    @property
    def auth_required(self) -> bool:
        return bool(self.username)

    def certificate_check(self) -> tuple[list[str], str | None] | None:
        """What a peer's certificate must name when the `tls {}` block asks (None: it does not, the cluster
        user and password decide): one of the route URLs' hosts, with verify_cert_and_check_known_urls,
        and/or the cluster user, with verify_and_map."""
        tls = self.tls or {}
        check_urls, map_user = (
            bool(tls.get("verify_cert_and_check_known_urls")),
            bool(tls.get("verify_and_map")),
        )
        if not (check_urls or map_user):
            return None
        hosts = [urllib.parse.urlsplit(url).hostname or "" for url in self.urls] if check_urls else []
        return hosts, self.username if map_user else None


@dataclass(frozen=True)
class PythonAuthorizerOptions:
    """`authorization { python: ... }`: the callable that decides who connects (pynatsd.auth.python)."""

    path: str  # "module:callable", or the name of an entry point of the `pynatsd.authorizers` group
    timeout: float = 0.0  # seconds; 0: the authorization timeout (`Options.effective_auth_timeout`)
    # The callable, imported when the configuration was read (None: imported when the server starts).
    target: Callable[..., object] | None = field(default=None, compare=False, repr=False)


# seconds between a remote's connect attempts (nats-server's DEFAULT_LEAF_NODE_RECONNECT)
DEFAULT_LEAF_RECONNECT = 1.0


@dataclass
class LeafRemote:
    """One entry of `leafnodes { remotes [...] }`: a hub this server dials as a leaf node."""

    urls: list[str] = field(default_factory=list)  # nats-leaf://[user:pass@]host:port (or nats://)
    account: str = ""  # the local account bound to the hub's (empty: the global account $G)
    hub: bool = False  # this side is the hub of the connection (the remote takes the spoke's role)
    no_randomize: bool = False  # try the URLs in order rather than at random
    deny_imports: list[str] = field(default_factory=list)  # subjects the hub's messages may not bring
    deny_exports: list[str] = field(default_factory=list)  # subjects our messages may not take there
    credentials: str = ""  # a creds file (user JWT and seed): its JWT and the hub's nonce signed in CONNECT
    seed: str = ""  # `nkey`/`seed`: a user seed; its public key and the hub's nonce signed in CONNECT
    ws_compression: bool = False  # ws:// URLs: ask the hub for permessage-deflate
    ws_no_masking: bool = False  # ws:// URLs: ask the hub to take our frames unmasked
    # `tls {}` (cert_file, key_file, ca_file, timeout, insecure) or a `tls://` URL ({}): upgrade after INFO
    tls: dict[str, Any] | None = None


@dataclass
class LeafNodeOptions:
    """Everything the `leafnodes {}` block configures (pynatsd.config.leafnodes). Durations in seconds."""

    host: str = "0.0.0.0"
    port: int = 0  # 0: no leafnode listener (remotes only); -1: a random port; after start, the bound one
    advertise: str = ""
    no_advertise: bool = False
    reconnect: float = DEFAULT_LEAF_RECONNECT
    min_version: str = ""  # `min_version`: a CONNECT naming a lower version is refused
    # `authorization {}`: one user (or token) bound to `account`, or `users` each with its account
    username: str = ""
    password: str = ""
    token: str = ""
    account: str = ""
    nkey: str = ""  # a user's public nkey: a CONNECT with it and the nonce signed binds `account`
    users: list[dict[str, str]] = field(default_factory=list)  # {"user", "password", "account"}
    auth_timeout: float = 0.0  # 0: the server's
    remotes: list[LeafRemote] = field(default_factory=list)
    tls: dict[str, Any] | None = None  # `tls {}` (cert_file, key_file, ca_file, verify, timeout)


@dataclass
class MQTTOptions:
    """Everything the `mqtt {}` block configures (pynatsd.config.mqtt). Durations in seconds."""

    host: str = "0.0.0.0"
    port: int = 0  # 0 = no listener; -1 = a random port
    username: str = ""
    password: str = ""
    token: str = ""
    auth_timeout: float = 0.0  # 0: the server's
    no_auth_user: str = ""
    # JetStream tuning of MQTT's QoS 1/2 state, checked and shown in /varz as nats-server's
    ack_wait: float = 0.0
    js_api_timeout: float = 0.0
    max_ack_pending: int = 0
    js_domain: str = ""
    stream_replicas: int = 0
    consumer_memory_storage: bool = False
    consumer_inactive_threshold: float = 0.0
    reject_qos2_publish: bool = False
    downgrade_qos2_subscribe: bool = False
    tls: dict[str, Any] | None = (
        None  # the raw `tls {}` block (cert_file, key_file, ca_file, verify, timeout)
    )

    @property
    def auth_override(self) -> bool:
        """True when the block sets credentials of its own (they replace the server's single user, token
        and no_auth_user for MQTT clients, as nats-server's authOverride)."""
        return bool(self.username or self.token or self.no_auth_user)


@dataclass
class WebSocketOptions:
    """Everything the `websocket {}` block configures. Durations in seconds."""

    host: str = "0.0.0.0"
    port: int = 0  # 0 = no listener; -1 = a random port
    advertise: str = ""
    no_tls: bool = False
    tls: dict[str, Any] | None = (
        None  # the raw `tls {}` block (cert_file, key_file, ca_file, verify, timeout)
    )
    same_origin: bool = False
    allowed_origins: list[str] = field(default_factory=list)
    handshake_timeout: float = 0.0  # 0: none (nats-server's default)
    compression: bool = False
    username: str = ""
    password: str = ""
    token: str = ""
    auth_timeout: float = 0.0  # 0: the server's
    no_auth_user: str = ""
    user_cookie: str = ""
    pass_cookie: str = ""
    token_cookie: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    ping_interval: float = 0.0  # 0: the server's

    @property
    def auth_override(self) -> bool:
        """True when the block sets credentials of its own (they then replace the server's single user or
        token for WebSocket clients, as nats-server's authOverride)."""
        return bool(self.username or self.token or self.no_auth_user)


@dataclass
class AccountConfig:
    """One account of the `accounts {}` block, as the config schema normalized it."""

    users: list[dict[str, Any]] = field(default_factory=list)  # as Options.users
    default_permissions: dict[str, Any] | None = None
    # {"stream" or "service": subject, "accounts" (None: public), "response_type", "threshold", ...}
    exports: list[dict[str, Any]] = field(default_factory=list)
    # {"stream" or "service": {"account", "subject"}, "to", "prefix"}
    imports: list[dict[str, Any]] = field(default_factory=list)
    jetstream: dict[str, Any] | None = None  # its JetStream limits; None: no JetStream


@dataclass
class ResolverConfig:
    """The account resolver of operator mode: `memory` (accounts from `resolver_preload` only), or a
    `full` or `cache` directory of account JWTs."""

    type: str = "memory"  # memory, full or cache
    dir: str = ""
    limit: int = 0  # accounts a directory keeps (cache: 1000 when not given)
    ttl: float = 0.0  # cache: seconds an account JWT is kept
    delete: str = ""  # full with allow_delete: "hard" or "rename"; empty: deletes refused

    @property
    def directory(self) -> bool:
        return self.type != "memory"

    def shown(self) -> object:
        """As a reload's message shows it: MEMORY, or the directory's settings."""
        if not self.directory:
            return "MEMORY"
        shown: dict[str, object] = {"type": self.type, "dir": self.dir, "limit": self.limit}
        if self.type == "cache":
            shown["ttl"] = self.ttl
        elif self.delete:
            shown["delete"] = self.delete
        return shown


@dataclass
class AuthCalloutOptions:
    """`authorization { auth_callout {...} }` (config mode), as the config schema checked it."""

    issuer: str  # the account public nkey that signs the service's responses and user JWTs
    account: str = "$G"  # where the requests go, and where the service's own users live
    auth_users: list[str] = field(default_factory=list)  # who bypasses the callout (the service itself)
    xkey: str = ""  # the service's public xkey: requests and responses are then encrypted
    allowed_accounts: list[str] = field(default_factory=list)  # empty: users of every account are delegated


@dataclass
class TrustedOperators:
    """Operator mode, from the `operator` JWTs and `trusted` keys (checked by the config schema)."""

    keys: list[str] = field(default_factory=list)  # the keys that may issue accounts
    # Operators with strict_signing_key_usage: their own key may not issue accounts.
    strict_operators: list[str] = field(default_factory=list)
    # Their signing keys: the accounts these issue may sign users with signing keys only.
    strict_signers: list[str] = field(default_factory=list)


@dataclass
class RemoteGateway:
    """One entry of the gateway block's `gateways` list: a remote cluster and where to reach it."""

    name: str = ""
    urls: list[str] = field(default_factory=list)  # nats://[user:pass@]host:port
    tls: dict[str, Any] | None = None  # its own `tls {}` (the gateway block's otherwise)


@dataclass
class GatewayOptions:
    """Everything the `gateway {}` block configures (superclusters, pynatsd.gateways). Durations in
    seconds."""

    name: str = ""  # this cluster's name among the gateways
    host: str = "0.0.0.0"
    port: int = 0  # -1: a random port; after start, the bound one
    advertise: str = ""
    gateways: list[RemoteGateway] = field(default_factory=list)
    username: str = ""
    password: str = ""
    auth_timeout: float = 0.0  # 0: the server's
    reject_unknown_cluster: bool = False
    connect_retries: int = 0
    # `tls {}` (cert_file, key_file, ca_file, verify, insecure, timeout): TLS first, both ways
    tls: dict[str, Any] | None = None

    @property
    def auth_required(self) -> bool:
        return bool(self.username)
