"""One account's JetStream: its internal client, streams (loaded from disk at start) and API subscription."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pynatsd.base.logging import get_logger
from pynatsd.broker.internal import InternalClient
from pynatsd.jetstream import errors
from pynatsd.jetstream.advisories import Advisories
from pynatsd.jetstream.consumer import Consumer, random_name
from pynatsd.jetstream.sourcing import check_origins, origin_created
from pynatsd.jetstream.stream import Stream, equivalent
from pynatsd.jetstream.util import now_ns, parse_rfc3339
from pynatsd.protocol.subjects import overlap

if TYPE_CHECKING:
    from pynatsd.jetstream import JetStream

log = get_logger()

# A stream directory holding this file is a restore that never finished (backup.py): removed at start.
PARTIAL_RESTORE = "restoring"
# What a JetStream domain's prefix serves of the API (nats-server's domain mapping table)
_DOMAIN_API = (b"INFO", b"STREAM.>", b"CONSUMER.>", b"DIRECT.>", b"META.>", b"SERVER.>", b"ACCOUNT.>")


class JsAccount:
    """`limits`: nats-server's JetStream limits of the account (account info reports them); None for an
    account without JetStream, whose API answers every request with 10039 and which stores nothing."""

    def __init__(self, js: JetStream, name: str, limits: dict[str, Any] | None, tier: str = "") -> None:
        self.js = js
        self.name = name
        self.limits = limits
        self.tier = tier  # the tier `limits` are of ("R1": an account JWT's tiered limits), "" when flat
        self.enabled = limits is not None
        self.is_system = name == js.server.auth.system_account
        # usage counted against max_memory / max_storage as each message is stored (10002 past them)
        self.limited = limits is not None and (limits["max_memory"] >= 0 or limits["max_storage"] >= 0)
        self.client = InternalClient(js.server, name, "jetstream")
        self.advisories = Advisories(self)
        self.streams: dict[str, Stream] = {}
        self.api_total = 0
        self.api_errors = 0
        self.api_errors_on_publish = 0
        self.dir: Path = js.store_root / name / "streams"
        self.restoring: dict[str, Any] = {}  # stream name -> its restore in progress (backup.Restore)
        self.background: set[asyncio.Task[None]] = set()  # snapshots being sent

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> None:
        from pynatsd.jetstream.api import Api

        self.api = Api(self)
        if not (self.js.domain and self.js.server.cluster is not None):  # in a cluster: the cluster's
            self.client.subscribe(b"$JS.API.>", self.api.handle)
        if self.js.domain:
            self._serve_domain(b"$JS.%s.API." % self.js.domain.encode())
        if self.enabled and self.dir.is_dir():
            for sdir in sorted(self.dir.iterdir()):
                self._load_stream(sdir)
            for stream in self.streams.values():  # every origin is there now
                stream.start_links()

    def _serve_domain(self, prefix: bytes) -> None:
        """Clients that name the domain (from this server or across a leaf node link) use `$JS.<domain>.API`:
        the API's subjects under that prefix, and `$KV.`/`$OBJ.` publishes under it (a key-value put in a
        domain), as nats-server maps them. Nothing else under the prefix is answered (no responders)."""

        def api(subject: bytes, reply: bytes | None, hdrs: bytes | None, payload: bytes) -> None:
            self.api.handle(b"$JS.API." + subject[len(prefix) :], reply, hdrs, payload)

        def store(subject: bytes, reply: bytes | None, hdrs: bytes | None, payload: bytes) -> None:
            if self.client.origin_is_server:
                return  # a delivery or answer of ours, not a client's put: nobody's request to relay
            # Nothing stores it (no such bucket): the requester hears no responders, as from nats-server
            # (whose domain prefix is a subject mapping), not a timeout because this relay received it.
            if not self.client.publish(subject[len(prefix) :], reply, hdrs, payload) and reply:
                self.api._no_responders(subject, reply)

        for suffix in _DOMAIN_API:
            self.client.subscribe(prefix + suffix, api)
        for suffix in (b"$KV.>", b"$OBJ.>"):
            self.client.subscribe(prefix + suffix, store)

    def _load_stream(self, sdir: Path) -> None:
        if (sdir / PARTIAL_RESTORE).exists():  # else its messages would turn up in a stream of that name
            log.warning("JetStream: removing the unfinished restore of '%s > %s'", self.name, sdir.name)
            shutil.rmtree(sdir, ignore_errors=True)
            return
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
        self.api.stop()
        for task in list(self.background):
            task.cancel()
        for restore in list(self.restoring.values()):
            restore.abandon()
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
        check_origins(self, cfg)
        if existing is not None:
            if equivalent(existing.config, cfg):
                return existing
            raise errors.stream_name_exist()
        if cfg["name"] in self.restoring:  # its directory is being restored (nats-server adds the stream as
            # the backup's state arrives; here it joins at the end)
            raise errors.stream_name_exist()
        self.check_new_stream(cfg)
        directory = self.dir / cfg["name"] if cfg["storage"] == "file" else None
        stream = Stream(self, cfg, now_ns(), directory)
        self.admit_stream(stream)
        self.advisories.stream_action(stream.name, "create")
        return stream

    def check_new_stream(self, cfg: dict[str, Any], subjects: bool = True) -> None:
        """The account's and the server's limits, and (`subjects`) the other streams' subjects, on a new
        stream."""
        self._check_account_limits(cfg)
        if subjects:
            self._check_overlap(cfg)
        self._check_limits(cfg)

    def admit_stream(self, stream: Stream) -> None:
        """A new stream (created, or restored from a backup) joins the account and starts taking messages."""
        stream.save_meta()
        self.streams[stream.name] = stream
        stream.start()
        stream.start_links()
        origin_created(self, stream.name)

    def _check_overlap(self, cfg: dict[str, Any], skip: str = "") -> None:
        for other in self.streams.values():
            if other.name == skip:
                continue
            for a in cfg.get("subjects") or ():
                for b in other.config.get("subjects") or ():
                    if overlap(a.encode(), b.encode()):
                        raise errors.subject_overlap()

    def check_stream_bytes(self, cfg: dict[str, Any]) -> None:
        """nats-server's checkStreamCfg on the account's limits: max_bytes required (10113), and within
        the account's largest stream of that storage (10122)."""
        limits = self.limits
        if limits is None:
            return
        if limits["max_bytes_required"] and cfg["max_bytes"] <= 0:
            raise errors._e(400, 10113, "account requires a stream config to have max bytes set")
        memory = cfg["storage"] == "memory"
        largest = limits["memory_max_stream_bytes" if memory else "storage_max_stream_bytes"]
        if largest > 0 and cfg["max_bytes"] > largest:
            raise errors._e(400, 10122, "stream max bytes exceeds account limit max stream bytes")

    def _check_account_limits(self, cfg: dict[str, Any], old: dict[str, Any] | None = None) -> None:
        """nats-server's account limits on a new stream (`old`: the config it updates): max_streams
        (10027), the stream's max_consumers (10026), and the bytes its max_bytes reserves against
        max_memory / max_storage (10028 / 10047), other streams' reservations counted."""
        limits = self.limits
        if limits is None:
            return
        name = cfg["name"]
        if old is None and 0 < limits["max_streams"] <= sum(1 for n in self.streams if n != name):
            raise errors._e(400, 10027, "maximum number of streams reached")
        if 0 < limits["max_consumers"] < cfg["max_consumers"]:
            raise errors._e(400, 10026, "maximum consumers limit reached")
        memory = cfg["storage"] == "memory"
        limit = limits["max_memory" if memory else "max_storage"]
        if limit < 0:
            return
        reserved = self.reserved(cfg["storage"])
        other = self.streams.get(name)
        if other is not None and other.config["max_bytes"] > 0 and other.config["storage"] == cfg["storage"]:
            reserved -= other.config["max_bytes"]  # its own reservation is what `old` (or a repeat) replaces
        add = cfg["max_bytes"]
        if old is not None:  # only what the update adds to its own reservation
            grows = max(add, 0) - max(old["max_bytes"], 0)
            reserved += max(add, 0) - max(grows, 0)
            add = max(grows, 0)
        elif add < 0:
            add = 1
        if reserved > limit or add > limit - reserved:
            if memory:
                raise errors._e(500, 10028, "insufficient memory resources available")
            raise errors._e(500, 10047, "insufficient storage resources available")

    def check_ack_pending(self, raw: dict[str, Any], cfg: dict[str, Any]) -> None:
        """A consumer's max_ack_pending within the account's (10121); unset, the account's when lower
        than the default (nats-server's setConsumerConfigDefaults)."""
        limit = self.limits["max_ack_pending"] if self.limits is not None else -1
        if limit <= 0:
            return
        if cfg.get("max_ack_pending", 0) > limit:
            if raw.get("max_ack_pending"):
                raise errors._e(400, 10121, f"consumer max ack pending exceeds system limit of {limit}")
            if cfg["ack_policy"] != "none":
                cfg["max_ack_pending"] = limit

    def reserved(self, storage: str) -> int:
        """The bytes this account's streams of `storage` reserve (their max_bytes), as account info says."""
        return sum(
            s.config["max_bytes"]
            for s in self.streams.values()
            if s.config["max_bytes"] > 0 and s.config["storage"] == storage
        )

    def check_usage(self, storage: str, size: int) -> None:
        """A message of `size` bytes must not take the account past max_memory / max_storage (10002)."""
        limits = self.limits
        assert limits is not None
        memory = storage == "memory"
        limit = limits["max_memory" if memory else "max_storage"]
        if limit >= 0:
            used = sum(s.store.bytes for s in self.streams.values() if s.config["storage"] == storage)
            if used + size > limit:
                raise errors._e(400, 10002, "resource limits exceeded for account")

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
        check_origins(self, cfg)
        self._check_account_limits(cfg, stream.config)
        self._check_overlap(cfg, skip=stream.name)
        try:
            stream.update(cfg)
        except errors.ApiError as err:
            if err.err_code == 10052:
                raise errors.stream_invalid_config(err.description) from None
            raise
        self.advisories.stream_action(stream.name, "modify")
        return stream

    def delete_stream(self, name: str) -> None:
        stream = self.streams.pop(name, None)
        if stream is None:
            raise errors.stream_not_found()
        for consumer in list(stream.consumers.values()):
            consumer.stop(deleted=True)
        stream.consumers.clear()
        for link in stream.links:
            link.delete_feed()
        stream.stop()
        stream.store.delete()
        if stream.directory is not None:
            shutil.rmtree(stream.directory, ignore_errors=True)
        self.advisories.stream_action(name, "delete")  # after its consumers', as nats-server

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
        account_max = self.limits["max_consumers"] if self.limits is not None else -1
        if max_consumers <= 0 or 0 < account_max < max_consumers:
            max_consumers = account_max  # the account's limit is per stream too (nats-server)
        # A mirror's or source's feed (direct or sourcing) is neither counted nor limited (nats-server).
        limited = sum(
            1 for c in stream.consumers.values() if not (c.config.get("direct") or c.config.get("sourcing"))
        )
        feed = bool(cfg.get("direct") or cfg.get("sourcing"))
        if max_consumers > 0 and limited >= max_consumers and not feed:
            raise errors._e(400, 10026, "maximum consumers limit reached")
        if not name:
            name = random_name()
            while name in stream.consumers:
                name = random_name()
        consumer = Consumer(stream, name, cfg, now_ns())
        stream.consumers[name] = consumer
        consumer.save_now()
        self.advisories.consumer_action(stream.name, name, "create")
        return consumer

    def _update_consumer(self, consumer: Consumer, cfg: dict[str, Any]) -> Consumer:
        old = consumer.config
        # nats-server's checkNewConsumerConfig: its order and words
        for key, what in _NOT_UPDATABLE:
            before, after = old.get(key), cfg.get(key)
            if key == "opt_start_time" and before and after:  # the same instant in any offset is no change
                before, after = parse_rfc3339(before), parse_rfc3339(after)
            if before != after:
                raise errors.consumer_create(f"{what} can not be updated")
        if old.get("deliver_subject") != cfg.get("deliver_subject"):
            if not old.get("deliver_subject"):
                raise errors.consumer_create("can not update pull consumer to push based")
            if not cfg.get("deliver_subject"):
                raise errors.consumer_create("can not update push consumer to pull based")
            if consumer.bound():
                # Someone receives on the deliver subject: a second subscriber may not take the consumer over.
                raise errors._e(400, 10013, "consumer name already in use")
        if old.get("max_waiting") != cfg.get("max_waiting"):
            raise errors.consumer_create("max waiting can not be updated")
        threshold_changed = old.get("inactive_threshold") != cfg.get("inactive_threshold")
        consumer.reconfigure(cfg)
        if threshold_changed:
            consumer.watch_inactivity()
        consumer.on_removed()
        consumer.save_now()
        consumer.kick()
        return consumer

    def delete_consumer(self, stream: Stream, name: str) -> None:
        consumer = stream.consumers.pop(name, None)
        if consumer is None:
            raise errors.consumer_not_found()
        consumer.stop(deleted=True)
        if stream.config["retention"] == "interest":
            # Messages only this consumer still held may go now (a work queue keeps its messages for the
            # next consumer, as nats-server does).
            stream.on_released(consumer.asflr, stream.store.last_seq + 1)

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
    ("direct", "direct"),
    ("sourcing", "sourcing"),
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
