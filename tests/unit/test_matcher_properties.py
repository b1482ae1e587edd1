"""Property tests: the sublist against a brute-force oracle, with interleaved insert/remove/match."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

import pynatsd.matcher.sublist
from pynatsd.matcher import InvalidSubjectError, Sublist
from tests.unit.matcher_oracle import Sub, normalise, oracle, pattern_matches

LITERALS = [b"a", b"b", b"c", b"a*", b">x"]
sub_token = st.sampled_from([*LITERALS, b"*"])
pub_token = st.sampled_from([*LITERALS, b"*", b">", b""])


@st.composite
def sub_subjects(draw: Any) -> bytes:
    tokens = draw(st.lists(sub_token, min_size=1, max_size=4))
    if draw(st.booleans()) and draw(st.booleans()):
        tokens.append(b">")
    return b".".join(tokens)


pub_subjects = st.lists(pub_token, min_size=1, max_size=5).map(b".".join)
queues = st.sampled_from([None, None, None, b"q1", b"q2"])


def test_oracle_sanity() -> None:
    assert pattern_matches(b"a.>", b"a.b.c")
    assert not pattern_matches(b"a.>", b"a")
    assert pattern_matches(b"a.*", b"a.*")
    assert not pattern_matches(b"a.b", b"a.*")
    assert not pattern_matches(b">", b"a..b")


class SublistMachine(RuleBasedStateMachine):
    """Drives one Sublist and a plain list of live subscriptions side by side."""

    cache_on = True

    def __init__(self) -> None:
        super().__init__()
        self.sl: Sublist[Sub] = Sublist(cache=self.cache_on)
        self.live: list[Sub] = []
        self.generation = 0

    subs = Bundle("subs")

    @rule(target=subs, subject=sub_subjects(), queue=queues)
    def insert(self, subject: bytes, queue: bytes | None) -> Sub:
        s = Sub(subject, queue)
        self.sl.insert(s)
        self.live.append(s)
        self.generation += 1
        return s

    @rule(s=subs)
    def insert_again(self, s: Sub) -> None:
        before = len(self.sl)
        self.sl.insert(s)
        assert len(self.sl) == before + (0 if s in self.live else 1)
        if s not in self.live:
            self.live.append(s)

    @rule(s=consumes(subs))
    def remove(self, s: Sub) -> None:
        present = s in self.live
        assert self.sl.remove(s) == present
        if present:
            self.live.remove(s)
        assert not self.sl.remove(s)

    @rule(subject=sub_subjects(), queue=queues)
    def remove_unknown(self, subject: bytes, queue: bytes | None) -> None:
        assert not self.sl.remove(Sub(subject, queue))

    @rule(subject=pub_subjects)
    def match(self, subject: bytes) -> None:
        expected = oracle(self.live, subject)
        assert normalise(self.sl.match(subject)) == expected
        # Again: now usually a cache hit.
        assert normalise(self.sl.match(subject)) == expected

    @rule(data=st.data())
    def match_a_subscribed_subject(self, data: Any) -> None:
        literal = [s.subject for s in self.live if b"*" not in s.subject.split(b".")]
        if literal:
            subject = data.draw(st.sampled_from(literal))
            assert normalise(self.sl.match(subject)) == oracle(self.live, subject)

    @invariant()
    def counts(self) -> None:
        assert len(self.sl) == len(self.live)
        assert sorted(map(id, self.sl.subscriptions())) == sorted(map(id, self.live))
        st_ = self.sl.stats()
        assert st_.num_subscriptions == len(self.live)
        assert st_.num_cache <= pynatsd.matcher.sublist.CACHE_MAX


class NoCacheMachine(SublistMachine):
    cache_on = False


class TinyCacheMachine(SublistMachine):
    """A cache small enough that sweeps and admission on/off switches happen all the time."""

    def __init__(self) -> None:
        m = pynatsd.matcher.sublist
        self._saved = (m.CACHE_MAX, m.CACHE_SWEEP, m.WINDOW, m.PROBE_EVERY)
        m.CACHE_MAX, m.CACHE_SWEEP, m.WINDOW, m.PROBE_EVERY = 4, 1, 3, 2
        super().__init__()

    def teardown(self) -> None:
        m = pynatsd.matcher.sublist
        m.CACHE_MAX, m.CACHE_SWEEP, m.WINDOW, m.PROBE_EVERY = self._saved


MACHINE_SETTINGS = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=list(HealthCheck)
)
TestSublistCached = SublistMachine.TestCase
TestSublistCached.settings = MACHINE_SETTINGS
TestSublistUncached = NoCacheMachine.TestCase
TestSublistUncached.settings = MACHINE_SETTINGS
TestSublistTinyCache = TinyCacheMachine.TestCase
TestSublistTinyCache.settings = MACHINE_SETTINGS


@settings(max_examples=300, deadline=None)
@pytest.mark.parametrize("cache", [True, False])
@given(
    subs=st.lists(st.tuples(sub_subjects(), queues), max_size=25),
    subjects=st.lists(pub_subjects, min_size=1, max_size=10),
)
def test_bulk_matches_oracle(
    cache: bool, subs: list[tuple[bytes, bytes | None]], subjects: list[bytes]
) -> None:
    sl: Sublist[Sub] = Sublist(cache=cache)
    live = [Sub(s, q) for s, q in subs]
    for s in live:
        sl.insert(s)
    for subject in subjects + subjects:
        assert normalise(sl.match(subject)) == oracle(live, subject)


@settings(max_examples=300, deadline=None)
@given(subject=st.binary(max_size=12))
def test_insert_validation_matches_the_spec(subject: bytes) -> None:
    tokens = subject.split(b".")
    valid = (
        bool(subject)
        and b"" not in tokens
        and not any(c in subject for c in b" \t\r\n\f")
        and (b">" not in tokens or tokens.index(b">") == len(tokens) - 1)
    )
    sl: Sublist[Sub] = Sublist()
    s = Sub(subject)
    if valid:
        sl.insert(s)
        assert list(sl.subscriptions()) == [s]
        assert sl.remove(s)
    else:
        with pytest.raises(InvalidSubjectError):
            sl.insert(s)
        assert len(sl) == 0
