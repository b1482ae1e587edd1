"""Consumers: pull (`MSG.NEXT` requests) and push (a deliver subject), acks, redelivery, flow control.

State is what nats-server keeps: the next stream sequence to look at (`sseq`), the last consumer sequence
handed out (`dseq`), the ack floors, the messages delivered but not acked (`pending`: stream sequence ->
(consumer sequence, delivery time)), and delivery counts of redelivered messages. Every delivery carries
the reply subject `$JS.ACK.<stream>.<consumer>.<deliveries>.<sseq>.<dseq>.<ts>.<pending>`; acks come back
on it through this account's internal client.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import string
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pynatsd.base.ids import Nuid
from pynatsd.base.values import ConfigValueError, parse_duration
from pynatsd.jetstream import errors, requests
from pynatsd.jetstream.store import StoredMsg
from pynatsd.jetstream.util import (
    filters_regex,
    get_header,
    headers,
    now_ns,
    parse_rfc3339,
    rfc3339,
)

if TYPE_CHECKING:
    import asyncio

    from pynatsd.broker.delivery import Subscription
    from pynatsd.broker.outbound import FlushScheduler
    from pynatsd.jetstream.stream import Stream

from pynatsd.jetstream.stream import with_server_metadata
from pynatsd.protocol import gojson
from pynatsd.protocol.subjects import has_wildcard, is_valid_subject, matches, overlap

MAX_NAME_LEN = 255  # nats-server's JSMaxNameLen, in bytes
ACK_WAIT_DEFAULT = 30_000_000_000
MAX_ACK_PENDING_DEFAULT = 1000
MAX_WAITING_DEFAULT = 512
EPHEMERAL_INACTIVE_DEFAULT = 5_000_000_000
# Flow control as nats-server runs it: bytes delivered since the last answered request are counted; a request
# goes out past half the window, delivery stalls past the window; each answer doubles the window (from 2 MiB
# up to 32 MiB) and takes off what was counted when that request went out.
FC_WINDOW_LIMIT = 32 * 1024 * 1024
FC_WINDOW_START = FC_WINDOW_LIMIT // 16

_DELIVER = ("all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject")
_ACK = ("none", "all", "explicit", "flow_control")
# nats-server's sourceHealthHB: the one heartbeat a consumer with ack policy flow_control takes.
FLOW_CONTROL_HEARTBEAT = 1_000_000_000
_REPLAY = ("instant", "original")
_ORDER = [
    "durable_name", "name", "description", "deliver_policy", "opt_start_seq", "opt_start_time",
    "ack_policy", "ack_wait", "max_deliver", "backoff", "filter_subject", "filter_subjects",
    "replay_policy", "rate_limit_bps", "sample_freq", "max_waiting", "max_ack_pending", "flow_control",
    "headers_only", "max_batch", "max_expires", "max_bytes", "deliver_subject", "deliver_group",
    "idle_heartbeat", "inactive_threshold", "num_replicas", "mem_storage", "direct", "sourcing", "metadata",
    "pause_until", "priority_groups", "priority_policy", "priority_timeout",
]  # fmt: skip
_ALWAYS = {"deliver_policy", "ack_policy", "replay_policy", "num_replicas"}

PINNED_TTL_DEFAULT = 120_000_000_000  # nats-server's JsDefaultPinnedTTL: a pin lasts 2 min without requests
_GROUP_NAME = re.compile(r"[a-zA-Z0-9/_=-]{1,16}")  # nats-server's validGroupName
PRIORITY_LAST = (1 << 31) - 1  # a request without priority fields comes after every prioritized one
MAX_DURATION = (1 << 63) - 1  # Go's time.Until saturates there
_GO_ZERO_TIME_NS = -62_135_596_800_000_000_000  # 0001-01-01T00:00:00Z, Go's zero time.Time

# A push consumer's deliveries in one turn read the clock once every this many + 1 (their ack deadlines and
# last_active are thus at most that many deliveries early).
_CLOCK_EVERY: Final = 63
# The sequences after a consumer's oldest pending one that are looked up (in stream order) for the next oldest
# when it is acked, before its pending entries are walked (a filter may leave gaps in the stream order).
_OLDEST_PROBES: Final = 9
NO_MESSAGES = headers(b"404 No Messages")
IDLE_HEARTBEAT = headers(b"100 Idle Heartbeat")


def random_name(n: int = 8) -> str:
    return "".join(random.choices(string.ascii_letters + string.digits, k=n))


def _valid_name(name: str) -> bool:
    return bool(name) and not any(c in name for c in ".*> \t\r\n\f/\\")


def normalize_config(raw: Any, stream: Stream) -> dict[str, Any]:
    """nats-server's consumer defaults and checks; raises ApiError."""
    if not isinstance(raw, dict):
        raise errors.consumer_config_required()
    cfg: dict[str, Any] = {k: v for k, v in raw.items() if v is not None}
    durable = cfg.get("durable_name") or ""
    name = cfg.get("name") or ""
    if durable and name and durable != name:
        raise errors.consumer_name_mismatch()
    if name and not _valid_name(name):
        raise errors.stream_invalid_config("consumer name can not contain '.', '*', '>', '\\', '/'")
    if durable and not _valid_name(durable):
        raise errors.stream_invalid_config("consumer durable name can not contain '.', '*', '>', '\\', '/'")
    if durable and len(durable.encode()) > MAX_NAME_LEN:
        raise errors._e(400, 10102, f"consumer name is too long, maximum allowed is {MAX_NAME_LEN}")
    if name and len(name.encode()) > MAX_NAME_LEN and stream.config["storage"] == "file":
        raise errors.consumer_create("error creating store for consumer")  # nats-server's file name fails
    if durable:
        cfg["name"] = durable
    if cfg.get("num_replicas", 0) > 1:
        raise errors.replicas_not_supported()
    if cfg.get("num_replicas", 0) < 0:
        raise errors._e(400, 10133, "replicas count cannot be negative")
    if any(b < 0 for b in cfg.get("backoff") or []):
        raise errors._e(400, 10184, "consumer backoff needs to be positive")
    if cfg.get("ack_wait", 0) < 0:
        raise errors._e(400, 10183, "consumer ack wait needs to be positive")
    # nats-server's defaults: a negative limit is no limit (0; -1 for max_ack_pending), not an error.
    for key in (
        "max_waiting",
        "max_batch",
        "max_expires",
        "max_bytes",
        "idle_heartbeat",
        "inactive_threshold",
    ):
        if cfg.get(key, 0) < 0:
            cfg[key] = 0
    if cfg.get("max_ack_pending", 0) < -1:
        cfg["max_ack_pending"] = -1
    cfg.setdefault("deliver_policy", "all")
    cfg.setdefault("ack_policy", "none")
    cfg.setdefault("replay_policy", "instant")
    if (
        cfg["deliver_policy"] not in _DELIVER
        or cfg["ack_policy"] not in _ACK
        or cfg["replay_policy"] not in _REPLAY
    ):
        raise errors.invalid_json("unknown consumer policy")
    if cfg.get("max_deliver", 0) in (0,) or cfg.get("max_deliver", 0) < -1:
        cfg["max_deliver"] = -1
    ack_flow = cfg["ack_policy"] == "flow_control"
    if ack_flow:  # acked by the answers to flow control (a durable mirror's or source's feed, API level 4)
        _check_ack_flow_control(cfg)
    push = bool(cfg.get("deliver_subject"))
    if push:
        ds = cfg["deliver_subject"]
        if has_wildcard(ds.encode()):
            raise errors.consumer_deliver_to_wildcards()
        if not is_valid_subject(ds.encode()):
            raise errors._e(400, 10112, "invalid push consumer deliver subject")
        if any(matches(subj.encode(), ds.encode()) for subj in stream.config.get("subjects") or ()):
            raise errors._e(400, 10081, "consumer deliver subject forms a cycle")  # it would store its own
        if cfg.get("max_waiting"):
            raise errors.consumer_push_max_waiting()
        if cfg.get("max_ack_pending", 0) > 0 and cfg["ack_policy"] == "none":
            raise errors._e(400, 10082, "consumer requires ack policy for max ack pending")
        if 0 < cfg.get("idle_heartbeat", 0) < 100_000_000:
            raise errors._e(400, 10083, "consumer idle heartbeat needs to be >= 100ms")
    elif cfg.get("direct"):
        raise errors._e(400, 10090, "consumer direct requires a push based consumer")
    else:
        if cfg["ack_policy"] == "none" and stream.config["retention"] == "workqueue":
            raise errors.consumer_pull_requires_ack()  # sourcing or not (nats-server's checkConsumerCfg)
        if cfg.get("idle_heartbeat"):
            raise errors._e(400, 10088, "consumer idle heartbeat requires a push based consumer")
        if cfg.get("flow_control"):
            raise errors._e(400, 10089, "consumer flow control requires a push based consumer")
        if cfg.get("max_waiting", 0) < 0:
            raise errors._e(400, 10087, "consumer max waiting needs to be positive")
        if 0 < cfg.get("max_expires", 0) < 1_000_000:
            raise errors._e(400, 10115, "consumer max request expires needs to be >= 1ms")
        if not cfg.get("max_waiting"):
            cfg["max_waiting"] = MAX_WAITING_DEFAULT
    if cfg.get("direct") and durable:  # a mirror's or source's feed on another server: ephemeral
        raise errors._e(400, 10091, "consumer direct requires an ephemeral consumer")
    if not cfg.get("ack_wait") and cfg["ack_policy"] != "none" and not ack_flow:
        cfg["ack_wait"] = ACK_WAIT_DEFAULT
    backoff = cfg.get("backoff") or []
    if backoff:
        if any(isinstance(b, int) and b < 0 for b in backoff):
            raise errors._e(400, 10184, "consumer backoff needs to be positive")
        if cfg["max_deliver"] != -1 and cfg["max_deliver"] < len(backoff):
            raise errors.consumer_max_deliver_backoff()
        cfg["ack_wait"] = backoff[0]
    if not cfg.get("max_ack_pending") and cfg["ack_policy"] != "none":
        cfg["max_ack_pending"] = MAX_ACK_PENDING_DEFAULT
    if not durable and not cfg.get("inactive_threshold"):
        cfg["inactive_threshold"] = EPHEMERAL_INACTIVE_DEFAULT
    if cfg.get("filter_subject") and cfg.get("filter_subjects"):
        raise errors.consumer_duplicate_filters()
    filters = list(
        cfg.get("filter_subjects") or ([cfg["filter_subject"]] if cfg.get("filter_subject") else [])
    )
    if cfg.get("filter_subject") == ">":
        pass
    for f in filters:
        if not f:
            raise errors._e(400, 10139, "consumer filter in FilterSubjects cannot be empty")
        if not is_valid_subject(f.encode()):
            raise errors.stream_invalid_config("invalid subject")
    for i, a in enumerate(filters):
        for b in filters[i + 1 :]:
            if overlap(a.encode(), b.encode()):
                raise errors._e(400, 10138, "consumer subject filters cannot overlap")
    dp = cfg["deliver_policy"]
    _check_start(dp, cfg, bool(filters))
    _check_sample_freq(str(cfg.get("sample_freq") or ""))
    if push and cfg.get("flow_control") and not cfg.get("idle_heartbeat"):
        raise errors.flow_control_needs_heartbeats()
    # nats-server's required API level counts the priority fields as given, before its defaults.
    asks_priority = cfg.get("priority_policy", "none") != "none" or any(
        cfg.get(k) for k in ("priority_groups", "priority_timeout")
    )
    _check_priority(cfg, push)
    retention = stream.config["retention"]
    # A mirror's or source's feed (direct or sourcing) takes no part in the work queue's exclusivity.
    if retention == "workqueue" and not cfg.get("direct") and not cfg.get("sourcing"):
        if cfg["ack_policy"] not in ("explicit", "flow_control"):
            raise errors.consumer_wq_requires_explicit_ack()
        if dp != "all":
            raise errors.consumer_wq_not_deliver_all()
        for other in stream.consumers.values():
            if other.name == cfg.get("name") or other.config.get("direct") or other.config.get("sourcing"):
                continue
            if not other.filters or not filters:
                raise errors.consumer_wq_multiple_unfiltered()
            if any(overlap(a, b.encode()) for a in other.filters for b in filters):
                raise errors.consumer_wq_not_unique()
    cfg.setdefault("num_replicas", 0)
    if cfg.get("pause_until"):
        cfg["pause_until"] = go_time(cfg["pause_until"])
    cfg["metadata"] = dict(cfg.get("metadata") or {})
    set_required_level(cfg, asks_priority)
    out = {k: cfg[k] for k in _ORDER if k in cfg and (k in _ALWAYS or cfg[k] not in (0, "", False, [], {}))}
    return out


