"""Sans-IO parser for the client side of the NATS protocol: bytes in, ops out.

`Parser.feed(data)` parses every complete op in `data` (plus what an earlier call left over) and returns
them as tuples (see pynatsd.protocol.ops). Incomplete input is kept for the next call, bounded by
`max_control_line` for control lines and `max_payload` (+2) for payloads, so a client can never make the
parser buffer more than that. Frames split at any byte parse exactly as whole frames.

Behaviour follows nats-server's parser (server/parser.go) op by op:
- op names are case-insensitive; `PUB`, `HPUB`, `SUB`, `UNSUB` and `-ERR` need a space or tab after the
  name; for `PING`, `PONG` and `+OK` everything up to LF is ignored; a bare LF ends a line;
- an invalid op (or an invalid prefix of one, detected before its LF arrives) is `UnknownOperation`;
- a wrong argument count or a bad size is `BadArguments` (nats-server closes without `-ERR`);
- the argument part of a control line (after the op and its whitespace) may be at most
  `max_control_line` bytes, partial lines included.

Malformed input raises a `ProtocolError` subclass carrying the ops parsed before it (`err.ops`); the
parser is then dead. The hot path (PUB) is a handful of C-level bytes operations per message.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pynatsd.protocol import errors
from pynatsd.protocol.encoder import msg_tail
from pynatsd.protocol.ops import CONNECT, ERR, HPUB, INFO, OK, PING, PONG, PUB, PUBMIX, PUBRUN, SUB, UNSUB, Op

# Ops that need whitespace after their name, with their kind.
_ARG_OPS: tuple[tuple[bytes, int], ...] = (
    (b"PUB", PUB),
    (b"HPUB", HPUB),
    (b"SUB", SUB),
    (b"UNSUB", UNSUB),
    (b"-ERR", ERR),
)
# Ops whose name may be followed directly by their argument (CONNECT{...}) or by anything up to LF.
_FREE_OPS: tuple[tuple[bytes, int], ...] = (
    (b"CONNECT", CONNECT),
    (b"INFO", INFO),
    (b"PING", PING),
    (b"PONG", PONG),
    (b"+OK", OK),
)
_LINE_IGNORED = (PING, PONG, OK)
_NAME_LEN = {PUB: 3, HPUB: 4, SUB: 3, UNSUB: 5, ERR: 4, CONNECT: 7, INFO: 4}
_WS = (32, 9)  # space, tab
_HEAD = 8  # enough bytes to classify any op name plus one separator
_NEED_MORE = 0
_SPLIT_ARGS = re.compile(rb"[ \t\r\n]+")
# The canonical PUB line every client library sends (single spaces, upper case): one C-level match gives
# subject, reply and size. Anything else (tabs, lower case, HPUB, bad sizes…) takes the general path.
# nats-py writes `PUB subject  size` (an empty reply between two spaces): that form is canonical too.
_FAST_PUB = re.compile(rb"PUB ([^ \t\r\n]+) (?:([^ \t\r\n]+) | )?(\d{1,9})\r?\n")
# A parsed canonical PUB line: (subject, reply, size, offset of the MSG tail in the line or -1,
# `PUB subject [reply ]`).
_PubLine = tuple[bytes, bytes | None, int, int, bytes]
# At most this many subjects in one PUBMIX op.
_MIX_SUBJECTS = 4
# Per-connection bound of that cache (its lines are at most _LINE_CACHED bytes): a few KiB at most.
_LINE_CACHE = 64
_LINE_CACHED = 128


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


def _frames_ok(buf: bytes, pos: int, length: int, line: bytes, i: int, j: int) -> bool:
    """Do frames i..j-1 (each `length` bytes from `pos`) all start with `line` and end with CRLF?

    Checked column by column with strided slices: a few C-level operations for the whole range.
    """
    a, b, n = pos + i * length, pos + j * length, j - i
    for c in range(len(line)):
        if buf[a + c : b : length] != line[c : c + 1] * n:
            return False
    return buf[a + length - 2 : b : length] == b"\r" * n and buf[a + length - 1 : b : length] == b"\n" * n


def _run_length(buf: bytes, pos: int, length: int, line: bytes, guess: int) -> int:
    """How many frames of `length` bytes from `pos` repeat `line` (the first one is known to).

    The first check covers `guess` frames (the length of this connection's previous run): a steady
    stream is verified in one pass. Then galloping and bisecting, so the cost follows the run's length
    (and the guess) and not the buffer's: each check costs about a microsecond whatever its size."""
    avail = (len(buf) - pos) // length
    good, k = 1, max(2, min(guess, avail))
    while k <= avail and _frames_ok(buf, pos, length, line, good, k):
        good, k = k, k * 2
    hi = min(k, avail + 1)  # frames good..hi-1 hold a bad one (or run past the buffer)
    while hi - good > 1:
        mid = (good + hi) // 2
        if _frames_ok(buf, pos, length, line, good, mid):
            good = mid
        else:
            hi = mid
    return good


def expand_run(op: Op) -> list[Op]:
    """The PUB ops a PUBRUN or PUBMIX op stands for."""
    view, count = (op[4], op[5]) if op[0] == PUBRUN else (op[2], op[3])
    chunk = bytes(view)
    ops: list[Op] = []
    pos = 0
    for _ in range(count):
        fast = _FAST_PUB.match(chunk, pos)
        assert fast is not None
        reply = fast.group(2)
        start = fast.end()
        stop = start + int(fast.group(3))
        tail = chunk[fast.start(2 if reply else 3) : stop + 2]
        ops.append((PUB, fast.group(1), reply, chunk[start:stop], tail))
        pos = stop + 2
    return ops


def parse_size(data: bytes) -> int:
    """A size field: 1 to 9 ASCII digits, else -1 (as nats-server's parseSize)."""
    if 0 < len(data) <= 9 and data.isdigit():
        return int(data)
    return -1


class Parser:
    """Incremental parser for one client connection.

    With `runs`, back-to-back canonical PUBs to one subject (and reply) come out as one PUBRUN op
    (see pynatsd.protocol.ops): the broker frames them for a subscriber with one `bytes.replace`.

    HPUB is accepted once a CONNECT asking for headers is parsed, if `allow_headers` (the server's
    header support) is on; `headers` can also be set directly.
    `expect_connect` makes any first op other than CONNECT an authorization violation (auth configured).
    """

    __slots__ = (
        "_acc",
        "_buf",
        "_lines",
        "_mixable",
        "_no_run_before",
        "_pending",
        "_run_guess",
        "allow_headers",
        "dead",
        "expect_connect",
        "headers",
        "max_control_line",
        "max_payload",
        "mix_pause",
        "runs",
    )

    def __init__(
        self,
        max_control_line: int = 4096,
        max_payload: int = 1048576,
        headers: bool = False,
        expect_connect: bool = False,
        allow_headers: bool = True,
        runs: bool = False,
    ) -> None:
        self.runs = runs
        self.max_control_line = max_control_line
        self.allow_headers = allow_headers
        self.max_payload = max_payload
        self.headers = headers
        self.expect_connect = expect_connect
        self.dead = False
        self._buf = b""  # an incomplete control line (bounded by max_control_line)
        self._acc: bytearray | None = None  # an incomplete payload being gathered
        self._pending: tuple[Any, ...] | None = (
            None  # (kind, subject, reply, hdr_size, size) awaiting payload
        )
        self._no_run_before = 0  # an offset in the current buffer before which no run is tried
        self._run_guess = 2  # frames in the last uniform run: where the next one's check starts
        self._lines: dict[bytes, _PubLine] = {}  # control line -> its parse (canonical PUBs only)
        # Those without a reply: line -> (subject, prefix, size).
        self._mixable: dict[bytes, tuple[bytes, bytes, int]] = {}
        self.mix_pause = 0  # reads to parse without PUBMIX ops (set by a consumer that had to expand one)

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete op."""
        return len(self._buf) + (len(self._acc) if self._acc is not None else 0)

    def feed(self, data: bytes) -> list[Op]:
        """Parse `data`; return the complete ops in order. Raises ProtocolError (with `.ops`)."""
        if self.dead:
            raise errors.UnknownOperation("parser is closed after an error")
        ops: list[Op] = []
        try:
            start = 0
            if self._pending is not None:
                start = self._continue_payload(data, ops)
                if self._pending is not None:
                    return ops
            elif self._buf:
                data = self._buf + data
                self._buf = b""
            if start < len(data):
                self._parse(data, ops, start)
        except errors.ProtocolError as err:
            self.dead = True
            err.ops = ops
            raise
        return ops

    def _continue_payload(self, data: bytes, ops: list[Op]) -> int:
        """Add `data` to the payload being gathered; return where the rest of `data` starts."""
        pending = self._pending
        acc = self._acc
        assert pending is not None and acc is not None
        size = pending[4]
        need = size + 2 - len(acc)
        if len(data) < need:
            acc += data
            return len(data)
        acc += data[:need]  # only what completes the frame: the rest is parsed in place, not copied
        if acc[size] != 13 or acc[size + 1] != 10:
            raise errors.UnknownOperation("payload not followed by CRLF")
        self._emit(pending, bytes(acc[:size]), ops)
        self._pending = None
        self._acc = None
        return need

    @staticmethod
    def _emit(pending: tuple[Any, ...], body: bytes, ops: list[Op]) -> None:
        kind, subject, reply, hdr = pending[0], pending[1], pending[2], pending[3]
        if kind == PUB:
            ops.append((PUB, subject, reply, body, msg_tail(reply, body)))
        else:
            ops.append((HPUB, subject, reply, body[:hdr], body[hdr:]))

    @staticmethod
    def _split(arg: bytes) -> list[bytes]:
        # bytes.split() also splits on \x0b and \x0c, which nats-server keeps inside tokens; the regex
        # is exact but slower, so it is used only for lines that contain one of those bytes (checked per
        # control line: a scan of the whole read would cost as much as parsing it, at 1 KiB payloads).
        if b"\x0b" in arg or b"\x0c" in arg:
            return [a for a in _SPLIT_ARGS.split(arg) if a]
        return arg.split()

    def _parse(self, buf: bytes, ops: list[Op], pos: int) -> None:
        self._no_run_before = 0
        runs = self.runs
        mixes = runs and not self.mix_pause
        if self.mix_pause:
            self.mix_pause -= 1
        expect_connect = self.expect_connect
        n = len(buf)
        find = buf.find
        lines = self._lines
        while pos < n:
            if expect_connect and buf[pos] not in (67, 99):  # C, c
                raise errors.AuthorizationViolation("first op is not CONNECT")
            nl = find(b"\n", pos)
            if nl < 0:
                self._keep_partial(buf, pos)
                return
            # A publisher repeats a handful of control lines: the parse of each is cached by its bytes,
            # so the per-message cost is one find, one slice and one dict lookup.
            line = buf[pos : nl + 1]
            parsed = lines.get(line)
            if parsed is None:
                parsed = self._parse_pub_line(buf, pos, line)
            if parsed is not None:
                subject, reply, size, tail_at, prefix = parsed
                start = nl + 1
                stop = start + size
                if stop + 2 > n:
                    self._pending = (PUB, subject, reply, 0, size)
                    self._acc = bytearray(buf[start:])
                    return
                if buf[stop] != 13 or buf[stop + 1] != 10:
                    raise errors.UnknownOperation("payload not followed by CRLF")
                if (
                    runs
                    and buf.startswith(prefix, stop + 2)  # cheap pre-check: the next PUB's subject and reply?
                    and pos >= self._no_run_before
                    and tail_at >= 0
                ):
                    run = self._run(buf, pos, start, stop, subject, reply, size, prefix)
                    if run is not None:
                        ops.append(run)
                        pos += len(run[4])
                        continue
                elif mixes and reply is None and tail_at >= 0 and buf.startswith(b"PUB ", stop + 2):
                    mix = self._mix(buf, pos, stop + 2, subject, size, prefix)
                    if mix is not None:
                        ops.append(mix)
                        pos += len(mix[2])
                        continue
                # `[reply ]size\r\npayload\r\n` is, byte for byte, the tail of the MSG frame that
                # delivers this message: hand it over as one slice instead of formatting it again.
                payload = buf[start:stop]
                tail = buf[pos + tail_at : stop + 2] if tail_at >= 0 else msg_tail(reply, payload)
                ops.append((PUB, subject, reply, payload, tail))
                pos = stop + 2
                continue
            end = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl

            kind = _classify(buf[pos : min(end, pos + _HEAD)].upper())
            if kind <= 0:
                raise errors.UnknownOperation("unknown op")
            if kind in _LINE_IGNORED:
                ops.append((kind,))
                pos = nl + 1
                continue
            arg_start = self._skip_name(buf, pos, end, kind)

            if end - arg_start > self.max_control_line:
                raise errors.MaxControlLineExceeded(f"control line of {end - arg_start} bytes")

            if kind in (PUB, HPUB):
                pub = self._pub_args(kind, self._split(buf[arg_start:end]))
                start = nl + 1
                stop = start + pub[4]
                if stop + 2 > n:
                    self._pending = pub
                    self._acc = bytearray(buf[start:])
                    return
                if buf[stop] != 13 or buf[stop + 1] != 10:
                    raise errors.UnknownOperation("payload not followed by CRLF")
                if kind == PUB:
                    payload = buf[start:stop]
                    ops.append((PUB, pub[1], pub[2], payload, msg_tail(pub[2], payload)))
                else:
                    hdr_end = start + pub[3]
                    ops.append((HPUB, pub[1], pub[2], buf[start:hdr_end], buf[hdr_end:stop]))
                pos = stop + 2
                continue

            arg = buf[arg_start:end]
            if kind == SUB:
                args = self._split(arg)
                if len(args) == 2:
                    ops.append((SUB, args[0], None, args[1]))
                elif len(args) == 3:
                    ops.append((SUB, args[0], args[1], args[2]))
                else:
                    raise errors.BadArguments(f"SUB with {len(args)} arguments")
            elif kind == UNSUB:
                args = self._split(arg)
                if len(args) == 1:
                    ops.append((UNSUB, args[0], None))
                elif len(args) == 2:
                    ops.append((UNSUB, args[0], parse_size(args[1])))
                else:
                    raise errors.BadArguments(f"UNSUB with {len(args)} arguments")
            elif kind == CONNECT:
                options = _decode_json(arg)
                self.expect_connect = False
                # Ops later in this same read may be HPUBs that this CONNECT just made legal.
                self.headers = self.allow_headers and _wants_headers(options)
                expect_connect = False
                ops.append((CONNECT, options))
            elif kind == INFO:
                ops.append((INFO, _decode_json(arg)))
            else:  # ERR
                ops.append((ERR, arg.decode("utf-8", "replace")))
            pos = nl + 1

    def _parse_pub_line(self, buf: bytes, pos: int, line: bytes) -> _PubLine | None:
        """The parse of a canonical PUB control line (`line`, at `pos` in `buf`), cached for the lines
        that follow; None for any other line (the general path deals with it, errors included)."""
        fast = _FAST_PUB.match(buf, pos)
        if fast is None:
            return None
        if fast.end(3) - pos - 4 > self.max_control_line:
            raise errors.MaxControlLineExceeded("control line too long")
        subject, reply, size_field = fast.group(1, 2, 3)
        size = int(size_field)
        if size > self.max_payload:
            raise errors.MaxPayloadExceeded(f"payload of {size} bytes")
        # Where the MSG tail starts in the line; -1 for a bare-LF line, whose tail must be re-encoded.
        tail_at = fast.start(2 if reply else 3) - pos if fast.end() - fast.end(3) == 2 else -1
        # `PUB subject [reply ]`: the next PUB can only continue a run (same subject and reply) if it
        # starts with it, so a publisher with one subject and a new reply each time never tries one.
        pub = (subject, reply, size, tail_at, line[: fast.start(3) - pos])
        if len(line) <= _LINE_CACHED:
            lines = self._lines
            if len(lines) >= _LINE_CACHE:
                lines.clear()  # a publisher cycling through many subjects: start over rather than grow
                self._mixable.clear()
            lines[line] = pub
            if reply is None and tail_at >= 0:
                self._mixable[line] = (subject, pub[4], size)
        return pub

    def _run(
        self,
        buf: bytes,
        pos: int,
        start: int,
        stop: int,
        subject: bytes,
        reply: bytes | None,
        size: int,
        lead: bytes,
    ) -> Op | None:
        """A PUBRUN op for the canonical PUBs from `pos` (the first parsed up to `stop`) that share its
        subject and reply, or None when there are fewer than two.

        Frames with the very same control line are verified by strided slices (`_run_length`); others
        one by one. A frame that is incomplete, malformed or over a limit ends the run, and the main
        loop deals with it as usual."""
        # What `replace` turns into `MSG subject sid `: `PUB subject `, or without a reply the whole lead
        # up to the size (`PUB subject  ` from nats-py), so that every frame of the run has that form.
        prefix = lead if reply is None else buf[pos : pos + 5 + len(subject)]
        end = stop + 2
        if not buf.startswith(prefix, end):
            return None
        line = buf[pos:start]
        if buf.startswith(line, end):
            length = end - pos
            count = self._run_guess = _run_length(buf, pos, length, line, self._run_guess)
            end = pos + count * length
            uniform = size
        else:
            count, uniform = 1, size
        nbytes = count * size
        n, match, max_line, max_payload = len(buf), _FAST_PUB.match, self.max_control_line, self.max_payload
        while buf.startswith(prefix, end):
            fast = match(buf, end)
            if fast is None or fast.group(1) != subject or fast.group(2) != reply:
                break
            after = fast.end()
            if after - fast.end(3) != 2 or fast.end(3) - end - 4 > max_line:
                break
            if reply is None and fast.start(3) != end + len(prefix):  # the other spacing: not this run
                break
            one = int(fast.group(3))
            next_end = after + one + 2
            if one > max_payload or next_end > n or buf[next_end - 2] != 13 or buf[next_end - 1] != 10:
                break
            if one != uniform or after - end != start - pos:  # `PUB s 02` after `PUB s 2`: not uniform
                uniform = -1
            count += 1
            nbytes += one
            end = next_end
        if count < 2:
            self._no_run_before = end
            return None
        # A view, not a copy: a publisher with no subscriber costs no copy of its stream at all.
        return (PUBRUN, subject, reply, prefix, memoryview(buf)[pos:end], count, nbytes, uniform)

    def _mix(self, buf: bytes, pos: int, end: int, subject: bytes, size: int, lead: bytes) -> Op | None:
        """A PUBMIX op for the frames from `pos` (the first one parsed up to `end`) whose control lines
        are cached canonical PUB lines without a reply, to at most _MIX_SUBJECTS subjects, each to
        another subject than the frame before it; None for fewer than two frames. One line-cache hit
        per frame; anything else ends the mix."""
        mixable, find, n = self._mixable, buf.find, len(buf)
        subjects, indexes = [subject], {lead: 0}  # the mix's subjects; prefix -> index in `subjects`
        frames, sizes = [0, 0], [size]  # (offset, subject index) per frame; payload bytes per subject
        count, last = 1, lead
        while end < n:
            nl = find(b"\n", end)  # ends the next op's control line, whatever op it is
            got = mixable.get(buf[end : nl + 1])
            if got is None:
                break
            subj, prefix, one = got
            next_end = nl + one + 3
            # The same subject twice: a run starts here, which PUBRUN frames better.
            if prefix == last or next_end > n or buf[next_end - 2] != 13 or buf[next_end - 1] != 10:
                break
            index = indexes.get(prefix)
            if index is None:
                if len(subjects) == _MIX_SUBJECTS:
                    break
                index = indexes[prefix] = len(subjects)
                subjects.append(subj)
                sizes.append(0)
            frames.append(end - pos)
            frames.append(index)
            sizes[index] += one
            last = prefix
            count += 1
            end = next_end
        if count < 2:
            return None
        entries = [(subjects[index], prefix) for prefix, index in indexes.items()]
        return (PUBMIX, entries, memoryview(buf)[pos:end], count, sum(sizes), frames, sizes)

    @staticmethod
    def _skip_name(buf: bytes, pos: int, end: int, kind: int) -> int:
        """Index of the first argument byte: after the op name and its spaces/tabs."""
        i = pos + _NAME_LEN[kind]
        while i < end and buf[i] in _WS:
            i += 1
        return i

    def _pub_args(self, kind: int, args: list[bytes]) -> tuple[Any, ...]:
        """(kind, subject, reply, hdr_size, total_size) from PUB or HPUB arguments."""
        if kind == PUB:
            if len(args) == 2:
                subject, reply, size_field = args[0], None, args[1]
            elif len(args) == 3:
                subject, reply, size_field = args
            else:
                raise errors.BadArguments(f"PUB with {len(args)} arguments")
            size = parse_size(size_field)
            if size < 0:
                raise errors.BadArguments("bad or missing PUB size")
            hdr = 0
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
        if size > self.max_payload:
            raise errors.MaxPayloadExceeded(f"payload of {size} bytes")
        return (kind, subject, reply, hdr, size)

    def _keep_partial(self, buf: bytes, pos: int) -> None:
        """Keep an incomplete control line, failing early on a bad op or an oversized argument part."""
        n = len(buf)
        head = buf[pos : pos + _HEAD].upper()
        kind = _classify(head)
        if kind < 0:
            raise errors.UnknownOperation("unknown op")
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


def _wants_headers(options: dict[str, Any]) -> bool:
    for key, value in options.items():
        if key.lower() == "headers":
            return value is True
    return False


def _decode_json(arg: bytes) -> dict[str, Any]:
    try:
        value = json.loads(arg) if arg else None
    except ValueError:
        raise errors.InvalidJSON("invalid JSON") from None
    if value is None:
        if not arg:
            raise errors.InvalidJSON("missing JSON")
        return {}
    if not isinstance(value, dict):
        raise errors.InvalidJSON("JSON is not an object")
    return value
