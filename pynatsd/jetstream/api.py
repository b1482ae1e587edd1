"""`$JS.API.>`: requests in, nats-server's response JSON (type, fields, error codes) out."""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from pynatsd.base.logging import get_logger
from pynatsd.broker.connection import Connection
from pynatsd.jetstream import backup, errors, requests
from pynatsd.jetstream import consumer as consumer_mod
from pynatsd.jetstream.advisories import API_AUDIT
from pynatsd.jetstream.errors import ApiError
from pynatsd.jetstream.sourcing import direct_mirror, stream_identity
from pynatsd.jetstream.stream import API_LEVEL, Stream, normalize_config
from pynatsd.jetstream.util import (
    encode,
    filters_regex,
    get_header,
    headers,
    now_ns,
    parse_rfc3339,
    rfc3339,
)
from pynatsd.protocol import gojson
from pynatsd.protocol.encoder import no_responders_headers
from pynatsd.protocol.gojson import GoJsonError
from pynatsd.protocol.subjects import is_literal_subject, overlap

if TYPE_CHECKING:
    from pynatsd.jetstream.account import JsAccount

log = get_logger()

_TYPE = "io.nats.jetstream.api.v1."
NAMES_LIMIT = 1024
LIST_LIMIT = 256
SUBJECTS_LIMIT = 100_000  # nats-server's JSMaxSubjectDetails: subjects a stream info page shows
SUBJECTS_SLICE = 2_000  # subjects a stream info counts per loop turn
API_QUEUE_LIMIT = 10_000  # nats-server's default JetStream API queue limit: requests past it are dropped
# Queued request bodies, in bytes: 10,000 bodies of max_payload would pin 10 GiB of one account's requests.
API_QUEUE_BYTES = 64 << 20
_QUEUED = frozenset(
    ("stream_info_response", "stream_purge_response", "stream_list_response", "consumer_create_response",
     "consumer_list_response")
)  # fmt: skip
# The replies of JetStream's own deliveries and flow-control requests: never a requester's inbox.
_DELIVERY_REPLIES = (b"$JS.ACK.", b"$JS.FC.")

Reply = dict[str, Any]
_PAGED = {"total": 0, "offset": 0, "limit": 0}
# The fields nats-server's responses carry even with an error (no omitempty in its structs), 10039 too.
_OFFSET = re.compile(r" at offset \d+$")
_ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time.Time, as it marshals it
_ERROR_FIELDS: dict[str, Reply] = {
    "consumer_pause_response": {"paused": False, "pause_until": _ZERO_TIME},
    "stream_info_response": _PAGED,
    "stream_purge_response": {"purged": 0},
    "stream_restore_response": {"deliver_subject": ""},
    "stream_names_response": {**_PAGED, "streams": None},
    "stream_list_response": {**_PAGED, "streams": []},
    "consumer_names_response": {**_PAGED, "consumers": []},
    "consumer_list_response": {**_PAGED, "consumers": []},
}
# A request's handler: its answer, or a coroutine that works it out over several loop turns.
Handler = Callable[[list[str], bytes], Reply | Coroutine[Any, Any, Reply]]
# The requester of a request no one audits (the audit advisory's `client` may be null: None is taken).
_UNHEARD: Reply = {}
# What an answer's audit names: the request's subject, its body, and who asked (or _UNHEARD).
_Request = tuple[bytes, bytes, Reply | None]


def _stream_config(payload: bytes) -> dict[str, Any]:
    """A stream create/update body, typed as nats-server types it; options pynatsd lacks refused by name."""
    cfg = requests.parse(payload, requests.STREAM_CONFIG)
    name = requests.unsupported(cfg, requests.STREAM_UNSUPPORTED)
    if name is not None:
        raise errors.stream_invalid_config(f"stream option {name} is not supported by pynatsd")
    return cfg


def _consumer_request(payload: bytes) -> dict[str, Any]:
    """A consumer create body, typed as nats-server types it; options pynatsd lacks refused by name."""
    req = requests.parse(payload, requests.CONSUMER_CREATE)
    name = requests.unsupported(
        {**req.get("config", {}), "pedantic": req.get("pedantic")}, requests.CONSUMER_UNSUPPORTED
    )
    if name is not None:
        raise errors.consumer_create(f"consumer option {name} is not supported by pynatsd")
    return req


_START_OPTIONS = ("deliver_policy", "opt_start_seq", "opt_start_time")


def _sourcing_feed(raw: dict[str, Any], stream: Stream) -> dict[str, Any]:
    """A named direct sourcing consumer (a 2.15 mirror's or source's feed, named after it): of an interest
    or work queue stream, a durable acked by flow control, which keeps what it has not copied yet; else
    ephemeral, its name made unique (the feed asks under the same name each time), as nats-server."""
    if stream.config["retention"] == "limits":
        return {**raw, "name": f"{raw['name']}-{consumer_mod.random_name()}"}
    feed = {
        k: v for k, v in raw.items() if k not in ("direct", "ack_wait", "max_deliver", "inactive_threshold")
    }
    return {**feed, "durable_name": raw["name"], "ack_policy": "flow_control"}


