"""Mirrors and sources: a stream that copies the messages of other streams.

nats-server does it with an internal push consumer on each origin (flow control, heartbeats); on one server
pynatsd reads the origin's store directly, which is observably the same: a mirror keeps the origin's
sequences and timestamps (skipping what its filter leaves out), a source appends with new sequences and a
`Nats-Stream-Source: <name> <origin seq> <filter> <destination> <subject> <origin identity>` header. The
origin is a stream of the same account, or with `external`, of the account whose JetStream API the prefix
reaches (its own domain, or a service import of another account's `$JS.API` with the deliver prefix
imported back). An origin on another server (an `external` prefix answered across a leaf node or route)
is copied as nats-server copies it, through a consumer there (remote_sourcing.py), as is any origin read
through a durable of it named by `consumer` (durable sourcing, on this server or another). The position in
each origin is the stream's own content (a mirror's last sequence; the last source header per source, or the
positions saved beside it if further on), so it survives any stop, kill -9 included, exactly as far as the
copies did.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pynatsd.accounts.links import AccountLinks
from pynatsd.base.hashing import base62_sha256
from pynatsd.base.logging import get_logger
from pynatsd.jetstream import errors
from pynatsd.jetstream.errors import ApiError
from pynatsd.jetstream.remote_sourcing import RemoteFeed
from pynatsd.jetstream.transform import SubjectTransform, TransformError, validate_mapping
from pynatsd.jetstream.util import filters_regex, get_header, now_ns, parse_rfc3339, rfc3339
from pynatsd.protocol.subjects import is_literal_subject, is_valid_subject, matches, overlap, subset

if TYPE_CHECKING:
    from pynatsd.jetstream.account import JsAccount
    from pynatsd.jetstream.stream import Stream

log = get_logger()

HEARTBEAT = 1.0  # seconds: nats-server's sourceHealthHB, how stale `active` gets on an idle origin
BATCH = 1024  # messages copied per loop turn, so a long catch-up does not hold up the server
SOURCE_HEADER = b"Nats-Stream-Source"


def server_hash(text: str) -> str:
    """nats-server's getHash: 8 characters of base 62 from the SHA-256 of `text`."""
    return base62_sha256(text, 8)


def stream_identity(created_ns: int) -> str:
    """A stream's identity as nats-server derives it (a hash of its creation time): tells a recreated
    origin from the one a source copied from."""
    return server_hash(rfc3339(created_ns))


