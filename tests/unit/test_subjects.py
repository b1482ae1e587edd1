"""pynatsd.protocol.subjects against a token-by-token oracle of nats-server's rules."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pynatsd.protocol.subjects import is_literal_subject, is_valid_queue, is_valid_subject

PIECES = [b"a", b"foo", b"*", b">", b".", b" ", b"\t", b"b*", b">x", b"\x0c", b"\xc3\xa9"]


def oracle_valid(subject: bytes) -> bool:
    if not subject or any(ch in subject for ch in (b" ", b"\t", b"\r", b"\n", b"\x0c")):
        return False
    tokens = subject.split(b".")
    return all(tokens) and all(t != b">" for t in tokens[:-1])


def oracle_literal(subject: bytes) -> bool:
    return oracle_valid(subject) and all(t not in (b"*", b">") for t in subject.split(b"."))


@given(st.lists(st.sampled_from(PIECES), max_size=8).map(b"".join))
def test_subject_rules_match_oracle(subject: bytes) -> None:
    assert is_valid_subject(subject) == oracle_valid(subject)
    assert is_literal_subject(subject) == oracle_literal(subject)


@given(st.binary(max_size=12))
def test_arbitrary_bytes(subject: bytes) -> None:
    assert is_valid_subject(subject) == oracle_valid(subject)
    assert is_literal_subject(subject) == oracle_literal(subject)


def test_queue_names() -> None:
    assert is_valid_queue(b"workers") and is_valid_queue(b"a.b*>")
    assert not is_valid_queue(b"") and not is_valid_queue(b"a b")
