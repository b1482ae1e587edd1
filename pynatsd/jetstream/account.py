"""One account's JetStream: its internal client, streams (loaded from disk at start) and API subscription."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pynatsd.broker.internal import InternalClient
from pynatsd.broker.logging import get_logger
from pynatsd.jetstream import errors
from pynatsd.jetstream.consumer import Consumer, random_name
from pynatsd.jetstream.stream import Stream, equivalent
from pynatsd.jetstream.util import now_ns, subjects_overlap

if TYPE_CHECKING:
    from pynatsd.jetstream import JetStream

log = get_logger()


class JsAccount:
    def __init__(self, js: JetStream, name: str) -> None:
        self.js = js
        self.name = name
        self.client = InternalClient(js.server, name, "jetstream")
        self.streams: dict[str, Stream] = {}
        self.api_total = 0
        self.api_errors = 0
        self.api_errors_on_publish = 0
        self.dir: Path = js.store_root / name / "streams"

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> None:
        from pynatsd.jetstream.api import Api

        self.api = Api(self)
        self.client.subscribe(b"$JS.API.>", self.api.handle)
        if self.js.domain:
            # Clients that name the domain use $JS.<domain>.API.>: the same API under another prefix.
            prefix = b"$JS.%s.API." % self.js.domain.encode()

            def in_domain(subject: bytes, reply: bytes | None, hdrs: bytes | None, payload: bytes) -> None:
                self.api.handle(b"$JS.API." + subject[len(prefix) :], reply, hdrs, payload)

            self.client.subscribe(prefix + b">", in_domain)
        if self.dir.is_dir():
            for sdir in sorted(self.dir.iterdir()):
                self._load_stream(sdir)

    def _load_stream(self, sdir: Path) -> None:
        try:
            meta = json.loads((sdir / "meta.json").read_text())
        except (OSError, ValueError) as exc:
            log.warning("JetStream: skipping stream directory %s: %s", sdir, exc)
            return
        stream = Stream(self, meta["config"], int(meta["created"]), sdir)
        self.streams[stream.name] = stream
        stream.start()
        obs = sdir / "obs"
        if obs.is_dir():
            # obs/<name>/state.json, and obs/<name>.json as earlier versions wrote it (unless both are there)
            for path in sorted([*obs.glob("*/state.json"), *obs.glob("*.json")]):
                if path.parent == obs and (obs / path.stem / "state.json").exists():
                    continue
                try:
                    state = json.loads(path.read_text())
                except (OSError, ValueError) as exc:
                    log.warning("JetStream: skipping consumer state %s: %s", path, exc)
                    continue
                consumer = Consumer(stream, state["name"], state["config"], int(state["created"]), state)
                stream.consumers[consumer.name] = consumer
        st = stream.store
        log.info(
            "  Restored %d messages for stream '%s > %s' (first %d, last %d)",
            st.msgs,
            self.name,
            stream.name,
            st.first_seq,
            st.last_seq,
        )

    def flush(self) -> None:
        for stream in self.streams.values():
            stream.store.flush()

    def stop(self) -> None:
        for stream in self.streams.values():
            for consumer in stream.consumers.values():
                if consumer.persistent:
                    consumer.save()
            stream.stop()
        self.client.close()

    # -- streams --------------------------------------------------------------------------------------
    def create_stream(self, cfg: dict[str, Any]) -> Stream:
        """A new stream with this config, or the existing one if its config is the same."""
        existing = self.streams.get(cfg["name"])
        if existing is not None:
            if equivalent(existing.config, cfg):
                return existing
            raise errors.stream_name_exist()
        self._check_overlap(cfg)
        self._check_limits(cfg)
        directory = self.dir / cfg["name"] if cfg["storage"] == "file" else None
        stream = Stream(self, cfg, now_ns(), directory)
        stream.save_meta()
        self.streams[stream.name] = stream
        stream.start()
        return stream

    def _check_overlap(self, cfg: dict[str, Any], skip: str = "") -> None:
        for other in self.streams.values():
            if other.name == skip:
                continue
            for a in cfg["subjects"]:
                for b in other.config["subjects"]:
                    if subjects_overlap(a.encode(), b.encode()):
                        raise errors.subject_overlap()

    def _check_limits(self, cfg: dict[str, Any]) -> None:
        limit = (
            self.js.config.max_memory_store if cfg["storage"] == "memory" else self.js.config.max_file_store
        )
        if limit >= 0 and cfg["max_bytes"] > limit:
            raise errors.insufficient_resources()

    def update_stream(self, cfg: dict[str, Any]) -> Stream:
        stream = self.streams.get(cfg["name"])
        if stream is None:
            raise errors.stream_not_found()
        self._check_overlap(cfg, skip=stream.name)
        try:
            stream.update(cfg)
        except errors.ApiError as err:
            if err.err_code == 10052:
                raise errors.stream_invalid_config(err.description) from None
            raise
        return stream

    def delete_stream(self, name: str) -> None:
        stream = self.streams.pop(name, None)
        if stream is None:
            raise errors.stream_not_found()
        for consumer in list(stream.consumers.values()):
            consumer.stop(deleted=True)
        stream.consumers.clear()
        stream.stop()
        stream.store.delete()
        if stream.directory is not None:
            shutil.rmtree(stream.directory, ignore_errors=True)

    # -- consumers ------------------------------------------------------------------------------------
    def add_consumer(self, stream: Stream, cfg: dict[str, Any], action: str) -> Consumer:
        name = cfg.get("name") or ""
        existing = stream.consumers.get(name) if name else None
        if existing is not None:
            if action == "create" and _strip(existing.config) != _strip(cfg):
                raise errors.consumer_already_exists()
            if _strip(existing.config) == _strip(cfg):
                return existing
            return self._update_consumer(existing, cfg)
        if action == "update":
            raise errors.consumer_does_not_exist()
        max_consumers = stream.config["max_consumers"]
        if max_consumers > 0 and len(stream.consumers) >= max_consumers:
            raise errors._e(400, 10026, "maximum consumers limit reached")
        if not name:
            name = random_name()
            while name in stream.consumers:
                name = random_name()
        consumer = Consumer(stream, name, cfg, now_ns())
        stream.consumers[name] = consumer
        consumer.save_soon()
        return consumer

    def _update_consumer(self, consumer: Consumer, cfg: dict[str, Any]) -> Consumer:
        old = consumer.config
        # nats-server's checkNewConsumerConfig: its order and words
        for key, what in _NOT_UPDATABLE:
            if old.get(key) != cfg.get(key):
                raise errors.consumer_create(f"{what} can not be updated")
        if old.get("deliver_subject") != cfg.get("deliver_subject"):
            if not old.get("deliver_subject"):
                raise errors.consumer_create("can not update pull consumer to push based")
            if not cfg.get("deliver_subject"):
                raise errors.consumer_create("can not update push consumer to pull based")
        if old.get("max_waiting") != cfg.get("max_waiting"):
            raise errors.consumer_create("max waiting can not be updated")
        consumer.update(cfg)
        consumer.on_removed()
        consumer.save_soon()
        consumer.kick()
        return consumer

    def delete_consumer(self, stream: Stream, name: str) -> None:
        consumer = stream.consumers.pop(name, None)
        if consumer is None:
            raise errors.consumer_not_found()
        consumer.stop(deleted=True)
        if stream.config["retention"] != "limits":
            # Messages only this consumer still held may go now.
            for seq in list(stream.store.seqs_from(stream.store.first_seq)):
                stream.on_acked(seq)

    # -- monitoring -----------------------------------------------------------------------------------
    def usage(self) -> dict[str, int]:
        mem = sum(s.store.bytes for s in self.streams.values() if s.config["storage"] == "memory")
        disk = sum(s.store.bytes for s in self.streams.values() if s.config["storage"] == "file")
        return {
            "streams": len(self.streams),
            "consumers": sum(len(s.consumers) for s in self.streams.values()),
            "messages": sum(s.store.msgs for s in self.streams.values()),
            "bytes": mem + disk,
            "memory": mem,
            "storage": disk,
            "api_total": self.api_total,
            "api_errors": self.api_errors,
        }


_NOT_UPDATABLE = (
    ("deliver_policy", "deliver policy"),
    ("mem_storage", "storage type"),
    ("opt_start_seq", "start sequence"),
    ("opt_start_time", "start time"),
    ("ack_policy", "ack policy"),
    ("replay_policy", "replay policy"),
    ("idle_heartbeat", "heart beats"),
    ("flow_control", "flow control"),
)


def _strip(cfg: dict[str, Any]) -> dict[str, Any]:
    out = dict(cfg)
    out["metadata"] = {k: v for k, v in (cfg.get("metadata") or {}).items() if not k.startswith("_nats.")}
    return out
