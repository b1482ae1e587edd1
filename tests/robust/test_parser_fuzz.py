"""Property-based fuzzing of pynatsd.protocol.parser.Parser: only ProtocolError escapes, splits never matter,
and buffering stays within max_control_line + max_payload + framing."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pynatsd.protocol.errors import ProtocolError
from pynatsd.protocol.parser import Parser

MAX_CONTROL_LINE = 64
MAX_PAYLOAD = 128
# Framing slack: the CRLF after a payload and an op name with its whitespace before the arguments.
SLACK = 16

VALID_FRAMES = [
    b'CONNECT {"verbose":false,"headers":true}\r\n',
    b"PUB foo 3\r\nabc\r\n",
    b"PUB foo.bar reply 0\r\n\r\n",
    b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
    b"SUB foo 1\r\n",
    b"SUB foo.* q 2\r\n",
    b"UNSUB 1 5\r\n",
    b"UNSUB 2\r\n",
    b"PING\r\n",
    b"PONG\r\n",
    b"ping\r\n",
    b"pub x 1\r\nz\r\n",
]

settings.register_profile(
    "robust", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _new() -> Parser:
    return Parser(max_control_line=MAX_CONTROL_LINE, max_payload=MAX_PAYLOAD)


def _run(chunks: list[bytes]) -> tuple[list[Any], str | None]:
    """Feed chunks; return all ops and the error class name (None if no error). Checks the buffer bound."""
    parser = _new()
    ops: list[Any] = []
    for chunk in chunks:
        try:
            ops.extend(parser.feed(chunk))
        except ProtocolError as err:
            ops.extend(getattr(err, "ops", []) or [])
            return ops, type(err).__name__
        assert parser.buffered <= MAX_CONTROL_LINE + MAX_PAYLOAD + SLACK, parser.buffered
    return ops, None


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in points:
        out.append(data[prev:p])
        prev = p
    out.append(data[prev:])
    return out


frames = st.lists(st.sampled_from(VALID_FRAMES), min_size=1, max_size=12)


@settings(settings.get_profile("robust"))
@given(st.binary(max_size=600))
def test_random_bytes_only_raise_protocol_errors(data: bytes) -> None:
    _run([data])


@settings(settings.get_profile("robust"))
@given(frames, st.lists(st.integers(min_value=0, max_value=10_000), max_size=20))
def test_any_split_of_valid_stream_equals_whole(parts: list[bytes], cuts: list[int]) -> None:
    data = VALID_FRAMES[0] + b"".join(parts)  # CONNECT first so HPUB is negotiated
    whole = _run([data])
    assert whole[1] is None
    assert _run(_split(data, cuts)) == whole
    assert _run([bytes([b]) for b in data]) == whole


@settings(settings.get_profile("robust"))
@given(
    frames,
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=10_000), st.integers(0, 255)), min_size=1, max_size=6
    ),
    st.lists(st.integers(min_value=0, max_value=10_000), max_size=20),
)
def test_mutated_frames_split_invariant(
    parts: list[bytes], mutations: list[tuple[int, int]], cuts: list[int]
) -> None:
    data = bytearray(VALID_FRAMES[0] + b"".join(parts))
    for pos, byte in mutations:
        data[pos % len(data)] = byte
    mutated = bytes(data)
    whole = _run([mutated])
    assert _run(_split(mutated, cuts)) == whole


@settings(settings.get_profile("robust"))
@given(st.integers(min_value=MAX_CONTROL_LINE + 1, max_value=5000), st.integers(1, 50))
def test_oversized_control_line_never_buffered(length: int, step: int) -> None:
    data = b"SUB " + b"a" * length
    ops, err = _run([data[i : i + step] for i in range(0, len(data), step)])
    assert err is not None and not ops


@settings(settings.get_profile("robust"))
@given(st.integers(min_value=MAX_PAYLOAD + 1, max_value=10_000))
def test_oversized_payload_rejected(size: int) -> None:
    ops, err = _run([f"PUB foo {size}\r\n".encode() + b"x" * size + b"\r\n"])
    assert err is not None and not ops