def _empty_request(payload: bytes) -> bool:
    """nats-server's isEmptyRequest: no body, or one that is {} or null."""
    try:
        values = gojson.loads(payload)
    except GoJsonError:
        return False
    return len(values) <= 1 and values in ([], [{}], [None])


def _offset(req: dict[str, Any], total: int) -> int:
    """A listing's offset, within 0..total as nats-server bounds it."""
    return min(max(int(req.get("offset") or 0), 0), total)


def _with_subjects(state: dict[str, Any], counts: dict[str, int]) -> dict[str, Any]:
    """The state with its `subjects` where nats-server writes them (after num_subjects)."""
    out: dict[str, Any] = {}
    for key, value in state.items():
        out[key] = value
        if key == "num_subjects":
            out["subjects"] = counts
    if "subjects" not in out:
        out["subjects"] = counts
    return out


def _json_value(payload: bytes) -> Any:
    """The body's last JSON value (bounded depth), None for an empty one."""
    values = gojson.loads(payload)
    return values[-1] if values else None


def _direct_request(toks: list[str], payload: bytes) -> dict[str, Any] | bytes:
    """A direct get's request, or the status refusing it (nats-server's checks and words)."""
    if len(toks) > 3:  # DIRECT.GET.<stream>.<subject>: the last message of that subject
        req: Any = {}
        if payload:
            try:
                req = _json_value(payload)
            except GoJsonError:
                return b"408 Malformed Request"
            if not isinstance(req, dict):
                return b"408 Malformed Request"
        subject = ".".join(toks[3:])
        if (
            not subject
            or any(
                req.get(k)
                for k in ("last_by_subj", "next_by_subj", "multi_last", "seq", "batch", "start_time")
            )
            or req.get("up_to_seq")
            or req.get("up_to_time")
        ):
            return b"408 Bad Request"
        return {**req, "last_by_subj": subject}
    if not payload:
        return b"408 Empty Request"
    try:
        req = _json_value(payload)
    except GoJsonError:
        return b"408 Malformed Request"
    if not isinstance(req, dict) or not all(
        isinstance(req.get(k, 0), int) and not isinstance(req.get(k), bool)
        for k in ("seq", "batch", "max_bytes", "up_to_seq")
    ):
        return b"408 Malformed Request"
    if req.get("seq", 0) < 0 or req.get("up_to_seq", 0) < 0:
        return b"408 Malformed Request"
    multi_last = req.get("multi_last")
    if multi_last is not None and (
        not isinstance(multi_last, list) or not all(isinstance(f, str) for f in multi_last)
    ):
        return b"408 Malformed Request"
    for stamp in ("start_time", "up_to_time"):
        if not isinstance(req.get(stamp, ""), str):
            return b"408 Malformed Request"
        if req.get(stamp):
            try:
                parse_rfc3339(req[stamp])
            except ValueError:
                return b"408 Malformed Request"
    seq, last, nxt = req.get("seq") or 0, req.get("last_by_subj"), req.get("next_by_subj")
    multi, start, batch = req.get("multi_last"), req.get("start_time"), req.get("batch") or 0
    if not (seq or last or nxt or multi or start):
        return b"408 Empty Request"
    if (
        (seq and (last or start))
        or (start and last)
        or (last and (nxt or batch or multi))
        or (nxt and multi)
        or (req.get("up_to_seq") and req.get("up_to_time"))
    ):
        return b"408 Bad Request"
    return req


# Requests whose advisories name their requester beyond the audit (snapshot and restore progress).
_BACKUPS = frozenset(("stream_snapshot_response", "stream_restore_response"))
_CLUSTERED_ONLY = frozenset(
    {"stream_leader_stepdown_response", "stream_remove_peer_response", "consumer_leader_stepdown_response"}
)


_ANSWER_HEADERS = "\0headers"  # a handler's answer's headers, taken out of its body when published


# The highest API level all of whose features pynatsd serves, nats-server 2.15.1's: 4 brings sourcing
# consumers, ack policy flow_control and consumer reset (a mirror asks for it), 5 the origin's identity (a
# source asks for it); a request asking for more hears 10185. API_LEVEL is what metadata, `$JS.API.INFO` and
# /jsz report.
SERVED_API_LEVEL = 5


def _level_met(level: bytes) -> bool:
    """A request's Nats-Required-Api-Level this server meets (one that is not a number is not met)."""
    try:
        return int(level) <= SERVED_API_LEVEL
    except ValueError:
        return False


def _not_enabled(kind: str) -> Reply:
    """nats-server's answer to an API request of an account without JetStream (10039; 10010 for the
    requests that only a cluster serves)."""
    if kind in _CLUSTERED_ONLY:
        error = {"code": 503, "err_code": 10010, "description": "JetStream clustering support required"}
    else:
        error = {"code": 503, "err_code": 10039, "description": "JetStream not enabled for account"}
    return {"type": _TYPE + kind, "error": error, **_ERROR_FIELDS.get(kind, {})}


