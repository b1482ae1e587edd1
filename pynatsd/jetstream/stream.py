"""A stream: its configuration (nats-server's defaults and checks), message capture and limits."""

from __future__ import annotations

import base64
import heapq
import json
import re
import sys
from collections import deque
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pynatsd import NATS_COMPAT_VERSION
from pynatsd.base.formats import go_duration
from pynatsd.base.logging import get_logger
from pynatsd.broker.delivery import Subscription
from pynatsd.jetstream import counters, errors, scheduling
from pynatsd.jetstream.batching import AtomicBatches
from pynatsd.jetstream.errors import ApiError
from pynatsd.jetstream.fast_batching import SUFFIX as FAST_BATCH_SUFFIX
from pynatsd.jetstream.fast_batching import FastBatches, imported_reply
from pynatsd.jetstream.sourcing import SourceLink, links_of, normalize_sourcing, save_positions
from pynatsd.jetstream.store import FileStore, MemoryStore, SeqList, Store, StoredMsg
from pynatsd.jetstream.store.file import KV_SEGMENT_BYTES
from pynatsd.jetstream.transform import SubjectTransform, TransformError, validate_mapping
from pynatsd.jetstream.util import (
    filters_regex,
    get_header,
    now_ns,
    parse_msg_ttl,
    parse_rfc3339,
    rfc3339,
    rfc3339_bytes,
)
from pynatsd.protocol.subjects import (
    has_wildcard,
    is_literal_subject,
    is_valid_subject,
    matches,
    overlap,
    subset,
)

log = get_logger()

# nats-server's defaults for a stream's ingest buffer (streamDefaultMaxQueueMsgs/Bytes).
STREAM_MAX_BUFFERED_MSGS = 100_000
STREAM_MAX_BUFFERED_SIZE = 128 * 1024 * 1024
TOO_MANY_REQUESTS = b"NATS/1.0 429 Too Many Requests\r\n\r\n"

if TYPE_CHECKING:
    from pynatsd.jetstream.account import JsAccount
    from pynatsd.jetstream.consumer import Consumer

API_LEVEL = 5  # nats-server 2.15.1's JSApiLevel: what `_nats.level`, `$JS.API.INFO` and /jsz report
DEFAULT_DUPLICATE_WINDOW = 120_000_000_000  # 2 minutes, in nanoseconds
MAX_NAME_LEN = 255  # nats-server's JSMaxNameLen (streams and consumers)
MAX_DESCRIPTION_LEN = 4096
# A batched direct get's headers for a message without its own (values: subject, sequence, time, pending,
# previous sequence); nats-server appends the same lines to a message's own headers.
_DIRECT_BATCH_HEADERS = (
    b"NATS/1.0\r\nNats-Stream: <stream>\r\nNats-Subject: %s\r\nNats-Sequence: %d\r\n"
    b"Nats-Time-Stamp: %s\r\nNats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\n\r\n"
)
_NO_RESULTS = b"NATS/1.0 404 No Results\r\n\r\n"
_MULTI_LAST_EOB = (
    b"NATS/1.0 204 EOB\r\nNats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\nNats-UpTo-Sequence: %d\r\n\r\n"
)
_MULTI_LAST_MAX = 1024  # nats-server's most messages in one multi_last answer
_TOO_MANY_RESULTS = b"NATS/1.0 413 Too Many Results\r\n\r\n"
_NAME_BAD = re.compile(r"[.*>\s\x00]")

STREAM_DEFAULTS: dict[str, Any] = {
    "retention": "limits",
    "max_consumers": -1,
    "max_msgs": -1,
    "max_bytes": -1,
    "max_age": 0,
    "max_msgs_per_subject": -1,
    "max_msg_size": -1,
    "discard": "old",
    "storage": "file",
    "num_replicas": 1,
    "duplicate_window": DEFAULT_DUPLICATE_WINDOW,
    "compression": "none",
    "allow_direct": False,
    "mirror_direct": False,
    "sealed": False,
    "deny_delete": False,
    "deny_purge": False,
    "allow_rollup_hdrs": False,
    "consumer_limits": {},
    "allow_msg_ttl": False,
}
# The order nats-server writes a stream config in (fields it omits when empty come and go in place).
_FIELD_ORDER = [
    "name", "description", "subjects", "retention", "max_consumers", "max_msgs", "max_bytes", "max_age",
    "max_msgs_per_subject", "max_msg_size", "discard", "storage", "num_replicas", "duplicate_window",
    "placement", "mirror", "sources", "compression", "subject_transform", "republish", "allow_direct",
    "mirror_direct", "sealed", "deny_delete", "deny_purge", "allow_rollup_hdrs", "discard_new_per_subject",
    "consumer_limits", "allow_msg_ttl", "subject_delete_marker_ttl", "allow_msg_counter",
    "allow_atomic", "allow_msg_schedules", "allow_batched", "metadata",
]  # fmt: skip
_ENUMS = {
    "retention": ("limits", "interest", "workqueue"),
    "discard": ("old", "new"),
    "storage": ("file", "memory"),
    "compression": ("none", "s2"),
}


