"""One client connection: protocol glue between a socket, the parser and the delivery policy.

The path of one message (README "How a message flows"): `data_received` hands the bytes to the parser,
at most `READ_SLICE` bytes per turn of the event loop; the parser calls back `on_pub` per PUB, which
admits it once (`_admit`: reserved subjects, publish permission, pedantic, verbose, counters) and hands
it to `delivery.publish`, the one policy that decides who receives it and appends the frame, by reference,
to each receiver's outbound queue. The stall gate may then hold this producer (outbound.StallGate). Nothing
is written until every read that was ready in this turn of the loop is processed; then every touched
queue is flushed once (outbound.FlushScheduler).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import ssl
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, cast

from mypy_extensions import mypyc_attr

from pynatsd.auth.users import DEFAULT_ACCOUNT, Authenticator
from pynatsd.base.listener import peer_address
from pynatsd.base.logging import TRACE, get_logger
from pynatsd.base.tls import StartedCoroutine, abortive_close, session_info, socket_of
from pynatsd.broker import trace
from pynatsd.broker.delivery import (
    Client,
    Message,
    Subscription,
    deliver,
    new_head,
    no_responders_status,
    publish,
    sid_bytes,
)
from pynatsd.broker.outbound import Outbound
from pynatsd.broker.sids import SidMap
from pynatsd.protocol import encoder, errors
from pynatsd.protocol.connect import ConnectOptions, parse_connect
from pynatsd.protocol.parser import Parser
from pynatsd.protocol.subjects import is_literal_subject

if TYPE_CHECKING:
    from pynatsd.auth.python import Verdict
    from pynatsd.broker.core import Broker
    from pynatsd.matcher import Sublist

log = get_logger()

_RESERVED_PUBLISH = (b"_GR_.", b"$NRG.")
_RESERVED_REPLY = (b"_R_.", b"$JS.ACK.", b"_GR_.")
_SYS_QUEUE = b"_sys_"
# Input processed per turn of the event loop, per connection. libuv reads a ready socket up to 32 times
# in a row (256 KiB each under uvloop) before it serves anything else: a publisher flooding interleaved
# subjects kept the loop for 0.8 s per turn, and a new client's CONNECT timed out (issue 16). With one
# slice per turn, others wait for at most a slice of each busy connection (32 KiB: about 1,000 PUBs of
# 16 B, 1-2 ms; tests/fairness measures the handshake and PING latency under such a flood).
READ_SLICE = 32768
# Why a connection is not reading (bits of Connection._holds).
_HOLD_STALL = 1  # a consumer it feeds is behind (outbound.StallGate)
_HOLD_TURN = 2  # it had its slice this turn
_HOLD_AUTH = 4  # its CONNECT's credentials are being checked (off the loop)
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
MAX_PAYLOAD_EXCEEDED = "Maximum Message Payload Exceeded"
MAX_CONTROL_LINE_EXCEEDED = "Maximum Control Line Exceeded"
AUTHENTICATION_VIOLATION = "Authentication Failure"
AUTHENTICATION_TIMEOUT = "Authentication Timeout"
AUTHENTICATION_EXPIRED = "Authentication Expired"
MAX_SUBSCRIPTIONS_EXCEEDED = "Maximum Subscriptions Exceeded"
MAX_CONNECTIONS_EXCEEDED = "Maximum Connections Exceeded"
READ_ERROR = "Read Error"
WRITE_ERROR = "Write Error"
TLS_HANDSHAKE_FAILURE = "TLS Handshake Failure"
KICKED = "Kicked"  # closed by a system account request
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


@mypyc_attr(allow_interpreted_subclasses=True)
class SlicedReader(Client):
    """A socket's reader under the per-turn budget (READ_SLICE): client connections and routes alike
    process at most that many bytes of input per turn of the event loop, the rest held (by reference)
    with reading paused until the next turn, so that no connection keeps the loop from everyone else.
    Subclasses parse (`_parse_slice`) and call `_take_slice` from `data_received` when `_input` is
    empty (else append to it)."""

    def __init__(self, server: Broker) -> None:
        super().__init__()
        self.server = server
        self.transport: asyncio.Transport | None = None
        self._holds = 0  # why reading is paused (_HOLD_* bits); 0: reading
        self._input: list[bytes] = []  # input received beyond this turn's slice, processed next turns
        self._input_at = 0  # where the unprocessed part of _input[0] starts
        self._taken = 0  # bytes processed in this turn of the loop
        self.stalls = 0  # times a producer was stalled on this connection's queue (monitoring)

    def backlogged(self) -> None:
        """This connection's queue passed its gate (75% of max_pending, counting what its transport
        holds). If the transport takes writes, the queue is written at once; otherwise the producer of the
        read being processed will wait for it (outbound.StallGate), and past max_pending this is a slow
        consumer. Client connections and routes alike: nats-server gives a route's queue the same gate."""
        out = self.out
        assert out is not None
        if not out.paused:
            # Not behind: one read made that much for it. Write it now (a transport that cannot take it all
            # pauses, and its backlog counts from then on).
            out.flush()
            if out.queued <= out.gate:
                return
        if out.queued > out.hard_limit:
            self.slow_consumer()
        elif not self.server.options.no_fast_producer_stall and self.server.scheduler.reading:
            self.server.scheduler.stall.passed(self, out)

    def slow_consumer(self, reason: str = SLOW_CONSUMER_PENDING) -> None:
        """Its queue went past max_pending (or its write deadline passed): counted, logged and closed."""
        raise NotImplementedError

    def _parse_slice(self, data: bytes, start: int, budget: int) -> int:
        """Handle the ops of `data[start:]` that begin within `budget` bytes; return where the rest
        begins (the parser's `take` contract), errors handled (the connection closed)."""
        raise NotImplementedError

    def holds_input(self) -> bool:
        """Input received waits for a later turn (its slice of this one is taken)."""
        return bool(self._input)

    def _take_slice(self, data: bytes, start: int = 0) -> None:
        """Process the ops of `data[start:]` that begin within this turn's READ_SLICE bytes; the rest waits
        for the next turn of the loop, kept by reference (the parser stops between ops: nothing is copied
        to cut the input), with reading held meanwhile."""
        stop = self._parse_slice(data, start, READ_SLICE - self._taken)
        if self.closed:
            return
        self._taken += stop - start
        rest = stop < len(data)
        if rest:  # the rest of this read waits for the next turn (or for a paused parser to resume)
            self._input.insert(0, data)
            self._input_at = stop
        if rest or self._taken >= READ_SLICE:
            self.hold_reading(_HOLD_TURN)
            self.server.loop.call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._taken = 0
        self.release_reading(_HOLD_TURN)

    def hold_reading(self, why: int = _HOLD_STALL) -> None:
        """Stop reading from the socket (for one more reason: `why`)."""
        if not self._holds and self.transport is not None and not self.closed:
            self.transport.pause_reading()
        self._holds |= why

    def release_reading(self, why: int = _HOLD_STALL) -> None:
        """Drop one reason not to read; with none left, process what waits, or read again."""
        self._holds &= ~why
        if self._holds or self.closed:
            return
        if self._input:
            pending = self._input
            start = self._input_at
            self._input = []
            self._input_at = 0
            if len(pending) == 1:
                data = pending[0]
            else:  # reads that arrived while the first waited (rare: reading is held meanwhile)
                data = b"".join([pending[0][start:], *pending[1:]])
                start = 0
            self._take_slice(data, start)
            if self._holds or self.closed:
                return
        if self.transport is not None:
            self.transport.resume_reading()