# (tokens after $JS.API, with "*" for a name) -> (response type, the Api method that serves it)
API_ROUTES: dict[tuple[str, ...], tuple[str, str]] = {
    ("INFO",): ("account_info_response", "info"),
    ("STREAM", "CREATE", "*"): ("stream_create_response", "stream_create"),
    ("STREAM", "UPDATE", "*"): ("stream_update_response", "stream_update"),
    ("STREAM", "INFO", "*"): ("stream_info_response", "stream_info"),
    ("STREAM", "DELETE", "*"): ("stream_delete_response", "stream_delete"),
    ("STREAM", "PURGE", "*"): ("stream_purge_response", "stream_purge"),
    ("STREAM", "NAMES"): ("stream_names_response", "stream_names"),
    ("STREAM", "LIST"): ("stream_list_response", "stream_list"),
    ("STREAM", "MSG", "GET", "*"): ("stream_msg_get_response", "msg_get"),
    ("STREAM", "SNAPSHOT", "*"): ("stream_snapshot_response", "stream_snapshot"),
    ("STREAM", "RESTORE", "*"): ("stream_restore_response", "stream_restore"),
    ("STREAM", "MSG", "DELETE", "*"): ("stream_msg_delete_response", "msg_delete"),
    ("CONSUMER", "CREATE", "*"): ("consumer_create_response", "consumer_create"),
    ("CONSUMER", "CREATE", "*", "*"): ("consumer_create_response", "consumer_create"),
    ("CONSUMER", "CREATE", "*", "*", "*"): ("consumer_create_response", "consumer_create"),
    ("CONSUMER", "DURABLE", "CREATE", "*", "*"): ("consumer_create_response", "consumer_durable"),
    ("CONSUMER", "INFO", "*", "*"): ("consumer_info_response", "consumer_info"),
    ("CONSUMER", "DELETE", "*", "*"): ("consumer_delete_response", "consumer_delete"),
    ("CONSUMER", "NAMES", "*"): ("consumer_names_response", "consumer_names"),
    ("CONSUMER", "LIST", "*"): ("consumer_list_response", "consumer_list"),
    ("CONSUMER", "PAUSE", "*", "*"): ("consumer_pause_response", "consumer_pause"),
    ("CONSUMER", "UNPIN", "*", "*"): ("consumer_unpin_response", "consumer_unpin"),
}
# Known to nats-server but not served here: answered with an error instead of silence.
UNSUPPORTED: dict[tuple[str, ...], str] = {
    ("STREAM", "LEADER", "STEPDOWN", "*"): "stream_leader_stepdown_response",
    ("STREAM", "PEER", "REMOVE", "*"): "stream_remove_peer_response",
    ("CONSUMER", "LEADER", "STEPDOWN", "*", "*"): "consumer_leader_stepdown_response",
}


def api_kind(toks: list[str]) -> tuple[str, tuple[str, ...] | None]:
    """(response type, its API_ROUTES key when served here) of the API request whose subject has `toks`
    after `$JS.API` (a consumer create's filter already joined); "" for a subject nats-server does not
    serve."""
    for i in range(len(toks), 0, -1):
        key = tuple(toks[:i]) + ("*",) * (len(toks) - i)
        if key in API_ROUTES:
            return API_ROUTES[key][0], key
        if key in UNSUPPORTED:
            return UNSUPPORTED[key], None
    return "", None


def leaderless_answer(subject: bytes) -> bytes | None:
    """nats-server's answer to an API request while its cluster's meta group has no leader (10008), or
    None for the requests it does not answer then (unknown subjects, direct gets, pull requests)."""
    toks = subject.decode(errors="replace").split(".")[2:]
    if toks[:2] == ["CONSUMER", "CREATE"] and len(toks) > 4:
        toks = [*toks[:4], ".".join(toks[4:])]
    kind, _ = api_kind(toks)
    if not kind:
        return None
    error = {"code": 503, "err_code": 10008, "description": "JetStream system temporarily unavailable"}
    return encode({"type": _TYPE + kind, "error": error, **_ERROR_FIELDS.get(kind, {})})


