"""Maps a parsed configuration (pynatsd.broker.config) onto `pynatsd.broker.options.Options`.

Unknown keys become warnings, near-misses of known keys (likely typos) become errors, as do values of the
wrong type. Durations accept Go-style strings ("2m", "10s", "1h30m", "500ms") or numbers (seconds).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from typing import Any

from pynatsd.broker.options import Options

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class ConfigValueError(ValueError):
    """A key with a value of the wrong type or an unknown key that looks like a typo."""


def parse_duration(key: str, value: Any) -> float:
    """Seconds from a number or a Go duration string."""
    if isinstance(value, bool):
        raise ConfigValueError(f"{key}: expected a duration, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        pos, total = 0, 0.0
        for m in _DURATION_PART.finditer(text):
            if m.start() != pos:
                break
            total += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if text and pos == len(text):
            return total
    raise ConfigValueError(f"{key}: invalid duration {value!r}")


def _int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigValueError(f"{key}: expected an integer, got {value!r}")
    return value


def _str(key: str, value: Any) -> str:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ConfigValueError(f"{key}: expected a string, got {value!r}")
    return str(value)


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigValueError(f"{key}: expected a boolean, got {value!r}")
    return value


def _listen(opts: Options, key: str, value: Any) -> None:
    text = _str(key, value)
    host, sep, port = text.rpartition(":")
    if sep:
        opts.host = host.strip("[]") or opts.host
        opts.port = _int(key, int(port)) if port.isdigit() else _int(key, port)
    elif text.isdigit():
        opts.port = int(text)
    else:
        opts.host = text


def _http(opts: Options, key: str, value: Any) -> None:
    if isinstance(value, int) and not isinstance(value, bool):
        opts.http_port = value
        return
    text = _str(key, value)
    host, _, port = text.rpartition(":")
    opts.http_host = host or opts.http_host
    opts.http_port = _int(key, int(port)) if port.isdigit() else _int(key, port)


def _max_connections(opts: Options, key: str, value: Any) -> None:
    n = _int(key, value)
    opts.max_connections = -1 if n == 0 else n  # nats-server: 0 in a file rejects every client


def _authorization(opts: Options, key: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise ConfigValueError(f"{key}: expected a block")
    for k, v in value.items():
        if k in ("user", "username"):
            opts.username = _str(k, v)
        elif k in ("pass", "password"):
            opts.password = _str(k, v)
        elif k == "token":
            opts.authorization = _str(k, v)
        elif k == "timeout":
            opts.auth_timeout = parse_duration(k, v)
    opts.extra["authorization"] = value


def _tls(opts: Options, key: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise ConfigValueError(f"{key}: expected a block")
    opts.tls = True
    for k, v in value.items():
        if k in ("cert_file",):
            opts.tls_cert = _str(k, v)
        elif k == "key_file":
            opts.tls_key = _str(k, v)
        elif k == "ca_file":
            opts.tls_ca_cert = _str(k, v)
        elif k == "verify":
            opts.tls_verify = _bool(k, v)
        elif k == "timeout":
            opts.tls_timeout = parse_duration(k, v)
        elif k == "handshake_first":
            opts.tls_handshake_first = v is True or (isinstance(v, str) and v != "")
    opts.extra["tls"] = value


def _setter(field: str, convert: Callable[[str, Any], Any]) -> Callable[[Options, str, Any], None]:
    def apply(opts: Options, key: str, value: Any) -> None:
        setattr(opts, field, convert(key, value))

    return apply


def _extra(opts: Options, key: str, value: Any) -> None:
    opts.extra[key] = value


_HANDLERS: dict[str, Callable[[Options, str, Any], None]] = {
    "listen": _listen,
    "port": _setter("port", _int),
    "host": _setter("host", _str),
    "net": _setter("host", _str),
    "server_name": _setter("server_name", _str),
    "client_advertise": _setter("client_advertise", _str),
    "http": _http,
    "http_port": _setter("http_port", _int),
    "https_port": _setter("https_port", _int),
    "debug": _setter("debug", _bool),
    "trace": _setter("trace", _bool),
    "logtime": _setter("logtime", _bool),
    "logtime_utc": _setter("logtime_utc", _bool),
    "log_file": _setter("log_file", _str),
    "pid_file": _setter("pid_file", _str),
    "ports_file_dir": _setter("ports_file_dir", _str),
    "max_payload": _setter("max_payload", _int),
    "max_pending": _setter("max_pending", _int),
    "max_control_line": _setter("max_control_line", _int),
    "max_connections": _max_connections,
    "max_subscriptions": _setter("max_subscriptions", _int),
    "ping_interval": _setter("ping_interval", parse_duration),
    "ping_max": _setter("ping_max", _int),
    "write_deadline": _setter("write_deadline", parse_duration),
    "no_fast_producer_stall": _setter("no_fast_producer_stall", _bool),
    "lame_duck_duration": _setter("lame_duck_duration", parse_duration),
    "lame_duck_grace_period": _setter("lame_duck_grace_period", parse_duration),
    "no_header_support": _setter("no_header_support", _bool),
    "disable_sublist_cache": _setter("disable_sublist_cache", _bool),
    "authorization": _authorization,
    "tls": _tls,
    "accounts": _extra,
    "jetstream": _extra,  # read by pynatsd.jetstream.config
    "no_auth_user": _setter("no_auth_user", _str),
}


def apply_config(opts: Options, config: dict[str, Any]) -> list[str]:
    """Applies a parsed config to `opts` in place; returns warnings, raises ConfigValueError on errors."""
    warnings: list[str] = []
    for key, value in config.items():
        handler = _HANDLERS.get(key.lower())
        if handler is not None:
            handler(opts, key, value)
            continue
        close = difflib.get_close_matches(key.lower(), _HANDLERS, n=1, cutoff=0.85)
        if close:
            raise ConfigValueError(f"unknown field {key!r}, did you mean {close[0]!r}?")
        warnings.append(f"unknown field {key!r} ignored")
    return warnings