@mypyc_attr(allow_interpreted_subclasses=True)  # pynatsd.websocket's connection is one
class Connection(SlicedReader):
    """A client connection: an asyncio protocol (duck-typed: `connection_made`, `data_received`, …), the
    parser's `OpHandler` and a `delivery.Client`.

    Not an `asyncio.Protocol` subclass on purpose: compiled by mypyc, a class of its own is a native class
    whose attributes are C struct fields, which the delivery policy reads for every message (measured: the
    in-process path went from 1,060 to 936 ns per message)."""

    is_websocket = False  # pynatsd.websocket's subclass: TLS is its listener's, INFO and auth its own

    @property
    def connection_type(self) -> str:
        """nats-server's connection type, for users' `allowed_connection_types`."""
        return "WEBSOCKET" if self.is_websocket else "STANDARD"

    def __init__(self, server: Broker) -> None:
        super().__init__(server)
        self.cid: int = server.next_cid()
        opts = server.options
        self._trace = log.isEnabledFor(TRACE)
        self.parser = Parser(
            opts.max_control_line,
            opts.max_payload,
            expect_connect=self.authenticator().required,
            allow_headers=opts.headers,
            handler=trace.Tracer(self) if self._trace else self,
            line_cache=server.pub_lines,
        )
        self.sublist: Sublist[Subscription] = server.sublist
        self.nonce = ""  # set in INFO when nkey users are configured
        self.jwt_subs = -1  # a JWT user's subscription limit (its own or its account's); -1: none
        self._calling_out = False  # waiting for the auth callout's answer
        self.opts = ConnectOptions()
        # Read per message, so kept as plain fields (set again by CONNECT): nats-server's defaults.
        self.verbose = self.opts.verbose
        self.pedantic = self.opts.pedantic
        self.connected = False  # CONNECT processed
        self.close_reason: str = ""
        self.ip: str = ""
        self.port: int = 0
        self.start: datetime = datetime.now(UTC)
        self.stop: datetime | None = None
        self.rtt: float | None = None
        self.subs: SidMap = SidMap()
        self.in_msgs: int = 0
        self.in_bytes: int = 0
        self.user: str = ""
        self.account: str = DEFAULT_ACCOUNT
        self.log_tag: str = ""  # after the first CONNECT: nats-server's client tag in every log line
        self._start_mono = self._last_in = time.monotonic()
        self._pings_out = 0
        self._ping_sent = 0.0
        self._ping_timer: asyncio.TimerHandle | None = None
        self._auth_timer: asyncio.TimerHandle | None = None
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._tls_task: asyncio.Task[None] | None = None  # the upgrade after INFO, while it runs
        self.tls_version = ""  # "1.3" once a TLS handshake is done (monitoring)
        self.tls_cipher = ""
        self.tls_first = False
        self._info_after_pong = False
        self.first_pong_sent = False  # after CONNECT: the client now takes async INFOs (nats-server's flag)
        self._heads = server.msg_heads  # subject -> `MSG subject ` (shared: see Broker.msg_heads)
        self._msg = Message(self)  # the message being published (reused: see delivery.Message)
        self._fanout = server.fanout.counts  # matches per publish (monitoring)

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
    def pending_bytes(self) -> int:
        return self.out.pending_bytes if self.out is not None else 0

    @property
    def last_activity(self) -> datetime:
        """Wall-clock time of the last bytes received from the client."""
        return self.start + timedelta(seconds=self._last_in - self._start_mono)

    def __repr__(self) -> str:
        return self.log_tag or self.address_tag()

    def address_tag(self) -> str:
        """The log prefix before the CONNECT: the peer's address and the connection id."""
        return f"{self.ip}:{self.port} - cid:{self.cid}"

    def authenticator(self) -> Authenticator:
        """Who checks this connection's CONNECT (a WebSocket listener can have credentials of its own)."""
        return self.server.auth

    def adjust_info(self, info: dict[str, object]) -> None:
        """Hook for connections under a listener of their own (WebSocket) to adjust the INFO they get."""

    def ping_interval(self) -> float:
        """Seconds between the server's PINGs to an idle client (a WebSocket listener can set its own)."""
        return self.server.options.ping_interval

    # -- asyncio.Protocol -----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self.transport = transport
        server = self.server
        peer = peer_address(transport)
        if peer is not None:
            self.ip, self.port = peer
        transport.set_write_buffer_limits(high=256 * 1024)
        self.out = Outbound(self._traced(transport), server.scheduler, server.options.max_pending)
        self.out.start(self._write_failed)
        self.out.push(server.info_for(self))
        if not server.accept(self):
            self.close(MAX_CONNECTIONS_EXCEEDED, errors.MAX_CONNECTIONS)
            return
        log.debug("%r - Client connection created", self)
        if server.tls_context is None or server.options.tls_handshake_first:
            # INFO now, not on the flusher task's turn: under load every turn of the loop counts toward
            # how long a new client waits to connect.
            self.out.flush()
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
                    loop.start_tls(
                        transport,
                        cast(asyncio.BaseProtocol, self),
                        ctx,
                        server_side=True,
                        ssl_handshake_timeout=timeout + 60,
                    )
                )
            except (OSError, RuntimeError, TypeError) as exc:
                log.error("%r - cannot start TLS: %s", self, exc)
                self.close(TLS_HANDSHAKE_FAILURE)
                return
            if opts.tls_verify:
                # until the client certificate is accepted
                abortive_close(socket_of(transport), True)
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

    # -- trace hook (-V): what is written goes through TracedTransport, which logs it `->>` --------------
    def _traced(self, transport: asyncio.Transport) -> asyncio.Transport:
        return cast(asyncio.Transport, trace.TracedTransport(transport, self)) if self._trace else transport

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
            abortive_close(socket_of(tls), False)
        self.tls_version, self.tls_cipher = session_info(tls)
        self.transport = tls
        tls.set_write_buffer_limits(high=256 * 1024)
        self.out.transport = self._traced(tls)
        self.out.resume()
        self._start_ping_timer()

    def _tls_timeout(self, raw: asyncio.Transport) -> None:
        """The handshake did not finish in `tls_timeout`: nats-server's -ERR (in plaintext) and close."""
        if self.closed:
            return
        log.debug("%r - TLS handshake timeout", self)
        abortive_close(socket_of(raw), False)  # the -ERR must get through
        raw.write(encoder.encode_err(errors.SECURE_CONNECTION_TLS_REQUIRED))
        self.close(TLS_HANDSHAKE_FAILURE)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self._input:  # earlier input still waits for its turn: this comes after it
            self._input.append(data)
            return
        self._last_in = time.monotonic()
        self._take_slice(data)

    def _parse_slice(self, data: bytes, start: int, budget: int) -> int:
        scheduler = self.server.scheduler
        scheduler.reading = True
        stop = len(data)
        try:
            stop = self.parser.take(data, start, budget)
        except errors.ProtocolError as err:
            if not self.closed:
                self._protocol_error(err)
        except Exception:
            log.exception("%r - unexpected error while processing client data", self)
            self.close(PROTOCOL_VIOLATION)
        finally:
            scheduler.reading = False
            scheduler.read_done()
            scheduler.stall.after_read(self)
        return stop

    def eof_received(self) -> bool | None:
        """The client half-closed: the transport closes (as asyncio.Protocol's default)."""
        return None

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

    # -- ops (protocol.ops.OpHandler) ------------------------------------------------------------------
    def on_connect(self, options: dict[str, object]) -> None:
        server = self.server
        try:
            opts = parse_connect(options, server.options.headers)
        except errors.ProtocolError as err:
            self._protocol_error(err)
            return
        auth = self.authenticator()
        if auth.python is not None:
            self._ask_python(auth, opts, again=False)
            return
        if not auth.is_slow(opts):
            self._verdict(opts, auth.authenticate(self, opts))
            return
        # A bcrypt check (tens to hundreds of ms) runs on a worker thread: the loop serves everyone else
        # meanwhile, and this client's next ops wait for the verdict (the parser keeps them).
        self.parser.pause()
        self.hold_reading(_HOLD_AUTH)
        checking = server.loop.run_in_executor(server.auth_workers, auth.authenticate, self, opts)
        checking.add_done_callback(lambda done: self._checked(opts, done))

    def _checked(self, opts: ConnectOptions, done: asyncio.Future[tuple[str, str] | None]) -> None:
        """A slow credential check ended: finish the CONNECT, then the ops that came after it."""
        if self.closed or done.cancelled():  # cancelled: the server is shutting down
            return
        exc = done.exception()
        if exc is not None:
            log.error("%r - authentication check failed: %s", self, exc)
        self._verdict(opts, None if exc is not None else done.result())
        if self.closed or self._calling_out:
            return
        self.parser.resume()
        self.release_reading(_HOLD_AUTH)  # the ops after the CONNECT wait in _input

    def _ask_python(self, auth: Authenticator, opts: ConnectOptions, again: bool) -> None:
        """The Python authorizer decides about `opts` (`again`: after a reload, for a connected client).
        A CONNECT's next ops wait for the verdict, as for bcrypt; the authorizer's own timeout replaces
        the authentication timer (nats-server stops that timer when the CONNECT arrives)."""
        if not again:
            if self._auth_timer is not None:
                self._auth_timer.cancel()
                self._auth_timer = None
            self.parser.pause()
            self.hold_reading(_HOLD_AUTH)
        deciding = auth.decide(self, opts, self.server.auth_workers)
        deciding.add_done_callback(lambda done: self._decided(opts, done, again))

    def _decided(self, opts: ConnectOptions, done: asyncio.Future[Verdict], again: bool) -> None:
        if self.closed or done.cancelled():  # cancelled: the server is shutting down
            return
        verdict = done.result()
        if again:
            self._readmitted(verdict)
            return
        if not verdict.admitted:
            self._connected(opts, None, verdict.why)
            return
        self._connected(opts, (verdict.user, verdict.account))
        if self.closed:
            return
        self.perms = verdict.permissions  # the callable's (its Authenticator has no users to look up)
        self.parser.resume()
        self.release_reading(_HOLD_AUTH)

    def _readmitted(self, verdict: Verdict) -> None:
        """A reload's new authorizer answered about this connected client: as `revalidate` does."""
        if verdict.account != self.account:  # refused, or moved: nats-server closes a moved client quietly
            if verdict.admitted:
                self.close(CLIENT_CLOSED)
                return
            self.server.stats.auth_failures += 1
            log.error("%r - authentication error - %s", self, verdict.why)
            self.close(AUTHENTICATION_VIOLATION, errors.AUTHORIZATION_VIOLATION)
            return
        self.user = verdict.user
        self.perms = verdict.permissions
        self._drop_forbidden_subs()

    def _verdict(self, opts: ConnectOptions, identity: tuple[str, str] | None) -> None:
        """The configured users' verdict on a CONNECT; the auth callout has the last word on the clients
        it decides about (then this client's next ops wait for its answer, as for a bcrypt check)."""
        callout = self.server.callout
        auth = self.authenticator()
        opts = auth.identified(self, opts, identity)
        role = auth.callout_role(opts, identity) if callout is not None else ""
        if callout is None or role != "ask":
            self._connected(opts, identity)
            if callout is not None and role and not self.closed:
                callout.admitted(self, self.account)
            return
        if self._auth_timer is not None:  # the callout's own timeout applies now (nats-server's)
            self._auth_timer.cancel()
            self._auth_timer = None
        self._calling_out = True
        self.parser.pause()
        self.hold_reading(_HOLD_AUTH)
        before = identity[1] if identity is not None else ""
        callout.authorize(self, opts, identity, lambda answer: self._called_out(opts, answer, before))

    def _called_out(self, opts: ConnectOptions, identity: tuple[str, str] | None, before: str) -> None:
        """The auth callout answered (or timed out): finish the CONNECT, then the ops that came after it.
        `before`: the account the client was in before the callout."""
        self._calling_out = False
        if self.closed:
            return
        self._connected(opts, identity)
        if self.closed:
            return
        callout = self.server.callout
        if callout is not None:
            callout.admitted(self, before)
        self.parser.resume()
        self.release_reading(_HOLD_AUTH)

    def _connected(self, opts: ConnectOptions, identity: tuple[str, str] | None, why: str = "") -> None:
        server = self.server
        if identity is None:
            server.stats.auth_failures += 1
            if why:  # a Python authorizer's refusal: the one line about it
                log.error("%r - authentication error - %s", self, why)
            else:
                log.error("%r - authentication error", self)
            self.opts = opts  # who tried (the system account's authentication error advisory)
            self.close(AUTHENTICATION_VIOLATION, errors.AUTHORIZATION_VIOLATION)
            return
        user, account = identity
        if self.connected and account != self.account:
            # A second CONNECT that moves the connection to another account: its subscriptions were
            # made (and permitted) in the old one, so they go rather than keep delivering unseen there.
            for sub in list(self.subs.values()):
                self.remove_sub(sub)
        self.user, self.account = user, account
        self.perms = self.authenticator().permissions(self.user)
        self.sublist = server.sublist_for(self.account)
        if server.links is not None and server.auth.jwt is not None:
            server.links.ensure(self.account)  # operator mode: its account's imports, as its JWT has them
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        self._apply_grant()
        if self.closed:
            return
        self.opts = opts
        self.echo = opts.echo
        self.headers = opts.headers
        self.verbose = opts.verbose
        self.pedantic = opts.pedantic
        first = not self.connected
        self.connected = True
        self.parser.headers = opts.headers
        self._info_after_pong = opts.protocol >= 1
        if opts.verbose:
            self._send(encoder.OK)
        if first:
            self.log_tag = client_log_tag(self.address_tag(), opts, account, user)
            server.client_connected(self)  # the system account's CONNECT advisory

    def _apply_grant(self) -> None:
        """A JWT user's limits (the smaller of its own and the server's) and the end of its
        authentication, when its JWT (or its connect time window) expires."""
        grant = self.authenticator().grant(self.user)
        if grant is None:
            return
        if self._auth_timer is not None:  # an account update: the expiry is computed again
            self._auth_timer.cancel()
            self._auth_timer = None
        self.jwt_subs = grant.subs
        if 0 <= grant.subs <= len(self.subs):
            # As nats-server: a client already at its subscription limit (0, or lowered by an account
            # update) is told so and closed.
            self.close(MAX_SUBSCRIPTIONS_EXCEEDED, errors.MAX_SUBSCRIPTIONS)
            return
        server_max = self.server.options.max_payload
        self.parser.max_payload = server_max if grant.payload < 0 else min(grant.payload, server_max)
        if grant.expires_in > 0:
            loop = self.server.loop
            self._auth_timer = loop.call_later(grant.expires_in, self._auth_expired, grant.expiry_error)

    def _auth_expired(self, err_text: str) -> None:
        self._auth_timer = None
        log.error("%r - %s", self, err_text)
        self.close(AUTHENTICATION_EXPIRED, err_text)

    def revalidate(self, auth: Authenticator, before: Authenticator) -> None:
        """After a reload: close the connection if its credentials no longer let it in (nats-server's
        reloadAuthorization), else take the new permissions and drop the subscriptions they refuse."""
        if not self.connected or self.closed:
            return
        if auth.python is not None:  # the (new) callable decides again
            self._ask_python(auth, self.opts, again=True)
            return
        if auth.user_moved(self):
            self.close(CLIENT_CLOSED)  # nats-server's words: no error line, no -ERR
            return
        if not auth.still_admits(self, before):
            self.server.stats.auth_failures += 1
            log.error("%r - authentication error - %s", self, auth_user_text(self.opts, self.user))
            self.close(AUTHENTICATION_VIOLATION, errors.AUTHORIZATION_VIOLATION)
            return
        self.perms = auth.permissions(self.user)
        if self.server.callout is not None:
            self.server.callout.admitted(self, self.account)  # the callout account's denial comes back
        self._apply_grant()  # a JWT user's limits and expiry as its (maybe updated) account sets them
        if not self.closed:
            self._drop_forbidden_subs()

    def _drop_forbidden_subs(self) -> None:
        """After a reload: the subscriptions the new permissions refuse go, each with nats-server's -ERR."""
        if self.perms is None:
            return
        for sub in list(self.subs.values()):
            if not self.perms.can_subscribe(sub.subject, sub.queue):
                self.remove_sub(sub)
                queue = _text(sub.queue) if sub.queue else None
                violation = errors.subscribe_violation(_text(sub.subject), queue)
                self._send_err(
                    f'{violation} (sid "{_text(sid_bytes(sub))}")'
                )  # nats-server's words on a reload
        if self.out is not None:
            self.out.flush()

    def on_ping(self) -> None:
        self._send(encoder.PONG)
        if self.connected:
            self.first_pong_sent = True
        if self._info_after_pong:
            # nats-server 2.12+: right after the first PONG to a protocol-1 client, an INFO that
            # confirms the connection's account.
            self._info_after_pong = False
            self._send(self.server.info_for(self, connect_info=True))

    def on_pong(self) -> None:
        self._pings_out = 0
        if self._ping_sent:
            self.rtt = time.monotonic() - self._ping_sent
            self._ping_sent = 0.0

    def on_ok(self) -> None:
        pass  # accepted and ignored, as nats-server does

    def on_info(self, info: dict[str, object]) -> None:
        pass  # accepted and ignored, as nats-server does

    def on_err(self, text: str) -> None:
        log.error("%r - Client Error %s", self, text)
        self.close(PARSE_ERROR)

    def on_sub(self, subject: bytes, queue: bytes | None, sid: bytes) -> None:
        server = self.server
        if queue == _SYS_QUEUE:
            self._send_err(errors.subscribe_violation(_text(subject), _text(queue)))
            return
        if self.perms is not None and not self.perms.can_subscribe(subject, queue):
            self._send_err(errors.subscribe_violation(_text(subject), _text(queue) if queue else None))
            log.error("%r - subscription violation for %s", self, _text(subject))
            return
        limit = server.options.max_subscriptions or -1
        if self.jwt_subs >= 0 and (limit < 0 or self.jwt_subs < limit):
            limit = self.jwt_subs
        if limit >= 0 and len(self.subs) >= limit:
            self._send_err(errors.MAX_SUBSCRIPTIONS)
            log.error("%r - maximum subscriptions exceeded", self)
            return
        if self.subs.get(sid) is None:
            sub = Subscription(self, subject, queue, sid)
            try:
                self.sublist.insert(sub)
            except ValueError:  # matcher.InvalidSubjectError
                self._send_err(errors.INVALID_SUBJECT)
                return
            self.subs.add(sub)
            if server.links is not None:  # stream imports: shadows in the exporting accounts
                server.links.subscribed(self.account, sub)
        if self.verbose:
            self._send(encoder.OK)

    def on_unsub(self, sid: bytes, max_msgs: int | None) -> None:
        sub = self.subs.get(sid)
        if sub is not None and max_msgs is not None and max_msgs > 0 and max_msgs > sub.delivered:
            if self.limits is None:
                self.limits = {}
            self.limits[sub] = max_msgs
            sub = None
        if self.verbose:
            self._send(encoder.OK)
        if sub is not None:
            self.remove_sub(sub)

    def remove_sub(self, sub: Subscription) -> None:
        if self.subs.remove(sub):
            if self.limits is not None:
                self.limits.pop(sub, None)
            self.sublist.remove(sub)
            links = self.server.links
            if links is not None:
                links.unsubscribed(sub)

    # -- the message path -----------------------------------------------------------------------------
    def on_pub(self, subject: bytes, reply: bytes | None, size: bytes, payload: bytes) -> None:
        head = self._admit(subject, reply, len(payload))
        if head is not None:
            msg = self._msg
            msg.set(subject, reply, size, None, payload, head)
            self._publish(msg)

    def on_hpub(
        self, subject: bytes, reply: bytes | None, sizes: bytes, headers: bytes, payload: bytes
    ) -> None:
        head = self._admit(subject, reply, len(headers) + len(payload))
        if head is not None:
            msg = self._msg
            msg.set(subject, reply, sizes, headers, payload, head)
            self._publish(msg)

    def _may_publish_nrg(self, subject: bytes) -> bool:
        """RAFT traffic (`$NRG.`) is the system account's: its clients may publish there (nats-server's
        rule; a RAFT peer can be such a client), no other account's."""
        return subject.startswith(b"$NRG.") and self.account == self.server.auth.system_account != ""

    def _admit(self, subject: bytes, reply: bytes | None, size: int) -> bytes | None:
        """The publish side, once per message: counters, pedantic, reserved subjects, publish permission,
        verbose. Returns the message's `MSG subject ` head, or None when the publish is refused."""
        self.in_msgs += 1
        self.in_bytes += size
        if self.pedantic and not is_literal_subject(subject):
            self._send_err(errors.INVALID_PUBLISH_SUBJECT)
        # `MSG subject ` of the subjects this client publishes to, cached: a subject is in the cache only
        # once it passed the reserved-prefix check, so a hit skips both that check and the concatenation.
        heads = self._heads
        head = heads.get(subject)
        if head is None:
            if subject.startswith(_RESERVED_PUBLISH):
                if not self._may_publish_nrg(subject):
                    self._send_err(errors.publish_violation(_text(subject)))
                    return None
                head = b"MSG " + subject + b" "  # never cached: the cache is shared by every account
            else:
                head = new_head(heads, subject)
        if reply is not None and reply.startswith(_RESERVED_REPLY):
            self._send_err(errors.publish_reply_violation(_text(reply)))
            return None
        if self.perms is not None and not self.perms.can_publish(subject):
            self._send_err(errors.publish_violation(_text(subject)))
            log.error("%r - publish violation for %s", self, _text(subject))
            return None
        if self.verbose:
            self._send(encoder.OK)
        return head

    def _publish(self, msg: Message) -> None:
        if not publish(self.sublist, msg, self._fanout) and msg.reply is not None and self.opts.no_responders:
            self.no_responders(msg.subject, msg.reply)

    def no_responders(self, subject: bytes, reply: bytes) -> None:
        """Tell a requester that nobody received its request, if it asked for that in CONNECT: a 503 status
        message on its own reply subscription (not on anyone else's), delivered by the policy like any
        message. JetStream calls it too, for requests no stream or consumer of its listens for."""
        if not self.opts.no_responders:
            return
        for sub in self.sublist.match(reply).plain:
            if sub.conn is self:
                deliver(sub, no_responders_status(subject, reply))
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
        if err.log_text is not None or err.err_text is not None:
            log.error("%r - %s", self, err.log_text or err.err_text)
        else:
            log.debug("%r - protocol error, closing: %s", self, err)
        self.close(reason, err.err_text)

    def account_connections(self, account: str) -> int:
        """The connected clients of `account` (an account JWT's connection limit)."""
        clients = self.server.clients.values()
        return sum(1 for c in clients if c.connected and not c.closed and c.account == account)

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
        for timer in (self._ping_timer, self._auth_timer, self._deadline_timer):
            if timer is not None:
                timer.cancel()
        links = self.server.links
        for sub in self.subs.values():
            self.sublist.remove(sub)
            if links is not None:
                links.unsubscribed(sub)
        self.server.scheduler.stall.forget(self)
        # Kept for /connz?state=closed: only what it shows. Half-received input goes now (a client that
        # sent most of a 1 MiB payload and left would otherwise hold it for as long as the ring does).
        self.parser.stop()
        self._input = []
        self._msg = Message(None)
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
        self._ping_timer = self._auth_timer = self._deadline_timer = None
        self.server.forget(self)
        log.debug("%r - Client connection closed: %s", self, reason)

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


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def client_log_tag(address: str, opts: ConnectOptions, account: str, identity: str) -> str:
    """nats-server's log prefix for a connected client: the address and id, then the client's
    `"v<version>:<lang>:<name>"` (the parts it sent) and, for a client that authenticated,
    `"<account>/<user:name | nkey:... | jwt:<its public key, `identity`> | token>"`."""
    client = ":".join(
        part for part in (f"v{opts.version}" if opts.version else "", opts.lang, opts.name) if part
    )
    kind, who = _auth_user(opts, identity)
    user = f"{kind.lower()}:{who}" if kind in ("Nkey", "User", "JWT") else "token" if kind else ""
    tag = address
    for part in (client, f"{account}/{user}" if user else ""):
        if part:
            tag += " - " + json.dumps(part, ensure_ascii=False)  # Go's %q
    return tag


def _auth_user(opts: ConnectOptions, identity: str) -> tuple[str, str]:
    """How a client authenticated, as nats-server tells them apart: (Nkey | User | JWT | Token | "", who)."""
    if opts.nkey:
        return "Nkey", opts.nkey
    if opts.user:
        return "User", opts.user
    if opts.jwt:
        return "JWT", identity
    if opts.auth_token:
        return "Token", "[REDACTED]"
    return "", "N/A"


def auth_user_text(opts: ConnectOptions, identity: str) -> str:
    """nats-server's words for who failed authentication: `User "alice"`, `Nkey "U..."`, `JWT User "U..."`,
    `Token "[REDACTED]"`, `User "N/A"`."""
    kind, who = _auth_user(opts, identity)
    label = {"JWT": "JWT User", "": "User"}.get(kind, kind)
    return f"{label} {errors.quote(who)}"
