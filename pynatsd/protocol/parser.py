"""Sans-IO parser for the client side of the NATS protocol: bytes in, one typed handler call per op.

`Parser.feed(data)` parses every complete op in `data` (plus what an earlier call left over) and calls
its `OpHandler` for each, in order (see protocol.ops). Incomplete input is kept for the next call,
bounded by `max_control_line` for control lines and `max_payload` (+2) for payloads, so a client can
never make the parser buffer more than that. Frames split at any byte parse exactly as whole frames.

Behaviour follows nats-server's parser (server/parser.go) op by op:
- op names are case-insensitive; `PUB`, `HPUB`, `SUB`, `UNSUB` and `-ERR` need a space or tab after the
  name; for `PING`, `PONG` and `+OK` everything up to LF is ignored; a bare LF ends a line;
- an invalid op (or an invalid prefix of one, detected before its LF arrives) is `UnknownOperation`;
- a wrong argument count or a bad size is `BadArguments` (nats-server closes without `-ERR`);
- the argument part of a control line (after the op and its whitespace) may be at most
  `max_control_line` bytes, partial lines included.

Malformed input raises a `ProtocolError` subclass after the ops before it reached the handler; the
parser is then dead, and so it is after `stop()` (the handler closed the connection mid-read).

The hot path: a publisher repeats a handful of PUB and HPUB control lines (an HPUB's header block varies,
its line often not), so the parse of each canonical line is cached by its bytes; a cached PUB costs one
`find`, two slices and one dict lookup.
"""

from __future__ import annotations

import json
import re
from typing import cast

from pynatsd.protocol import errors
from pynatsd.protocol.ops import Op, OpHandler, OpRecorder

_PUB, _HPUB, _SUB, _UNSUB, _ERR, _CONNECT, _INFO, _PING, _PONG, _OK = range(1, 11)
_NEED_MORE = 0
# Ops that need whitespace after their name, with their kind.
_ARG_OPS: tuple[tuple[bytes, int], ...] = (
    (b"PUB", _PUB),
    (b"HPUB", _HPUB),
    (b"SUB", _SUB),
    (b"UNSUB", _UNSUB),
    (b"-ERR", _ERR),
)
# Ops whose name may be followed directly by their argument (CONNECT{...}) or by anything up to LF.
_FREE_OPS: tuple[tuple[bytes, int], ...] = (
    (b"CONNECT", _CONNECT),
    (b"INFO", _INFO),
    (b"PING", _PING),
    (b"PONG", _PONG),
    (b"+OK", _OK),
)
_LINE_IGNORED = (_PING, _PONG, _OK)
_NAME_LEN = {_PUB: 3, _HPUB: 4, _SUB: 3, _UNSUB: 5, _ERR: 4, _CONNECT: 7, _INFO: 4}
_WS = (32, 9)  # space, tab
_HEAD = 8  # enough bytes to classify any op name plus one separator
_SPLIT_ARGS = re.compile(rb"[ \t\r\n]+")
# The canonical PUB and HPUB lines every client library sends (single spaces, upper case): one C-level
# match gives subject, reply and sizes. nats-py writes `PUB subject  size` (an empty reply between two
# spaces): that form is canonical too. Anything else (tabs, lower case, bad sizes…) takes the general path.
_FAST_PUB = re.compile(rb"PUB ([^ \t\r\n]+) (?:([^ \t\r\n]+) | )?(\d{1,9})\r?\n")
_FAST_HPUB = re.compile(rb"HPUB ([^ \t\r\n]+) (?:([^ \t\r\n]+) | )?((\d{1,9}) (\d{1,9}))\r?\n")
# A cached line's parse: subject, reply, the size field(s) as sent, total size, header size (-1: a PUB).
ParsedLine = tuple[bytes, bytes | None, bytes, int, int]
# The line cache: at most this many lines of at most _LINE_CACHED bytes. Parsers may share one (the
# server gives all its connections one, about 1 MiB when full: a line's parse is the same whoever sends
# it); one that fills up starts over rather than grows. Measured: 1,000 subjects interleaved by one
# publisher missed every time in a per-connection cache of 256 lines (200 ns more per PUB).
LINE_CACHE_SIZE = 4096
_LINE_CACHED = 128
# HPUB lines with a reply seen once, remembered until this many are (then forgotten at once).
_SIGHTED = 64
# JSON nesting deeper than this in CONNECT/INFO is refused before json.loads recurses into it.
_MAX_JSON_DEPTH = 64


