"""The delivery policy: the one place that decides whether a subscription receives a message.

Every message, whoever publishes it (a client's PUB/HPUB, an internal client, a no-responders status),
reaches its receivers through `publish` → `deliver` (a run of answers to one request, `publish_run`, is
matched once and then published message by message the same way); no other code decides who receives a
message, and no other code queues one (nats-server keeps the same rules in one `deliverMsg`). In `deliver`,
in order:

1. a closed receiver takes nothing;
2. echo: a connection that said `echo: false` does not get its own messages;
3. subscribe-deny, checked against the message's subject at delivery (a wildcard subscription may
   overlap denied subjects: `foo.*` with `foo.secret` denied), with a per-connection cache;
4. auto-unsubscribe: a subscription past its limit (`Client.limits`) is removed, the last message still
   goes out;
5. allow_responses: a request delivered opens its reply subject to the receiver;
6. a client with no socket (an internal client) takes the message its own way (`Client.take`); clients
   get the frame appended, by reference, to their outbound queue: HMSG for clients that negotiated
   headers, MSG with the headers stripped for the others;
7. counters: the receiver's out msgs/bytes; `publish` counts the fan-out histogram, /subsz its matches.

Queue groups: one member per group, picked at random; a member that takes nothing (closed, denied, its
own echo) passes the message to the next one.

Routes (pynatsd.routes): a route is a `Client` whose subscriptions are the remote server's interest. As
nats-server's processMsgResults: remote interest is collected while the local receivers get the message,
then each route gets ONE routed message naming the queue groups it was chosen for (`Message.queues`), and
a message that came from a route goes to local receivers only, to the queue groups it names.

Leaf nodes (pynatsd.leafnodes): a leaf connection is a route-like `Client` too (`is_route` and `is_leaf`),
bound to one account; `spoke` when it is this server's connection to its hub. As nats-server's: a message
that came over one link goes on over another only as `forwards` says (from a leaf to the other leafs, and
to the routes unless it came from our hub; from a route to the leafs connected here); in a queue group a
leaf member takes the message only when no other member does (local members first).

Accounts linked by imports (pynatsd.accounts.links): a `Link` subscription (a stream import's shadow, a
service import, a response route) is not a receiver; its `forward` hook maps the message into the other
account and hands it to this same policy there (`deliver` or `publish`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

from pynatsd.protocol.encoder import hmsg_tail, msg_tail, no_responders_headers

if TYPE_CHECKING:
    from pynatsd.auth.users import Permissions
    from pynatsd.base.histogram import Tally
    from pynatsd.broker.outbound import Outbound
    from pynatsd.matcher import Sublist

#: A link to another account (pynatsd.accounts.links): (subscription, message) -> delivered to anyone.
Forward = Callable[["Subscription", "Message"], bool]

# Bounds of a publisher's cache of `MSG subject ` heads (see `new_head`): entries, and subject length.
HEADS_CACHED = 4096
HEAD_SUBJECT_CACHED = 128


@mypyc_attr(allow_interpreted_subclasses=True)
class Client:
    """What the policy reads and updates of a subscription's owner: a client connection or an internal
    client, both subclasses. A class rather than a Protocol so that compiled code reads these as struct
    fields, once per delivery."""

    def __init__(self) -> None:
        self.closed = False
        self.echo = True  # false: not its own messages
        self.headers = False  # true: HMSG with headers, else MSG with them stripped
        self.perms: Permissions | None = None
        self.out: Outbound | None = None  # None: no socket (internal clients: see take)
        self.out_msgs = 0
        self.out_bytes = 0
        self.is_route = False  # a route (pynatsd.routes): its subscriptions are a remote server's interest
        self.is_leaf = False  # a leaf node connection (pynatsd.leafnodes; is_route too)
        self.spoke = False  # a leaf connection to this server's hub (it solicited it, not as hub)
        # an outbound gateway (pynatsd.gateways): its one `>` subscription per account takes every local
        # message for the gateway to filter; it is no interest of anyone's (leaf nodes, JetStream)
        self.is_gateway = False
        # Auto-unsubscribe limits (UNSUB sid max) of its subscriptions: rare, so kept here rather than in
        # every subscription; None until the first.
        self.limits: dict[Subscription, int] | None = None

    def send_routed(self, sub: Subscription, msg: Message) -> bool:
        """A route's: send `msg` as one routed message for `sub`'s account (queue groups in msg.queues)."""
        raise NotImplementedError

    def remove_sub(self, sub: Subscription) -> None:
        """Drop `sub` (its auto-unsubscribe limit is reached)."""
        raise NotImplementedError

    def backlogged(self) -> None:
        """Its queue passed the gate (see Outbound.limit)."""

    def no_responders(self, subject: bytes, reply: bytes) -> None:
        """Its request on `subject` reached no one: a client connection that asked for it in CONNECT hears
        a 503 status on its own reply subscription (`no_responders_status`); a route or an internal client
        never does (nats-server sends it to a client only)."""

    def take(self, sub: Subscription, msg: Message) -> bool:
        """A client with no socket (`out` None) receives `msg` for `sub` here (an internal client queues it
        for the subscription's handler: a per-client table, so no subscription carries a callback field).
        True if taken."""
        return False


class Subscription:
    """One SUB of one connection (or of an internal client). Hashed by identity; the matcher stores it."""

    # Memory: each field costs 8 bytes per subscription (a million of them is the bench-matcher row); 5 fields
    # keep the (compiled) object in pymalloc's 80-byte class. Rare behaviour lives elsewhere: auto-unsubscribe
    # limits in the client (`Client.limits`), internal clients' handlers in the client (`Client.take`),
    # links between accounts in a subclass (`Link`), the sid's trailing space in the message's tail.
    __slots__ = ("conn", "delivered", "queue", "sid", "subject")

    def __init__(self, conn: Client, subject: bytes, queue: bytes | None, sid: bytes | int) -> None:
        self.conn = conn
        self.subject = subject
        self.queue = queue
        # Framed as is (the message's tail starts with the space after it). A canonical decimal sid may be
        # given as its int (pynatsd.broker.sids: 0 bytes up to 256, 32 rather than 48 above), spelled out
        # at its first delivery.
        self.sid: bytes | int = sid
        self.delivered = 0


class Link(Subscription):
    """A subscription that links accounts (see the module docstring): `forward` takes its messages."""

    __slots__ = ("forward",)

    def __init__(
        self, conn: Client, subject: bytes, queue: bytes | None, sid: bytes | int, forward: Forward
    ) -> None:
        super().__init__(conn, subject, queue, sid)
        self.forward = forward


SERVICE_IMPORT_SID = b"si"  # the sid of a service import's subscription (pynatsd.accounts.links)


def kept_local(sub: Subscription) -> bool:
    """True for a service import's subscription: the importer's own way to the exporter, never advertised
    to routes as interest (nats-server subscribes it with noForward); the exporter's subscribers are."""
    return type(sub) is Link and sub.sid == SERVICE_IMPORT_SID


def forwards(origin: Client, target: Client) -> bool:
    """True if a message that came over the link `origin` (a route or a leaf connection) goes on over the
    link `target`, as nats-server's processMsgResults: from a leaf connection to any other one, and to the
    routes unless it came from our hub; from a route to the leaf connections whose hub we are."""
    if target is origin:
        return False
    if origin.is_leaf:
        return target.is_leaf or not origin.spoke
    return target.is_leaf and not target.spoke


def propagated(conn: Client) -> bool:
    """True if `conn`'s subscriptions are interest the routes carry: a client's, and a leaf connection's
    whose hub we are (a spoke's, our hub's interest, stays on this side; a route's goes no further)."""
    return not conn.is_route or (conn.is_leaf and not conn.spoke)


def sid_bytes(sub: Subscription) -> bytes:
    """`sub`'s sid as the client spelled it."""
    sid = sub.sid
    return sid if isinstance(sid, bytes) else b"%d" % sid


def max_msgs(sub: Subscription) -> int:
    """`sub`'s auto-unsubscribe limit; 0: none."""
    limits = sub.conn.limits
    return 0 if limits is None else limits.get(sub, 0)


class Message:
    """The message being delivered, and its frames, built once and shared by every receiver.

    A publisher reuses one instance (`set`) for every message it publishes: nothing is allocated per
    message but the frame parts, and those only when a receiver with a socket gets it (`frame`)."""

    __slots__ = (
        "framed",
        "head",
        "headers",
        "hhead",
        "hops",
        "htail",
        "nbytes",
        "origin",
        "payload",
        "queues",
        "reply",
        "size",
        "sizes",
        "subject",
        "tail",
    )

    def __init__(self, origin: Client | None) -> None:
        self.origin = origin  # the publisher (echo is checked against it)
        self.subject = b""
        self.reply: bytes | None = None
        self.headers: bytes | None = None
        self.payload = b""
        self.sizes = b""  # the size field(s) as the publisher spelled them
        self.nbytes = 0  # payload bytes (what a MSG receiver counts)
        self.size = 0  # headers + payload bytes (what an HMSG receiver counts)
        self.head = b""  # `MSG subject `
        self.tail = b""  # ` [reply ]size\r\npayload\r\n` (from the space after the sid)
        self.hhead = b""  # `HMSG subject ` (with headers only)
        self.htail = b""
        self.framed = False  # head/tail/hhead/htail built for this message (see `frame`)
        # Routes: the queue groups named by a routed message (inbound: only those get it here; outbound:
        # those a route was chosen for). None: none named.
        self.queues: list[bytes] | None = None
        # The exports a request went through on service imports (pynatsd.accounts.links): a second pass
        # through one is a cycle, and such a message is not forwarded to stream imports.
        self.hops: tuple[object, ...] = ()

    def set(
        self,
        subject: bytes,
        reply: bytes | None,
        sizes: bytes,
        headers: bytes | None,
        payload: bytes,
        head: bytes,
    ) -> None:
        """Make this the next message; `head` is `MSG subject ` (the publisher caches it per subject)."""
        self.subject = subject
        self.reply = reply
        self.sizes = sizes
        self.headers = headers
        self.payload = payload
        self.head = head
        self.nbytes = len(payload)
        self.size = self.nbytes if headers is None else len(headers) + self.nbytes
        self.framed = False

    def frame(self) -> None:
        """Build the frame parts, at the first receiver that writes them out (a client's socket, a route):
        a message only internal clients take (a JetStream publish) is never framed, which saved three
        copies of its payload. As nats-server, MSG and HMSG repeat the size fields as the publisher spelled
        them; a MSG stripped of its headers counts its payload anew."""
        self.framed = True
        if self.headers is None:
            self.tail = msg_tail(self.reply, self.payload, self.sizes)
        else:
            self.tail = msg_tail(self.reply, self.payload)
            self.hhead = b"H" + self.head
            self.htail = hmsg_tail(self.reply, self.headers, self.payload, self.sizes)


def deliver(sub: Subscription, msg: Message) -> bool:
    """Deliver `msg` to `sub` if the rules let it receive it (see the module's docstring); True if so."""
    if isinstance(sub, Link):  # a link to another account: it delivers there, through this policy
        return sub.forward(sub, msg)
    conn = sub.conn
    if conn.closed or (conn is msg.origin and not conn.echo):
        return False
    perms = conn.perms
    if perms is not None and perms.sub_deny and perms.delivery_denied(msg.subject):
        return False
    if conn.is_route:
        return conn.send_routed(sub, msg)  # one routed message, framed by the route
    limit = max_msgs(sub)
    if limit:
        if sub.delivered >= limit:
            conn.remove_sub(sub)
            return False
        if sub.delivered + 1 == limit:
            conn.remove_sub(sub)
    if perms is not None and msg.reply is not None and perms.replies is not None:
        perms.track_reply(msg.reply)
    sub.delivered += 1
    out = conn.out
    if out is None:
        return conn.take(sub, msg)  # no socket: an internal client's handler
    sid = sub.sid
    if not isinstance(sid, bytes):  # a decimal sid kept as an int while idle: spelled out once
        sid = sub.sid = b"%d" % sid
    if not msg.framed:
        msg.frame()
    if msg.headers is not None and conn.headers:
        return enqueue(conn, out, msg.hhead, sid, msg.htail, msg.size)
    return enqueue(conn, out, msg.head, sid, msg.tail, msg.nbytes)


def enqueue(conn: Client, out: Outbound, head: bytes, sid: bytes, tail: bytes, nbytes: int) -> bool:
    """Queue one message frame (`head`, `sid`, `tail`, by reference) to `conn` and count it (`nbytes`: what
    it counts, headers stripped or not); past the queue's gate, `conn.backlogged()` applies the
    slow-consumer and stall policy. The one place a message is queued: `deliver`, and a route's
    `send_routed` for its routed messages."""
    over = out.enqueue_msg(head, sid, tail)
    conn.out_bytes += nbytes
    conn.out_msgs += 1
    if over:
        conn.backlogged()
    return True


def publish(sublist: Sublist[Subscription], msg: Message, fanout: list[Tally]) -> bool:
    """Deliver `msg` to every matching subscription of `sublist`: each plain one, and one member of each
    queue group; remote interest through one routed message per route (see the module's docstring).
    `fanout` is the histogram of matches per publish (its last slot takes the rest). True if anyone
    received it."""
    plain, groups = sublist.match(msg.subject)
    return publish_matched(plain, groups, msg, fanout)


def publish_run(
    sublist: Sublist[Subscription],
    msg: Message,
    frames: list[tuple[bytes | None, bytes]],
    fanout: list[Tally],
) -> None:
    """Publish a run of messages in order: (headers, payload) each, sharing `msg`'s subject, reply and
    publisher (a batched answer to one request; `msg` is set to each in turn). Each message is published
    as `publish` does, every receiver through `deliver`; only the match is made once for the run, and made
    again if a delivery changed the index (an auto-unsubscribe)."""
    if not frames:
        return
    subject = msg.subject
    generation = sublist.generation
    plain, groups = sublist.match(subject)
    repeats = 0
    for headers, payload in frames:
        if sublist.generation != generation:
            generation = sublist.generation
            plain, groups = sublist.match(subject)
        else:
            repeats += 1
        msg.set(subject, msg.reply, size_fields(headers, payload), headers, payload, msg.head)
        publish_matched(plain, groups, msg, fanout)
    sublist.count_repeats(subject, repeats - 1)  # the statistics as if each message had been matched


def publish_matched(
    plain: tuple[Subscription, ...],
    groups: tuple[tuple[Subscription, ...], ...],
    msg: Message,
    fanout: list[Tally],
) -> bool:
    """`publish` after the match: the plain subscriptions and queue groups `msg`'s subject matched."""
    matched = len(plain) + len(groups)
    fanout[matched if matched < len(fanout) else -1].n += 1
    if not matched:
        return False
    delivered = False
    origin = msg.origin
    from_route = origin is not None and origin.is_route
    # The routes to send to: one remote interest of each, and the queue groups it was chosen for.
    routes: list[tuple[Subscription, list[bytes]]] | None = None
    for sub in plain:
        conn = sub.conn
        if conn.is_route:
            # a routed message goes on over another link only as `forwards` says (never route to route)
            if origin is None or not from_route or forwards(origin, conn):
                routes = _route_target(routes, sub, None)
        elif deliver(sub, msg):
            delivered = True
    named = msg.queues if from_route else None
    for group in groups:
        # Exactly one member per queue group: from a random start, the first that takes it; a remote
        # member (a route's interest) takes it through that route's one routed message. A leaf member, or
        # any remote one for a message that came over a link, only when no local member takes it.
        if from_route and (named is None or group[0].queue not in named):
            continue  # a routed message reaches only the queue groups its sender chose this server for
        n = len(group)
        start = int(random.random() * n)
        fallback: Subscription | None = None
        taken = False
        for i in range(n):
            member = group[(start + i) % n]
            conn = member.conn
            if conn.is_route:
                if conn.closed:
                    continue
                if from_route or conn.is_leaf:
                    if fallback is None and (origin is None or not from_route or forwards(origin, conn)):
                        fallback = member
                    continue
                routes = _route_target(routes, member, member.queue)
                taken = True
                break
            if deliver(member, msg):
                delivered = True
                taken = True
                break
        if not taken and fallback is not None:
            routes = _route_target(routes, fallback, fallback.queue)
    if routes is not None:
        for sub, queues in routes:
            msg.queues = queues or None
            if deliver(sub, msg):
                delivered = True
        msg.queues = None
    return delivered


def size_fields(headers: bytes | None, payload: bytes) -> bytes:
    """A message's size field(s) as a server spells them: `<#bytes>`, or `<#hdr> <#total>` with headers."""
    if headers is None:
        return b"%d" % len(payload)
    return b"%d %d" % (len(headers), len(headers) + len(payload))


def new_head(heads: dict[bytes, bytes], subject: bytes) -> bytes:
    """`MSG subject ` for a subject missing from a publisher's cache `heads` (the caller looked first, and
    checked the subject), kept there: subjects up to HEAD_SUBJECT_CACHED bytes, and a cache that reaches
    HEADS_CACHED entries starts over (a publisher cycling through many subjects) rather than grows."""
    head = b"MSG " + subject + b" "
    if len(subject) <= HEAD_SUBJECT_CACHED:
        if len(heads) >= HEADS_CACHED:
            heads.clear()
        heads[subject] = head
    return head


def no_responders_status(subject: bytes, reply: bytes) -> Message:
    """The 503 status message that tells a requester its request on `subject` reached no one, to be
    delivered on its reply subscription (see `Client.no_responders`)."""
    headers = no_responders_headers(subject)
    status = Message(None)
    status.set(reply, None, size_fields(headers, b""), headers, b"", b"MSG " + reply + b" ")
    return status


def _route_target(
    routes: list[tuple[Subscription, list[bytes]]] | None, sub: Subscription, queue: bytes | None
) -> list[tuple[Subscription, list[bytes]]]:
    """Add `sub`'s route to the routes to send to (once per route), with `queue` among its queue groups."""
    if routes is None:
        routes = []
    for known, queues in routes:
        if known.conn is sub.conn:
            if queue is not None:
                queues.append(queue)
            return routes
    routes.append((sub, [] if queue is None else [queue]))
    return routes
