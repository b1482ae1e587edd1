"""The `cluster {}` block and the cluster flags (`--cluster`, `--routes`, ...): `ClusterOptions`.

The parsed block lives in `opts.cluster`; `cluster_options(opts)` returns it, or None when no
cluster listener is configured. Security fails closed: a key that decides who may connect or what peers
may do and that pynatsd does not implement (TLS options beyond certificate, key, CA and timeout) stops the
server with a clear error; unknown keys are errors, as in nats-server. The route `permissions` (and the
deprecated `authorization { permissions }`) are read by the config schema (`_route_permissions`, which
has the positions its errors name) into `ClusterOptions.permissions`.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

from pynatsd.base.blocks import ClusterOptions
from pynatsd.base.options import Options
from pynatsd.base.tls import peer_context, route_contexts
from pynatsd.base.values import ConfigValueError, parse_duration, to_bool, to_int, to_str

DEFAULT_AUTH_TIMEOUT = 2.0
DEFAULT_TLS_TIMEOUT = 2.0


def cluster_options(opts: Options) -> ClusterOptions | None:
    """The configured cluster, or None."""
    cluster = opts.cluster
    return cluster if cluster is not None and cluster.port != 0 else None


# -- the `cluster {}` block ---------------------------------------------------------------------------
# Compression modes nats-server accepts; pynatsd compresses nothing, so only those that let a route run
# uncompressed are taken (`accept`: compress only if the peer asks, and pynatsd answers "off").
_UNCOMPRESSED = frozenset({"off", "disabled", "false", "accept", "not_supported", "not supported"})
_COMPRESSED = frozenset(
    {"on", "enabled", "true", "s2_auto", "auto", "s2_fast", "fast", "s2_better", "better", "s2_best", "best"}
    | {"s2_uncompressed"}
)


def uncompressed(where: str, key: str, value: Any, what: str) -> None:
    """A `compression` value that lets the link run uncompressed, else an error: a compressing mode (or a
    `{mode, rtt_thresholds}` map) refused by name, `what` pynatsd does not support; an unknown one in
    nats-server's words."""
    mode = str(value).lower() if isinstance(value, bool | str) else ""
    if isinstance(value, dict) or mode in _COMPRESSED:
        raise ConfigValueError(
            f'{where} "{key}": pynatsd does not support {what}; use "off" (or "accept") to run pynatsd'
        )
    if mode not in _UNCOMPRESSED:
        raise ConfigValueError(f'{where} {key}: unsupported compression mode "{value}"')


def parse_listen(text: str, what: str = "cluster listen") -> tuple[str, int]:
    """`host:port` (`nats://host:port` from the command line): nats-server's route listen address."""
    if "://" in text:
        url = urllib.parse.urlsplit(text)
        host = url.hostname or ""
        try:
            port_text = url.netloc.rpartition(":")[2]
        except ValueError as exc:
            raise ConfigValueError(f"{what}: invalid address {text!r}") from exc
    else:
        host, _, port_text = text.rpartition(":")
        host = host.strip("[]")
    if not re.fullmatch(r"-?\d+", port_text):
        raise ConfigValueError(f'{what}: could not parse port "{port_text}" in {text!r}')
    return host or "0.0.0.0", int(port_text)


def check_route_url(text: str) -> str:
    """A route URL (`nats-route://[user:pass@]host:port`, `nats://…`): returned trimmed, or an error."""
    url = urllib.parse.urlsplit(text.strip())
    try:
        port = url.port
    except ValueError as exc:
        raise ConfigValueError(f"error parsing route url [{text!r}]: {exc}") from exc
    if not url.hostname or port is None:
        raise ConfigValueError(f"error parsing route url [{text!r}]: host and port required")
    return text.strip()


