"""One client connection: an `asyncio.Protocol` that feeds the sans-IO parser and routes its ops.

The path of one message (see shared/docs/architecture.md): `data_received` hands the bytes to the parser;
for each PUB the subject is matched in the account's sublist (a cache hit on the hot path) and the frame
is appended, by reference, to every target connection's outbound queue; nothing is written until the
whole read is processed, then every touched queue is flushed once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from pynatsd.broker.auth import DEFAULT_ACCOUNT, Authenticator, Permissions
from pynatsd.broker.logging import TRACE, get_logger
from pynatsd.broker.outbound import STALL_MAX, STALL_MIN, Consumer, Outbound
from pynatsd.broker.tls import StartedCoroutine, abortive_close, session_info
from pynatsd.protocol import encoder, errors
from pynatsd.protocol.connect import ConnectOptions, parse_connect
from pynatsd.protocol.ops import (
    CONNECT,
    ERR,
    HPUB,
    INFO,
    NAMES,
    OK,
    PING,
    PONG,
    PUB,
    PUBMIX,
    PUBRUN,
    SUB,
    UNSUB,
    Op,
)
from pynatsd.protocol.parser import Parser, expand_run
from pynatsd.protocol.subjects import is_literal_subject

if TYPE_CHECKING:
    from pynatsd.broker.server import Server
    from pynatsd.matcher import Sublist

log = get_logger()

_RESERVED_PUBLISH = (b"_GR_.", b"$NRG.")
_RESERVED_REPLY = (b"_R_.", b"$JS.ACK.", b"_GR_.")
_SYS_QUEUE = b"_sys_"
# Per-connection bounds of the MSG-head cache (Connection._heads): entries, and subject length.
_HEADS_CACHED = 64
_HEAD_SUBJECT_CACHED = 128
# The payload size from which a run is framed by joining slices rather than by one replace() (measured:
# replace is faster up to 128 B payloads, slicing from 256 B).
_SLICED_FROM = 200
# Reads from a publisher parsed without PUBMIX ops after one could not be framed at once.
_MIX_PAUSE = 64
_RTT_REFRESH = 3600.0
_FIRST_PING = 2.0

# Close reasons, as /connz reports them.
CLIENT_CLOSED = "Client Closed"
SERVER_SHUTDOWN = "Server Shutdown"
SLOW_CONSUMER_PENDING = "Slow Consumer (Pending Bytes)"
SLOW_CONSUMER_DEADLINE = "Slow Consumer (Write Deadline)"
STALE_CONNECTION = "Stale Connection"
PROTOCOL_VIOLATION = "Protocol Violation"
PARSE_ERROR = "Parse Error"
MAX_PAYLOAD_EXCEEDED = "Maximum Payload Exceeded"
MAX_CONTROL_LINE_EXCEEDED = "Maximum Control Line Exceeded"
AUTHENTICATION_VIOLATION = "Authentication Failure"
AUTHENTICATION_TIMEOUT = "Authentication Timeout"
MAX_CONNECTIONS_EXCEEDED = "Maximum Connections Exceeded"
READ_ERROR = "Read Error"
WRITE_ERROR = "Write Error"
TLS_HANDSHAKE_FAILURE = "TLS Handshake Failure"
# OpenSSL's reasons for first bytes that are not a TLS handshake at all.
_NOT_TLS = frozenset(
    {
        "WRONG_VERSION_NUMBER",
        "HTTP_REQUEST",
        "HTTPS_PROXY_REQUEST",
        "UNKNOWN_PROTOCOL",
        "RECORD_LAYER_FAILURE",
    },
)

_CLOSE_REASONS: dict[type[errors.ProtocolError], str] = {
    errors.MaxPayloadExceeded: MAX_PAYLOAD_EXCEEDED,
    errors.MaxControlLineExceeded: MAX_CONTROL_LINE_EXCEEDED,
    errors.AuthorizationViolation: AUTHENTICATION_VIOLATION,
    errors.ClientSentError: PARSE_ERROR,
}


class Subscription:
    """One SUB of one connection. Hashed by identity; the matcher stores it as is."""

    __slots__ = ("conn", "delivered", "max_msgs", "queue", "sid", "sid_sp", "subject")

    def __init__(self, conn: Connection, subject: bytes, queue: bytes | None, sid: bytes) -> None:
        self.conn = conn
        self.subject = subject
        self.queue = queue
        self.sid = sid
        self.sid_sp = sid + b" "  # pre-encoded for MSG frames
        self.max_msgs = 0  # auto-unsubscribe limit; 0 = none
        self.delivered = 0


class Connection(asyncio.Protocol):
    """A client connection. Per-connection state lives here; the message path is `_publish`."""

    is_websocket = False  # pynatsd.websocket's subclass: TLS is its listener's, INFO and auth its own

    def __init__(self, server: Server) -> None:
        self.server = server
        self.cid: int = server.next_cid()
        self.transport: asyncio.Transport | None = None
        self.out: Outbound | None = None
        opts = server.options
        self.parser = Parser(
            opts.max_control_line,
            opts.max_payload,
            expect_connect=self.authenticator().required,
            allow_headers=opts.headers,
            runs=True,
        )
        self.sublist: Sublist[Subscription] = server.sublist
        self.perms: Permissions | None = None
        self.nonce = ""  # set in INFO when nkey users are configured
        self.opts = ConnectOptions()
        self.connected = False  # CONNECT processed
        self.closed = False
        self.close_reason: str = ""
        self.ip: str = ""
        self.port: int = 0
        self.start: datetime = datetime.now(UTC)
        self.stop: datetime | None = None
        self.rtt: float | None = None
        self.subs: dict[bytes, Subscription] = {}
        self.in_msgs: int = 0
        self.in_bytes: int = 0
        self.out_msgs: int = 0
        self.out_bytes: int = 0
        self.user: str = ""
        self.account: str = DEFAULT_ACCOUNT
        self._start_mono = self._last_in = time.monotonic()
        self._pings_out = 0
        self._ping_sent = 0.0
        self._ping_timer: asyncio.TimerHandle | None = None
        self._auth_timer: asyncio.TimerHandle | None = None
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._stall_timer: asyncio.TimerHandle | None = None  # set while reading is stalled at a gate
        self.stalls = 0  # times a producer was stalled on this connection's queue (monitoring)
        self._tls_task: asyncio.Task[None] | None = None  # the upgrade after INFO, while it runs
        self.tls_version = ""  # "1.3" once a TLS handshake is done (monitoring)
        self.tls_cipher = ""
        self.tls_first = False
        self._info_after_pong = False
        self.first_pong_sent = False  # after CONNECT: the client now takes async INFOs (nats-server's flag)
        self._trace = log.isEnabledFor(TRACE)
        self._heads: dict[bytes, bytes] = {}  # subject -> `MSG subject `, for subjects published here
        # Incremented inline per publish (see HistogramCounts); values past the cap share its last slot.
        self._fanout, self._fanout_cap = server.fanout.counts, server.fanout.cap

    # -- identity shortcuts used by monitoring ------------------------------------------------------
    @property
    def name(self) -> str:
        return self.opts.name

    @property
    def lang(self) -> str:
        return self.opts.lang

    @property
    def version(self) -> str:
        return self.opts.version

    @property
    def echo(self) -> bool:
        return self.opts.echo

    @property
    def headers(self) -> bool:
        return self.opts.headers

    @property
    def pending_bytes(self) -> int:
        return self.out.pending_bytes if self.out is not None else 0

    @property
    def last_activity(self) -> datetime:
        """Wall-clock time of the last bytes received from the client."""
        return self.start + timedelta(seconds=self._last_in - self._start_mono)

    def __repr__(self) -> str:
        return f"{self.ip}:{self.port} - cid:{self.cid}"

    def authenticator(self) -> Authenticator:
        """Who checks this connection's CONNECT (a WebSocket listener can have credentials of its own)."""
        return self.server.auth

    def adjust_info(self, info: dict[str, Any]) -> None:
        """Hook for connections under a listener of their own (WebSocket) to adjust the INFO they get."""

    def ping_interval(self) -> float:
        """Seconds between the server's PINGs to an idle client (a WebSocket listener can set its own)."""
        return self.server.options.ping_interval

    # -- asyncio.Protocol -----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self.transport = transport
        server = self.server
        peer = transport.get_extra_info("peername")
        if peer:
            self.ip, self.port = str(peer[0]), int(peer[1])
        transport.set_write_buffer_limits(high=256 * 1024)
        self.out = Outbound(transport, server.scheduler, server.options.max_pending)
        self.out.start(self._write_failed)
        self.out.push(server.info_for(self))
        if not server.accept(self):
            self.close(MAX_CONNECTIONS_EXCEEDED, errors.MAX_CONNECTIONS)
            return
        log.debug("%r - Client connection created", self)
        loop = server.loop
        opts = server.options
        ctx = None if self.is_websocket else server.tls_context
        if ctx is not None and not opts.tls_handshake_first:
            # INFO goes out in plaintext, then the connection upgrades; nothing more is written until the
            # handshake is done. start_tls must take the transport over right here: uvloop starts reading
            # once connection_made returns, and a ClientHello read by this protocol would be lost to TLS.
            self.out.flush()
            self.out.pause()
            timeout = opts.tls_timeout
            log.debug("%r - Starting TLS client connection handshake", self)
            try:
                started = StartedCoroutine(
                    loop.start_tls(transport, self, ctx, server_side=True, ssl_handshake_timeout=timeout + 60)
                )
            except (OSError, RuntimeError, TypeError) as exc:
                log.error("%r - cannot start TLS: %s", self, exc)
                self.close(TLS_HANDSHAKE_FAILURE)
                return
            if opts.tls_verify:
                # until the client certificate is accepted
                abortive_close(transport.get_extra_info("socket"), True)
            # Our own timer (start_tls' would abort the socket before we can say why), as nats-server's.
            timer = loop.call_later(timeout, self._tls_timeout, transport)
            self._tls_task = loop.create_task(self._finish_tls(started, timer))
        else:
            if ctx is not None:  # handshake_first: the listener has done the handshake already
                self.tls_version, self.tls_cipher = session_info(transport)
                self.tls_first = True
            self._start_ping_timer()
        if self.authenticator().required:
            self._auth_timer = loop.call_later(opts.effective_auth_timeout, self._auth_timeout)

    def _start_ping_timer(self) -> None:
        first = min(self.ping_interval(), _FIRST_PING)
        self._ping_timer = self.server.loop.call_later(first * (1 + random.random() * 0.2), self._ping_tick)

    async def _finish_tls(
        self, started: StartedCoroutine[asyncio.Transport | None], timer: asyncio.TimerHandle
    ) -> None:
        """Waits for the server-side handshake; the protocol then reads and writes cleartext.

        `loop.start_tls` has put its SSL protocol under this one: `data_received` now gets the decrypted
        bytes, and writes go through the transport it returns.
        """
        try:
            tls = await started
        except OSError as exc:  # ssl.SSLError, TimeoutError and resets included
            if not self.closed:
                # As nats-server: a client that does not speak TLS at all (a probe, a plaintext client)
                # is only worth a debug line; any other failure (certificates, resets) is an error.
                probe = isinstance(exc, ssl.SSLError) and exc.reason in _NOT_TLS
                log.log(logging.DEBUG if probe else logging.ERROR, "%r - TLS handshake error: %s", self, exc)
                self.close(TLS_HANDSHAKE_FAILURE)
            return
        finally:
            timer.cancel()
            self._tls_task = None
        if self.closed or tls is None or self.out is None:
            if tls is not None:
                tls.close()
            return
        log.debug("%r - TLS handshake complete", self)
        if self.server.options.tls_verify:
            abortive_close(tls.get_extra_info("socket"), False)
        self.tls_version, self.tls_cipher = session_info(tls)
        self.transport = tls
        tls.set_write_buffer_limits(high=256 * 1024)
        self.out.transport = tls
        self.out.resume()
        self._start_ping_timer()

    def _tls_timeout(self, raw: asyncio.Transport) -> None:
        """The handshake did not finish in `tls_timeout`: nats-server's -ERR (in plaintext) and close."""
        if self.closed:
            return
        log.debug("%r - TLS handshake timeout", self)
        abortive_close(raw.get_extra_info("socket"), False)  # the -ERR must get through
        raw.write(encoder.encode_err(errors.SECURE_CONNECTION_TLS_REQUIRED))
        self.close(TLS_HANDSHAKE_FAILURE)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self._last_in = time.monotonic()
        scheduler = self.server.scheduler
        scheduler.reading = True
        try:
            try:
                ops = self.parser.feed(data)
                failure: errors.ProtocolError | None = None
            except errors.ProtocolError as err:
                ops, failure = err.ops, err
            if ops:
                self._process(ops)
            if failure is not None and not self.closed:
                self._protocol_error(failure)
        except Exception:
            log.exception("%r - unexpected error while processing client data", self)
            self.close(PROTOCOL_VIOLATION)
        finally:
            scheduler.reading = False
            scheduler.flush_touched()
            if scheduler.gate is not None:
                gate, scheduler.gate = scheduler.gate, None
                self._stall(gate)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.close(READ_ERROR if exc is not None else CLIENT_CLOSED)

    def pause_writing(self) -> None:
        if self.out is None:
            return
        self.out.pause()
        deadline = self.server.options.write_deadline
        if deadline > 0 and self._deadline_timer is None:
            self._deadline_timer = self.server.loop.call_later(deadline, self._write_deadline_passed)

    def resume_writing(self) -> None:
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        if self.out is not None:
            self.out.resume()

    # -- ops ------------------------------------------------------------------------------------------
    def _process(self, ops: list[Op]) -> None:
        if self._trace:
            ops = [one for op in ops for one in (expand_run(op) if op[0] in (PUBRUN, PUBMIX) else (op,))]
            for op in ops:
                log.log(TRACE, "%r - <<- [%s]", self, _describe(op))
        on_pub = self._on_pub
        for op in ops:
            if self.closed:
                return
            kind = op[0]
            if kind == PUB:  # first: the per-message path tests nothing else
                _, subject, reply, payload, tail = op
                on_pub(subject, reply, None, payload, tail)
            elif kind == PUBRUN:
                self._on_pub_run(op)
            elif kind == PUBMIX:
                self._on_pub_mix(op)
            elif kind == HPUB:
                self._on_pub(op[1], op[2], op[3], op[4], b"")
            elif kind == SUB:
                self._on_sub(op[1], op[2], op[3])
            elif kind == UNSUB:
                self._on_unsub(op[1], op[2])
            elif kind == PING:
                self._on_ping()
            elif kind == PONG:
                self._on_pong()
            elif kind == CONNECT:
                self._on_connect(op[1])
            elif kind == ERR:
                log.error("%r - Client Error %s", self, op[1])
                self.close(PARSE_ERROR)
            elif kind in (INFO, OK):
                pass  # accepted and ignored, as nats-server does

    def _on_connect(self, raw: dict[str, Any]) -> None:
        server = self.server
        try:
            opts = parse_connect(raw, server.options.headers)
        except errors.ProtocolError as err:
            self._protocol_error(err)
            return
        identity = self.authenticator().authenticate(self, opts)
        if identity is None:
            server.stats.auth_failures += 1
            log.error("%r - authentication error", self)
            self.close(AUTHENTICATION_VIOLATION, errors.AUTHORIZATION_VIOLATION)
            return
        self.user, self.account = identity
        self.perms = self.authenticator().permissions(self.user)
        self.sublist = server.sublist_for(self.account)
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        self.opts = opts
        self.connected = True
        self.parser.headers = opts.headers
        self._info_after_pong = opts.protocol >= 1
        if opts.verbose:
            self._send(encoder.OK)

    def _on_ping(self) -> None:
        self._send(encoder.PONG)
        if self.connected:
            self.first_pong_sent = True
        if self._info_after_pong:
            # nats-server 2.12+: right after the first PONG to a protocol-1 client, an INFO that
            # confirms the connection's account.
            self._info_after_pong = False
            self._send(self.server.info_for(self, connect_info=True))

    def _on_pong(self) -> None:
        self._pings_out = 0
        if self._ping_sent:
            self.rtt = time.monotonic() - self._ping_sent
            self._ping_sent = 0.0

    def _on_sub(self, subject: bytes, queue: bytes | None, sid: bytes) -> None:
        server = self.server
        if queue == _SYS_QUEUE:
            self._send_err(errors.subscribe_violation(_text(subject), _text(queue)))
            return
        if self.perms is not None and not self.perms.can_subscribe(subject, queue):
            self._send_err(errors.subscribe_violation(_text(subject), _text(queue) if queue else None))
            log.error("%r - subscription violation for %s", self, _text(subject))
            return
        limit = server.options.max_subscriptions
        if limit > 0 and len(self.subs) >= limit:
            self._send_err(errors.MAX_SUBSCRIPTIONS)
            log.error("%r - maximum subscriptions exceeded", self)
            return
        if sid not in self.subs:
            sub = Subscription(self, subject, queue, sid)
            try:
                self.sublist.insert(sub)
            except ValueError:  # matcher.InvalidSubjectError
                self._send_err(errors.INVALID_SUBJECT)
                return
            self.subs[sid] = sub
        if self.opts.verbose:
            self._send(encoder.OK)

    def _on_unsub(self, sid: bytes, max_msgs: int | None) -> None:
        sub = self.subs.get(sid)
        if sub is not None and max_msgs is not None and max_msgs > 0 and max_msgs > sub.delivered:
            sub.max_msgs = max_msgs
            sub = None
        if self.opts.verbose:
            self._send(encoder.OK)
        if sub is not None:
            self._remove_sub(sub)

    def _remove_sub(self, sub: Subscription) -> None:
        if self.subs.get(sub.sid) is sub:
            del self.subs[sub.sid]
            self.sublist.remove(sub)

    # -- the message path ---------------------------------------------------------------------------
    def _on_pub(
        self, subject: bytes, reply: bytes | None, headers: bytes | None, payload: bytes, tail: bytes
    ) -> None:
        nbytes = len(payload)
        size = nbytes if headers is None else len(headers) + nbytes
        self.in_msgs += 1
        self.in_bytes += size
        opts = self.opts
        if opts.pedantic and not is_literal_subject(subject):
            self._send_err(errors.INVALID_PUBLISH_SUBJECT)
        # `MSG subject ` of the subjects this client publishes to, cached: a subject is in the cache only
        # once it passed the reserved-prefix check, so a hit skips both that check and the concatenation.
        heads = self._heads
        head = heads.get(subject)
        if head is None:
            if subject.startswith(_RESERVED_PUBLISH):
                self._send_err(errors.publish_violation(_text(subject)))
                return
            head = b"MSG " + subject + b" "
            if len(subject) <= _HEAD_SUBJECT_CACHED:
                if len(heads) >= _HEADS_CACHED:
                    heads.clear()  # a publisher cycling through many subjects: start over rather than grow
                heads[subject] = head
        if reply is not None and reply.startswith(_RESERVED_REPLY):
            self._send_err(errors.publish_reply_violation(_text(reply)))
            return
        if self.perms is not None and not self.perms.can_publish(subject):
            self._send_err(errors.publish_violation(_text(subject)))
            log.error("%r - publish violation for %s", self, _text(subject))
            return
        if opts.verbose:
            self._send(encoder.OK)

        plain, groups = self.sublist.match(subject)
        fanout = len(plain) + len(groups)
        self._fanout[fanout if fanout < self._fanout_cap else self._fanout_cap] += 1
        if not fanout:
            if reply is not None and opts.no_responders:
                self._no_responders(subject, reply)
            return
        # The message's frame, built once and shared by every delivery: MSG (headers stripped), and HMSG
        # for receivers that negotiated headers when the message has some.
        if not tail:
            tail = encoder.msg_tail(reply, payload)
        if headers is None:
            hhead, htail, hbytes = head, tail, nbytes
        else:
            hhead, htail, hbytes = b"HMSG " + subject + b" ", encoder.hmsg_tail(reply, headers, payload), size
        skip = None if opts.echo else self
        delivered = False
        for sub in plain:
            conn = sub.conn
            if conn is not skip and (
                _deliver(sub, hhead, htail, hbytes, reply)
                if conn.opts.headers
                else _deliver(sub, head, tail, nbytes, reply)
            ):
                delivered = True
        for group in groups:
            # Exactly one member per queue group: from a random start, the first that takes it.
            n = len(group)
            start = int(random.random() * n)
            for i in range(n):
                sub = group[(start + i) % n]
                conn = sub.conn
                if conn is not skip and (
                    _deliver(sub, hhead, htail, hbytes, reply)
                    if conn.opts.headers
                    else _deliver(sub, head, tail, nbytes, reply)
                ):
                    delivered = True
                    break
        if not delivered and reply is not None and opts.no_responders:
            self._no_responders(subject, reply)

    def _on_pub_run(self, op: Op) -> None:
        """A run of PUBs to one subject (see pynatsd.protocol.ops.PUBRUN): matched once, and framed for each
        subscriber at once, `PUB subject ` becoming `MSG subject sid ` (one `replace`, or a join of the
        frames' slices for large payloads); each message still goes to one random member of each queue
        group (when all frames are alike, see PUBRUN's `size`). Anything else
        (auto-unsubscribe, verbose, pedantic, a refused publish, allow_responses receivers of requests,
        a connection with several matching subscriptions) takes the per-message path, so each
        connection receives exactly the bytes the per-message path writes."""
        _, subject, reply, prefix, view, count, nbytes, size = op
        opts = self.opts
        plain, groups = self.sublist.match(subject)
        skip = None if opts.echo else self
        targets = [*plain, *(sub for group in groups for sub in group)] if groups else plain
        if (
            opts.verbose
            or opts.pedantic
            or subject.startswith(_RESERVED_PUBLISH)
            or (reply is not None and reply.startswith(_RESERVED_REPLY))
            # allow_responses counts each response a publisher sends, and tracks each request delivered
            # to a receiver: message by message.
            or _tracks_replies(self)
            or (reply is not None and any(_tracks_replies(sub.conn) for sub in targets))
            or (self.perms is not None and not self.perms.can_publish(subject))
            or any(sub.max_msgs or sub.conn.closed for sub in targets)
            or (groups and (size < 0 or any(sub.conn is skip for sub in targets)))
            or (len(targets) > 1 and len({id(sub.conn) for sub in targets}) < len(targets))
        ):
            self._on_pubs(op)
            return
        head = b"MSG " + subject + b" "
        receivers = [sub for sub in plain if sub.conn is not skip]
        framed: list[tuple[Subscription, bytes]] = []  # (subscription, the whole run framed for it)
        # Frames alike but for their payloads sit at fixed offsets: what follows `prefix` in each is a
        # slice of the read, whatever the payloads hold.
        bodies = _bodies(view, count, len(prefix)) if size >= 0 and (groups or size >= _SLICED_FROM) else []
        if receivers and bodies:
            # Large payloads: joining the slices after `MSG subject sid ` beats replace(), which would
            # search every payload byte for `prefix` (600 vs 120 ns per 1 KiB message).
            led = [b"", *bodies]
            framed = [(sub, (head + sub.sid_sp).join(led)) for sub in receivers]
        elif receivers:
            replaced = _framed_by_replace(receivers, [(subject, prefix)], [count], bytes(view))
            if replaced is None:  # a payload holds `PUB subject ` too: message by message
                self._on_pubs(op)
                return
            framed = replaced
        self.sublist.count_repeats(subject, count - 1)  # /subsz counts every publish, as nats-server
        self.in_msgs += count
        self.in_bytes += nbytes
        fanout = len(plain) + len(groups)
        self._fanout[fanout if fanout < self._fanout_cap else self._fanout_cap] += count
        delivered = False
        for sub, data in framed:
            _deliver_run(sub, data, count, nbytes)
            delivered = True
        if groups:
            # One random member per message, as in _on_pub (every member can take it: checked above).
            # All payloads have one size, so frames sit at fixed offsets: each pick is the member's MSG
            # prefix plus a slice of the input, whatever the payloads hold.
            rnd = random.random
            for group in groups:
                n = len(group)
                heads = [head + sub.sid_sp for sub in group]
                picked: list[list[bytes | memoryview]] = [[] for _ in group]
                for body in bodies:
                    m = int(rnd() * n)
                    frames = picked[m]
                    frames.append(heads[m])
                    frames.append(body)
                for sub, frames in zip(group, picked, strict=True):
                    if frames:
                        k = len(frames) // 2
                        _deliver_run(sub, b"".join(frames), k, k * size)
            delivered = True
        if not delivered and reply is not None and opts.no_responders:
            for _ in range(count):
                self._no_responders(subject, reply)

    def _on_pub_mix(self, op: Op) -> None:
        """PUBs to a few subjects, interleaved (see protocol.ops.PUBMIX): each subject matched once, and
        each receiving subscription gets its frames of the mix, in order, at once (one `replace` per
        subject for small payloads when it receives every subject, else slices of the read). Queue
        groups, a connection with several receiving subscriptions and everything `_on_pub_run` leaves
        to the per-message path take it here too."""
        _, subjects, view, count, nbytes, frames, sizes = op
        opts = self.opts
        if opts.verbose or opts.pedantic or self.perms is not None or _tracks_replies(self):
            self._unmix(op)
            return
        match = self.sublist.match
        per_subject = []  # the plain subscriptions of each subject
        owners: dict[int, Subscription] = {}  # connection id -> its one receiving subscription
        for subject, _ in subjects:
            plain, groups = match(subject)
            if groups or subject.startswith(_RESERVED_PUBLISH):
                self._unmix(op)
                return
            for sub in plain:
                if owners.setdefault(id(sub.conn), sub) is not sub or sub.max_msgs or sub.conn.closed:
                    self._unmix(op)
                    return
            per_subject.append(plain)
        indexes = frames[1::2]
        counts = [indexes.count(i) for i in range(len(subjects))]
        skip = None if opts.echo else self
        framed: list[tuple[Subscription, bytes, int, int]] = []  # (sub, its frames, messages, payload bytes)
        receivers = [sub for sub in owners.values() if sub.conn is not skip]
        if receivers:
            small = nbytes <= count * _SLICED_FROM
            if small and all(plain == per_subject[0] for plain in per_subject):
                replaced = _framed_by_replace(receivers, subjects, counts, bytes(view))
                if replaced is None:  # a replace() touched more than the frames
                    self._unmix(op)
                    return
                framed = [(sub, data, count, nbytes) for sub, data in replaced]
            else:
                source = bytes(view) if small else view
                framed = _mix_sliced(receivers, subjects, per_subject, source, frames, counts, sizes)
        for (subject, _), plain, k in zip(subjects, per_subject, counts, strict=True):
            self.sublist.count_repeats(subject, k - 1)
            fanout = len(plain)
            self._fanout[fanout if fanout < self._fanout_cap else self._fanout_cap] += k
        self.in_msgs += count
        self.in_bytes += nbytes
        for sub, data, k, size in framed:
            _deliver_run(sub, data, k, size)

    def _unmix(self, op: Op) -> None:
        """A PUBMIX that cannot be framed at once: its PUBs one by one, and no more mixes from this
        publisher for a while (the same traffic would most likely fall back again, and the mix's walk
        would be paid on top of the per-message path)."""
        self.parser.mix_pause = _MIX_PAUSE
        self._on_pubs(op)

    def _on_pubs(self, run: Op) -> None:
        """A PUBRUN or PUBMIX op the slow way: its PUBs one by one."""
        for pub in expand_run(run):
            if self.closed:
                return
            self._on_pub(pub[1], pub[2], None, pub[3], pub[4])

    def _no_responders(self, subject: bytes, reply: bytes) -> None:
        """Tell a requester that nobody received its request: a 503 on its own reply subscription."""
        for sub in self.sublist.match(reply).plain:
            if sub.conn is self:
                headers = encoder.no_responders_headers(subject)
                self._send(encoder.encode_hmsg(reply, sub.sid, None, headers, b""))
                return

    # -- replies, errors, closing -------------------------------------------------------------------
    @property
    def wants_async_info(self) -> bool:
        """True for a client that sent protocol >= 1 in CONNECT and got its first PONG (async INFOs)."""
        return self.opts.protocol >= 1 and self.first_pong_sent

    def send_raw(self, data: bytes) -> None:
        """Queue a server-originated frame (e.g. an async INFO) and flush it."""
        if self.out is not None and not self.closed:
            self.out.push(data)
            self.out.flush()

    def _send(self, data: bytes) -> None:
        if self.out is not None:
            self.out.push(data)

    def _send_err(self, text: str) -> None:
        self._send(encoder.encode_err(text))

    def _protocol_error(self, err: errors.ProtocolError) -> None:
        reason = _CLOSE_REASONS.get(type(err), PROTOCOL_VIOLATION)
        if isinstance(err, errors.AuthorizationViolation):
            self.server.stats.auth_failures += 1
        if err.err_text is not None:
            log.error("%r - %s", self, err.err_text)
        else:
            log.debug("%r - protocol error, closing: %s", self, err)
        self.close(reason, err.err_text)

    def close(self, reason: str, err_text: str | None = None) -> None:
        """Close with `reason`; send `-ERR '<err_text>'` first when given. Idempotent."""
        if self.closed:
            return
        out = self.out
        if out is not None and reason not in (SLOW_CONSUMER_PENDING, SLOW_CONSUMER_DEADLINE):
            # Replies queued before the fault (e.g. a PONG) go out first, as nats-server does.
            if err_text is not None:
                out.push(encoder.encode_err(err_text))
            out.flush()
        self.closed = True
        self.close_reason = reason
        self.stop = datetime.now(UTC)
        for timer in (self._ping_timer, self._auth_timer, self._deadline_timer, self._stall_timer):
            if timer is not None:
                timer.cancel()
        for sub in self.subs.values():
            self.sublist.remove(sub)
        if out is not None:
            slow = reason in (SLOW_CONSUMER_PENDING, SLOW_CONSUMER_DEADLINE)
            out.close()
            if self.transport is not None:
                if slow:
                    self.transport.abort()
                else:
                    self.transport.close()
        # A closed connection is kept for /connz?state=closed (up to max_closed_clients of them): drop what
        # only an open one needs (outbound queue, transport, socket, timers) so each costs little.
        self.out = None
        self._ping_timer = self._auth_timer = self._deadline_timer = self._stall_timer = None
        self.server.forget(self)
        log.debug("%r - Client connection closed: %s", self, reason)

    def backlogged(self) -> None:
        """This connection's queue passed its gate (75% of max_pending, counting what its transport
        holds). If the transport takes writes, the queue is written at once; otherwise the producer of the
        read being processed will wait for it, as nats-server stalls fast producers, and past max_pending
        this is a slow consumer."""
        out = self.out
        assert out is not None
        if not out.paused:
            # Not behind: one read made that much for it. Write it now (a transport that cannot take it all
            # pauses, and its backlog counts from then on).
            out.flush()
            if out.queued <= out.limit:
                return
        if out.queued > out.hard_limit:
            self.slow_consumer()
        elif not self.server.options.no_fast_producer_stall:
            self.server.scheduler.gate_closed(self, out)

    def _stall(self, consumer: Consumer) -> None:
        """Stop reading from this producer until `consumer`'s queue, which its last read fed past the
        gate, drains; 2 ms at most (5 ms when that queue is at max_pending). The kernel's socket buffers
        then slow the client down."""
        gate = consumer.out
        transport = self.transport
        if (
            self.closed
            or self._stall_timer is not None
            or gate is None
            or consumer is self
            or transport is None
        ):
            return
        consumer.stalls += 1  # counted on the consumer, as nats-server does
        self.server.stats.stalled_clients += 1
        transport.pause_reading()
        ttl = STALL_MAX if gate.queued >= gate.hard_limit else STALL_MIN
        self._stall_timer = self.server.loop.call_later(ttl, self._unstall)
        gate.waiting[self.cid] = self._unstall

    def _unstall(self) -> None:
        timer = self._stall_timer
        if timer is None:
            return
        timer.cancel()
        self._stall_timer = None
        if not self.closed and self.transport is not None:
            self.transport.resume_reading()

    def slow_consumer(self, reason: str = SLOW_CONSUMER_PENDING) -> None:
        if self.closed:
            return
        self.server.stats.slow_consumers += 1
        log.warning("%r - Slow Consumer Detected: %s", self, reason)
        self.close(reason)

    def _write_failed(self, exc: BaseException) -> None:
        log.debug("%r - write error: %s", self, exc)
        self.close(WRITE_ERROR)

    def _write_deadline_passed(self) -> None:
        self._deadline_timer = None
        if self.out is not None and self.out.paused:
            self.slow_consumer(SLOW_CONSUMER_DEADLINE)

    def _auth_timeout(self) -> None:
        self._auth_timer = None
        if not self.connected and not self.closed:
            self.server.stats.auth_failures += 1
            self.close(AUTHENTICATION_TIMEOUT, errors.AUTHENTICATION_TIMEOUT)

    def _ping_tick(self) -> None:
        """nats-server's ping timer: PING when idle (or to refresh RTT); too many unanswered = stale."""
        self._ping_timer = None
        if self.closed:
            return
        server = self.server
        opts = server.options
        now = time.monotonic()
        need_rtt = self.rtt is None or (self._ping_sent and now - self._ping_sent > _RTT_REFRESH)
        if now - self._last_in >= self.ping_interval() or need_rtt:
            if self._pings_out + 1 > opts.ping_max:
                server.stats.stale_connections += 1
                log.debug("%r - Stale Client Connection - Closing", self)
                self.close(STALE_CONNECTION, errors.STALE_CONNECTION)
                return
            self._pings_out += 1
            self._ping_sent = now
            self._send(encoder.PING)
        self._ping_timer = server.loop.call_later(self.ping_interval(), self._ping_tick)


