"""JetStream's monitoring views: /jsz (nats-server's fields), the /varz `jetstream` block, metrics."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pynatsd.jetstream.stream import API_LEVEL
from pynatsd.jetstream.util import now_ns, rfc3339

if TYPE_CHECKING:
    from pynatsd.config.jetstream import JsConfig
    from pynatsd.jetstream import JetStream

_TRUE = ("1", "true", "yes", "on")
_UINT64 = (1 << 64) - 1


def effective_limits(js: JetStream) -> tuple[int, int]:
    """max_memory and max_storage as nats-server reports them: unset means 75% of RAM / of the disk."""
    return configured_limits(js.config)


def configured_limits(config: JsConfig) -> tuple[int, int]:
    """effective_limits of a JetStream configuration (a meta group member's too, which has no JetStream)."""
    mem, disk = config.max_memory_store, config.max_file_store
    if mem < 0:
        try:
            mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 3 // 4
        except (ValueError, OSError):
            mem = 0
    if disk < 0:
        try:
            disk = shutil.disk_usage(config.store_dir).free * 3 // 4
        except OSError:
            disk = 0
    return mem, disk


def config_block(js: JetStream) -> dict[str, Any]:
    return settings_block(js.config)


def settings_block(config: JsConfig) -> dict[str, Any]:
    """/jsz's `config` for JetStream settings (a JetStream's, or a cluster member's that runs none)."""
    mem, disk = configured_limits(config)
    out: dict[str, Any] = {
        "max_memory": mem,
        "max_storage": disk,
        "store_dir": str(config.store_dir / "jetstream"),
        "sync_interval": int(config.sync_interval * 1e9),
        "strict": True,
    }
    if config.sync_always:
        out["sync_always"] = True
    if config.domain:
        out["domain"] = config.domain
    return out


def _stats(js: JetStream) -> dict[str, Any]:
    u = js.usage()
    return {
        "memory": u["memory"],
        "storage": u["storage"],
        "reserved_memory": 0,
        "reserved_storage": 0,
        "accounts": len(js.accounts),
        "ha_assets": 0,
        "api": {"level": API_LEVEL, "total": u["api_total"], "errors": u["api_errors"]},
    }


def varz_block(js: JetStream) -> dict[str, Any]:
    return {"config": config_block(js), "stats": _stats(js), "limits": {"default_max_consumers": 1000}}


def jsz(js: JetStream, server_id: str, query: Mapping[str, str]) -> dict[str, Any]:
    """nats-server's /jsz; `accounts`, `streams`, `consumers`, `config` add the details it adds."""
    u = js.usage()
    want = {k: str(query.get(k, "")).lower() in _TRUE for k in ("accounts", "streams", "consumers", "config")}
    only = query.get("acc") or ""
    out: dict[str, Any] = {
        **_stats(js),
        "server_id": server_id,
        "now": rfc3339(now_ns()),
        "config": config_block(js),
        "limits": {"default_max_consumers": 1000},
        "streams": u["streams"],
        "consumers": u["consumers"],
        "messages": u["messages"],
        "bytes": u["bytes"],
    }
    if want["accounts"] or want["streams"] or want["consumers"] or only:
        details = []
        for name, acc in sorted(js.accounts.items()):
            if only and name != only:
                continue
            detail = account_detail(name, acc.usage(), None if acc.tier else acc.limits)
            if want["streams"] or want["consumers"]:
                streams = []
                for stream in sorted(acc.streams.values(), key=lambda s: s.name):
                    sd: dict[str, Any] = {
                        "name": stream.name,
                        "created": rfc3339(stream.created),
                        "cluster": {"leader": js.server.server_name},
                        "state": stream.state(),
                    }
                    if want["config"]:
                        sd["config"] = stream.config
                    if want["consumers"]:
                        ts = rfc3339(now_ns())
                        sd["consumer_detail"] = [
                            {
                                k: v
                                for k, v in c.info(stored_config=True).items()
                                if k != "config" or want["config"]
                            }
                            | {"ts": ts}
                            for c in sorted(stream.consumers.values(), key=lambda c: c.name)
                        ]
                    streams.append(sd)
                detail["stream_detail"] = streams
            details.append(detail)
        out["account_details"] = details
    out["total"] = len(out.get("account_details", js.accounts))
    return out


def account_detail(name: str, usage: Mapping[str, int], limits: Mapping[str, Any] | None) -> dict[str, Any]:
    """An account's entry in /jsz's account_details (before its streams): `usage` its memory, storage,
    api_total and api_errors; reserved_memory / reserved_storage its untiered `limits` as nats-server
    shows them, Go's uint64 (an unlimited -1 is 18446744073709551615), 0 without."""
    return {
        "name": name,
        "id": name,
        "memory": usage["memory"],
        "storage": usage["storage"],
        "reserved_memory": limits["max_memory"] & _UINT64 if limits is not None else 0,
        "reserved_storage": limits["max_storage"] & _UINT64 if limits is not None else 0,
        "accounts": 0,
        "ha_assets": 0,
        "api": {"level": 0, "total": usage["api_total"], "errors": usage["api_errors"]},
    }


def _consumer_detail(info: dict[str, Any], with_config: bool, ts: str) -> dict[str, Any]:
    if not with_config:
        info.pop("config", None)
    info["ts"] = ts
    return info


def metrics(js: JetStream) -> list[tuple[str, str, str, int]]:
    """(kind, name, help, value) rows for /metrics."""
    u = js.usage()
    return [
        ("gauge", "pynatsd_jetstream_streams", "JetStream streams.", u["streams"]),
        ("gauge", "pynatsd_jetstream_consumers", "JetStream consumers.", u["consumers"]),
        ("gauge", "pynatsd_jetstream_messages", "Messages stored in all streams.", u["messages"]),
        ("gauge", "pynatsd_jetstream_bytes", "Bytes stored in all streams.", u["bytes"]),
        ("gauge", "pynatsd_jetstream_memory_bytes", "Bytes stored in memory streams.", u["memory"]),
        ("gauge", "pynatsd_jetstream_storage_bytes", "Bytes stored in file streams.", u["storage"]),
        ("counter", "pynatsd_jetstream_stored_messages", "Messages stored since start.", js.stored_msgs),
        ("counter", "pynatsd_jetstream_api_requests", "$JS.API requests answered.", u["api_total"]),
        (
            "counter",
            "pynatsd_jetstream_api_errors",
            "$JS.API requests answered with an error.",
            u["api_errors"],
        ),
    ]
