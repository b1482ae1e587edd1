"""Sans-IO route protocol (server to server, nats-server 2.15 without route pooling): bytes <-> typed ops.

What a route speaks, as nats-server writes it (checked against the real binary, tests/routes):

    INFO {...}                 CONNECT {...}              PING / PONG / +OK / -ERR 'text'
    RS+ <account> <subject>[ <queue> <weight>]             interest (a queue group's weight: its members)
    RS- <account> <subject>[ <queue>]                      no more interest
    RMSG <account> <subject> [<reply> | + <reply> <q>... | \\| <q>...] <size>
    HMSG <account> <subject> [same reply/queue forms] <header size> <total size>

`+ reply q1 q2` / `| q1 q2` name the queue groups the sender chose this server's members for; only those
groups get the message here. A route names the account in every op, except a route pinned to one
account (nats-server's dedicated route, `route_account` in its INFO): there RS+/RS-/RMSG/HMSG carry no
account, the pinned one is implied (`RouteParser.account`; the encoders omit an empty account).

A leaf node connection (pynatsd.leafnodes) speaks the same grammar under other names, bound to one account
that no op names: `LS+ <subject>[ <queue> <weight>]`, `LS- <subject>[ <queue>]`, `LMSG <subject> [reply
forms] <size>` and, with headers, `HMSG <subject> [reply forms] <header size> <total size>`
(`RouteParser(leaf=True)` with its `account` set; the encoders' `leaf=True`).

`RouteParser.feed` calls a `RouteOpHandler` per complete op; without a handler it records typed op values
(`RSub`, `RMsg`, ...). Malformed input raises a `protocol.errors.ProtocolError` (nats-server answers
`-ERR 'Unknown Protocol Operation'` for an unknown op and closes on bad arguments); the parser is then
dead. Routes have no max_payload of their own in nats-server (its routes take any size); the parser is
bounded by `max_payload` all the same (`MAX_ROUTED_PAYLOAD` by default), and by `max_control_line`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, cast

from pynatsd.protocol import errors
from pynatsd.protocol.encoder import go_json
from pynatsd.protocol.parser import parse_size

# nats-server refuses configured payload limits above 64 MiB: no server sends a larger message.
MAX_ROUTED_PAYLOAD = 64 * 1024 * 1024
_WS = b" \t\r\n"


class RouteOpHandler(Protocol):
    """What a route parser drives; one method per complete op, in wire order."""

    def on_info(self, info: dict[str, object]) -> None: ...

    def on_connect(self, options: dict[str, object]) -> None: ...

    def on_ping(self) -> None: ...

    def on_pong(self) -> None: ...

    def on_ok(self) -> None: ...

    def on_err(self, text: str) -> None: ...

    def on_rsub(self, account: bytes, subject: bytes, queue: bytes | None, weight: int) -> None:
        """`weight` is 1 without a queue."""

    def on_runsub(self, account: bytes, subject: bytes, queue: bytes | None) -> None: ...

    def on_rmsg(
        self,
        account: bytes,
        subject: bytes,
        reply: bytes | None,
        queues: list[bytes] | None,
        headers: bytes | None,
        payload: bytes,
    ) -> None:
        """`queues`: the groups named (None: the plain form); `headers`: the raw block of an HMSG."""


@dataclass(frozen=True, slots=True)
class RInfo:
    info: dict[str, object]


@dataclass(frozen=True, slots=True)
class RConnect:
    options: dict[str, object]


@dataclass(frozen=True, slots=True)
class RPing:
    pass


@dataclass(frozen=True, slots=True)
class RPong:
    pass


@dataclass(frozen=True, slots=True)
class ROk:
    pass


@dataclass(frozen=True, slots=True)
class RErr:
    text: str


@dataclass(frozen=True, slots=True)
class RSub:
    account: bytes
    subject: bytes
    queue: bytes | None = None
    weight: int = 1


@dataclass(frozen=True, slots=True)
class RUnsub:
    account: bytes
    subject: bytes
    queue: bytes | None = None


@dataclass(frozen=True, slots=True)
class RMsg:
    account: bytes
    subject: bytes
    reply: bytes | None
    queues: list[bytes] | None
    headers: bytes | None
    payload: bytes


RouteOp = RInfo | RConnect | RPing | RPong | ROk | RErr | RSub | RUnsub | RMsg


class RouteOpRecorder:
    """A `RouteOpHandler` that records every op as a value (tests, tools)."""

    def __init__(self) -> None:
        self.ops: list[RouteOp] = []

    def on_info(self, info: dict[str, object]) -> None:
        self.ops.append(RInfo(info))

    def on_connect(self, options: dict[str, object]) -> None:
        self.ops.append(RConnect(options))

    def on_ping(self) -> None:
        self.ops.append(RPing())

    def on_pong(self) -> None:
        self.ops.append(RPong())

    def on_ok(self) -> None:
        self.ops.append(ROk())

    def on_err(self, text: str) -> None:
        self.ops.append(RErr(text))

    def on_rsub(self, account: bytes, subject: bytes, queue: bytes | None, weight: int) -> None:
        self.ops.append(RSub(account, subject, queue, weight))

    def on_runsub(self, account: bytes, subject: bytes, queue: bytes | None) -> None:
        self.ops.append(RUnsub(account, subject, queue))

    def on_rmsg(
        self,
        account: bytes,
        subject: bytes,
        reply: bytes | None,
        queues: list[bytes] | None,
        headers: bytes | None,
        payload: bytes,
    ) -> None:
        self.ops.append(RMsg(account, subject, reply, queues, headers, payload))


def _bad(what: str, line: bytes) -> errors.BadArguments:
    return errors.BadArguments(f"{what}: {line[:128]!r}")


# (account, subject, reply, queues, header size or -1, total size) of an RMSG/HMSG control line
_MsgArgs = tuple[bytes, bytes, bytes | None, list[bytes] | None, int, int]
# Parsed message lines cached per parser: at most this many, of at most _LINE_CACHED bytes each.
LINE_CACHE_SIZE = 1024
_LINE_CACHED = 256


def parse_msg_args(args: list[bytes], with_headers: bool, line: bytes) -> _MsgArgs:
    """RMSG/HMSG arguments as nats-server reads them: (account, subject, reply, queues, header size,
    total size); the header size is -1 for RMSG."""
    sizes = 2 if with_headers else 1
    if len(args) < 2 + sizes:
        raise _bad("route message: too few arguments", line)
    queues: list[bytes] | None = None
    reply: bytes | None = None
    middle = args[2 : len(args) - sizes]
    if len(middle) == 1:
        reply = middle[0]
    elif len(middle) > 1:
        indicator = middle[0]
        if indicator == b"+":
            reply, queues = middle[1], middle[2:]
        elif indicator == b"|":
            queues = middle[1:]
        else:
            raise _bad("route message: bad or missing reply indicator", line)
    total = parse_size(args[-1])
    hdr = parse_size(args[-2]) if with_headers else -1
    if total < 0 or (with_headers and (hdr < 0 or hdr > total)):
        raise _bad("route message: bad or missing size", line)
    return args[0], args[1], reply, queues, hdr, total


class RouteParser:
    """Incremental parser for one route connection (see the module docstring).

    The hot path is RMSG: a route repeats a handful of message control lines, so their parse is cached by
    the line's bytes (as the client parser caches PUB lines); a cached RMSG costs a `find`, a dict lookup
    and a slice."""

    def __init__(
        self,
        handler: RouteOpHandler | None = None,
        max_control_line: int = 4096,
        max_payload: int = MAX_ROUTED_PAYLOAD,
        leaf: bool = False,
    ) -> None:
        # the op names: a route's, or a leaf node connection's (see the module docstring)
        self._msg_op = b"LMSG" if leaf else b"RMSG"
        self._sub_op = b"LS+" if leaf else b"RS+"
        self._unsub_op = b"LS-" if leaf else b"RS-"
        self._recorder: RouteOpRecorder | None = None
        if handler is None:
            handler = self._recorder = RouteOpRecorder()
        self._handler: RouteOpHandler = handler
        self.max_control_line = max_control_line
        self.max_payload = max_payload
        self.dead = False
        self._rest = b""  # an incomplete control line
        # a message whose payload is being gathered: (account, subject, reply, queues, header size, total),
        # and the pieces of it received so far
        self._pending: _MsgArgs | None = None
        self._chunks: list[bytes] = []
        self._have = 0
        self._lines: dict[bytes, _MsgArgs] = {}  # message control line -> its parse
        # the account a pinned route is dedicated to (its ops name none), empty on any other route
        self.account = b""

    def stop(self) -> None:
        """Parse nothing more (the connection closed)."""
        self.dead = True
        self._rest = b""
        self._pending = None
        self._chunks = []
        self._lines = {}

    def feed(self, data: bytes) -> list[RouteOp]:
        """Parse `data`; calls the handler per complete op. Raises ProtocolError on malformed input."""
        self.take(data, 0, 0)
        if self._recorder is not None:
            ops, self._recorder.ops = self._recorder.ops, []
            return ops
        return []

    def take(self, data: bytes, start: int, budget: int) -> int:
        """Parse the ops of `data[start:]` that begin within its first `budget` bytes (all of them if
        `budget` <= 0), calling the handler per op; return where the first op left unparsed begins, or
        `len(data)` once all of it is taken (an incomplete last op is kept for the next call): the client
        parser's contract (protocol.parser.Parser.take), so that a route reads under the same per-turn
        budget as a client. Raises ProtocolError on malformed input (the parser is then dead)."""
        if self.dead:
            raise errors.UnknownOperation("parser is closed")
        try:
            if self._pending is not None:
                start = self._continue_payload(data, start)
                if start < 0:  # the payload is still incomplete
                    return len(data)
            elif self._rest:
                # A control line cut at the end of the last read, completed by this one (copied once); it
                # is the first op of the joined input, so the stop is past it.
                held = len(self._rest)
                joined = self._rest + data[start:]
                self._rest = b""
                return start + self._parse(joined, 0, budget) - held
            if start < len(data):
                return self._parse(data, start, budget)
        except errors.ProtocolError:
            self.stop()
            raise
        return len(data)

    def _continue_payload(self, data: bytes, start: int) -> int:
        """Add `data[start:]` to the payload being gathered; once complete, deliver it and return where
        what follows begins (-1 while still incomplete)."""
        pending = self._pending
        assert pending is not None
        need = pending[5] + 2 - self._have
        if len(data) - start < need:
            self._chunks.append(data[start:])
            self._have += len(data) - start
            return -1
        self._chunks.append(data[start : start + need])
        joined = b"".join(self._chunks)
        self._pending, self._chunks, self._have = None, [], 0
        if joined[-2:] != b"\r\n":
            raise errors.BadArguments("route message: payload not followed by CRLF")
        self._deliver(pending, joined[:-2])
        return start + need

    def _parse(self, data: bytes, pos: int, budget: int) -> int:
        n = len(data)
        limit = pos + budget if budget > 0 else n
        lines = self._lines
        while pos < n and not self.dead:
            if pos >= limit:
                return pos
            end = data.find(b"\n", pos)
            if end < 0:
                rest = data[pos:]
                if len(rest) > self.max_control_line + 16:
                    raise errors.MaxControlLineExceeded(errors.MAX_CONTROL_LINE)
                self._rest = rest
                return n
            line = data[pos:end]
            pos = end + 1
            parsed = lines.get(line)
            if parsed is None:
                parsed = self._line(line.rstrip(b"\r"))
                if parsed is None:
                    continue  # not a message
                if len(line) <= _LINE_CACHED:
                    if len(lines) >= LINE_CACHE_SIZE:
                        lines.clear()
                    lines[line] = parsed
            stop = pos + parsed[5]
            if stop + 2 > n:  # the payload is in a later read
                self._pending = parsed
                self._chunks = [data[pos:]]
                self._have = n - pos
                return n
            if data[stop] != 13 or data[stop + 1] != 10:
                raise errors.BadArguments("route message: payload not followed by CRLF")
            self._deliver(parsed, data[pos:stop])
            pos = stop + 2
        return n

    def _deliver(self, parsed: _MsgArgs, body: bytes) -> None:
        account, subject, reply, queues, hdr, _ = parsed
        if hdr >= 0:
            self._handler.on_rmsg(account, subject, reply, queues, body[:hdr], body[hdr:])
        else:
            self._handler.on_rmsg(account, subject, reply, queues, None, body)

    def _line(self, line: bytes) -> _MsgArgs | None:
        """Handle a control line; for RMSG/HMSG, return its parse (the payload follows)."""
        name, _, rest = line.lstrip(b" \t").partition(b" ")
        if not rest and b"\t" in name:
            name, _, rest = name.partition(b"\t")
        op = name.upper()
        rest = rest.strip(_WS)
        if len(rest) > self.max_control_line:
            raise errors.MaxControlLineExceeded(errors.MAX_CONTROL_LINE)
        handler = self._handler
        if op == self._msg_op or op == b"HMSG":
            parsed = parse_msg_args(self._args(rest), op == b"HMSG", line)
            if parsed[5] > self.max_payload:
                raise errors.MaxPayloadExceeded(errors.MAX_PAYLOAD)
            return parsed
        elif op == self._sub_op:
            args = self._args(rest)
            if len(args) == 2:
                handler.on_rsub(args[0], args[1], None, 1)
            elif len(args) == 4:
                weight = parse_size(args[3])
                if weight < 1:
                    raise _bad("RS+: bad queue weight", line)
                handler.on_rsub(args[0], args[1], args[2], weight)
            else:
                raise _bad("RS+: wrong number of arguments", line)
        elif op == self._unsub_op:
            args = self._args(rest)
            if len(args) not in (2, 3):
                raise _bad("RS-: wrong number of arguments", line)
            handler.on_runsub(args[0], args[1], args[2] if len(args) == 3 else None)
        elif op == b"PING":
            handler.on_ping()
        elif op == b"PONG":
            handler.on_pong()
        elif op == b"+OK":
            handler.on_ok()
        elif op == b"-ERR":
            handler.on_err(rest.decode("utf-8", "replace").strip("'"))
        elif op.startswith(b"INFO") or op.startswith(b"CONNECT"):
            kind = b"INFO" if op.startswith(b"INFO") else b"CONNECT"
            text = line.lstrip(b" \t")[len(kind) :].strip(_WS)
            try:
                value = cast(object, json.loads(text))
            except (ValueError, RecursionError) as exc:
                raise errors.InvalidJSON(f"{kind.decode()}: invalid JSON") from exc
            if not isinstance(value, dict):
                raise errors.InvalidJSON(f"{kind.decode()}: not a JSON object")
            fields = cast(dict[str, object], value)  # a JSON object's keys are strings
            if kind == b"INFO":
                handler.on_info(fields)
            else:
                handler.on_connect(fields)
        else:
            raise errors.UnknownOperation(errors.UNKNOWN_OPERATION)
        return None

    def _args(self, rest: bytes) -> list[bytes]:
        """An interest or message op's arguments, the account first (the implied one on a pinned route)."""
        args = rest.split()
        if self.account:
            args.insert(0, self.account)
        return args