def _deliver(sub: Subscription, head: bytes, tail: bytes, nbytes: int, reply: bytes | None) -> bool:
    """Queue one message (`head` sid `tail`, `nbytes` of payload) for `sub`; False if it cannot take it."""
    conn = sub.conn
    if conn.closed:
        return False
    if sub.max_msgs:
        if sub.delivered >= sub.max_msgs:
            conn._remove_sub(sub)
            return False
        if sub.delivered + 1 == sub.max_msgs:
            conn._remove_sub(sub)
    perms = conn.perms
    if reply is not None and perms is not None and perms.replies is not None:
        perms.track_reply(reply)  # allow_responses: the receiver may now answer this request
    sub.delivered += 1
    out = conn.out
    assert out is not None
    frames = out.frames
    if not frames:
        out.mark_dirty()
    sid_sp = sub.sid_sp
    frames.append(head)
    frames.append(sid_sp)
    frames.append(tail)
    out.queued += len(head) + len(sid_sp) + len(tail)
    conn.out_msgs += 1
    conn.out_bytes += nbytes
    if out.queued > out.limit:
        conn.backlogged()
    return True


def _bodies(view: memoryview, count: int, skip: int) -> list[bytes | memoryview]:
    """The `count` frames of a run whose frames are all one length, each without its first `skip` bytes
    (`PUB subject `): views of the read, not copies."""
    step = len(view) // count
    return [view[i : i + step - skip] for i in range(skip, len(view), step)]


