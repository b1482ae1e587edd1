"""protocol.Parser: every op whole, one byte at a time, and with trailing bytes (h11's trio); every error."""

from __future__ import annotations

from typing import Any

import pytest

from pynatsd.protocol import errors
from pynatsd.protocol.ops import Connect, Err, HPub, Info, Ok, Op, OpRecorder, Ping, Pong, Pub, Sub, Unsub
from pynatsd.protocol.parser import LINE_CACHE_SIZE, ParsedLine, Parser, parse_size


def pub(subject: bytes, reply: bytes | None, payload: bytes, size: bytes | None = None) -> Pub:
    return Pub(subject, reply, b"%d" % len(payload) if size is None else size, payload)


# (wire bytes, expected ops) for every client op, including the lenient forms nats-server accepts.
VALID = [
    (b"CONNECT {}\r\n", [Connect({})]),
    (b'CONNECT {"verbose":false,"name":"x"}\r\n', [Connect({"verbose": False, "name": "x"})]),
    (b"connect\t{}\n", [Connect({})]),
    (b"CONNECT{}\r\n", [Connect({})]),
    (b"PUB foo 5\r\nhello\r\n", [pub(b"foo", None, b"hello")]),
    (b"PUB foo bar 5\r\nhello\r\n", [pub(b"foo", b"bar", b"hello")]),
    (b"pub\tfoo  \t bar\t5 \r\nhello\r\n", [pub(b"foo", b"bar", b"hello")]),
    (b"PUB foo 0\r\n\r\n", [pub(b"foo", None, b"")]),
    (b"PUB foo 2\nhi\r\n", [pub(b"foo", None, b"hi")]),
    (b"PUB foo 4\r\n\r\n\r\n\r\n", [pub(b"foo", None, b"\r\n\r\n")]),
    (b"Pub foo.* 1\r\nx\r\n", [pub(b"foo.*", None, b"x")]),
    (
        b"HPUB FOO 22 33\r\nNATS/1.0\r\nBar: Baz\r\n\r\nHello NATS!\r\n",
        [HPub(b"FOO", None, b"22 33", b"NATS/1.0\r\nBar: Baz\r\n\r\n", b"Hello NATS!")],
    ),
    (
        b"hpub FOO reply 12 12\r\nNATS/1.0\r\n\r\n\r\n",
        [HPub(b"FOO", b"reply", b"12 12", b"NATS/1.0\r\n\r\n", b"")],
    ),
    (b"SUB foo 1\r\n", [Sub(b"foo", None, b"1")]),
    (b"sub foo.> q 22\r\n", [Sub(b"foo.>", b"q", b"22")]),
    (b"SUB\tfoo\t\tbar  sid \r\n", [Sub(b"foo", b"bar", b"sid")]),
    (b"UNSUB 1\r\n", [Unsub(b"1", None)]),
    (b"unsub 1 10\r\n", [Unsub(b"1", 10)]),
    (b"UNSUB 1 x\r\n", [Unsub(b"1", -1)]),
    (b"PING\r\n", [Ping()]),
    (b"ping\n", [Ping()]),
    (b"PINGxyz junk\r\n", [Ping()]),
    (b"PONG\r\n", [Pong()]),
    (b"+OK\r\n", [Ok()]),
    (b"+ok whatever\n", [Ok()]),
    (b"-ERR 'oops'\r\n", [Err("'oops'")]),
    (b'INFO {"a":1}\r\n', [Info({"a": 1})]),
    (b"CONNECT null\r\n", [Connect({})]),
]


def feed_bytewise(parser: Parser, data: bytes) -> list[Op]:
    ops: list[Op] = []
    for i in range(len(data)):
        chunk = parser.feed(data[i : i + 1])
        if i < len(data) - 1:
            ops.extend(chunk)
        else:
            ops.extend(chunk)
    return ops


@pytest.mark.parametrize(("data", "expected"), VALID)
def test_whole(data: bytes, expected: list[Op]) -> None:
    parser = Parser(headers=True)
    assert parser.feed(data) == expected
    assert parser.buffered == 0


@pytest.mark.parametrize(("data", "expected"), VALID)
def test_byte_by_byte(data: bytes, expected: list[Op]) -> None:
    parser = Parser(headers=True)
    ops: list[Op] = []
    for i in range(len(data)):
        got = parser.feed(data[i : i + 1])
        if i < len(data) - 1:
            assert got == [], f"op completed early at byte {i}"
        ops.extend(got)
    assert ops == expected


