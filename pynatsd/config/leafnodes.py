"""The `leafnodes {}` block: `LeafNodeOptions` (pynatsd.leafnodes runs it).

Keys as nats-server reads them (case-insensitive, its aliases): `listen` / `host` / `port`, `authorization
{ user, password, token, nkey, account, users [ {user, password, account} ], timeout }`, `remotes [ { url /
urls, account, credentials, nkey / seed, hub, no_randomize, deny_imports, deny_exports, ws_compression,
ws_no_masking, compression } ]`, `advertise`, `no_advertise`, `reconnect`, `min_version`, `compression`
(`off` or `accept`: pynatsd compresses nothing), `tls {}` on both sides (a `tls://` or `wss://` URL). Fail
closed: the leafnode keys nats-server has and pynatsd does not implement (TLS keys beyond files, verify,
insecure and timeout, the compressing `compression` modes, proxies, isolation, ...) are refused by name;
unknown keys are errors.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from typing import Any

from pynatsd.auth.nkeys import valid_public_nkey, valid_user_seed
from pynatsd.base.blocks import LeafNodeOptions, LeafRemote
from pynatsd.base.options import Options
from pynatsd.base.values import ConfigValueError, parse_duration, to_bool, to_int, to_str
from pynatsd.config.cluster import DEFAULT_TLS_TIMEOUT, parse_listen, tls_block, uncompressed

# nats-server's leafnode keys pynatsd does not implement: refused by name, with what they are.
_NOT_IMPLEMENTED = {
    "isolate_leafnode_interest": "leaf node interest isolation",
    "isolate": "leaf node interest isolation",
    "request_isolation": "leaf node interest isolation",
    "proxy": "proxies for leaf node remotes",
    "proxy_required": "proxy-required leaf node users",
    "jetstream_cluster_migrate": "JetStream cluster migration of leaf nodes",
    "js_cluster_migrate": "JetStream cluster migration of leaf nodes",
    "first_info_timeout": '"first_info_timeout" for leaf nodes',
    "dial_timeout": '"dial_timeout" for leaf nodes',
    "disabled": "disabled leaf node remotes",
    "ignore_discovered_servers": '"ignore_discovered_servers" for leaf nodes',
    "write_deadline": '"write_deadline" for leaf nodes',
    "write_timeout": '"write_timeout" for leaf nodes',
}
_COMPRESSED_LEAFS = "compressed leaf node connections"
_CREDS_AND_NKEY = "Remote leafnode can not have both creds and nkey defined"
_ACCESS = frozenset({"proxy_required"})
# nats-server's semVerRe: major.minor.patch, an optional pre-release and build metadata
_SEMVER = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-((?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
)
LOWEST_MIN_VERSION = (2, 8, 0)  # nats-server refuses a leafnode minimum version below it


def _refused(where: str, key: str) -> ConfigValueError:
    why = " (it controls who may connect)" if key.lower() in _ACCESS else ""
    what = _NOT_IMPLEMENTED[key.lower()]
    text = f'{where} "{key}": pynatsd does not support {what}{why}; remove it to run pynatsd'
    return ConfigValueError(text)


def version_components(version: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a semver, None if it is not one (nats-server's versionComponents)."""
    match = _SEMVER.fullmatch(version)
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3])


def min_version(value: Any) -> str:
    """`min_version`: a semver of at least 2.8.0 (nats-server's checkLeafMinVersionConfig, its words)."""
    version = to_str("leafnodes min_version", value)
    components = version_components(version)
    if components is None:
        raise ConfigValueError("invalid leafnode's minimum version: invalid semver")
    if components < LOWEST_MIN_VERSION:
        raise ConfigValueError("the minimum version should be at least 2.8.0")
    return version