def _framed_by_replace(
    receivers: list[Subscription], subjects: list[tuple[bytes, bytes]], counts: list[int], chunk: bytes
) -> list[tuple[Subscription, bytes]] | None:
    """A PUBRUN or PUBMIX framed for each receiver by one replace() of each (subject, prefix) with
    `MSG subject sid `; `counts` are the frames per subject. None if a replace() touched more than
    those frames: a payload holds a prefix, or a subject or sid made one subject's `MSG subject sid `
    hold another's prefix (the result then grows by more than the frames account for)."""
    framed = []
    for sub in receivers:
        data, grown = chunk, 0
        for (subject, prefix), k in zip(subjects, counts, strict=True):
            new = b"MSG " + subject + b" " + sub.sid_sp
            data = data.replace(prefix, new)
            grown += k * (len(new) - len(prefix))
        if len(data) != len(chunk) + grown:
            return None
        framed.append((sub, data))
    return framed


def _mix_sliced(
    receivers: list[Subscription],
    subjects: list[tuple[bytes, bytes]],
    per_subject: list[tuple[Subscription, ...]],
    chunk: bytes | memoryview,
    frames: list[int],
    counts: list[int],
    sizes: list[int],
) -> list[tuple[Subscription, bytes, int, int]]:
    """A PUBMIX framed for each receiver from slices of the read (`chunk`: bytes for small payloads,
    whose slices are cheaper than views; a view for large ones, whose slices copy nothing): per frame of
    a subject it receives, `MSG subject sid ` and what follows the frame's prefix. Returns (sub, frames,
    messages, payload bytes)."""
    starts, indexes = frames[0::2], frames[1::2]
    skips = [len(prefix) for _, prefix in subjects]
    taken = [bool(plain) for plain in per_subject]
    bodies = [
        chunk[a + skips[i] : b] if taken[i] else b""
        for a, i, b in zip(starts, indexes, [*starts[1:], len(chunk)], strict=True)
    ]
    framed = []
    for sub in receivers:
        heads = [
            b"MSG " + subject + b" " + sub.sid_sp if sub in plain else None
            for (subject, _), plain in zip(subjects, per_subject, strict=True)
        ]
        pieces: list[bytes | memoryview] = []
        if None not in heads:  # every subject: the heads and the bodies interleaved at C speed
            every = cast("list[bytes]", heads)
            pieces = [b""] * (2 * len(bodies))
            pieces[0::2] = list(map(every.__getitem__, indexes))
            pieces[1::2] = bodies
        else:
            for head, body in zip(map(heads.__getitem__, indexes), bodies, strict=True):
                if head is not None:
                    pieces.append(head)
                    pieces.append(body)
        mine = [i for i, head in enumerate(heads) if head is not None]
        framed.append((sub, b"".join(pieces), sum(counts[i] for i in mine), sum(sizes[i] for i in mine)))
    return framed