@pytest.mark.parametrize(("data", "expected"), VALID)
def test_trailing_bytes_stay_buffered(data: bytes, expected: list[Op]) -> None:
    parser = Parser(headers=True)
    assert parser.feed(data + b"PUB foo 3\r\nab") == expected
    assert parser.buffered > 0
    assert parser.feed(b"c\r\n") == [pub(b"foo", None, b"abc")]


# Every valid op in one stream; a CONNECT without headers would switch HPUB off, so only this one leads.
STREAM = b'CONNECT {"headers":true}\r\n' + b"".join(d for d, ops in VALID if not isinstance(ops[0], Connect))


@pytest.mark.parametrize("split", range(1, len(STREAM)))
def test_every_split_point_of_a_stream(split: int) -> None:
    stream = STREAM
    whole = Parser(headers=True).feed(stream)
    parser = Parser(headers=True)
    assert parser.feed(stream[:split]) + parser.feed(stream[split:]) == whole


def test_connect_negotiates_headers_for_the_rest_of_the_read() -> None:
    ops = Parser().feed(b'CONNECT {"headers":true}\r\nHPUB a 12 12\r\nNATS/1.0\r\n\r\n\r\n')
    assert ops[1] == HPub(b"a", None, b"12 12", b"NATS/1.0\r\n\r\n", b"")
    with pytest.raises(errors.HeadersNotNegotiated):
        Parser(allow_headers=False).feed(b'CONNECT {"headers":true}\r\nHPUB a 12 12\r\n')
    with pytest.raises(errors.HeadersNotNegotiated):
        Parser(headers=True).feed(b"CONNECT {}\r\nHPUB a 12 12\r\n")


def test_many_messages_in_one_read() -> None:
    data = b"PUB a 1\r\nx\r\n" * 1000
    assert Parser().feed(data) == [pub(b"a", None, b"x")] * 1000


def test_sizes_are_reported_as_spelled() -> None:
    # nats-server's MSG repeats the size field as the publisher spelled it.
    assert Parser().feed(b"PUB foo 02\r\nhi\r\n") == [pub(b"foo", None, b"hi", b"02")]
    assert Parser(headers=True).feed(b"HPUB foo 012 12\r\nNATS/1.0\r\n\r\n\r\n") == [
        HPub(b"foo", None, b"012 12", b"NATS/1.0\r\n\r\n", b"")
    ]


def test_large_payload_across_reads_is_gathered() -> None:
    payload = bytes(range(256)) * 1024
    data = b"PUB big %d\r\n" % len(payload) + payload + b"\r\n"
    parser = Parser()
    ops = []
    for i in range(0, len(data), 1000):
        ops += parser.feed(data[i : i + 1000])
    assert ops == [pub(b"big", None, payload)]


# (wire bytes, error class, -ERR text or None for a silent close)
ERRORS = [
    (b"PUB\r\n", errors.UnknownOperation, "Unknown Protocol Operation"),
    (b"PUBX foo 1\r\n", errors.UnknownOperation, "Unknown Protocol Operation"),
    (b" PING\r\n", errors.UnknownOperation, "Unknown Protocol Operation"),
    (b"\r\n", errors.UnknownOperation, "Unknown Protocol Operation"),
    (b"MSG foo 1 1\r\n", errors.UnknownOperation, "Unknown Protocol Operation"),
    (b"XYZ", errors.UnknownOperation, "Unknown Protocol Operation"),
    (b"PUB foo 1\r\nxx\r\n", errors.UnknownOperation, "Unknown Protocol Operation"),
    (b"PUB foo 2\r\nxx\n\n", errors.UnknownOperation, "Unknown Protocol Operation"),
    (b"PUB \r\n", errors.BadArguments, None),
    (b"PUB foo\r\n", errors.BadArguments, None),
    (b"PUB foo bar baz 1\r\n", errors.BadArguments, None),
    (b"PUB foo 1234567890\r\n", errors.BadArguments, None),
    (b"PUB foo -1\r\n", errors.BadArguments, None),
    (b"PUB foo x\r\n", errors.BadArguments, None),
    (b"SUB foo\r\n", errors.BadArguments, None),
    (b"SUB foo 1 2 3\r\n", errors.BadArguments, None),
    (b"UNSUB\r\n", errors.UnknownOperation, "Unknown Protocol Operation"),
    (b"UNSUB \r\n", errors.BadArguments, None),
    (b"UNSUB 1 2 3\r\n", errors.BadArguments, None),
    (b"PUB foo 2000000\r\n", errors.MaxPayloadExceeded, "Maximum Payload Violation"),
    (b"HPUB foo 1 2\r\n", errors.HeadersNotNegotiated, None),
    (b"CONNECT {bad\r\n", errors.InvalidJSON, None),
    (b"CONNECT []\r\n", errors.InvalidJSON, None),
    (b"CONNECT\r\n", errors.InvalidJSON, None),
    (b"INFO {bad}\r\n", errors.InvalidJSON, None),
    (b"SUB " + b"a" * 5000 + b" 1\r\n", errors.MaxControlLineExceeded, "maximum control line exceeded"),
    (b"SUB " + b"a" * 5000, errors.MaxControlLineExceeded, "maximum control line exceeded"),
]


