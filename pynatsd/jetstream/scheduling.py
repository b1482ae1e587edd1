"""Message schedules (`allow_msg_schedules`, nats-server 2.12): a message with `Nats-Schedule` is stored as a
schedule and, when it fires, a copy is stored on its `Nats-Schedule-Target` (nats-server's headers added).

Patterns: `@at <RFC 3339>` (once, then the schedule is purged), `@every <Go duration>` (at least 1s), cron
with six fields (seconds first; names for months and weekdays; `@hourly`, `@daily`...) in an optional
`Nats-Schedule-Time-Zone`. Further headers: `Nats-Schedule-TTL` (the copy's Nats-TTL), `-Rollup` (`sub`),
`-Source` (the copy takes the last message of that subject instead). The copy names its schedule in
`Nats-Scheduler` and the next firing (or `purge`) in `Nats-Schedule-Next`.

Nothing here is written to disk: the schedules are the last message of their subjects (each a subject
rollup), found again after a restart, and a repeating one's next firing is in its last copy's header."""

from __future__ import annotations

import calendar
import contextlib
import heapq
import re
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from pynatsd.base.logging import get_logger
from pynatsd.jetstream import errors
from pynatsd.jetstream.errors import ApiError
from pynatsd.jetstream.util import get_header, go_duration_ns, now_ns, parse_msg_ttl, parse_rfc3339, rfc3339
from pynatsd.protocol.subjects import is_literal_subject, is_valid_subject, overlap

if TYPE_CHECKING:
    from pynatsd.jetstream.stream import Stream

log = get_logger()

