"""Go's uvarints (pynatsd.base.varint): what binary.Uvarint refuses is refused."""

from __future__ import annotations

import pytest

from pynatsd.base.varint import put_uvarint, read_uvarint


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**32, 2**64 - 1])
def test_round_trip_at_an_offset(value: int) -> None:
    raw = put_uvarint(value)
    assert read_uvarint(b"xy" + raw + b"tail", 2) == (value, 2 + len(raw))


@pytest.mark.parametrize(
    "raw",
    [b"", b"\x80", b"\xff" * 9, b"\xff" * 9 + b"\x02", b"\x80" * 10 + b"\x00"],
    ids=["empty", "cut", "cut-at-ten", "overflow-tenth", "eleven-bytes"],
)
def test_cut_or_overflowing_refused(raw: bytes) -> None:
    with pytest.raises(ValueError):
        read_uvarint(raw)
