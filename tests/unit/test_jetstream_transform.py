"""pynatsd/jetstream/transform.py without servers: the outputs and refusals that
tests/jetstream/test_republish.py checks against nats-server, pinned for a fast run."""

from __future__ import annotations

import pytest

from pynatsd.jetstream.transform import SubjectTransform, TransformError, validate_mapping

SUBJECT = b"f.abcdefghij.-x--y-z-"
BAD = "invalid mapping destination: "


@pytest.mark.parametrize(
    ("destination", "expected"),
    [
        (b"d.{{wildcard(2)}}.{{wildcard(1)}}", b"d.-x--y-z-.abcdefghij"),
        (b"d.$2.$1", b"d.-x--y-z-.abcdefghij"),
        (b"d.{{partition(7,1,2)}}", b"d.5"),
        (b"d.{{splitFromLeft(1,2)}}", b"d.ab.cdefghij"),
        (b"d.{{splitFromRight(1,2)}}", b"d.abcdefgh.ij"),
        (b"d.{{sliceFromLeft(1,4)}}", b"d.abcd.efgh.ij"),
        (b"d.{{sliceFromRight(1,4)}}", b"d.ab.cdef.ghij"),
        (b"d.{{split(2,-)}}", b"d.x.y.z"),
        (b"d.{{right(1,3)}}", b"d.hij"),
        (b"d.{{left(1,3)}}", b"d.abc"),
        (b"d.{{SplitFromLeft( 1 , 9 )}}.$2", b"d.abcdefghi.j.-x--y-z-"),
        (b"d.{{random(1)}}", b"d.0"),
    ],
)
def test_mapping_functions(destination: bytes, expected: bytes) -> None:
    assert SubjectTransform(b"f.*.*", destination).match(SUBJECT) == expected


def test_full_wildcard_tail_and_no_match() -> None:
    tr = SubjectTransform(b"*.>", b"{{wildcard(1)}}.x.>")
    assert tr.match(b"a.b.c") == b"a.x.b.c"
    assert SubjectTransform(b"foo.*", b"bar.$1").match(b"baz.q") is None


@pytest.mark.parametrize(
    ("source", "destination", "error"),
    [
        (b"c.*", b"x.{{nope(1)}}", BAD + "unknown function in {{nope(1)}}"),
        (b"c.*", b"x.{{wildcard(2)}}", BAD + "wildcard index out of range in {{wildcard(2)}}: [2]"),
        (b"c.*", b"x.*", "invalid subject"),
        (b"c.>", b"x", "invalid subject"),
        (b"c.*", b"x.{{wildcard()}}", BAD + "not enough arguments passed to the function in {{wildcard()}}"),
        (b"c.*", b"x..y", BAD + "invalid transform"),
    ],
)  # fmt: skip
def test_refusals_in_nats_server_words(source: bytes, destination: bytes, error: str) -> None:
    with pytest.raises(TransformError) as refused:
        validate_mapping(source, destination)
    assert str(refused.value) == error
