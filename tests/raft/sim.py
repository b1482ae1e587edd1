"""A seeded, virtual-time network of RaftNodes (pynatsd.raft.node): messages delayed, lost and cut by
partitions (but never reordered, as on a route); nodes crashed and restarted from their storage; the
invariants checked after every step."""

from __future__ import annotations

import heapq
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from pynatsd.raft.codec import EntryType
from pynatsd.raft.node import RaftNode, State
from pynatsd.raft.storage import FileStorage, MemoryStorage, Storage

GROUP = "sim"
TICK = 0.1


@dataclass
class Machine:
    """A node's state machine: the normal entries' values in commit order, and the index applied."""

    values: list[int] = field(default_factory=list)
    applied: int = 0


class Sim:
    def __init__(self, seed: int, size: int, loss: float = 0.05, directory: Path | None = None) -> None:
        """`directory`: each node keeps its state in files there (FileStorage), re-read at each restart;
        otherwise in memory that outlives the node (MemoryStorage)."""
        self.directory = directory
        self.observers: set[str] = set()  # started as observers: they follow and vote, never campaign
        self.rng = random.Random(seed)
        self.loss = loss
        self.now = 0.0
        self.ids = [f"peer{i:04d}" for i in range(size)]
        self.storages: dict[str, Storage] = {i: MemoryStorage() for i in self.ids}
        self.machines = {i: Machine() for i in self.ids}
        self.nodes: dict[str, RaftNode] = {}
        self.side: dict[str, int] = {i: 0 for i in self.ids}  # nodes talk only within a side
        self.queue: list[tuple[float, int, str, str, str, bytes]] = []
        self.seq = 0
        self.link: dict[tuple[str, str], float] = {}
        self.leaders: dict[int, str] = {}  # term -> the one leader it had
        self.committed: set[int] = set()
        self.next_value = 0
        for i in self.ids:
            self.start(i, list(self.ids))

    def start(self, peer: str, members: list[str]) -> None:
        rng = random.Random(self.rng.random())
        if self.directory is not None:
            self.storages[peer] = FileStorage(self.directory / peer)
        self.machines[peer] = Machine()
        observer = peer in self.observers
        self.nodes[peer] = RaftNode(
            GROUP, peer, self.storages[peer], members, self.now, rng, observer=observer
        )
        self._drain(peer)

    def crash(self, peer: str) -> None:
        self.nodes.pop(peer).close()

    def add(self, peer: str) -> None:
        """A new, empty member: it follows, is caught up, and the leader proposes it as a peer."""
        self.ids.append(peer)
        self.storages[peer] = MemoryStorage()
        self.side[peer] = 0
        self.start(peer, [peer, *(p for p in self.ids if p != peer)])

    def leader(self) -> RaftNode | None:
        live = [n for n in self.nodes.values() if n.state == State.LEADER]
        return max(live, key=lambda n: n.term) if live else None

    def propose(self) -> None:
        up = list(self.nodes.values())
        if up:
            self.next_value += 1
            self.rng.choice(up).propose(json.dumps(self.next_value).encode())

    def run(self, seconds: float) -> None:
        end = self.now + seconds
        while self.now < end:
            self.now = round(self.now + TICK, 6)
            while self.queue and self.queue[0][0] <= self.now:
                at, _, src, target, subject, reply_data = heapq.heappop(self.queue)
                node = self.nodes.get(target)
                if node is None or self.side[src] != self.side[target]:
                    continue
                reply, _, data = reply_data.partition(b"\n")
                if subject in node.subscriptions():
                    node.receive(subject, reply.decode(), data, at)
                self._drain(target)
            for peer in list(self.nodes):
                self.nodes[peer].tick(self.now)
                self._drain(peer)

    def _drain(self, peer: str) -> None:
        node = self.nodes.get(peer)
        if node is None:
            return
        for out in node.take_outbox():
            for target, other in self.nodes.items():
                if target == peer or out.subject not in other.subscriptions():
                    continue
                if self.rng.random() < self.loss:
                    continue
                self.seq += 1
                # One route between two servers: delayed, perhaps lost, never reordered.
                at = max(self.now + self.rng.uniform(0.001, 0.05), self.link.get((peer, target), 0.0))
                self.link[peer, target] = at
                packed = out.reply.encode() + b"\n" + out.data
                heapq.heappush(self.queue, (at, self.seq, peer, target, out.subject, packed))
        machine = self.machines[peer]
        for done in node.take_applied():
            for e in done.entries:
                if e.type == EntryType.SNAPSHOT:
                    machine.values = json.loads(e.data)
                elif e.type == EntryType.NORMAL and done.index > machine.applied:
                    machine.values.append(json.loads(e.data))
            machine.applied = max(machine.applied, done.index)
        self.check(node)

    def check(self, node: RaftNode) -> None:
        """At most one leader per term; every state machine's values a prefix of every other's."""
        if node.state == State.LEADER:
            first = self.leaders.setdefault(node.term, node.id)
            assert first == node.id, f"two leaders in term {node.term}: {first} and {node.id}"
        values = self.machines[node.id].values
        assert len(values) == len(set(values)), f"{node.id} applied a value twice: {values}"
        self.committed.update(values)

    def check_prefixes(self) -> None:
        lists = [m.values for p, m in self.machines.items() if p in self.nodes]
        longest = max(lists, key=len)
        for values in lists:
            assert values == longest[: len(values)], "committed entries differ or are reordered"

    def snapshot(self, peer: str) -> None:
        node = self.nodes.get(peer)
        if node is not None and node.applied:
            machine = self.machines[peer]
            node.install_snapshot(json.dumps(machine.values).encode())
