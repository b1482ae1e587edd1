"""The sid map (pynatsd.broker.sids): compact keys that spell back byte-exact, list or dict alike."""

from __future__ import annotations

import random

import pytest

from pynatsd.broker.delivery import Client, Subscription, sid_bytes
from pynatsd.broker.sids import SidMap, sid_key


@pytest.mark.parametrize(
    ("sid", "key"),
    [
        (b"0", 0),
        (b"7", 7),
        (b"256", 256),
        (b"123456789", 123456789),
        (b"9" * 18, int("9" * 18)),
        (b"9" * 19, b"9" * 19),  # past 18 digits: kept as bytes
        (b"01", b"01"),
        (b"00", b"00"),
        (b"+1", b"+1"),
        (b"-1", b"-1"),
        (b"1_0", b"1_0"),
        (b" 1", b" 1"),
        (b"a1", b"a1"),
        ("\u0663".encode(), "\u0663".encode()),
    ],
)
def test_key_is_int_only_for_canonical_decimals(sid: bytes, key: bytes | int) -> None:
    assert sid_key(sid) == key
    assert type(sid_key(sid)) is type(key)


def _sub(client: Client, sid: bytes) -> Subscription:
    return Subscription(client, b"s." + sid, None, sid)


def test_map_against_a_dict_under_random_churn() -> None:
    """Dense, sparse and non-decimal sids through adds and removes (lists grown, holes, back to a
    dict): the map agrees with a plain dict of bytes at every step, and every sid spells back as given."""
    rng = random.Random(17)
    client = Client()
    sids = SidMap()
    model: dict[bytes, Subscription] = {}
    spellings = (
        [b"%d" % i for i in range(300)] + [b"0%d" % i for i in range(20)] + [b"x%d" % i for i in range(20)]
    )
    spellings += [b"%d" % rng.randrange(10**9) for _ in range(50)]
    for _ in range(20000):
        sid = rng.choice(spellings)
        if sid in model and rng.random() < 0.6:
            sub = model.pop(sid)
            assert sids.remove(sub)
            assert not sids.remove(sub)  # already gone
        elif sid not in model:
            assert sids.get(sid) is None
            sub = _sub(client, sid)
            sids.add(sub)
            model[sid] = sub
        assert len(sids) == len(model)
    for sid, sub in model.items():
        assert sids.get(sid) is sub
        assert sid_bytes(sub) == sid
    assert sorted(map(id, sids.values())) == sorted(map(id, model.values()))


def test_remove_takes_only_the_subscription_under_its_sid() -> None:
    client = Client()
    sids = SidMap()
    first = _sub(client, b"5")
    sids.add(first)
    stranger = _sub(client, b"5")  # same sid, never added
    assert not sids.remove(stranger)
    assert sids.get(b"5") is first


def test_a_delivered_sid_still_removes() -> None:
    """delivery.deliver spells an int sid out as bytes at the first message; the map still finds it."""
    client = Client()
    sids = SidMap()
    sub = _sub(client, b"42")
    sids.add(sub)
    assert sub.sid == 42
    sub.sid = sid_bytes(sub)
    assert sids.get(b"42") is sub
    assert sids.remove(sub)
    assert len(sids) == 0


def test_holes_move_the_few_left_to_the_dict() -> None:
    client = Client()
    sids = SidMap()
    subs = [_sub(client, b"%d" % i) for i in range(1000)]
    for sub in subs:
        sids.add(sub)
    for sub in subs[:-1]:
        assert sids.remove(sub)
    assert sids._dense == []  # the list went; the last subscription is in the dict
    assert sids.get(b"999") is subs[-1]
    assert list(sids.values()) == [subs[-1]]