# -- encoding ----------------------------------------------------------------------------------------
def encode_rsub(
    account: bytes, subject: bytes, queue: bytes | None = None, weight: int = 1, leaf: bool = False
) -> bytes:
    """`RS+ account subject [queue weight]` (`LS+` with `leaf`); an empty `account` (a pinned route's, a
    leaf connection's) is left out."""
    named = account + b" " + subject if account else subject
    op = b"LS+" if leaf else b"RS+"
    if queue:
        return b"%s %s %s %d\r\n" % (op, named, queue, weight)
    return b"%s %s\r\n" % (op, named)


def encode_runsub(account: bytes, subject: bytes, queue: bytes | None = None, leaf: bool = False) -> bytes:
    """`RS- account subject [queue]` (`LS-` with `leaf`); an empty `account` is left out."""
    named = account + b" " + subject if account else subject
    op = b"LS-" if leaf else b"RS-"
    if queue:
        return b"%s %s %s\r\n" % (op, named, queue)
    return b"%s %s\r\n" % (op, named)


def rmsg_head(
    account: bytes,
    subject: bytes,
    reply: bytes | None,
    queues: list[bytes] | None,
    headers: bool,
    leaf: bool = False,
) -> bytes:
    """`RMSG account subject [reply | + reply q… | | q…] ` (or HMSG; LMSG with `leaf`): the frame up to its
    size field(s); an empty `account` (a pinned route's, a leaf connection's) is left out."""
    parts = [b"HMSG " if headers else (b"LMSG " if leaf else b"RMSG ")]
    if account:
        parts += [account, b" "]
    parts += [subject, b" "]
    if queues:
        if reply:
            parts += [b"+ ", reply, b" "]
        else:
            parts.append(b"| ")
        for q in queues:
            parts += [q, b" "]
    elif reply:
        parts += [reply, b" "]
    return b"".join(parts)


def encode_rmsg(
    account: bytes,
    subject: bytes,
    reply: bytes | None,
    queues: list[bytes] | None,
    headers: bytes | None,
    payload: bytes,
) -> bytes:
    """A whole routed message (RMSG, or HMSG when `headers` is given)."""
    head = rmsg_head(account, subject, reply, queues, headers is not None)
    if headers is None:
        return b"%s%d\r\n%s\r\n" % (head, len(payload), payload)
    total = len(headers) + len(payload)
    return b"%s%d %d\r\n%s%s\r\n" % (head, len(headers), total, headers, payload)


def encode_connect(options: Mapping[str, object]) -> bytes:
    return b"CONNECT " + go_json(options).encode() + b"\r\n"