# -- configuration ---------------------------------------------------------------------------------------
def normalize_sourcing(cfg: dict[str, Any], first_seq: int, marker_ttl: int) -> None:
    """nats-server's checks of `mirror` and `sources` (checkStreamCfg's order and words), and both written
    back as it writes them; raises ApiError. What needs the other streams is `check_origins`."""
    mirror = cfg.get("mirror")
    if mirror is not None:
        if first_seq:
            raise errors._e(400, 10143, "stream mirrors can not have first sequence configured")
        if cfg.get("subjects"):
            raise errors._e(400, 10034, "stream mirrors can not contain subjects")
        if cfg.get("sources"):
            raise errors._e(400, 10031, "stream mirrors can not also contain other sources")
        if cfg.get("allow_msg_counter"):
            raise errors._e(400, 10173, "stream mirrors can not also calculate counters")
        if cfg.get("allow_atomic"):
            raise errors._e(400, 10198, "stream mirrors can not also use atomic publishing")
        if cfg.get("allow_batched"):
            raise errors._e(400, 10209, "stream mirrors can not also use batch publishing")
        if cfg.get("allow_msg_schedules"):
            raise errors._e(400, 10186, "stream mirrors can not also schedule messages")
        _check_durable(mirror, 10213, "mirror")
        transforms = mirror.get("subject_transforms") or []
        if mirror.get("filter_subject") and transforms:
            raise errors._e(
                400, 10150, "mirror with multiple subject transforms cannot also have a single subject filter"
            )
        if marker_ttl > 0:
            raise errors.stream_invalid_config("subject delete markers forbidden on mirrors")
        for i, tr in enumerate(transforms):
            src, dest = tr.get("src") or "", tr.get("dest") or ""
            _check_transform(src, dest, 10151, 10154, "mirror")
            for j, other in enumerate(transforms):
                if i != j and overlap((src or ">").encode(), (other.get("src") or ">").encode()):
                    raise errors._e(400, 10152, "mirror subject filters can not overlap")
        if not _valid_name(mirror.get("name")):
            raise errors._e(400, 10142, "mirrored stream name is invalid")
        cfg["mirror"] = _written(mirror)
    sources = cfg.get("sources")
    if sources:
        if cfg.get("allow_msg_schedules"):
            raise errors._e(400, 10187, "stream source can not also schedule messages")
        seen: set[str] = set()
        durables: set[str] = set()
        for source in sources:
            if not isinstance(source, dict) or not _valid_name(source.get("name")):
                raise errors._e(400, 10141, "sourced stream name is invalid")
            iname = index_name(source)
            if iname in seen:
                raise errors._e(400, 10140, "duplicate source configuration detected")
            seen.add(iname)
            transforms = source.get("subject_transforms") or []
            if source.get("filter_subject") and transforms:
                raise errors._e(
                    400,
                    10144,
                    "source with multiple subject transforms cannot also have a single subject filter",
                )
            for tr in transforms:
                _check_transform(tr.get("src") or "", tr.get("dest") or "", 10145, 10146, "source")
            for i, tr in enumerate(transforms):
                for j, other in enumerate(transforms):
                    if i != j and subset((tr.get("src") or ">").encode(), (other.get("src") or ">").encode()):
                        raise errors._e(400, 10147, "source filters can not overlap")
            if _check_durable(source, 10215, "source"):
                durable = f"{_external_name(source)} {source['consumer'].get('name')}"
                if durable in durables:  # one consumer for two sources of the stream
                    raise errors._e(400, 10216, "duplicate stream source consumer detected")
                durables.add(durable)
        cfg["sources"] = [_written(s) for s in sources]
    _check_prefixes([mirror] if mirror is not None else sources or [])


def _check_prefixes(sources: list[dict[str, Any]]) -> None:
    """nats-server's checks of the `external` prefixes: every deliver prefix first, then the API ones."""
    externals = [s["external"] for s in sources if s.get("external")]
    for ext in externals:
        deliver = ext.get("deliver") or ""
        if deliver and not _publishable(deliver):
            raise errors._e(
                400, 10024, f"stream external delivery prefix {deliver} must not contain wildcards"
            )
    for ext in externals:
        api = ext.get("api") or ""
        if api and not _publishable(api):
            raise errors.stream_invalid_config(
                f"stream external api prefix {json.dumps(api)} must be a valid subject without wildcards"
            )
        if api and overlap(api.encode(), b"$JS.API"):
            raise errors._e(400, 10021, f"stream external api prefix {api} must not overlap with $JS.API")


def _publishable(subject: str) -> bool:
    return is_valid_subject(subject.encode()) and is_literal_subject(subject.encode())


def _check_durable(source: dict[str, Any], code: int, what: str) -> bool:
    """nats-server's checks of a mirror's or source's `consumer` (durable sourcing: a named durable of the
    origin, reset rather than made): a valid name and literal deliver subject, no start and no filter of
    its own. True when there is one."""
    durable = source.get("consumer")
    if durable is None:
        return False
    name, deliver = durable.get("name") or "", (durable.get("deliver_subject") or "").encode()
    if (
        not name
        or any(c in name for c in " \t\r\n\f.*>\\/")
        or not is_literal_subject(deliver)
        or not is_valid_subject(deliver)
        or source.get("opt_start_seq")
        or source.get("opt_start_time")
        or source.get("filter_subject")
    ):
        raise errors._e(400, code, f"stream {what} consumer config is invalid")
    return True


def _valid_name(name: Any) -> bool:
    """nats-server's isValidAssetName (a stream's name rules)."""
    if not isinstance(name, str) or not name:
        return False
    return not any(c in name for c in " \t\r\n\f.*>/\\\x00")


