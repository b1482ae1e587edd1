"""A 1,000,000-subscription index builds and matches correctly (structured so the answer is known)."""

from __future__ import annotations

import random

from pynatsd.matcher import Sublist
from tests.unit.matcher_oracle import Sub, normalise

A, B = 1000, 900  # literal subjects s.<a>.<b>: 900,000 of them
W = 50_000  # s.*.<b> for b < W and s.<a>.> for a < W: 100,000 wildcard filters


def build() -> tuple[Sublist[Sub], dict[bytes, Sub], dict[int, Sub], dict[int, Sub]]:
    sl: Sublist[Sub] = Sublist(cache=True)
    literal = {}
    for a in range(A):
        for b in range(B):
            s = Sub(b"s.%d.%d" % (a, b))
            literal[s.subject] = s
            sl.insert(s)
    star = {b: Sub(b"s.*.%d" % b) for b in range(W)}
    # Even prefixes subscribe as members of one queue group, across all those patterns.
    full = {a: Sub(b"s.%d.>" % a, b"q" if a % 2 == 0 else None) for a in range(W)}
    for s in star.values():
        sl.insert(s)
    for s in full.values():
        sl.insert(s)
    return sl, literal, star, full


def expected(
    subject: bytes, literal: dict[bytes, Sub], star: dict[int, Sub], full: dict[int, Sub]
) -> tuple[list[int], dict[bytes, list[int]]]:
    tokens = subject.split(b".")
    if b"" in tokens:
        return [], {}
    plain: list[Sub] = []
    queue: list[Sub] = []
    if len(tokens) == 3 and subject in literal:
        plain.append(literal[subject])
    if len(tokens) == 3 and tokens[2].isdigit() and int(tokens[2]) in star:
        plain.append(star[int(tokens[2])])
    if len(tokens) >= 3 and tokens[1].isdigit() and int(tokens[1]) in full:
        s = full[int(tokens[1])]
        (queue if s.queue else plain).append(s)
    return sorted(map(id, plain)), ({b"q": sorted(map(id, queue))} if queue else {})


def test_one_million_subscriptions() -> None:
    sl, literal, star, full = build()
    n = A * B + 2 * W
    assert len(sl) == n
    rng = random.Random(7)
    subjects = [b"s.%d.%d" % (rng.randrange(W + 10), rng.randrange(W + 10)) for _ in range(2000)]
    subjects += [b"s.%d.%d" % (rng.randrange(A), rng.randrange(B)) for _ in range(2000)]
    subjects += [b"s.%d.%d.x" % (rng.randrange(W + 10), rng.randrange(B)) for _ in range(500)]
    subjects += [b"s.*.%d" % rng.randrange(W + 10) for _ in range(200)] + [b"s.1.*", b"s..1", b"s.1."]
    for subject in subjects + subjects[:500]:  # the repeats are cache hits
        assert normalise(sl.match(subject)) == expected(subject, literal, star, full), subject
    # Unsubscribe a third of everything, then check again.
    for a in range(0, A, 3):
        for b in range(B):
            assert sl.remove(literal.pop(b"s.%d.%d" % (a, b)))
    for b in range(0, W, 3):
        assert sl.remove(star.pop(b))
    for a in range(1, W, 3):
        assert sl.remove(full.pop(a))
    assert len(sl) == len(literal) + len(star) + len(full)
    for subject in subjects:
        assert normalise(sl.match(subject)) == expected(subject, literal, star, full), subject