def normalize_config(raw: dict[str, Any], subject_name: str | None, create: bool = False) -> dict[str, Any]:
    """nats-server's defaults and checks for a requested stream config (`create`: the checks of a create
    request too); raises ApiError."""
    if not isinstance(raw, dict):
        raise errors.bad_request()
    name = raw.get("name") or ""
    if subject_name is not None and name != subject_name:
        raise errors.stream_mismatch()
    if not isinstance(name, str) or not name:
        raise errors.stream_invalid_config("stream name is required")
    if "/" in name or "\\" in name:
        raise errors._e(400, 10128, "Stream name can not contain path separators")
    if _NAME_BAD.search(name):
        raise errors.stream_invalid_config("stream name can not contain whitespace, '.', '*', '>'")
    # nats-server's limits, in bytes: a longer name could not be its directory's name (never acknowledged).
    if len(name.encode()) > MAX_NAME_LEN:
        raise errors.stream_invalid_config(f"stream name is too long, maximum allowed is {MAX_NAME_LEN}")
    if len(str(raw.get("description") or "").encode()) > MAX_DESCRIPTION_LEN:
        raise errors.stream_invalid_config(
            f"stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}"
        )
    if create and raw.get("sealed"):
        raise errors.stream_invalid_config("stream configuration for create can not be sealed")
    if create and raw.get("mirror_direct") and not raw.get("mirror"):
        raise errors.stream_invalid_config("stream has no mirror but does have mirror direct")
    cfg: dict[str, Any] = dict(STREAM_DEFAULTS)
    for key, value in raw.items():
        if value is None:
            continue
        if key not in STREAM_DEFAULTS and key not in ("name", "subjects") and value in (False, "", 0, [], {}):
            continue  # nats-server omits empty optional fields (omitempty)
        cfg[key] = value
    for key, allowed in _ENUMS.items():
        if cfg[key] not in allowed:  # Go's words: the JSON value, quoted with %q
            raise errors.invalid_json(f"can not unmarshal {json.dumps(json.dumps(cfg[key]))}")
    for key in ("max_msgs", "max_bytes", "max_msgs_per_subject", "max_msg_size", "max_consumers"):
        if not isinstance(cfg[key], int) or isinstance(cfg[key], bool):
            raise errors.invalid_json(f"{key} must be an integer")
        if cfg[key] == 0 or cfg[key] < -1:
            cfg[key] = -1
    first_seq = raw.get("first_seq", 0)  # as requested: {} or [] are errors, not omitted empties
    if first_seq is None:
        first_seq = 0
    if not isinstance(first_seq, int) or isinstance(first_seq, bool) or not 0 <= first_seq < 1 << 64:
        raise errors.invalid_json(
            f"json: cannot unmarshal {_go_json_kind(first_seq)} into Go struct field "
            "StreamConfigRequest.first_seq of type uint64"
        )
    if cfg["num_replicas"] == 0:
        cfg["num_replicas"] = 1
    if cfg["num_replicas"] > 5:  # nats-server's StreamMaxReplicas, checked before the sign
        raise errors.stream_invalid_config("maximum replicas is 5")
    if cfg["num_replicas"] < 0:
        raise errors._e(400, 10133, "replicas count cannot be negative")
    if cfg["num_replicas"] > 1:
        raise errors.replicas_not_supported()
    if cfg["max_age"] < 0:
        raise errors.stream_invalid_config("max age can not be negative")
    if 0 < cfg["max_age"] < 100_000_000:
        raise errors.stream_invalid_config("max age needs to be >= 100ms")
    if raw.get("mirror") or raw.get("sources"):  # no default window: copies are not deduplicated
        if not raw.get("duplicate_window"):
            del cfg["duplicate_window"]
    elif not raw.get("duplicate_window"):
        cfg["duplicate_window"] = DEFAULT_DUPLICATE_WINDOW
        if cfg["max_age"] and cfg["max_age"] < DEFAULT_DUPLICATE_WINDOW:
            cfg["duplicate_window"] = cfg["max_age"]
    if cfg.get("duplicate_window", 0) < 0:
        raise errors.stream_invalid_config("duplicates window can not be negative")
    if cfg["max_age"] and cfg.get("duplicate_window", 0) > cfg["max_age"]:
        raise errors.stream_invalid_config("duplicates window can not be larger then max age")
    if 0 < cfg.get("duplicate_window", 0) < 100_000_000:
        raise errors.stream_invalid_config("duplicates window needs to be >= 100ms")
    if cfg["deny_purge"] and cfg["allow_rollup_hdrs"]:
        raise errors.stream_invalid_config("roll-ups require the purge permission")
    counters.check_config(cfg)
    if cfg.get("discard_new_per_subject"):
        if cfg["discard"] != "new":
            raise errors.stream_invalid_config(
                "discard new per subject requires discard new policy to be set"
            )
        if cfg["max_msgs_per_subject"] <= 0:
            raise errors.stream_invalid_config("discard new per subject requires max msgs per subject > 0")
    marker_ttl = cfg.get("subject_delete_marker_ttl") or 0
    if marker_ttl > 0:
        if marker_ttl < 1_000_000_000:
            raise errors.stream_invalid_config("subject delete marker TTL must be at least 1 second")
        # What markers need, switched on as nats-server does (pedantic, which would refuse, is refused).
        cfg["allow_msg_ttl"] = True
        if not cfg["allow_rollup_hdrs"]:
            cfg["allow_rollup_hdrs"], cfg["deny_purge"] = True, False
    elif marker_ttl < 0:
        raise errors.stream_invalid_config("subject delete marker TTL must not be negative")
    scheduling.check_config(cfg)
    normalize_sourcing(cfg, cfg.get("first_seq") or 0, marker_ttl)
    sourcing = bool(cfg.get("mirror") or cfg.get("sources"))
    subjects = cfg.get("subjects") or []
    if not subjects and not sourcing:  # a mirror or a stream with sources has none unless given
        subjects = [name]
    if not isinstance(subjects, list) or not all(isinstance(s, str) and s for s in subjects):
        raise errors.stream_invalid_config("invalid subject")
    _check_subjects(subjects, bool(cfg.get("no_ack")))
    if subjects:
        cfg["subjects"] = subjects
    else:
        cfg.pop("subjects", None)
    _check_transforms(cfg)
    meta = dict(cfg.get("metadata") or {})
    # nats-server's API level the config needs: 1 for per-message TTLs (2.11), which delete markers switch on;
    # 2 for counters, atomic batches and message schedules (2.12); 4 for fast batches (2.14).
    v2 = cfg.get("allow_msg_counter") or cfg.get("allow_atomic") or cfg.get("allow_msg_schedules")
    level = "4" if cfg.get("allow_batched") else "2" if v2 else "1" if cfg.get("allow_msg_ttl") else "0"
    meta.update({"_nats.req.level": level})
    cfg["metadata"] = meta
    return {k: cfg[k] for k in _FIELD_ORDER if k in cfg} | {
        k: v for k, v in cfg.items() if k not in _FIELD_ORDER
    }


def _check_transforms(cfg: dict[str, Any]) -> None:
    """nats-server's checks of `subject_transform` and `republish`, in its order and words; both written
    back as it writes them (republish's empty source is `>`; `>` to `>` after a transform of the only
    subject republishes the transformed subjects)."""
    transform = cfg.get("subject_transform")
    if transform is not None:
        src, dest = transform.get("src") or "", transform.get("dest") or ""
        if src and not is_valid_subject(src.encode()):
            raise errors._e(400, 10155, f"stream transform source: invalid subject {src}")
        try:
            validate_mapping(src.encode(), dest.encode())
        except TransformError as exc:
            raise errors._e(400, 10156, f"stream transform: {exc}") from None
        cfg["subject_transform"] = {"src": src, "dest": dest}
    republish = cfg.get("republish")
    if republish is not None:
        src, dest = republish.get("src") or ">", republish.get("dest") or ""
        subjects: list[str] = cfg.get("subjects") or []
        if (
            src == dest == ">"
            and transform is not None
            and len(subjects) == 1
            and cfg["subject_transform"]["src"] == subjects[0]
        ):
            src = dest = cfg["subject_transform"]["dest"]
        if dest and any(overlap(dest.encode(), s.encode()) for s in subjects):
            raise errors.stream_invalid_config("stream configuration for republish destination forms a cycle")
        try:
            SubjectTransform(src.encode(), dest.encode()) if dest else None
        except TransformError:
            raise errors.stream_invalid_config(
                f"stream configuration for republish with transform from '{src}' to '{dest}' not valid"
            ) from None
        cfg["republish"] = {"src": src, "dest": dest} | (
            {"headers_only": True} if republish.get("headers_only") else {}
        )


def _go_json_kind(value: Any) -> str:
    """How Go's encoding/json names a JSON value it cannot unmarshal (numbers with their text)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return f"number {json.dumps(value)}"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _check_subjects(subjects: list[str], no_ack: bool) -> None:
    """nats-server's subject rules for a stream (its messages, in its order)."""
    seen: set[str] = set()
    for i, subj in enumerate(subjects):
        sb = subj.encode()
        if not is_valid_subject(sb):
            raise errors.stream_invalid_config("invalid subject")
        if subj in seen:
            raise errors.stream_invalid_config("duplicate subjects detected")
        if subj == ">" and not no_ack:
            raise errors.stream_invalid_config("capturing all subjects requires no-ack to be true")
        if not no_ack:
            for space in (b"$JS.>", b"$JSC.>", b"$NRG.>"):
                if overlap(sb, space) and not subset(sb, b"$JS.EVENT.>"):
                    raise errors.stream_invalid_config(
                        "subjects that overlap with jetstream api require no-ack to be true"
                    )
            if overlap(sb, b"$SYS.>") and not subset(sb, b"$SYS.ACCOUNT.>"):
                raise errors.stream_invalid_config(
                    "subjects that overlap with system api require no-ack to be true"
                )
        for other in subjects[i + 1 :]:
            if overlap(other.encode(), sb):
                raise errors.stream_invalid_config(f'subject "{subj}" overlaps with "{other}"')
        seen.add(subj)