def _check_transform(src: str, dest: str, src_code: int, dest_code: int, what: str) -> None:
    if src and not is_valid_subject(src.encode()):
        raise errors._e(400, src_code, f"{what} transform source: invalid subject {src}")
    try:
        validate_mapping(src.encode(), dest.encode())
    except TransformError as exc:
        raise errors._e(400, dest_code, f"{what} transform: {exc}") from None


def _written(source: dict[str, Any]) -> dict[str, Any]:
    """A mirror or source as nats-server writes it back (its fields in order, empty ones left out)."""
    out: dict[str, Any] = {"name": source["name"]}
    for key in ("opt_start_seq", "opt_start_time", "filter_subject"):
        if source.get(key):
            out[key] = source[key]
    transforms = source.get("subject_transforms")
    if transforms:
        out["subject_transforms"] = [
            {"src": t.get("src") or "", "dest": t.get("dest") or ""} for t in transforms
        ]
    external = source.get("external")
    if external:
        out["external"] = {"api": external.get("api") or "", "deliver": external.get("deliver") or ""}
    durable = source.get("consumer")
    if durable is not None:
        out["consumer"] = {"name": durable["name"], "deliver_subject": durable["deliver_subject"]}
    return out


def index_name(source: dict[str, Any]) -> str:
    """nats-server's index name of a source: its stream, filters and destinations (the header's middle)."""
    transforms = source.get("subject_transforms") or []
    if transforms:
        filters = "\f".join(t.get("src") or ">" for t in transforms)
        dests = "\f".join(t.get("dest") or ">" for t in transforms)
    else:
        filters, dests = source.get("filter_subject") or ">", ">"
    name = _external_name(source)
    durable = source.get("consumer")
    if durable is not None:  # a durable of the origin is another source of it
        name += ":C=" + server_hash(durable.get("name") or "")
    return f"{name} {filters} {dests}"


def _external_name(source: dict[str, Any]) -> str:
    """A source's stream name, with its API prefix's hash when external (the same stream name may be in
    several accounts or domains)."""
    external = source.get("external")
    if external:
        return f"{source['name']}:{server_hash(external.get('api') or '')}"
    return str(source["name"])


def check_origins(account: JsAccount, cfg: dict[str, Any]) -> None:
    """The checks of a mirror's or source's config that look at the origin streams (those that exist:
    a missing origin is allowed, copied from once it appears): message sizes, and cycles."""
    max_size = cfg["max_msg_size"]
    mirror = cfg.get("mirror")
    if mirror is not None and not mirror.get("external"):
        origin = account.streams.get(mirror["name"])
        if origin is not None:
            theirs = origin.config["max_msg_size"]
            if max_size > 0 and theirs > 0 and max_size < theirs:
                raise errors._e(400, 10030, "stream mirror must have max message size >= source")
            cfg["mirror_direct"] = bool(origin.config["allow_direct"])
    for source in cfg.get("sources") or []:
        origin = None if source.get("external") else account.streams.get(source["name"])
        if origin is not None:
            theirs = origin.config["max_msg_size"]
            if max_size > 0 and theirs > 0 and max_size < theirs:
                raise errors._e(400, 10046, "stream source must have max message size >= target")
    _check_cycles(account, cfg)


def _check_cycles(account: JsAccount, cfg: dict[str, Any]) -> None:
    """nats-server's cycle check: a stream reached again through sources whose filter meets the subjects
    of the stream sourcing it, or through a mirror."""
    to_visit = [cfg]
    visited: set[str] = set()
    while to_visit:
        current = to_visit.pop(0)
        visited.add(current["name"])
        for src in current.get("sources") or []:
            if src.get("external"):
                continue
            if src["name"] in visited:
                filt = src.get("filter_subject") or ""
                subjects = current.get("subjects") or []
                if not filt or any(overlap(s.encode(), filt.encode()) for s in subjects):
                    raise errors.stream_invalid_config("detected cycle")
            elif (other := account.streams.get(src["name"])) is not None:
                to_visit.append(other.config)
        mirror = current.get("mirror")
        if mirror is not None and not mirror.get("external"):
            if mirror["name"] in visited:
                raise errors.stream_invalid_config("detected cycle")
            if (other := account.streams.get(mirror["name"])) is not None:
                to_visit.append(other.config)