@pytest.mark.parametrize(("data", "error", "text"), ERRORS)
def test_errors_whole_and_bytewise(data: bytes, error: type[errors.ProtocolError], text: str | None) -> None:
    with pytest.raises(error) as info:
        Parser().feed(data)
    assert info.value.err_text == text
    assert info.value.closes
    parser = Parser()
    with pytest.raises(error):
        for i in range(len(data)):
            parser.feed(data[i : i + 1])


@pytest.mark.parametrize(
    ("value", "kind"),
    [(b"true", "bool"), (b'"x"', "string"), (b"[1]", "array"), (b"12", "number"), (b"1.5", "number")],
)
def test_connect_not_an_object_is_logged_as_go_words_it(value: bytes, kind: str) -> None:
    with pytest.raises(errors.InvalidJSON) as info:
        Parser().feed(b"CONNECT " + value + b"\r\n")
    assert info.value.log_text == f"json: cannot unmarshal {kind} into Go value"


def test_hpub_size_rules() -> None:
    for bad in (b"HPUB foo 3 2\r\n", b"HPUB foo x 2\r\n", b"HPUB foo 1\r\n", b"HPUB a b c d e\r\n"):
        with pytest.raises(errors.BadArguments):
            Parser(headers=True).feed(bad)
    with pytest.raises(errors.MaxPayloadExceeded):
        Parser(headers=True, max_payload=10).feed(b"HPUB foo 5 11\r\n")


def test_control_line_limit_counts_arguments_only() -> None:
    ok = b"SUB " + b"a" * 4090 + b" 1\r\n"  # 4092 bytes of arguments: accepted, as nats-server does
    assert isinstance(Parser().feed(ok)[0], Sub)
    assert isinstance(Parser(max_control_line=10).feed(b"SUB abcdef 1\r\n")[0], Sub)
    with pytest.raises(errors.MaxControlLineExceeded):
        Parser(max_control_line=10).feed(b"SUB abcdefghi 1\r\n")


def test_partial_line_cannot_grow_past_the_limit() -> None:
    parser = Parser(max_control_line=100)
    parser.feed(b"PUB ")
    with pytest.raises(errors.MaxControlLineExceeded):
        for _ in range(200):
            parser.feed(b"a")


def test_ping_line_garbage_is_not_buffered() -> None:
    parser = Parser()
    for _ in range(100):
        assert parser.feed(b"x" * 1000 if parser.buffered else b"PING" + b"x" * 1000) == []
    assert parser.buffered <= 8
    assert parser.feed(b"\r\n") == [Ping()]


def test_ops_before_an_error_are_returned() -> None:
    with pytest.raises(errors.UnknownOperation) as info:
        Parser().feed(b"SUB foo 1\r\nPING\r\nBOGUS\r\n")
    assert info.value.ops == [Sub(b"foo", None, b"1"), Ping()]


def test_parser_is_dead_after_an_error() -> None:
    parser = Parser()
    with pytest.raises(errors.ProtocolError):
        parser.feed(b"BAD\r\n")
    with pytest.raises(errors.ProtocolError):
        parser.feed(b"PING\r\n")


def test_expect_connect_rejects_other_first_ops() -> None:
    with pytest.raises(errors.AuthorizationViolation) as info:
        Parser(expect_connect=True).feed(b"PING\r\n")
    assert info.value.err_text == "Authorization Violation"
    parser = Parser(expect_connect=True)
    assert parser.feed(b"CONNECT {}\r\nPING\r\n") == [Connect({}), Ping()]


def test_vertical_tab_is_not_a_separator() -> None:
    # nats-server splits arguments on space, tab, CR and LF only.
    assert Parser().feed(b"SUB a\x0bb 1\r\n") == [Sub(b"a\x0bb", None, b"1")]