class Api:
    """Dispatches one account's `$JS.API.>` requests."""

    def __init__(self, account: JsAccount) -> None:
        self.account = account
        self.routes: dict[tuple[str, ...], tuple[str, Handler]] = {
            key: (kind, getattr(self, method)) for key, (kind, method) in API_ROUTES.items()
        }
        self._queue: deque[tuple[Any, ...]] = deque()  # (kind, route, toks, reply, payload, subject)
        self._worker: asyncio.Task[None] | None = None
        self._queued_bytes = 0
        self._overflow_logged = False
        self.requester: Reply | None = _UNHEARD  # who made the request being handled (as `_answer` has it)
        self.expected_identity: bytes | None = None  # its Nats-Stream-Identity header (a source's origin)

    # -- dispatch -------------------------------------------------------------------------------------
    def handle(self, subject: bytes, reply: bytes | None, hdrs: bytes | None, payload: bytes) -> None:
        if self.account.client.origin_is_server:
            # A delivery to a deliver subject or pull reply inside $JS.API (nats-server shows those to its
            # API under the stored message's subject, which matches no API subject), a status or an answer
            # of ours: not a request from anyone entitled to make it.
            return
        if reply is not None and not is_literal_subject(reply):
            return  # nobody can be answered on a wildcard
        origin = self.account.client.origin
        routed = origin is not None and origin.is_route
        if routed and reply is not None and reply.startswith(_DELIVERY_REPLIES):
            # A delivery or flow-control request of another server's JetStream that crossed a route (a
            # domain's API on a pynatsd node in a cluster): its origin is the route, not our internal client.
            return
        if self.account.is_system:  # nats-server's answer to the system account's own clients
            if reply:
                kind = "account_info_response" if subject == b"$JS.API.INFO" else "system_response"
                self.account.client.publish(reply, None, None, encode(_not_enabled(kind)))
            return
        toks = subject.decode(errors="replace").split(".")[2:]
        if toks[:2] == ["CONSUMER", "MSG"] and len(toks) == 5 and toks[2] == "NEXT":
            self.msg_next(toks[3], toks[4], reply, hdrs, payload)
            return
        if toks[:2] == ["CONSUMER", "RESET"] and len(toks) == 4:
            self.consumer_reset(toks[2], toks[3], reply, hdrs, payload)
            return
        if toks[:2] == ["DIRECT", "GET"] and len(toks) >= 3:
            self.direct_get(toks, reply, hdrs, payload)
            return
        if toks[:2] == ["CONSUMER", "CREATE"] and len(toks) > 4:
            toks = [*toks[:4], ".".join(toks[4:])]  # CONSUMER.CREATE.<stream>.<name>.<filter...>
        kind, key = api_kind(toks)
        route = self.routes[key][1] if key is not None else None
        if not kind or not reply:
            return  # nats-server does not answer unknown API subjects either
        advisories = self.account.advisories
        # Who asked, for the audit advisory (and a backup's): taken now (a queued request is answered after
        # its origin).
        audited = advisories.wanted(API_AUDIT)
        requester = advisories.requester(origin, hdrs) if audited or kind in _BACKUPS else _UNHEARD
        level = get_header(hdrs, b"Nats-Required-Api-Level") if hdrs else None
        identity = get_header(hdrs, b"Nats-Stream-Identity") if hdrs else None  # a source's expected origin
        if level is not None and not _level_met(level):  # nats-server's check in every API handler
            error = errors._e(412, 10185, "JetStream minimum api level required")
            self._publish_answer(kind, reply, (subject, payload, requester), None, error)
            return
        if not self.account.enabled:
            answer = encode(_not_enabled(kind))
            self.account.client.publish(reply, None, None, answer)
            if audited:
                advisories.api_audit(subject, requester, payload, answer)
            return
        self.account.api_total += 1
        if kind in _QUEUED or self._queue:
            # Requests whose work grows with the stream go through a queue, one a loop turn (a heavy one
            # in slices), so clients' reads come between them: ten pipelined STREAM.INFOs with
            # subjects_filter ">" over 300k subjects held the loop 4.7 s. While it holds any, every request
            # joins it, so an account's requests are answered in the order they came.
            if len(self._queue) >= API_QUEUE_LIMIT or self._queued_bytes + len(payload) > API_QUEUE_BYTES:
                if not self._overflow_logged:  # once per overflow, not once per dropped request
                    self._overflow_logged = True
                    log.warning(
                        "JetStream API queue limit reached, dropping %s", subject.decode(errors="replace")
                    )
                return
            self._queue.append((kind, route, toks, reply, payload, subject, requester, identity))
            self._queued_bytes += len(payload)
            if self._worker is None:
                self._worker = asyncio.get_running_loop().create_task(self._drain_queue())
            return
        self._answer(kind, route, toks, reply, payload, subject, requester, identity)

    async def _drain_queue(self) -> None:
        try:
            while self._queue:
                item = self._queue.popleft()
                self._queued_bytes -= len(item[4])
                try:
                    pending = self._answer(*item)
                    if pending is not None:
                        await pending
                except Exception:  # one request's failure never strands the others behind it
                    log.exception("JetStream API %s failed", item[5].decode(errors="replace"))
                await asyncio.sleep(0)
        finally:
            self._worker = None
            self._overflow_logged = False

    def stop(self) -> None:
        """Drops queued requests and the work on them (the stores close next)."""
        if self._worker is not None:
            self._worker.cancel()
        self._queue.clear()
        self._queued_bytes = 0

    def _answer(
        self,
        kind: str,
        route: Handler | None,
        toks: list[str],
        reply: bytes,
        payload: bytes,
        subject: bytes,
        requester: Reply | None = _UNHEARD,
        identity: bytes | None = None,
    ) -> Coroutine[Any, Any, None] | None:
        """Runs the handler and publishes its answer; a sliced handler's answer comes from the returned
        coroutine."""
        try:
            if route is None:
                raise errors._e(501, 10003, f"{'.'.join(toks[:2]).lower()} is not supported by pynatsd")
            self.requester = requester
            self.expected_identity = identity
            body = route(toks, payload)
            if not isinstance(body, dict):
                return self._answer_later(kind, body, reply, (subject, payload, requester))
            self._publish_answer(kind, reply, (subject, payload, requester), body, None)
        except Exception as exc:  # an answer is owed whatever happened: never leave a request hanging
            self._publish_answer(kind, reply, (subject, payload, requester), None, exc)
        return None

    async def _answer_later(
        self, kind: str, body: Coroutine[Any, Any, Reply], reply: bytes, request: _Request
    ) -> None:
        try:
            self._publish_answer(kind, reply, request, await body, None)
        except Exception as exc:
            self._publish_answer(kind, reply, request, None, exc)

    def _publish_answer(
        self, kind: str, reply: bytes, request: _Request, body: Reply | None, exc: Exception | None
    ) -> None:
        """Answers the request (`request`: its subject, body and requester) and audits the answer."""
        subject, payload, requester = request
        hdrs = None
        if exc is None and body is not None:
            hdrs = body.pop(_ANSWER_HEADERS, None)
            resp = {"type": _TYPE + kind, **body}
        else:
            # Never Python's words nor a path: the log has them, the requester gets a fixed text.
            err = exc if isinstance(exc, ApiError) else errors.general("internal error")
            if not isinstance(exc, ApiError):
                log.error("JetStream API %s failed", subject.decode(errors="replace"), exc_info=exc)
            self.account.api_errors += 1
            resp = {"type": _TYPE + kind, "error": err.json()}
            resp.update(_ERROR_FIELDS.get(kind, {}))
        answer = encode(resp)
        self.account.client.publish(reply, None, hdrs if isinstance(hdrs, bytes) else None, answer)
        if requester is not _UNHEARD and (kind not in _BACKUPS or self.account.advisories.wanted(API_AUDIT)):
            self.account.advisories.api_audit(subject, requester, payload, answer)

    def _stream(self, name: str) -> Stream:
        stream = self.account.streams.get(name)
        if stream is None:
            raise errors.stream_not_found()
        return stream

    # -- account --------------------------------------------------------------------------------------
    def info(self, toks: list[str], payload: bytes) -> Reply:
        acc = self.account
        limits = acc.limits
        assert limits is not None  # accounts without JetStream answer 10039 before this
        u = acc.usage()
        usage: Reply = {
            "memory": u["memory"],
            "storage": u["storage"],
            "reserved_memory": acc.reserved("memory"),
            "reserved_storage": acc.reserved("file"),
            "streams": u["streams"],
            "consumers": u["consumers"],
        }
        # Tiered limits (an account JWT's): the totals with zero limits, the tier's usage and limits apart.
        out: Reply = {
            **usage,
            "limits": {k: type(v)() for k, v in limits.items()} if acc.tier else limits,
        }
        if acc.js.domain:
            out["domain"] = acc.js.domain
        out["api"] = {"level": API_LEVEL, "total": acc.api_total, "errors": acc.api_errors}
        if acc.tier:
            out["tiers"] = {acc.tier: {**usage, "limits": limits}}
        return out

    # -- streams --------------------------------------------------------------------------------------
    def stream_create(self, toks: list[str], payload: bytes) -> Reply:
        cfg = normalize_config(_stream_config(payload), toks[2], create=True)
        self.account.check_stream_bytes(cfg)
        stream = self.account.create_stream(cfg)
        # nats-server says did_create for an idempotent repeat too.
        return {**stream.info(), "ts": rfc3339(now_ns()), "did_create": True}

    def stream_update(self, toks: list[str], payload: bytes) -> Reply:
        cfg = normalize_config(_stream_config(payload), toks[2])
        self.account.check_stream_bytes(cfg)
        stream = self.account.update_stream(cfg)
        return {**stream.info(), "ts": rfc3339(now_ns())}

    def stream_info(self, toks: list[str], payload: bytes) -> Reply | Coroutine[Any, Any, Reply]:
        req = requests.parse(payload, requests.STREAM_INFO)
        stream = self._stream(toks[2])
        sf = req.get("subjects_filter")
        info = stream.info(deleted_details=bool(req.get("deleted_details")))
        if sf and len(stream.store.subjects) > SUBJECTS_SLICE:
            return self._stream_info_sliced(stream, info, sf, req.get("offset") or 0)
        counts = stream.subject_counts(sf) if sf else {}
        return self._stream_info_reply(stream, info, counts, req.get("offset") or 0)

    async def _stream_info_sliced(self, stream: Stream, info: Reply, sf: str, offset: int) -> Reply:
        """The subject counts SUBJECTS_SLICE subjects a loop turn (300k subjects: 0.5 s in one go)."""
        match, everything = filters_regex([sf.encode()]).fullmatch, sf == ">"
        counts: dict[str, int] = {}
        items = list(stream.store.subjects.items())
        for start in range(0, len(items), SUBJECTS_SLICE):
            for subj, seqs in items[start : start + SUBJECTS_SLICE]:
                if everything or match(subj):
                    counts[subj.decode()] = len(seqs)
            await asyncio.sleep(0)
        return self._stream_info_reply(stream, info, counts, offset)

    def _stream_info_reply(self, stream: Stream, info: Reply, counts: dict[str, int], offset: int) -> Reply:
        total = 0
        if counts:
            # nats-server's paging: at most SUBJECTS_LIMIT subjects a page, by name from `offset`.
            total, offset = len(counts), min(max(offset, 0), len(counts))
            if offset or total > SUBJECTS_LIMIT:
                names = sorted(counts)[offset : offset + SUBJECTS_LIMIT]
                counts = {name: counts[name] for name in names}
            if counts:
                info["state"] = _with_subjects(info["state"], counts)
        else:
            offset = 0
        return {
            "total": total,
            "offset": offset,
            "limit": SUBJECTS_LIMIT if total else 0,
            **info,
            "cluster": {"leader": self.account.js.server.server_name},
            "ts": rfc3339(now_ns()),
        }

    def stream_delete(self, toks: list[str], payload: bytes) -> Reply:
        self.account.delete_stream(toks[2])
        return {"success": True}

    def stream_purge(self, toks: list[str], payload: bytes) -> Reply:
        # nats-server reads a body only when it is a JSON object or array: anything else purges it all.
        body = payload.lstrip()
        req = requests.parse(payload, requests.STREAM_PURGE) if body[:1] in (b"{", b"[") else {}
        purged = self._stream(toks[2]).purge(req)
        return {"success": True, "purged": purged}

    def stream_snapshot(self, toks: list[str], payload: bytes) -> Reply:
        if _empty_request(payload):
            raise errors.bad_request()
        return backup.snapshot_request(self.account, toks[2], payload, self.requester)

    def stream_restore(self, toks: list[str], payload: bytes) -> Reply:
        if _empty_request(payload):
            raise errors.bad_request()
        return backup.restore_request(self.account, toks[2], payload, self.requester)

    def _filtered_streams(self, req: dict[str, Any]) -> list[Stream]:
        streams = sorted(self.account.streams.values(), key=lambda s: s.name)
        subj = req.get("subject")
        if subj:
            sb = str(subj).encode()
            streams = [
                s for s in streams if any(overlap(sb, x.encode()) for x in s.config.get("subjects") or ())
            ]
        return streams

    def stream_names(self, toks: list[str], payload: bytes) -> Reply:
        req = requests.parse(payload, requests.STREAM_NAMES)
        streams = self._filtered_streams(req)
        offset = _offset(req, len(streams))
        page = streams[offset : offset + NAMES_LIMIT]
        return {
            "total": len(streams),
            "offset": offset,
            "limit": NAMES_LIMIT,
            "streams": [s.name for s in page],
        }

    def stream_list(self, toks: list[str], payload: bytes) -> Reply:
        req = requests.parse(payload, requests.STREAM_LIST)
        streams = self._filtered_streams(req)
        offset = _offset(req, len(streams))
        page = streams[offset : offset + LIST_LIMIT]
        ts = rfc3339(now_ns())
        items = []
        for s in page:
            info = s.info()
            info["config"] = s.config  # the list shows the stored config, without the server's metadata
            items.append({**info, "ts": ts})
        return {"total": len(streams), "offset": offset, "limit": LIST_LIMIT, "streams": items}

    def msg_get(self, toks: list[str], payload: bytes) -> Reply:
        req = requests.parse(payload, requests.MSG_GET)
        stream = self._stream(toks[3])
        return {"message": stream.message_json(stream.get_message(req))}

    def msg_delete(self, toks: list[str], payload: bytes) -> Reply:
        if _empty_request(payload):
            raise errors.bad_request()
        req = requests.parse(payload, requests.MSG_DELETE)
        stream = self._stream(toks[3])
        seq = req.get("seq") or 0
        try:
            stream.delete_message(seq)
        except ApiError as err:  # nats-server's store says EOF past its last sequence
            if err.err_code == 10057 and seq > max(stream.store.last_seq, stream.store.first_seq):
                raise errors.msg_delete_failed("stream store EOF") from None
            raise
        return {"success": True}

    def direct_get(self, toks: list[str], reply: bytes | None, hdrs: bytes | None, payload: bytes) -> None:
        """`$JS.API.DIRECT.GET.<stream>[.<subject>]`: messages themselves, their coordinates in headers; with
        `batch`, up to that many from `seq` on (or `start_time`, or matching `next_by_subj`), then a `204 EOB`
        status. Problems are status headers, as nats-server answers them (in its order of checks)."""
        stream = self.account.streams.get(toks[2])
        if stream is None or not stream.config["allow_direct"]:
            stream = direct_mirror(self.account, toks[2])  # a mirror of it with mirror_direct answers too
        if stream is None or not reply:
            # nats-server only listens for streams that allow direct gets: "no responders".
            if reply:
                self._no_responders(".".join(["$JS.API", *toks]).encode(), reply)
            return
        client = self.account.client
        level = get_header(hdrs, b"Nats-Required-Api-Level")
        if level is not None and not _level_met(level):
            client.publish(reply, None, headers(b"412 Required Api Level"), b"")
            return
        req = _direct_request(toks, payload)
        if isinstance(req, bytes):
            client.publish(reply, None, headers(req), b"")
            return
        try:
            frames = stream.direct_get(req, self.account.js.server.options.max_pending)
        except ApiError:
            client.publish(reply, None, headers(b"404 Message Not Found"), b"")
            return
        client.publish_many(reply, frames)

    # -- consumers ------------------------------------------------------------------------------------
    def _create(
        self, stream_name: str, req: dict[str, Any], name: str | None, durable_api: bool, filt: str | None
    ) -> Reply:
        # nats-server's order of checks and errors for the three create subjects.
        if (req.get("stream_name") or "") != stream_name:
            raise errors.stream_mismatch()
        raw: dict[str, Any] = req.get("config") or {}
        consumer_name = name if name is not None else str(raw.get("name") or "")
        if "/" in consumer_name or "\\" in consumer_name:
            raise errors._e(400, 10127, "Consumer name can not contain path separators")
        durable = raw.get("durable_name") or ""
        if name is None:
            if durable:
                raise errors.consumer_ephemeral_with_durable_name()
        else:
            if durable_api and not durable:
                raise errors.consumer_durable_name_not_set()
            if durable and durable != name:
                raise errors.consumer_durable_name_mismatch()
            raw = {**raw, "name": name}  # the subject names the consumer, whatever the body says
        if filt is not None:
            if raw.get("filter_subjects"):
                raise errors._e(
                    400, 10137, "consumer with multiple subject filters cannot use subject based API"
                )
            if (raw.get("filter_subject") or "") != filt:
                raise errors.consumer_filter_mismatch()
        stream = self._stream(stream_name)
        sourcing = bool(raw.get("sourcing"))
        if sourcing and raw.get("direct") and raw.get("name"):
            raw = _sourcing_feed(raw, stream)
        identity = ""
        if raw.get("direct") or sourcing:  # a mirror's or source's feed: of the origin it expects, if told
            identity = stream_identity(stream.created)
            expected = self.expected_identity
            if expected and expected.decode(errors="replace") != identity:
                raise errors._e(400, 10225, f"consumer's stream identity does not match: {identity}")
        existing = stream.consumers.get(str(raw.get("name") or raw.get("durable_name") or ""))
        if existing is not None:  # nats-server: only CONSUMER.PAUSE changes an existing one's pause_until
            until = existing.config.get("pause_until")  # (an update stores it in UTC)
            raw = {**raw, "pause_until": consumer_mod.utc_time(until) if until else None}
            if sourcing and raw.get("durable_name"):  # a durable feed goes on from where it stands
                raw = {**raw, **{k: existing.config.get(k) for k in _START_OPTIONS}}
        cfg = consumer_mod.normalize_config(raw, stream)
        self.account.check_ack_pending(raw, cfg)
        consumer = self.account.add_consumer(stream, cfg, str(req.get("action") or ""))
        if sourcing and existing is not None:  # made again: what was not acked is delivered again
            consumer.reset(0)
        answer: Reply = {**consumer.info(), "ts": rfc3339(now_ns())}
        if identity:  # told the origin's identity, as nats-server
            answer[_ANSWER_HEADERS] = b"NATS/1.0\r\nNats-Stream-Identity: %s\r\n\r\n" % identity.encode()
        return answer

    def consumer_create(self, toks: list[str], payload: bytes) -> Reply:
        req = _consumer_request(payload)
        name = toks[3] if len(toks) > 3 else None
        filt = toks[4] if len(toks) > 4 else None
        return self._create(toks[2], req, name, False, filt)

    def consumer_durable(self, toks: list[str], payload: bytes) -> Reply:
        return self._create(toks[3], _consumer_request(payload), toks[4], True, None)

    def consumer_info(self, toks: list[str], payload: bytes) -> Reply:
        stream = self._stream(toks[2])
        consumer = stream.consumers.get(toks[3])
        if consumer is None:
            raise errors.consumer_not_found()
        return {**consumer.info(), "ts": rfc3339(now_ns())}

    def consumer_delete(self, toks: list[str], payload: bytes) -> Reply:
        stream = self._stream(toks[2])
        self.account.delete_consumer(stream, toks[3])
        return {"success": True}

    def consumer_pause(self, toks: list[str], payload: bytes) -> Reply:
        """Pause a consumer until `pause_until`, or resume it (no time, or a body that is no JSON object)."""
        req: dict[str, Any] = {}
        if payload.lstrip()[:1] in (b"{", b"["):  # nats-server's isJSONObjectOrArray
            req = requests.parse(payload, requests.CONSUMER_PAUSE)
        stream = self._stream(toks[2])
        consumer = stream.consumers.get(toks[3])
        if consumer is None:
            raise errors.consumer_not_found()
        until = consumer_mod.utc_time(req["pause_until"]) if req.get("pause_until") else _ZERO_TIME
        cfg = {k: v for k, v in consumer.config.items() if k != "pause_until"}
        cfg["metadata"] = dict(cfg.get("metadata") or {})
        if until != _ZERO_TIME:
            cfg["pause_until"] = until  # the last of the config's fields: its place in nats-server's JSON
        consumer_mod.set_required_level(cfg)
        consumer.update(cfg)
        consumer.save_now()
        consumer.kick()
        out: Reply = {"paused": consumer.paused(), "pause_until": until}
        if out["paused"]:
            out["pause_remaining"] = min(max(parse_rfc3339(until) - now_ns(), 0), consumer_mod.MAX_DURATION)
        return out

    def consumer_unpin(self, toks: list[str], payload: bytes) -> Reply:
        """Let go of a priority group's pinned client (nats-server's checks, in its order): the next request
        without a pin id takes the pin."""
        if not payload.strip():
            raise errors.invalid_json("unexpected end of JSON input")
        try:
            req = requests.parse(payload, requests.CONSUMER_UNPIN)
        except ApiError as err:  # json.Unmarshal's words: without the decoder's offset
            raise errors.invalid_json(_OFFSET.sub("", err.description[len("invalid JSON: ") :])) from None
        group = str(req.get("group") or "")
        if not group:
            raise errors.invalid_json("consumer group not specified")
        if not consumer_mod.valid_group_name(group):
            raise errors.consumer_invalid_group_name()
        stream = self._stream(toks[2])
        consumer = stream.consumers.get(toks[3])
        if consumer is None:
            raise errors.consumer_not_found()
        if group not in (consumer.config.get("priority_groups") or ()):
            raise errors.consumer_invalid_priority_group()
        consumer.unpin(group, "admin")
        return {}

    def consumer_reset(
        self, stream_name: str, name: str, reply: bytes | None, hdrs: bytes | None, payload: bytes
    ) -> None:
        """`$JS.API.CONSUMER.RESET.<stream>.<consumer>`: back to the ack floor, or to `seq`. The consumer's
        own subscription in nats-server: outside the API's counts, and without the consumer nothing answers
        (the API's `$JS.API.>` takes the request, so no "no responders" either). A durable mirror's or
        source's feed asks with its API level and the origin it expects: answered with the origin's
        identity, never refused for it (the feed tells a recreated origin from it)."""
        stream = self.account.streams.get(stream_name)
        consumer = stream.consumers.get(name) if stream is not None else None
        if consumer is None or not reply:
            return
        resp: Reply = {"type": _TYPE + "consumer_reset_response"}
        answer_hdrs = None
        try:
            level = get_header(hdrs, b"Nats-Required-Api-Level") if hdrs else None
            if level is not None and not _level_met(level):
                raise errors._e(412, 10185, "JetStream minimum api level required")
            if hdrs and get_header(hdrs, b"Nats-Stream-Identity") is not None:
                identity = stream_identity(consumer.stream.created).encode()
                answer_hdrs = b"NATS/1.0\r\nNats-Stream-Identity: %s\r\n\r\n" % identity
            try:
                req = requests.parse(payload, requests.CONSUMER_RESET) if payload else {}
            except ApiError as err:  # json.Unmarshal's words: without the decoder's offset
                raise errors.invalid_json(_OFFSET.sub("", err.description[len("invalid JSON: ") :])) from None
            seq = consumer.reset(int(req.get("seq") or 0))
            resp.update({**consumer.info(), "ts": rfc3339(now_ns()), "reset_seq": seq})
        except ApiError as err:
            resp["error"] = err.json()
            resp["reset_seq"] = 0
            answer_hdrs = None
        self.account.client.publish(reply, None, answer_hdrs, encode(resp))

    def consumer_names(self, toks: list[str], payload: bytes) -> Reply:
        req = requests.parse(payload, requests.CONSUMERS)
        stream = self._stream(toks[2])
        names = sorted(stream.public_consumers())
        offset = _offset(req, len(names))
        return {
            "total": len(names),
            "offset": offset,
            "limit": NAMES_LIMIT,
            "consumers": names[offset : offset + NAMES_LIMIT],
        }

    def consumer_list(self, toks: list[str], payload: bytes) -> Reply:
        req = requests.parse(payload, requests.CONSUMERS)
        stream = self._stream(toks[2])
        names = sorted(stream.public_consumers())
        offset = _offset(req, len(names))
        ts = rfc3339(now_ns())
        items = [
            {**stream.consumers[n].info(stored_config=True), "ts": ts}
            for n in names[offset : offset + LIST_LIMIT]
        ]
        return {"total": len(names), "offset": offset, "limit": LIST_LIMIT, "consumers": items}

    def msg_next(
        self, stream_name: str, name: str, reply: bytes | None, hdrs: bytes | None, payload: bytes
    ) -> None:
        stream = self.account.streams.get(stream_name)
        consumer = stream.consumers.get(name) if stream is not None else None
        if consumer is None:
            if reply:  # nats-server has no subscription for it: the requester hears "no responders"
                subject = b"$JS.API.CONSUMER.MSG.NEXT.%s.%s" % (stream_name.encode(), name.encode())
                self._no_responders(subject, reply)
            return
        if reply and hdrs and not consumer.push:  # (a push consumer's 409 comes first)
            level = get_header(hdrs, b"Nats-Required-Api-Level")
            if level is not None and not _level_met(level):
                self.account.client.publish(reply, None, headers(b"412 Required Api Level"), b"")
                return
        consumer.request_next(reply, payload)

    def _no_responders(self, subject: bytes, reply: bytes) -> None:
        """A request nothing of nats-server's would listen for: its requester is told as if nobody had
        subscribed (delivery.Client.no_responders: a client that asked for it in CONNECT hears a 503 on
        its own reply subscription, no one else does). A requester on another server (its request came
        by a route, for our `$JS.API.>` interest) or in another account (through a service import) could
        not be told by its own server or account, which saw the request delivered: the status goes back
        along the reply's way, as nats-server's requester would have heard it (through an import: only if
        the requester asked for it)."""
        client = self.account.client
        origin = client.origin
        if origin is None:
            return
        if isinstance(origin, Connection) and origin.account != client.account:  # through an import
            if origin.opts.no_responders:
                client.publish(reply, None, no_responders_headers(subject), b"")
        elif origin.is_route:
            client.publish(reply, None, no_responders_headers(subject), b"")
        else:
            origin.no_responders(subject, reply)