# -- copying ------------------------------------------------------------------------------------------
class SourceLink:
    """One origin of a stream (its mirror, or one of its sources): where the copy stands, and the copying."""

    def __init__(self, stream: Stream, spec: dict[str, Any], is_mirror: bool) -> None:
        self.stream = stream
        self.spec = spec
        self.is_mirror = is_mirror
        self.name: str = spec["name"]
        self.iname = index_name(spec)
        self._header_name, filters, dests = self.iname.split(" ")
        self._header_mid = f"{filters} {dests}"
        self.external: dict[str, str] | None = spec.get("external")
        self.filter: str = spec.get("filter_subject") or ""
        # Durable sourcing: the origin's durable of this name, asked for by CONSUMER.RESET (never made).
        self.durable: dict[str, str] | None = spec.get("consumer")
        # (filter, transform or None) per subject transform: the first whose filter matches applies.
        self.transforms: list[tuple[bytes, SubjectTransform | None]] = []
        for tr in spec.get("subject_transforms") or []:
            src, dest = (tr.get("src") or ">").encode(), (tr.get("dest") or "").encode()
            self.transforms.append((src, SubjectTransform(src, dest) if dest else None))
        filters_list = [f for f, _ in self.transforms] or ([self.filter.encode()] if self.filter else [])
        self._match: Callable[[bytes], bool] | None = None
        if filters_list and b">" not in filters_list:
            pattern = filters_regex(filters_list)
            self._match = lambda subject: pattern.fullmatch(subject) is not None
        self.position = 0  # the last origin sequence seen (copied or filtered out)
        self.ident = ""  # the identity of the origin the position is in
        self.recovered = False  # the position has been worked out (from the stream's content)
        self.origin: Stream | None = None
        self.error: dict[str, Any] | None = None
        self.last_heard = 0  # ns: when the origin was last read (nats-server: its last message or heartbeat)
        self._scheduled = False
        self._stopped = False
        self.tried = False  # copying was attempted at least once
        self.caught_up = False  # has copied all the origin held once (mirror_direct answers from then on)
        self._timer: Any = None
        self.remote: RemoteFeed | None = None  # the consumer on another server feeding it (external)
        self._reachable = False  # the external API was answered across a link at the last look

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self, updated: bool = False) -> None:
        """Copying starts in a coming turn of the loop; after an update (`updated`), a missing origin is
        reported at once, as nats-server's update answer has it."""
        if updated and self.name not in self.stream.account.streams:
            self.error = errors.stream_not_found().json()
        self.kick()
        self._timer = self.stream.account.js.loop.call_later(HEARTBEAT, self._heartbeat)

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._stop_remote()
        self._detach()

    def delete_feed(self) -> None:
        """The stream goes: the consumer feeding it on another server goes too (a durable stays: it is
        its owner's)."""
        if self.remote is not None and self.durable is None:
            self.remote.delete_consumer()

    def _stop_remote(self) -> None:
        if self.remote is not None:
            self.remote.stop()
            self.remote = None

    def _heartbeat(self) -> None:
        """Once a second, as nats-server's idle heartbeats: an origin that appeared or went is noticed; the
        sources' positions are saved (see save_positions)."""
        self._timer = self.stream.account.js.loop.call_later(HEARTBEAT, self._heartbeat)
        self.kick()
        if self.remote is not None:
            reachable = self.external is None or self._answered_elsewhere()
            self.remote.tick(reachable, self._reachable)
            self._reachable = reachable
        if self.stream.links and self.stream.links[0] is self:
            save_positions(self.stream)

    def kick(self) -> None:
        """Copy what is new in the origin, in a coming turn of the loop (called on every stored message)."""
        if not self._scheduled and not self._stopped:
            self._scheduled = True
            self.stream.account.js.loop.call_soon(self._drain)

    def _detach(self) -> None:
        origin = self.origin
        if origin is not None and self in origin.followers:
            origin.followers.remove(self)
        self.origin = None

    def _attach(self, origin: Stream) -> None:
        self._detach()
        self.origin = origin
        origin.followers.append(self)
        ident = stream_identity(origin.created)
        if not self.recovered:
            self._recover()
        self.take_identity(ident)
        if self.position == 0:
            self.position = self._start_position(origin)

    def take_identity(self, ident: str) -> None:
        """The origin's identity (empty: not told); a recreated origin is copied again from its start."""
        if ident and self.ident and self.ident != ident:
            log.warning(
                "JetStream source stream %r for stream '%s > %s' was recreated, resetting source state",
                self.name,
                self.stream.account.name,
                self.stream.name,
            )
            self.position = 0
        self.ident = ident

    def _recover(self) -> None:
        """Where the copy stands, from the stream's own content (a mirror: its last sequence; a source: the
        last message with its header), as nats-server works it out at every start; for a source, or the
        saved position if further on (its copies may have been purged since)."""
        self.recovered = True
        st = self.stream.store
        if self.is_mirror:
            if st.msgs or st.first_seq > 1 or st.last_seq:
                self.position = st.last_seq
            return
        saved = _saved_positions(self.stream).get(self.iname)
        self._scan()
        if (
            isinstance(saved, list)
            and len(saved) == 2
            and isinstance(saved[0], int)
            and saved[0] > self.position
        ):
            self.position, self.ident = saved[0], str(saved[1])

    def _scan(self) -> None:
        """The position the last copy of this source in the stream tells (newest first, until found)."""
        st = self.stream.store
        seq = st.last_seq
        while seq >= st.first_seq and seq > 0:
            msg = st.load(seq) if seq in st else None
            seq -= 1
            if msg is None or not msg.hdrs:
                continue
            header = get_header(msg.hdrs, SOURCE_HEADER)
            if header is None:
                continue
            fields = header.decode(errors="replace").split(" ")
            if len(fields) >= 4 and " ".join((fields[0], fields[2], fields[3])) == self.iname:
                try:
                    self.position = int(fields[1])
                except ValueError:
                    continue
                self.ident = fields[5] if len(fields) >= 6 else ""
                return

    def _start_position(self, origin: Stream) -> int:
        """The sequence before the first to copy, the first time: opt_start_seq, opt_start_time or all."""
        start_seq = self.spec.get("opt_start_seq") or 0
        if start_seq:
            return int(start_seq) - 1
        start_time = self.spec.get("opt_start_time")
        if start_time:
            return origin.store.seq_for_time(parse_rfc3339(start_time)) - 1
        return 0

    # -- copying ---------------------------------------------------------------------------------------
    def _drain(self) -> None:
        self._scheduled = False
        if self._stopped:
            return
        self.tried = True
        if self.durable is not None:  # always through the origin's API, as nats-server, here or elsewhere
            if self.remote is None:  # (a link coming up later has it asked again at once: see _heartbeat)
                self._reachable = self.external is None or self._answered_elsewhere()
                self.remote = RemoteFeed(self)
                self.remote.start()
            return
        account = self.stream.account
        home = account if self.external is None else self._external_account()
        if home is None and self._answered_elsewhere():
            if self.remote is None:  # another server's JetStream: copied through its API
                self._detach()
                self.error = None
                self._reachable = True
                self.remote = RemoteFeed(self)
                self.remote.start()
            return
        if self.remote is not None and home is None:
            return  # the link is down: the feed takes up again when it is back
        self._stop_remote()
        origin = home.streams.get(self.name) if home is not None else None
        if origin is None:
            self._detach()
            # An API nobody answers (an external prefix leading nowhere): no answer, hence no error.
            self.error = errors.stream_not_found().json() if home is not None else None
            self.last_heard = 0
            return
        if origin is not self.origin:
            self._attach(origin)
        self.error = None
        self.last_heard = now_ns()
        msgs = origin.store.load_from(self.position + 1, BATCH, 1 << 62, self._match)
        release = origin.config["retention"] != "limits"
        for msg in msgs:
            try:
                self._copy(msg.subject, msg.seq, msg.hdrs, msg.data, msg.ts)
            except (ApiError, OSError) as exc:
                # nats-server goes on with the next message too (it logs, rate limited)
                log.warning(
                    "Error processing inbound %s message for '%s' > '%s': %s",
                    "mirror" if self.is_mirror else "source",
                    account.name,
                    self.stream.name,
                    exc,
                )
            self.position = msg.seq
            if release:  # copied: as acked by nats-server's sourcing consumer (on delivery, AckNone)
                origin.on_acked(msg.seq)
        if msgs:
            try:  # written now: nobody publishes into this stream, so no PubAck would have it written
                self.stream.store.commit()
            except OSError as exc:
                log.error("JetStream stream %s: storing failed: %s", self.stream.name, exc)
        if len(msgs) == BATCH:
            self.kick()
        else:
            self.caught_up = True

    def _answered_elsewhere(self) -> bool:
        """Whether the consumer create request of an `external` prefix no account here answers would go
        across a route, leaf node or gateway (to another server's JetStream)."""
        assert self.external is not None
        api = self.external.get("api") or ""
        account = self.stream.account
        request = f"{api}.CONSUMER.CREATE.{self.name}".encode()
        found = account.js.server.sublist_for(account.name).match(request)
        members = [*found.plain, *(sub for group in found.groups for sub in group)]
        return any(sub.conn.is_route for sub in members)

    def _external_account(self) -> JsAccount | None:
        """The account whose stream an `external` mirror or source reads: where the consumer create request
        nats-server sends through the API prefix would be answered (its own JetStream domain, or the
        exporter of a service import of `$JS.API`), if its deliveries would come back (the account's own,
        or a stream import of the deliver subject from there). None: no answer, as from nowhere."""
        assert self.external is not None
        account = self.stream.account
        js = account.js
        api = self.external.get("api") or ""
        deliver = self.external.get("deliver") or "$JS"
        deliver_subject = f"{deliver}.{'M' if self.is_mirror else 'S'}.x".encode()
        if js.domain and api == f"$JS.{js.domain}.API":
            return account
        links = js.server.links
        if not isinstance(links, AccountLinks):
            return None
        tail = f"CONSUMER.CREATE.{self.name}"
        request = f"{api}.{tail}".encode()
        answered_at = {f"$JS.API.{tail}".encode()}
        if js.domain:
            answered_at.add(f"$JS.{js.domain}.API.{tail}".encode())
        for service, _ in links.services:
            if service.importer != account.name or not matches(service.local, request):
                continue
            exporter = js.accounts.get(service.exporter)
            if exporter is None or service.remote_subject(request) not in answered_at:
                continue
            for imported in links.streams.get(account.name, ()):
                if (
                    imported.exporter == exporter.name
                    and matches(imported.source, deliver_subject)
                    and imported.local_subject(deliver_subject) == deliver_subject
                ):
                    return exporter
        return None

    def wants(self, subject: bytes) -> bool:
        """Whether its filters take a message of `subject` (for an origin's interest retention)."""
        return self._match is None or self._match(subject)

    def _transformed(self, subject: bytes) -> bytes:
        for _, transform in self.transforms:
            if transform is not None:
                out = transform.match(subject)
                if out is not None:
                    return out
        return subject

    def _copy(self, subject: bytes, seq: int, hdrs: bytes | None, data: bytes, ts: int) -> None:
        if self.is_mirror:
            self.stream.store_mirrored(self._transformed(subject), seq, hdrs, data, ts)
            return
        line = b"%s: %s %d %s %s%s\r\n" % (
            SOURCE_HEADER,
            self._header_name.encode(),
            seq,
            self._header_mid.encode(),
            subject,
            b" " + self.ident.encode() if self.ident else b"",  # not told by an older origin server
        )
        head = _without_copied_headers(hdrs)
        self.stream.process(self._transformed(subject), head[:-2] + line + b"\r\n", data, True)

    # -- info ----------------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """The `mirror` / `sources` entry of STREAM.INFO (nats-server's StreamSourceInfo)."""
        origin = self.origin
        remote = self.remote
        lag = 0
        if origin is not None and self.error is None:
            lag = origin.store.count_from(self.position + 1, self._match)
        elif remote is not None:
            lag = remote.info_lag()
        out: dict[str, Any] = {"name": self.name}
        if self.external is not None:
            out["external"] = self.spec["external"]
        out["lag"] = lag
        if not self.is_mirror and self.position and (origin is not None or remote is not None):
            out["seq"] = self.position
        last_heard = remote.last if remote is not None else self.last_heard
        out["active"] = now_ns() - last_heard if last_heard else -1
        error = remote.error if remote is not None else self.error
        if error is not None:
            out["error"] = error
        # nats-server shows a mirror's filter from its first attempt to reach the origin on
        if self.filter and (self.tried or not self.is_mirror):
            out["filter_subject"] = self.filter
        if self.transforms:
            out["subject_transforms"] = self.spec["subject_transforms"]
        return out


