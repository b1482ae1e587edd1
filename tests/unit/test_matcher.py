"""Focused tests of every sublist rule (nats-server semantics) and of the public API."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import pynatsd.matcher.sublist
from pynatsd.matcher import InvalidSubjectError, MatchResult, Sublist, SublistStats
from tests.unit.matcher_oracle import Sub, normalise


@pytest.fixture(params=[True, False], ids=["cache", "nocache"])
def sl(request: pytest.FixtureRequest) -> Sublist[Sub]:
    return Sublist(cache=request.param)


def ids(*subs: Sub) -> list[int]:
    return sorted(id(s) for s in subs)


def plain_of(sl: Sublist[Sub], subject: bytes) -> list[int]:
    r = sl.match(subject)
    assert r.groups == ()
    return sorted(id(s) for s in r.plain)


def add(sl: Sublist[Sub], subject: bytes, queue: bytes | None = None) -> Sub:
    s = Sub(subject, queue)
    sl.insert(s)
    return s


@pytest.mark.parametrize(
    "subject",
    [
        b"",
        b".",
        b".foo",
        b"foo.",
        b"foo..bar",
        b"foo.>.bar",
        b">.foo",
        b"foo bar",
        b"foo\tbar",
        b"a\r",
        b"a\nb",
        b"a\fb",
        b"foo.> ",
        b"> .a",
    ],
)
def test_invalid_subjects_rejected(sl: Sublist[Sub], subject: bytes) -> None:
    with pytest.raises(InvalidSubjectError):
        sl.insert(Sub(subject))
    assert len(sl) == 0
    assert sl.generation == 0


@pytest.mark.parametrize(
    "subject", [b"foo", b"foo.bar", b"*", b">", b"foo.*.>", b"foo*", b"a>b", b"*.*", b"f.>"]
)
def test_valid_subjects_accepted(sl: Sublist[Sub], subject: bytes) -> None:
    sl.insert(Sub(subject))
    assert len(sl) == 1


def test_literal_match_is_exact_and_case_sensitive(sl: Sublist[Sub]) -> None:
    a = add(sl, b"foo.bar")
    assert plain_of(sl, b"foo.bar") == ids(a)
    assert plain_of(sl, b"Foo.bar") == []
    assert plain_of(sl, b"foo") == []
    assert plain_of(sl, b"foo.bar.baz") == []


def test_star_matches_exactly_one_token(sl: Sublist[Sub]) -> None:
    a = add(sl, b"foo.*")
    b = add(sl, b"*.bar")
    c = add(sl, b"*")
    assert plain_of(sl, b"foo.bar") == ids(a, b)
    assert plain_of(sl, b"foo") == ids(c)
    assert plain_of(sl, b"foo.bar.baz") == []


def test_gt_matches_one_or_more_tokens(sl: Sublist[Sub]) -> None:
    a = add(sl, b"foo.>")
    b = add(sl, b">")
    assert plain_of(sl, b"foo") == ids(b)
    assert plain_of(sl, b"foo.bar") == ids(a, b)
    assert plain_of(sl, b"foo.bar.baz.qux") == ids(a, b)
    assert plain_of(sl, b"bar.foo") == ids(b)


def test_wildcards_only_as_whole_tokens(sl: Sublist[Sub]) -> None:
    a = add(sl, b"foo*")
    b = add(sl, b"a>b")
    assert plain_of(sl, b"foox") == []
    assert plain_of(sl, b"foo*") == ids(a)
    assert plain_of(sl, b"a>b") == ids(b)
    assert plain_of(sl, b"axb") == []


def test_published_empty_tokens_match_nothing(sl: Sublist[Sub]) -> None:
    add(sl, b">")
    add(sl, b"*.*")
    add(sl, b"foo.*")
    for subject in (b"", b".", b"foo.", b".foo", b"foo..bar", b".."):
        assert sl.match(subject) == MatchResult((), ())


def test_published_wildcard_token_reaches_only_wildcard_subs(sl: Sublist[Sub]) -> None:
    lit = add(sl, b"foo.bar")
    star = add(sl, b"foo.*")
    full = add(sl, b"foo.>")
    assert plain_of(sl, b"foo.*") == ids(star, full)
    assert plain_of(sl, b"foo.>") == ids(star, full)
    assert id(lit) not in plain_of(sl, b"foo.*")


def test_one_entry_per_subscription(sl: Sublist[Sub]) -> None:
    a = add(sl, b"foo.*")
    b = add(sl, b"foo.>")
    c = add(sl, b"foo.bar")
    d = add(sl, b"foo.bar")
    r = sl.match(b"foo.bar")
    assert sorted(id(s) for s in r.plain) == ids(a, b, c, d)
    assert len(r.plain) == 4


def test_inserting_the_same_subscription_twice_is_a_noop(sl: Sublist[Sub]) -> None:
    a = add(sl, b"foo")
    w = add(sl, b"foo.*")
    gen = sl.generation
    sl.insert(a)
    sl.insert(w)
    assert len(sl) == 2
    assert sl.generation == gen
    assert plain_of(sl, b"foo") == ids(a)


def test_queue_groups_across_patterns_form_one_group(sl: Sublist[Sub]) -> None:
    q1 = add(sl, b"foo.bar", b"workers")
    q2 = add(sl, b"foo.*", b"workers")
    q3 = add(sl, b"foo.>", b"workers")
    o1 = add(sl, b"foo.bar", b"other")
    p = add(sl, b"foo.bar")
    plain, groups = normalise(sl.match(b"foo.bar"))
    assert plain == ids(p)
    assert groups == {b"workers": ids(q1, q2, q3), b"other": ids(o1)}
    plain, groups = normalise(sl.match(b"foo.baz"))
    assert plain == []
    assert groups == {b"workers": ids(q2, q3)}


def test_remove(sl: Sublist[Sub]) -> None:
    a = add(sl, b"foo.bar")
    b = add(sl, b"foo.bar")
    w = add(sl, b"foo.*")
    q = add(sl, b"foo.*", b"q")
    assert sl.match(b"foo.bar")  # warm the cache
    assert sl.remove(a)
    assert not sl.remove(a)
    assert normalise(sl.match(b"foo.baz")) == (ids(w), {b"q": ids(q)})
    assert normalise(sl.match(b"foo.bar")) == (ids(b, w), {b"q": ids(q)})
    assert sl.remove(w) and sl.remove(q) and sl.remove(b)
    assert sl.match(b"foo.bar") == MatchResult((), ())
    assert len(sl) == 0
    assert not sl.remove(Sub(b"never.there"))
    assert not sl.remove(Sub(b"never.*"))
    assert not sl.remove(Sub(b"bad..subject"))


def test_remove_prunes_the_trie(sl: Sublist[Sub]) -> None:
    subs = [add(sl, s) for s in (b"a.*.c", b"a.*.>", b"a.b.*", b"*.*.*")]
    for s in subs:
        assert sl.remove(s)
    root = sl._root
    assert root.nodes is None and root.pwc is None and root.fwc is None


def test_generation_and_len(sl: Sublist[Sub]) -> None:
    assert sl.generation == 0 and len(sl) == 0
    a = add(sl, b"a")
    b = add(sl, b"b.*")
    assert sl.generation == 2 and len(sl) == 2
    sl.remove(a)
    assert sl.generation == 3 and len(sl) == 1
    sl.remove(a)
    assert sl.generation == 3
    sl.remove(b)
    assert sl.generation == 4 and len(sl) == 0


def test_subscriptions_iterates_everything(sl: Sublist[Sub]) -> None:
    subs = [
        add(sl, s, q) for s, q in [(b"a", None), (b"a", None), (b"a", b"q"), (b"a.*", None), (b">", b"q")]
    ]
    assert sorted(id(s) for s in sl.subscriptions()) == ids(*subs)


def test_cache_is_invalidated_by_inserts_and_removes() -> None:
    sl: Sublist[Sub] = Sublist(cache=True)
    assert sl.match(b"foo.bar") == MatchResult((), ())
    a = add(sl, b"foo.bar")
    assert plain_of(sl, b"foo.bar") == ids(a)
    w = add(sl, b"foo.*")
    assert plain_of(sl, b"foo.bar") == ids(a, w)
    sl.remove(a)
    assert plain_of(sl, b"foo.bar") == ids(w)
    sl.remove(w)
    assert plain_of(sl, b"foo.bar") == []


def test_cached_result_is_shared_on_hits() -> None:
    sl: Sublist[Sub] = Sublist(cache=True)
    add(sl, b"foo.bar")
    add(sl, b"foo.*")
    assert sl.match(b"foo.bar") is sl.match(b"foo.bar")


def test_stats() -> None:
    sl: Sublist[Sub] = Sublist(cache=True)
    add(sl, b"foo.bar")
    add(sl, b"foo.bar", b"q")
    add(sl, b"foo.bar", b"q")
    w = add(sl, b"foo.*")
    sl.remove(w)
    sl.match(b"foo.bar")  # fan-out 2: one plain, one queue group
    sl.match(b"foo.bar")
    sl.match(b"nothing")
    st = sl.stats()
    assert isinstance(st, SublistStats)
    assert st.num_subscriptions == 3
    assert st.num_inserts == 4 and st.num_removes == 1
    assert st.num_matches == 3
    assert st.num_cache == 2
    assert st.cache_hit_rate == pytest.approx(1 / 3)
    assert st.max_fanout == 2
    assert st.avg_fanout == pytest.approx(1.0)


def test_count_repeats_counts_a_run_as_its_publishes() -> None:
    cached: Sublist[Sub] = Sublist()
    uncached: Sublist[Sub] = Sublist(cache=False)
    for sl in (cached, uncached):
        add(sl, b"foo")
        sl.match(b"foo")
        sl.count_repeats(b"foo", 4)  # a run of 5 publishes, matched once
    assert cached.stats().num_matches == 5 and cached.stats().cache_hit_rate == pytest.approx(4 / 5)
    assert uncached.stats().num_matches == 5 and uncached.stats().cache_hit_rate == 0.0


def test_stats_without_cache() -> None:
    sl: Sublist[Sub] = Sublist(cache=False)
    add(sl, b"foo")
    sl.match(b"foo")
    sl.match(b"foo")
    st = sl.stats()
    assert st.num_cache == 0 and st.cache_hit_rate == 0.0 and st.num_matches == 2


def test_cache_sweep_keeps_results_correct(monkeypatch: pytest.MonkeyPatch) -> None:
    import pynatsd.matcher.sublist

    monkeypatch.setattr(pynatsd.matcher.sublist, "CACHE_MAX", 8)
    monkeypatch.setattr(pynatsd.matcher.sublist, "CACHE_SWEEP", 2)
    sl: Sublist[Sub] = Sublist(cache=True)
    subs = [add(sl, b"s.%d" % i) for i in range(40)]
    for _ in range(3):
        for i, s in enumerate(subs):
            assert plain_of(sl, b"s.%d" % i) == ids(s)
            assert len(sl._cache) <= 8


def test_admission_stops_when_the_cache_does_not_pay_and_resumes() -> None:
    sl: Sublist[Sub] = Sublist(cache=True)
    hot = [add(sl, b"hot.%d" % i) for i in range(10)]
    add(sl, b"hot.*")
    # Publishers cycling through far more distinct subjects than the cache holds: nearly every lookup misses.
    for i in range(20 * pynatsd.matcher.sublist.WINDOW):
        sl.match(b"cold.%d" % i)
    assert sl._admit is False
    frozen = sl.stats().num_cache
    for i in range(2 * pynatsd.matcher.sublist.WINDOW):
        assert sl.match(b"cold.x%d" % i) == MatchResult((), ())
    assert sl.stats().num_cache == frozen, "misses are not admitted while bypassing"
    # The workload turns hot: a probe window re-admits, and the hot subjects are then served from the cache.
    for _ in range(pynatsd.matcher.sublist.PROBE_EVERY + 2):
        for i in range(pynatsd.matcher.sublist.WINDOW):
            sl.match(b"cold.y%d" % i)
        for _ in range(50):
            for i, s in enumerate(hot):
                assert sl.match(b"hot.%d" % i).plain[0] is s
    assert sl._admit is True
    before = sl.stats()
    for _ in range(100):
        for i in range(10):
            sl.match(b"hot.%d" % i)
    after = sl.stats()
    assert after.num_matches - before.num_matches == 1000
    hits = after.cache_hit_rate * after.num_matches - before.cache_hit_rate * before.num_matches
    assert hits == pytest.approx(1000)


def test_ack_subjects_bypass_the_cache_and_its_admission() -> None:
    """JetStream ack replies (unique per message) still reach `$JS.ACK.` subscribers, exactly, but neither
    fill the cache (evicting subjects that repeat) nor count as misses that switch admission off."""
    sl: Sublist[Sub] = Sublist(cache=True)
    acks = add(sl, b"$JS.ACK.S.C.>")
    watcher = add(sl, b"$JS.>")
    deliver = add(sl, b"_INBOX.d")
    hot = [add(sl, b"hot.%d" % i) for i in range(10)]
    n = 5 * pynatsd.matcher.sublist.WINDOW
    for seq in range(1, n + 1):
        ack = b"$JS.ACK.S.C.1.%d.%d.0.0" % (seq, seq)
        assert sorted(plain_of(sl, ack)) == sorted(ids(acks, watcher))
        assert plain_of(sl, b"_INBOX.d") == ids(deliver)
        assert plain_of(sl, b"hot.%d" % (seq % 10)) == ids(hot[seq % 10])
    sl.count_repeats(b"$JS.ACK.S.C.1.1.1.0.0", 4)
    st = sl.stats()
    assert sl._admit is True
    assert st.num_cache == 11, "only the deliver and hot subjects are cached"
    assert st.num_matches == 3 * n + 4
    # 11 first lookups miss; the acks are neither hits nor misses: 2n - 11 hits over all 3n + 4 lookups
    assert st.cache_hit_rate == pytest.approx((2 * n - 11) / (3 * n + 4))


def test_hot_subjects_keep_being_admitted() -> None:
    sl: Sublist[Sub] = Sublist(cache=True)
    add(sl, b"a.>")
    for _ in range(5 * pynatsd.matcher.sublist.WINDOW):
        for i in range(100):
            sl.match(b"a.%d" % i)
    assert sl._admit is True
    assert sl.stats().num_cache == 100


def test_single_literal_child_is_stored_inline_and_collapses_back(sl: Sublist[Sub]) -> None:
    x = add(sl, b"a.b.*")
    root = sl._root
    a = root.nodes
    assert root.tok == b"a" and not isinstance(a, dict)
    y = add(sl, b"a.c.*")
    assert isinstance(a.nodes, dict) and a.tok is None  # type: ignore[union-attr]
    assert normalise(sl.match(b"a.c.z")) == (ids(y), {})
    assert sl.remove(y)
    assert a.tok == b"b" and not isinstance(a.nodes, dict)  # type: ignore[union-attr]
    assert normalise(sl.match(b"a.b.z")) == (ids(x), {})
    assert normalise(sl.match(b"a.c.z")) == ([], {})


def test_public_types() -> None:
    r: MatchResult[Sub] = MatchResult((), ())
    assert r.plain == () and r.groups == () and r == ((), ())
    assert SublistStats._fields == (
        "num_subscriptions",
        "num_cache",
        "num_inserts",
        "num_removes",
        "num_matches",
        "cache_hit_rate",
        "max_fanout",
        "avg_fanout",
    )


def test_interest_notifications_fire_once_for_a_receiving_subscription(sl: Sublist[Sub]) -> None:
    fired: list[str] = []

    def waiter(name: str) -> Callable[[], None]:
        return lambda: fired.append(name)

    a, b, c = waiter("a"), waiter("b"), waiter("c")
    sl.notify_on_interest(b"deliver.one", a)
    sl.notify_on_interest(b"deliver.two", b)
    sl.notify_on_interest(b"deliver.two.more", c)
    add(sl, b"deliver.three")  # receives none of them
    add(sl, b"deliver.*.x")
    add(sl, b"other.>")
    assert fired == []
    add(sl, b"deliver.one")  # a literal subscription: its own subject only
    assert fired == ["a"]
    add(sl, b"deliver.one")  # a notification fires once
    assert fired == ["a"]
    add(sl, b"deliver.*")  # a wildcard one: every awaited subject it receives (not deliver.two.more)
    assert fired == ["a", "b"]
    sl.cancel_notification(b"deliver.two.more", c)
    add(sl, b"deliver.>")
    assert fired == ["a", "b"]
    sl.notify_on_interest(b"deliver.two.more", c)
    sl.notify_on_interest(b"deliver.two.more", a)
    add(sl, b">")
    assert fired == ["a", "b", "c", "a"]
