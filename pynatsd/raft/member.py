"""pynatsd as a member of its cluster's JetStream meta group `_meta_`: a RaftNode (pynatsd.raft.node) run
inside the server over an internal client of the system account, its log under the JetStream store
directory, its clock on the event loop.

The member is an observer (nats-server's notion): it stores and acks the meta leader's entries and gives its
vote, but never campaigns, so it never becomes the meta leader, which would have to serve the JetStream API.
Its STATSZ announces JetStream with all its storage reserved (jetstream_statsz), so nats-server's meta leader
counts it among a replicated stream's peers but places single-replica streams on nats-server nodes with
room: it hosts follower replicas of replicated streams (pynatsd.raft.replica) and of their replicated
consumers (pynatsd.raft.consumer), never a stream or consumer it would have to lead. Its clients' `$JS.API`
requests go to the cluster (pynatsd.routes.jetstream), answered here only when the group has no leader, as
nats-server answers then.
Its peer id is nats-server's hash of the server name, which must therefore be stable (configured).
It applies the stream and consumer assignments (meta.MetaState) and compacts its log behind snapshots of
them in nats-server's meta snapshot encoding (MetaApplier), so a restart loads snapshot + remaining log.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import shutil
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pynatsd.base.formats import rfc3339nano
from pynatsd.base.logging import get_logger
from pynatsd.broker.delivery import Subscription
from pynatsd.broker.internal import InternalClient
from pynatsd.jetstream.monitor import configured_limits
from pynatsd.jetstream.store.file import FileStore
from pynatsd.jetstream.util import parse_rfc3339
from pynatsd.raft.codec import META_GROUP, EntryType, PeerState, peer_id
from pynatsd.raft.consumer import ConsumerReplica
from pynatsd.raft.meta import MetaState, service_account
from pynatsd.raft.node import Committed, RaftNode
from pynatsd.raft.replica import GroupFollower, StreamReplica, drive_node, rearm
from pynatsd.raft.storage import FileStorage

if TYPE_CHECKING:
    from pynatsd.broker.core import Broker
    from pynatsd.config.jetstream import JsConfig

log = get_logger()

# nats-server answers the JetStream API with 10008 once its meta group has had no leader for this long
# (lostQuorumInterval, 10 s) since the group was created (jetstream.go: isLeaderless).
LEADERLESS_AFTER = 10.0

# nats-server's cadence for the meta group's snapshots (jetstream_cluster.go, monitorCluster): a timer
# every minute (compactInterval), and on apply once the log passed 8 MiB (compactSizeMin); `meta_compact`
# (entries) and `meta_compact_size` (bytes) raise the bar when set.
COMPACT_INTERVAL = 60.0
COMPACT_SIZE_MIN = 8 << 20


# Where a member reports an assignment it could not carry out (jetstream_cluster.go streamAssignmentSubj,
# consumerAssignmentSubj), and the error it gives (nats-server's JSInsufficientResourcesErr).
STREAM_RESULT = b"$SYS.JSC.STREAM.ASSIGNMENT.RESULT"
CONSUMER_RESULT = b"$SYS.JSC.CONSUMER.ASSIGNMENT.RESULT"
INSUFFICIENT_RESOURCES = {"code": 503, "err_code": 10023, "description": "insufficient resources"}
RESULT_WINDOW_NS = 5_000_000_000


def _fresh(assignment: dict[str, Any]) -> bool:
    """Created within the last few seconds, when the meta leader still acts on a member's result (not one
    replayed from the log at a restart)."""
    try:
        created = parse_rfc3339(str(assignment.get("created") or ""))
    except ValueError:
        return False
    return time.time_ns() - created < RESULT_WINDOW_NS


class MetaApplier:
    """Applies a meta group node's committed entries to a MetaState and compacts its log behind a snapshot
    of that state (nats-server's meta snapshot encoding), so the log stays bounded. Without thresholds
    (0, nats-server's defaults) it compacts at `timer` when anything was applied since, and on apply once
    the log holds more than COMPACT_SIZE_MIN bytes; with them, whenever the log passes either."""

    def __init__(self, node: RaftNode, compact_entries: int = 0, compact_size: int = 0) -> None:
        self.node = node
        self.state = MetaState()
        self.compact_entries = compact_entries
        self.compact_size = compact_size
        self.log_entries = 0  # applied since the last snapshot
        self.log_bytes = 0
        self.last_snapshot: datetime | None = None  # when this member last wrote one, and how long it took
        self.last_duration = 0.0

    def apply(self, committed: list[Committed]) -> None:
        for done in committed:
            in_log = 1  # the index is in the log, but for a snapshot's (stored beside it)
            for entry in done.entries:
                try:
                    if entry.type == EntryType.SNAPSHOT:
                        self.state.load_snapshot(entry.data)
                        self.log_entries = self.log_bytes = in_log = 0
                    elif entry.type == EntryType.NORMAL:
                        self.log_bytes += len(entry.data)
                        self.state.apply_entry(entry.data)
                except (ValueError, KeyError, TypeError, AttributeError) as e:
                    log.warning("JetStream cluster member: meta entry not understood: %s", e)
            self.log_entries += in_log
        if committed and self._over_threshold():
            self.compact()

    def timer(self) -> None:
        """nats-server's periodic snapshot: without thresholds whenever anything was applied since."""
        if self.log_entries and (not (self.compact_entries or self.compact_size) or self._over_threshold()):
            self.compact()

    def _over_threshold(self) -> bool:
        if not (self.compact_entries or self.compact_size):
            return self.log_bytes > COMPACT_SIZE_MIN
        return bool(
            (self.compact_entries and self.log_entries > self.compact_entries)
            or (self.compact_size and self.log_bytes > self.compact_size)
        )

    def compact(self) -> None:
        """Snapshot the applied state; the log up to it goes (the storage writes both crash-safely)."""
        started = time.perf_counter()
        try:
            data = self.state.encode_snapshot()
        except ValueError as e:  # past one S2 block: keep the log rather than lose the state
            log.warning("JetStream cluster member: meta snapshot not written: %s", e)
            return
        self.node.install_snapshot(data)
        self.log_entries = self.log_bytes = 0
        self.last_duration = time.perf_counter() - started
        self.last_snapshot = datetime.now(UTC)

    def snapshot_stats(self) -> dict[str, Any]:
        """/jsz meta_cluster `snapshot` as nats-server shows it (MetaSnapshotStats): the entries and bytes
        in the log, when the last snapshot was taken (Go's zero time if never: omitempty does not omit a
        struct) and how long it took (omitted when zero)."""
        storage = self.node.storage
        first = storage.first_index()
        indexes = range(first, storage.last_index() + 1) if first else range(0)
        stats: dict[str, Any] = {
            "pending_entries": len(indexes),
            "pending_size": sum(len(storage.entry(i) or b"") for i in indexes),
            "last_time": rfc3339nano(self.last_snapshot) if self.last_snapshot else "0001-01-01T00:00:00Z",
        }
        if self.last_duration > 0:
            stats["last_duration"] = int(self.last_duration * 1e9)
        return stats


# A RAFT group's name as nats-server makes them (`S-R3F-1a2b3c4d`, `C-R3F-...`): one path component below the
# replica directory; anything else (`..`, a slash) is refused, whoever proposed it.
_GROUP_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def replica_directory(root: Path, group: str) -> Path:
    """The directory of `group`'s replica under `root`; ValueError for a name that is no plain group name."""
    if _GROUP_NAME.fullmatch(group) is None:
        raise ValueError(f"group name {group[:80]!r} refused")
    return root / group


class MetaMember:
    """The `_meta_` member of a clustered pynatsd with JetStream on (see the module docstring)."""

    def __init__(
        self,
        server: Broker,
        system_account: str,
        store_dir: Path,
        peer_names: Callable[[], list[str]],
        compact_entries: int = 0,
        compact_size: int = 0,
        config: JsConfig | None = None,
    ) -> None:
        self.server = server
        self.compact_entries = compact_entries  # nats-server's meta_compact and meta_compact_size
        self.compact_size = compact_size
        self.peer_names = peer_names  # the server names of the cluster's other nodes (its routes)
        self.system_account = system_account
        self.client = InternalClient(server, system_account, "raft")
        self.store = store_dir / META_GROUP
        self.node: RaftNode | None = None
        self.subs: dict[str, Subscription] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.started = 0.0
        self.applier: MetaApplier | None = None
        self.compact_timer: asyncio.TimerHandle | None = None
        self.routed = False  # a route came up since start (nats-server's meta layer recovers only then)
        self.replica_dir = store_dir / "_js_"
        self.replicas: dict[str, StreamReplica] = {}  # stream group -> the follower replica hosted here
        self.consumer_replicas: dict[str, ConsumerReplica] = {}  # consumer group -> its follower here
        self.refused: dict[str, str] = {}  # what an assignment asked that this member does not serve
        self.swept = False  # replica directories no assignment names removed, once caught up since start
        # The configured limits (or nats-server's defaults), which its STATSZ advertises.
        self.max_memory, self.max_storage = configured_limits(config) if config is not None else (0, 0)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        storage = FileStorage(self.store)
        if storage.load_peer_state() is None:
            # A newcomer knows no members: the leader adds it when it answers, and its entries name them.
            storage.save_peer_state(PeerState((), 0))
        ours = peer_id(self.server.server_name)
        self.node = RaftNode(META_GROUP, ours, storage, [], loop.time(), random.Random(), observer=True)
        self.applier = MetaApplier(self.node, self.compact_entries, self.compact_size)
        self.started = loop.time()
        self.compact_timer = loop.call_later(COMPACT_INTERVAL, self._on_compact_timer)
        self._pump()
        log.info("JetStream cluster member: meta group voter, follower of replicated streams")

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.compact_timer is not None:
            self.compact_timer.cancel()
            self.compact_timer = None
        for replica in self.replicas.values():
            replica.stop()
        self.replicas.clear()
        for consumer in self.consumer_replicas.values():
            consumer.stop()
        self.consumer_replicas.clear()
        self.client.close()
        self.subs.clear()
        if self.node is not None:
            self.node.close()

    # The transport.

    def _on_msg(self, subject: bytes, reply: bytes | None, headers: bytes | None, payload: bytes) -> None:
        node = self.node
        if node is None:
            return
        where = reply.decode("latin-1") if reply else ""  # latin-1: any bytes (the codec drops the odd ones)
        node.receive(subject.decode("latin-1"), where, payload, self.server.loop.time())
        self._pump()

    def _on_timer(self) -> None:
        self.timer = None
        self._pump()

    def _on_compact_timer(self) -> None:
        if self.applier is not None:
            self.applier.timer()
        self.compact_timer = self.server.loop.call_later(COMPACT_INTERVAL, self._on_compact_timer)

    def _pump(self) -> None:
        """Tick the node, then carry out what it asks: subscriptions, messages out, committed entries."""
        node = self.node
        if node is None:
            return
        loop = self.server.loop
        if not self.routed:
            self.recovering()  # noted when it happens, not when healthz next asks
        due = drive_node(self.client, node, self.subs, self._on_msg, loop.time())
        if self.applier is not None:
            committed = node.take_applied()
            self.applier.apply(committed)
            if committed:
                self._place_replicas()
                self._place_consumer_replicas()
            if not self.swept and self._caught_up():
                self._sweep_orphans()
        self.timer = rearm(loop, self.timer, due, self._on_timer)

    # Stream replicas.

    def _place_replicas(self) -> None:
        """Follow the stream assignments naming this server: a replica for each replicated one, its peers
        following the assignment's, stopped (its data removed) when its stream is deleted or moved off this
        server. What it cannot serve it refuses in the log: a stream whose only peer it is (it would have
        to lead; a replica it held keeps its data), single-replica consumers."""
        node, applier = self.node, self.applier
        if node is None or applier is None:
            return
        ours = node.id
        wanted: dict[str, dict[str, Any]] = {}
        for key, sa in applier.state.streams.items():
            group = sa.get("group") or {}
            peers = [str(p) for p in group.get("peers") or ()]
            if ours not in peers:
                continue
            name = str(group.get("name") or "")
            if len(peers) < 2:
                what = f"stream {key[1]!r}: a single replica on pynatsd would have to lead it"
                if self._refuse(name, what) and _fresh(sa):
                    self._answer_refused(
                        STREAM_RESULT, {"account": key[0], "stream": key[1]}, "stream_create"
                    )
                if name in self.replicas:  # scaled down to this server alone: the only copy, kept
                    wanted[name] = sa
                continue
            wanted[name] = sa
            for consumer, ca in applier.state.consumers.get(key, {}).items():
                cpeers = (ca.get("group") or {}).get("peers") or ()
                if ours not in cpeers:
                    continue
                if len(cpeers) > 1:  # a follower replica (_place_consumer_replicas)
                    continue
                what = f"consumer {key[1]} > {consumer}: pynatsd does not serve consumers"
                if self._refuse(f"{name}/{consumer}", what) and _fresh(ca):
                    result = {"account": key[0], "stream": key[1], "consumer": consumer}
                    self._answer_refused(CONSUMER_RESULT, result, "consumer_create")
        for name in self.replicas.keys() - wanted.keys():
            self.replicas.pop(name).stop(remove=True)
        for name, sa in wanted.items():
            replica = self.replicas.get(name)
            if replica is None:
                try:
                    self.replicas[name] = StreamReplica(
                        self.server, self.client, replica_directory(self.replica_dir, name), sa, ours
                    )
                except (OSError, KeyError, TypeError, ValueError) as e:
                    self._refuse(name, f"stream {sa['stream'].get('name')!r}: replica not started: {e}")
            else:
                self._follow_assignment(replica, sa)

    def _caught_up(self) -> bool:
        """Following a meta leader whose log this member holds and applied up to its end (no catch-up
        under way): its assignments are the cluster's."""
        node = self.node
        return bool(
            node is not None
            and node.leader
            and node.leader != node.id
            and node.catchup is None
            and node.pindex > 0
            and node.applied == node.commit == node.pindex
        )

    def _sweep_orphans(self) -> None:
        """Remove the replica directories of groups no assignment places here: streams deleted or moved off
        this server while it was down, whose removal it learnt from a snapshot or never saw committed
        (nats-server deletes such orphans once it is current with its meta leader). A replica assigned
        here that did not start keeps its data."""
        self.swept = True
        node, applier = self.node, self.applier
        if node is None or applier is None:
            return
        ours = node.id
        assignments = [*applier.state.streams.values()]
        for consumers in applier.state.consumers.values():
            assignments.extend(consumers.values())
        assigned = {
            str((a.get("group") or {}).get("name"))
            for a in assignments
            if ours in ((a.get("group") or {}).get("peers") or ())
        }
        try:
            found = [d for d in self.replica_dir.iterdir() if d.is_dir()]
        except OSError:
            return  # no replica was ever placed here
        for directory in found:
            hosted = directory.name in self.replicas or directory.name in self.consumer_replicas
            if not hosted and directory.name not in assigned:
                log.info("JetStream cluster member: replica of %s removed: not assigned here", directory.name)
                shutil.rmtree(directory, ignore_errors=True)

    def _follow_assignment(self, replica: GroupFollower, sa: dict[str, Any]) -> None:
        """A hosted stream's or consumer's assignment changed and still names this server (nats-server's
        update on a member that stays): a changed peer set (scale up or down, a peer removed and replaced)
        is taken as the meta leader's word. The group's own membership follows its log's peer add and
        remove entries, which the replica's node applies; a member removed from it keeps following until
        the assignment drops it too, as nats-server's does."""
        if sa is replica.assignment:
            return
        peers = [str(p) for p in sa["group"]["peers"]]
        if sorted(peers) != sorted(replica.peers):
            log.info("JetStream cluster replica of group %s: peers now %s", replica.group, ", ".join(peers))
        replica.assignment, replica.peers = sa, peers

    def _place_consumer_replicas(self) -> None:
        """A follower replica for each replicated consumer whose group names this server, updated when its
        assignment changes, stopped (its data removed) when the consumer or its stream is deleted."""
        node, applier = self.node, self.applier
        if node is None or applier is None:
            return
        wanted: dict[str, dict[str, Any]] = {}
        for consumers in applier.state.consumers.values():
            for ca in consumers.values():
                group = ca.get("group") or {}
                peers = [str(p) for p in group.get("peers") or ()]
                if node.id in peers and len(peers) > 1:
                    wanted[str(group.get("name") or "")] = ca
        for name in self.consumer_replicas.keys() - wanted.keys():
            self.consumer_replicas.pop(name).stop(remove=True)
        for name, ca in wanted.items():
            replica = self.consumer_replicas.get(name)
            what = f"consumer {ca.get('stream')} > {ca.get('name')}"
            if replica is None:
                try:
                    self.consumer_replicas[name] = ConsumerReplica(
                        self.server, self.client, replica_directory(self.replica_dir, name), ca, node.id
                    )
                except (OSError, KeyError, TypeError, ValueError) as e:
                    self._refuse(name, f"{what}: replica not started: {e}")
                continue
            self._follow_assignment(replica, ca)
            replica.update(ca)

    def _refuse(self, key: str, what: str) -> bool:
        """Log what an assignment asks that this member does not serve, once; True the first time."""
        if key in self.refused:
            return False
        self.refused[key] = what
        log.error("JetStream cluster member: %s", what)
        return True

    def _answer_refused(self, subject: bytes, result: dict[str, Any], kind: str) -> None:
        """Tell the meta leader, as a nats-server member that failed to create an asset does: it answers the
        client with the error (and drops a fresh stream assignment, or places it again elsewhere)."""
        response = {"type": f"io.nats.jetstream.api.v1.{kind}_response", "error": INSUFFICIENT_RESOURCES}
        result["create_response" if kind == "stream_create" else "response"] = response
        self.client.publish(subject, None, None, json.dumps(result).encode())

    def jetstream_statsz(self) -> dict[str, Any]:
        """The `jetstream` block of this server's STATSZ (nats-server's JetStreamVarz config and stats), which
        makes nats-server's meta leader select it for stream peers. It reports all its storage reserved:
        a stream with one replica goes to a nats-server with room (the leader places by available storage),
        for pynatsd does not lead streams; a replicated one counts it among its peers."""
        limits = {"max_memory": self.max_memory, "max_storage": self.max_storage}
        store = sum(r.store.bytes for r in self.replicas.values() if isinstance(r.store, FileStore))
        memory = sum(r.store.bytes for r in self.replicas.values() if not isinstance(r.store, FileStore))
        stats = {
            "memory": memory,
            "storage": store,
            "reserved_memory": self.max_memory,
            "reserved_storage": self.max_storage,
            "accounts": len({service_account(r.assignment.get("client")) for r in self.replicas.values()}),
            "ha_assets": len(self.replicas) + len(self.consumer_replicas) + 1,  # and the meta group
            "api": {"level": 0, "total": 0, "errors": 0},
        }
        return {"config": limits, "stats": stats}  # no store_dir: nats-server leaves its path out too

    # What the server shows.

    def leaderless(self) -> bool:
        """No meta leader, for longer than nats-server waits before it says so (see LEADERLESS_AFTER)."""
        node = self.node
        if node is None:
            return False
        return not node.leader and self.server.loop.time() - self.started > LEADERLESS_AFTER

    def recovering(self) -> bool:
        """nats-server's "still recovering meta layer": its RAFT nodes start only once the server has a
        route, so until one came up the meta group has not replayed its log."""
        if not self.routed and self.peer_names():
            self.routed = True
        return not self.routed

    def groups(self) -> Iterator[tuple[str, str, RaftNode]]:
        """Every RAFT group this server is a member of, as (account, group name, node), for /raftz; the
        meta group's account is the system account (nats-server's accName for it)."""
        if self.node is not None:
            yield self.system_account, META_GROUP, self.node
        for group, replica in self.replicas.items():  # a stream group's account is the stream's
            yield service_account(replica.assignment.get("client")), group, replica.node
        for group, consumer in self.consumer_replicas.items():  # and a consumer group's the consumer's
            yield service_account(consumer.assignment.get("client")), group, consumer.node

    def server_names(self) -> dict[str, str]:
        """Peer id -> server name of the cluster's nodes this server knows (its routes, and itself)."""
        names = {peer_id(name): name for name in self.peer_names()}
        names[peer_id(self.server.server_name)] = self.server.server_name
        return names

    def cluster_info(self) -> dict[str, Any]:
        """/jsz's `meta_cluster` as nats-server shows it on a member that is not the leader: every other
        member (ourselves too while leaderless), the leader current when heard from within two heartbeats,
        the others not (a follower does not track them), offline when no route names them."""
        node = self.node
        assert node is not None
        names = self.server_names()
        cluster = self.server.cluster
        info: dict[str, Any] = {"name": cluster.name if cluster is not None else ""}
        if node.leader:
            info["leader"] = names.get(node.leader, "")
        now = self.server.loop.time()
        replicas = []
        for pid, seen in node.members.items():
            if pid == node.id and node.leader:
                continue
            ago = max(now - seen.last_seen, 0.0) if seen.last_seen > 0 else 0.0
            if pid == node.id:
                current = True
            elif pid == node.leader:
                current = ago <= 2 * node.timing.heartbeat
            else:
                current = False
            name = names.get(pid)
            replica: dict[str, Any] = {
                "name": name or f"Server name unknown at this time (peerID: {pid})",
                "current": current,
            }
            if name is None:
                replica["offline"] = True
            replica["active"] = int(ago * 1e9)
            replica["peer"] = pid
            replicas.append(replica)
        if node.leader:
            info["peer"] = node.leader
        if replicas:
            info["replicas"] = replicas
        info["cluster_size"] = node.cluster_size
        info["quorum_needed"] = node.quorum
        info["pending"] = info["pending_requests"] = info["pending_infos"] = 0
        if self.applier is not None:
            info["snapshot"] = self.applier.snapshot_stats()
        return info