def _without_copied_headers(hdrs: bytes | None) -> bytes:
    """A sourced message's own headers without those nats-server drops from a copy (an earlier source
    header, Nats-Expected-*, Nats-Batch-*); a bare header block when none are left."""
    if not hdrs or len(hdrs) <= 12:
        return b"NATS/1.0\r\n\r\n"
    lines = hdrs.split(b"\r\n")
    kept = [
        ln
        for ln in lines[1:]
        if ln
        and not ln.startswith(b"Nats-Stream-Source:")
        and not ln.startswith(b"Nats-Expected-")
        and not ln.startswith(b"Nats-Batch-")
    ]
    return b"\r\n".join([lines[0], *kept, b""]) + b"\r\n"


_POSITIONS = "sources.json"


def save_positions(stream: Stream) -> None:
    """Write where each source of a file stream stands (`sources.json` beside its messages), when it
    changed: the copies that tell it at a start may be gone by then (purged, or aged out), as nats-server
    keeps them in its store's state. Written once a second, before a purge and at a stop."""
    if stream.directory is None or stream.config.get("mirror"):
        return
    positions = {link.iname: [link.position, link.ident] for link in stream.links if link.position}
    if not positions or positions == _written_positions.get(stream.directory):
        return
    path = stream.directory / _POSITIONS
    try:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(positions))
        tmp.replace(path)
    except OSError as exc:
        log.warning("JetStream stream %s: source positions not saved: %s", stream.name, exc)
        return
    _written_positions[stream.directory] = positions


