"""Validation of CONNECT options (nats-server's processConnect), pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pynatsd.protocol import errors

_BOOL_FIELDS = ("verbose", "pedantic", "tls_required", "echo", "headers", "no_responders")
_STR_FIELDS = ("auth_token", "user", "pass", "name", "lang", "version", "sig", "nkey", "jwt")


@dataclass(slots=True)
class ConnectOptions:
    """A client's CONNECT options, decoded on top of nats-server's defaults."""

    verbose: bool = True
    pedantic: bool = True
    tls_required: bool = False
    echo: bool = True
    headers: bool = False
    no_responders: bool = False
    protocol: int = 0
    auth_token: str = ""
    user: str = ""
    password: str = ""
    name: str = ""
    lang: str = ""
    version: str = ""
    sig: str = ""
    nkey: str = ""
    jwt: str = ""


def parse_connect(raw: dict[str, Any], server_headers: bool = True) -> ConnectOptions:
    """Decode CONNECT JSON as Go's encoding/json does into nats-server's struct.

    Keys match case-insensitively; a value of the wrong type is a decode error (silent close). A
    `protocol` other than 0 or 1 and `no_responders` without headers are rejected with their -ERR.
    """
    opts = ConnectOptions()
    for key, value in raw.items():
        name = key.lower()
        if name == "pass":
            name = "password"
        if value is None:
            continue
        if name in _BOOL_FIELDS:
            if not isinstance(value, bool):
                raise errors.InvalidJSON(f"CONNECT {key} is not a boolean")
            setattr(opts, name, value)
        elif name == "password" or name in _STR_FIELDS:
            if not isinstance(value, str):
                raise errors.InvalidJSON(f"CONNECT {key} is not a string")
            setattr(opts, name, value)
        elif name == "protocol":
            if isinstance(value, bool) or not isinstance(value, int):
                raise errors.InvalidJSON("CONNECT protocol is not an integer")
            opts.protocol = value
    if opts.protocol < 0 or opts.protocol > 1:
        raise errors.InvalidClientProtocol(f"protocol {opts.protocol}")
    opts.headers = opts.headers and server_headers
    if opts.no_responders and not opts.headers:
        raise errors.NoRespondersRequiresHeaders("no_responders without headers")
    return opts
