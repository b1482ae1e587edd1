"""A connection's subscriptions by sid, in less memory than a dict of bytes.

Clients number their subscriptions 1, 2, 3, … (nats.go, nats.py, nats.c, nats.ws all do), so a sid that
is a canonical decimal ("7", not "07", "+7" or "a7") is kept as its int: CPython shares the ints up to
256, and a larger one costs 32 bytes against 48 for its bytes. Such a sid indexes a list while the sids
stay dense (8 bytes a subscription against about 42 for a dict entry); any other sid, or one far past
the list's end, goes in a dict. The sid is framed byte-exact either way: an int is only ever a canonical
decimal, which `b"%d"` spells back as the client did (delivery.deliver does, at its first message).

Measured (bench/matcher/e2e.py, 1M SUBs over the wire): see README "Memory".
"""

from __future__ import annotations

from collections.abc import Iterator

from pynatsd.broker.delivery import Subscription

_SLACK = 64
"""A new sid may lie this far past twice the count of listed subscriptions and still extend the list."""


def sid_key(sid: bytes | int) -> bytes | int:
    """The key a sid is stored under: its int if it is a canonical decimal, else its bytes."""
    if isinstance(sid, int):
        return sid
    # isdigit: ASCII digits only (bytes); no sign, no underscore, no leading zero; 18 digits stay below
    # 2**63 (beyond that an int would cost more than the bytes anyway).
    if 0 < len(sid) <= 18 and sid.isdigit() and (sid[0] != 48 or len(sid) == 1):  # 48: b"0"
        return int(sid)
    return sid


class SidMap:
    """sid -> Subscription for one connection: a list for dense decimal sids, a dict for the rest."""

    __slots__ = ("_dense", "_listed", "_other")

    def __init__(self) -> None:
        self._dense: list[Subscription | None] = []
        self._listed = 0  # subscriptions in _dense
        self._other: dict[bytes | int, Subscription] = {}

    def __len__(self) -> int:
        return self._listed + len(self._other)

    def get(self, sid: bytes) -> Subscription | None:
        key = sid_key(sid)
        if isinstance(key, int) and key < len(self._dense):
            found = self._dense[key]
            if found is not None:
                return found
        return self._other.get(key)  # (an int key may have gone here before the list grew past it)

    def add(self, sub: Subscription) -> None:
        """Add `sub` under its sid, which must not be taken (`get` first); stores the sid's compact form in
        the subscription."""
        key = sub.sid = sid_key(sub.sid)
        if isinstance(key, int):
            dense = self._dense
            n = len(dense)
            if key < n:
                dense[key] = sub
                self._listed += 1
                return
            if key < 2 * self._listed + _SLACK:
                if key > n:
                    dense.extend([None] * (key - n))
                dense.append(sub)
                self._listed += 1
                return
        self._other[key] = sub

    def remove(self, sub: Subscription) -> bool:
        """Drop `sub` if it is the one under its sid; False if not."""
        key = sid_key(sub.sid)
        dense = self._dense
        if isinstance(key, int) and key < len(dense) and dense[key] is sub:
            dense[key] = None
            self._listed -= 1
            while dense and dense[-1] is None:
                dense.pop()
            if self._listed * 4 < len(dense) and len(dense) > _SLACK:
                self._unlist()  # mostly holes: the few left move to the dict
            return True
        if self._other.get(key) is not sub:
            return False
        del self._other[key]
        return True

    def _unlist(self) -> None:
        for i, sub in enumerate(self._dense):
            if sub is not None:
                self._other[i] = sub
        self._dense = []
        self._listed = 0

    def values(self) -> Iterator[Subscription]:
        """Every subscription (a snapshot: the map may change while it is consumed)."""
        subs = [sub for sub in self._dense if sub is not None]
        subs.extend(self._other.values())
        return iter(subs)