def _check_ack_flow_control(cfg: dict[str, Any]) -> None:
    """Ack policy flow_control: nats-server's defaults (flow control, a 1 s heartbeat) and checks, in its
    order (pynatsd refuses `pedantic`, so the defaults always apply)."""
    cfg["flow_control"] = True
    cfg["idle_heartbeat"] = FLOW_CONTROL_HEARTBEAT
    if not cfg.get("deliver_subject"):
        raise errors._e(400, 10218, "flow control ack policy requires a push based consumer")
    if cfg.get("max_ack_pending", 0) < 0:
        raise errors._e(400, 10220, "flow control ack policy requires max ack pending")
    if cfg.get("ack_wait") or cfg.get("backoff"):
        raise errors._e(400, 10221, "flow control ack policy requires unset ack wait")
    if cfg["max_deliver"] > 0:
        raise errors._e(400, 10222, "flow control ack policy requires unset max deliver")


def _check_priority(cfg: dict[str, Any], push: bool) -> None:
    """Priority groups: nats-server's defaults and checks, in its order. The policy `none` is its zero value
    (left out of the config); a pinned_client policy gets a 2 min priority_timeout unless given one."""
    if cfg.get("priority_timeout", 0) < 0:
        cfg["priority_timeout"] = 0
    policy = cfg.get("priority_policy") or "none"
    if policy == "none":
        cfg.pop("priority_policy", None)
        if cfg.get("priority_groups"):
            raise errors._e(400, 10196, "consumer can not have priority groups when policy is none")
        if cfg.get("priority_timeout"):
            raise errors._e(400, 10197, "PinnedTTL cannot be set when PriorityPolicy is none")
        return
    if policy == "pinned_client" and not cfg.get("priority_timeout"):
        cfg["priority_timeout"] = PINNED_TTL_DEFAULT
    if push:
        raise errors._e(400, 10178, "priority groups can not be used with push consumers")
    groups = cfg.get("priority_groups") or []
    if not groups:
        raise errors._e(400, 10159, "Setting PriorityPolicy requires at least one PriorityGroup to be set")
    for group in groups:
        if not group:
            raise errors._e(400, 10161, "Group name cannot be an empty string")
        if not valid_group_name(group):
            raise errors.consumer_invalid_group_name()


def valid_group_name(group: str) -> bool:
    """nats-server's validGroupName: 1 to 16 of A-Z, a-z, 0-9, -_/=."""
    return _GROUP_NAME.fullmatch(group) is not None


def set_required_level(cfg: dict[str, Any], asks_priority: bool = False) -> None:
    """nats-server's `_nats.req.level` metadata: 4 with ack policy flow_control (2.14), 1 with a pause_until
    or priority groups (API level 1, 2.11), else 0."""
    until = cfg.get("pause_until")
    paused = bool(until and parse_rfc3339(until) > _GO_ZERO_TIME_NS)
    prioritized = asks_priority or any(
        cfg.get(k) for k in ("priority_policy", "priority_groups", "priority_timeout")
    )
    level = "4" if cfg.get("ack_policy") == "flow_control" else "1" if paused or prioritized else "0"
    cfg["metadata"]["_nats.req.level"] = level


def go_time(text: str) -> str:
    """A time.Time as nats-server echoes one from a request: its offset kept ("Z" for none), the fraction
    without trailing zeros."""
    tz = "" if text[-1:] in "Zz" else text[-6:]
    offset = 0 if tz in ("", "+00:00", "-00:00") else (int(tz[1:3]) * 60 + int(tz[4:6])) * 60
    local = rfc3339(parse_rfc3339(text) + (offset if tz[:1] == "+" else -offset) * 1_000_000_000)
    return local[:-1] + tz if offset else local


def utc_time(text: str) -> str:
    """A time.Time as nats-server keeps pause_until: in UTC, RFC 3339 with nanoseconds."""
    ns = parse_rfc3339(text)
    return rfc3339(ns) if ns > 0 else "0001-01-01T00:00:00Z"


def _check_sample_freq(freq: str) -> None:
    """nats-server's parse of `sample_freq` ("50" or "50%"), worded as Go's strconv.Atoi error."""
    if not freq:
        return
    digits = freq.removesuffix("%")
    body = digits[1:] if digits[:1] in "+-" else digits
    if not body or not body.isascii() or not body.isdigit():
        problem = f'strconv.Atoi: parsing "{digits}": invalid syntax'
    elif not -(1 << 63) <= int(digits) < (1 << 63):
        problem = f'strconv.Atoi: parsing "{digits}": value out of range'
    elif int(digits) < 0:
        problem = "<nil>"  # nats-server formats its nil error
    else:
        return
    raise errors._e(400, 10095, f"failed to parse consumer sampling configuration: {problem}")


def _check_start(dp: str, cfg: dict[str, Any], filtered: bool) -> None:
    """Start position conflicts, worded as nats-server words them (`start start sequence` included)."""
    name = dp.replace("_", " ")

    def also(start: str) -> errors.ApiError:
        return errors.consumer_invalid_policy(
            f"consumer delivery policy is deliver {name}, but optional start {start} is also set"
        )

    def missing(what: str) -> errors.ApiError:
        return errors.consumer_invalid_policy(
            f"consumer delivery policy is deliver {name}, but optional {what} is not set"
        )

    seq, start_time = cfg.get("opt_start_seq"), cfg.get("opt_start_time")
    if dp == "by_start_sequence":
        if not seq:
            raise missing("start sequence")
        if start_time:
            raise also("time")
    elif dp == "by_start_time":
        if not start_time:
            raise missing("start time")
        if seq:
            raise also("start sequence")
    else:
        if seq:
            raise also("sequence")
        if start_time:
            raise also("time")
        if dp == "last_per_subject" and not filtered:
            raise missing("filter subject")


