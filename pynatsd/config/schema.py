"""The configuration schema: every key nats-server accepts, checked and mapped onto `Options`.

One table per block, keyed by lower-case name, with nats-server's aliases (`pub`/`publish`/`import`,
`user`/`username`, `logfile`/`log_file`, ...): keys are case-insensitive, as in nats-server. Every
problem is collected (nats-server reports them all at once) as `file:line:col: message`, then raised
together as `ConfigErrors`. Security fails closed: a key that decides who may connect or what clients
may do and that pynatsd does not implement is an error naming the key, never a warning, so such a file
stops the server, `-t` and a reload alike.

Blocks that other work streams are building (`cluster`, `websocket`, `jetstream`) are refused until
their parser is registered with `register_block`.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from pynatsd.auth.nkeys import valid_public_nkey
from pynatsd.auth.users import DEFAULT_ACCOUNT, ResponsePermission
from pynatsd.base import tls
from pynatsd.base.blocks import (
    AccountConfig,
    AuthCalloutOptions,
    PythonAuthorizerOptions,
    ResolverConfig,
    TrustedOperators,
)
from pynatsd.base.options import Options, system_account_of
from pynatsd.base.values import ConfigValueError, parse_duration, to_bool, to_int, to_str
from pynatsd.config import cluster as cluster_block
from pynatsd.config import gateway as gateway_block
from pynatsd.config import leafnodes as leafnodes_block
from pynatsd.config import mqtt as mqtt_block
from pynatsd.config import websocket as websocket_block
from pynatsd.config.jetstream import account_js_limits
from pynatsd.config.parser import ConfigMap, Where
from pynatsd.protocol.subjects import is_valid_subject

if TYPE_CHECKING:
    from pynatsd.auth.jwt import Claims

_NOWHERE = Where("<config>", 0, 0)
MIN_LAME_DUCK_DURATION = 30.0  # nats-server refuses shorter ones
_RESERVED_ACCOUNT = "$G"


class ConfigWarning(str):
    """A warning about the config; `strict` ones (nats-server's own warnings, such as a duration given as
    a number) fail `-t` as in nats-server, the others (keys pynatsd ignores) are only reported."""

    strict: bool = True


class ConfigErrors(ConfigValueError):
    """Every problem of one configuration, one `file:line:col: message` per line."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


# -- value converters (shared with the command line and the auth module) -----------------------------
def to_block(key: str, value: Any) -> ConfigMap:
    if not isinstance(value, dict):
        raise ConfigValueError(f"{key}: expected a block {{...}}, got {value!r}")
    if isinstance(value, ConfigMap):
        return value
    block = ConfigMap()
    block.update(value)
    return block


def to_strings(key: str, value: Any) -> list[str]:
    """A string or an array of strings."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if not isinstance(item, str):
            raise ConfigValueError(f"{key}: expected a string or an array of strings, got {item!r}")
    return list(items)


def host_port(key: str, value: Any) -> tuple[str, int]:
    """`port`, or `host:port` (`-1`: a random port); host '' when only a port is given."""
    if isinstance(value, int) and not isinstance(value, bool):
        return "", value
    if not isinstance(value, str):
        raise ConfigValueError(f"{key}: expected port or host:port, got {value!r}")
    host, sep, port = value.rpartition(":")
    if not sep:
        raise ConfigValueError(f'{key}: could not parse address string "{value}"')
    if not re.fullmatch(r"-?\d+", port):
        raise ConfigValueError(f'could not parse port "{port}"')
    if host.startswith("["):
        host = host[1:-1] if host.endswith("]") else ""
    elif ":" in host:
        raise ConfigValueError(f'{key}: could not parse address string "{value}" (too many colons)')
    return host, int(port)


def go_type(value: Any) -> str:
    """The Go type nats-server's config reader gives `value` (its errors name it)."""
    return {bool: "bool", int: "int64", float: "float64"}.get(type(value), type(value).__name__)


# -- the walk ------------------------------------------------------------------------------------------
class Ctx:
    """Collects errors and warnings, each prefixed with the position of the key it is about."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.warnings: list[ConfigWarning] = []
        self.places: dict[str, Where] = {}  # where blocks checked across blocks were written
        self.operators: list[Claims] = []  # the operator JWTs, verified (pynatsd.auth.jwt)

    def error(self, where: Where, message: str) -> None:
        self.errors.append(f"{where}: {message}")

    def warn(self, where: Where, message: str, strict: bool = True) -> None:
        warning = ConfigWarning(f"{where}: {message}")
        warning.strict = strict
        self.warnings.append(warning)

    @contextlib.contextmanager
    def at(self, where: Where) -> Iterator[None]:
        """Records a ConfigValueError (or a bad file: OSError) raised inside as an error at `where`."""
        try:
            yield
        except ConfigErrors as exc:
            self.errors.extend(exc.errors)
        except ValueError as exc:  # ConfigValueError, or a check of another module (tls)
            self.error(where, str(exc))
        except OSError as exc:
            name = f" {exc.filename}" if exc.filename else ""
            self.error(where, f"error opening file{name}: {exc.strerror or exc}")


def entries(block: ConfigMap, parent: Where) -> Iterator[tuple[str, str, Any, Where]]:
    """(lower-case key, key as written, value, position) for each key of `block`."""
    for key, value in block.items():
        yield key.lower(), key, value, block.position(key, parent)


def unknown(ctx: Ctx, block: ConfigMap, key: str, where: Where) -> None:
    """nats-server's unknown-field error; keys defined only to be referenced as `$variables` are fine."""
    if key not in block.used:
        ctx.error(where, f'unknown field "{key}"')


Handler = Callable[[Ctx, Options, str, Any, Where], None]