def route_urls(value: Any, key: str = "routes") -> list[str]:
    """`routes`: a list of URLs (or, from the command line, one comma-separated string)."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list):
        raise ConfigValueError(f"cluster {key}: expected a list of URLs, got {value!r}")
    urls: list[str] = []
    for item in items:
        url = check_route_url(to_str(f"cluster {key}", item))
        if url not in urls:  # nats-server warns about a duplicate and keeps one
            urls.append(url)
    return urls


TLS_FILES = ("cert_file", "key_file", "ca_file")


def tls_block(where: str, value: Any, flags: tuple[str, ...], cert_required: bool) -> dict[str, Any]:
    """A leafnode or gateway `tls {}` block: `cert_file`, `key_file`, `ca_file`, `timeout`, and those
    of `flags` the side(s) it is for take: `verify` (the accepting side asks for and checks the peer's
    certificate), `insecure` (the dialing side checks neither the peer's chain nor its name). Every other
    TLS key of nats-server's (handshake_first, pinned_certs, verify_and_map, ciphers, OCSP, ...) decides
    who is trusted or how: refused by name."""
    if not isinstance(value, dict):
        raise ConfigValueError(f"{where}: expected a block")
    tls: dict[str, Any] = {"timeout": DEFAULT_TLS_TIMEOUT}
    for key, v in value.items():
        k = key.lower()
        if k in TLS_FILES:
            tls[k] = to_str(f"{where} {key}", v)
        elif k == "timeout":
            tls["timeout"] = parse_duration(f"{where} {key}", v)
        elif k in flags:
            if not isinstance(v, bool):
                raise ConfigValueError(f"error parsing tls config, expected '{key}' to be a boolean")
            tls[k] = v
        else:
            raise ConfigValueError(
                f'{where} "{key}": pynatsd does not support it (it decides which peers are trusted, or '
                "how); remove it to run pynatsd"
            )
    if cert_required and (not tls.get("cert_file") or not tls.get("key_file")):
        raise ConfigValueError(f"{where}: cert_file and key_file are required")
    if bool(tls.get("cert_file")) != bool(tls.get("key_file")):
        raise ConfigValueError(f"{where}: cert_file and key_file go together")
    try:  # unusable files stop the server now, not at its first connection
        if cert_required:
            peer_context(tls, True, bool(tls.get("verify")))
        peer_context(tls, False, not tls.get("insecure"))
    except ValueError as exc:
        raise ConfigValueError(f"{where}: {exc}") from None
    return tls


def _tls(value: Any) -> dict[str, Any]:
    """The route `tls {}` block: certificate, key, CA, handshake timeout, and whether a peer's certificate
    must name one of the configured route URLs' hosts (`verify_cert_and_check_known_urls`) or the cluster
    user (`verify_and_map`). Anything else (insecure, pinned certificates, cipher or curve choices, OCSP,
    ...) would change who is trusted or how: refused by name (fail closed)."""
    if not isinstance(value, dict):
        raise ConfigValueError("cluster tls: expected a block")
    tls: dict[str, Any] = {"timeout": DEFAULT_TLS_TIMEOUT}
    for key, v in value.items():
        k = key.lower()
        if k in TLS_FILES:
            tls[k] = to_str(f"cluster tls {key}", v)
        elif k == "timeout":
            tls["timeout"] = parse_duration(f"cluster tls {key}", v)
        elif k == "verify":
            to_bool(f"cluster tls {key}", v)  # routes verify their peers in any case, as nats-server's
        elif k in ("verify_and_map", "verify_cert_and_check_known_urls"):
            if not isinstance(v, bool):
                raise ConfigValueError(f"error parsing tls config, expected '{key}' to be a boolean")
            tls[k] = v
        else:
            raise ConfigValueError(
                f'cluster tls "{key}": pynatsd does not support it for routes (it decides which peers are '
                "trusted, or how); remove it to run pynatsd"
            )
    if not tls.get("cert_file") or not tls.get("key_file"):
        raise ConfigValueError("cluster tls: cert_file and key_file are required")
    try:
        route_contexts(tls)  # unusable files stop the server now, not at its first route
    except ValueError as exc:
        raise ConfigValueError(f"cluster tls: {exc}") from None
    return tls


def _authorization(cluster: ClusterOptions, value: Any) -> None:
    if not isinstance(value, dict):
        raise ConfigValueError("cluster authorization: expected a block")
    for key, v in value.items():
        k = key.lower()
        if k in ("user", "username"):
            cluster.username = to_str(f"cluster {key}", v)
        elif k in ("pass", "password"):
            cluster.password = to_str(f"cluster {key}", v)
        elif k == "timeout":
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise ConfigValueError(f"cluster authorization timeout: expected seconds, got {v!r}")
            cluster.auth_timeout = float(v)
        elif k == "users":
            raise ConfigValueError("Cluster authorization does not allow multiple users")
        elif k == "permissions":
            pass  # the config schema reads them (see the module docstring)
        elif k in ("token", "nkey", "accounts"):
            raise ConfigValueError(
                f'cluster authorization "{key}": pynatsd does not support it for routes (it controls who '
                "may connect); remove it to run pynatsd"
            )
        else:
            raise ConfigValueError(f'cluster authorization: unknown field "{key}"')
    if cluster.password and not cluster.username:
        raise ConfigValueError("cluster authorization: a password needs a user")


def parse_block(value: Any) -> ClusterOptions:
    """A `cluster {}` block as nats-server reads it (keys case-insensitive, unknown keys rejected)."""
    if not isinstance(value, dict):
        raise ConfigValueError(f"Expected cluster to be a map, got {type(value).__name__}")
    cluster = ClusterOptions()
    for key, v in value.items():
        k = key.lower()
        if k == "name":
            name = to_str(f"cluster {key}", v)
            if " " in name:
                raise ConfigValueError("cluster name cannot contain spaces or new lines")
            cluster.name = name
        elif k == "listen":
            cluster.host, cluster.port = parse_listen(str(v))
        elif k == "port":
            cluster.port = to_int(f"cluster {key}", v)
        elif k in ("host", "net"):
            cluster.host = to_str(f"cluster {key}", v)
        elif k == "authorization":
            _authorization(cluster, v)
        elif k == "routes":
            cluster.urls = route_urls(v)
        elif k in ("cluster_advertise", "advertise"):
            cluster.advertise = to_str(f"cluster {key}", v)
        elif k == "no_advertise":
            cluster.no_advertise = to_bool(f"cluster {key}", v)
        elif k == "connect_retries":
            cluster.connect_retries = to_int(f"cluster {key}", v)
        elif k == "pool_size":
            cluster.pool_size = to_int(f"cluster {key}", v)
        elif k == "compression":
            uncompressed("cluster", key, v, "compressed routes")
        elif k == "ping_interval":
            cluster.ping_interval = parse_duration(f"cluster {key}", v)
        elif k == "ping_max":
            cluster.ping_max = to_int(f"cluster {key}", v)
        elif k == "tls":
            cluster.tls = _tls(v)
        elif k == "accounts":
            cluster.accounts = _pinned_accounts(key, v)
        elif k == "permissions":
            pass  # the config schema reads them (see the module docstring)
        elif k in ("connect_backoff", "write_deadline", "write_timeout"):
            raise ConfigValueError(
                f'cluster "{key}": pynatsd does not support "{k}" for routes; remove it to run pynatsd'
            )
        else:
            raise ConfigValueError(f'cluster: unknown field "{key}"')
    if cluster.accounts and cluster.pool_size < 0:  # nats-server's validation, its words
        raise ConfigValueError("pool_size cannot be negative if pinned accounts are specified")
    return cluster


def _pinned_accounts(key: str, value: Any) -> list[str]:
    """`accounts`: the pinned accounts, a list of names (or one), each once."""
    items = value if isinstance(value, list) else [value]
    names = [to_str(f"cluster {key}", item) for item in items]
    for i, name in enumerate(names):
        if name in names[:i]:
            listed = " ".join(f'"{n}"' for n in names)
            raise ConfigValueError(
                f'found duplicate account name "{name}" in pinned accounts list [{listed}]'
            )
    return names


def advertised_permissions(spec: dict[str, Any] | None) -> dict[str, dict[str, list[str]]]:
    """The route permissions as nats-server's INFO and /routez show them: `import` and `export`, each
    `{allow, deny}` without the empty lists; a side without rules is left out."""
    shown: dict[str, dict[str, list[str]]] = {}
    for side, name in (("publish", "import"), ("subscribe", "export")):
        rule = (spec or {}).get(side)
        if rule is not None:
            shown[name] = {kind: list(rule[kind]) for kind in ("allow", "deny") if rule.get(kind)}
    return shown


def apply(opts: Options, key: str, value: Any) -> None:
    """The config-file hook: parse the block into `opts.cluster`."""
    opts.cluster = parse_block(value)


def apply_flags(
    opts: Options,
    listen: str | None,
    name: str | None,
    routes: str | None,
    advertise: str | None,
    no_advertise: bool | None,
    connect_retries: int | None,
) -> None:
    """The cluster flags over the config file's block, as nats-server's: `--cluster` (the listen URL,
    credentials in it become the routes' authorization), `--cluster_name`, `--routes` (comma-separated,
    replacing the block's), `--cluster_advertise`, `--no_advertise`, `--connect_retries`."""
    if not any(x is not None for x in (listen, name, routes, advertise, no_advertise, connect_retries)):
        return
    cluster = opts.cluster or ClusterOptions()
    if listen:
        cluster.host, cluster.port = parse_listen(listen, "--cluster")
        # As nats-server: credentials in the URL become the routes' authorization; a URL without them
        # clears the config file's (the flag overrides the block).
        url = urllib.parse.urlsplit(listen)
        if url.username is not None:
            if url.password is None:
                raise ConfigValueError("expected cluster password to be set")
            cluster.username = urllib.parse.unquote(url.username)
            cluster.password = urllib.parse.unquote(url.password)
        else:
            cluster.username = cluster.password = ""
    if name is not None:
        if " " in name:
            raise ConfigValueError("cluster name cannot contain spaces or new lines")
        cluster.name = name
    if routes is not None:
        cluster.urls = route_urls(routes, "--routes") if routes else []
    if advertise is not None:
        cluster.advertise = advertise
    if no_advertise is not None:
        cluster.no_advertise = no_advertise
    if connect_retries is not None:
        cluster.connect_retries = connect_retries
    opts.cluster = cluster
