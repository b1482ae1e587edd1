"""The `gateway {}` block (superclusters, pynatsd.gateways): `GatewayOptions`.

As nats-server reads it: `name`, `listen` (or `host`/`port`), `advertise`, `connect_retries`,
`reject_unknown_cluster` (`reject_unknown`), `authorization { user, password, timeout }` and
`gateways [ { name, url or urls, tls } ]`, `tls {}` (cert, key, CA, verify, insecure, timeout; a remote's
own `tls` for its connections). Fail closed: what pynatsd does not implement for gateways (other TLS keys,
tokens, permissions, connect backoff, write deadlines) stops the server with an error naming the key;
unknown keys are errors, as in nats-server.
"""

from __future__ import annotations

from typing import Any

from pynatsd.base.blocks import GatewayOptions, RemoteGateway
from pynatsd.base.options import Options
from pynatsd.base.values import ConfigValueError, to_bool, to_int, to_str
from pynatsd.config.cluster import check_route_url, parse_listen, tls_block

_UNSUPPORTED = {
    "connect_backoff": '"connect_backoff" for gateways',
    "write_deadline": '"write_deadline" for gateways',
    "write_timeout": '"write_timeout" for gateways',
}


def gateway_options(opts: Options) -> GatewayOptions | None:
    """The configured gateway, or None (no name or no port: gateways are off, as nats-server's)."""
    gateway = opts.gateway
    return gateway if gateway is not None and gateway.port != 0 and gateway.name else None


def _authorization(gateway: GatewayOptions, value: Any) -> None:
    if not isinstance(value, dict):
        raise ConfigValueError("gateway authorization: expected a block")
    for key, v in value.items():
        k = key.lower()
        if k in ("user", "username"):
            gateway.username = to_str(f"gateway {key}", v)
        elif k in ("pass", "password"):
            gateway.password = to_str(f"gateway {key}", v)
        elif k == "timeout":
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise ConfigValueError(f"gateway authorization timeout: expected seconds, got {v!r}")
            gateway.auth_timeout = float(v)
        elif k == "users":
            raise ConfigValueError("Gateway authorization does not allow multiple users")
        elif k == "token":
            raise ConfigValueError("Gateway authorization does not support tokens")
        elif k in ("permissions", "nkey", "accounts", "auth_callout"):
            raise ConfigValueError(
                f'gateway authorization "{key}": pynatsd does not support it for gateways (it controls '
                "who may connect); remove it to run pynatsd"
            )
        else:
            raise ConfigValueError(f'gateway authorization: unknown field "{key}"')
    if gateway.password and not gateway.username:
        raise ConfigValueError("gateway authorization: a password needs a user")


def _remote(index: int, value: Any) -> RemoteGateway:
    if not isinstance(value, dict):
        raise ConfigValueError(f"gateway gateways: entry {index} is not a map")
    remote = RemoteGateway()
    for key, v in value.items():
        k = key.lower()
        if k == "name":
            remote.name = to_str(f"gateway {key}", v)
        elif k == "url":
            remote.urls.append(_url(to_str(f"gateway {key}", v)))
        elif k == "urls":
            if not isinstance(v, list):
                raise ConfigValueError(f"gateway {key}: expected a list of URLs, got {v!r}")
            remote.urls += [_url(to_str(f"gateway {key}", item)) for item in v]
        elif k == "tls":
            remote.tls = tls_block("gateway remote tls", v, ("insecure",), cert_required=False)
        else:
            raise ConfigValueError(f'gateway: unknown field "{key}"')
    if not remote.name:
        raise ConfigValueError(f"gateway in the list {index} has no name")
    if not remote.urls:
        raise ConfigValueError(f'gateway "{remote.name}" has no URL')
    return remote


def _url(text: str) -> str:
    try:
        return check_route_url(text)
    except ConfigValueError:
        raise ConfigValueError(f"error parsing gateway url [{text!r}]") from None


def parse_block(value: Any) -> GatewayOptions:
    """A `gateway {}` block as nats-server reads it (keys case-insensitive, unknown keys rejected)."""
    if not isinstance(value, dict):
        raise ConfigValueError(f"Expected gateway to be a map, got {type(value).__name__}")
    gateway = GatewayOptions()
    for key, v in value.items():
        k = key.lower()
        if k == "name":
            name = to_str(f"gateway {key}", v)
            if " " in name:
                raise ConfigValueError("gateway name cannot contain spaces")
            gateway.name = name
        elif k == "listen":
            gateway.host, gateway.port = parse_listen(str(v), "gateway listen")
        elif k == "port":
            gateway.port = to_int(f"gateway {key}", v)
        elif k in ("host", "net"):
            gateway.host = to_str(f"gateway {key}", v)
        elif k == "authorization":
            _authorization(gateway, v)
        elif k == "advertise":
            gateway.advertise = to_str(f"gateway {key}", v)
        elif k == "connect_retries":
            gateway.connect_retries = to_int(f"gateway {key}", v)
        elif k in ("reject_unknown", "reject_unknown_cluster"):
            gateway.reject_unknown_cluster = to_bool(f"gateway {key}", v)
        elif k == "tls":
            gateway.tls = tls_block("gateway tls", v, ("verify", "insecure"), cert_required=True)
        elif k == "gateways":
            if not isinstance(v, list):
                raise ConfigValueError(f"gateway {key}: expected a list")
            gateway.gateways = [_remote(i, item) for i, item in enumerate(v)]
        elif k in _UNSUPPORTED:
            raise ConfigValueError(
                f'gateway "{key}": pynatsd does not support {_UNSUPPORTED[k]}; remove it to run pynatsd'
            )
        else:
            raise ConfigValueError(f'gateway: unknown field "{key}"')
    if gateway.name or gateway.port:  # nats-server's validateGatewayOptions
        if not gateway.name:
            raise ConfigValueError("gateway has no name")
        if not gateway.port:
            raise ConfigValueError(
                f'gateway "{gateway.name}" has no port specified (select -1 for random port)'
            )
    return gateway


def apply(opts: Options, key: str, value: Any) -> None:
    """The config-file hook: parse the block into `opts.gateway`."""
    opts.gateway = parse_block(value)
