"""The route parser and encoder (pynatsd.protocol.route): typed ops, split frames, bad input."""

from __future__ import annotations

import pytest

from pynatsd.protocol import errors
from pynatsd.protocol.route import (
    RConnect,
    RErr,
    RInfo,
    RMsg,
    RouteParser,
    RPing,
    RPong,
    RSub,
    RUnsub,
    encode_rmsg,
    encode_rsub,
    encode_runsub,
)

# What nats-server 2.15 wrote on a route in a capture (tests/routes/test_frames.py checks it live).
STREAM = (
    b'INFO {"server_id":"NID","cluster":"C1","route_pool_size":3}\r\n'
    b"PING\r\nPONG\r\n"
    b"RS+ $G foo\r\nRS+ $G bar q1 2\r\nRS- $G foo\r\nRS- $G bar q1\r\n"
    b"RMSG $G foo reply 2\r\nhi\r\n"
    b"RMSG $G bar | q1 q2 2\r\nhq\r\n"
    b"RMSG $G bar + r q1 1\r\nx\r\n"
    b"HMSG $G foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    b"HMSG $G foo + r q1 12 12\r\nNATS/1.0\r\n\r\n\r\n"
    b"-ERR 'Unknown Protocol Operation'\r\n"
)
EXPECTED = [
    RInfo({"server_id": "NID", "cluster": "C1", "route_pool_size": 3}),
    RPing(),
    RPong(),
    RSub(b"$G", b"foo"),
    RSub(b"$G", b"bar", b"q1", 2),
    RUnsub(b"$G", b"foo"),
    RUnsub(b"$G", b"bar", b"q1"),
    RMsg(b"$G", b"foo", b"reply", None, None, b"hi"),
    RMsg(b"$G", b"bar", None, [b"q1", b"q2"], None, b"hq"),
    RMsg(b"$G", b"bar", b"r", [b"q1"], None, b"x"),
    RMsg(b"$G", b"foo", None, None, b"NATS/1.0\r\n\r\n", b"hi"),
    RMsg(b"$G", b"foo", b"r", [b"q1"], b"NATS/1.0\r\n\r\n", b""),
    RErr("Unknown Protocol Operation"),
]


def test_every_op_parses_to_its_typed_value() -> None:
    assert RouteParser().feed(STREAM) == EXPECTED


@pytest.mark.parametrize("step", [1, 2, 3, 7, 64])
def test_split_frames_parse_like_whole_ones(step: int) -> None:
    parser = RouteParser()
    ops = []
    for i in range(0, len(STREAM), step):
        ops += parser.feed(STREAM[i : i + step])
    assert ops == EXPECTED


@pytest.mark.parametrize("step", [5, 64])
@pytest.mark.parametrize("budget", [1, 20, 100])
def test_a_budget_stops_between_ops_and_the_rest_is_taken_again(step: int, budget: int) -> None:
    """`take` (the client parser's contract): ops that begin within `budget` bytes, then where the rest
    begins; the caller hands that rest again (a route reads under the clients' per-turn budget)."""
    parser = RouteParser()
    ops = []
    calls = 0
    for i in range(0, len(STREAM), step):
        data, start = STREAM[: i + step], i
        while start < len(data):
            stop = parser.take(data, start, budget)
            assert start < stop <= len(data)
            start = stop
            calls += 1
            ops += parser.feed(b"")  # what the recorder collected
    assert ops == EXPECTED
    if budget == 1:
        assert calls >= len(EXPECTED)  # one op per call at most


def test_connect_and_case_insensitive_names() -> None:
    ops = RouteParser().feed(b'CONNECT {"name":"X","cluster":"C"}\r\nping\r\nrs+ $G a\r\n')
    assert ops == [RConnect({"name": "X", "cluster": "C"}), RPing(), RSub(b"$G", b"a")]


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"PUB foo 1\r\nx\r\n", errors.UnknownOperation),
        (b"RS+ $G\r\n", errors.BadArguments),
        (b"RS+ $G foo q\r\n", errors.BadArguments),
        (b"RS+ $G foo q 0\r\n", errors.BadArguments),
        (b"RS- $G\r\n", errors.BadArguments),
        (b"RMSG $G foo\r\n", errors.BadArguments),
        (b"RMSG $G foo x\r\n", errors.BadArguments),
        (b"RMSG $G foo * r q 1\r\n", errors.BadArguments),
        (b"HMSG $G foo 5 3\r\n", errors.BadArguments),
        (b"RMSG $G foo 2\r\nhiXX", errors.BadArguments),
        (b"INFO {bad\r\n", errors.InvalidJSON),
        (b"CONNECT []\r\n", errors.InvalidJSON),
    ],
)
def test_bad_input_is_a_protocol_error_and_kills_the_parser(data: bytes, error: type[Exception]) -> None:
    parser = RouteParser()
    with pytest.raises(error):
        parser.feed(data)
    assert parser.dead
    with pytest.raises(errors.ProtocolError):
        parser.feed(b"PING\r\n")


