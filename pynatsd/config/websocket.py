"""The `websocket {}` block: nats-server's keys and checks, kept apart from the main config schema.

`apply(opts, key, block)` is the config-file hook; the parsed `WebSocketOptions` lives in
`opts.websocket` and `websocket_options(opts)` returns it (None when no listener is configured).
Security fails closed: keys that would control access in ways pynatsd does not implement (JWT cookies)
stop the server with a clear error, and unknown keys are errors, as in nats-server.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import Any

from pynatsd.base.blocks import WebSocketOptions
from pynatsd.base.options import Options
from pynatsd.base.values import ConfigValueError, parse_duration

# Headers the upgrade response sets itself (nats-server refuses them in `headers {}`).
_RESERVED_HEADERS = frozenset({"host", "content-length", "connection", "upgrade", "nats-no-masking"})
_TLS_KEYS = frozenset({"cert_file", "key_file", "ca_file", "verify", "timeout"})
_ORIGIN_KEYS = frozenset(
    {"allowed_origins", "allowed_origin", "allow_origins", "allow_origin", "origins", "origin"}
)


def websocket_options(opts: Options) -> WebSocketOptions | None:
    """The configured WebSocket listener, or None."""
    ws = opts.websocket
    return ws if ws is not None and ws.port != 0 else None


def _str(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigValueError(f"websocket {key}: expected a string, got {value!r}")
    return value


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigValueError(f"websocket {key}: expected a boolean, got {value!r}")
    return value


def _int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigValueError(f"websocket {key}: expected an integer, got {value!r}")
    return value


def _authorization(ws: WebSocketOptions, value: Any) -> None:
    if not isinstance(value, dict):
        raise ConfigValueError("websocket authorization: expected a block")
    for key, v in value.items():
        k = key.lower()
        if k in ("user", "username"):
            ws.username = _str(key, v)
        elif k in ("pass", "password"):
            ws.password = _str(key, v)
        elif k == "token":
            ws.token = _str(key, v)
        elif k == "timeout":
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise ConfigValueError(f"websocket authorization timeout: expected seconds, got {v!r}")
            ws.auth_timeout = float(v)
        else:
            # nats-server's websocket authorization is "simple": users, nkeys and permissions live in the
            # server's own authorization block and apply to WebSocket clients too.
            raise ConfigValueError(f"websocket authorization: unknown field {key!r}")


def _origin(text: str) -> tuple[str, str, str]:
    """(scheme, host, port) of an origin URL, the port defaulted from the scheme; ValueError if invalid."""
    url = urllib.parse.urlsplit(text)
    if url.scheme not in ("http", "https"):
        raise ValueError("allowed origins must be absolute URLs with http or https scheme")
    if not url.hostname:
        raise ValueError("host is required")
    port = url.port  # raises ValueError on a bad port
    return url.scheme, url.hostname.lower(), str(port or (443 if url.scheme == "https" else 80))


def origin_parts(text: str) -> tuple[str, str, str]:
    return _origin(text)


def parse_block(value: Any) -> WebSocketOptions:
    """A `websocket {}` block as nats-server reads it (keys case-insensitive, unknown keys rejected)."""
    if not isinstance(value, dict):
        raise ConfigValueError(f"Expected websocket to be a map, got {type(value).__name__}")
    ws = WebSocketOptions()
    for key, v in value.items():
        k = key.lower()
        if k == "listen":
            text = str(v)
            host, sep, port = text.rpartition(":")
            if sep:
                ws.host = host.strip("[]") or ws.host
                text = port
            if not text.lstrip("-").isdigit():
                raise ConfigValueError(f"websocket listen: invalid port in {v!r}")
            ws.port = int(text)
        elif k == "port":
            ws.port = _int(key, v)
        elif k in ("host", "net"):
            ws.host = _str(key, v)
        elif k == "advertise":
            ws.advertise = _str(key, v)
        elif k == "no_tls":
            ws.no_tls = _bool(key, v)
        elif k == "tls":
            if not isinstance(v, dict):
                raise ConfigValueError("websocket tls: expected a block")
            ws.tls = v
        elif k == "same_origin":
            ws.same_origin = _bool(key, v)
        elif k in _ORIGIN_KEYS:
            items = v if isinstance(v, list) else [v]
            ws.allowed_origins = [_str(key, item) for item in items]
        elif k == "handshake_timeout":
            ws.handshake_timeout = parse_duration(f"websocket {key}", v)
        elif k in ("compress", "compression"):
            ws.compression = _bool(key, v)
        elif k in ("authorization", "authentication"):
            _authorization(ws, v)
        elif k == "no_auth_user":
            ws.no_auth_user = _str(key, v)
        elif k == "jwt_cookie":
            # Fail closed: a JWT in a cookie would be an accepted credential, and pynatsd has no JWT.
            raise ConfigValueError("websocket jwt_cookie: JWT authentication is not supported by pynatsd")
        elif k in ("user_cookie", "pass_cookie", "token_cookie"):
            setattr(ws, k, _str(key, v))
        elif k == "headers":
            if not isinstance(v, dict):
                raise ConfigValueError("websocket headers: expected a block")
            ws.headers = {str(h): _str(f"header {h}", hv) for h, hv in v.items()}
        elif k == "ping_interval":
            ws.ping_interval = parse_duration(f"websocket {key}", v)
        else:
            raise ConfigValueError(f"websocket: unknown field {key!r}")
    return ws


def check_block(ws: WebSocketOptions) -> None:
    """The checks of nats-server's validateWebsocketOptions that need nothing but the block."""
    if ws.port == 0:
        return
    if ws.tls is None and not ws.no_tls:
        raise ConfigValueError("websocket requires TLS configuration")
    check_tls_keys(ws.tls or {}, "websocket")
    for origin in ws.allowed_origins:
        try:
            _origin(origin)
        except ValueError as exc:
            raise ConfigValueError(f"unable to parse allowed origin {origin!r}: {exc}") from None
    for name in ws.headers:
        low = name.lower()
        if low in _RESERVED_HEADERS:
            raise ConfigValueError(f'websocket: invalid header "{name}" not allowed')
        if low.startswith("sec-websocket-"):
            raise ConfigValueError(f'websocket: invalid header "{name}", "Sec-WebSocket-" prefix not allowed')


