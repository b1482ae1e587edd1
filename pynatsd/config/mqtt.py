"""The `mqtt {}` block: nats-server's keys and checks (its parseMQTT and validateMQTTOptions).

`parse_block` reads the block, reporting each problem through callbacks so the schema can place it
(`file:line:col`); `validate` runs the checks that need the whole configuration, at the listener's start,
with nats-server's texts. Fails closed: `tls {}` keys pynatsd does not implement (pinned certificates,
certificate mapping, OCSP…) and any unknown key are errors naming the key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pynatsd.base.blocks import MQTTOptions
from pynatsd.base.options import Options
from pynatsd.base.values import ConfigValueError, parse_duration
from pynatsd.config.cluster import parse_listen
from pynatsd.config.websocket import check_tls_keys

#: (the map holding the key, the key as written, the message): an error or a warning at that key.
Report = Callable[[Mapping[str, Any], str, str], None]

MAX_ACK_PENDING = 0xFFFF


def mqtt_options(opts: Options) -> MQTTOptions | None:
    """The configured MQTT listener, or None."""
    mqtt = opts.mqtt
    return mqtt if mqtt is not None and mqtt.port != 0 else None


def _typed(key: str, value: Any, kind: type, what: str) -> Any:
    if isinstance(value, bool) is not (kind is bool) or not isinstance(value, kind):
        raise ConfigValueError(f"mqtt {key}: expected {what}, got {value!r}")
    return value


def _authorization(mqtt: MQTTOptions, block: Any, error: Report) -> None:
    """nats-server's parseSimpleAuth: one user or a token, and a timeout. Users, nkeys and permissions
    are the server's own (its `authorization {}` and `accounts {}`)."""
    if not isinstance(block, Mapping):
        raise ConfigValueError("mqtt authorization: expected a block")
    for key, value in block.items():
        k = key.lower()
        if k in ("user", "username"):
            mqtt.username = _typed(key, value, str, "a string")
        elif k in ("pass", "password"):
            mqtt.password = _typed(key, value, str, "a string")
        elif k == "token":
            mqtt.token = _typed(key, value, str, "a string")
        elif k == "timeout":
            mqtt.auth_timeout = (
                float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 1.0
            )
        else:
            error(block, key, f'unknown field "{key}"')


def parse_block(value: Any, error: Report, warn: Report) -> MQTTOptions:
    """An `mqtt {}` block as nats-server reads it (keys case-insensitive, unknown keys rejected)."""
    if not isinstance(value, Mapping):
        raise ConfigValueError(f"Expected mqtt to be a map, got {type(value).__name__}")
    mqtt = MQTTOptions()
    for key, v in value.items():
        k = key.lower()
        try:
            if k == "listen":
                mqtt.host, mqtt.port = parse_listen(str(v), "mqtt listen")
            elif k == "port":
                mqtt.port = _typed(key, v, int, "an integer")
            elif k in ("host", "net"):
                mqtt.host = _typed(key, v, str, "a string")
            elif k in ("authorization", "authentication"):
                _authorization(mqtt, v, error)
            elif k == "no_auth_user":
                mqtt.no_auth_user = _typed(key, v, str, "a string")
            elif k in ("ack_wait", "ackwait"):
                mqtt.ack_wait = parse_duration("ack_wait", v)
            elif k in ("js_api_timeout", "api_timeout"):
                mqtt.js_api_timeout = parse_duration("js_api_timeout", v)
            elif k in ("max_ack_pending", "max_pending", "max_inflight"):
                pending = _typed(key, v, int, "an integer")
                if not 0 <= pending <= MAX_ACK_PENDING:
                    error(value, key, f"invalid value {pending}, should in [0..{MAX_ACK_PENDING}] range")
                else:
                    mqtt.max_ack_pending = pending
            elif k == "js_domain":
                mqtt.js_domain = _typed(key, v, str, "a string")
            elif k == "stream_replicas":
                mqtt.stream_replicas = _typed(key, v, int, "an integer")
            elif k == "consumer_replicas":
                warn(
                    value,
                    key,
                    f'invalid use of field "{key}": consumer replicas setting ignored in this server version',
                )
            elif k == "consumer_memory_storage":
                mqtt.consumer_memory_storage = _typed(key, v, bool, "a boolean")
            elif k in ("consumer_inactive_threshold", "consumer_auto_cleanup"):
                mqtt.consumer_inactive_threshold = parse_duration("consumer_inactive_threshold", v)
            elif k == "reject_qos2_publish":
                mqtt.reject_qos2_publish = _typed(key, v, bool, "a boolean")
            elif k == "downgrade_qos2_subscribe":
                mqtt.downgrade_qos2_subscribe = _typed(key, v, bool, "a boolean")
            elif k == "tls":
                if not isinstance(v, Mapping):
                    raise ConfigValueError("mqtt tls: expected a block")
                check_tls_keys(dict(v), "mqtt")
                mqtt.tls = dict(v)
            else:
                error(value, key, f'unknown field "{key}"')
        except ConfigValueError as exc:
            error(value, key, str(exc))
    return mqtt


def validate(mqtt: MQTTOptions, opts: Options, jetstream: bool) -> None:
    """nats-server's validateMQTTOptions, in its order and with its texts; ConfigValueError if refused."""
    if mqtt.port == 0:
        return
    clustered = opts.cluster is not None and opts.cluster.port != 0
    gateway = opts.gateway is not None and opts.gateway.port != 0
    if not opts.server_name and (clustered or gateway):
        raise ConfigValueError("mqtt requires server name to be explicitly set")
    if mqtt.no_auth_user:
        _check_no_auth_user(mqtt.no_auth_user, opts)
    if opts.users:
        if mqtt.username:
            raise ConfigValueError("mqtt authentication username not compatible with presence of users/nkeys")
        if mqtt.token:
            raise ConfigValueError("mqtt authentication token not compatible with presence of users/nkeys")
    if mqtt.ack_wait < 0:
        raise ConfigValueError("ack wait must be a positive value")
    if mqtt.js_api_timeout < 0:
        raise ConfigValueError("JS API timeout must be a positive value")
    leaf = opts.leafnodes
    leafs = leaf is not None and (leaf.port != 0 or bool(leaf.remotes))
    if not jetstream and not clustered and not gateway and not leafs:
        raise ConfigValueError("mqtt requires JetStream to be enabled if running in standalone mode")
    # Fail closed where pynatsd cannot decide about MQTT clients as nats-server would.
    if opts.auth_callout is not None or opts.python_authorizer is not None:
        raise ConfigValueError(
            "mqtt: pynatsd does not support MQTT clients with an auth callout or a Python authorizer yet; "
            "remove the mqtt block to run pynatsd"
        )


def _check_no_auth_user(name: str, opts: Options) -> None:
    """nats-server's validateNoAuthUser, for the block's no_auth_user."""
    names = {str(u.get("user", u.get("username", u.get("nkey", "")))) for u in opts.users or []}
    for acc in opts.accounts.values():
        names |= {str(u.get("user", u.get("username", u.get("nkey", "")))) for u in acc.users}
    if not names:
        raise ConfigValueError(f'no_auth_user: "{name}" present, but users/nkeys are not defined')
    if name not in names:
        raise ConfigValueError(
            f'no_auth_user: "{name}" not present as user or nkey in authorization block or account '
            "configuration"
        )