def test_control_line_and_payload_are_bounded() -> None:
    with pytest.raises(errors.MaxControlLineExceeded):
        RouteParser(max_control_line=64).feed(b"RS+ $G " + b"a" * 200)
    with pytest.raises(errors.MaxPayloadExceeded):
        RouteParser(max_payload=10).feed(b"RMSG $G foo 11\r\n")


def test_encoder_round_trips_through_the_parser() -> None:
    frames = b"".join(
        [
            encode_rsub(b"$G", b"foo"),
            encode_rsub(b"ACC", b"bar.*", b"workers", 3),
            encode_runsub(b"$G", b"foo"),
            encode_runsub(b"ACC", b"bar.*", b"workers"),
            encode_rmsg(b"$G", b"foo", None, None, None, b"payload"),
            encode_rmsg(b"$G", b"foo", b"_INBOX.1", [b"q1", b"q2"], None, b""),
            encode_rmsg(b"$G", b"foo", None, [b"q1"], b"NATS/1.0\r\nA: b\r\n\r\n", b"x"),
        ]
    )
    assert RouteParser().feed(frames) == [
        RSub(b"$G", b"foo"),
        RSub(b"ACC", b"bar.*", b"workers", 3),
        RUnsub(b"$G", b"foo"),
        RUnsub(b"ACC", b"bar.*", b"workers"),
        RMsg(b"$G", b"foo", None, None, None, b"payload"),
        RMsg(b"$G", b"foo", b"_INBOX.1", [b"q1", b"q2"], None, b""),
        RMsg(b"$G", b"foo", None, [b"q1"], b"NATS/1.0\r\nA: b\r\n\r\n", b"x"),
    ]


def test_encoder_writes_nats_server_bytes() -> None:
    assert encode_rsub(b"$G", b"bar", b"q1", 2) == b"RS+ $G bar q1 2\r\n"
    assert encode_runsub(b"$G", b"bar", b"q1") == b"RS- $G bar q1\r\n"
    assert encode_rmsg(b"$G", b"foo", b"r", [b"q1"], None, b"x") == b"RMSG $G foo + r q1 1\r\nx\r\n"
    assert encode_rmsg(b"$G", b"foo", None, [b"q1"], None, b"x") == b"RMSG $G foo | q1 1\r\nx\r\n"
    assert encode_rmsg(b"$G", b"f", None, None, b"NATS/1.0\r\n\r\n", b"hi") == (
        b"HMSG $G f 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    )


def test_a_pinned_route_s_ops_name_no_account() -> None:
    """On a route pinned to an account (nats-server's dedicated route), RS+/RS-/RMSG/HMSG carry no account:
    the parser gives them the pinned one, and the encoders leave an empty account out."""
    parser = RouteParser()
    parser.account = b"SYS"
    pinned = (
        b"RS+ $SYS.REQ.SERVER.PING\r\nRS+ foo q1 3\r\nRS- foo q1\r\nRS- $SYS.REQ.SERVER.PING\r\n"
        b"RMSG foo reply 2\r\nhi\r\nRMSG bar + r q1 1\r\nx\r\nHMSG foo | q1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    )
    ops = [
        RSub(b"SYS", b"$SYS.REQ.SERVER.PING"),
        RSub(b"SYS", b"foo", b"q1", 3),
        RUnsub(b"SYS", b"foo", b"q1"),
        RUnsub(b"SYS", b"$SYS.REQ.SERVER.PING"),
        RMsg(b"SYS", b"foo", b"reply", None, None, b"hi"),
        RMsg(b"SYS", b"bar", b"r", [b"q1"], None, b"x"),
        RMsg(b"SYS", b"foo", None, [b"q1"], b"NATS/1.0\r\n\r\n", b"hi"),
    ]
    assert parser.feed(pinned) == ops
    encoded = (
        encode_rsub(b"", b"$SYS.REQ.SERVER.PING")
        + encode_rsub(b"", b"foo", b"q1", 3)
        + encode_runsub(b"", b"foo", b"q1")
        + encode_runsub(b"", b"$SYS.REQ.SERVER.PING")
        + encode_rmsg(b"", b"foo", b"reply", None, None, b"hi")
        + encode_rmsg(b"", b"bar", b"r", [b"q1"], None, b"x")
        + encode_rmsg(b"", b"foo", None, [b"q1"], b"NATS/1.0\r\n\r\n", b"hi")
    )
    assert encoded == pinned
