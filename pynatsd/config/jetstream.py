"""JetStream settings from `-js`/`-sd` and the config file's `jetstream` block (nats-server's names)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pynatsd.base.options import Options, system_account_of
from pynatsd.base.values import parse_duration


class JsConfigError(ValueError):
    pass


@dataclass
class JsConfig:
    store_dir: Path
    max_memory_store: int = -1  # -1: no limit
    max_file_store: int = -1
    domain: str = ""
    sync_interval: float = 120.0  # nats-server's default sync_interval: 2 minutes
    sync_always: bool = False
    # A stream's ingest buffer (nats-server's StreamMaxBufferedMsgs/Size): publishes past it in one turn of
    # the loop are refused with 429. 0: nats-server's defaults, 100,000 messages and 128 MiB.
    max_buffered_msgs: int = 0
    max_buffered_size: int = 0
    # The meta group's compaction thresholds (entries, bytes of log) on a cluster member; 0: nats-server's
    # cadence alone (pynatsd.raft.member.MetaApplier).
    meta_compact: int = 0
    meta_compact_size: int = 0


def _size(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise JsConfigError(f"jetstream {key}: expected a size, got {value!r}")
    return value


def from_options(opts: Options) -> JsConfig | None:
    """The JetStream settings, or None when JetStream is off.

    `opts.jetstream` holds the config file's value (a block, or true/enabled/false) and the CLI puts
    `-js` as True and `-sd` as `opts.jetstream_store_dir` (flags win over the file)."""
    raw = opts.jetstream
    flag_dir = opts.jetstream_store_dir
    if raw is None or raw is False or raw in ("disabled", "false", "off", "no"):
        return None
    block: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if block.get("enabled") is False:
        return None
    store_dir = flag_dir or block.get("store_dir") or block.get("store") or ""
    import tempfile  # only with JetStream on: it brings shutil, bz2, lzma into the process (idle RSS)

    cfg = JsConfig(store_dir=Path(store_dir) if store_dir else Path(tempfile.gettempdir()) / "nats")
    for key, value in block.items():
        k = key.lower()
        if k in ("max_memory_store", "max_mem_store", "max_mem"):
            cfg.max_memory_store = _size(key, value)
        elif k in ("max_file_store", "max_file"):
            cfg.max_file_store = _size(key, value)
        elif k == "max_buffered_msgs":
            if isinstance(value, bool) or not isinstance(value, int):
                raise JsConfigError(f'Expected a parseable size for "{key}", got {value!r}')
            cfg.max_buffered_msgs = value
        elif k == "max_buffered_size":
            cfg.max_buffered_size = _size(key, value)
        elif k in ("meta_compact", "meta_compact_size"):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise JsConfigError(f'Expected an absolute size for "{key}", got {value!r}')
            setattr(cfg, k, value)
        elif k == "domain":
            cfg.domain = str(value)
        elif k == "sync_interval":
            if value == "always":
                cfg.sync_always = True
            else:
                cfg.sync_interval = float(parse_duration(key, value))
    return cfg


def check_clustered(opts: Options, clustered: bool) -> None:
    """No split brain: on a clustered server, JetStream without a domain of its own makes the node a member
    of the cluster's meta group (pynatsd.raft.member), not a second JetStream beside the cluster's; its
    peer id is derived from the server name, which must therefore be set (nats-server's words)."""
    cfg = from_options(opts) if clustered else None
    if cfg is not None and not cfg.domain:
        if not opts.server_name:
            raise JsConfigError("jetstream cluster requires `server_name` to be set")
        if not system_account_of(opts):  # the meta group speaks in the system account
            raise JsConfigError("jetstream cluster requires a system account (no_system_account is set)")


def is_cluster_member(opts: Options, clustered: bool) -> bool:
    """JetStream on a clustered server without a domain of its own: a meta group member (see above)."""
    cfg = from_options(opts) if clustered else None
    return cfg is not None and not cfg.domain


def account_js_limits() -> dict[str, Any]:
    """nats-server's JetStream limits of an account that has none set (`jetstream: enabled`)."""
    return {
        "max_memory": -1,
        "max_storage": -1,
        "max_streams": -1,
        "max_consumers": -1,
        "max_ack_pending": -1,
        "memory_max_stream_bytes": -1,
        "storage_max_stream_bytes": -1,
        "max_bytes_required": False,
    }
