"""A follower replica of a replicated stream placed on this server by the meta leader: the stream group's
RaftNode (an observer: it stores, acks and votes, never campaigns, so it never leads a stream it could not
serve; named by a leader transfer, it wins only to hand the leadership on at once) and a pynatsd store
holding the committed messages (stream.StreamApplier). Both live under the JetStream store directory,
`_js_/<group>/` (`raft/` the group's log, `msgs/` the stream's file store), so a restart recovers them: the
log's committed entries are applied again, the store skipping what it holds.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pynatsd.base.logging import get_logger
from pynatsd.broker.delivery import Subscription
from pynatsd.broker.internal import InternalClient
from pynatsd.jetstream.store.base import Store
from pynatsd.jetstream.store.file import FileStore
from pynatsd.jetstream.store.memory import MemoryStore
from pynatsd.protocol.subjects import is_literal_subject
from pynatsd.raft.node import RaftNode
from pynatsd.raft.storage import FileStorage
from pynatsd.raft.stream import StreamApplier

if TYPE_CHECKING:
    from pynatsd.broker.core import Broker

log = get_logger()

MsgHandler = Callable[[bytes, bytes | None, bytes | None, bytes], None]

# A follower compacts its group's log behind a snapshot of its stream state this often (nats-server's
# stream compactInterval is 2 minutes) when it applied anything since.
COMPACT_INTERVAL = 120.0
# A catch-up is asked again when the leader sent nothing for this long (nats-server's
# streamCatchupActivityInterval is 5 s), or this long after one ended short; given up after the third try.
CATCHUP_STALL = 5.0
CATCHUP_RETRY = 2.0
CATCHUP_TRIES = 3


def drive_node(
    client: InternalClient, node: RaftNode, subs: dict[str, Subscription], on_msg: MsgHandler, now: float
) -> float:
    """Tick `node`, then carry out what it asks: its subscriptions, its messages out. Returns when it next
    needs a tick. Answers go to the subject a request named: only ever an NRG inbox, so a system account
    user cannot make the server publish in its own name anywhere else (no confused deputy)."""
    due = node.tick(now)
    wanted = node.subscriptions()
    for subject in wanted - subs.keys():
        subs[subject] = client.subscribe(subject.encode(), on_msg)
    for subject in subs.keys() - wanted:
        client.unsubscribe(subs.pop(subject))
    for out in node.take_outbox():
        if out.subject.startswith("$NRG.") and is_literal_subject(out.subject.encode("latin-1")):
            client.publish(out.subject.encode("latin-1"), out.reply.encode("latin-1") or None, None, out.data)
    return due


def rearm(
    loop: asyncio.AbstractEventLoop,
    timer: asyncio.TimerHandle | None,
    due: float,
    callback: Callable[[], None],
) -> asyncio.TimerHandle | None:
    """The timer for `due` (inf: none), keeping `timer` when it fires no later."""
    if timer is not None and timer.when() <= due:
        return timer
    if timer is not None:
        timer.cancel()
    return loop.call_at(due, callback) if due != float("inf") else None


class GroupFollower:
    """What a stream's and a consumer's follower replica share: the group's observer RaftNode, its log in
    `directory/raft`, driven over the internal client on the event loop, compacted every `compact_every`
    seconds (`compact`). Subclasses apply what it commits in `pump`."""

    def __init__(
        self,
        server: Broker,
        client: InternalClient,
        directory: Path,
        assignment: dict[str, Any],
        ours: str,
        compact_every: float,
    ) -> None:
        self.server = server
        self.client = client
        self.dir = directory
        self.assignment = assignment
        group = assignment["group"]
        self.group = str(group["name"])
        self.peers = [str(p) for p in group["peers"]]
        loop = server.loop
        raft = FileStorage(directory / "raft")
        self.node = RaftNode(
            self.group, ours, raft, self.peers, loop.time(), random.Random(), observer=True, hands_over=True
        )
        self.subs: dict[str, Subscription] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.compact_every = compact_every
        self.compact_timer: asyncio.TimerHandle | None = loop.call_later(compact_every, self._on_compact)

    def _on_msg(self, subject: bytes, reply: bytes | None, headers: bytes | None, payload: bytes) -> None:
        where = reply.decode("latin-1") if reply else ""
        self.node.receive(subject.decode("latin-1"), where, payload, self.server.loop.time())
        self.pump()

    def _on_timer(self) -> None:
        self.timer = None
        self.pump()

    def _on_compact(self) -> None:
        self.compact()
        self.compact_timer = self.server.loop.call_later(self.compact_every, self._on_compact)

    def drive(self) -> float:
        """Tick the node and carry out what it asks; when it next needs a tick."""
        return drive_node(self.client, self.node, self.subs, self._on_msg, self.server.loop.time())

    def pump(self) -> None:
        raise NotImplementedError

    def compact(self) -> None:
        raise NotImplementedError

    def release(self) -> None:
        """Timers cancelled and subscriptions gone (the node still open)."""
        for timer in (self.timer, self.compact_timer):
            if timer is not None:
                timer.cancel()
        self.timer = self.compact_timer = None
        for sub in self.subs.values():
            self.client.unsubscribe(sub)
        self.subs.clear()


class StreamReplica(GroupFollower):
    """One stream group's follower on this server (see the module docstring)."""

    def __init__(
        self, server: Broker, client: InternalClient, directory: Path, assignment: dict[str, Any], ours: str
    ) -> None:
        super().__init__(server, client, directory, assignment, ours, COMPACT_INTERVAL)
        group = assignment["group"]
        self.stream = str(assignment["stream"]["name"])
        storage = str(assignment["stream"].get("storage") or group.get("storage") or "file")
        self.store: Store = FileStore(directory / "msgs") if storage == "file" else MemoryStore()
        self.applier = StreamApplier(self.store)
        self.applied_since_snapshot = 0
        self.catchup_sub: Subscription | None = None
        self.catchup_timer: asyncio.TimerHandle | None = None
        self.catchup_tries = 0
        self.pump()

    def pump(self) -> None:
        due = self.drive()
        for done in self.node.take_applied():
            self.applier.apply(done.entries)
            self.applied_since_snapshot += 1
        if self.applier.catchup_to and self.catchup_sub is None and not self.applier.broken:
            self._ask_catchup()
        self.timer = rearm(self.server.loop, self.timer, due, self._on_timer)

    # Catch-up over nats-server's protocol (see pynatsd.raft.stream), after a snapshot ahead of the store.

    def _ask_catchup(self) -> None:
        self.catchup_tries += 1
        if self.catchup_tries > CATCHUP_TRIES:
            self.applier.broken = f"catch-up to sequence {self.applier.catchup_to} failed"
            log.error("JetStream cluster replica of %r: %s", self.stream, self.applier.broken)
            return
        sync = str(self.assignment.get("sync") or "")
        if not sync.startswith("$JSC.SYNC.") or not is_literal_subject(sync.encode()):
            self.applier.broken = "no sync subject to catch up from"
            return
        inbox = "$JSC.R." + self.node.rng.getrandbits(64).to_bytes(8).hex()
        self.catchup_sub = self.client.subscribe(inbox.encode(), self._on_catchup)
        request = {
            "peer": self.node.id,
            "first_seq": self.store.last_seq + 1,
            "last_seq": self.applier.catchup_to,
            "delete_ranges": True,
            "min_applied": self.node.applied,
        }
        self.client.publish(sync.encode(), inbox.encode(), None, json.dumps(request).encode())
        self._catchup_active()

    def _catchup_active(self) -> None:
        if self.catchup_timer is not None:
            self.catchup_timer.cancel()
        self.catchup_timer = self.server.loop.call_later(CATCHUP_STALL, self._retry_catchup)

    def _retry_catchup(self) -> None:
        """Stalled, or ended short of the snapshot: ask again (nats-server retries thrice)."""
        self._end_catchup()
        self._ask_catchup()

    def _end_catchup(self) -> None:
        if self.catchup_sub is not None:
            self.client.unsubscribe(self.catchup_sub)
            self.catchup_sub = None
        if self.catchup_timer is not None:
            self.catchup_timer.cancel()
            self.catchup_timer = None

    def _on_catchup(self, subject: bytes, reply: bytes | None, headers: bytes | None, payload: bytes) -> None:
        if self.catchup_sub is None:
            return
        # Acks go only to the leader's catch-up ack subjects (no confused deputy).
        ack = (
            reply
            if reply is not None and reply.startswith(b"$JSC.ACK.") and is_literal_subject(reply)
            else None
        )
        if not payload:  # the end
            self._end_catchup()
            if self.applier.caught_up():
                self.catchup_tries = 0
                log.info("JetStream cluster replica of %r: caught up", self.stream)
                self.pump()
            else:
                self.catchup_timer = self.server.loop.call_later(CATCHUP_RETRY, self._retry_catchup)
            return
        try:
            self.applier.apply_catchup(payload)
        except ValueError as e:
            if ack is not None:
                self.client.publish(ack, None, None, str(e).encode())  # tells the leader to stop
            self._end_catchup()
            self.applier.broken = f"catch-up: {e}"
            log.error("JetStream cluster replica of %r: %s", self.stream, self.applier.broken)
            return
        if ack is not None:
            self.client.publish(ack, None, None, b"")
        self._catchup_active()

    def compact(self) -> None:
        """Snapshot the store's state (nats-server's JSON stream snapshot); the log up to it goes."""
        if not self.applied_since_snapshot or self.applier.broken or self.applier.catchup_to:
            return
        self.node.install_snapshot(json.dumps(self.state()).encode())
        self.applied_since_snapshot = 0

    def state(self) -> dict[str, Any]:
        """The stream state as nats-server's (legacy JSON) stream snapshot writes it."""
        store = self.store
        seqs = range(store.first_seq, store.last_seq + 1) if store.msgs else range(0)
        deleted = [s for s in seqs if s not in store]
        return {
            "messages": store.msgs,
            "bytes": store.bytes,
            "first_seq": store.first_seq,
            "last_seq": store.last_seq,
            "clfs": self.applier.clfs,
            **({"deleted": deleted} if deleted else {}),
        }

    def stop(self, remove: bool = False) -> None:
        self._end_catchup()
        self.release()
        self.node.close()
        self.store.close()
        if remove:
            shutil.rmtree(self.dir, ignore_errors=True)
