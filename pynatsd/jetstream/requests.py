"""The JetStream API's request bodies as nats-server types them (its Go structs, field by field), decoded by
`gojson`: a wrong type, an unknown field, a number past its Go type or a too-deep body gets nats-server's
10025 "invalid JSON: ..." with its words, before any handler looks at a value."""

from __future__ import annotations

from typing import Any

from pynatsd.jetstream import errors
from pynatsd.protocol.gojson import Enum, GoJsonError, Struct, decode


def _enum(*names: str, error: str | None = None, empty: str | None = None) -> Enum:
    values: dict[str, Any] = {f'"{n}"': n for n in names}
    if empty is not None:
        values['""'] = empty
    return Enum(values, error)


_COMPRESSION = Enum({'"none"': "none", '"s2"': "s2"}, "unknown compression algorithm")
_ANY_OBJECT = Struct("map", {}, strict=False)  # options refused by name after decoding (not implemented)
_STRINGS = ("[]", "string")
_META = ("map", "string")
_TRANSFORM = Struct("SubjectTransformConfig", {"src": "string", "dest": "string"})
# A mirror's or source's origin, as nats-server types it (StreamSource).
_STREAM_SOURCE = Struct(
    "StreamSource",
    {
        "name": "string",
        "opt_start_seq": "uint64",
        "opt_start_time": "time.Time",
        "filter_subject": "string",
        "subject_transforms": ("[]", _TRANSFORM),
        "external": Struct("ExternalStream", {"api": "string", "deliver": "string"}),
        "consumer": Struct("StreamConsumerSource", {"name": "string", "deliver_subject": "string"}),
    },
)

STREAM_FIELDS: dict[str, Any] = {
    "name": "string",
    "description": "string",
    "subjects": _STRINGS,
    "retention": _enum("limits", "interest", "workqueue"),
    "max_consumers": "int",
    "max_msgs": "int64",
    "max_bytes": "int64",
    "max_age": "time.Duration",
    "max_msgs_per_subject": "int64",
    "max_msg_size": "int32",
    "discard": _enum("old", "new"),
    "storage": _enum("file", "memory"),
    "num_replicas": "int",
    "no_ack": "bool",
    "duplicate_window": "time.Duration",
    "placement": Struct("Placement", {}, strict=False),
    "mirror": _STREAM_SOURCE,
    "sources": ("[]", _STREAM_SOURCE),
    "compression": _COMPRESSION,
    "first_seq": "uint64",
    "subject_transform": Struct("SubjectTransformConfig", {"src": "string", "dest": "string"}, strict=False),
    "republish": Struct(
        "RePublish", {"src": "string", "dest": "string", "headers_only": "bool"}, strict=False
    ),
    "allow_direct": "bool",
    "mirror_direct": "bool",
    "discard_new_per_subject": "bool",
    "sealed": "bool",
    "deny_delete": "bool",
    "deny_purge": "bool",
    "allow_rollup_hdrs": "bool",
    "consumer_limits": Struct(
        "StreamConsumerLimits", {"inactive_threshold": "time.Duration", "max_ack_pending": "int"}
    ),
    "allow_msg_ttl": "bool",
    "subject_delete_marker_ttl": "time.Duration",
    "allow_msg_counter": "bool",
    "allow_atomic": "bool",
    "allow_msg_schedules": "bool",
    "persist_mode": _enum("default", "async", empty="default"),
    "allow_batched": "bool",
    "metadata": _META,
}
STREAM_CONFIG = Struct("StreamConfigRequest", {**STREAM_FIELDS, "pedantic": "bool"})
# nats-server's stream options pynatsd does not implement: refused by name when set, never ignored.
# mirror and sources are left to normalize_config: nats-server's checks of their config come first there.
STREAM_UNSUPPORTED = (
    "placement", "consumer_limits",
    "persist_mode", "pedantic",
)  # fmt: skip