def _field(name: str, convert: Callable[[str, Any], Any]) -> Handler:
    def apply(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
        setattr(opts, name, convert(key, value))

    return apply


def refused(key: str, what: str, access: bool = False) -> ConfigValueError:
    """The error for a key pynatsd does not implement (`access`: it decides who gets in or may do what)."""
    why = " (it controls who may connect or what clients may do)" if access else ""
    return ConfigValueError(f'"{key}": pynatsd does not support {what}{why}; remove it to run pynatsd')


def refuse(what: str, access: bool = False) -> Handler:
    """A handler refusing the key (see `refused`)."""

    def apply(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
        raise refused(key, what, access)

    return apply


def ignore(convert: Callable[[str, Any], Any] | None = None) -> Handler:
    """A key that changes nothing a client may do and that pynatsd does not implement: type-checked,
    then a warning."""

    def apply(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
        if convert is not None:
            convert(key, value)
        ctx.warn(where, f'"{key}" is not supported by pynatsd and is ignored', strict=False)

    return apply


def _table(*rows: tuple[tuple[str, ...], Handler]) -> dict[str, Handler]:
    return {alias: handler for aliases, handler in rows for alias in aliases}


# -- parsers registered by other capabilities ---------------------------------------------------------
# Block name -> its parser. cluster, websocket and jetstream are refused until registered.
BLOCK_PARSERS: dict[str, Handler] = {}
_PENDING_BLOCKS = {
    "cluster": ("cluster", "clustering (routes)"),
    "websocket": ("websocket", "WebSocket clients"),
    "ws": ("websocket", "WebSocket clients"),
    "jetstream": ("jetstream", "JetStream"),
    "store_dir": ("jetstream", "JetStream"),
    "storedir": ("jetstream", "JetStream"),
}


def register_block(name: str, parser: Handler) -> None:
    """Registers the parser of a block that is refused until then (`cluster`, `websocket`,
    `jetstream`); its aliases (`ws`, `store_dir`) reach it too, with the key as written."""
    BLOCK_PARSERS[name] = parser


def _websocket(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    websocket_block.apply(opts, key, value)


register_block("websocket", _websocket)


def _cluster(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    cluster_block.apply(opts, key, value)
    if opts.cluster is not None and isinstance(value, ConfigMap):
        opts.cluster.permissions = _route_permissions(ctx, value, where)


_DEPRECATED_ROUTE_PERMISSIONS = (
    'invalid use of field "authorization": setting "permissions" within cluster authorization block is '
    "deprecated"
)


def _route_permissions(ctx: Ctx, block: ConfigMap, where: Where) -> dict[str, Any] | None:
    """The cluster's `permissions` (`import`: what this server asks its peers for, `export`: what it
    lets them ask for), normalized as a user's (`publish` = import, `subscribe` = export). As nats-server,
    the `authorization {}` block's `permissions` (deprecated, a warning) count when the block has none."""
    own: dict[str, Any] | None = None
    legacy: dict[str, Any] | None = None
    for low, name, value, at in entries(block, where):
        if low == "permissions":
            own = _cluster_permissions(ctx, name, value, at)
        elif low == "authorization" and isinstance(value, ConfigMap):
            for inner, iname, ivalue, iat in entries(value, at):
                if inner == "permissions":
                    ctx.warn(at, _DEPRECATED_ROUTE_PERMISSIONS)
                    legacy = _cluster_permissions(ctx, iname, ivalue, iat, at)
    return own if own is not None else legacy


def _cluster_permissions(
    ctx: Ctx, key: str, value: Any, where: Where, checked_at: Where | None = None
) -> dict[str, Any] | None:
    """One route permissions block, with nats-server's checks: no dynamic responses, no queue groups
    (export subjects are parsed as a user's subscribe ones, then refused as nats-server's words say).
    `checked_at`: the deprecated place (the `authorization` block), where nats-server takes dynamic
    responses as a user's (their blanket publish allow turned off: nothing imported) and drops them."""
    errors = len(ctx.errors)
    with ctx.at(where):
        perms = parse_permissions(ctx, key, value, where)
    if len(ctx.errors) > errors:
        return None
    with ctx.at(checked_at or where):
        if "allow_responses" in perms:
            if checked_at is None:
                raise ConfigValueError("Cluster permissions do not support dynamic responses")
            if ResponsePermission.parse(perms.pop("allow_responses")) is not None:
                publish = perms.setdefault("publish", {"deny": []})
                if publish.get("allow") is None:
                    publish["allow"] = []
        for side, direction in (("publish", "import"), ("subscribe", "export")):
            for kind in ("allow", "deny"):
                for subject in perms.get(side, {}).get(kind) or []:
                    if not is_valid_subject(subject.encode()):
                        raise ConfigValueError(
                            f'cluster {direction} {kind}: subject "{subject}" is not a valid subject'
                        )
        return perms
    return None


register_block("cluster", _cluster)


def _gateway(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    gateway_block.apply(opts, key, value)


def _leafnodes(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    leafnodes_block.apply(opts, key, value)


def _mqtt(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    def place(block: Any, name: str) -> Where:
        return block.position(name, where) if isinstance(block, ConfigMap) else where

    opts.mqtt = mqtt_block.parse_block(
        value,
        lambda block, name, message: ctx.error(place(block, name), message),
        lambda block, name, message: ctx.warn(place(block, name), message),
    )


# The `jetstream {}` keys pynatsd.config.jetstream reads, and those it does not implement: encryption at
# rest is refused by name (it protects data), the rest are unknown fields.
_JETSTREAM_KEYS = frozenset(
    {"store_dir", "store", "storedir", "max_memory_store", "max_mem_store", "max_mem", "max_file_store",
     "max_file", "domain", "sync_interval", "enabled", "max_buffered_msgs", "max_buffered_size",
     "meta_compact", "meta_compact_size"}
)  # fmt: skip
_JETSTREAM_ENCRYPTION = frozenset({"key", "ek", "cipher", "prev_encryption_key", "tpm"})


def _jetstream(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    if key.lower() in ("store_dir", "storedir"):  # the top-level alias of jetstream's store_dir
        opts.jetstream_store_dir = to_str(key, value)
        return
    if isinstance(value, dict):
        block = to_block(key, value)
        for low, k, v, at in entries(block, where):
            if low == "max_buffered_msgs" and (isinstance(v, bool) or not isinstance(v, int)):
                ctx.error(at, f'Expected a parseable size for "{k}", got {v}')
            if low in _JETSTREAM_ENCRYPTION:
                with ctx.at(at):
                    raise refused(k, "JetStream encryption at rest")
            if low not in _JETSTREAM_KEYS:
                unknown(ctx, block, k, at)
        value = dict(block)
    elif not isinstance(value, bool | str):
        raise ConfigValueError(f"{key}: expected a block, a boolean or enabled/disabled, got {value!r}")
    opts.jetstream = value


register_block("jetstream", _jetstream)


def _pending(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    name, what = _PENDING_BLOCKS[key.lower()]
    parser = BLOCK_PARSERS.get(name)
    if parser is None:
        if isinstance(value, ConfigMap):  # a malformed address is named before the block is refused
            for low, k, v, at in entries(value, where):
                if low == "listen":
                    with ctx.at(at):
                        host_port(k, v)
        raise refused(key, f"{what} yet")
    else:
        parser(ctx, opts, key, value, where)


# -- permissions, users, accounts -----------------------------------------------------------------------
def _subjects(key: str, value: Any, queue: bool) -> list[str]:
    if isinstance(value, list):
        if not all(isinstance(v, str) for v in value):
            raise ConfigValueError("Subject in permissions array cannot be cast to string")
    elif not isinstance(value, str):
        raise ConfigValueError(
            f"Expected subject permissions to be a subject, or array of subjects, got {go_type(value)}"
        )
    subjects = to_strings(key, value)
    for s in subjects:
        if is_valid_subject(s.encode()):
            continue
        parts = s.split()
        if not queue or len(parts) != 2:
            raise ConfigValueError(f'subject "{s}" is not a valid subject')
        if not is_valid_subject(parts[0].encode()):
            raise ConfigValueError(f'subject "{parts[0]}" is not a valid subject')
        if not is_valid_subject(parts[1].encode()):
            raise ConfigValueError(f'queue "{parts[1]}" is not a valid queue')
    return subjects


def _subject_permission(ctx: Ctx, key: str, value: Any, where: Where, queue: bool) -> dict[str, Any] | None:
    """`"subj"`, `["a", "b"]` or `{allow: ..., deny: ...}` as {"allow": [...]?, "deny": [...]}; None for
    an empty map (no restriction, as nats-server)."""
    if not isinstance(value, dict):
        return {"allow": _subjects(key, value, queue), "deny": []}
    block = to_block(key, value)
    if not block:
        return None
    rule: dict[str, Any] = {"deny": []}
    for low, name, v, at in entries(block, where):
        with ctx.at(at):
            if low in ("allow", "deny"):
                rule[low] = _subjects(name, v, queue)
            elif name not in block.used:
                raise ConfigValueError(
                    f'Unknown field name "{name}" parsing subject permissions, '
                    "only 'allow' or 'deny' are permitted"
                )
    return rule


def parse_permissions(ctx: Ctx, key: str, value: Any, where: Where) -> dict[str, Any]:
    """A permissions block, normalized: {"publish": rule, "subscribe": rule, "allow_responses": ...}."""
    if not isinstance(value, dict):
        raise ConfigValueError(f"Expected permissions to be a map/struct, got {value}")
    block = to_block(key, value)
    perms: dict[str, Any] = {}
    for low, name, v, at in entries(block, where):
        with ctx.at(at):
            if low in ("pub", "publish", "import"):
                perms["publish"] = _subject_permission(ctx, name, v, at, queue=False)
            elif low in ("sub", "subscribe", "export"):
                perms["subscribe"] = _subject_permission(ctx, name, v, at, queue=True)
            elif low in ("allow_responses", "publish_allow_responses"):
                ResponsePermission.parse(v)  # raises on a bad value or field
                perms["allow_responses"] = v
            elif name not in block.used:
                raise ConfigValueError(f'Unknown field "{name}" parsing permissions')
    return {k: v for k, v in perms.items() if v is not None}


CONNECTION_TYPES = ("STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS", "IN_PROCESS")


def parse_users(ctx: Ctx, key: str, value: Any, where: Where) -> list[dict[str, Any]]:
    """A `users = [...]` array, normalized: {"user" or "nkey", "password", "permissions", "connection_types"}
    (the last two only when given)."""
    if not isinstance(value, list):
        raise ConfigValueError(f"Expected users field to be an array, got {value!r}")
    users: list[dict[str, Any]] = []
    for item in value:
        if not isinstance(item, dict):
            ctx.error(where, f"Expected user entry to be a map/struct, got {item!r}")
            continue
        block = to_block(key, item)
        user: dict[str, Any] = {}
        at_user = where
        for low, name, v, at in entries(block, where):
            at_user = at
            with ctx.at(at):
                if low == "nkey":
                    user["nkey"] = to_str(name, v)
                elif low in ("user", "username"):
                    user["user"] = to_str(name, v)
                elif low in ("pass", "password"):
                    user["password"] = to_str(name, v)
                elif low in ("permission", "permissions", "authorization"):
                    user["permissions"] = parse_permissions(ctx, name, v, at)
                elif low in ("allowed_connection_types", "connection_types", "clients"):
                    types = [t.upper() for t in to_strings(name, v)]
                    bad = [t for t in types if t not in CONNECTION_TYPES]
                    if bad:
                        raise ConfigValueError(f"invalid connection types {bad}")
                    user["connection_types"] = types
                elif low == "proxy_required":
                    if to_bool(name, v):
                        raise refused(name, "proxy-required users", access=True)
                else:
                    unknown(ctx, block, name, at)
        if not user.get("nkey") and not user.get("user"):
            ctx.error(at_user, "User entry requires a user")
            continue
        if user.get("nkey"):
            if not valid_public_nkey(user["nkey"], "U"):
                ctx.error(at_user, "Not a valid public nkey for a user")
                continue
            if "user" in user or "password" in user:
                ctx.error(at_user, "Nkey users do not take usernames or passwords")
                continue
        users.append(user)
    return users


def _authorization(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    block = to_block(key, value)
    auth: dict[str, Any] = {}
    for low, name, v, at in entries(block, where):
        with ctx.at(at):
            if low in ("user", "username"):
                opts.username = to_str(name, v)
            elif low in ("pass", "password"):
                opts.password = to_str(name, v)
            elif low == "token":
                opts.authorization = to_str(name, v)
            elif low == "timeout":
                opts.auth_timeout = parse_duration(name, v)
                if opts.auth_timeout > 60:
                    ctx.warn(at, f"timeout of {v} ({opts.auth_timeout:f} seconds) is high, consider "
                             "keeping it under 60 seconds")  # fmt: skip
            elif low == "users":
                auth["users"] = parse_users(ctx, name, v, at)
            elif low in ("default_permission", "default_permissions", "permissions"):
                auth["default_permissions"] = parse_permissions(ctx, name, v, at)
            elif low in ("auth_callout", "auth_hook"):
                opts.auth_callout = _auth_callout(ctx, name, v, at)
            elif low == "python":
                opts.python_authorizer = _python_authorizer(ctx, name, v, at)
            elif low == "proxy_required":
                if to_bool(name, v):
                    raise refused(name, "proxy-required users", access=True)
            else:
                unknown(ctx, block, name, at)
    if (opts.username or opts.password) and opts.authorization:
        ctx.error(where, "Cannot have a user/pass and token")
    if "users" in auth and opts.username:
        ctx.error(where, "Can not have a single user/pass and a users array")
    if "users" in auth and opts.authorization:
        ctx.error(where, "Can not have a token and a users array")
    if opts.python_authorizer is not None and (opts.username or opts.authorization or "users" in auth):
        ctx.error(where, "Can not have a python authorizer and a user/pass, token or users array")
    # Fail closed: the callable decides every client and gives its permissions; nothing else would run.
    if opts.python_authorizer is not None and opts.auth_callout is not None:
        ctx.error(where, "Can not have a python authorizer and an auth_callout")
    if opts.python_authorizer is not None and "default_permissions" in auth:
        ctx.error(where, "Can not have a python authorizer and default_permissions")
    opts.users = auth.get("users")
    opts.default_permissions = auth.get("default_permissions")
    ctx.places["authorization"] = where


def _python_authorizer(ctx: Ctx, key: str, value: Any, where: Where) -> PythonAuthorizerOptions:
    """`python: "module:callable"` (or an entry point name), or `python { callable: ..., timeout: ... }`;
    the callable is imported now: a path that does not import stops the server (or fails the reload)."""
    from pynatsd.auth.python import load  # only configurations with a Python authorizer import it

    path, timeout = "", 0.0
    if isinstance(value, str):
        path = value
    else:
        block = to_block(key, value)
        for low, name, v, at in entries(block, where):
            with ctx.at(at):
                if low in ("callable", "path", "entry_point"):
                    path = to_str(name, v)
                elif low == "timeout":
                    timeout = parse_duration(name, v)
                else:
                    unknown(ctx, block, name, at)
    if not path:
        raise ConfigValueError(f'{key}: expected "module:callable" or an entry point name')
    return PythonAuthorizerOptions(path, timeout, load(path))


def _callout_names(value: Any, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigValueError(f"Expected {field} field to be an array, got *conf.token")  # Go's %T of it
    return list(value)


def _callout_field(callout: AuthCalloutOptions, low: str, name: str, value: Any) -> bool:
    """One key of `auth_callout`; False when unknown, raises ConfigValueError on a bad value."""
    if low == "issuer":
        callout.issuer = to_str(name, value)
        if not valid_public_nkey(callout.issuer, "A"):
            raise ConfigValueError(
                f'Expected callout user to be a valid public account nkey, got "{callout.issuer}"'
            )
    elif low in ("account", "acc"):
        callout.account = to_str(name, value)
    elif low in ("auth_users", "users"):
        callout.auth_users = _callout_names(value, "auth_users")
    elif low in ("xkey", "key"):
        callout.xkey = to_str(name, value)
        if not valid_public_nkey(callout.xkey, "X"):
            raise ConfigValueError(f'Expected callout xkey to be a valid public xkey, got "{callout.xkey}"')
    elif low == "allowed_accounts":
        callout.allowed_accounts = _callout_names(value, "allowed accounts")
    else:
        return False
    return True


def _auth_callout(ctx: Ctx, key: str, value: Any, where: Where) -> AuthCalloutOptions | None:
    """`auth_callout {issuer, account, auth_users, xkey, allowed_accounts}`, with nats-server's errors: a
    bad value ends the block (only its error is reported), an unknown key does not."""
    if not isinstance(value, dict):
        raise ConfigValueError(f"Expected authorization callout to be a map/struct, got {value!r}")
    block = to_block(key, value)
    callout = AuthCalloutOptions("")
    last = where  # nats-server reports a missing field at the block's last value
    for low, name, v, at in entries(block, where):
        last = at
        try:
            known = _callout_field(callout, low, name, v)
        except ConfigValueError as err:
            ctx.error(at, str(err))
            return None
        if not known and name not in block.used:
            ctx.error(at, f'Unknown field "{name}" parsing authorization callout')
    callout.account = callout.account or "$G"
    if not callout.issuer:
        ctx.error(last, "Authorization callouts require an issuer to be specified")
        return None
    if not callout.auth_users:
        ctx.error(last, "Authorization callouts require authorized users to be specified")
        return None
    return callout


def _accounts(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    accounts: dict[str, AccountConfig] = {}
    if isinstance(value, list):  # a plain list of account names
        for name in to_strings(key, value):
            if name == _RESERVED_ACCOUNT:
                ctx.error(where, f'"{name}" is a Reserved Account')
            elif name in accounts:
                ctx.error(where, f"Duplicate Account Entry: {name}")
            accounts[name] = AccountConfig()
        opts.accounts = accounts
        return
    block = to_block(key, value)
    for name, spec, at in ((n, v, block.position(n, where)) for n, v in block.items()):
        if name in block.used:
            continue
        if not isinstance(spec, dict):
            ctx.error(at, "Expected map entries for accounts")
            continue
        if name == _RESERVED_ACCOUNT:
            ctx.error(at, f'"{name}" is a Reserved Account')
            continue
        acc_block = to_block(name, spec)
        account = AccountConfig()
        ctx.places[f"accounts.{name}"] = at
        for low, k, v, kat in entries(acc_block, at):
            with ctx.at(kat):
                if low == "users":
                    account.users = parse_users(ctx, k, v, kat)
                    ctx.places[f"accounts.{name}"] = kat
                elif low == "default_permissions":
                    account.default_permissions = parse_permissions(ctx, k, v, kat)
                elif low == "nkey":  # nats-server checks it and keeps it; nothing in config mode uses it
                    if not isinstance(v, str) or not valid_public_nkey(v, "A"):
                        raise ConfigValueError(f'Not a valid public nkey for an account: "{v}"')
                elif low == "exports":
                    account.exports = _exports(ctx, k, v, kat)
                elif low == "imports":
                    account.imports = _imports(ctx, k, v, kat)
                elif low == "jetstream":
                    account.jetstream = _account_jetstream(ctx, k, v, kat)
                elif low in ("mappings", "maps"):
                    raise refused(k, "subject mappings")
                elif low == "limits":
                    raise refused(k, "account limits", access=True)
                elif low in ("msg_trace", "trace_dest"):
                    ignore()(ctx, opts, k, v, kat)
                else:
                    unknown(ctx, acc_block, k, kat)
        accounts[name] = account
    opts.accounts = accounts


# An account's `jetstream {}` limits: nats-server's key spellings -> the name account info reports it under.
_ACCOUNT_JS_SIZES = {
    **dict.fromkeys(("max_memory", "max_mem", "mem", "memory"), "max_memory"),
    **dict.fromkeys(("max_store", "max_file", "max_disk", "store", "disk"), "max_storage"),
    **dict.fromkeys(("max_streams", "streams"), "max_streams"),
    **dict.fromkeys(("max_consumers", "consumers"), "max_consumers"),
    **dict.fromkeys(("mem_max_stream_bytes", "memory_max_stream_bytes"), "memory_max_stream_bytes"),
    **dict.fromkeys(("disk_max_stream_bytes", "store_max_stream_bytes"), "storage_max_stream_bytes"),
    "max_ack_pending": "max_ack_pending",
}
_ACCOUNT_JS_FLAGS = frozenset({"max_bytes_required", "max_stream_bytes", "max_bytes"})


def _account_jetstream(ctx: Ctx, key: str, value: Any, where: Where) -> dict[str, Any] | None:
    """An account's `jetstream`: enabled/disabled, a boolean, or a block of limits (nats-server's
    parseJetStreamForAccount, its words); the account's limits, None when it has no JetStream."""
    if isinstance(value, bool):
        return account_js_limits() if value else None
    if isinstance(value, str):
        low = value.lower()
        if low in ("enabled", "enable"):
            return account_js_limits()
        if low in ("disabled", "disable"):
            return None
        raise ConfigValueError(f"Expected 'enabled' or 'disabled' for string value, got '{value}'")
    if not isinstance(value, dict):
        kind = type(value).__name__
        raise ConfigValueError(f"Expected map, bool or string to define JetStream, got {kind}")
    block = to_block(key, value)
    limits = account_js_limits()
    for low, k, v, at in entries(block, where):
        with ctx.at(at):
            if low in _ACCOUNT_JS_SIZES:
                if isinstance(v, bool) or not isinstance(v, int):
                    raise ConfigValueError(f'Expected a parseable size for "{k}", got {v}')
                limits[_ACCOUNT_JS_SIZES[low]] = v
            elif low in _ACCOUNT_JS_FLAGS:
                if not isinstance(v, bool):
                    raise ConfigValueError(f'Expected a parseable bool for "{k}", got {v}')
                limits["max_bytes_required"] = v
            elif low == "cluster_traffic":  # whose account carries replication traffic
                expected = "Expected either 'system' or 'owner'" if not isinstance(v, str) else ""
                if expected or v not in ("system", "", "owner"):
                    expected = expected or "Expected 'system' or 'owner'"
                    raise ConfigValueError(f'{expected} string value for "{k}", got {v}')
                if v == "owner":
                    raise refused(k, "clustered JetStream (replication traffic in the owner account)")
            else:
                unknown(ctx, block, k, at)
    return limits


def _export(ctx: Ctx, item: Any, where: Where) -> dict[str, Any] | None:
    """One `{stream: s}` / `{service: s, response_type: .., response_threshold: ..}` entry, optionally
    private (`accounts: [...]`), as nats-server's parseExportStreamOrService reads it."""
    from pynatsd.auth.specs import RESPONSE_TYPES, valid_token_position  # with an accounts block only

    if not isinstance(item, dict):
        raise ConfigValueError(f"Export Items should be a map with type entry, got {item!r}")
    block = to_block("exports", item)
    export: dict[str, Any] = {}
    for low, name, v, at in entries(block, where):
        with ctx.at(at):
            if low in ("stream", "service"):
                other = "service" if low == "stream" else "stream"
                if other in export:
                    raise ConfigValueError(f'Detected {low} "{v}" but already saw a {other}')
                if not isinstance(v, str):
                    raise ConfigValueError(f"Expected {low} name to be string, got {v!r}")
                if not is_valid_subject(v.encode()):
                    raise ConfigValueError(f'Error adding {low} export "{v}": subject is not valid')
                export[low] = v
            elif low in ("response", "response_type"):
                kind = RESPONSE_TYPES.get(str(v).lower())
                if kind is None:
                    raise ConfigValueError(f'Unknown response type: "{v}"')
                export["response_type"] = kind
            elif low in ("threshold", "response_threshold", "response_max_time", "response_time"):
                if not isinstance(v, str):
                    raise ConfigValueError(
                        f"Expected response threshold to be a parseable time duration, got {v!r}"
                    )
                export["threshold"] = parse_duration(name, v)
            elif low == "accounts":
                export["accounts"] = to_strings(name, v)
            elif low == "latency":
                raise refused(name, "service latency tracking")
            elif low == "account_token_position":
                export["account_token_position"] = to_int(name, v)
            elif low == "allow_trace":
                if to_bool(name, v):
                    raise refused(name, "message tracing")
            else:
                unknown(ctx, block, name, at)
    subject = export.get("stream", export.get("service"))
    if subject is not None and not valid_token_position(
        subject.encode(), export.get("account_token_position", 0)
    ):
        kind = "stream" if "stream" in export else "service"
        ctx.error(where, f'Error adding {kind} export "{subject}": sublist: invalid subject')
        return None
    if "stream" in export and ("response_type" in export or "threshold" in export):
        ctx.error(where, "Detected response directive on non-service")
        return None
    if "stream" not in export and "service" not in export:
        return None
    return export


def _exports(ctx: Ctx, key: str, value: Any, where: Where) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise ConfigValueError(f"Exports should be an array, got {value!r}")
    found = (_export(ctx, item, where) for item in value)
    return [e for e in found if e is not None]


def _import(ctx: Ctx, item: Any, where: Where) -> dict[str, Any] | None:
    """One `{stream: {account: A, subject: s}, prefix: p | to: t}` or `{service: {account: A, subject: s},
    to: t}` entry, as nats-server's parseImportStreamOrService reads it."""
    if not isinstance(item, dict):
        raise ConfigValueError(f"Import Items should be a map with type entry, got {item!r}")
    block = to_block("imports", item)
    imp: dict[str, Any] = {}
    for low, name, v, at in entries(block, where):
        with ctx.at(at):
            if low in ("stream", "service"):
                other = "service" if low == "stream" else "stream"
                if other in imp:
                    raise ConfigValueError(f"Detected {low} but already saw a {other}")
                if not isinstance(v, dict):
                    raise ConfigValueError(f"{low.capitalize()} entry should be an account map, got {v!r}")
                source: dict[str, str] = {}
                inner = to_block(name, v)
                for ilow, iname, iv, iat in entries(inner, at):
                    if ilow in ("account", "subject"):
                        source[ilow] = to_str(iname, iv)
                    else:
                        unknown(ctx, inner, iname, iat)
                if not source.get("account") or not source.get("subject"):
                    raise ConfigValueError("Expect an account name and a subject")
                if not is_valid_subject(source["subject"].encode()):
                    raise ConfigValueError(
                        f'Error adding {low} import "{source["subject"]}": subject is not valid'
                    )
                imp[low] = source
            elif low in ("prefix", "to"):
                imp[low] = to_str(name, v)
                if not is_valid_subject(imp[low].encode()):
                    raise ConfigValueError(f'{name} "{imp[low]}" is not a valid subject')
            elif low == "share":
                if to_bool(name, v):
                    raise refused(name, "sharing requester details with services (latency tracking)")
            elif low == "allow_trace":
                if to_bool(name, v):
                    raise refused(name, "message tracing")
            else:
                unknown(ctx, block, name, at)
    if "stream" in imp and "prefix" in imp and "to" in imp:
        ctx.error(where, "Stream import can not have a 'prefix' and a 'to' property")
        return None
    if "service" in imp and "prefix" in imp:
        raise refused("prefix", "prefixes on service imports")
    if "stream" not in imp and "service" not in imp:
        return None
    return imp


def _imports(ctx: Ctx, key: str, value: Any, where: Where) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise ConfigValueError(f"Imports should be an array, got {value!r}")
    found = (_import(ctx, item, where) for item in value)
    return [i for i in found if i is not None]


def _check_links(ctx: Ctx, opts: Options) -> None:
    """Every import must name a defined account and an export it may use, without cycles (nats-server
    refuses to start otherwise)."""
    from pynatsd.auth.specs import link, specs_from_config  # with an accounts block only

    accounts = opts.accounts
    if ctx.errors or not any(a.imports or a.exports for a in accounts.values()):
        return
    where = ctx.places.get("accounts", _NOWHERE)
    for acc in accounts.values():
        for e in acc.exports:
            for other in e.get("accounts", []) or []:
                if other not in accounts:
                    kind = "service" if "service" in e else "stream"
                    ctx.error(where, f'"{other}" account not defined for {kind} export')
    if ctx.errors:
        return
    for message in link(specs_from_config(accounts))[2]:
        ctx.error(where, message)


# -- operator mode (decentralized JWT authentication, pynatsd.auth.jwt) -----------------------------------
def _operators(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    """`operator`: one or more operator JWTs (file paths or inline), verified at start."""
    from pynatsd.auth import jwt

    for entry in to_strings(key, value):
        try:
            claims = jwt.read_operator(entry)
        except jwt.JwtError as err:
            raise ConfigValueError(str(err)) from None
        ctx.operators.append(claims)


def _trusted_keys(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    keys = to_strings(key, value)
    for k in keys:
        if not valid_public_nkey(k, "O"):
            raise ConfigValueError(f'trusted Keys "{k}" are required to be a valid public operator nkey')
    opts.trusted_keys.extend(keys)


def _resolver(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    """`MEMORY` (accounts from `resolver_preload`), a `full` directory resolver (with `allow_delete`,
    `hard_delete`, `interval`, `timeout`) or a `cache` one (`ttl`, `limit`); URL resolvers are refused."""
    if isinstance(value, str) and value.strip().upper() in ("MEMORY", "MEM"):
        opts.resolver = ResolverConfig()
        return
    if isinstance(value, str):
        raise refused(key, "URL account resolvers", access=True)
    if not isinstance(value, dict):
        raise ConfigValueError(f"{key}: expected MEMORY, URL(...) or a resolver block, got {value!r}")
    block = to_block(key, value)
    spec: dict[str, Any] = {"type": "", "dir": "", "limit": 0}
    for low, k, v, _at in entries(block, where):
        if low in ("type", "dir"):
            spec[low] = to_str(k, v)
        elif low in ("allow_delete", "hard_delete"):
            spec[low] = to_bool(k, v)
        elif low == "limit":
            spec["limit"] = to_int(k, v)
        elif low in ("interval", "timeout", "ttl"):
            if not isinstance(v, str):  # nats-server reads these as duration strings only
                raise ConfigValueError(f"interface conversion: interface {{}} is {go_type(v)}, not string")
            spec[low] = parse_duration(k, v)
        else:
            unknown(ctx, block, k, _at)
    kind = spec["type"].upper()
    if kind in ("MEMORY", "MEM"):
        opts.resolver = ResolverConfig()
        return
    if kind not in ("FULL", "CACHE"):
        raise ConfigValueError(
            'error parsing account resolver, should be MEM or  URL("url") or a map containing dir and '
            "type state=[FULL|CACHE])"
        )
    problems = []
    if not spec["dir"]:
        problems.append("dir has no value and needs to point to a directory")
    elif os.path.exists(spec["dir"]) and not os.path.isdir(spec["dir"]):
        problems.append("dir needs to point to an accessible directory")
    if kind == "CACHE":
        # A cache holds what other servers resolved: no sync, no deletes of its own.
        if spec.get("interval"):
            problems.append("CACHE does not accept sync")
        if spec.get("allow_delete"):
            problems.append("CACHE does not accept allow_delete")
        if "hard_delete" in spec:
            problems.append("CACHE does not accept hard_delete")
    else:
        if spec.get("ttl"):
            problems.append("FULL does not accept ttl")
        if "hard_delete" in spec and not spec.get("allow_delete"):
            problems.append("hard_delete has no effect without delete")
    if "timeout" in spec and spec["timeout"] <= 0:
        problems.append(f"Fetch timeout {spec['timeout']}s is too smal")  # sic: nats-server's words
    for problem in problems:
        ctx.error(where, problem)
    resolver = ResolverConfig(kind.lower(), spec["dir"], spec["limit"])
    if kind == "CACHE":
        resolver.limit = spec["limit"] if spec["limit"] > 0 else 1000  # nats-server's default
        resolver.ttl = spec.get("ttl", 0.0)
    elif spec.get("allow_delete"):
        resolver.delete = "hard" if spec.get("hard_delete") else "rename"
    # interval (syncing with other servers) and timeout (fetching from them): standalone, no peers.
    opts.resolver = resolver


def _resolver_preload(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    from pynatsd.auth import jwt

    block = to_block(key, value)
    preload = opts.resolver_preload
    for name, token in block.items():
        if not isinstance(token, str):
            raise ConfigValueError(f"preload account error for {name!r}: expected a JWT string")
        try:
            claims = jwt.decode(token, "account")
        except jwt.JwtError as err:
            raise ConfigValueError(f"preload account error for {name!r}: {err}") from None
        if claims.subject != name:
            raise ConfigValueError(f"preload account error for {name!r}: JWT is for account {claims.subject}")
        preload[name] = token


def _system_account(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    opts.system_account = to_str(key, value)


def _no_system_account(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    opts.no_system_account = to_bool(key, value)


def _check_operator_mode(ctx: Ctx, opts: Options) -> None:
    """nats-server's validateTrustedOperators; fills `trusted` (the keys that may issue accounts)."""
    operators = ctx.operators
    if not operators and not opts.trusted_keys:
        system = opts.system_account
        if system and system != "$SYS" and system not in opts.accounts:
            where = ctx.places.get("system_account") or ctx.places.get("system") or _NOWHERE
            ctx.error(where, "error resolving system account: account missing")
        if opts.resolver_preload and opts.resolver is None:
            ctx.error(_NOWHERE, "resolver_preload requires a resolver")
        return
    problems = []
    if opts.resolver is None:
        problems.append("operators require an account resolver to be configured")
    if opts.accounts:
        problems.append("operators do not allow Accounts to be configured directly")
    if opts.users or opts.username or opts.authorization:
        problems.append("operators do not allow users to be configured directly")
    if opts.python_authorizer is not None:
        problems.append("operators do not allow a python authorizer")
    if operators and opts.trusted_keys:
        problems.append("conflicting options for 'TrustedKeys' and 'TrustedOperators'")
    system = opts.system_account
    named = [op.nats.get("system_account", "") for op in operators]
    if system and any(named) and system not in named:
        problems.append("system_account in config and operator JWT must be identical")
    if not system and not (named and named[0]) and opts.resolver is not None and opts.resolver.directory:
        problems.append(
            "using nats based account resolver - the system account needs to be specified in "
            "configuration or the operator jwt"
        )
    for problem in problems:
        ctx.error(_NOWHERE, problem)
    trusted = list(opts.trusted_keys)
    for op in operators:
        if not op.nats.get("strict_signing_key_usage"):
            trusted.append(op.subject)
        trusted.extend(k for k in op.nats.get("signing_keys") or [] if isinstance(k, str))
    strict = [op for op in operators if op.nats.get("strict_signing_key_usage")]
    opts.trusted = TrustedOperators(
        trusted,
        [op.subject for op in strict],
        [k for op in strict for k in op.nats.get("signing_keys") or [] if isinstance(k, str)],
    )
    if not system and named:
        opts.system_account = named[0]


def _check_websocket_python(ctx: Ctx, opts: Options) -> None:
    """A Python authorizer decides WebSocket clients too, from their CONNECT: credentials of the
    `websocket` block's own (its authorization, no_auth_user, cookies) would never be looked at."""
    ws = opts.websocket
    if opts.python_authorizer is None or ws is None:
        return
    own = {
        "authorization": ws.username or ws.password or ws.token,
        "no_auth_user": ws.no_auth_user,
        "user_cookie": ws.user_cookie,
        "pass_cookie": ws.pass_cookie,
        "token_cookie": ws.token_cookie,
    }
    where = ctx.places.get("websocket") or ctx.places.get("ws") or _NOWHERE
    for key, value in own.items():
        if value:
            ctx.error(where, f"Can not have a python authorizer and a websocket {key}")


def _check_users(ctx: Ctx, opts: Options) -> None:
    """Rules across blocks (nats-server checks them in whichever order the blocks come)."""
    seen: set[str] = set()
    groups = [(opts.users or [], ctx.places.get("authorization", _NOWHERE))]
    for name, acc in opts.accounts.items():
        where = ctx.places.get(f"accounts.{name}", _NOWHERE)
        if acc.users:
            if opts.username:
                ctx.error(where, "Can not have a single user/pass and accounts")
            if opts.authorization:
                ctx.error(where, "Can not have a token and accounts")
            if opts.python_authorizer is not None:  # the callable decides every client's account
                ctx.error(where, "Can not have a python authorizer and users in accounts")
        groups.append((acc.users, where))
    for users, where in groups:
        for u in users:
            name, kind = (u["nkey"], "nkey") if u.get("nkey") else (u["user"], "user")
            if name in seen:
                ctx.error(where, f'Duplicate {kind} "{name}" detected')
            seen.add(name)
    if opts.no_auth_user and not seen and opts.trusted is None:
        ctx.error(
            ctx.places.get("no_auth_user", _NOWHERE),
            f'no_auth_user: "{opts.no_auth_user}" present, but users/nkeys are not defined',
        )
    elif opts.no_auth_user and seen and opts.no_auth_user not in seen:
        ctx.error(
            ctx.places.get("no_auth_user", _NOWHERE),
            f'no_auth_user: "{opts.no_auth_user}" not present as user or nkey in authorization block or '
            "account configuration",
        )


def _check_auth_callout(ctx: Ctx, opts: Options) -> None:
    callout = opts.auth_callout
    if callout is None:
        return
    if opts.trusted is not None:  # operator mode's callouts are set in the account JWTs
        raise refused("auth_callout", "the auth_callout block in operator mode", access=True)
    for name in callout.allowed_accounts:
        if name not in opts.accounts:
            ctx.error(_NOWHERE, f'auth_callout allowed account "{name}" not found in configured accounts')


def _check_leafnodes(ctx: Ctx, opts: Options) -> None:
    """The accounts a `leafnodes {}` block binds exist (nats-server's validateLeafNode: a typo would
    make an empty account of its own); operator mode binds leafs by their JWTs, not configured users."""
    leafnodes = opts.leafnodes
    if leafnodes is None:
        return
    if opts.trusted is not None:
        if leafnodes.users:
            ctx.error(_NOWHERE, "operator mode does not allow specifying users in leafnode config")
        return
    known = {*opts.accounts, DEFAULT_ACCOUNT, "", system_account_of(opts)}
    named = [(leafnodes.account, "authorization")]
    named += [(user.get("account") or "", "authorization") for user in leafnodes.users]
    named += [(remote.account, "remote") for remote in leafnodes.remotes]
    for account, where in named:
        if account not in known:
            ctx.error(_NOWHERE, f'cannot find local account "{account}" specified in leafnode {where}')


# -- tls ------------------------------------------------------------------------------------------------
# Go's cipher suite names (crypto/tls CipherSuites and InsecureCipherSuites) -> OpenSSL's. TLS 1.3
# suites are not configurable (in Go either): they are accepted and always on.
TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"})
SECURE_CIPHERS = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
INSECURE_CIPHERS = {
    "TLS_RSA_WITH_RC4_128_SHA": "RC4-SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": "ECDHE-ECDSA-RC4-SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": "ECDHE-RSA-RC4-SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
}
# Go's curve names -> OpenSSL's group names.
CURVES = {"X25519": "X25519", "CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1"}
# Go's post-quantum hybrids: valid for nats-server, but Python's ssl cannot select them.
PQ_CURVES = frozenset({"X25519MLKEM768", "SecP256r1MLKEM768", "SecP384r1MLKEM1024"})
_CERT_STORE_KEYS = ("cert_store", "cert_match_by", "cert_match", "ca_certs_match", "cert_match_skip_invalid")
TLS_VERSIONS = {"1.0": "TLSv1", "1.1": "TLSv1_1", "1.2": "TLSv1_2", "1.3": "TLSv1_3"}


def _ciphers(key: str, value: Any, allow_insecure: bool) -> list[str]:
    names = to_strings(key, value) if isinstance(value, list) else []
    if not names:
        raise ConfigValueError(f"error parsing tls config, '{key}' cannot be empty")
    insecure = [n for n in names if n in INSECURE_CIPHERS]
    for n in names:
        if n not in SECURE_CIPHERS and n not in INSECURE_CIPHERS and n not in TLS13_SUITES:
            raise ConfigValueError(f"unrecognized cipher {n}")
    if insecure and not allow_insecure:
        raise ConfigValueError(
            "insecure cipher suites configured without 'allow_insecure_cipher_suites' option set: "
            + ", ".join(insecure)
        )
    return [SECURE_CIPHERS.get(n) or INSECURE_CIPHERS[n] for n in names if n not in TLS13_SUITES]


def _curves(key: str, value: Any) -> list[str]:
    names = to_strings(key, value) if isinstance(value, list) else []
    if not names:
        raise ConfigValueError(f"error parsing tls config, '{key}' cannot be empty")
    for n in names:
        if n in PQ_CURVES:
            raise ConfigValueError(f"curve preference {n} is not supported by pynatsd (Python's ssl)")
        if n not in CURVES:
            raise ConfigValueError(f"unrecognized curve preference {n}")
    return [CURVES[n] for n in names]


def _cert_pairs(ctx: Ctx, key: str, value: Any, where: Where) -> list[tuple[str, str]]:
    if not isinstance(value, list):
        raise ConfigValueError(f"error parsing certificates config: unsupported type {value!r}")
    pairs: list[tuple[str, str]] = []
    for item in value:
        block = to_block(key, item)
        pair = {"cert_file": "", "key_file": ""}
        for _low, name, v, at in entries(block, where):
            if name not in pair:  # case-sensitive in nats-server
                raise ConfigValueError(f'error parsing tls certs config, unknown field "{name}"')
            pair[name] = to_str(name, v)
            where = at
        if not pair["cert_file"] or not pair["key_file"]:
            raise ConfigValueError(
                "error parsing certificates config: both 'cert_file' and 'cert_key' options are required"
            )
        pairs.append((pair["cert_file"], pair["key_file"]))
    return pairs


def _handshake_first(ctx: Ctx, key: str, value: Any, where: Where) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        low = value.lower()
        if low in ("true", "on"):
            return True
        if low in ("false", "off"):
            return False
        fallback = low in ("auto", "auto_fallback")
        if not fallback:
            with contextlib.suppress(ConfigValueError):
                fallback = parse_duration(key, value) >= 0
        if fallback:  # strict TLS-first is the safe side of nats-server's fallback to INFO-first
            ctx.warn(
                where, f'"{key}": no fallback to a plaintext INFO in pynatsd; TLS first only', strict=False
            )
            return True
    raise ConfigValueError(f'field "{key}"\'s value "{value}" is invalid')


def _tls(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    block = to_block(key, value)
    lows = {k.lower(): v for k, v in block.items()}
    allow_insecure = lows.get("allow_insecure_cipher_suites") is True
    opts.tls = True
    errors_before = len(ctx.errors)
    for low, name, v, at in entries(block, where):
        with ctx.at(at):
            if low == "cert_file":
                opts.tls_cert = to_str(name, v)
            elif low == "key_file":
                opts.tls_key = to_str(name, v)
            elif low == "ca_file":
                opts.tls_ca_cert = to_str(name, v)
            elif low == "verify":
                opts.tls_verify = to_bool(name, v)
            elif low == "timeout":
                opts.tls_timeout = parse_duration(name, v)
            elif low in ("handshake_first", "first", "immediate"):
                opts.tls_handshake_first = _handshake_first(ctx, name, v, at)
            elif low in ("certs", "certificates"):
                opts.tls_certs = _cert_pairs(ctx, name, v, at)
            elif low == "cipher_suites":
                opts.tls_ciphers = _ciphers(name, v, allow_insecure)
            elif low == "curve_preferences":
                opts.tls_curves = _curves(name, v)
            elif low == "allow_insecure_cipher_suites":
                to_bool(name, v)
            elif low == "min_version":
                version = to_str(name, v)
                if version not in TLS_VERSIONS:
                    raise ConfigValueError(f"error parsing tls config: unknown version: {version}")
                if version in ("1.0", "1.1"):
                    raise ConfigValueError(
                        f"error parsing tls config: unsupported TLS version: TLS {version}"
                    )
                opts.tls_min_version = version
            elif low == "insecure":  # skips verifying the peer: a client-side option only
                to_bool(name, v)
                ctx.warn(at, f'"{name}" applies to outgoing connections only and is ignored', strict=False)
            elif low == "verify_and_map":
                opts.tls_map = to_bool(name, v)
                opts.tls_verify = opts.tls_verify or opts.tls_map
            elif low == "verify_cert_and_check_known_urls":
                if to_bool(name, v):
                    raise ConfigValueError("verify_cert_and_check_known_urls not supported in this context")
            elif low == "pinned_certs":
                raise refused(name, "pinned certificates", access=True)
            elif low == "ocsp_peer":
                raise refused(name, "OCSP peer verification", access=True)
            elif low in _CERT_STORE_KEYS:
                raise refused(name, "certificate stores")
            elif low == "connection_rate_limit":
                raise refused(name, "TLS connection rate limits")
            else:
                ctx.error(at, f'error parsing tls config, unknown field "{name}"')
    if opts.tls_certs and opts.tls_cert:
        ctx.error(where, "error parsing tls config, cannot combine 'cert_file' option with 'certs' option")
    if len(ctx.errors) == errors_before:
        with ctx.at(where):  # missing or bad files are reported here, with the path
            tls.server_context(opts)


# -- the top level ---------------------------------------------------------------------------------------
def _listen(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    host, port = host_port(key, value)
    opts.host = host or opts.host
    opts.port = port


def _http(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    host, port = host_port(key, value)
    opts.http_host = host or opts.http_host
    if key.lower() == "https":
        opts.https_port = port
    else:
        opts.http_port = port


def _max_connections(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    n = to_int(key, value)
    opts.max_connections = -1 if n == 0 else n  # nats-server: 0 in a file rejects every client


def _int31(name: str) -> Handler:
    def apply(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
        if to_int(key, value) > 2**31 - 1:
            raise ConfigValueError(f"{key} value is too big")
        setattr(opts, name, value)

    return apply


def _lame_duck(name: str, minimum: float) -> Handler:
    def apply(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
        seconds = parse_duration(key, to_str(key, value))  # nats-server takes only duration strings
        if seconds < minimum:
            if minimum:
                raise ConfigValueError(f"invalid {key} of {value}, minimum is 30 seconds")
            raise ConfigValueError(f"invalid {key}, needs to be positive")
        setattr(opts, name, seconds)

    return apply


def _server_name(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
    name = to_str(key, value)
    if " " in name:
        raise ConfigValueError("server name can not contain spaces")
    opts.server_name = name


def _duration(name: str) -> Handler:
    def apply(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
        if not isinstance(value, str):
            ctx.warn(where, f"{key} should be converted to a duration")
        setattr(opts, name, parse_duration(key, value))

    return apply


def _max_sub_tokens(key: str, value: Any) -> int:
    n = to_int(key, value)
    if n > 255:
        raise ConfigValueError(f"{key} value is too big")
    if n <= 0:
        raise ConfigValueError(f"{key} value can not be negative")
    return n


def _write_timeout(key: str, value: Any) -> str:
    if value not in ("default", "close", "retry"):
        raise ConfigValueError("write_timeout must be 'default', 'close' or 'retry'")
    return str(value)


TOP_LEVEL: dict[str, Handler] = _table(
    (("listen",), _listen),
    (("port",), _field("port", to_int)),
    (("host", "net"), _field("host", to_str)),
    (("server_name",), _server_name),
    (("client_advertise",), _field("client_advertise", to_str)),
    (("http", "https"), _http),
    (("http_port", "monitor_port"), _field("http_port", to_int)),
    (("https_port",), _field("https_port", to_int)),
    (("http_base_path",), _field("http_base_path", to_str)),
    (("debug",), _field("debug", to_bool)),
    (("trace",), _field("trace", to_bool)),
    (("logtime",), _field("logtime", to_bool)),
    (("logtime_utc",), _field("logtime_utc", to_bool)),
    (("logfile", "log_file"), _field("log_file", to_str)),
    (("pidfile", "pid_file"), _field("pid_file", to_str)),
    (("ports_file_dir",), _field("ports_file_dir", to_str)),
    (("max_control_line",), _int31("max_control_line")),
    (("max_payload",), _int31("max_payload")),
    (("max_pending",), _field("max_pending", to_int)),
    (("max_connections", "max_conn"), _max_connections),
    (("max_subscriptions", "max_subs"), _field("max_subscriptions", to_int)),
    (("max_closed_clients",), _field("max_closed_clients", to_int)),
    (("ping_interval",), _duration("ping_interval")),
    (("ping_max",), _field("ping_max", to_int)),
    (("write_deadline",), _duration("write_deadline")),
    (("no_fast_producer_stall",), _field("no_fast_producer_stall", to_bool)),
    (("lame_duck_duration",), _lame_duck("lame_duck_duration", MIN_LAME_DUCK_DURATION)),
    (("lame_duck_grace_period",), _lame_duck("lame_duck_grace_period", 0.0)),
    (("no_header_support",), _field("no_header_support", to_bool)),
    (("disable_sublist_cache", "no_sublist_cache"), _field("disable_sublist_cache", to_bool)),
    (("no_auth_user",), _field("no_auth_user", to_str)),
    (("authorization",), _authorization),
    (("accounts",), _accounts),
    (("tls",), _tls),
    (tuple(_PENDING_BLOCKS), _pending),
    # Access control pynatsd does not implement: refused, never ignored.
    (("operator", "operators", "roots", "root", "root_operators", "root_operator"), _operators),
    (("resolver", "account_resolver", "accounts_resolver"), _resolver),
    (("resolver_preload",), _resolver_preload),
    (("trusted", "trusted_keys"), _trusted_keys),
    (("resolver_tls", "resolver_pinned_accounts"), refuse("these account resolver options", access=True)),
    (("default_sentinel",), refuse("JWT sentinel users", access=True)),
    (("proxies",), refuse("trusted proxies", access=True)),
    # Other features pynatsd does not have.
    (("gateway",), _gateway),
    (("leaf", "leafnodes"), _leafnodes),
    (("mqtt",), _mqtt),
    (("mappings", "maps"), refuse("subject mappings")),
    (("proxy_protocol",), refuse("the PROXY protocol")),
    (("ocsp", "ocsp_cache"), refuse("OCSP stapling")),
    # Accepted and checked, but they change nothing a client may do: a warning.
    (("syslog",), _field("syslog", to_bool)),
    (("remote_syslog",), _field("remote_syslog", to_str)),
    (("logfile_size_limit", "log_size_limit"), _field("log_size_limit", to_int)),
    (("logfile_max_num", "log_max_num"), _field("log_max_num", to_int)),
    (("max_traced_msg_len",), _field("max_traced_msg_len", to_int)),
    (("trace_verbose", "trace_headers", "allow_non_tls"), ignore(to_bool)),
    (("no_system_account", "no_system", "no_sys_acc"), _no_system_account),
    (("system_account", "system"), _system_account),
    (("prof_port", "prof_block_rate", "connect_error_reports", "reconnect_error_reports"), ignore(to_int)),
    (("max_sub_tokens", "max_subscription_tokens"), ignore(_max_sub_tokens)),
    (("write_timeout",), ignore(_write_timeout)),
    (("server_tags",), ignore(to_strings)),
    (("server_metadata", "feature_flags"), ignore()),
    (("default_js_domain",), refuse("default JetStream domains (which domain an account's $JS.API reaches)")),
)  # fmt: skip


def apply_config(opts: Options, config: dict[str, Any]) -> list[ConfigWarning]:
    """Applies a parsed config to `opts` in place; returns warnings, raises ConfigErrors listing every
    problem (each `file:line:col: message`)."""
    ctx = Ctx()
    block = to_block("config", config)
    for low, key, value, where in entries(block, _NOWHERE):
        handler = TOP_LEVEL.get(low)
        if handler is None:
            unknown(ctx, block, key, where)
            continue
        ctx.places[low] = where
        with ctx.at(where):
            handler(ctx, opts, key, value, where)
    _check_users(ctx, opts)
    _check_websocket_python(ctx, opts)
    _check_links(ctx, opts)
    _check_operator_mode(ctx, opts)
    _check_auth_callout(ctx, opts)
    _check_leafnodes(ctx, opts)
    if ctx.errors:
        raise ConfigErrors(ctx.errors)
    return ctx.warnings