SEC = 1_000_000_000
MIN_FIRE_DELAY = 0.25  # nats-server fires at most every 250 ms (more would slow the stream's ingest)
_GO_ZERO_TIME_NS = -62_135_596_800 * SEC  # 0001-01-01T00:00:00Z: Go's zero time, "no schedule"
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
_ATOI = re.compile(r"[+-]?[0-9]+")
_PREDEFINED = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}
_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTHS = {m: i + 1 for i, m in enumerate(_MONTH_NAMES)}
_WEEKDAYS = {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
# Each cron field's bounds and names: seconds, minutes, hours, day of month, month, day of week.
_FIELDS: list[tuple[int, int, dict[str, int] | None]] = [
    (0, 59, None), (0, 59, None), (0, 23, None), (1, 31, None), (1, 12, _MONTHS), (0, 6, _WEEKDAYS),
]  # fmt: skip
_STAR = 1 << 63  # the field was `*` or `?` (day of month and day of week then both have to match)


def disabled() -> ApiError:
    return errors._e(400, 10188, "message schedules is disabled")


def pattern_invalid() -> ApiError:
    return errors._e(400, 10189, "message schedules pattern is invalid")


def target_invalid() -> ApiError:
    return errors._e(400, 10190, "message schedules target is invalid")


def ttl_invalid() -> ApiError:
    return errors._e(400, 10191, "message schedules invalid per-message TTL")


def rollup_invalid() -> ApiError:
    return errors._e(400, 10192, "message schedules invalid rollup")


def source_invalid() -> ApiError:
    return errors._e(400, 10203, "message schedules source is invalid")


def scheduler_invalid() -> ApiError:
    return errors._e(400, 10212, "message schedules invalid scheduler")


def time_zone_invalid() -> ApiError:
    return errors._e(400, 10223, "message schedules time zone is invalid")


def check_config(cfg: dict[str, Any]) -> None:
    """What a stream with schedules cannot be (nats-server's checkStreamCfg words); the roll-ups it needs
    switched on as nats-server does (pedantic, which would refuse, is refused)."""
    if not cfg.get("allow_msg_schedules"):
        return
    if cfg["discard"] == "new":
        raise errors.stream_invalid_config("message scheduling cannot use discard new")
    if not cfg["allow_rollup_hdrs"]:
        cfg["allow_rollup_hdrs"], cfg["deny_purge"] = True, False


# -- patterns -----------------------------------------------------------------------------------------
def _location(hdrs: bytes) -> tzinfo | None:
    """The Nats-Schedule-Time-Zone (None without one); ApiError for an empty or unknown one."""
    raw = get_header(hdrs, b"Nats-Schedule-Time-Zone")
    if raw is None:
        return None
    name = raw.decode("utf-8", "replace")
    if name == "Local":  # Go's name for the server's own zone
        return datetime.now().astimezone().tzinfo
    if not name:
        raise time_zone_invalid()
    try:
        return UTC if name == "UTC" else ZoneInfo(name)
    except (ValueError, OSError):  # unknown (ZoneInfoNotFoundError is a KeyError)
        raise time_zone_invalid() from None
    except KeyError:
        raise time_zone_invalid() from None


def next_firing(hdrs: bytes | None, ts: int) -> tuple[int, bool, tzinfo | None]:
    """When the schedule in `hdrs` fires next after `ts` (ns; 0: it has none), whether it repeats, and its
    time zone; ApiError for a bad time zone or pattern."""
    if not hdrs:
        return 0, False, None
    loc = _location(hdrs)
    raw = get_header(hdrs, b"Nats-Schedule") or b""
    parsed = parse_pattern(raw.decode("utf-8", "replace"), loc, ts)
    if parsed is None:
        raise pattern_invalid()
    when, repeat = parsed
    return (0 if when == _GO_ZERO_TIME_NS else when), repeat, loc


def parse_pattern(pattern: str, loc: tzinfo | None, ts: int) -> tuple[int, bool] | None:
    """nats-server's reading of a schedule pattern: (next firing in ns, repeats), (0, False) for none,
    None when invalid. A repeating schedule whose next firing is past fires once, from now on."""
    if not pattern:
        return 0, False
    if pattern.startswith("@at "):
        text = pattern[4:]
        if loc is not None or not _RFC3339.fullmatch(text):
            return None
        try:
            return parse_rfc3339(text), False
        except ValueError:
            return None
    if pattern.startswith("@every "):
        ns = go_duration_ns(pattern[7:])
        if loc is not None or ns is None or ns < SEC:
            return None
        now = now_ns()
        when = _round_second(ts) + int(ns)
        if when < now:
            when = _round_second(now) + int(ns)
        return when, True
    pattern = _PREDEFINED.get(pattern, pattern)
    cron = parse_cron(pattern, loc, ts)
    now = now_ns()
    if cron is not None and cron < now:
        cron = parse_cron(pattern, loc, _round_second(now))
    return None if cron is None else (cron, True)


def _round_second(ns: int) -> int:
    """Go's Time.Round(time.Second): halves away from zero."""
    return (ns + SEC // 2) // SEC * SEC


def _field_bits(field: str, low: int, high: int, names: dict[str, int] | None) -> int | None:
    """A cron field's comma-separated ranges (`*`, `?`, `n`, `a-b`, each with an optional `/step`) as a
    bit set; None when invalid."""
    bits = 0
    for expr in (part for part in field.split(",") if part):
        range_step = expr.split("/")
        low_high = range_step[0].split("-")
        extra = 0
        if low_high[0] in ("*", "?"):
            start, end, extra = low, high, _STAR
        else:
            values = [_int_or_name(v, names) for v in low_high]
            if len(values) > 2 or None in values:
                return None
            start = values[0] or 0
            end = values[-1] or 0
        step = 1
        if len(range_step) > 2:
            return None
        if len(range_step) == 2:
            parsed = _int_or_name(range_step[1], None)
            if parsed is None:
                return None
            step = parsed
            if len(low_high) == 1:  # "n/step" runs from n to the field's end
                end = high
            if step > 1:
                extra = 0
        if start < low or end > high or start > end or step == 0:
            return None
        for i in range(start, end + 1, step):
            bits |= 1 << i
        bits |= extra
    return bits


def _int_or_name(text: str, names: dict[str, int] | None) -> int | None:
    if names is not None and text.lower() in names:
        return names[text.lower()]
    if not _ATOI.fullmatch(text) or int(text) < 0:
        return None
    return int(text)


def parse_cron(pattern: str, loc: tzinfo | None, ts: int) -> int | None:
    """The first second after `ts` (ns) a six-field cron pattern matches, in `loc` (UTC without one), within
    five years; None for an invalid pattern or none in range."""
    fields = pattern.split()
    if len(fields) != 6:
        return None
    bits = [_field_bits(f, low, high, names) for f, (low, high, names) in zip(fields, _FIELDS, strict=True)]
    if None in bits:
        return None
    second, minute, hour, dom, month, dow = (b or 0 for b in bits)
    zone = loc or UTC
    t = datetime.fromtimestamp(ts // SEC + 1, zone)  # the earliest: the next whole second
    truncated = False  # the fields below the first one moved are zeroed once
    year_limit = t.year + 5
    while t.year <= year_limit:  # a field moving past its end starts again from the month
        wrapped = False
        while not month >> t.month & 1:
            if not truncated:
                truncated = True
                t = _wall(t.year, t.month, 1, zone)
            t = _wall(t.year, t.month + 1, t.day, zone, t.hour, t.minute, t.second)
            if t.month == 1:
                wrapped = True
                break
        if wrapped:
            continue
        while not _day_matches(dom, dow, t):
            if not truncated:
                truncated = True
                t = _wall(t.year, t.month, t.day, zone)
            t = _wall(t.year, t.month, t.day + 1, zone, t.hour, t.minute, t.second)
            if t.day == 1:
                wrapped = True
                break
        if wrapped:
            continue
        for unit, bitset in ((3600, hour), (60, minute), (1, second)):
            while not bitset >> _clock(t, unit) & 1:
                if not truncated:
                    truncated = True
                    t = _truncate(t, unit)
                t = (t.astimezone(UTC) + timedelta(seconds=unit)).astimezone(zone)
                if _clock(t, unit) == 0:
                    wrapped = True
                    break
            if wrapped:
                break
        if not wrapped:
            return calendar.timegm(t.astimezone(UTC).timetuple()) * SEC
    return None


def _clock(t: datetime, unit: int) -> int:
    return t.hour if unit == 3600 else t.minute if unit == 60 else t.second


def _wall(
    year: int, month: int, day: int, zone: tzinfo, hour: int = 0, minute: int = 0, sec: int = 0
) -> datetime:
    """Go's time.Date: a wall-clock time in `zone`, months and days past their end carried over."""
    year += (month - 1) // 12
    month = (month - 1) % 12 + 1
    return datetime(year, month, 1, hour, minute, sec, tzinfo=zone) + timedelta(days=day - 1)


def _truncate(t: datetime, unit: int) -> datetime:
    if unit == 3600:
        return t.replace(minute=0, second=0, microsecond=0)
    if unit == 60:
        return t.replace(second=0, microsecond=0)
    return t.replace(microsecond=0)


def _day_matches(dom: int, dow: int, t: datetime) -> bool:
    """Both day fields must match when either was `*`, otherwise one of them (cron's rule)."""
    dom_match = bool(dom >> t.day & 1)
    dow_match = bool(dow >> ((t.weekday() + 1) % 7) & 1)
    if dom & _STAR or dow & _STAR:
        return dom_match and dow_match
    return dom_match or dow_match


def _format_next(when: int, loc: tzinfo | None) -> bytes:
    """Go's RFC3339Nano of the next firing, in the schedule's zone (Z for UTC)."""
    if loc is None or loc is UTC:
        return rfc3339(when).encode()
    local = datetime.fromtimestamp(when // SEC, loc)
    offset = local.utcoffset() or timedelta()
    if not offset:
        return rfc3339(when).encode()
    frac = f".{when % SEC:09d}".rstrip("0") if when % SEC else ""
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    zone = f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
    return (local.strftime("%Y-%m-%dT%H:%M:%S") + frac + zone).encode()


# -- publishing -----------------------------------------------------------------------------------------
def _valid_publish_subject(subject: bytes) -> bool:
    return bool(subject) and is_valid_subject(subject) and is_literal_subject(subject)


def check_publish(stream: Stream, subject: bytes, hdrs: bytes) -> bytes:
    """nats-server's checks of a published message's schedule headers, in its order; returns the headers to
    store (a schedule gets `Nats-Rollup: sub`), raises ApiError."""
    cfg = stream.config
    allowed = bool(cfg.get("allow_msg_schedules"))
    try:
        when, _, _ = next_firing(hdrs, now_ns())
    except ApiError:
        if not allowed:
            raise disabled() from None
        raise
    if when:
        if not allowed:
            raise disabled()
        ttl = get_header(hdrs, b"Nats-Schedule-TTL")
        if ttl:
            try:
                parse_msg_ttl(ttl)
            except ValueError:
                raise ttl_invalid() from None
        schedule_rollup = get_header(hdrs, b"Nats-Schedule-Rollup")
        if schedule_rollup and schedule_rollup != b"sub":
            raise rollup_invalid()
        if ttl and not cfg.get("allow_msg_ttl"):
            raise errors.message_ttl_disabled()
        target = get_header(hdrs, b"Nats-Schedule-Target") or b""
        if not _valid_publish_subject(target) or target == subject:
            raise target_invalid()
        source = get_header(hdrs, b"Nats-Schedule-Source")
        if source and (source in (target, subject) or not _valid_publish_subject(source)):
            raise source_invalid()
        subjects = [s.encode() for s in cfg.get("subjects") or ()]
        if not any(overlap(s, target) for s in subjects):
            raise target_invalid()
        if source and not any(overlap(s, source) for s in subjects):
            raise source_invalid()
        rollup = get_header(hdrs, b"Nats-Rollup")
        if not rollup:
            hdrs = _append(hdrs, b"Nats-Rollup", b"sub")
        elif rollup != b"sub":
            raise rollup_invalid()
    following = get_header(hdrs, b"Nats-Schedule-Next")
    if following:  # clients may only use it to purge a schedule
        scheduler = get_header(hdrs, b"Nats-Scheduler")
        if following != b"purge" or not scheduler or scheduler == subject:
            raise scheduler_invalid()
        if not _valid_publish_subject(scheduler):
            raise scheduler_invalid()
        if not allowed:
            raise disabled()
        st = stream.store
        last_seq = st.last_for(scheduler)
        last = st.load(last_seq) if last_seq else None
        if last is not None and not get_header(last.hdrs, b"Nats-Schedule"):
            raise scheduler_invalid()
    elif get_header(hdrs, b"Nats-Scheduler"):  # only alongside Nats-Schedule-Next
        raise scheduler_invalid()
    return hdrs


def purge_scheduler(stream: Stream, hdrs: bytes) -> None:
    """A stored message that says its schedule is done (`Nats-Schedule-Next: purge`) purges the schedule's
    subject: in any stream that allows roll-ups and purges, as nats-server does (a stream sourcing a
    stream with schedules drops its copy of a schedule once the copy of its firing comes)."""
    if get_header(hdrs, b"Nats-Schedule-Next") != b"purge":
        return
    scheduler = get_header(hdrs, b"Nats-Scheduler")
    if scheduler:
        stream.remove(list(stream.store.subjects.get(scheduler, ())))


def _append(hdrs: bytes | None, key: bytes, value: bytes) -> bytes:
    """nats-server's genHeader: one more line at the end of a header block."""
    head = hdrs[:-2] if hdrs and len(hdrs) > 2 else b"NATS/1.0\r\n"
    return head + key + b": " + value + b"\r\n\r\n"


_STRIPPED_PREFIXES = (b"Nats-Schedule", b"Nats-Expected-")
_STRIPPED_KEYS = (b"Nats-Msg-Id:", b"Nats-TTL:", b"Nats-Rollup:")


def _strip(hdrs: bytes | None) -> bytes | None:
    """A schedule's headers without those that schedule (Nats-Schedule*, Nats-Scheduler) or that could stop
    its copy being stored (expectations, id, TTL, rollup); None when nothing is left."""
    if not hdrs:
        return None
    lines = hdrs.split(b"\r\n")
    kept = [
        ln
        for ln in lines[1:]
        if ln and not ln.startswith(_STRIPPED_PREFIXES) and not ln.startswith(_STRIPPED_KEYS)
    ]
    if not kept:
        return None
    return b"\r\n".join([lines[0], *kept]) + b"\r\n\r\n"


class MsgSchedules:
    """A stream's schedules: which message schedules each subject and when it fires next; one loop timer
    for the soonest."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.by_subject: dict[bytes, int] = {}  # schedule subject -> its message's sequence
        self.due: dict[int, int] = {}  # a schedule's sequence -> its next firing (ns)
        self._heap: list[tuple[int, int]] = []  # (firing, sequence); stale ones skipped when popped
        self._timer: Any = None
        self._deadline = 0
        self._running = False

    # -- bookkeeping -----------------------------------------------------------------------------------
    def add(self, seq: int, subject: bytes, when: int) -> None:
        old = self.by_subject.get(subject)
        if old is not None:
            self.due.pop(old, None)
        self.by_subject[subject] = seq
        self._set(seq, when)

    def _set(self, seq: int, when: int) -> None:
        self.due[seq] = when
        heap = self._heap
        if len(heap) > 2 * len(self.due) + 64:  # drop stale entries: amortised O(1) a push
            heap[:] = [(w, s) for w, s in heap if self.due.get(s) == w]
            heapq.heapify(heap)
        heapq.heappush(heap, (when, seq))
        self.arm()

    def remove_subject(self, subject: bytes) -> None:
        seq = self.by_subject.pop(subject, None)
        if seq is not None:
            self.due.pop(seq, None)

    def on_stored(self, seq: int, subject: bytes, hdrs: bytes | None, ts: int) -> None:
        """A message was stored: a schedule starts (or replaces its subject's), any other message on a
        schedule's subject ends it; a schedule's copy moves its schedule on, or purges it (`@at`)."""
        try:
            when, _, _ = next_firing(hdrs, ts)
        except ApiError:
            when = 0
        scheduler = get_header(hdrs, b"Nats-Scheduler") if hdrs else None
        if when:
            self.add(seq, subject, when)
        elif not scheduler:
            self.remove_subject(subject)
        if not scheduler or not hdrs:
            return
        following = get_header(hdrs, b"Nats-Schedule-Next")
        if following == b"purge":  # (its messages go in purge_scheduler)
            self.remove_subject(scheduler)
        elif following:
            sched_seq = self.by_subject.get(scheduler)
            if sched_seq is not None:
                with contextlib.suppress(ValueError):
                    self._set(sched_seq, parse_rfc3339(following.decode()))

    def rebuild(self) -> None:
        """After a restart: each subject's last message that is a schedule; a repeating one fires when its
        last copy (on the target) said it would."""
        st = self.stream.store
        for subject, seqs in st.subjects.items():
            msg = st.load(seqs[-1]) if seqs else None
            if msg is None or not msg.hdrs or not get_header(msg.hdrs, b"Nats-Schedule"):
                continue
            try:
                when, repeat, _ = next_firing(msg.hdrs, msg.ts)
            except ApiError:
                continue
            if not when:
                continue
            target = get_header(msg.hdrs, b"Nats-Schedule-Target")
            if repeat and target:
                last_seq = st.last_for(target)
                copy = st.load(last_seq) if last_seq else None
                if copy is not None and get_header(copy.hdrs, b"Nats-Scheduler") == subject:
                    following = get_header(copy.hdrs, b"Nats-Schedule-Next")
                    with contextlib.suppress(ValueError):
                        when = parse_rfc3339(following.decode()) if following else when
            self.by_subject[subject] = msg.seq
            self.due[msg.seq] = when
            self._heap.append((when, msg.seq))
        heapq.heapify(self._heap)

    # -- the timer ---------------------------------------------------------------------------------------
    def arm(self) -> None:
        """(Re)start the timer for the soonest firing, no sooner than 250 ms from now and never later than
        it was set for (a busy stream must not push it back forever)."""
        if self._running:
            return
        heap, due = self._heap, self.due
        while heap and due.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        if not heap:
            self.stop()
            return
        now = now_ns()
        fire_in = max((heap[0][0] - now) / SEC, MIN_FIRE_DELAY)
        deadline = now + int(fire_in * SEC)
        if self._timer is not None and deadline > self._deadline:
            return
        self.stop()
        self._deadline = deadline
        self._timer = self.stream.account.js.loop.call_later(fire_in, self._fire)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._deadline = 0

    def _fire(self) -> None:
        self._timer = None
        self._running = True
        try:
            self._fire_due()
        finally:
            self._running = False
            self._deadline = 0
            self.arm()

    def _fire_due(self) -> None:
        heap, due, now = self._heap, self.due, now_ns()
        ready: list[tuple[int, int]] = []
        while heap and heap[0][0] <= now:
            when, seq = heapq.heappop(heap)
            if due.get(seq) == when:
                ready.append((seq, when))
        for seq, when in sorted(ready):  # in the order the schedules were stored
            self._produce(seq, when)

    def _produce(self, seq: int, when: int) -> None:
        """Store a schedule's copy on its target (as its origin's copy: the checks of a publish are done)."""
        stream = self.stream
        st = stream.store
        msg = st.load(seq)
        subject = msg.subject if msg is not None else None
        if msg is None or subject is None or self.by_subject.get(subject) != seq:
            self._forget(seq)
            return
        hdrs = msg.hdrs or b""
        try:
            following, repeat, loc = next_firing(hdrs, when)
        except ApiError:
            following = 0
        ttl = get_header(hdrs, b"Nats-Schedule-TTL") or b""
        target = get_header(hdrs, b"Nats-Schedule-Target")
        if not following or not target:
            self._forget(seq)
            return
        if ttl:
            try:
                parse_msg_ttl(ttl)
            except ValueError:
                self._forget(seq)
                return
        rollup = get_header(hdrs, b"Nats-Schedule-Rollup")
        source = get_header(hdrs, b"Nats-Schedule-Source")
        body_hdrs, body = msg.hdrs, msg.data
        if source:  # its content is the source subject's last message, when there is one
            last_seq = st.last_for(source)
            last = st.load(last_seq) if last_seq else None
            if last is not None:
                body_hdrs, body = last.hdrs, last.data
        out = _append(_strip(body_hdrs), b"Nats-Scheduler", subject)
        out = _append(out, b"Nats-Schedule-Next", _format_next(following, loc) if repeat else b"purge")
        if ttl:
            out = _append(out, b"Nats-TTL", ttl)
        if rollup:
            out = _append(out, b"Nats-Rollup", rollup)
        # In flight until stored: its firing stays taken (nats-server does not fire it again either).
        due = self.due
        due[seq] = -1
        try:
            stream.process(target, out, body, sourced=True)
        except (ApiError, OSError) as exc:
            log.warning("JetStream stream %s: scheduled message not stored: %s", stream.name, exc)

    def _forget(self, seq: int) -> None:
        self.due.pop(seq, None)
        for subject, s in list(self.by_subject.items()):
            if s == seq:
                del self.by_subject[subject]
