"""Server options: one typed object holding every default and limit (nats-server's names and values).

Built from defaults, then a config file, then command-line flags; a reload builds a new one and swaps it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from pynatsd.base.blocks import (
    AccountConfig,
    AuthCalloutOptions,
    ClusterOptions,
    GatewayOptions,
    LeafNodeOptions,
    MQTTOptions,
    PythonAuthorizerOptions,
    ResolverConfig,
    TrustedOperators,
    WebSocketOptions,
)

DEFAULT_PORT = 4222
DEFAULT_HTTP_PORT = 8222
MAX_CONTROL_LINE = 4096
MAX_PAYLOAD = 1024 * 1024
MAX_PENDING = 64 * 1024 * 1024
MAX_CONNECTIONS = 64 * 1024
PING_INTERVAL = 120.0
PING_MAX = 2
WRITE_DEADLINE = 10.0
AUTH_TIMEOUT = 2.0
TLS_TIMEOUT = 2.0
LAME_DUCK_DURATION = 120.0
LAME_DUCK_GRACE_PERIOD = 10.0
CLOSED_CONNECTIONS_KEPT = 10_000
# Seconds a monitoring HTTP connection may take to send a request, or stay idle between two (nats-server's
# ReadHeaderTimeout): a half-sent or silent one is closed then, and does not hold a descriptor.
HTTP_READ_TIMEOUT = 5.0
SYSTEM_ACCOUNT = "$SYS"  # the system account when the configuration names none (as nats-server)


@dataclass
class Options:
    """Everything configurable about one server. Durations are in seconds, sizes in bytes."""

    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    server_name: str = ""
    client_advertise: str = ""
    http_host: str = ""  # empty: the client host
    http_port: int = 0  # 0 = no monitoring; -1 = a random port
    https_port: int = 0
    http_base_path: str = ""

    max_payload: int = MAX_PAYLOAD
    max_pending: int = MAX_PENDING
    max_control_line: int = MAX_CONTROL_LINE
    max_connections: int = MAX_CONNECTIONS
    max_subscriptions: int = 0  # 0 = unlimited
    ping_interval: float = PING_INTERVAL
    ping_max: int = PING_MAX
    write_deadline: float = WRITE_DEADLINE
    no_fast_producer_stall: bool = False  # drop slow consumers instead of stalling fast producers
    auth_timeout: float = 0.0  # 0: nats-server's default, see `effective_auth_timeout`
    lame_duck_duration: float = LAME_DUCK_DURATION
    lame_duck_grace_period: float = LAME_DUCK_GRACE_PERIOD
    no_header_support: bool = False
    disable_sublist_cache: bool = False
    max_closed_clients: int = CLOSED_CONNECTIONS_KEPT

    debug: bool = False
    trace: bool = False
    logtime: bool = True
    logtime_utc: bool = False
    log_file: str = ""
    log_size_limit: int = 0  # bytes; past it the log file is rotated (0: never)
    log_max_num: int = 0  # rotated files kept, the current one included (0: all)
    syslog: bool = False  # log to the local syslog
    remote_syslog: str = ""  # log to this syslog: udp://host:port, tcp://host:port, unix:///path
    max_traced_msg_len: int = 0  # payload bytes shown per traced message (0: all)
    pid_file: str = ""
    ports_file_dir: str = ""

    username: str = ""
    password: str = ""
    authorization: str = ""  # token
    no_auth_user: str = ""
    python_authorizer: PythonAuthorizerOptions | None = None  # `authorization { python: ... }`

    tls: bool = False
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca_cert: str = ""
    tls_verify: bool = False
    tls_map: bool = False  # verify_and_map: a client's certificate names its user
    tls_timeout: float = TLS_TIMEOUT
    tls_handshake_first: bool = False
    tls_certs: list[tuple[str, str]] = field(default_factory=list)  # several (cert, key) pairs, by SNI
    tls_ciphers: list[str] = field(default_factory=list)  # OpenSSL names; empty: Python's defaults
    tls_curves: list[str] = field(default_factory=list)  # OpenSSL group names, preferred first
    tls_min_version: str = ""  # "1.2" or "1.3"; empty: 1.2

    config_file: str = ""
    config_digest: str = ""  # `sha256:<hex>` of the parsed file, as nats-server computes it

    # The blocks the config schema normalizes (pynatsd.config.schema), read by pynatsd.auth and the features.
    # `authorization {}`: its users array (None: none given), each {"user" or "nkey", "password",
    # "permissions", "connection_types"}, and its default permissions ({"publish", "subscribe", ...}).
    users: list[dict[str, Any]] | None = None
    default_permissions: dict[str, Any] | None = None
    accounts: dict[str, AccountConfig] = field(default_factory=dict)  # the `accounts {}` block
    system_account: str = ""  # empty: `$SYS`, unless no_system_account (see `system_account_of`)
    no_system_account: bool = False
    # Operator mode: `trusted` keys as given, then what the schema derived from them and the operator JWTs
    # (None: not operator mode), the account resolver and its preloaded account JWTs (name -> JWT).
    trusted_keys: list[str] = field(default_factory=list)
    trusted: TrustedOperators | None = None
    auth_callout: AuthCalloutOptions | None = None  # see pynatsd.broker.callout
    resolver: ResolverConfig | None = None
    resolver_preload: dict[str, str] = field(default_factory=dict)
    # `jetstream`: the file's value (a block, or true/enabled/false; `-js` sets True), and the store directory
    # of `-sd` or of the top-level `store_dir` (it wins over the block's); see pynatsd.config.jetstream.
    jetstream: bool | str | dict[str, Any] | None = None
    jetstream_store_dir: str = ""
    cluster: ClusterOptions | None = None  # the block and the cluster flags; see pynatsd.config.cluster
    websocket: WebSocketOptions | None = None  # see pynatsd.config.websocket
    gateway: GatewayOptions | None = None  # see pynatsd.config.gateway
    leafnodes: LeafNodeOptions | None = None  # see pynatsd.config.leafnodes
    mqtt: MQTTOptions | None = None  # see pynatsd.config.mqtt

    @property
    def effective_auth_timeout(self) -> float:
        """`auth_timeout`, or nats-server's default: 2 s, or the TLS handshake limit plus 1 s under TLS."""
        if self.auth_timeout > 0:
            return self.auth_timeout
        if self.tls or self.tls_verify or self.tls_cert or self.tls_certs:
            return self.tls_timeout + 1.0
        return AUTH_TIMEOUT

    @property
    def headers(self) -> bool:
        return not self.no_header_support