def with_server_metadata(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config as info and create responses show it: the server's level and version in the metadata."""
    out = dict(cfg)
    meta = dict(cfg.get("metadata") or {})
    meta.update({"_nats.level": str(API_LEVEL), "_nats.ver": NATS_COMPAT_VERSION})
    out["metadata"] = dict(sorted(meta.items()))
    return out


def equivalent(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Same config apart from server-set metadata (a repeated create with it is idempotent)."""

    def strip(c: dict[str, Any]) -> dict[str, Any]:
        c = dict(c)
        c["metadata"] = {k: v for k, v in (c.get("metadata") or {}).items() if not k.startswith("_nats.")}
        return c

    return strip(a) == strip(b)


class Stream:
    """One stream of one account: subscribes to its subjects, stores, enforces limits, feeds consumers."""

    def __init__(
        self, account: JsAccount, config: dict[str, Any], created: int, directory: Path | None
    ) -> None:
        self.account = account
        self._js = account.js  # read on every publish
        self.config = config
        self.name: str = config["name"]
        self.created = created
        self.directory = directory
        self.store: Store
        if config["storage"] == "memory" or directory is None:
            self.store = MemoryStore()
        else:
            # A KV-like stream (limited per subject only) gets nats-server's smaller KV blocks: an overwritten
            # key's old values are compacted away sooner, and a compaction rewrites less.
            per_subject_only = config["max_bytes"] <= 0 and config["max_msgs"] <= 0
            kv_like = config["max_msgs_per_subject"] > 0 and per_subject_only
            self.store = FileStore(
                directory / "msgs",
                account.js.sync_interval,
                account.js.sync_always,
                KV_SEGMENT_BYTES if kv_like else 0,
            )
        self.consumers: dict[str, Consumer] = {}
        self.restored = False  # made by a restore: it shows first_seq 1 even empty, as nats-server's does
        self._subs: list[Subscription] = []
        self.links: list[SourceLink] = []  # its mirror or sources (sourcing.py), copying into it
        self.followers: list[SourceLink] = []  # the mirrors and sources copying from it, told of each message
        # Nats-Msg-Id -> sequence, within the duplicate window; the same ids oldest first, with their
        # sequences and timestamps (ns) for expiry (three deques: no tuple per message).
        self._dedupe: dict[bytes, int] = {}
        self._dedupe_ids: deque[bytes] = deque()
        self._dedupe_seqs: deque[int] = deque()
        self._dedupe_ts: deque[int] = deque()
        self._last_msg_id = b""
        self._answers: list[tuple[bytes, int, bytes]] = []  # PubAcks waiting for the store's write
        self._commit_due = False  # a `_commit` is scheduled (for messages stored without a reply)
        self._counter_total = b""  # a counter stream's last stored total, for its PubAck
        self._batches: AtomicBatches | None = None  # its open atomic batches (batching.py), once one came
        self._fast_batches: FastBatches | None = None  # its open fast batches (fast_batching.py), likewise
        self._schedules: scheduling.MsgSchedules | None = None  # with allow_msg_schedules (scheduling.py)
        # The ingest buffer: what this turn of the loop brought in, against the configured limits.
        js_config = account.js.config
        self._buffer_msgs_limit = js_config.max_buffered_msgs or STREAM_MAX_BUFFERED_MSGS
        self._buffer_size_limit = js_config.max_buffered_size or STREAM_MAX_BUFFERED_SIZE
        self._buffer_limited = bool(js_config.max_buffered_msgs or js_config.max_buffered_size)
        self._buffered_msgs = 0
        self._buffered_size = 0
        self._buffer_turn = False  # this turn's counts are in use (a call_soon empties them)
        self._buffer_warned = False
        self._too_many_requests = json.dumps(
            {"error": errors.too_many_requests().json(), "stream": self.name, "seq": 0}, separators=(",", ":")
        ).encode()
        self._age_timer: Any = None
        # Per-message TTLs: (expiry in ns, sequence), soonest first; the messages max_age must not remove.
        self._ttl_heap: list[tuple[int, int]] = []
        self._ttl_timer: Any = None
        self._ttl_timer_at = 0
        self._ttl_never: set[int] = set()
        self._name_bytes = self.name.encode()
        self._dg_format = _DIRECT_BATCH_HEADERS.replace(b"<stream>", self._name_bytes.replace(b"%", b"%%"))
        domain = account.js.domain
        self._ack_head = b'{"stream":%s,%s' % (
            json.dumps(self.name).encode(),
            b'"domain":%s,' % json.dumps(domain).encode() if domain else b"",
        )
        first_seq = config.get("first_seq") or 0
        if first_seq > 1 and self.store.last_seq == 0:  # a new stream (or one never written to) starts there
            self.store.skip_to(first_seq - 1)
        self._derive()
        self._rebuild_dedupe()
        self._rebuild_ttls()

    def _derive(self) -> None:
        """What each publish asks of the config, worked out once per config (the publish path is hot)."""
        cfg = self.config
        self._sealed = bool(cfg["sealed"])
        self._max_msg_size = cfg["max_msg_size"] if cfg["max_msg_size"] >= 0 else sys.maxsize
        self._discard_new = cfg["discard"] == "new"
        self._interest_only = cfg["retention"] == "interest"
        self._limits_retention = cfg["retention"] == "limits"
        self._no_ack = bool(cfg.get("no_ack"))
        self._has_limits = cfg["max_msgs_per_subject"] > 0 or cfg["max_msgs"] > 0 or cfg["max_bytes"] > 0
        self._max_age = cfg["max_age"]
        self._dedupe_window: int = cfg.get("duplicate_window", 0)
        # No message id can leave the duplicate window before this time (ns): until then no expiry pass.
        self._dedupe_check_at = 0
        self._allow_ttl = bool(cfg.get("allow_msg_ttl"))
        self._rollup_purge = bool(cfg["allow_rollup_hdrs"]) and not cfg["deny_purge"]
        self._counter = bool(cfg.get("allow_msg_counter"))
        marker_ttl: int = cfg.get("subject_delete_marker_ttl") or 0
        self._marker_ttl_s = marker_ttl // 1_000_000_000
        self._marker_hdrs = (
            b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: %s\r\nNats-Rollup: sub\r\n\r\n"
            % go_duration(self._marker_ttl_s).encode()
        )
        # A TTL shorter than the markers' is raised to theirs (a marker could be missed), unless a subject
        # only ever holds one message.
        self._min_ttl = self._marker_ttl_s if cfg["max_msgs_per_subject"] != 1 else 0
        transform = cfg.get("subject_transform")
        self._input_transform: SubjectTransform | None = (
            SubjectTransform(transform["src"].encode(), transform["dest"].encode())
            if transform and transform["dest"]
            else None
        )
        republish = cfg.get("republish")
        self._republish: SubjectTransform | None = (
            SubjectTransform(republish["src"].encode(), republish["dest"].encode())
            if republish and republish["dest"]
            else None
        )
        self._republish_headers_only = bool(republish and republish.get("headers_only"))
        if cfg.get("allow_msg_schedules") and self._schedules is None:  # (it cannot be switched off)
            self._schedules = scheduling.MsgSchedules(self)
            self._schedules.rebuild()

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> None:
        client = self.account.client
        for subject in self.config.get("subjects") or ():
            self._subs.append(client.subscribe(subject.encode(), self._on_publish))
        self._schedule_age_check()
        self._schedule_ttl()
        if self._schedules is not None:
            self._schedules.arm()

    def start_links(self, updated: bool = False) -> None:
        """Start copying from its mirror or sources (once every stream of the account is there)."""
        self.links = links_of(self)
        for link in self.links:
            link.start(updated)

    def public_consumers(self) -> list[str]:
        """The names of its consumers but the direct ones (another server's mirrors' and sources' feeds),
        which nats-server neither lists nor counts."""
        return [name for name, c in self.consumers.items() if not c.config.get("direct")]

    def stop_links(self) -> None:
        save_positions(self)
        for link in self.links:
            link.stop()
        self.links = []

    def stop(self) -> None:
        for sub in self._subs:
            self.account.client.unsubscribe(sub)
        self._subs.clear()
        self.stop_links()
        if self._batches is not None:
            self._batches.drop_all()
        if self._fast_batches is not None:
            self._fast_batches.drop_all()
        if self._age_timer is not None:
            self._age_timer.cancel()
            self._age_timer = None
        if self._ttl_timer is not None:
            self._ttl_timer.cancel()
            self._ttl_timer = None
        if self._schedules is not None:
            self._schedules.stop()
        for consumer in list(self.consumers.values()):
            consumer.stop()
        self.store.close()

    def save_meta(self) -> None:
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / "meta.json.tmp"
        tmp.write_text(json.dumps({"config": self.config, "created": self.created}))
        tmp.replace(self.directory / "meta.json")

    def update(self, new: dict[str, Any]) -> None:
        old = self.config
        if new["storage"] != old["storage"]:
            raise errors.stream_invalid_config("stream configuration update can not change storage type")
        if new["retention"] != old["retention"] and "workqueue" in (new["retention"], old["retention"]):
            raise errors.stream_invalid_config(
                "stream configuration update can not change retention policy to/from workqueue"
            )
        if old["sealed"] and not new["sealed"]:
            raise errors.stream_invalid_config("stream configuration update can not unseal a sealed stream")
        if old["deny_delete"] and not new["deny_delete"]:
            raise errors.stream_invalid_config(
                "stream configuration update can not cancel deny message deletes"
            )
        if old["deny_purge"] and not new["deny_purge"]:
            raise errors.stream_invalid_config("stream configuration update can not cancel deny purge")
        if old.get("allow_msg_ttl") and not new.get("allow_msg_ttl"):
            raise errors.stream_invalid_config("message TTL status can not be disabled")
        if bool(old.get("allow_msg_counter")) != bool(new.get("allow_msg_counter")):
            raise errors.stream_invalid_config(
                "stream configuration update can not change message counter setting"
            )
        if old.get("allow_msg_schedules") and not new.get("allow_msg_schedules"):
            raise errors.stream_invalid_config("message schedules can not be disabled")
        if new.get("mirror") and new["mirror"] != old.get("mirror"):  # removing it promotes the mirror
            raise errors._e(400, 10055, "stream mirror configuration can not be updated")
        if new["sealed"]:  # what a sealed stream implies, as nats-server writes it into the config
            new.update(max_age=0, discard="new", deny_delete=True, deny_purge=True, allow_rollup_hdrs=False)
        for subject in self._subs:
            self.account.client.unsubscribe(subject)
        self._subs.clear()
        relink = new.get("mirror") != old.get("mirror") or new.get("sources") != old.get("sources")
        if not new.get("allow_atomic") and self._batches is not None:  # their open batches go
            self._batches.drop_all()
        if not new.get("allow_batched") and self._fast_batches is not None:
            self._fast_batches.drop_all()
        self.config = new
        self._derive()
        self.start()
        self.save_meta()
        self._enforce_limits()
        if relink:
            self.stop_links()
            self.start_links(True)

    # -- info -----------------------------------------------------------------------------------------
    def state(self, subjects_filter: str | None = None, deleted_details: bool = False) -> dict[str, Any]:
        st = self.store
        # An empty new stream shows 0, unless configured to start somewhere (even at 1).
        started = st.last_seq or st.first_seq > 1 or self.config.get("first_seq") or self.restored
        state: dict[str, Any] = {
            "messages": st.msgs,
            "bytes": st.bytes,
            "first_seq": st.first_seq if started else 0,
            "first_ts": rfc3339(st.first_ts()),
            "last_seq": st.last_seq,
            "last_ts": rfc3339(st.last_ts),
        }
        if st.msgs == 0:
            state["first_ts"] = "0001-01-01T00:00:00Z"
        span = st.last_seq - st.first_seq + 1 if st.msgs else 0
        if span > st.msgs:
            state["num_deleted"] = span - st.msgs
            if deleted_details:
                state["deleted"] = [s for s in range(st.first_seq, st.last_seq + 1) if s not in st]
        if st.subjects:
            state["num_subjects"] = len(st.subjects)
        if subjects_filter:
            f = subjects_filter.encode()
            counts = {s.decode(): len(v) for s, v in st.subjects.items() if matches(f, s)}
            if counts:
                state["subjects"] = counts
        # nats-server counts the consumers of its mirrors and sources on an interest or work queue stream
        followers = len(self.followers) if not self._limits_retention else 0
        state["consumer_count"] = len(self.public_consumers()) + followers
        return state

    def subject_counts(self, subjects_filter: str) -> dict[str, int]:
        """Messages per stored subject matching the filter."""
        f = subjects_filter.encode()
        match = filters_regex([f]).fullmatch
        return {s.decode(): len(v) for s, v in self.store.subjects.items() if match(s)}

    def info(self, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {
            "config": with_server_metadata(self.config),
            "created": rfc3339(self.created),
            "state": self.state(**kwargs),
        }
        if self.config.get("mirror"):
            out["mirror"] = self.links[0].info() if self.links else {"name": self.config["mirror"]["name"]}
        elif self.config.get("sources"):
            out["sources"] = [link.info() for link in self.links]
        return out

    # -- publish --------------------------------------------------------------------------------------
    def _on_publish(self, subject: bytes, reply: bytes | None, hdrs: bytes | None, payload: bytes) -> None:
        if self._buffer_limited and self._over_buffer(len(subject) + len(hdrs or b"") + len(payload)):
            if reply:
                self.account.client.publish(reply, None, TOO_MANY_REQUESTS, self._too_many_requests)
            return
        if reply:  # a fast batch is named in the reply subject (across a service import: in the request info)
            named_by = reply if reply.endswith(FAST_BATCH_SUFFIX) and len(reply) > 4 else None
            if named_by is None and hdrs and reply.startswith(b"_R_."):
                named_by = imported_reply(hdrs)
            if named_by is not None:
                if self._fast_batches is None:
                    self._fast_batches = FastBatches(self, API_LEVEL)
                self._fast_batches.publish(subject, reply, hdrs, payload, named_by)
                return
        if hdrs and hdrs.find(b"\r\nNats-Batch-Id:") >= 0:
            batch_id = get_header(hdrs, b"Nats-Batch-Id")
            if batch_id:
                if self._batches is None:
                    self._batches = AtomicBatches(self)
                self._batches.publish(batch_id, subject, reply, hdrs, payload)
                return
        try:
            seq, duplicate = self.process(subject, hdrs, payload)
        except OSError as exc:  # the disk said no (full, gone): the publisher hears it, as from nats-server
            log.error("JetStream stream %s: storing failed: %s", self.name, exc)
            self._nack(reply, errors.store_failed(str(exc)))
            return
        except ApiError as err:
            self._nack(reply, err)
            return
        except Exception as exc:  # a bug must not leave the publisher waiting for its PubAck
            log.exception("JetStream stream %s: storing failed", self.name)
            self._nack(reply, errors.general(f"{type(exc).__name__}: {exc}"))
            return
        if reply and not self._no_ack:
            # Written as nats-server writes it (by hand, hence the space in `"duplicate": true`).
            ack = b'%s"seq":%d%s}' % (self._ack_head, seq, b',"duplicate": true' if duplicate else b"")
            if self._counter and not duplicate:
                ack = b'%s"seq":%d,"val":"%s"}' % (self._ack_head, seq, self._counter_total)
            self._answer(reply, seq, ack)
        else:
            # Nobody waits for this one (an MQTT QoS 1 message, a reply-less publish): written at the end
            # of this turn all the same, not left buffered until a later publish with a reply (a kill -9
            # lost it).
            self._commit_soon()

    def _commit_soon(self) -> None:
        """Have what the store buffered written at the end of this turn, though no answer waits for it."""
        if not self._commit_due and not self._answers and self.store.pending_writes:
            self._commit_due = True
            self.account.js.loop.call_soon(self._commit)

    def reply_after_writes(self, reply: bytes) -> None:
        """An empty reply (an AckSync's) that must not go out before what this turn buffered is written: a
        removal it confirms then survives a kill -9."""
        self._answer(reply, 0, b"")

    def _over_buffer(self, size: int) -> bool:
        """True (the message is dropped) when it would take this turn's ingest past a configured limit: the
        defaults are never reached in one turn, so they cost nothing unless the config sets one."""
        if not self._buffer_turn:
            self._buffer_turn = True
            self._js.loop.call_soon(self._empty_buffer)
        if (
            self._buffered_msgs >= self._buffer_msgs_limit
            or self._buffered_size + size > self._buffer_size_limit
        ):
            if not self._buffer_warned:  # one warning a turn
                self._buffer_warned = True
                log.warning("Dropping messages due to excessive stream ingest rate on '%s'", self.name)
            return True
        self._buffered_msgs += 1
        self._buffered_size += size
        return False

    def _empty_buffer(self) -> None:
        self._buffered_msgs = self._buffered_size = 0
        self._buffer_turn = self._buffer_warned = False

    def _answer(self, reply: bytes, seq: int, body: bytes) -> None:
        """Send a publish's answer, after the store has written what this turn of the loop appended: the
        store writes a turn's messages at once, and nobody may hear of a message before it is written."""
        answers = self._answers
        if not answers:
            if not self.store.pending_writes:
                self.account.client.publish(reply, None, None, body)
                return
            self.account.js.loop.call_soon(self._commit)
        answers.append((reply, seq, body))

    def _commit(self) -> None:
        self._commit_due = False
        answers, self._answers = self._answers, []
        st = self.store
        try:
            st.commit()
        except OSError as exc:  # the disk said no (full, gone): those publishers hear it, as from nats-server
            log.error("JetStream stream %s: storing failed: %s", self.name, exc)
        failed = st.failed
        if failed:
            st.failed = set()
            for msg_id in [k for k, seq in self._dedupe.items() if seq in failed]:
                del self._dedupe[msg_id]
            err = errors.store_failed("write failed")
        publish = self.account.client.publish
        for reply, seq, body in answers:
            if seq in failed:
                self._nack(reply, err)
            else:
                publish(reply, None, None, body)

    def _nack(self, reply: bytes | None, err: ApiError) -> None:
        self.account.api_errors_on_publish += 1
        if reply and not self._no_ack:
            body = json.dumps({"error": err.json(), "stream": self.name, "seq": 0}, separators=(",", ":"))
            self._answer(reply, 0, body.encode())

    def process(
        self, subject: bytes, hdrs: bytes | None, payload: bytes, sourced: bool = False
    ) -> tuple[int, bool]:
        """Store one published message after nats-server's checks (`sourced`: a source's copy, checked by
        its origin already); returns (sequence, duplicate)."""
        if self._sealed:
            raise errors.stream_sealed()
        if self._input_transform is not None:  # stored (and all the rest) under its transformed subject
            subject = self._input_transform.match(subject) or subject
        cfg = self.config
        st = self.store
        js = self._js
        size = len(payload) + (len(hdrs) if hdrs else 0)
        if size > self._max_msg_size or size > js.max_payload:
            raise errors.message_too_big()
        now = now_ns()
        msg_id = b""
        rollup = b""
        ttl = 0  # seconds; -1: never expires
        ttl_invalid = False
        incr: bytes | None = None
        if hdrs:
            if hdrs.find(b"\r\nNats-Incr:") >= 0:  # inline: a call into counters costs every message
                incr = counters.incr_of(hdrs, payload, self._counter, sourced)
            # Most messages carry an id at most: look for the rarer headers only when their prefix is there
            # (with find: bytes' `in` first tries its operand as an int, and builds a TypeError to drop).
            expects = hdrs.find(b"\r\nNats-Expected-") >= 0
            if expects:
                expected = get_header(hdrs, b"Nats-Expected-Stream")
                if expected is not None and expected.decode() != self.name:
                    raise errors.stream_not_match()
            ttl_raw = get_header(hdrs, b"Nats-TTL")
            if ttl_raw:
                try:
                    ttl = parse_msg_ttl(ttl_raw)
                except ValueError:
                    ttl_invalid = True  # refused after the other checks, as nats-server does
                if ttl and not self._allow_ttl and not sourced:
                    raise errors.message_ttl_disabled()
            if not sourced and hdrs.find(b"\r\nNats-Schedule") >= 0:  # also -Scheduler, -Schedule-*
                hdrs = scheduling.check_publish(self, subject, hdrs)
            if not sourced and hdrs.find(b"\r\nNats-Stream-Source:") >= 0:
                raise errors._e(400, 10227, "message stream source header is not allowed")
            mid = get_header(hdrs, b"Nats-Msg-Id")
            if mid:
                msg_id = mid
                if now >= self._dedupe_check_at:
                    self._expire_dedupe(now)
                seen = self._dedupe.get(msg_id)
                if seen is not None:
                    return seen, True
            if expects:
                self._check_expected(subject, hdrs)
            roll = get_header(hdrs, b"Nats-Rollup") if hdrs.find(b"\r\nNats-Rollup:") >= 0 else None
            if roll is not None:
                if not cfg["allow_rollup_hdrs"]:
                    raise errors.rollup_failed("rollup not permitted")
                if roll not in (b"sub", b"all"):
                    raise errors.rollup_failed(
                        f"rollup value invalid: {json.dumps(roll.decode(errors='replace'))}"
                    )
                rollup = roll
        if self._counter:
            if incr is None:
                raise counters.incr_missing()
            last_seq = st.last_for(subject)
            last = st.load(last_seq) if last_seq else None
            hdrs, payload, self._counter_total = counters.apply(
                (last.hdrs, last.data) if last is not None else None, subject, hdrs or b"", payload, incr
            )
            size = len(payload) + len(hdrs)
            if size > self._max_msg_size or size > js.max_payload:
                raise errors.message_too_big()
        if self._discard_new:
            # nats-server's order: a subject at its own limit replaces its oldest message, so only the per
            # subject rule (unless a rollup) refuses it, or a larger message than the one it replaces.
            per = cfg["max_msgs_per_subject"]
            of_subject = st.subjects.get(subject) if per > 0 else None
            at_limit = of_subject is not None and len(of_subject) >= per
            if at_limit and cfg.get("discard_new_per_subject") and not rollup:
                raise errors.store_failed("maximum messages per subject exceeded")
            if cfg["max_msgs"] > 0 and st.msgs >= cfg["max_msgs"] and not at_limit:
                raise errors.store_failed("maximum messages exceeded")
            if cfg["max_bytes"] > 0:
                size_new = st.msg_size(subject, hdrs, payload)
                if st.bytes + size_new > cfg["max_bytes"] and (
                    of_subject is None or not at_limit or st.size_of(of_subject[0]) < size_new
                ):
                    raise errors.store_failed("maximum bytes exceeded")
        if js.limited:
            js.check_capacity(cfg["storage"], st.msg_size(subject, hdrs, payload))
        if self.account.limited:
            self.account.check_usage(cfg["storage"], st.msg_size(subject, hdrs, payload))
        if ttl_invalid:
            raise errors.message_ttl_invalid()
        if 0 < ttl < self._min_ttl:
            ttl = self._min_ttl
            hdrs = _with_ttl_header(hdrs or b"", ttl)
        if self._interest_only and not self._has_interest(subject):
            # Nobody would ever ack it: nats-server acknowledges and drops it at once.
            st.skip_to(st.last_seq + 1)
            return st.last_seq, False
        republish_to: bytes | None = None
        previous = 0  # the subject's last sequence before this message, for the republished copy
        if self._republish is not None:
            republish_to = self._republish.match(subject)
            if republish_to is not None and is_literal_subject(republish_to):
                previous = st.last_for(subject)
            else:
                republish_to = None  # nats-server suppresses a republish to an invalid subject
        # Strictly increasing, so by_start_time and max_age stay exact.
        ts = now if now > st.last_ts else st.last_ts + 1
        seq = st.append(subject, hdrs, payload, ts)
        if msg_id and self._dedupe_window:
            self._remember(msg_id, seq, ts)
        if ttl:
            self._track_ttl(seq, ts, ttl)
        if self._schedules is not None:
            self._schedules.on_stored(seq, subject, hdrs, ts)
        if self._rollup_purge and hdrs and hdrs.find(b"\r\nNats-Schedule-Next:") >= 0:
            scheduling.purge_scheduler(self, hdrs)
        if rollup == b"sub":
            self.remove([s for s in st.subjects.get(subject, ()) if s < seq])
        elif rollup == b"all":
            self.remove([s for s in st.seqs_from(st.first_seq) if s < seq])
        if self._has_limits:
            self._enforce_limits(subject)
        if self._max_age and (st.msgs == 1 or self._age_timer is None):
            self._schedule_age_check()
        if self.consumers:
            for consumer in self.consumers.values():
                consumer.on_new_message(seq, subject)
        if republish_to is not None:
            self._republish_message(republish_to, subject, seq, ts, previous, hdrs, payload)
        if self.followers:
            for follower in self.followers:
                follower.kick()
        js.stored_msgs += 1
        js.stored_bytes += size
        return seq, False

    def store_mirrored(self, subject: bytes, seq: int, hdrs: bytes | None, payload: bytes, ts: int) -> None:
        """A mirror's copy of its origin's message `seq`, stored under that sequence with the origin's time
        (the sequences its filter left out, or the origin removed, skipped as nats-server skips them)."""
        st = self.store
        if seq <= st.last_seq:
            return
        js = self._js
        size = st.msg_size(subject, hdrs, payload)
        if js.limited:
            js.check_capacity(self.config["storage"], size)
        if self.account.limited:
            self.account.check_usage(self.config["storage"], size)
        st.skip_to(seq - 1)
        st.append(subject, hdrs, payload, ts)
        if self._has_limits:
            self._enforce_limits(subject)
        if self._max_age and (st.msgs == 1 or self._age_timer is None):
            self._schedule_age_check()
        for consumer in self.consumers.values():
            consumer.on_new_message(seq, subject)
        for follower in self.followers:
            follower.kick()
        js.stored_msgs += 1
        js.stored_bytes += len(payload) + (len(hdrs) if hdrs else 0)

    def _republish_message(
        self,
        target: bytes,
        subject: bytes,
        seq: int,
        ts: int,
        previous: int,
        hdrs: bytes | None,
        payload: bytes,
    ) -> None:
        """The stored message's copy on its republish subject, with nats-server's headers after its own
        (`headers_only`: no payload, its size in Nats-Msg-Size). Published by the stream's internal client,
        so it is never taken for an API request, whatever the destination."""
        lines = b"Nats-Stream: %s\r\nNats-Subject: %s\r\nNats-Sequence: %d\r\nNats-Time-Stamp: %s\r\n" % (
            self._name_bytes,
            subject,
            seq,
            rfc3339_bytes(ts),
        )
        lines += b"Nats-Last-Sequence: %d\r\n" % previous
        if self._republish_headers_only:
            lines += b"Nats-Msg-Size: %d\r\n" % len(payload)
            payload = b""
        head = hdrs[:-2] if hdrs and len(hdrs) > 2 else b"NATS/1.0\r\n"
        self.account.client.publish(target, None, head + lines + b"\r\n", payload)

    def _check_expected(self, subject: bytes, hdrs: bytes) -> None:
        """The Nats-Expected-Last-* conditions of a publish (nats-server's checks and errors)."""
        st = self.store
        els = get_header(hdrs, b"Nats-Expected-Last-Sequence")
        if els is not None and _int(els) != st.last_seq:
            raise errors.wrong_last_sequence(st.last_seq)
        elmi = get_header(hdrs, b"Nats-Expected-Last-Msg-Id")
        if elmi is not None and elmi != self._last_msg_id:
            raise errors.wrong_last_msg_id(self._last_msg_id.decode(errors="replace"))
        elss = get_header(hdrs, b"Nats-Expected-Last-Subject-Sequence")
        if elss is not None:
            last = st.last_for(subject)
            if _int(elss) != last:
                raise errors.wrong_last_sequence(last)

    def _has_interest(self, subject: bytes) -> bool:
        # A mirror or source copying from it is interest too (nats-server's sourcing consumer).
        return any(c.wants(subject) for c in self.consumers.values()) or any(
            f.wants(subject) for f in self.followers
        )

    def on_acked(self, seq: int) -> None:
        """A consumer is done with `seq`: under interest or workqueue retention it may go now."""
        if self._limits_retention:
            return
        retention = self.config["retention"]
        subject = self.store.subject_of(seq)
        if subject is None:
            return
        if retention == "interest" and (
            any(c.needs(seq, subject) for c in self.consumers.values())
            or any(f.position < seq and f.wants(subject) for f in self.followers)
        ):
            return
        # Its delete record joins this turn's others in one write at the end of the turn (one write per ack,
        # ack to delete, took ~1.1 s of a 12 s MQTT QoS 1 -> 1 profile).
        if self.remove([seq], buffered=True):
            self._commit_soon()

    def on_released(self, after: int, before: int) -> None:
        """A consumer let go of the messages in (after, before) without acking them (a reset past them, its
        deletion): each may go now as if acked. Those at or below its ack floor it had acked already."""
        st = self.store
        released: list[int] = []
        for seq in st.seqs_from(after + 1):
            if seq >= before:
                break
            released.append(seq)
        for seq in released:
            self.on_acked(seq)

    def remove(self, seqs: list[int], buffered: bool = False) -> int:
        """Remove messages and tell the consumers (their pending counts); returns how many went. `buffered`:
        their delete records wait for the store's next commit (see Store.remove_many)."""
        st = self.store
        gone = [(seq, subj) for seq in seqs if (subj := st.subject_of(seq)) is not None]
        if not gone:
            return 0
        st.remove_many([seq for seq, _ in gone], buffered)
        if self._ttl_never:
            self._ttl_never.difference_update(seqs)
        for consumer in self.consumers.values():
            consumer.on_removed(gone)
        return len(gone)

    def _enforce_limits(self, subject: bytes | None = None) -> None:
        cfg, st = self.config, self.store
        per = cfg["max_msgs_per_subject"]
        if per > 0:
            lists = list(st.subjects.values()) if subject is None else [st.subjects.get(subject)]
            victims = [s for lst in lists if lst is not None for s in lst.oldest(len(lst) - per)]
            if victims:
                self.remove(victims)
        if cfg["max_msgs"] > 0 and st.msgs > cfg["max_msgs"]:
            self.remove(list(_take(st.seqs_from(st.first_seq), st.msgs - cfg["max_msgs"])))
        if cfg["max_bytes"] > 0:
            while st.bytes > cfg["max_bytes"] and st.msgs:
                self.remove([st.first_seq])

    # -- max_age --------------------------------------------------------------------------------------
    def _schedule_age_check(self, oldest: int = 0) -> None:
        """The next max_age pass, when the message stored at `oldest` (ns; default the first) ages out."""
        max_age = self.config["max_age"]
        if not max_age or self.store.msgs == 0:
            return
        if self._age_timer is not None:
            self._age_timer.cancel()
        due = ((oldest or self.store.first_ts()) + max_age - now_ns()) / 1e9
        self._age_timer = self.account.js.loop.call_later(max(due, 0.0) + 0.001, self._expire_aged)

    def _expire_aged(self) -> None:
        self._age_timer = None
        cutoff = now_ns() - self.config["max_age"]
        st = self.store
        never = self._ttl_never
        old = []
        oldest = 0
        for s in st.seqs_from(st.first_seq):
            ts = st.ts_of(s)
            if ts is None or ts > cutoff:
                oldest = ts or 0
                break
            if s not in never:  # "Nats-TTL: never" outlives max_age
                old.append(s)
        if self._marker_ttl_s:
            for s in old:
                self._expire(s)
        elif old:
            self.remove(old)
        if oldest or not never:
            self._schedule_age_check(oldest)

    # -- per-message TTL ------------------------------------------------------------------------------
    def _track_ttl(self, seq: int, ts: int, ttl: int) -> None:
        if ttl < 0:
            self._ttl_never.add(seq)
            return
        expires = ts + ttl * 1_000_000_000
        heap, st = self._ttl_heap, self.store
        # Removals (deletes, purges, rollups, per-subject limits) leave their entries behind until due; a KV
        # key overwritten often would grow the heap by every update within its TTL. Past twice the live
        # messages it is rebuilt from those still stored: amortised O(1) a push.
        if len(heap) > 2 * st.msgs + 64:
            heap[:] = [entry for entry in heap if entry[1] in st]
            heapq.heapify(heap)
        heapq.heappush(heap, (expires, seq))
        if self._ttl_timer is None or expires < self._ttl_timer_at:
            self._schedule_ttl()

    def _schedule_ttl(self) -> None:
        if self._ttl_timer is not None:
            self._ttl_timer.cancel()
            self._ttl_timer = None
        if not self._ttl_heap:
            return
        self._ttl_timer_at = self._ttl_heap[0][0]
        due = (self._ttl_timer_at - now_ns()) / 1e9
        self._ttl_timer = self._js.loop.call_later(max(due, 0.0) + 0.001, self._expire_ttls)

    def _expire_ttls(self) -> None:
        self._ttl_timer = None
        heap, now = self._ttl_heap, now_ns()
        due = []
        while heap and heap[0][0] <= now:
            due.append(heapq.heappop(heap)[1])
        for seq in sorted(due):
            self._expire(seq)
        self._schedule_ttl()

    def _expire(self, seq: int) -> None:
        """Remove a message whose time is up; with subject delete markers, the last one of its subject is
        replaced by a marker (nats-server's headers, a rollup of the subject) unless it is a marker."""
        st = self.store
        subject = st.subject_of(seq)
        if subject is None:
            return
        if self._marker_ttl_s and len(st.subjects.get(subject, ())) == 1:
            msg = st.load(seq)
            if msg is not None and not _is_marker(msg.hdrs):
                try:
                    self.process(subject, self._marker_hdrs, b"")  # its rollup removes the message
                except (ApiError, OSError) as exc:  # not stored: the message goes without its marker
                    log.warning("JetStream stream %s: delete marker not stored: %s", self.name, exc)
        self.remove([seq])  # (none left when the marker's rollup took it)

    def _rebuild_ttls(self) -> None:
        """After a restart: the pending TTLs (and never-expiring messages), from the stored headers."""
        st = self.store
        candidates, st.with_ttl = st.with_ttl, []
        if not self._allow_ttl:
            return
        for seq in candidates:  # only those the store saw a Nats-TTL header in: no read of every message
            msg = st.load(seq)
            if msg is not None and msg.hdrs:
                raw = get_header(msg.hdrs, b"Nats-TTL")
                try:
                    ttl = parse_msg_ttl(raw) if raw else 0
                except ValueError:
                    continue
                if ttl < 0:
                    self._ttl_never.add(seq)
                elif ttl:  # the timer starts with the stream (start)
                    heapq.heappush(self._ttl_heap, (msg.ts + ttl * 1_000_000_000, seq))

    # -- dedupe ---------------------------------------------------------------------------------------
    def _remember(self, msg_id: bytes, seq: int, ts: int) -> None:
        self._dedupe[msg_id] = seq
        self._dedupe_ids.append(msg_id)
        self._dedupe_seqs.append(seq)
        self._dedupe_ts.append(ts)
        self._last_msg_id = msg_id

    def _expire_dedupe(self, now: int) -> None:
        """Forget the message ids older than the duplicate window; note when the next one will be."""
        window = self._dedupe_window
        d, ids, seqs, stamps = self._dedupe, self._dedupe_ids, self._dedupe_seqs, self._dedupe_ts
        while stamps:
            oldest = stamps[0]
            if oldest >= now - window:
                self._dedupe_check_at = oldest + window
                return
            stamps.popleft()
            msg_id, seq = ids.popleft(), seqs.popleft()
            if d.get(msg_id) == seq:  # not forgotten (a failed write) and stored again since
                del d[msg_id]
        self._dedupe_check_at = now + window  # ids added from now on are no older than now

    def _rebuild_dedupe(self) -> None:
        """After a restart: the message ids still inside the duplicate window, from the stored headers."""
        st = self.store
        if not self._dedupe_window:
            return
        cutoff = now_ns() - self._dedupe_window
        start = st.seq_for_time(cutoff) if st.msgs else st.last_seq + 1
        for seq in st.seqs_from(start):
            msg = st.load(seq)
            if msg is not None and msg.hdrs:
                mid = get_header(msg.hdrs, b"Nats-Msg-Id")
                if mid:
                    self._remember(mid, seq, msg.ts)

    # -- messages -------------------------------------------------------------------------------------
    def get_message(self, req: dict[str, Any]) -> StoredMsg:
        """STREAM.MSG.GET / DIRECT.GET lookups: seq, last_by_subj, next_by_subj (with seq)."""
        st = self.store
        seq = req.get("seq") or 0
        last_by = req.get("last_by_subj")
        next_by = req.get("next_by_subj")
        if not isinstance(seq, int) or sum(bool(x) for x in (last_by, next_by)) > 1:
            raise errors.bad_request()
        found: int | None
        if last_by:
            f = last_by.encode()
            if has_wildcard(f):
                found = max((lst[-1] for s, lst in st.subjects.items() if matches(f, s)), default=None)
            else:
                found = st.last_for(f) or None
        elif next_by:
            f = next_by.encode()
            found = st.next_seq(max(seq, 1), lambda s: matches(f, s))
        elif seq:
            found = seq if seq in st else None
        else:
            raise errors.bad_request()
        msg = st.load(found) if found else None
        if msg is None:
            raise errors.no_message_found()
        return msg

    def direct_get(self, req: dict[str, Any], default_max_bytes: int) -> list[tuple[bytes | None, bytes]]:
        """The frames (headers, payload) answering a checked direct get request (see Api.direct_get);
        ApiError (no message found) when not even the first message exists."""
        st = self.store
        start_time = req.get("start_time")
        if start_time:
            req = {**req, "seq": st.seq_for_time(parse_rfc3339(start_time))}
        if req.get("multi_last"):
            return self._direct_multi_last(req, default_max_bytes)
        no_hdr = bool(req.get("no_hdr"))
        batch = req.get("batch") or 0
        if not batch:
            one = self.get_message(req)
            if no_hdr:
                return [(None, one.data)]
            return [(self._coordinates(one, b"\r\n"), one.data)]
        seq = req.get("seq") or 0
        next_by = req.get("next_by_subj")
        match = partial(matches, next_by.encode()) if next_by else None
        pending = st.count_from(seq, match)
        valid_through = st.last_seq
        max_bytes = req.get("max_bytes") or default_max_bytes
        frames: list[tuple[bytes | None, bytes]] = []
        last = 0
        msgs = st.load_from(seq, batch, max_bytes, match)
        if no_hdr:  # nats-server counts pending down only in the headers it writes
            frames = [(None, msg.data) for msg in msgs]
        else:
            # The common headers of this stream's answers, formatted once; per message only its values.
            coordinates, stamp = self._dg_format, rfc3339_bytes
            for msg in msgs:
                if pending > 0:
                    pending -= 1
                coords = coordinates % (msg.subject, msg.seq, stamp(msg.ts), pending, last)
                hdrs = msg.hdrs
                # Own headers first, as nats-server appends its lines to them.
                frames.append((hdrs[:-2] + coords[10:] if hdrs and len(hdrs) > 2 else coords, msg.data))
                last = msg.seq
        if msgs:
            last = msgs[-1].seq
            seq = last + 1
        if not frames:
            raise errors.no_message_found()
        if st.last_seq > valid_through:
            pending = st.count_from(seq, match)
        eob = b"NATS/1.0 204 EOB\r\nNats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\n\r\n" % (pending, last)
        frames.append((eob, b""))
        return frames

    def _direct_multi_last(
        self, req: dict[str, Any], default_max_bytes: int
    ) -> list[tuple[bytes | None, bytes]]:
        """A `multi_last` direct get, as nats-server answers it: the last message (at or before `up_to_seq`,
        or before `up_to_time`) of each subject matching a filter, in sequence order, from `seq` on, at most
        `batch` and about `max_bytes`, then an EOB naming the ceiling; statuses when there is nothing."""
        st = self.store
        up_to: int = req.get("up_to_seq") or 0
        up_to_time = req.get("up_to_time")
        if up_to_time:
            up_to = st.seq_for_time(parse_rfc3339(up_to_time))
            if up_to <= st.first_seq:  # nothing stored before that time
                return [(_NO_RESULTS, b"")]
            up_to -= 1
        if not up_to:
            up_to = st.last_seq
        filters = [f.encode() for f in req["multi_last"]]
        seqs: set[int] = set()
        if st.msgs:
            # Literal filters are looked up, the wildcard ones scanned with one regex; the answer is refused
            # (nats-server's cap) as soon as it would pass the cap, not after collecting every subject.
            subjects = st.subjects
            for f in filters:
                if not has_wildcard(f) and _take_last(subjects.get(f), up_to, seqs):
                    return [(_TOO_MANY_RESULTS, b"")]
            wildcards = [f for f in filters if has_wildcard(f)]
            if wildcards:
                match = filters_regex(wildcards).fullmatch
                for subject, lst in subjects.items():
                    if match(subject) and _take_last(lst, up_to, seqs):
                        return [(_TOO_MANY_RESULTS, b"")]
        if not seqs:
            return [(_NO_RESULTS, b"")]
        min_seq: int = req.get("seq") or 0
        batch: int = req.get("batch") or 0
        max_bytes: int = req.get("max_bytes") or default_max_bytes
        pending, last, sent, size = len(seqs), 0, 0, 0
        frames: list[tuple[bytes | None, bytes]] = []
        for seq in sorted(seqs):
            pending -= 1
            if seq < min_seq:
                continue
            msg = st.load(seq)
            if msg is None:
                return [(b"NATS/1.0 404 Message Not Found\r\n\r\n", b"")]
            coords = self._dg_format % (msg.subject, msg.seq, rfc3339_bytes(msg.ts), pending, last)
            hdrs = msg.hdrs
            frames.append((hdrs[:-2] + coords[10:] if hdrs and len(hdrs) > 2 else coords, msg.data))
            last = msg.seq
            size += len(msg.subject) + len(msg.data) + (len(hdrs) if hdrs else 0)
            sent += 1
            if size >= max_bytes or (batch > 0 and sent >= batch):
                break
        frames.append((_MULTI_LAST_EOB % (pending, last, up_to), b""))
        return frames

    def _coordinates(self, msg: StoredMsg, tail: bytes) -> bytes:
        """A direct get's headers: the message's own, then where it comes from (nats-server's order)."""
        base = msg.hdrs[:-2] if msg.hdrs and len(msg.hdrs) > 2 else b"NATS/1.0\r\n"
        return b"%sNats-Stream: %s\r\nNats-Subject: %s\r\nNats-Sequence: %d\r\nNats-Time-Stamp: %s\r\n%s" % (
            base,
            self._name_bytes,
            msg.subject,
            msg.seq,
            rfc3339_bytes(msg.ts),
            tail,
        )

    def delete_message(self, seq: int, no_erase: bool = True) -> None:
        if self.config["sealed"]:
            raise errors.stream_sealed()
        if self.config["deny_delete"]:
            raise errors.msg_delete_failed("message delete not permitted")
        if not self.remove([seq]):
            # nats-server's stores differ: its file store fails outside the sequences its blocks hold
            # (EOF past the last), both answer "not found" for a sequence they hold that is gone.
            st = self.store
            if self.config["storage"] == "file" and not st.first_seq <= seq <= st.last_seq:
                raise errors.msg_delete_failed(
                    "stream store EOF" if seq > st.last_seq else "no message found"
                )
            raise errors.sequence_not_found(seq)

    def purge(self, req: dict[str, Any]) -> int:
        if self.config["sealed"]:
            raise errors.stream_sealed()
        if self.config["deny_purge"]:
            raise errors.purge_failed("stream purge not permitted")
        filt = req.get("filter")
        seq = req.get("seq") or 0
        keep = req.get("keep") or 0
        if seq and keep:
            raise errors.bad_request()
        if self.links:  # the copies that tell the sources' positions may go now
            save_positions(self)
        match: Callable[[bytes], bool] | None = None
        if filt:  # one outside the stream's subjects purges nothing, as from nats-server
            pattern = filters_regex([filt.encode()])
            match = partial(_matches, pattern)
        n = self.store.purge(match, upto=seq, keep=keep)
        if self._ttl_never:
            self._ttl_never = {s for s in self._ttl_never if s in self.store}
        for consumer in self.consumers.values():
            consumer.on_purged(self.store.first_seq)
        return n

    def message_json(self, msg: StoredMsg) -> dict[str, Any]:
        out: dict[str, Any] = {"subject": msg.subject.decode(), "seq": msg.seq}
        if msg.hdrs:
            out["hdrs"] = base64.b64encode(msg.hdrs).decode()
        if msg.data:
            out["data"] = base64.b64encode(msg.data).decode()
        out["time"] = rfc3339(msg.ts)
        return out


def _is_marker(hdrs: bytes | None) -> bool:
    """A delete marker: the server's own (Nats-Marker-Reason) or a KV purge."""
    return bool(get_header(hdrs, b"Nats-Marker-Reason")) or get_header(hdrs, b"KV-Operation") == b"PURGE"


def _with_ttl_header(hdrs: bytes, ttl: int) -> bytes:
    """The headers with their Nats-TTL lines replaced by one at the end (nats-server's order)."""
    lines = [ln for ln in hdrs.split(b"\r\n")[1:] if ln and not ln.startswith(b"Nats-TTL:")]
    head = hdrs.split(b"\r\n", 1)[0] if hdrs else b"NATS/1.0"
    return b"\r\n".join([head, *lines, b"Nats-TTL: %d" % ttl]) + b"\r\n\r\n"


def _take_last(lst: SeqList | None, up_to: int, seqs: set[int]) -> bool:
    """Adds a subject's last sequence at or before `up_to` (if any) to a `multi_last` answer's; True once
    the answer passes nats-server's cap."""
    if lst:
        last = lst.last_upto(up_to)
        if last:
            seqs.add(last)
            return len(seqs) > _MULTI_LAST_MAX
    return False


def _matches(pattern: re.Pattern[bytes], subject: bytes) -> bool:
    return pattern.fullmatch(subject) is not None


def _int(raw: bytes) -> int:
    try:
        return int(raw)
    except ValueError:
        return -1


def _take(it: Any, n: int) -> Any:
    for i, x in enumerate(it):
        if i >= n:
            return
        yield x
