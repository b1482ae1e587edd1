"""The delivery policy with routes (broker.delivery.publish): one routed message per route, never route to
route, queue groups named by the sender, remote members weighted. Fakes stand for the connections."""

from __future__ import annotations

import collections

from pynatsd.base.histogram import Tally
from pynatsd.broker.delivery import Client, Message, Subscription, publish
from pynatsd.matcher import Sublist
from pynatsd.routes.route import RemoteQueueSubscription


class Local(Client):
    def __init__(self) -> None:
        super().__init__()
        self.got: list[tuple[bytes, bytes]] = []

    def remove_sub(self, sub: Subscription) -> None:
        pass

    def take(self, sub: Subscription, msg: Message) -> bool:
        self.got.append((sub.sid, msg.payload))
        return True


class FakeRoute(Client):
    def __init__(self) -> None:
        super().__init__()
        self.is_route = True
        self.sent: list[tuple[bytes, bytes, list[bytes]]] = []

    def send_routed(self, sub: Subscription, msg: Message) -> bool:
        self.sent.append((sub.sid, msg.subject, list(msg.queues or [])))
        return True


def _fanout() -> list[Tally]:
    return [Tally() for _ in range(8)]


def local_sub(conn: Local, subject: bytes, queue: bytes | None = None) -> Subscription:
    return Subscription(conn, subject, queue, b"%d" % id(conn))


def message(origin: Client | None, subject: bytes = b"foo", queues: list[bytes] | None = None) -> Message:
    msg = Message(origin)
    msg.set(subject, None, b"1", None, b"x", b"MSG " + subject + b" ")
    msg.queues = queues
    return msg


def test_one_routed_message_per_route_however_many_interests_match() -> None:
    sublist: Sublist[Subscription] = Sublist()
    route, other = FakeRoute(), FakeRoute()
    for subject in (b"foo", b"*", b">"):
        sublist.insert(Subscription(route, subject, None, b"$G"))
    sublist.insert(Subscription(route, b"foo", b"q1", b"$G"))
    sublist.insert(Subscription(route, b"foo", b"q2", b"$G"))
    sublist.insert(Subscription(other, b"foo", None, b"$G"))
    local = Local()
    sublist.insert(local_sub(local, b"foo"))
    assert publish(sublist, message(Local()), _fanout())
    assert route.sent == [(b"$G", b"foo", [b"q1", b"q2"])]
    assert other.sent == [(b"$G", b"foo", [])]
    assert len(local.got) == 1


def test_a_routed_message_goes_to_local_receivers_only() -> None:
    sublist: Sublist[Subscription] = Sublist()
    source, other = FakeRoute(), FakeRoute()
    sublist.insert(Subscription(other, b"foo", None, b"$G"))
    sublist.insert(Subscription(other, b"foo", b"q1", b"$G"))
    local = Local()
    sublist.insert(local_sub(local, b"foo"))
    assert publish(sublist, message(source, queues=None), _fanout())
    assert other.sent == [] and len(local.got) == 1


def test_a_routed_message_reaches_only_the_queue_groups_it_names() -> None:
    sublist: Sublist[Subscription] = Sublist()
    source = FakeRoute()
    named, unnamed = Local(), Local()
    sublist.insert(local_sub(named, b"foo", b"q1"))
    sublist.insert(local_sub(unnamed, b"foo", b"q2"))
    publish(sublist, message(source, queues=[b"q1"]), _fanout())
    publish(sublist, message(source, queues=None), _fanout())
    assert len(named.got) == 1 and unnamed.got == []


def test_queue_group_member_is_local_or_one_route_never_both() -> None:
    sublist: Sublist[Subscription] = Sublist()
    route = FakeRoute()
    # a remote group of 3 members: three entries of one route (as Route.on_rsub shadows its weight)
    for _ in range(3):
        sublist.insert(Subscription(route, b"foo", b"q", b"$G"))
    local = Local()
    sublist.insert(local_sub(local, b"foo", b"q"))
    publisher = Local()
    for _ in range(400):
        publish(sublist, message(publisher), _fanout())
    remote = len(route.sent)
    assert remote + len(local.got) == 400  # exactly one member each time
    assert all(q == [b"q"] for _, _, q in route.sent)
    counts = collections.Counter({"remote": remote, "local": len(local.got)})
    assert counts["remote"] > counts["local"]  # weighted 3:1, as nats-server picks


def test_a_remote_group_weight_is_one_subscription_picked_by_its_weight() -> None:
    """`RS+ $G foo q 2000000` is one object in the index, weighted in the pick (literal and wildcard
    members merged into one group), re-weighted in place."""
    sublist: Sublist[Subscription] = Sublist()
    route = FakeRoute()
    remote = RemoteQueueSubscription(route, b"foo", b"q", b"$G", 2_000_000)
    sublist.insert(remote)
    local = Local()
    sublist.insert(local_sub(local, b"*", b"q"))
    assert len(sublist) == 2
    for _ in range(50):
        publish(sublist, message(Local()), _fanout())
    assert len(route.sent) >= 49 and len(route.sent) + len(local.got) == 50
    sublist.remove(remote)
    remote.weight = 1
    sublist.insert(remote)
    route.sent.clear()
    for _ in range(400):
        publish(sublist, message(Local()), _fanout())
    assert 100 < len(route.sent) < 300  # 1:1 now


def test_closed_route_takes_nothing_and_no_interest_means_not_delivered() -> None:
    sublist: Sublist[Subscription] = Sublist()
    route = FakeRoute()
    route.closed = True
    sublist.insert(Subscription(route, b"foo", None, b"$G"))
    assert not publish(sublist, message(Local()), _fanout())
    assert not publish(sublist, message(Local(), b"bar"), _fanout())
    assert route.sent == []