@dataclass
class PullRequest:
    reply: bytes
    batch: int
    max_bytes: int
    no_wait: bool
    expires: int  # monotonic deadline in ns; 0 = none
    heartbeat: int  # ns; 0 = none
    sent: int = 0
    sent_bytes: int = 0
    last_sent: int = 0  # ns; heartbeats only fill silences
    timers: list[asyncio.TimerHandle] = field(default_factory=list)
    # Its priority group fields (a JSON request's; `group` None for a bare batch size, as nats-server has it).
    group: str | None = None
    pin_id: str = ""
    min_pending: int = 0
    min_ack_pending: int = 0
    priority: int = PRIORITY_LAST


class Consumer:
    """One consumer of one stream. See the module docstring."""

    def __init__(
        self,
        stream: Stream,
        name: str,
        config: dict[str, Any],
        created: int,
        state: dict[str, Any] | None = None,
    ) -> None:
        self.stream = stream
        self.account = stream.account
        self._client = stream.account.client  # the account's internal client, which delivers
        self.loop = stream.account.js.loop
        self.name = name
        self.created = created
        self.durable = bool(config.get("durable_name"))
        self.push = bool(config.get("deliver_subject"))
        # What every delivery reads of the config, worked out once per config (see `update`).
        self.config = config
        self.filters: list[bytes] = []
        self._literal = True
        self._replay_original = False
        self._headers_only = False
        self._backoff: list[int] = []
        self._ack_wait_ns = ACK_WAIT_DEFAULT
        self._max_ack_pending = -1
        self._deliver_subject = b""
        self._awaiting_interest = False  # a push consumer's notify_on_interest is registered
        self._sample_freq = 0  # percent of acks reported on $JS.EVENT.METRIC.CONSUMER.ACK
        self._pause_until = 0  # ns; nothing is delivered before (config pause_until)
        self._pause_timer: asyncio.TimerHandle | None = None
        self._stopped = False
        self._policy = "none"  # priority_policy
        self._pin_id = ""  # the pinned client's id (pinned_client policy), "" while none is pinned
        self._pinned_ts = 0  # ns: when it was pinned
        self._pin_timer: asyncio.TimerHandle | None = None
        self._pin_fresh = False  # the pin was given to the request the message in hand goes to
        self._announce_pause = False  # a pause set at creation is not announced (nats-server's)
        self.update(config)
        self._announce_pause = True
        self._names = (stream.name, name)
        self._event_suffix = b".%s.%s" % (stream.name.encode(), name.encode())  # its advisories' subjects
        # `$JS.ACK.<stream>.<consumer>.`: the fixed start of every delivered message's reply subject.
        self._ack_prefix = b"$JS.ACK.%s.%s." % (stream.name.encode(), name.encode())
        self._ack_prefix_first = self._ack_prefix + b"1."
        self.ack_none = config["ack_policy"] == "none"
        # Ack policy flow_control: as `all`, acked by the deliver subject's answers to flow control only.
        self.ack_flow = config["ack_policy"] == "flow_control"
        self.ack_all = config["ack_policy"] == "all" or self.ack_flow
        # The stream sequence after the last delivered: info's delivered.stream_seq is `sseq - 1`, so it moves
        # with deliveries only (as nats-server), not when a search finds nothing more for the filter; such a
        # search leaves `_scan_from` at the stream's end, where the next one resumes.
        self.sseq = 1
        self._scan_from = 1
        self.dseq = 0
        self.asflr = 0
        self.adflr = 0
        self.pending: dict[int, tuple[int, int]] = {}  # sseq -> (dseq, deadline ns)
        # The oldest key of `pending` as last seen (0: unknown; see `_acks_done`): no key below it is pending
        # while a delivery below it resets it (`_send`).
        self._first_pending = 0
        self.rdc: dict[int, int] = {}  # sseq -> deliveries so far (only > 1 kept)
        self.redeliver: deque[int] = deque()
        self._redeliver_set: set[int] = set()
        self._lps: deque[int] = deque()  # last_per_subject: the initial sequences
        self.waiting: deque[PullRequest] = deque()
        self.last_active = 0
        self.last_ack = 0
        self._scheduled = False
        self._ack_timer: asyncio.TimerHandle | None = None
        self._ack_due = 0  # ns: when `_ack_timer` fires
        self._hb_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._replay_timer: asyncio.TimerHandle | None = None
        self._replay_last: tuple[int, int] | None = None  # (stored ts, sent ns) of the last replayed message
        self._save_timer: asyncio.TimerHandle | None = None
        self._state_paths: tuple[str, str] | None = None  # (temporary, final) state file, once saved
        self._inactive_since = now_ns()
        self._npending: int | None = None  # cached count of undelivered matching messages
        self._fc_reply: bytes | None = None
        self._fc_count = 0
        self._fc_window = FC_WINDOW_START
        self._fc_pending_bytes = 0  # delivered, not yet covered by an answered flow control request
        self._fc_size = 0  # `_fc_pending_bytes` when the outstanding request went out (grown past the window)
        self._delivered_since_hb = False
        # The last pull requester's interest: (reply subject, subject space generation, answer); a batch asks
        # once while no subscription comes or goes, not once per message (see `_reply_has_interest`).
        self._interest_seen: tuple[bytes, int, bool] = (b"", -1, False)
        # An ack none consumer listens for no acks (as nats-server): an ack request gets no responders.
        self._ack_sub: Subscription | None = (
            None
            if self.ack_none or self.ack_flow
            else self.account.client.subscribe(
                b"$JS.ACK.%s.%s.>" % (stream.name.encode(), self.name.encode()), self._on_ack
            )
        )
        self._fc_sub = (
            self.account.client.subscribe(
                b"$JS.FC.%s.%s.*" % (stream.name.encode(), self.name.encode()), self._on_fc
            )
            if config.get("flow_control")
            else None
        )
        if state is not None:
            self._restore(state)
        else:
            self._set_start()
        if self.push and config.get("idle_heartbeat"):
            self._hb_timer = self.loop.call_later(config["idle_heartbeat"] / 1e9, self._heartbeat)
        self.watch_inactivity()
        self.kick()

    # -- setup ----------------------------------------------------------------------------------------
    def update(self, config: dict[str, Any]) -> None:
        """Take `config` (at creation, or an update already checked by the account)."""
        self.config = config
        self.filters = [
            f.encode()
            for f in (
                config.get("filter_subjects")
                or ([config["filter_subject"]] if config.get("filter_subject") else [])
            )
        ]
        self._literal = not any(has_wildcard(f) for f in self.filters)
        self._filter_match = filters_regex(self.filters).fullmatch
        self._replay_original = config["replay_policy"] == "original"
        self._headers_only = bool(config.get("headers_only"))
        self._backoff = [int(b) for b in config.get("backoff") or ()]
        self._ack_wait_ns = int(config.get("ack_wait") or ACK_WAIT_DEFAULT)
        self._max_ack_pending = int(config.get("max_ack_pending", -1))
        self._sample_freq = int(str(config.get("sample_freq") or "0").removesuffix("%"))
        deliver_subject = str(config.get("deliver_subject") or "").encode()
        if self._awaiting_interest and deliver_subject != self._deliver_subject:
            self._stop_awaiting_interest()  # the account kicks the consumer after an update: it waits anew
        self._deliver_subject = deliver_subject
        self._policy = str(config.get("priority_policy") or "none")
        self._set_pause(config.get("pause_until") or "")

    def reconfigure(self, config: dict[str, Any]) -> None:
        """An update of a live consumer: `update`, and the messages awaiting an ack due by the new ack_wait or
        backoff, from their delivery (nats-server checks them against the new wait)."""
        delivered = {
            seq: (dseq, due - self._ack_wait(self.rdc.get(seq, 1)))
            for seq, (dseq, due) in self.pending.items()
        }
        self.update(config)
        if not delivered or self.ack_flow:  # (flow_control: no timer redelivers)
            return
        now = now_ns()
        soonest = 0
        for seq, (dseq, at) in delivered.items():
            due = at + self._ack_wait(self.rdc.get(seq, 1))
            self.pending[seq] = (dseq, due)
            soonest = due if soonest == 0 or due < soonest else soonest
        self._schedule_ack_check(soonest, now)  # sooner: moved up; later: the early check reschedules

    def _set_pause(self, until: str) -> None:
        """Pause deliveries until `until` (RFC 3339; "" or a past time: deliver now); a timer resumes them."""
        if self._pause_timer is not None:
            self._pause_timer.cancel()
            self._pause_timer = None
        before = self._pause_until
        self._pause_until = parse_rfc3339(until) if until else 0
        self._arm_pause()
        if self._announce_pause and self._pause_until != before:
            self._pause_advisory()

    def _pause_advisory(self) -> None:
        """nats-server's consumer_pause advisory: when an update changes pause_until, and when it passes."""
        until = str(self.config.get("pause_until") or "")
        self.account.advisories.consumer_pause(self._names, until, self.paused())

    def _arm_pause(self) -> None:
        wait = self._pause_until - now_ns()
        if wait > 0 and not self._stopped:
            self._pause_timer = self.loop.call_later(wait / 1e9 + 0.001, self._resume)

    def _resume(self) -> None:
        self._pause_timer = None
        if self.paused():  # the loop's clock ran ahead of the wall clock
            self._arm_pause()
            return
        self._pause_advisory()
        self.kick()

    def paused(self) -> bool:
        return self._pause_until > 0 and now_ns() < self._pause_until

    def wants(self, subject: bytes) -> bool:
        if not self.filters:
            return True
        return any(matches(f, subject) for f in self.filters)

    def _set_start(self) -> None:
        st = self.stream.store
        cfg = self.config
        dp = cfg["deliver_policy"]
        match = None if not self.filters else self.wants
        if dp == "all":
            self.sseq = st.first_seq
        elif dp == "last":
            last = 0
            if not self.filters:
                last = st.last_seq if st.msgs else 0
            else:
                last = max((lst[-1] for s, lst in st.subjects.items() if self.wants(s)), default=0)
            self.sseq = last if last else st.last_seq + 1
        elif dp == "new":
            self.sseq = st.last_seq + 1
        elif dp == "by_start_sequence":
            self.sseq = max(int(cfg["opt_start_seq"]), 1)
        elif dp == "by_start_time":
            self.sseq = st.seq_for_time(parse_rfc3339(cfg["opt_start_time"]))
        else:  # last_per_subject
            self._lps = deque(sorted(lst[-1] for s, lst in st.subjects.items() if match is None or match(s)))
            self.sseq = st.last_seq + 1
        self.asflr = max(self.sseq - 1, 0)
        if self._lps:
            self.asflr = self._lps[0] - 1
        self.sseq = max(self.sseq, 1)

    def reset(self, seq: int) -> int:
        """CONSUMER.RESET: start over at stream sequence `seq` (0: just past the ack floor), nothing pending,
        consumer sequences from 1; nats-server's limits on the deliver policy. Returns the sequence."""
        cfg = self.config
        policy = cfg["deliver_policy"]
        if seq == 0:
            seq = self.asflr + 1
        elif policy == "by_start_sequence":
            if seq < int(cfg["opt_start_seq"]):
                raise errors._e(400, 10204, "invalid reset: below start seq")
        elif policy == "by_start_time":
            if seq < self.stream.store.seq_for_time(parse_rfc3339(cfg["opt_start_time"])):
                raise errors._e(400, 10204, "invalid reset: below start time")
        elif policy != "all":
            raise errors._e(400, 10204, "invalid reset: not allowed")
        seq = max(seq, 1)
        old_floor = self.asflr
        self.pending.clear()
        self.rdc.clear()
        self.redeliver.clear()
        self._redeliver_set.clear()
        self._lps.clear()
        self.sseq = self._scan_from = seq
        self.dseq = self.adflr = 0
        self.asflr = seq - 1
        self.last_active = self.last_ack = 0
        self._npending = None
        self._replay_last = None
        if self.stream.config["retention"] == "interest":  # what nobody needs now goes (nats-server)
            self.stream.on_released(old_floor, seq)
        self.save_soon()
        self.kick()
        return seq

    # -- persistence ----------------------------------------------------------------------------------
    @property
    def persistent(self) -> bool:
        return self.durable and self.stream.directory is not None and self.stream.config["storage"] == "file"

    def state_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "config": self.config,
            "created": self.created,
            "sseq": self.sseq,
            "dseq": self.dseq,
            "asflr": self.asflr,
            "adflr": self.adflr,
            "pending": [[s, d] for s, (d, _) in self.pending.items()],
            "rdc": [[s, n] for s, n in self.rdc.items()],
            "lps": list(self._lps),
        }

    def _restore(self, state: dict[str, Any]) -> None:
        self.sseq = state["sseq"]
        self.dseq = state["dseq"]
        self.asflr = state["asflr"]
        self.adflr = state["adflr"]
        self._lps = deque(state.get("lps") or [])
        self.rdc = {int(s): int(n) for s, n in state.get("rdc") or []}
        # Whatever was pending when we went down is due for redelivery now (flow_control: at a reset).
        due = MAX_DURATION if self.ack_flow else 0
        for s, d in state.get("pending") or []:
            self.pending[int(s)] = (int(d), due)
        if not self.ack_flow:
            self._schedule_ack_check(0, 0)

    def save_soon(self) -> None:
        if self._save_timer is None and not self._stopped and self.persistent:
            self._save_timer = self.loop.call_later(0.05, self.save)

    def save_now(self) -> None:
        """Write the state before the caller answers: a created or updated durable the client was told of
        must survive a kill -9 that comes at once (nats-server writes it before its reply too)."""
        if self._save_timer is not None:
            self._save_timer.cancel()
        if not self._stopped:
            self.save()

    def save(self) -> None:
        self._save_timer = None
        directory = self.stream.directory
        if not self.persistent or directory is None:
            return
        data = json.dumps(self.state_json()).encode()
        # The paths are worked out (and the directory made) at the first save only: pathlib's joins, mkdir
        # and the legacy file's unlink at each of a busy consumer's saves (20 a second) were most of their
        # cost, 10-15% of the server's CPU pulling a file stream.
        if self._state_paths is not None:
            try:
                _write_replacing(self._state_paths, data)
                return
            except FileNotFoundError:  # its directory went from under it: made again
                self._state_paths = None
        # obs/<name>/state.json: a directory named as the consumer holds any name nats-server allows (255
        # bytes; "<name>.json.tmp" did not, and a 250-byte durable was acknowledged, then lost on restart).
        d = directory / "obs" / self.name
        d.mkdir(parents=True, exist_ok=True)
        paths = (str(d / "state.json.tmp"), str(d / "state.json"))
        _write_replacing(paths, data)
        self._state_paths = paths
        self._remove_legacy_state()

    def _remove_legacy_state(self) -> None:
        """obs/<name>.json, the layout before obs/<name>/ (a name near 255 bytes never had one)."""
        if self.stream.directory is not None and len(self.name.encode()) <= 250:
            (self.stream.directory / "obs" / f"{self.name}.json").unlink(missing_ok=True)

    def stop(self, deleted: bool = False) -> None:
        if self._stopped:
            return
        self._stopped = True
        timers = (
            self._ack_timer,
            self._hb_timer,
            self._idle_timer,
            self._replay_timer,
            self._pause_timer,
            self._pin_timer,
        )
        for t in (*timers, self._save_timer):
            if t is not None:
                t.cancel()
        if self._awaiting_interest:
            self._stop_awaiting_interest()
        if self._save_timer is not None and not deleted:
            self.save()
        if self._ack_sub is not None:
            self.account.client.unsubscribe(self._ack_sub)
        if self._fc_sub is not None:
            self.account.client.unsubscribe(self._fc_sub)
        for req in self.waiting:
            for t in req.timers:
                t.cancel()
            if deleted:
                self._status(req.reply, b"409 Consumer Deleted")
        self.waiting.clear()
        if deleted and self.stream.directory is not None:
            obs = self.stream.directory / "obs"
            shutil.rmtree(obs / self.name, ignore_errors=True)
            self._remove_legacy_state()
        if deleted:
            self.account.advisories.consumer_action(self.stream.name, self.name, "delete")

    # -- counts ---------------------------------------------------------------------------------------
    def num_pending(self) -> int:
        """Messages matching the filter at or past `sseq` (plus last_per_subject's initial ones)."""
        if self._npending is None:
            st = self.stream.store
            start = self.sseq
            if start > st.last_seq:
                n = 0
            elif not self.filters and start <= st.first_seq:
                n = st.msgs
            else:
                n = 0
                lists = (
                    [st.subjects.get(f) for f in self.filters]
                    if self._literal and self.filters
                    else [lst for subj, lst in st.subjects.items() if self._filter_match(subj)]
                )
                for lst in lists:
                    if lst:
                        n += lst.count_from(start)
            self._npending = n
        return self._npending + len(self._lps)

    def info(self, stored_config: bool = False) -> dict[str, Any]:
        """Consumer info; `stored_config`: the config as kept (lists), else with the server's metadata."""
        delivered: dict[str, Any] = {"consumer_seq": self.dseq, "stream_seq": max(self.sseq - 1, 0)}
        if self._lps:
            delivered["stream_seq"] = max(self._lps[0] - 1, 0)
        if self.last_active:
            delivered["last_active"] = rfc3339(self.last_active)
        if self.waiting:
            self._prune_waiting()  # as nats-server: num_waiting counts live requests only
        ack_floor: dict[str, Any] = {"consumer_seq": self.adflr, "stream_seq": self.asflr}
        if self.last_ack:
            ack_floor["last_active"] = rfc3339(self.last_ack)
        out: dict[str, Any] = {
            "stream_name": self.stream.name,
            "name": self.name,
            "created": rfc3339(self.created),
            "config": self.config if stored_config else with_server_metadata(self.config),
            "delivered": delivered,
            "ack_floor": ack_floor,
            "num_ack_pending": len(self.pending),
            "num_redelivered": len(self.rdc),
            "num_waiting": len(self.waiting),
            "num_pending": self.num_pending(),
        }
        if self.bound():
            out["push_bound"] = True
        remaining = self._pause_until - now_ns() if self._pause_until else 0
        if remaining > 0:
            out["paused"] = True
            out["pause_remaining"] = min(remaining, MAX_DURATION)
        groups = self.config.get("priority_groups")
        if groups:  # nats-server shows the first group's state only (one pin per consumer)
            state: dict[str, Any] = {"group": groups[0]}
            if self._pin_id:
                state["pinned_client_id"] = self._pin_id
            state["pinned_ts"] = rfc3339(self._pinned_ts) if self._pinned_ts else "0001-01-01T00:00:00Z"
            out["priority_groups"] = [state]
        return out

    # -- stream events --------------------------------------------------------------------------------
    def on_new_message(self, seq: int, subject: bytes) -> None:
        if self._npending is not None and seq >= self.sseq and self.wants(subject):
            self._npending += 1
        self.kick()

    def on_removed(self, gone: list[tuple[int, bytes]] | None = None) -> None:
        """Messages left the stream: count them out of num_pending (`None`: recount when next asked)."""
        if gone is None or self._npending is None:
            self._npending = None
            return
        for seq, subject in gone:
            if seq >= self.sseq and self.wants(subject):
                self._npending -= 1

    def on_purged(self, first_seq: int) -> None:
        self._npending = None
        if self.sseq < first_seq:
            self.sseq = first_seq
        if self.asflr < first_seq - 1:
            self.asflr = first_seq - 1
        for s in [s for s in self.pending if s < first_seq]:
            del self.pending[s]
        self._lps = deque([s for s in self._lps if s >= first_seq])
        self.save_soon()

    # -- delivery -------------------------------------------------------------------------------------
    def kick(self) -> None:
        if not self._scheduled and not self._stopped:
            self._scheduled = True
            self.loop.call_soon(self._deliver)

    def bound(self) -> bool:
        """A push consumer whose deliver subject has a subscriber (info's `push_bound`)."""
        return self.push and self._has_interest()

    def _has_interest(self) -> bool:
        res = self.account.client.sublist.match(self.config["deliver_subject"].encode())
        if self.config.get("deliver_group"):
            q = self.config["deliver_group"].encode()
            return any(g and g[0].queue == q for g in res.groups)
        return bool(res.groups) or _interested(res.plain)

    def _next(self) -> StoredMsg | None:
        """The next message to hand out: a due redelivery first (even at max_ack_pending, as nats-server:
        else a consumer whose worker died holding max_ack_pending messages never delivers again), then
        last_per_subject's, then new ones."""
        st = self.stream.store
        while self.redeliver:
            max_deliver = self.config.get("max_deliver", -1)
            seq = self.redeliver.popleft()
            self._redeliver_set.discard(seq)
            if seq in self.pending:
                if 0 < max_deliver <= self.rdc.get(seq, 1):
                    # A NAKed one delivered as often as allowed: nats-server drops it from pending, leaves
                    # the ack floor and num_redelivered as they are, and the stream keeps it.
                    del self.pending[seq]
                    self._max_deliveries(seq)
                    self.save_soon()
                    continue
                msg = st.load(seq)
                if msg is not None:
                    return msg
                self.pending.pop(seq, None)
        if self._blocked():
            return None
        while self._lps:
            seq = self._lps.popleft()
            msg = st.load(seq)
            if msg is not None:
                return msg
        start = self._scan_start()
        if start > st.last_seq:
            return None
        if self._literal and self.filters:  # straight from the subjects' own sequence lists
            found = st.next_seq_of(start, self.filters)
        else:
            found = st.next_seq(start, self.wants if self.filters else None)
        if found is None:
            self._scan_from = st.last_seq + 1
            self._npending = 0
            return None
        msg = st.load(found)
        self.sseq = found + 1
        if self._npending:
            self._npending -= 1
        return msg

    def _scan_start(self) -> int:
        return self.sseq if self.sseq > self._scan_from else self._scan_from

    def _blocked(self) -> bool:
        if self.ack_none:
            return False
        return len(self.pending) >= self._max_ack_pending > 0

    def _deliver(self) -> None:
        self._scheduled = False
        if self._stopped or self.paused():  # a pause's timer kicks the consumer when it ends
            return
        if self.push:
            self._deliver_push()
        else:
            self._deliver_pull()

    def _deliver_push(self) -> None:
        if not self._has_interest():
            if not self._awaiting_interest and (
                self.redeliver or self._lps or self._scan_start() <= self.stream.store.last_seq
            ):
                # Messages wait for a subscriber: the subject space calls back when one comes (no polling).
                self._awaiting_interest = True
                self.account.client.sublist.notify_on_interest(self._deliver_subject, self._interest_appeared)
            return
        now = self._inactive_since = now_ns()
        subject = self._deliver_subject
        flow_control = self._fc_sub is not None
        sent = 0
        while not flow_control or self._fc_pending_bytes <= self._fc_window:
            msg = self._next()
            if msg is None or self._replay_later(msg):
                return
            sent += 1
            if not sent & _CLOCK_EVERY:  # a clock reading per message was 5% of a push delivery's CPU
                now = now_ns()
            reply_size = self._send(subject, msg, now)
            if flow_control:
                size = len(subject) + reply_size + len(msg.data) + (len(msg.hdrs) if msg.hdrs else 0)
                self._fc_pending_bytes += size
                if self._fc_reply is None:
                    if self._fc_pending_bytes > self._fc_window // 2 or (self.ack_flow and self._blocked()):
                        self._send_flow_control(subject)
                elif self._fc_pending_bytes - self._fc_size >= self._fc_window:
                    self._fc_size += size

    def _replay_later(self, msg: StoredMsg) -> bool:
        """replay_policy original: True (message put back, delivery resumed later) while `msg` is early."""
        if not self._replay_original or msg.seq in self.pending:
            return False
        now = now_ns()
        if self._replay_last is not None:
            prev_ts, prev_sent = self._replay_last
            wait = (msg.ts - prev_ts) - (now - prev_sent)
            if wait > 0:
                self._unnext(msg)
                if self._replay_timer is None:
                    self._replay_timer = self.loop.call_later(wait / 1e9, self._replay_resume)
                return True
        self._replay_last = (msg.ts, now)
        return False

    def _replay_resume(self) -> None:
        self._replay_timer = None
        self.kick()

    def _interest_appeared(self) -> None:
        self._awaiting_interest = False
        self.kick()

    def _stop_awaiting_interest(self) -> None:
        self._awaiting_interest = False
        self.account.client.sublist.cancel_notification(self._deliver_subject, self._interest_appeared)

    def _send_flow_control(self, subject: bytes) -> None:
        self._fc_count += 1
        self._fc_reply = b"$JS.FC.%s.%s.%d" % (self.stream.name.encode(), self.name.encode(), self._fc_count)
        self._fc_size = self._fc_pending_bytes
        self.account.client.publish(subject, self._fc_reply, headers(b"100 FlowControl Request"), b"")

    def _on_fc(self, subject: bytes, reply: bytes | None, hdrs: bytes | None, payload: bytes) -> None:
        if subject == self._fc_reply and not self.account.client.origin_is_server:
            self._fc_reply = None
            self._fc_window = min(self._fc_window * 2, FC_WINDOW_LIMIT)
            self._fc_pending_bytes = max(self._fc_pending_bytes - self._fc_size, 0)
            self._fc_size = 0
            if self.ack_flow and hdrs:  # the answer tells what was taken: all up to it is acked
                last_stream = get_header(hdrs, b"Nats-Last-Stream")
                if last_stream is not None and last_stream.isdigit() and int(last_stream) > 0:
                    self._ack(int(last_stream), 0)
            self.kick()

    def _deliver_pull(self) -> None:
        scheduler = self._client.server.scheduler
        if not scheduler.collect():  # within a read (or a collection): written when that ends
            self._deliver_pull_run(None)
            return
        try:
            self._deliver_pull_run(scheduler)
        finally:
            scheduler.collected()

    def _deliver_pull_run(self, scheduler: FlushScheduler | None) -> None:
        """Hand the waiting requests what there is. With `scheduler` (collecting), the run's first message
        is written at once when its request wants more, the rest when the run ends (by the caller), not the
        whole batch by the queue's flusher a turn later: nats-py's fetch of 256 waits on the first byte (its
        median 0.96 ms -> 0.89 ms after the request, nats-server's 0.77; client-side wire timestamps)."""
        now = now_ns()
        if self._pause_until and now < self._pause_until:
            return  # requests wait (or expire) while paused; the pause's timer kicks the consumer
        sent = 0
        while self.waiting:
            req = self.waiting[0]
            if req.expires and now >= req.expires:
                self._finish(req, b"408 Request Timeout")
                continue
            if not self._reply_has_interest(req.reply):
                self._finish(req, None)
                continue
            msg = self._next()
            if msg is None:
                # Out of messages, no_wait requests get their answer, but not when only max_ack_pending
                # holds them (nats-server lets those wait for an ack, or their expiry).
                if not self._blocked():
                    self._answer_no_wait()
                return
            if self._policy != "none":
                chosen = self._priority_request()
                if chosen is None:  # as at the end of the stream for the no_wait requests (nats-server)
                    self._unnext(msg)
                    self._answer_no_wait()
                    return
                req = chosen
            if self._replay_later(msg):
                return
            size = 0
            if req.max_bytes:  # as nats-server counts it: subject, ack reply, headers and data
                size = len(msg.subject) + len(msg.data) + (len(msg.hdrs) if msg.hdrs else 0)
                size += self._ack_reply_size(msg)
                if req.sent_bytes + size > req.max_bytes:
                    self._unnext(msg)
                    if self._pin_fresh:  # a pin given for this message only goes with it (no advisory)
                        self._release_pin()
                    self._finish(req, b"409 Message Size Exceeds MaxBytes")
                    continue
            self._send(req.reply, msg, now)  # one clock reading for the batch, as the expiry checks
            req.sent += 1
            sent += 1
            if sent == 1 and scheduler is not None and req.sent < req.batch:
                scheduler.flush_now()  # the requester starts on it while the rest is built
            req.sent_bytes += size
            req.last_sent = now
            if req.sent >= req.batch or (req.max_bytes and req.sent_bytes == req.max_bytes):
                self._finish(req, None)
            elif len(self.waiting) > 1:
                # Waiting requests take turns, one message each, as in nats-server (prioritized: among the
                # requests of the same priority).
                if self._policy == "prioritized":
                    self.waiting.popleft()
                    self._queue_by_priority(req)
                else:
                    self.waiting.rotate(-1)

    def _prune_waiting(self) -> None:
        """Drop the pull requests that expired (408) or whose requester stopped listening (no answer)."""
        now = now_ns()
        for req in list(self.waiting):
            self._drop_if_done(req, now)

    def _drop_if_done(self, req: PullRequest, now: int) -> bool:
        """Finish `req` if it expired (408) or its requester stopped listening (no answer): True if so."""
        if req.expires and now >= req.expires:
            self._finish(req, b"408 Request Timeout")
            return True
        if not self._reply_has_interest(req.reply):
            self._finish(req, None)
            return True
        return False

    def _answer_no_wait(self) -> None:
        """At the end of the stream: a no_wait request that got messages, or has no expiry, is answered 404
        (nats-server's one-shot: with an expiry and nothing sent yet it waits for a first message)."""
        for req in [r for r in self.waiting if r.no_wait and (r.sent or not r.expires)]:
            self._finish(req, b"404 No Messages")

    def _ack_reply_size(self, msg: StoredMsg) -> int:
        """The length of the ack reply `_send` would give `msg` now (max_bytes counts it)."""
        n = self.rdc.get(msg.seq, 1) + (1 if msg.seq in self.pending else 0)
        return len(self._ack_prefix) + len(
            b"%d.%d.%d.%d.%d" % (n, msg.seq, self.dseq + 1, msg.ts, self.num_pending())
        )

    def _unnext(self, msg: StoredMsg) -> None:
        """Put back a message taken by `_next` but not sent."""
        if msg.seq in self.pending:
            self.redeliver.appendleft(msg.seq)
            self._redeliver_set.add(msg.seq)
        elif self.sseq == msg.seq + 1:
            self.sseq = msg.seq
            if self._npending is not None:
                self._npending += 1
        else:
            self._lps.appendleft(msg.seq)

    def _reply_has_interest(self, reply: bytes) -> bool:
        """Someone listens on a pull request's reply subject. Asked before each message of a batch: the
        answer is kept while the subject space is unchanged (its generation), as matching again could not
        answer otherwise; the lookup is the server's own, not a publish, so it is not counted as one."""
        sublist = self._client.sublist
        seen_reply, generation, seen = self._interest_seen
        if generation == sublist.generation and seen_reply == reply:
            return seen
        res = sublist.match(reply)
        interested = bool(res.groups) or _interested(res.plain)
        self._interest_seen = (reply, sublist.generation, interested)
        return interested

    def _finish(self, req: PullRequest, status: bytes | None) -> None:
        for t in req.timers:
            t.cancel()
        try:
            self.waiting.remove(req)
        except ValueError:
            return
        if status is not None:
            pairs = None
            if not status.startswith(b"404"):
                pairs = [
                    (b"Nats-Pending-Messages", b"%d" % (req.batch - req.sent)),
                    (b"Nats-Pending-Bytes", b"%d" % (max(req.max_bytes - req.sent_bytes, 0))),
                ]
            self._status(req.reply, status, pairs)

    def _status(self, reply: bytes, status: bytes, pairs: list[tuple[bytes, bytes]] | None = None) -> None:
        self.account.client.publish(reply, None, headers(status, pairs), b"")

    def _send(self, subject: bytes, msg: StoredMsg, now: int) -> int:
        """Deliver `msg` to `subject` at `now` (ns); returns the length of its ack reply (flow control counts
        it)."""
        seq = msg.seq
        self.last_active = now
        self._delivered_since_hb = True
        self.dseq += 1
        n = self.rdc.get(seq, 1)
        if seq in self.pending:
            n += 1
            self.rdc[seq] = n
        elif seq < self._first_pending:  # (after a reset) below the oldest seen: look it up again
            self._first_pending = 0
        reply = self._ack_subject(n, seq, msg.ts)  # the stored time, as nats-server (not the delivery)
        if self.ack_none:
            self.asflr = max(self.asflr, seq)
            self.adflr = self.dseq
        elif self.ack_flow:  # never redelivered by a timer: only a reset (the feed made again) sends it again
            self.pending[seq] = (self.dseq, MAX_DURATION)
        else:
            due = now + self._ack_wait(n)
            self.pending[seq] = (self.dseq, due)
            if self._ack_timer is None or due < self._ack_due:  # (else the check's timer covers it)
                self._schedule_ack_check(due, now)
        hdrs, data = msg.hdrs, msg.data
        if self._headers_only:
            size = b"Nats-Msg-Size: %d\r\n\r\n" % len(data)
            hdrs = (hdrs[:-2] if hdrs else b"NATS/1.0\r\n") + size
            data = b""
        if self._policy == "pinned_client":  # every message tells the pinned client its pin
            pin = b"Nats-Pin-Id: %s\r\n\r\n" % self._pin_id.encode()
            hdrs = (hdrs[:-2] if hdrs else b"NATS/1.0\r\n") + pin
        self._client.publish(subject, reply, hdrs, data, shown_as=msg.subject)
        if self.ack_none:
            self.stream.on_acked(seq)  # nothing to wait for: interest/workqueue retention may drop it
        if self._save_timer is None:
            self.save_soon()
        return len(reply)

    def _ack_subject(self, n: int, seq: int, stored_ts: int) -> bytes:
        if n == 1:  # a first delivery: the count is in the prefix (one number fewer to spell out)
            return b"%s%d.%d.%d.%d" % (self._ack_prefix_first, seq, self.dseq, stored_ts, self.num_pending())
        return b"%s%d.%d.%d.%d.%d" % (self._ack_prefix, n, seq, self.dseq, stored_ts, self.num_pending())

    def _ack_wait(self, deliveries: int) -> int:
        backoff = self._backoff
        if backoff:
            return backoff[min(deliveries - 1, len(backoff) - 1)]
        return self._ack_wait_ns

    # -- ack timers -----------------------------------------------------------------------------------
    def _schedule_ack_check(self, due: int, now: int) -> None:
        """Check the acks at `due` (ns) at the latest: a sooner deadline (a NAK delay, a shorter backoff step)
        moves the timer up, else it would wait for the later one."""
        if self._stopped:
            return
        timer = self._ack_timer
        if timer is not None:
            if due >= self._ack_due:
                return
            timer.cancel()
        self._ack_due = due
        self._ack_timer = self.loop.call_later(max(due - now, 0) / 1e9 + 0.001, self._check_acks)

    def _check_acks(self) -> None:
        self._ack_timer = None
        now = now_ns()
        soonest = 0
        max_deliver = self.config.get("max_deliver", -1)
        given_up = False  # a slot under max_ack_pending was freed: new messages may flow again
        for seq, (_, deadline) in list(self.pending.items()):
            if deadline <= now:
                if seq in self._redeliver_set:
                    continue
                if max_deliver > 0 and self.rdc.get(seq, 1) >= max_deliver:
                    # Delivered as often as allowed: not sent again, but still counted as redelivered.
                    del self.pending[seq]
                    self._max_deliveries(seq)
                    self._acks_done([seq], forget_deliveries=False)
                    given_up = True
                    continue
                self.redeliver.append(seq)
                self._redeliver_set.add(seq)
            elif soonest == 0 or deadline < soonest:
                soonest = deadline
        if self.redeliver or given_up:
            self.kick()
        if soonest:
            self._schedule_ack_check(soonest, now)

    # -- acks -----------------------------------------------------------------------------------------
    def _on_ack(self, subject: bytes, reply: bytes | None, hdrs: bytes | None, payload: bytes) -> None:
        parts = subject.split(b".")
        if len(parts) < 9 or self.account.client.origin_is_server:  # a delivery is nobody's ack
            return
        try:
            sseq, dseq = int(parts[5]), int(parts[6])
        except ValueError:
            return
        kind = payload[:4]
        self._inactive_since = now_ns()
        if kind in (b"", b"+ACK"):
            self._ack(sseq, dseq)
        elif kind == b"-NAK":
            self._nak(sseq, dseq, int(parts[4]) if parts[4].isdigit() else 0, payload[4:])
        elif kind == b"+WPI":
            entry = self.pending.get(sseq)
            if entry is not None:
                self.pending[sseq] = (entry[0], now_ns() + self._ack_wait(self.rdc.get(sseq, 1)))
        elif kind == b"+NXT":
            self._ack(sseq, dseq)
            if reply and not self.push:
                self._add_request(reply, payload[4:].strip())
        elif kind == b"+TER":
            if sseq in self.pending:
                del self.pending[sseq]
                self._acks_done([sseq])
            # Told whether or not it was still pending, as nats-server tells it.
            reason = payload[5:].strip().decode(errors="replace")
            self.account.advisories.delivery(
                b"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED" + self._event_suffix,
                "terminated",
                self._names,
                (dseq, sseq),
                int(parts[4]) if parts[4].isdigit() else 0,
                reason,
            )
        if reply and kind != b"+NXT":
            self.stream.reply_after_writes(reply)  # after the write of the removal it may confirm
        self.kick()

    def _ack(self, sseq: int, dseq: int) -> None:
        if self.ack_all:
            acked = [s for s in self.pending if s <= sseq]
            if acked:
                for s in acked:
                    del self.pending[s]
                self._acks_done(acked)
            return
        entry = self.pending.pop(sseq, None)
        if entry is not None:
            if self._sample_freq and (self._sample_freq >= 100 or random.randrange(100) <= self._sample_freq):
                self._sample_ack(sseq, dseq, entry[1])
            self._acks_done([sseq])

    def _sample_ack(self, sseq: int, dseq: int, deadline: int) -> None:
        """The ack metric: the ack's delay since the delivery (its deadline less the wait it was given)."""
        deliveries = self.rdc.get(sseq, 1)
        delay = now_ns() - (deadline - self._ack_wait(deliveries))
        subject = b"$JS.EVENT.METRIC.CONSUMER.ACK" + self._event_suffix
        self.account.advisories.ack_sample(subject, self._names, (dseq, sseq), delay, deliveries)

    def _max_deliveries(self, sseq: int) -> None:
        self.account.advisories.max_deliveries(
            b"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES" + self._event_suffix,
            self._names,
            sseq,
            self.rdc.get(sseq, 1),
        )

    def _acks_done(self, seqs: list[int], forget_deliveries: bool = True) -> None:
        """`seqs` (out of `pending` already) will not be delivered again: move the ack floor once, tell the
        stream (interest/workqueue). Once per AckAll, not per message: the floor's look at the oldest
        pending entry walks past the entries just deleted (a batch of 1,000 acked cost 0.5M steps).
        `forget_deliveries` False (max_deliver reached): their delivery counts stay in num_redelivered."""
        if self.rdc and forget_deliveries:
            for sseq in seqs:
                self.rdc.pop(sseq, None)
        self.last_ack = now_ns()
        # `pending` is in delivery order, which is stream order (redeliveries keep their first place): its
        # oldest is its first key. That is looked up again only once it is gone, first among the sequences
        # just after it: a dict's iteration steps over the slots of every key deleted since its last resize,
        # and explicit acks in order delete from the front (1,000 pending acked one by one: 1.7 µs an ack).
        pending = self.pending
        oldest: int | None = self._first_pending
        if not oldest or oldest not in pending:
            found = 0
            if oldest:
                for seq in range(oldest + 1, oldest + _OLDEST_PROBES):
                    if seq in pending:
                        found = seq
                        break
            oldest = self._first_pending = found or next(iter(pending), 0)
            if not oldest:
                oldest = None
        if oldest is not None:
            floor = oldest - 1
        else:
            floor = self.sseq - 1 if not self._lps else max(self._lps[0] - 1, self.asflr)
        if floor > self.asflr:
            self.asflr = floor
            self.adflr = self.pending[oldest][0] - 1 if oldest is not None else self.dseq
        elif not self.pending:
            self.adflr = self.dseq
        stream = self.stream
        for sseq in seqs:
            stream.on_acked(sseq)
        self.save_soon()

    def _nak(self, sseq: int, dseq: int, deliveries: int, rest: bytes) -> None:
        entry = self.pending.get(sseq)
        if entry is None or not self.adflr < dseq <= self.dseq:
            return
        self.account.advisories.delivery(
            b"$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED" + self._event_suffix,
            "nak",
            self._names,
            (dseq, sseq),
            deliveries,
        )
        delay = 0
        rest = rest.strip()
        if rest.startswith(b"{"):
            try:
                delay = int(gojson.loads(rest)[-1].get("delay") or 0)  # bounded depth
            except (ValueError, AttributeError, IndexError, TypeError):
                delay = 0
        elif rest:  # `-NAK 600ms`: a Go duration, as nats-server takes it (a bad one is a plain NAK)
            try:
                delay = int(parse_duration("delay", rest.decode("utf-8", "replace")) * 1e9)
            except ConfigValueError:
                delay = 0
        if delay > 0:
            # nats-server dates the delivery back by ack_wait and forward by the delay, then checks it
            # against the backoff step of its delivery count: with backoff, `delay - ack_wait + step`.
            now = now_ns()
            due = now + delay - self._ack_wait_ns + self._ack_wait(self.rdc.get(sseq, 1))
            self.pending[sseq] = (entry[0], due)
            self._schedule_ack_check(due, now)
        elif sseq not in self._redeliver_set:
            self.redeliver.append(sseq)
            self._redeliver_set.add(sseq)

    def needs(self, sseq: int, subject: bytes) -> bool:
        """True while this consumer may still deliver or await an ack for `sseq` (interest retention)."""
        if not self.wants(subject):
            return False
        return sseq in self.pending or sseq >= self.sseq or sseq in self._lps

    # -- pull requests --------------------------------------------------------------------------------
    def request_next(self, reply: bytes | None, payload: bytes) -> None:
        if not reply:
            return
        if self.push:
            self._status(reply, b"409 Consumer is push based")
            return
        self._add_request(reply, payload.strip())

    def _add_request(self, reply: bytes, body: bytes) -> None:
        batch, max_bytes, no_wait, expires, hb = 1, 0, False, 0, 0
        group: dict[str, Any] | None = None
        if body.startswith(b"{"):
            req = _pull_request(body)
            if isinstance(req, str):
                self._status(reply, b"400 Bad Request - " + req.encode())
                return
            batch = int(req.get("batch") or 1)
            max_bytes = int(req.get("max_bytes") or 0)
            no_wait = bool(req.get("no_wait"))
            expires = int(req.get("expires") or 0)
            hb = int(req.get("idle_heartbeat") or 0)
            group = {k: req.get(k) or zero for k, zero in _PRIORITY_ZEROS.items()}
        elif body:
            try:
                batch = int(body)
            except ValueError:
                batch = 1
        refusal = self._refuse_request(batch, max_bytes, expires, hb) or self._refuse_priority(group)
        if refusal:
            self._status(reply, refusal)
            return
        if no_wait:
            available = self.num_pending() + len(self.redeliver)
            if not available and not expires:
                self._status(reply, b"404 No Messages")
                return
            if available and available < sum(r.batch - r.sent for r in self.waiting):
                self._status(reply, b"408 Requests Pending")
                return
        if len(self.waiting) >= self.config.get("max_waiting", MAX_WAITING_DEFAULT):
            self._status(reply, b"409 Exceeded MaxWaiting")
            return
        now = now_ns()
        self._inactive_since = now
        req_ = PullRequest(reply, batch, max_bytes, no_wait, now + expires if expires else 0, hb)
        if group is not None:
            req_.group, req_.pin_id = group["group"], group["id"]
            req_.min_pending, req_.min_ack_pending = group["min_pending"], group["min_ack_pending"]
            req_.priority = group["priority"]
        if self._policy == "prioritized":
            self._queue_by_priority(req_)
        else:
            self.waiting.append(req_)
        if expires:
            req_.timers.append(self.loop.call_later(expires / 1e9, self._expire, req_))
        if hb:
            req_.timers.append(self.loop.call_later(hb / 1e9, self._pull_heartbeat, req_))
        self._deliver_pull()

    def _refuse_request(self, batch: int, max_bytes: int, expires: int, hb: int) -> bytes:
        """The status refusing a pull request outright (nats-server's checks, in its order), or b""."""
        cfg = self.config
        if batch <= 0:
            return b"400 Bad Request - batch size must be positive"
        if hb and expires and hb * 2 > expires:
            return b"400 Bad Request - heartbeat value too large"
        if cfg.get("max_batch") and batch > cfg["max_batch"]:
            return b"409 Exceeded MaxRequestBatch of %d" % cfg["max_batch"]
        if cfg.get("max_expires") and expires > cfg["max_expires"]:
            return b"409 Exceeded MaxRequestExpires of %s" % _go_duration(cfg["max_expires"]).encode()
        if cfg.get("max_bytes") and max_bytes > cfg["max_bytes"]:
            return b"409 Exceeded MaxRequestMaxBytes of %d" % cfg["max_bytes"]
        return b""

    def _refuse_priority(self, group: dict[str, Any] | None) -> bytes:
        """The status refusing a request's priority group fields (nats-server's checks, in its order), or
        b"". A request of the pinned client keeps its pin: the pin's timeout starts over."""
        if group is None:
            return b""
        policy = self._policy
        if (group["min_pending"] or group["min_ack_pending"]) and policy != "overflow":
            return b"400 Bad Request - Not a Overflow Priority consumer"
        if group["id"] and policy != "pinned_client":
            return b"400 Bad Request - Not a Pinned Client Priority consumer"
        if not 0 <= group["priority"] <= 9:
            return b"400 Bad Request - Priority must be between 0 and 9"
        if policy == "none":
            return b""
        if not group["group"]:
            return b"400 Bad Request - Priority Group missing"
        if group["group"] not in (self.config.get("priority_groups") or ()):
            return b"400 Bad Request - Invalid Priority Group"
        if self._pin_id:
            if group["id"] == self._pin_id:
                self._set_pin_timer(group["group"])
            elif group["id"]:
                return b"423 Nats-Pin-Id mismatch"
        return b""

    def _queue_by_priority(self, req: PullRequest) -> None:
        """Into `waiting` after every request of the same or a lower priority number (prioritized policy)."""
        waiting = self.waiting
        at = len(waiting)
        for i, other in enumerate(waiting):
            if other.priority > req.priority:
                at = i
                break
        waiting.insert(at, req)

    # -- priority groups: the pinned client -----------------------------------------------------------
    def _priority_request(self) -> PullRequest | None:
        """The request the next message goes to under a priority policy, brought to the front of `waiting`
        (None: no request may take it now). nats-server's choice: the pinned client's requests only (the
        first request without an id gets the pin when there is none; one with another id is told 423), and
        with overflow, a request with min_pending/min_ack_pending only once the consumer is that far
        behind."""
        waiting = self.waiting
        cycled = 0
        now = now_ns()
        self._pin_fresh = False
        while waiting:
            req = waiting[0]
            if self._drop_if_done(req, now):
                continue
            if not self._pin_id and self._policy == "pinned_client":
                if req.pin_id:
                    self._finish(req, b"423 Nats-Wrong-Pin-Id")
                    continue
                self._assign_pin(req)
            elif self._pin_id and req.pin_id != self._pin_id:
                if req.pin_id:
                    self._finish(req, b"423 Nats-Wrong-Pin-Id")
                    continue
                waiting.rotate(-1)
                cycled += 1
                if cycled >= len(waiting):
                    return None
                continue
            if self._policy == "overflow" and (req.min_pending > 0 or req.min_ack_pending > 0):
                # The message in hand is counted in (nats-server's `npc+1`: it takes it out first).
                behind = (0 < req.min_pending <= self.num_pending() + 1) or (
                    0 < req.min_ack_pending <= len(self.pending)
                )
                if not behind:
                    waiting.rotate(-1)
                    cycled += 1
                    if cycled >= len(waiting):
                        return None
                    continue
            return req
        return None

    def _assign_pin(self, req: PullRequest) -> None:
        """Pin the consumer's group to the client of `req` (a request without priority fields pins none)."""
        if not req.group:
            return
        self._pin_id = _pin_ids.next()
        self._pinned_ts = now_ns()
        self._pin_fresh = True
        req.pin_id = self._pin_id
        self._set_pin_timer(req.group)
        self.account.advisories.consumer_pin(self._names, req.group, pinned_id=self._pin_id)

    def _set_pin_timer(self, group: str) -> None:
        """The pin ends priority_timeout after it was given or its client's last request."""
        if self._pin_timer is not None:
            self._pin_timer.cancel()
        if not self._stopped:
            timeout = int(self.config.get("priority_timeout") or PINNED_TTL_DEFAULT)
            self._pin_timer = self.loop.call_later(timeout / 1e9, self._pin_timed_out, group)

    def _pin_timed_out(self, group: str) -> None:
        self._pin_timer = None
        if self._pin_id:
            self.unpin(group, "timeout")

    def unpin(self, group: str, reason: str) -> None:
        """The pin let go (`reason`: "admin" for CONSUMER.UNPIN, "timeout"): the next request without an id
        takes it."""
        self._release_pin()
        self.account.advisories.consumer_pin(self._names, group, reason=reason)
        self.kick()

    def _release_pin(self) -> None:
        self._pin_id = ""
        self._pinned_ts = 0
        if self._pin_timer is not None:
            self._pin_timer.cancel()
            self._pin_timer = None

    def _expire(self, req: PullRequest) -> None:
        if req in self.waiting:
            self._finish(req, b"408 Request Timeout")

    def _pull_heartbeat(self, req: PullRequest) -> None:
        if req not in self.waiting:
            return
        quiet = now_ns() - req.last_sent
        if quiet >= req.heartbeat:
            self._status(req.reply, b"100 Idle Heartbeat")
            quiet = 0
        req.timers.append(self.loop.call_later((req.heartbeat - quiet) / 1e9, self._pull_heartbeat, req))

    # -- push heartbeats, inactivity ------------------------------------------------------------------
    def _heartbeat(self) -> None:
        interval = self.config["idle_heartbeat"] / 1e9
        self._hb_timer = self.loop.call_later(interval, self._heartbeat)
        if self._delivered_since_hb:
            self._delivered_since_hb = False
            return
        if not self._has_interest():
            return
        pairs = [
            (b"Nats-Last-Consumer", b"%d" % self.dseq),
            (b"Nats-Last-Stream", b"%d" % max(self.sseq - 1, 0)),
        ]
        if self._fc_reply is not None:
            pairs.append((b"Nats-Consumer-Stalled", self._fc_reply))
        deliver = self.config["deliver_subject"].encode()
        self.account.client.publish(deliver, None, headers(b"100 Idle Heartbeat", pairs), b"")
        if self.ack_flow and self.pending and self._fc_reply is None:  # the acks of the last deliveries
            self._send_flow_control(deliver)

    def watch_inactivity(self) -> None:
        """(Re)start the inactivity timer for the config's inactive_threshold (none: never deleted)."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        threshold = self.config.get("inactive_threshold", 0)
        if threshold and not self._stopped:
            self._inactive_since = now_ns()
            self._idle_timer = self.loop.call_later(threshold / 1e9, self._check_inactive)

    def _check_inactive(self) -> None:
        threshold = self.config["inactive_threshold"]
        self._idle_timer = None
        now = now_ns()
        active = bool(self.waiting) or (self.push and self._has_interest())
        if active:
            self._inactive_since = now
        elif now - self._inactive_since >= threshold:
            self.stream.account.delete_consumer(self.stream, self.name)
            return
        wait = max(threshold - (now - self._inactive_since), threshold // 4, 50_000_000)
        self._idle_timer = self.loop.call_later(wait / 1e9, self._check_inactive)


_pin_ids = Nuid()  # pins are NUIDs, as nats-server's
# A pull request's fields and their JSON types (bool apart from int, as Go has them); its priority group
# fields with their zero values.
_PULL_TYPES: dict[str, type] = {
    "expires": int, "batch": int, "max_bytes": int, "no_wait": bool, "idle_heartbeat": int,
    "group": str, "min_pending": int, "min_ack_pending": int, "id": str, "priority": int,
}  # fmt: skip
_PRIORITY_ZEROS: dict[str, Any] = {
    "group": "", "id": "", "min_pending": 0, "min_ack_pending": 0, "priority": 0,
}  # fmt: skip
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _write_replacing(paths: tuple[str, str], data: bytes) -> None:
    """Write `data` to the temporary path, then rename it over the final one (a crash leaves either)."""
    tmp, final = paths
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, final)


def _typed(value: Any, kind: type) -> bool:
    if value is None:
        return True  # JSON null: Go leaves the field as it was
    if kind is int:
        return type(value) is int and _INT64[0] <= value <= _INT64[1]
    return type(value) is kind


def _pull_request(body: bytes) -> dict[str, Any] | str:
    """A JSON pull request's fields, or nats-server's json.Unmarshal error for it (its words, one line)."""
    try:
        values = gojson.loads(body)  # bounded depth: a deep body is a bad request, not a traceback
    except gojson.GoJsonError:
        values = []
    req: dict[str, Any] = values[0] if len(values) == 1 and isinstance(values[0], dict) else {}
    if req and all(_typed(req.get(k), kind) for k, kind in _PULL_TYPES.items()):
        return req
    try:  # the slow way, for Go's words
        gojson.unmarshal(body, requests.PULL_REQUEST)
    except gojson.GoJsonError as exc:
        return " ".join(str(exc).split())
    return {k: v for k, v in req.items() if _typed(v, _PULL_TYPES.get(k, type(v)))}


def _go_duration(ns: int) -> str:
    """Go's time.Duration String() for the whole-millisecond and larger values a config holds."""
    if ns % 1_000_000_000 == 0:
        secs = ns // 1_000_000_000
        h, rest = divmod(secs, 3600)
        m, sec = divmod(rest, 60)
        return (f"{h}h" if h else "") + (f"{m}m" if h or m else "") + f"{sec}s"
    return f"{ns / 1e6:g}ms" if ns < 1_000_000_000 else f"{ns / 1e9:g}s"


def _interested(plain: tuple[Subscription, ...]) -> bool:
    """Someone subscribes among `plain`: an outbound gateway's catch-all `>` (it takes every message of the
    account to filter them) is nobody's interest; interest in another cluster is not seen here."""
    return any(not sub.conn.is_gateway for sub in plain)