def _map(what: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigValueError(f"Expected {what} to be a map, got {type(value).__name__}")
    return value


def _timeout(key: str, value: Any) -> float:
    if isinstance(value, str):
        return parse_duration(f"leafnodes authorization {key}", value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigValueError(f"leafnodes authorization {key}: expected seconds, got {value!r}")
    return float(value)


def _users(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list):
        raise ConfigValueError(f"Expected users field to be an array, got {value!r}")
    users: list[dict[str, str]] = []
    for entry in value:
        if not isinstance(entry, dict):
            raise ConfigValueError(f"Expected user entry to be a map/struct, got {entry!r}")
        user = {"user": "", "password": "", "account": ""}
        for key, v in entry.items():
            k = key.lower()
            if k in ("user", "username"):
                user["user"] = to_str(f"leafnodes user {key}", v)
            elif k in ("pass", "password"):
                user["password"] = to_str(f"leafnodes user {key}", v)
            elif k == "account":
                user["account"] = to_str(f"leafnodes user {key}", v)
            elif k in _NOT_IMPLEMENTED:
                raise _refused("leafnodes user", key)
            else:
                raise ConfigValueError(f'leafnodes authorization users: unknown field "{key}"')
        users.append(user)
    return users


def _authorization(leaf: LeafNodeOptions, value: Any) -> None:
    for key, v in _map("leafnodes authorization", value).items():
        k = key.lower()
        if k in ("user", "username"):
            leaf.username = to_str(f"leafnodes authorization {key}", v)
        elif k in ("pass", "password"):
            leaf.password = to_str(f"leafnodes authorization {key}", v)
        elif k == "token":
            leaf.token = to_str(f"leafnodes authorization {key}", v)
        elif k == "account":
            leaf.account = to_str(f"leafnodes authorization {key}", v)
        elif k == "nkey":
            leaf.nkey = to_str(f"leafnodes authorization {key}", v)
            if not valid_public_nkey(leaf.nkey, "U"):
                raise ConfigValueError("Not a valid public nkey for leafnode authorization")
        elif k == "timeout":
            leaf.auth_timeout = _timeout(key, v)
        elif k == "users":
            leaf.users = _users(v)
        elif k in _NOT_IMPLEMENTED:
            raise _refused("leafnodes authorization", key)
        else:
            raise ConfigValueError(f'leafnodes authorization: unknown field "{key}"')
    # nats-server's validateLeafNodeAuthOptions, its words
    if leaf.users and (leaf.username or leaf.token):
        raise ConfigValueError("can not have a single user/pass and a users array")
    if leaf.users and leaf.nkey:
        raise ConfigValueError("can not have a single nkey and a users array")
    names = [u["user"] for u in leaf.users]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigValueError(f'duplicate user "{name}" detected in leafnode authorization')


def leaf_url(text: str) -> str:
    """A remote's URL (`nats-leaf://`, `nats://`, `tls://`, `ws://`, `wss://` with host and port): trimmed,
    or an error."""
    url = urllib.parse.urlsplit(text.strip())
    try:
        port = url.port
    except ValueError as exc:
        raise ConfigValueError(f"error parsing leafnode remote url [{text!r}]: {exc}") from exc
    if not url.hostname:
        raise ConfigValueError(f"error parsing leafnode remote url [{text!r}]: a host is required")
    if port is None:  # nats-server's default leafnode port
        text = text.strip().replace(url.netloc, f"{url.netloc}:7422", 1)
    return text.strip()


def _subjects(key: str, value: Any) -> list[str]:
    items = value if isinstance(value, list) else [value]
    return [to_str(f"leafnodes remote {key}", item) for item in items]


def _remote(value: Any) -> LeafRemote:
    remote = LeafRemote()
    for key, v in _map("remote leafnode entry", value).items():
        k = key.lower()
        if k in ("url", "urls"):
            items = v if isinstance(v, list) else [v]
            remote.urls = [leaf_url(to_str(f"leafnodes remote {key}", item)) for item in items]
        elif k in ("account", "local"):
            remote.account = to_str(f"leafnodes remote {key}", v)
        elif k in ("creds", "credentials"):
            remote.credentials = os.path.expanduser(to_str(f"leafnodes remote {key}", v))
            if remote.seed:
                raise ConfigValueError(_CREDS_AND_NKEY)
        elif k in ("nkey", "seed"):
            seed = to_str(f"leafnodes remote {key}", v)
            if not valid_user_seed(seed):
                raise ConfigValueError(f"Remote leafnode nkey is not a valid seed: {json.dumps(seed)}")
            if remote.credentials:
                raise ConfigValueError(_CREDS_AND_NKEY)
            remote.seed = seed
        elif k == "hub":
            remote.hub = to_bool(f"leafnodes remote {key}", v)
        elif k in ("no_randomize", "dont_randomize"):
            remote.no_randomize = to_bool(f"leafnodes remote {key}", v)
        elif k in ("deny_imports", "deny_import"):
            remote.deny_imports = _subjects(key, v)
        elif k in ("deny_exports", "deny_export"):
            remote.deny_exports = _subjects(key, v)
        elif k in ("ws_compress", "ws_compression", "websocket_compress", "websocket_compression"):
            remote.ws_compression = to_bool(f"leafnodes remote {key}", v)
        elif k in ("ws_no_masking", "websocket_no_masking"):
            remote.ws_no_masking = to_bool(f"leafnodes remote {key}", v)
        elif k == "compression":
            uncompressed("leafnodes remote", key, v, _COMPRESSED_LEAFS)
        elif k == "tls":
            remote.tls = tls_block("leafnodes remote tls", v, ("insecure",), cert_required=False)
        elif k in _NOT_IMPLEMENTED:
            raise _refused("leafnodes remote", key)
        else:
            raise ConfigValueError(f'leafnodes remote: unknown field "{key}"')
    if not remote.urls:
        raise ConfigValueError("leafnodes remote: a url is required")
    if remote.tls is None and any(url.startswith(("tls://", "wss://")) for url in remote.urls):
        remote.tls = {"timeout": DEFAULT_TLS_TIMEOUT}  # as nats-server: TLS, the system's CAs
    return remote


def parse_block(value: Any) -> LeafNodeOptions:
    """A `leafnodes {}` block as nats-server reads it."""
    leaf = LeafNodeOptions()
    for key, v in _map("leafnode", value).items():
        k = key.lower()
        if k == "listen":
            leaf.host, leaf.port = parse_listen(str(v), "leafnodes listen")
        elif k == "port":
            leaf.port = to_int(f"leafnodes {key}", v)
        elif k in ("host", "net"):
            leaf.host = to_str(f"leafnodes {key}", v)
        elif k == "authorization":
            _authorization(leaf, v)
        elif k == "remotes":
            if not isinstance(v, list):
                raise ConfigValueError(f"Expected remotes field to be an array, got {type(v).__name__}")
            leaf.remotes = [_remote(item) for item in v]
        elif k in ("reconnect", "reconnect_delay", "reconnect_interval"):
            leaf.reconnect = parse_duration(f"leafnodes {key}", v)
        elif k in ("leafnode_advertise", "advertise"):
            leaf.advertise = to_str(f"leafnodes {key}", v)
        elif k == "no_advertise":
            leaf.no_advertise = to_bool(f"leafnodes {key}", v)
        elif k in ("min_version", "minimum_version"):
            leaf.min_version = min_version(v)
        elif k == "compression":
            uncompressed("leafnodes", key, v, _COMPRESSED_LEAFS)
        elif k == "tls":
            leaf.tls = tls_block("leafnodes tls", v, ("verify",), cert_required=True)
        elif k in _NOT_IMPLEMENTED:
            raise _refused("leafnodes", key)
        else:
            raise ConfigValueError(f'leafnodes: unknown field "{key}"')
    return leaf


def apply(opts: Options, key: str, value: Any) -> None:
    """The config-file hook: parse the block into `opts.leafnodes`."""
    opts.leafnodes = parse_block(value)