def validate(ws: WebSocketOptions, opts: Options) -> None:
    """All of nats-server's validateWebsocketOptions, including the checks against the server's users."""
    check_block(ws)
    if ws.port == 0:
        return
    users = opts.users or []
    if ws.no_auth_user:
        names = {str(u.get("user", u.get("username", ""))) for u in users}
        for acc in opts.accounts.values():
            names |= {str(u.get("user", u.get("username", ""))) for u in acc.users}
        if not names:
            raise ConfigValueError(
                f'no_auth_user: "{ws.no_auth_user}" present, but users/nkeys are not defined'
            )
        if ws.no_auth_user not in names:
            raise ConfigValueError(
                f'no_auth_user: "{ws.no_auth_user}" not present as user or nkey in authorization block or '
                "account configuration"
            )
    if users:
        if ws.username:
            raise ConfigValueError(
                "websocket authentication username not compatible with presence of users/nkeys"
            )
        if ws.token:
            raise ConfigValueError(
                "websocket authentication token not compatible with presence of users/nkeys"
            )


def apply(opts: Options, key: str, value: Any) -> None:
    """Config-file hook for the `websocket` key (pynatsd.config.schema)."""
    # Checks against the rest of the file (users, no_auth_user) wait for the listener's start: the
    # `authorization` block may come after this one.
    ws = parse_block(value)
    check_block(ws)
    opts.websocket = ws


def check_tls_keys(block: dict[str, Any], what: str) -> None:
    """A listener's `tls {}` (WebSocket, MQTT) with the keys pynatsd implements for it, or an error."""
    unknown = {k.lower() for k in block} - _TLS_KEYS
    if unknown:
        # Fail closed: pinned certificates, cert mapping, OCSP… would restrict who gets in.
        raise ConfigValueError(f"{what} tls: unsupported field(s) {', '.join(sorted(unknown))}")


def tls_options(ws: WebSocketOptions, opts: Options) -> Options | None:
    """Options carrying the block's `tls {}` in the server's TLS fields, for pynatsd.base.tls."""
    return None if ws.tls is None else block_tls_options(ws.tls, opts, "websocket")


def block_tls_options(block: dict[str, Any], opts: Options, what: str) -> Options:
    """Options carrying a listener's `tls {}` (WebSocket, MQTT) in the server's TLS fields."""
    tls = {k.lower(): v for k, v in block.items()}
    return dataclasses.replace(
        opts,
        tls=True,
        tls_cert=str(tls.get("cert_file", "")),
        tls_key=str(tls.get("key_file", "")),
        tls_ca_cert=str(tls.get("ca_file", "")),
        tls_verify=bool(tls.get("verify", False)),
        tls_timeout=parse_duration(f"{what} tls timeout", tls.get("timeout", opts.tls_timeout)),
    )
