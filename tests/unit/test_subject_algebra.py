"""pynatsd.protocol.subjects, the one subject algebra, held against the sublist's trie.

Filters and subjects are drawn from a small alphabet with the tricky tokens (`a*` and `>x` are literals).
Overlap and subset are checked by brute force over every literal subject built from the two filters'
literal tokens plus one fresh token, up to one token longer than the longer filter: any other token
behaves as the fresh one and no longer subject decides anything new, so the brute force is exhaustive,
and which filters receive a subject is asked of a Sublist, not of the algebra.
"""

from __future__ import annotations

from itertools import product
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pynatsd.matcher import Sublist
from pynatsd.protocol.subjects import (
    FWC,
    PWC,
    has_wildcard,
    is_literal_subject,
    is_valid_subject,
    matches,
    matches_wildcards_literally,
    overlap,
    subset,
)
from tests.unit.matcher_oracle import Sub

LITERALS = [b"a", b"b", b"a*", b">x"]
FRESH = b"z"  # in no filter: stands for every token the filters do not name


@st.composite
def filters(draw: Any) -> bytes:
    tokens = draw(st.lists(st.sampled_from([*LITERALS, PWC]), min_size=0, max_size=3))
    if not tokens or draw(st.booleans()):
        tokens.append(FWC)
    return b".".join(tokens)


literals = st.lists(st.sampled_from([*LITERALS, FRESH]), min_size=1, max_size=5).map(b".".join)


class Trie:
    """A Sublist holding one subscription per filter: which filters does it deliver a subject to?"""

    def __init__(self, *filters_: bytes) -> None:
        self.subs = [Sub(f) for f in filters_]
        self.index: Sublist[Sub] = Sublist(cache=False)
        for s in self.subs:
            self.index.insert(s)

    def receivers(self, subject: bytes) -> list[bool]:
        got = {id(s) for s in self.index.match(subject).plain}
        return [id(s) in got for s in self.subs]


def universe(*filters_: bytes) -> list[bytes]:
    """Every literal subject that can tell the filters apart (see the module's docstring)."""
    tokens = sorted({t for f in filters_ for t in f.split(b".") if t not in (PWC, FWC)} | {FRESH})
    longest = max(len(f.split(b".")) for f in filters_) + 1
    return [b".".join(p) for n in range(1, longest + 1) for p in product(tokens, repeat=n)]


def received_by_both(a: bytes, b: bytes) -> list[tuple[bool, bool]]:
    """For each subject of the universe: (a receives it, b receives it), by the trie."""
    trie = Trie(a, b)
    return [(x, y) for x, y in map(trie.receivers, universe(a, b))]


@settings(max_examples=200, derandomize=True)
@given(st.lists(filters(), min_size=1, max_size=4), literals)
def test_matches_agrees_with_the_trie(fs: list[bytes], subject: bytes) -> None:
    assert [matches(f, subject) for f in fs] == Trie(*fs).receivers(subject)


@settings(max_examples=200, derandomize=True)
@given(filters(), filters())
def test_overlap_is_a_subject_both_receive(a: bytes, b: bytes) -> None:
    both = any(x and y for x, y in received_by_both(a, b))
    assert overlap(a, b) is both
    assert overlap(b, a) is both


@settings(max_examples=200, derandomize=True)
@given(filters(), filters())
def test_subset_is_inclusion_of_what_they_receive(inner: bytes, outer: bytes) -> None:
    pairs = received_by_both(inner, outer)
    assert subset(inner, outer) is all(y for x, y in pairs if x)
    assert subset(outer, inner) is all(x for x, y in pairs if y)


@settings(max_examples=200, derandomize=True)
@given(filters(), st.one_of(filters(), literals))
def test_permission_match_reads_subject_wildcards_literally(pattern: bytes, subject: bytes) -> None:
    """The trie looking up a subscription's subject (wildcards and all) is what a permission sublist does;
    it agrees with subset() wherever the subject is covered, and is matches() for a literal subject."""
    (want,) = Trie(pattern).receivers(subject)
    assert matches_wildcards_literally(pattern, subject) is want
    if subset(subject, pattern):
        assert want
    if not has_wildcard(subject):
        assert want is matches(pattern, subject)


def test_the_permission_twist() -> None:
    """Where the literal reading and subset() part: a subscription's `>` is taken by a pattern's `*`."""
    assert matches_wildcards_literally(b"foo.*", b"foo.>") and not subset(b"foo.>", b"foo.*")
    assert matches_wildcards_literally(b"foo.>", b"foo.*") and subset(b"foo.*", b"foo.>")
    assert not matches_wildcards_literally(b"foo.bar", b"foo.*") and overlap(b"foo.bar", b"foo.*")
    assert not matches_wildcards_literally(b"foo.*.x", b"foo.>")


@given(st.lists(st.sampled_from([*LITERALS, PWC, FWC, b"", b"a b"]), min_size=1, max_size=4).map(b".".join))
def test_literal_is_valid_without_wildcard_tokens(subject: bytes) -> None:
    tokens = subject.split(b".")
    assert has_wildcard(subject) is (PWC in tokens or FWC in tokens)
    assert is_literal_subject(subject) is (is_valid_subject(subject) and not has_wildcard(subject))