def _classify(head: bytes) -> int:
    """The op kind that a line starting with `head` (upper-cased) is; _NEED_MORE or -1 (invalid)."""
    for name, kind in _ARG_OPS:
        if head.startswith(name):
            if len(head) == len(name):
                return _NEED_MORE
            return kind if head[len(name)] in _WS else -1
        if name.startswith(head):
            return _NEED_MORE
    for name, kind in _FREE_OPS:
        if head.startswith(name):
            return kind
        if name.startswith(head):
            return _NEED_MORE
    return -1


def parse_size(data: bytes) -> int:
    """A size field: 1 to 9 ASCII digits, else -1 (as nats-server's parseSize)."""
    if 0 < len(data) <= 9 and data.isdigit():
        return int(data)
    return -1


class Parser:
    """Incremental parser for one client connection, driving `handler` (or recording ops without one).

    HPUB is accepted once a CONNECT asking for headers is parsed, if `allow_headers` (the server's
    header support) is on; `headers` can also be set directly.
    `expect_connect` makes any first op other than CONNECT an authorization violation (auth configured).
    """

    __slots__ = (
        "_acc",
        "_buf",
        "_handler",
        "_lines",
        "_pending",
        "_recorder",
        "_sighted",
        "allow_headers",
        "dead",
        "expect_connect",
        "headers",
        "max_control_line",
        "max_payload",
        "paused",
    )

    def __init__(
        self,
        max_control_line: int = 4096,
        max_payload: int = 1048576,
        headers: bool = False,
        expect_connect: bool = False,
        allow_headers: bool = True,
        handler: OpHandler | None = None,
        line_cache: dict[bytes, ParsedLine] | None = None,
    ) -> None:
        self.max_control_line = max_control_line
        self.allow_headers = allow_headers
        self.max_payload = max_payload
        self.headers = headers
        self.expect_connect = expect_connect
        self.dead = False
        self.paused = False  # see pause()
        self._recorder: OpRecorder | None = None
        if handler is None:  # no handler: record the ops, for `feed` to return
            handler = self._recorder = OpRecorder()
        self._handler: OpHandler = handler
        self._buf = b""  # an incomplete control line (bounded by max_control_line)
        self._acc: bytearray | None = None  # an incomplete payload being gathered
        # the op whose payload is being gathered: (is_hpub, subject, reply, sizes as sent, header size,
        # total size)
        self._pending: tuple[bool, bytes, bytes | None, bytes, int, int] | None = None
        # control line -> its parse, for canonical PUB and HPUB lines only (see _parse_pub_line)
        self._lines = line_cache if line_cache is not None else {}
        self._sighted: dict[bytes, bool] = {}  # HPUB lines with a reply seen once (see _parse_pub_line)

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete op."""
        return len(self._buf) + (len(self._acc) if self._acc is not None else 0)

    def set_handler(self, handler: OpHandler) -> None:
        """Hand the ops that follow to `handler` (e.g. a tracing wrapper switched on by a reload)."""
        self._handler = handler

    def pause(self) -> None:
        """Stop after the op being handled: `take` returns where it stopped and takes nothing until
        `resume`; `feed` keeps what follows (with what it gets meanwhile) for its next call after `resume`.
        For a handler that must finish something first (a slow CONNECT check); reading the socket is
        expected to be held meanwhile, which bounds what is kept."""
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def stop(self) -> None:
        """Parse nothing more, not even the rest of the read being parsed (its connection closed), and let
        go of any partial input."""
        self.dead = True
        self._buf = b""
        self._acc = None
        self._pending = None
        self._lines = {}

    def feed(self, data: bytes) -> list[Op]:
        """Parse `data`, calling the handler per complete op; raises ProtocolError on malformed input.

        Without a handler, returns the ops parsed (the error then carries them in `.ops`). While paused,
        what is not parsed is kept for the next call after `resume`."""
        if self.paused and not self.dead:
            self._buf += data
            return []
        stop = self.take(data, 0, 0)
        if stop < len(data):  # the handler paused the parser
            self._buf += data[stop:]
        return self._recorded()

    def take(self, data: bytes, start: int, budget: int) -> int:
        """Parse the ops of `data[start:]` that begin within its first `budget` bytes (all of them if
        `budget` <= 0), calling the handler per op; return where the first op left unparsed begins, or
        `len(data)` once all of it is taken (an incomplete last op is kept for the next call). The caller
        hands the rest again later, by reference: a connection's input is never copied to cut it into
        slices (measured, 1 KiB messages with the 256 KiB reads uvloop makes: the copies were 6% of the
        broker's time). Stops early, right after the op, when the handler pauses the parser; raises
        ProtocolError on malformed input."""
        if self.dead:
            raise errors.UnknownOperation("parser is closed")
        if self.paused:
            return start
        try:
            if self._pending is not None:
                start = self._continue_payload(data, start)
                if start < 0:  # the payload is still incomplete
                    return len(data)
            elif self._buf:
                # A control line cut at the end of the last read, completed by this one (copied once).
                held = len(self._buf)
                joined = self._buf + data[start:]
                self._buf = b""
                stop = self._parse(joined, 0, budget)
                if stop >= held:
                    return start + stop - held
                self._buf = joined[stop:held]  # only a paused `feed` keeps whole ops here
                return start
            if start < len(data) and not self.dead:
                return self._parse(data, start, budget)
        except errors.ProtocolError as err:
            self.dead = True
            err.ops = self._recorded()
            raise
        except RecursionError:  # a handler's own recursion is not the client's fault, but fail closed
            self.dead = True
            raise
        return len(data)

    def _recorded(self) -> list[Op]:
        return self._recorder.take() if self._recorder is not None else []

    def _continue_payload(self, data: bytes, start: int) -> int:
        """Add `data[start:]` to the payload being gathered; return where the rest of `data` starts, or -1
        when the payload is still incomplete."""
        pending = self._pending
        acc = self._acc
        assert pending is not None and acc is not None
        size = pending[5]
        need = size + 2 - len(acc)
        if len(data) - start < need:
            acc += data[start:]
            return -1
        acc += data[start : start + need]  # only what completes the frame: the rest is parsed in place
        if acc[size] != 13 or acc[size + 1] != 10:
            raise errors.UnknownOperation("payload not followed by CRLF")
        self._pending = None
        self._acc = None
        is_hpub, subject, reply, sizes, hdr = pending[0], pending[1], pending[2], pending[3], pending[4]
        if is_hpub:
            self._handler.on_hpub(subject, reply, sizes, bytes(acc[:hdr]), bytes(acc[hdr:size]))
        else:
            self._handler.on_pub(subject, reply, sizes, bytes(acc[:size]))
        return start + need

    @staticmethod
    def _split(arg: bytes) -> list[bytes]:
        # bytes.split() also splits on \x0b and \x0c, which nats-server keeps inside tokens; the regex
        # is exact but slower, so it is used only for lines that contain one of those bytes.
        # find, not `in`: bytes' `in` first tries the operand as an int and builds a TypeError to drop.
        if arg.find(b"\x0b") >= 0 or arg.find(b"\x0c") >= 0:
            return [a for a in _SPLIT_ARGS.split(arg) if a]
        return arg.split()

    def _parse(self, buf: bytes, pos: int, budget: int) -> int:
        """Parse the ops of `buf` from `pos` that begin within `budget` bytes of it; return where parsing
        stopped (see `take`)."""
        handler = self._handler
        on_pub = handler.on_pub
        expect_connect = self.expect_connect
        max_payload = self.max_payload
        n = len(buf)
        limit = pos + budget if 0 < budget < n - pos else n
        find = buf.find
        lines = self._lines
        # A publisher's PUB lines tend to be as long as its last one (`PUB sensors.417.temp 16`): when the
        # bytes that long from here end in LF and are a cached line, they are this op's line, found
        # without `bytes.find` (in 3.11 a METH_VARARGS call: an argument tuple, parsing, a buffer, two ints,
        # and a gen-0 GC every 700 of them). bench/broker/inproc.py, 1,000 interleaved subjects, 16 B,
        # compiled: 365 -> 216 ns per message (1 -> 4: 481 -> ~360; interpreted: 1,590 -> ~1,450).
        guess = 0
        while pos < limit:
            if expect_connect and buf[pos] not in (67, 99):  # C, c
                raise errors.AuthorizationViolation("first op is not CONNECT", "authentication error")
            nl = pos + guess - 1
            parsed = None
            if guess and nl < n and buf[nl] == 10:
                line = buf[pos : nl + 1]
                parsed = lines.get(line)
            if parsed is None:
                nl = find(b"\n", pos)
                if nl < 0:
                    self._keep_partial(buf, pos)
                    return n
                line = buf[pos : nl + 1]
                parsed = lines.get(line)
                if parsed is None and (buf.startswith(b"PUB ", pos) or buf.startswith(b"HPUB ", pos)):
                    parsed = self._parse_pub_line(buf, pos, line)
            if parsed is not None:
                subject, reply, size_field, size, hdr = parsed
                if hdr >= 0 and not self.headers:  # the cache is shared: HPUB is legal only where negotiated
                    raise errors.HeadersNotNegotiated("HPUB without headers negotiated")
                if size > max_payload:  # and another client's limit may be higher
                    raise errors.max_payload_exceeded(size, max_payload)
                guess = nl + 1 - pos
                start = nl + 1
                stop = start + size
                if stop + 2 > n:
                    self._pending = (hdr >= 0, subject, reply, size_field, max(hdr, 0), size)
                    self._acc = bytearray(buf[start:])
                    return n
                if buf[stop] != 13 or buf[stop + 1] != 10:
                    raise errors.UnknownOperation("payload not followed by CRLF")
                pos = stop + 2
                if hdr < 0:
                    on_pub(subject, reply, size_field, buf[start:stop])
                else:
                    mid = start + hdr
                    handler.on_hpub(subject, reply, size_field, buf[start:mid], buf[mid:stop])
                if self.dead:
                    return n
                continue
            pos = self._parse_line(buf, pos, nl)
            if pos < 0:
                return n
            expect_connect = self.expect_connect
            max_payload = self.max_payload  # a CONNECT may have set a user's own limit
            if self.dead:
                return n
            if self.paused:
                return pos
        return pos

    def _parse_line(self, buf: bytes, pos: int, nl: int) -> int:
        """Any op but a canonical PUB, its control line ending at `nl`: where the next op starts, or -1
        when its payload is incomplete (kept for the next read)."""
        end = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl
        handler = self._handler
        kind = _classify(buf[pos : min(end, pos + _HEAD)].upper())
        if kind <= 0:
            raise errors.unknown_operation(buf, pos)
        if kind == _PING:
            handler.on_ping()
            return nl + 1
        if kind == _PONG:
            handler.on_pong()
            return nl + 1
        if kind == _OK:
            handler.on_ok()
            return nl + 1
        arg_start = self._skip_name(buf, pos, end, kind)
        if end - arg_start > self.max_control_line:
            raise errors.MaxControlLineExceeded(f"control line of {end - arg_start} bytes")
        arg = buf[arg_start:end]
        if kind in (_PUB, _HPUB):
            pending = self._pub_args(kind == _HPUB, self._split(arg))
            is_hpub, subject, reply, sizes, hdr, size = pending
            start = nl + 1
            stop = start + size
            if stop + 2 > len(buf):
                self._pending = pending
                self._acc = bytearray(buf[start:])
                return -1
            if buf[stop] != 13 or buf[stop + 1] != 10:
                raise errors.UnknownOperation("payload not followed by CRLF")
            if is_hpub:
                handler.on_hpub(subject, reply, sizes, buf[start : start + hdr], buf[start + hdr : stop])
            else:
                handler.on_pub(subject, reply, sizes, buf[start:stop])
            return stop + 2
        if kind == _SUB:
            args = self._split(arg)
            if len(args) == 2:
                handler.on_sub(args[0], None, args[1])
            elif len(args) == 3:
                handler.on_sub(args[0], args[1], args[2])
            else:
                raise errors.BadArguments(f"SUB with {len(args)} arguments")
        elif kind == _UNSUB:
            args = self._split(arg)
            if len(args) == 1:
                handler.on_unsub(args[0], None)
            elif len(args) == 2:
                handler.on_unsub(args[0], parse_size(args[1]))
            else:
                raise errors.BadArguments(f"UNSUB with {len(args)} arguments")
        elif kind == _CONNECT:
            options = _decode_json(arg)
            self.expect_connect = False
            # Ops later in this same read may be HPUBs that this CONNECT just made legal.
            self.headers = self.allow_headers and _wants_headers(options)
            handler.on_connect(options)
        elif kind == _INFO:
            handler.on_info(_decode_json(arg))
        else:  # -ERR
            handler.on_err(arg.decode("utf-8", "replace"))
        return nl + 1

    def _parse_pub_line(self, buf: bytes, pos: int, line: bytes) -> ParsedLine | None:
        """The parse of a canonical PUB or HPUB control line (`line`, at `pos` in `buf`), cached for the
        lines that follow; None for any other line (the general path deals with it, errors included)."""
        hpub = buf[pos] == 72  # H
        fast = (_FAST_HPUB if hpub else _FAST_PUB).match(buf, pos)
        if fast is None:
            return None
        if fast.end(3) - pos - (5 if hpub else 4) > self.max_control_line:
            raise errors.MaxControlLineExceeded("control line too long")
        subject, reply, size_field = fast.group(1, 2, 3)
        if hpub:
            if not self.headers:
                return None  # the general path refuses it
            hdr, size = int(fast.group(4)), int(fast.group(5))
            if hdr > size:
                return None
        else:
            hdr, size = -1, int(size_field)
        if size > self.max_payload:
            raise errors.max_payload_exceeded(size, self.max_payload)
        parsed = (subject, reply, size_field, size, hdr)
        # An HPUB with a reply is mostly a JetStream publish awaiting its ack on an inbox of its own
        # (nats-py, nats.go): its line never comes back, and caching every one cost 0.8-1.1 µs a message
        # (publish_cpu.py). Such a line is cached at its second sighting among the last few (a publisher
        # with one ack inbox, such as the Spark sink, repeats its lines).
        if hpub and reply is not None and self._sighted.pop(line, None) is None:
            sighted = self._sighted
            if len(sighted) >= _SIGHTED:
                sighted.clear()
            sighted[line] = True
        elif len(line) <= _LINE_CACHED:
            lines = self._lines
            if len(lines) >= LINE_CACHE_SIZE:
                lines.clear()  # a publisher cycling through many lines: start over rather than grow
            lines[line] = parsed
        return parsed

    @staticmethod
    def _skip_name(buf: bytes, pos: int, end: int, kind: int) -> int:
        """Index of the first argument byte: after the op name and its spaces/tabs."""
        i = pos + _NAME_LEN[kind]
        while i < end and buf[i] in _WS:
            i += 1
        return i

    def _pub_args(
        self, is_hpub: bool, args: list[bytes]
    ) -> tuple[bool, bytes, bytes | None, bytes, int, int]:
        """(is_hpub, subject, reply, sizes as sent, hdr_size, total_size) from PUB or HPUB arguments."""
        reply: bytes | None
        if not is_hpub:
            if len(args) == 2:
                subject, reply, size_field = args[0], None, args[1]
            elif len(args) == 3:
                subject, reply, size_field = args
            else:
                raise errors.BadArguments(
                    f"PUB with {len(args)} arguments",
                    f"processPub Parse Error: {errors.quote(b' '.join(args).decode('latin-1'))}",
                )
            size = parse_size(size_field)
            if size < 0:
                raise errors.BadArguments("bad or missing PUB size")
            hdr = 0
            sizes = size_field
        else:
            if not self.headers:
                raise errors.HeadersNotNegotiated("HPUB without headers negotiated")
            if len(args) == 3:
                subject, reply, hdr_field, size_field = args[0], None, args[1], args[2]
            elif len(args) == 4:
                subject, reply, hdr_field, size_field = args
            else:
                raise errors.BadArguments(f"HPUB with {len(args)} arguments")
            hdr = parse_size(hdr_field)
            size = parse_size(size_field)
            if hdr < 0 or size < 0 or hdr > size:
                raise errors.BadArguments("bad HPUB sizes")
            sizes = hdr_field + b" " + size_field
        if size > self.max_payload:
            raise errors.max_payload_exceeded(size, self.max_payload)
        return (is_hpub, subject, reply, sizes, hdr, size)

    def _keep_partial(self, buf: bytes, pos: int) -> None:
        """Keep an incomplete control line, failing early on a bad op or an oversized argument part."""
        n = len(buf)
        head = buf[pos : pos + _HEAD].upper()
        kind = _classify(head)
        if kind < 0:
            raise errors.unknown_operation(buf, pos)
        if kind in _LINE_IGNORED:
            # Everything up to LF is ignored: keep only the op name, not what a client streams after it.
            self._buf = buf[pos : pos + _HEAD]
            return
        if kind != _NEED_MORE:
            end = n - 1 if buf[n - 1] == 13 else n
            arg_start = self._skip_name(buf, pos, end, kind)
            if end - arg_start > self.max_control_line:
                raise errors.MaxControlLineExceeded(f"partial control line of {end - arg_start} bytes")
        self._buf = buf[pos:]


def _wants_headers(options: dict[str, object]) -> bool:
    for key, value in options.items():
        if key.lower() == "headers":
            return value is True
    return False


def _too_deep(arg: bytes) -> bool:
    """True when `arg` nests arrays/objects deeper than _MAX_JSON_DEPTH (brackets inside strings count
    too: a false alarm needs 64 of them, which no CONNECT has). Iterative: no input drives recursion."""
    depth = 0
    for byte in arg:
        if byte == 91 or byte == 123:  # [ {
            depth += 1
            if depth > _MAX_JSON_DEPTH:
                return True
        elif (byte == 93 or byte == 125) and depth:  # ] }
            depth -= 1
    return False


def _decode_json(arg: bytes) -> dict[str, object]:
    if arg.count(b"[") + arg.count(b"{") > _MAX_JSON_DEPTH and _too_deep(arg):
        raise errors.InvalidJSON("JSON nested too deeply")
    try:
        value = cast(object, json.loads(arg)) if arg else None
    except json.JSONDecodeError as exc:
        raise errors.InvalidJSON("invalid JSON", _go_syntax_error(exc)) from None
    except ValueError:
        raise errors.InvalidJSON("invalid JSON", "invalid character in JSON input") from None
    if value is None:
        if not arg:
            raise errors.InvalidJSON("missing JSON", "unexpected end of JSON input")
        return {}
    if not isinstance(value, dict):
        kind = {"bool": "bool", "str": "string", "list": "array"}.get(type(value).__name__, "number")
        raise errors.InvalidJSON("JSON is not an object", f"json: cannot unmarshal {kind} into Go value")
    return cast(dict[str, object], value)  # a JSON object's keys are strings


# Python's JSON syntax errors as Go's encoding/json words them (what nats-server logs for a bad CONNECT)
_GO_JSON_CONTEXT = {
    "Expecting property name enclosed in double quotes": "looking for beginning of object key string",
    "Expecting value": "looking for beginning of value",
    "Expecting ':' delimiter": "after object key",
    "Expecting ',' delimiter": "after object key:value pair",
    "Extra data": "after top-level value",
    "Invalid control character at": "in string literal",
}


def _go_syntax_error(exc: json.JSONDecodeError) -> str:
    if exc.pos >= len(exc.doc):
        return "unexpected end of JSON input"
    char = exc.doc[exc.pos]
    shown = "'\\''" if char == "'" else f"'{char}'" if char.isprintable() else json.dumps(char)
    return f"invalid character {shown} {_GO_JSON_CONTEXT.get(exc.msg, 'looking for beginning of value')}"