# Options a reload applies, with nats-server's "Reloaded: …" line for each (None: `name = value`).
RELOADABLE_LOGGING = ("debug", "trace", "logtime", "logtime_utc", "log_file", "log_size_limit", "log_max_num",
                      "syslog", "remote_syslog", "max_traced_msg_len")  # fmt: skip
_RELOAD_LINES = {
    "username": "authorization username",
    "password": "authorization password",
    "authorization": "authorization token",
    "auth_timeout": None,
    "no_auth_user": None,
    "max_subscriptions": None,
}


def reload_changes(old: Options, new: Options) -> list[str]:
    """What a reload from `old` to `new` changes, as nats-server logs it (`Reloaded: debug = true`);
    secrets are named, never shown."""
    from pynatsd.base.formats import go_duration  # a reload's log only (idle RSS)

    lines = []
    for name in RELOADABLE_LIMITS:
        value = getattr(new, name)
        if getattr(old, name) != value:
            shown = go_duration(value) if name in ("ping_interval", "write_deadline") else value
            lines.append(f"Reloaded: {name} = {shown}")
    for name in (*RELOADABLE_LOGGING, *_RELOAD_LINES):
        after = getattr(new, name)
        if getattr(old, name) == after:
            continue
        if name == "auth_timeout":
            lines.append(f"Reloaded: authorization timeout = {new.effective_auth_timeout:g}")
        else:
            shown = str(after).lower() if isinstance(after, bool) else after
            lines.append(f"Reloaded: {_RELOAD_LINES.get(name) or f'{name} = {shown}'}")

    if old.users != new.users:
        lines.append("Reloaded: authorization users")
    if old.python_authorizer != new.python_authorizer:
        lines.append("Reloaded: authorization python")
    # nats-server's users are bound to their account objects: a change of users is one of accounts too
    if old.accounts != new.accounts or old.users != new.users:
        lines.append("Reloaded: accounts")
    return lines


