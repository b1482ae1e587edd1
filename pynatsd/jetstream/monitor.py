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


def effective_limits(js: JetStream) -> tuple[int, int]:
    """max_memory and max_storage as nats-server reports them: unset means 75% of RAM / of the disk."""
    return config_limits(js.config)


def config_limits(config: JsConfig) -> tuple[int, int]:
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
    mem, disk = effective_limits(js)
    out: dict[str, Any] = {
        "max_memory": mem,
        "max_storage": disk,
        "store_dir": str(js.store_root),
        "sync_interval": int(js.sync_interval * 1e9),
        "strict": True,
    }
    if js.sync_always:
        out["sync_always"] = True
    if js.domain:
        out["domain"] = js.domain
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
            au = acc.usage()
            detail: dict[str, Any] = {
                "name": name,
                "id": name,
                "memory": au["memory"],
                "storage": au["storage"],
                "reserved_memory": 0,
                "reserved_storage": 0,
                "accounts": 0,
                "ha_assets": 0,
                "api": {"level": 0, "total": au["api_total"], "errors": au["api_errors"]},
            }
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