CONSUMER_FIELDS: dict[str, Any] = {
    "durable_name": "string",
    "name": "string",
    "description": "string",
    "deliver_policy": _enum("all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"),
    "opt_start_seq": "uint64",
    "opt_start_time": "time.Time",
    "ack_policy": _enum("none", "all", "explicit", "flow_control"),
    "ack_wait": "time.Duration",
    "max_deliver": "int",
    "backoff": ("[]", "time.Duration"),
    "filter_subject": "string",
    "filter_subjects": _STRINGS,
    "replay_policy": _enum("instant", "original"),
    "rate_limit_bps": "uint64",
    "sample_freq": "string",
    "max_waiting": "int",
    "max_ack_pending": "int",
    "flow_control": "bool",
    "headers_only": "bool",
    "max_batch": "int",
    "max_expires": "time.Duration",
    "max_bytes": "int",
    "deliver_subject": "string",
    "deliver_group": "string",
    "idle_heartbeat": "time.Duration",
    "inactive_threshold": "time.Duration",
    "num_replicas": "int",
    "mem_storage": "bool",
    "direct": "bool",
    "sourcing": "bool",
    "metadata": _META,
    "pause_until": "time.Time",
    "priority_groups": _STRINGS,
    "priority_policy": _enum(
        "none", "overflow", "pinned_client", "prioritized", error="unknown priority policy: %s"
    ),
    "priority_timeout": "time.Duration",
}
CONSUMER_UNSUPPORTED = ("rate_limit_bps", "pedantic")
CONSUMER_CREATE = Struct(
    "CreateConsumerRequest",
    {
        "stream_name": "string",
        "config": Struct("ConsumerConfig", CONSUMER_FIELDS),
        "action": Enum({'""': "", '"create"': "create", '"update"': "update"}, "unknown consumer action: %s"),
        "pedantic": "bool",
    },
)
# A pull request (`CONSUMER.MSG.NEXT`), read with a plain json.Unmarshal: unknown fields pass. nats-server
# decodes it through a pointer to a pointer, so its errors name the fields without a type (`.batch`).
PULL_REQUEST = Struct(
    "",
    {
        "expires": "time.Duration",
        "batch": "int",
        "max_bytes": "int",
        "no_wait": "bool",
        "idle_heartbeat": "time.Duration",
        "group": "string",
        "min_pending": "int64",
        "min_ack_pending": "int64",
        "id": "string",
        "priority": "int",
    },
    strict=False,
)
# nats-server reads an unpin request with a plain json.Unmarshal: unknown fields pass.
CONSUMER_UNPIN = Struct("JSApiConsumerUnpinRequest", {"group": "string"}, strict=False)
CONSUMER_PAUSE = Struct("JSApiConsumerPauseRequest", {"pause_until": "time.Time"})
# nats-server reads a reset request with a plain json.Unmarshal: unknown fields pass.
CONSUMER_RESET = Struct("JSApiConsumerResetRequest", {"seq": "uint64"}, strict=False)

_PAGED = {"offset": "int"}
STREAM_INFO = Struct(
    "JSApiStreamInfoRequest", {**_PAGED, "deleted_details": "bool", "subjects_filter": "string"}
)
STREAM_NAMES = Struct("JSApiStreamNamesRequest", {**_PAGED, "subject": "string"})
STREAM_LIST = Struct("JSApiStreamListRequest", {**_PAGED, "subject": "string"})
CONSUMERS = Struct("JSApiConsumersRequest", _PAGED)
STREAM_PURGE = Struct("JSApiStreamPurgeRequest", {"seq": "uint64", "filter": "string", "keep": "uint64"})
MSG_DELETE = Struct("JSApiMsgDeleteRequest", {"seq": "uint64", "no_erase": "bool"})
MSG_GET = Struct(
    "JSApiMsgGetRequest",
    {
        "seq": "uint64",
        "last_by_subj": "string",
        "next_by_subj": "string",
        "batch": "int",
        "max_bytes": "int",
        "start_time": "time.Time",
        "multi_last": _STRINGS,
        "up_to_seq": "uint64",
        "up_to_time": "time.Time",
        "no_hdr": "bool",
    },
)


def parse(payload: bytes, schema: Struct) -> dict[str, Any]:
    """A request body decoded as nats-server decodes it; ApiError 10025 with its words otherwise."""
    try:
        return decode(payload, schema)
    except GoJsonError as exc:
        raise errors.invalid_json(str(exc)) from None


def unsupported(cfg: dict[str, Any], names: tuple[str, ...]) -> str | None:
    """The first option of `names` that is set (not its zero value) in a decoded config."""
    for name in names:
        if cfg.get(name) not in (None, False, 0, "", [], {}, "default"):
            return name
    return None
