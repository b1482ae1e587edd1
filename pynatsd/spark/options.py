"""Parsing of the data source options (all strings, case-insensitive keys) into typed settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_URL = "nats://127.0.0.1:4222"


def _int(options: Mapping[str, str], key: str, default: int, minimum: int = 0) -> int:
    raw = options.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"pynatsd option {key}={raw!r} is not an integer") from None
    if value < minimum:
        raise ValueError(f"pynatsd option {key}={value} must be >= {minimum}")
    return value


def _servers(options: Mapping[str, str]) -> list[str]:
    return [u.strip() for u in options.get("url", DEFAULT_URL).split(",") if u.strip()]


@dataclass(frozen=True)
class ReadOptions:
    """Streaming read settings. `buffer_*` bound the driver-side buffer; see README for the policy."""

    servers: list[str]
    subjects: list[str]
    queue: str | None
    max_per_trigger: int | None
    buffer_messages: int
    buffer_bytes: int
    partitions: int
    available_now_idle: float
    available_now_max: float
    connect_timeout: float

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        subjects = [s.strip() for s in options.get("subjects", "").split(",") if s.strip()]
        if not subjects:
            raise ValueError("pynatsd streaming read needs option 'subjects' (comma-separated, wildcards ok)")
        per_trigger = _int(options, "maxMessagesPerTrigger", 0)
        return cls(
            servers=_servers(options),
            subjects=subjects,
            queue=options.get("queue") or None,
            max_per_trigger=per_trigger or None,
            buffer_messages=_int(options, "bufferSize", 1_000_000, minimum=1),
            buffer_bytes=_int(options, "bufferBytes", 256 * 1024 * 1024, minimum=1),
            partitions=_int(options, "numPartitions", 1, minimum=1),
            available_now_idle=_int(options, "availableNowIdleMs", 1000, minimum=1) / 1000,
            available_now_max=_int(options, "availableNowMaxMs", 30_000, minimum=1) / 1000,
            connect_timeout=_int(options, "connectTimeoutMs", 5000, minimum=1) / 1000,
        )


@dataclass(frozen=True)
class WriteOptions:
    """Write settings: where to publish, how long the final flush (or the last ack) may take."""

    servers: list[str]
    flush_timeout: float
    connect_timeout: float
    msg_id_header: str
    stream: str | None  # JetStream mode: publish with acks into this stream
    max_pending: int  # JetStream mode: unacknowledged publishes in flight per task

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        return cls(
            servers=_servers(options),
            flush_timeout=_int(options, "flushTimeoutMs", 30_000, minimum=1) / 1000,
            connect_timeout=_int(options, "connectTimeoutMs", 5000, minimum=1) / 1000,
            msg_id_header=options.get("msgIdHeader", "Nats-Msg-Id"),
            stream=options.get("stream") or None,
            max_pending=_int(options, "maxPending", 20_000, minimum=1),
        )
