"""`$JS.API.>`: requests in, nats-server's response JSON (type, fields, error codes) out."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pynatsd.broker.logging import get_logger
from pynatsd.jetstream import consumer as consumer_mod
from pynatsd.jetstream import errors
from pynatsd.jetstream.errors import ApiError
from pynatsd.jetstream.stream import API_LEVEL, Stream, normalize_config
from pynatsd.jetstream.util import (
    get_header,
    headers,
    now_ns,
    parse_rfc3339,
    rfc3339,
    subjects_overlap,
)
from pynatsd.protocol.encoder import no_responders_headers

if TYPE_CHECKING:
    from pynatsd.jetstream.account import JsAccount

log = get_logger()

_TYPE = "io.nats.jetstream.api.v1."
NAMES_LIMIT = 1024
LIST_LIMIT = 256
# Go's encoding/json escapes these; clients never care, byte-level comparisons do.
_GO_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})

Reply = dict[str, Any]
_PAGED = {"total": 0, "offset": 0, "limit": 0}
# The fields nats-server's responses carry even with an error (no omitempty in its structs).
_ERROR_FIELDS: dict[str, Reply] = {
    "stream_info_response": _PAGED,
    "stream_purge_response": {"purged": 0},
    "stream_names_response": {**_PAGED, "streams": None},
    "stream_list_response": {**_PAGED, "streams": []},
    "consumer_names_response": {**_PAGED, "consumers": []},
    "consumer_list_response": {**_PAGED, "consumers": []},
}


def encode(body: Reply) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).translate(_GO_ESCAPES).encode()


def _request(payload: bytes) -> dict[str, Any]:
    """The request JSON ({} for an empty body); ApiError on invalid JSON."""
    if not payload.strip():
        return {}
    try:
        req = json.loads(payload)
    except ValueError as exc:
        raise errors.invalid_json(str(exc)) from None
    if not isinstance(req, dict):
        raise errors.invalid_json("expected an object")
    return req


def _direct_request(toks: list[str], payload: bytes) -> dict[str, Any] | bytes:
    """A direct get's request, or the status refusing it (nats-server's checks and words)."""
    if len(toks) > 3:  # DIRECT.GET.<stream>.<subject>: the last message of that subject
        req: Any = {}
        if payload:
            try:
                req = json.loads(payload)
            except ValueError:
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
        req = json.loads(payload)
    except ValueError:
        return b"408 Malformed Request"
    if not isinstance(req, dict) or not all(
        isinstance(req.get(k, 0), int) and not isinstance(req.get(k), bool)
        for k in ("seq", "batch", "max_bytes")
    ):
        return b"408 Malformed Request"
    if req.get("seq", 0) < 0 or not isinstance(req.get("start_time", ""), str):
        return b"408 Malformed Request"
    if req.get("start_time"):
        try:
            parse_rfc3339(req["start_time"])
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
    if multi:
        return b"408 Bad Request"  # multi_last is not served by pynatsd (see README "JetStream")
    return req


# What nats-server adds to its 10039 answer, by response type, for an account without JetStream.
_NOT_ENABLED_EXTRAS: dict[str, Reply] = {
    "stream_info_response": {"total": 0, "offset": 0, "limit": 0},
    "stream_purge_response": {"purged": 0},
    "stream_names_response": {"total": 0, "offset": 0, "limit": 0, "streams": None},
    "stream_list_response": {"total": 0, "offset": 0, "limit": 0, "streams": []},
    "consumer_names_response": {"total": 0, "offset": 0, "limit": 0, "consumers": []},
    "consumer_list_response": {"total": 0, "offset": 0, "limit": 0, "consumers": []},
    "stream_restore_response": {"deliver_subject": ""},
    "consumer_pause_response": {"paused": False, "pause_until": "0001-01-01T00:00:00Z"},
}
_CLUSTERED_ONLY = frozenset(
    {"stream_leader_stepdown_response", "stream_remove_peer_response", "consumer_leader_stepdown_response"}
)


def _not_enabled(kind: str) -> Reply:
    """nats-server's answer to an API request of an account without JetStream (10039; 10010 for the
    requests that only a cluster serves)."""
    if kind in _CLUSTERED_ONLY:
        error = {"code": 503, "err_code": 10010, "description": "JetStream clustering support required"}
    else:
        error = {"code": 503, "err_code": 10039, "description": "JetStream not enabled for account"}
    return {"type": _TYPE + kind, "error": error, **_NOT_ENABLED_EXTRAS.get(kind, {})}


class Api:
    """Dispatches one account's `$JS.API.>` requests."""

    def __init__(self, account: JsAccount) -> None:
        self.account = account
        # (tokens after $JS.API, with "*" for a name) -> (response type, handler)
        self.routes: dict[tuple[str, ...], tuple[str, Callable[[list[str], bytes], Reply]]] = {
            ("INFO",): ("account_info_response", self.info),
            ("STREAM", "CREATE", "*"): ("stream_create_response", self.stream_create),
            ("STREAM", "UPDATE", "*"): ("stream_update_response", self.stream_update),
            ("STREAM", "INFO", "*"): ("stream_info_response", self.stream_info),
            ("STREAM", "DELETE", "*"): ("stream_delete_response", self.stream_delete),
            ("STREAM", "PURGE", "*"): ("stream_purge_response", self.stream_purge),
            ("STREAM", "NAMES"): ("stream_names_response", self.stream_names),
            ("STREAM", "LIST"): ("stream_list_response", self.stream_list),
            ("STREAM", "MSG", "GET", "*"): ("stream_msg_get_response", self.msg_get),
            ("STREAM", "MSG", "DELETE", "*"): ("stream_msg_delete_response", self.msg_delete),
            ("CONSUMER", "CREATE", "*"): ("consumer_create_response", self.consumer_create),
            ("CONSUMER", "CREATE", "*", "*"): ("consumer_create_response", self.consumer_create),
            ("CONSUMER", "CREATE", "*", "*", "*"): ("consumer_create_response", self.consumer_create),
            ("CONSUMER", "DURABLE", "CREATE", "*", "*"): ("consumer_create_response", self.consumer_durable),
            ("CONSUMER", "INFO", "*", "*"): ("consumer_info_response", self.consumer_info),
            ("CONSUMER", "DELETE", "*", "*"): ("consumer_delete_response", self.consumer_delete),
            ("CONSUMER", "NAMES", "*"): ("consumer_names_response", self.consumer_names),
            ("CONSUMER", "LIST", "*"): ("consumer_list_response", self.consumer_list),
        }
        # Known to nats-server but not served here: answered with an error instead of silence.
        self.unsupported: dict[tuple[str, ...], str] = {
            ("STREAM", "SNAPSHOT", "*"): "stream_snapshot_response",
            ("STREAM", "RESTORE", "*"): "stream_restore_response",
            ("STREAM", "LEADER", "STEPDOWN", "*"): "stream_leader_stepdown_response",
            ("STREAM", "PEER", "REMOVE", "*"): "stream_remove_peer_response",
            ("CONSUMER", "LEADER", "STEPDOWN", "*", "*"): "consumer_leader_stepdown_response",
            ("CONSUMER", "PAUSE", "*", "*"): "consumer_pause_response",
            ("CONSUMER", "UNPIN", "*", "*"): "consumer_unpin_response",
        }

    # -- dispatch -------------------------------------------------------------------------------------
    def handle(self, subject: bytes, reply: bytes | None, hdrs: bytes | None, payload: bytes) -> None:
        if self.account.client.origin_is_server:
            # A delivery to a deliver subject or pull reply inside $JS.API (nats-server shows those to its
            # API under the stored message's subject, which matches no API subject), a status or an answer
            # of ours: not a request from anyone entitled to make it.
            return
        if self.account.is_system:  # nats-server's answer to the system account's own clients
            if reply:
                kind = "account_info_response" if subject == b"$JS.API.INFO" else "system_response"
                self.account.client.publish(reply, None, None, encode(_not_enabled(kind)))
            return
        toks = subject.decode(errors="replace").split(".")[2:]
        if toks[:2] == ["CONSUMER", "MSG"] and len(toks) == 5 and toks[2] == "NEXT":
            self.msg_next(toks[3], toks[4], reply, payload)
            return
        if toks[:2] == ["DIRECT", "GET"] and len(toks) >= 3:
            self.direct_get(toks, reply, hdrs, payload)
            return
        if toks[:2] == ["CONSUMER", "CREATE"] and len(toks) > 4:
            toks = [*toks[:4], ".".join(toks[4:])]  # CONSUMER.CREATE.<stream>.<name>.<filter...>
        route, kind = None, ""
        for i in range(len(toks), 0, -1):
            key = tuple(toks[:i]) + ("*",) * (len(toks) - i)
            if key in self.routes:
                kind, route = self.routes[key]
                break
            if key in self.unsupported:
                kind = self.unsupported[key]
                break
        if not kind or not reply:
            return  # nats-server does not answer unknown API subjects either
        if not self.account.enabled:
            self.account.client.publish(reply, None, None, encode(_not_enabled(kind)))
            return
        self.account.api_total += 1
        try:
            if route is None:
                raise errors._e(501, 10003, f"{'.'.join(toks[:2]).lower()} is not supported by pynatsd")
            body = route(toks, payload)
            resp = {"type": _TYPE + kind, **body}
        except Exception as exc:  # an answer is owed whatever happened: never leave a request hanging
            err = exc if isinstance(exc, ApiError) else errors.general(f"{type(exc).__name__}: {exc}")
            if not isinstance(exc, ApiError):
                log.exception("JetStream API %s failed", subject.decode(errors="replace"))
            self.account.api_errors += 1
            resp = {"type": _TYPE + kind, "error": err.json()}
            resp.update(_ERROR_FIELDS.get(kind, {}))
        self.account.client.publish(reply, None, None, encode(resp))

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
        cfg = normalize_config(_request(payload), toks[2], create=True)
        self.account.check_stream_bytes(cfg)
        stream = self.account.create_stream(cfg)
        # nats-server says did_create for an idempotent repeat too.
        return {**stream.info(), "ts": rfc3339(now_ns()), "did_create": True}

    def stream_update(self, toks: list[str], payload: bytes) -> Reply:
        cfg = normalize_config(_request(payload), toks[2])
        self.account.check_stream_bytes(cfg)
        stream = self.account.update_stream(cfg)
        return {**stream.info(), "ts": rfc3339(now_ns())}

    def stream_info(self, toks: list[str], payload: bytes) -> Reply:
        req = _request(payload)
        stream = self._stream(toks[2])
        sf = req.get("subjects_filter")
        info = stream.info(subjects_filter=sf, deleted_details=bool(req.get("deleted_details")))
        total = len(info["state"].get("subjects", {}))
        return {
            "total": total,
            "offset": 0,
            "limit": 100_000 if sf else 0,
            **info,
            "cluster": {"leader": self.account.js.server.server_name},
            "ts": rfc3339(now_ns()),
        }

    def stream_delete(self, toks: list[str], payload: bytes) -> Reply:
        self.account.delete_stream(toks[2])
        return {"success": True}

    def stream_purge(self, toks: list[str], payload: bytes) -> Reply:
        req = _request(payload)
        purged = self._stream(toks[2]).purge(req)
        return {"success": True, "purged": purged}

    def _filtered_streams(self, req: dict[str, Any]) -> list[Stream]:
        streams = sorted(self.account.streams.values(), key=lambda s: s.name)
        subj = req.get("subject")
        if subj:
            sb = str(subj).encode()
            streams = [
                s for s in streams if any(subjects_overlap(sb, x.encode()) for x in s.config["subjects"])
            ]
        return streams

    def stream_names(self, toks: list[str], payload: bytes) -> Reply:
        req = _request(payload)
        streams = self._filtered_streams(req)
        offset = int(req.get("offset") or 0)
        page = streams[offset : offset + NAMES_LIMIT]
        return {
            "total": len(streams),
            "offset": offset,
            "limit": NAMES_LIMIT,
            "streams": [s.name for s in page],
        }

    def stream_list(self, toks: list[str], payload: bytes) -> Reply:
        req = _request(payload)
        streams = self._filtered_streams(req)
        offset = int(req.get("offset") or 0)
        page = streams[offset : offset + LIST_LIMIT]
        ts = rfc3339(now_ns())
        items = []
        for s in page:
            info = s.info()
            info["config"] = s.config  # the list shows the stored config, without the server's metadata
            items.append({**info, "ts": ts})
        return {"total": len(streams), "offset": offset, "limit": LIST_LIMIT, "streams": items}

    def msg_get(self, toks: list[str], payload: bytes) -> Reply:
        req = _request(payload)
        stream = self._stream(toks[3])
        return {"message": stream.message_json(stream.get_message(req))}

    def msg_delete(self, toks: list[str], payload: bytes) -> Reply:
        req = _request(payload)
        stream = self._stream(toks[3])
        seq = req.get("seq")
        if not isinstance(seq, int) or seq <= 0:
            raise errors.bad_request()
        stream.delete_message(seq)
        return {"success": True}

    def direct_get(self, toks: list[str], reply: bytes | None, hdrs: bytes | None, payload: bytes) -> None:
        """`$JS.API.DIRECT.GET.<stream>[.<subject>]`: messages themselves, their coordinates in headers; with
        `batch`, up to that many from `seq` on (or `start_time`, or matching `next_by_subj`), then a `204 EOB`
        status. Problems are status headers, as nats-server answers them (in its order of checks)."""
        stream = self.account.streams.get(toks[2])
        if stream is None or not stream.config["allow_direct"] or not reply:
            # nats-server only listens for streams that allow direct gets: "no responders".
            if reply:
                subject = ".".join(["$JS.API", *toks]).encode()
                self.account.client.publish(reply, None, no_responders_headers(subject), b"")
            return
        client = self.account.client
        level = get_header(hdrs, b"Nats-Required-Api-Level")
        if level is not None and (not level.isdigit() or int(level) > API_LEVEL):
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
        if req.get("stream_name") and req["stream_name"] != stream_name:
            raise errors.stream_mismatch()
        stream = self._stream(stream_name)
        raw = req.get("config", {})
        if not isinstance(raw, dict):
            raise errors.consumer_config_required()
        if name is None:
            if raw.get("durable_name"):
                raise errors.consumer_ephemeral_with_durable_name()
        elif durable_api:
            if not raw.get("durable_name"):
                raise errors.consumer_durable_name_not_set()
            if raw["durable_name"] != name:
                raise errors.consumer_durable_name_mismatch()
        else:
            given = raw.get("name") or raw.get("durable_name")
            if given and given != name:
                raise errors.consumer_durable_name_mismatch()
            if not raw.get("name"):
                raw = {**raw, "name": name}
            if filt is not None:
                fs = raw.get("filter_subjects")
                if fs and len(fs) > 1:
                    raise errors._e(
                        400, 10137, "consumer with multiple subject filters cannot use subject based API"
                    )
                if (raw.get("filter_subject") or (fs[0] if fs else "")) != filt:
                    raise errors.consumer_filter_mismatch()
        cfg = consumer_mod.normalize_config(raw, stream)
        self.account.check_ack_pending(raw, cfg)
        consumer = self.account.add_consumer(stream, cfg, str(req.get("action") or ""))
        return {**consumer.info(), "ts": rfc3339(now_ns())}

    def consumer_create(self, toks: list[str], payload: bytes) -> Reply:
        req = _request(payload)
        name = toks[3] if len(toks) > 3 else None
        filt = toks[4] if len(toks) > 4 else None
        return self._create(toks[2], req, name, False, filt)

    def consumer_durable(self, toks: list[str], payload: bytes) -> Reply:
        return self._create(toks[3], _request(payload), toks[4], True, None)

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

    def consumer_names(self, toks: list[str], payload: bytes) -> Reply:
        req = _request(payload)
        stream = self._stream(toks[2])
        names = sorted(stream.consumers)
        offset = int(req.get("offset") or 0)
        return {
            "total": len(names),
            "offset": offset,
            "limit": NAMES_LIMIT,
            "consumers": names[offset : offset + NAMES_LIMIT],
        }

    def consumer_list(self, toks: list[str], payload: bytes) -> Reply:
        req = _request(payload)
        stream = self._stream(toks[2])
        names = sorted(stream.consumers)
        offset = int(req.get("offset") or 0)
        ts = rfc3339(now_ns())
        items = [
            {**stream.consumers[n].info(stored_config=True), "ts": ts}
            for n in names[offset : offset + LIST_LIMIT]
        ]
        return {"total": len(names), "offset": offset, "limit": LIST_LIMIT, "consumers": items}

    def msg_next(self, stream_name: str, name: str, reply: bytes | None, payload: bytes) -> None:
        stream = self.account.streams.get(stream_name)
        consumer = stream.consumers.get(name) if stream is not None else None
        if consumer is None:
            if reply:  # nats-server has no subscription for it: the requester hears "no responders"
                subject = b"$JS.API.CONSUMER.MSG.NEXT.%s.%s" % (stream_name.encode(), name.encode())
                self.account.client.publish(reply, None, no_responders_headers(subject), b"")
            return
        consumer.request_next(reply, payload)