# What a reload (SIGHUP) applies to the running server; changing anything else makes the reload fail and
# keeps the running configuration, instead of silently ignoring the change (nats-server refuses the
# options it cannot reload the same way).
# The limits nats-server reloads, as it logs each (`Reloaded: max_payload = 2048`): how its value shows
RELOADABLE_LIMITS = ("max_payload", "max_control_line", "ping_interval", "ping_max", "write_deadline")

# The blocks a reload takes as a whole, as it took `Options.extra` before they were typed fields: the
# authorization and accounts blocks apply; the listeners keep the blocks they started with; a change of
# the resolver, the cluster or the system account is refused by `unreloadable_changes`, with its own message.
RELOADABLE_BLOCKS = ("users", "default_permissions", "accounts", "system_account", "no_system_account",
                     "trusted_keys", "trusted", "resolver", "resolver_preload", "jetstream",
                     "jetstream_store_dir", "cluster", "websocket", "gateway",
                     "leafnodes", "mqtt")  # fmt: skip

RELOADABLE = (
    *RELOADABLE_LIMITS,
    "username",
    "password",
    "authorization",
    "no_auth_user",
    "python_authorizer",
    "auth_timeout",
    "max_subscriptions",
    "max_connections",
    *RELOADABLE_BLOCKS,
    *RELOADABLE_LOGGING,
)


def unreloadable_changes(old: Options, new: Options) -> list[str]:
    """`config reload not supported for ...` messages for each option that differs and is not RELOADABLE
    (none of those holds a secret: they may be logged)."""
    changes = []
    for f in fields(Options):
        before, after = getattr(old, f.name), getattr(new, f.name)
        if f.name not in RELOADABLE and f.name not in ("config_file", "config_digest") and before != after:
            changes.append(f"config reload not supported for {f.name}: old={before!r}, new={after!r}")
    # Operator mode: the resolver's services start with the server (nats-server refuses these too).
    if (old.resolver is None) != (new.resolver is None):
        changes.append("config reload does not support moving to or from an account resolver")
    elif old.resolver is not None and new.resolver is not None and old.resolver != new.resolver:
        changes.append(
            f"config reload not supported for resolver: old={old.resolver.shown()!r}, "
            f"new={new.resolver.shown()!r}"
        )
    if old.cluster != new.cluster:  # pynatsd.routes: routes start once
        changes.append("config reload not supported for cluster: the cluster block and flags changed")
    if old.gateway != new.gateway:  # pynatsd.gateways: gateways start once
        changes.append("config reload not supported for gateway: the gateway block changed")
    if old.leafnodes != new.leafnodes:  # pynatsd.leafnodes start once (the block holds passwords: not shown)
        changes.append("config reload not supported for leafnodes: the leafnodes block changed")
    if old.mqtt != new.mqtt:  # pynatsd.mqtt starts once (the block may hold a password: not shown)
        changes.append("config reload not supported for mqtt: the mqtt block changed")
    systems = system_account_of(old), system_account_of(new)
    if systems[0] != systems[1]:  # the resolver's services live in the system account
        changes.append(f"config reload not supported for SystemAccount: old={systems[0]}, new={systems[1]}")
    return changes


def system_account_of(opts: Options) -> str:
    """The system account a configuration gives: the one named, else `$SYS` unless `no_system_account`
    (which, as in nats-server, only turns off the default)."""
    named = opts.system_account
    if named or opts.no_system_account:
        return named
    return SYSTEM_ACCOUNT