def _tracks_replies(conn: Connection) -> bool:
    return conn.perms is not None and conn.perms.replies is not None


def _deliver_run(sub: Subscription, data: bytes, count: int, nbytes: int) -> None:
    """Queue `count` framed messages (`data`, `nbytes` of payload) for `sub`, which has no max_msgs."""
    conn = sub.conn
    out = conn.out
    assert out is not None
    if not out.frames:
        out.mark_dirty()
    out.frames.append(data)
    out.queued += len(data)
    sub.delivered += count
    conn.out_msgs += count
    conn.out_bytes += nbytes
    if out.queued > out.limit:
        conn.backlogged()


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _describe(op: Op) -> str:
    """An op as nats-server traces it: `PUB foo reply 5`, `CONNECT {...}` (without the password)."""
    kind = op[0]
    if kind in (CONNECT, INFO):
        shown = {k: ("[REDACTED]" if k.lower() in ("pass", "auth_token") else v) for k, v in op[1].items()}
        return f"{NAMES[kind]} {encoder.go_json(shown)}"
    if kind == PUB:
        parts = [op[1], op[2], b"%d" % len(op[3])]
    elif kind == HPUB:
        parts = [op[1], op[2], b"%d" % len(op[3]), b"%d" % (len(op[3]) + len(op[4]))]
    elif kind == UNSUB:
        parts = [op[1], None if op[2] is None else b"%d" % op[2]]
    elif kind == ERR:
        return f"-ERR {op[1]}"
    else:
        parts = list(op[1:])
    return " ".join([NAMES[kind], *(_text(p) for p in parts if p is not None)])