def test_parse_size() -> None:
    assert parse_size(b"0") == 0
    assert parse_size(b"999999999") == 999999999
    assert parse_size(b"1234567890") == -1
    assert parse_size(b"") == -1
    assert parse_size(b"1a") == -1
    assert parse_size(b"+1") == -1


def test_cached_pub_lines_parse_as_the_first_time_and_stay_bounded() -> None:
    # Each control line is parsed once and then served from a per-connection cache: across many reads,
    # with more distinct lines than the cache holds and with lines too long to cache, every op is the same.
    parser = Parser()
    lines = [
        (b"s.%d" % i, b"r.%d" % i if i % 3 else None, b"x" * (i % 7)) for i in range(LINE_CACHE_SIZE + 100)
    ]
    lines.append((b"long." + b"a" * 200, None, b"hi"))
    stream = b"".join(b"PUB %s %s%d\r\n%s\r\n" % (s, r + b" " if r else b"", len(p), p) for s, r, p in lines)
    expected = [pub(s, r, p) for s, r, p in lines]
    for _ in range(3):
        assert parser.feed(stream) == expected
        assert len(parser._lines) <= LINE_CACHE_SIZE
    assert not any(len(line) > 128 for line in parser._lines)


def hpub(subject: bytes, reply: bytes | None, headers: bytes, payload: bytes) -> HPub:
    return HPub(subject, reply, b"%d %d" % (len(headers), len(headers) + len(payload)), headers, payload)


def hpub_wire(op: HPub) -> bytes:
    reply = op.reply + b" " if op.reply else b""
    return b"HPUB %s %s%s\r\n%s%s\r\n" % (op.subject, reply, op.sizes, op.headers, op.payload)


def test_hpub_lines_parse_the_same_cached_or_not() -> None:
    # The JetStream publisher's shapes: an ack inbox per message (nats-py, nats.go), one inbox for all (the
    # Spark sink), no reply; interleaved with PUBs. Whole, again (from the cache) and byte by byte: the same.
    ops: list[Op] = []
    for i in range(300):
        headers = b"NATS/1.0\r\nNats-Msg-Id: id-%d\r\n\r\n" % i
        ops.append(hpub(b"orders", b"_INBOX.a.%d" % i, headers, b"x" * (i % 5)))
        ops.append(hpub(b"orders", b"_INBOX.acks", headers, b"y" * (i % 3)))
        ops.append(hpub(b"events.%d" % (i % 7), None, headers, b""))
        ops.append(pub(b"plain", None, b"z"))
    stream = b"".join(hpub_wire(op) if isinstance(op, HPub) else b"PUB plain 1\r\nz\r\n" for op in ops)
    parser = Parser(headers=True)
    assert parser.feed(stream) == ops
    assert parser.feed(stream) == ops
    assert feed_bytewise(Parser(headers=True), stream) == ops
    cached = b"".join(parser._lines)
    # A line whose reply inbox is its own is never cached (it never comes back); a repeated one is.
    assert b"_INBOX.a." not in cached
    for op in ops[-3:-1]:  # the last one with the shared inbox, and the last one without a reply
        assert isinstance(op, HPub)
        assert hpub_wire(op).split(b"\n")[0] + b"\n" in parser._lines


def test_a_shared_line_cache_keeps_each_parser_header_rule() -> None:
    # An HPUB line cached for a client that negotiated headers is still refused to one that did not, and
    # still meets each client's own payload limit.
    shared: dict[bytes, ParsedLine] = {}
    data = hpub_wire(hpub(b"a", None, b"NATS/1.0\r\n\r\n", b"x" * 16))
    assert (
        Parser(headers=True, line_cache=shared).feed(data * 2)
        == [hpub(b"a", None, b"NATS/1.0\r\n\r\n", b"x" * 16)] * 2
    )
    assert shared
    with pytest.raises(errors.HeadersNotNegotiated):
        Parser(line_cache=shared).feed(data)
    with pytest.raises(errors.MaxPayloadExceeded):
        Parser(headers=True, max_payload=8, line_cache=shared).feed(data)
    with pytest.raises(errors.UnknownOperation):  # the cached line's payload is still checked
        Parser(headers=True, line_cache=shared).feed(data.replace(b"x\r\n", b"xX\r\n"))