_written_positions: dict[Any, dict[str, list[Any]]] = {}


def _saved_positions(stream: Stream) -> dict[str, Any]:
    if stream.directory is None:
        return {}
    try:
        saved = json.loads((stream.directory / _POSITIONS).read_text())
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}


def links_of(stream: Stream) -> list[SourceLink]:
    """The links a stream's config asks for: its mirror, or one per source."""
    cfg = stream.config
    if cfg.get("mirror"):
        return [SourceLink(stream, cfg["mirror"], True)]
    return [SourceLink(stream, s, False) for s in cfg.get("sources") or []]


def origin_created(account: JsAccount, name: str) -> None:
    """A stream was created: the mirrors and sources waiting for it start copying now."""
    for stream in account.streams.values():
        for link in stream.links:
            if link.name == name:
                link.kick()


def direct_mirror(account: JsAccount, origin: str) -> Stream | None:
    """A mirror of `origin` with `mirror_direct` that has caught up with it (nats-server's mirror joins the
    origin's direct get queue group then): it answers direct gets addressed to the origin."""
    for stream in account.streams.values():
        mirror = stream.config.get("mirror")
        if mirror and mirror["name"] == origin and stream.config.get("mirror_direct"):
            link = stream.links[0] if stream.links else None
            if link is not None and link.tried and link.caught_up:
                return stream
    return None
