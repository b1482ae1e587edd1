"""`allow_responses` parsing and the per-connection reply allowance (max and expiry), without sockets."""

from __future__ import annotations

import pytest

from pynatsd.auth import users as auth
from pynatsd.auth.users import Permissions, ResponsePermission
from pynatsd.config.schema import ConfigValueError


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, ResponsePermission(1, 120.0)),
        (False, None),
        ({}, ResponsePermission(1, 120.0)),
        ({"max": 5, "expires": "1m"}, ResponsePermission(5, 60.0)),
        ({"max_msgs": 0, "ttl": "0s"}, ResponsePermission(1, 120.0)),  # 0: the default
        ({"MAX_RESPONSES": -1, "expiration": "-1s"}, ResponsePermission(-1, -1.0)),  # negative: no limit
    ],
)
def test_parse(value: object, expected: ResponsePermission | None) -> None:
    assert ResponsePermission.parse(value) == expected


@pytest.mark.parametrize("value", ["yes", {"max": "2"}, {"expires": 5}, {"bogus": 1}, {"expires": "soon"}])
def test_parse_errors(value: object) -> None:
    with pytest.raises(ConfigValueError):
        ResponsePermission.parse(value)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_allowance_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(auth.time, "monotonic", clock)
    perms = Permissions({"allow_responses": {"max": 3, "expires": "10s"}}).copy()
    assert not perms.can_publish(b"_INBOX.a")
    perms.track_reply(b"_INBOX.a")
    assert perms.can_publish(b"_INBOX.a")
    clock.now += 10.5
    assert not perms.can_publish(b"_INBOX.a")  # expired (and forgotten)
    perms.track_reply(b"_INBOX.a")
    assert perms.can_publish(b"_INBOX.a")


def test_unlimited_and_pruning(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(auth.time, "monotonic", clock)
    perms = Permissions({"allow_responses": {"max": -1, "expires": "5s"}}).copy()
    perms.track_reply(b"r.1")
    for _ in range(10):
        assert perms.can_publish(b"r.1")
    clock.now += 6
    perms.track_reply(b"r.2")  # more than a second since the last prune: stale entries are dropped
    assert perms.replies is not None and set(perms.replies) == {b"r.2"}


def test_copies_do_not_share_replies() -> None:
    shared = Permissions({"allow_responses": True})
    a, b = shared.copy(), shared.copy()
    a.track_reply(b"r")
    assert a.can_publish(b"r") and not b.can_publish(b"r")
