"""The sans-IO RAFT node in a seeded randomized simulation (tests/raft/sim.py): elections, partitions,
crashes and restarts, message loss, snapshots, stepdowns, a peer added and one removed. Invariants: at
most one leader per term; committed entries never lost, duplicated or reordered; after healing, every
node converges on every committed entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from pynatsd.raft.node import State
from tests.raft.sim import Sim

SEEDS = range(6)


def _chaos(sim: Sim, seconds: float) -> None:
    """Random faults, one decision a virtual second, with proposals in between."""
    for _ in range(int(seconds)):
        roll = sim.rng.random()
        peers = list(sim.ids)
        if roll < 0.05 and len(sim.nodes) > len(peers) // 2:
            sim.crash(sim.rng.choice(list(sim.nodes)))
        elif roll < 0.12:
            down = [p for p in peers if p not in sim.nodes]
            if down:
                sim.start(down[0], list(peers))
        elif roll < 0.16:
            minority = sim.rng.sample(peers, len(peers) // 2)
            sim.side = {p: (1 if p in minority else 0) for p in peers}
        elif roll < 0.22:
            sim.side = dict.fromkeys(peers, 0)
        elif roll < 0.24:
            leader = sim.leader()
            if leader is not None:
                leader.step_down()
        elif roll < 0.27:
            sim.snapshot(sim.rng.choice(peers))
        for _ in range(3):
            sim.propose()
        sim.run(1.0)
        sim.check_prefixes()


def _heal(sim: Sim) -> None:
    sim.side = dict.fromkeys(sim.ids, 0)
    sim.loss = 0.0
    for peer in sim.ids:
        if peer not in sim.nodes:
            sim.start(peer, list(sim.ids))
    sim.run(60.0)
    for _ in range(5):  # a last few entries, committed with everyone up
        sim.propose()
    sim.run(30.0)


def _converged(sim: Sim) -> None:
    sim.check_prefixes()
    values = [sim.machines[p].values for p in sim.ids]
    assert all(v == values[0] for v in values), "nodes did not converge"
    assert sim.committed <= set(values[0]), "a committed entry was lost"
    assert len([n for n in sim.nodes.values() if n.state == State.LEADER]) == 1


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("size", [3, 5])
def test_random_faults_keep_raft_safe(seed: int, size: int) -> None:
    sim = Sim(seed, size)
    sim.run(20.0)
    assert sim.leader() is not None, "no leader elected"
    _chaos(sim, 240)
    _heal(sim)
    _converged(sim)
    assert len(sim.committed) > 50  # the run did commit under the faults


def test_an_observer_votes_but_never_leads() -> None:
    """pynatsd's member of a nats-server meta group runs as an observer: with one of three members an
    observer, the group still elects (the observer's vote makes the quorum) and the observer never leads."""
    sim = Sim(3, 3)
    sim.observers = {sim.ids[0]}
    sim.crash(sim.ids[0])
    sim.start(sim.ids[0], list(sim.ids))
    sim.run(20.0)
    for _ in range(40):
        leader = sim.leader()
        assert leader is None or leader.id != sim.ids[0]
        if leader is not None and sim.rng.random() < 0.3:
            sim.crash(leader.id)  # the other voter and the observer must elect the survivor
            sim.run(15.0)
            survivor = sim.leader()
            assert survivor is not None and survivor.id not in (leader.id, sim.ids[0])
            sim.start(leader.id, list(sim.ids))
        sim.propose()
        sim.run(2.0)
    assert all(leader != sim.ids[0] for leader in sim.leaders.values())
    _heal(sim)
    _converged(sim)


def test_restarts_from_files(tmp_path: Path) -> None:
    """Term, vote, log, snapshot and peers written by FileStorage and read back by restarted nodes."""
    sim = Sim(7, 3, directory=tmp_path)
    sim.run(20.0)
    _chaos(sim, 90)
    _heal(sim)
    _converged(sim)
    assert any((tmp_path / p / "tav.idx").exists() for p in sim.ids)


def test_peer_added_caught_up_and_removed() -> None:
    sim = Sim(seed=42, size=3, loss=0.0)
    sim.run(20.0)
    for _ in range(30):
        sim.propose()
    sim.run(5.0)
    leader = sim.leader()
    assert leader is not None
    sim.snapshot(leader.id)  # the newcomer starts from the leader's snapshot
    sim.add("peer0003")
    sim.run(20.0)
    leader = sim.leader()
    assert leader is not None and "peer0003" in leader.members and leader.quorum == 3
    for _ in range(10):
        sim.propose()
    sim.run(10.0)
    _converged(sim)
    victim = next(p for p in sim.ids if p != leader.id and p != "peer0003")
    assert leader.propose_remove_peer(victim)
    sim.run(10.0)
    assert victim not in leader.members and leader.quorum == 2
    sim.crash(victim)
    sim.ids.remove(victim)
    for _ in range(10):
        sim.propose()
    sim.run(10.0)
    _converged(sim)


@pytest.mark.parametrize("hands_over", [False, True])
def test_leader_transfer_to_an_observer(hands_over: bool) -> None:
    """A leader steps down preferring an observer (nats-server's stream leader does, asked to): one that
    hands over wins the election and passes the leadership on to a voter at once, before any election
    timeout; one that does not leaves the group leaderless until a voter's timeout (nats-server's)."""
    sim = Sim(seed=7, size=3, loss=0.0)
    observer = sim.ids[0]
    sim.observers.add(observer)
    sim.crash(observer)
    sim.start(observer, list(sim.ids))
    sim.nodes[observer].hands_over = hands_over
    sim.run(20.0)
    leader = sim.leader()
    assert leader is not None and leader.id != observer
    for _ in range(3):
        sim.propose()
    sim.run(1.0)
    term = leader.term
    leader.step_down(preferred=observer)
    sim.run(sim.nodes[observer].timing.min_election / 2)  # well before any voter's election timeout
    successor = sim.leader()
    if hands_over:
        assert successor is not None and successor.id not in (observer, leader.id), successor
        assert sim.leaders[term + 1] == observer and successor.term == term + 2
    else:
        assert successor is None or successor.term == term
    assert sim.nodes[observer].state != State.LEADER
    sim.run(20.0)
    final = sim.leader()
    assert final is not None and final.id != observer
    sim.check_prefixes()