def test_cached_pub_line_still_checks_its_payload() -> None:
    parser = Parser()
    assert parser.feed(b"PUB a 2\r\nhi\r\n") == [pub(b"a", None, b"hi")]
    with pytest.raises(errors.UnknownOperation):
        parser.feed(b"PUB a 2\r\nhiX\r\n")


def take_all(parser: Parser, data: bytes, budget: int) -> tuple[list[Op], list[int]]:
    """Hand `data` to `take` again and again from where it stopped, as a connection does turn by turn."""
    ops: list[Op] = []
    stops: list[int] = []
    start = 0
    while True:
        start = parser.take(data, start, budget)
        ops.extend(parser.feed(b""))  # the recorder's ops (feeding nothing parses nothing)
        stops.append(start)
        if start >= len(data):
            return ops, stops


@pytest.mark.parametrize("budget", [1, 7, 20, 64, 1000])
def test_take_stops_between_ops_and_resumes_where_it_stopped(budget: int) -> None:
    whole = Parser(headers=True).feed(STREAM)
    ops, stops = take_all(Parser(headers=True), STREAM, budget)
    assert ops == whole
    starts = {0}
    for data, _ in VALID:  # every stop is the start of an op of STREAM (or its end)
        at = STREAM.find(data)
        if at >= 0:
            starts.add(at)
    assert all(stop in starts or stop == len(STREAM) for stop in stops)
    if budget < len(STREAM) // 2:
        assert len(stops) > 1


def test_take_resumes_a_line_cut_by_the_last_read() -> None:
    data = b"PUB foo 2\r\nhi\r\nPUB bar 2\r\nyo\r\nPING\r\n"
    parser = Parser()
    assert parser.take(data[:20], 0, 0) == 20  # `PUB b` kept inside the parser
    assert parser.feed(b"") == [pub(b"foo", None, b"hi")]
    rest = b"xx" + data[20:]  # the next read, from offset 2
    stop = parser.take(rest, 2, 1)  # the cut line completes: its op, then the budget is spent
    assert parser.feed(b"") == [pub(b"bar", None, b"yo")]
    assert rest[stop:] == b"PING\r\n"
    assert parser.take(rest, stop, 1) == len(rest)
    assert parser.feed(b"") == [Ping()]


def test_take_returns_at_a_pause_and_takes_nothing_until_resume() -> None:
    class Pausing(OpRecorder):  # a slow CONNECT check: the ops after it wait
        def __init__(self, parser: Parser) -> None:
            super().__init__()
            self.parser = parser

        def on_connect(self, options: dict[str, Any]) -> None:
            super().on_connect(options)
            self.parser.pause()

    parser = Parser()
    handler = Pausing(parser)
    parser.set_handler(handler)
    data = b"CONNECT {}\r\nPING\r\n"
    stop = parser.take(data, 0, 0)
    assert data[stop:] == b"PING\r\n" and handler.take() == [Connect({})]
    assert parser.take(data, stop, 0) == stop
    parser.resume()
    assert parser.take(data, stop, 0) == len(data) and handler.take() == [Ping()]


def test_a_shared_line_cache_keeps_each_parser_payload_limit() -> None:
    # The server gives every connection one line cache; a line cached by a client allowed 1 MiB must not
    # let a client limited to 8 bytes (a JWT user's `payload`) publish 16.
    shared: dict[bytes, ParsedLine] = {}
    data = b"PUB a 16\r\n" + b"x" * 16 + b"\r\n"
    assert Parser(line_cache=shared).feed(data * 2) == [pub(b"a", None, b"x" * 16)] * 2
    with pytest.raises(errors.MaxPayloadExceeded):
        Parser(max_payload=8, line_cache=shared).feed(data)


@pytest.mark.parametrize("lengths", [(1, 1, 2, 1), (2, 3, 2, 2, 3), (3, 3, 1, 3, 3, 1)])
def test_lines_of_varying_length_parse_as_one_by_one(lengths: tuple[int, ...]) -> None:
    # The parser first tries a line as long as the last PUB line: any mix of lengths parses the same.
    subjects = [b"s" * n for n in lengths]
    stream = b"".join(b"PUB %s 2\r\nhi\r\nPUB %s r 1\r\n\n\r\n" % (s, s) for s in subjects)
    expected = [op for s in subjects for op in (pub(s, None, b"hi"), pub(s, b"r", b"\n"))]
    parser = Parser()
    assert parser.feed(stream) == expected
    assert parser.feed(stream) == expected  # now from the cache
    assert feed_bytewise(Parser(), stream) == expected
