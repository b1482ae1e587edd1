"""pynatsd.protocol.encoder and pynatsd.protocol.connect."""

from __future__ import annotations

import json

import pytest

from pynatsd.protocol import encoder, errors
from pynatsd.protocol.connect import parse_connect
from pynatsd.protocol.subjects import is_literal_subject, is_valid_subject


def test_info_has_space_before_crlf_and_go_escapes() -> None:
    data = encoder.encode_info({"server_name": "a<b>&c", "n": 1})
    assert data == b'INFO {"server_name":"a\\u003cb\\u003e\\u0026c","n":1} \r\n'
    assert json.loads(data[5:-3]) == {"server_name": "a<b>&c", "n": 1}


def test_err_and_constants() -> None:
    assert encoder.encode_err("Invalid Subject") == b"-ERR 'Invalid Subject'\r\n"
    assert (encoder.PING, encoder.PONG, encoder.OK) == (b"PING\r\n", b"PONG\r\n", b"+OK\r\n")


def test_msg_frames() -> None:
    assert encoder.encode_msg(b"foo", b"1", None, b"hi") == b"MSG foo 1 2\r\nhi\r\n"
    assert encoder.encode_msg(b"foo", b"1", b"r", b"") == b"MSG foo 1 r 0\r\n\r\n"
    hdr = b"NATS/1.0\r\nA: b\r\n\r\n"
    assert encoder.encode_hmsg(b"foo", b"9", b"r", hdr, b"xy") == b"HMSG foo 9 r 18 20\r\n" + hdr + b"xy\r\n"


def test_no_responders_headers_length() -> None:
    # nats-server 2.12+: L = 32 + len(subject)
    assert len(encoder.no_responders_headers(b"foo")) == 35


def test_connect_defaults_and_case_insensitive_keys() -> None:
    opts = parse_connect({})
    assert (opts.verbose, opts.pedantic, opts.echo, opts.headers, opts.protocol) == (
        True,
        True,
        True,
        False,
        0,
    )
    opts = parse_connect({"Verbose": False, "ECHO": False, "headers": True, "pass": "pw", "protocol": 1})
    assert (opts.verbose, opts.echo, opts.headers, opts.password, opts.protocol) == (
        False,
        False,
        True,
        "pw",
        1,
    )
    assert parse_connect({"headers": True}, server_headers=False).headers is False


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ({"protocol": 2}, errors.InvalidClientProtocol),
        ({"protocol": -1}, errors.InvalidClientProtocol),
        ({"no_responders": True}, errors.NoRespondersRequiresHeaders),
        ({"verbose": "yes"}, errors.InvalidJSON),
        ({"name": 5}, errors.InvalidJSON),
        ({"protocol": "1"}, errors.InvalidJSON),
    ],
)
def test_connect_rejections(raw: dict[str, object], error: type[errors.ProtocolError]) -> None:
    with pytest.raises(error):
        parse_connect(raw)


def test_subject_rules() -> None:
    for good in (b"foo", b"foo.bar", b"foo.*", b">", b"foo.>", b"foo*", b"a>b", b"$SYS.x"):
        assert is_valid_subject(good)
    for bad in (b"", b".foo", b"foo.", b"foo..bar", b"foo.>.bar", b"fo o", b"a\tb"):
        assert not is_valid_subject(bad)
    assert is_literal_subject(b"foo.bar") and is_literal_subject(b"foo*")
    assert not is_literal_subject(b"foo.*") and not is_literal_subject(b"foo.>")


def test_permission_texts_quote_like_go() -> None:
    assert errors.publish_violation("foo") == 'Permissions Violation for Publish to "foo"'
    assert errors.subscribe_violation("a", "_sys_") == (
        'Permissions Violation for Subscription to "a" using queue "_sys_"'
    )
    assert errors.quote('a"b\n') == '"a\\"b\\n"'
