"""The meta member's stream replicas follow their assignments' peer sets (pynatsd.raft.member), in process:
a broker of its own, assignments set as the meta log would apply them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from pynatsd.base.options import Options
from pynatsd.broker.core import Broker
from pynatsd.raft.codec import peer_id
from pynatsd.raft.member import MetaMember, replica_directory

OTHERS = [peer_id(f"go{i}") for i in range(3)]


def _assignment(ours: str, peers: list[str]) -> dict[str, Any]:
    return {
        "client": {"acc": "A"},
        "stream": {"name": "S", "storage": "file", "num_replicas": len(peers)},
        "group": {"name": "S-R3F-test", "peers": peers, "store": "file"},
        "sync": "$JSC.SYNC.test",
    }


async def _peer_changes(store: Path) -> None:
    broker = Broker(Options(server_name="py0"))
    broker.loop = asyncio.get_running_loop()
    member = MetaMember(broker, "SYS", store, lambda: ["go0", "go1", "go2"])
    member.start()
    try:
        assert member.node is not None and member.applier is not None
        ours, streams = member.node.id, member.applier.state.streams
        streams["A", "S"] = _assignment(ours, [OTHERS[0], ours, OTHERS[1]])
        member._place_replicas()
        replica = member.replicas["S-R3F-test"]
        # A peer removed and replaced (peer remove, a move): the replica follows the new peer set.
        streams["A", "S"] = moved = _assignment(ours, [OTHERS[0], ours, OTHERS[2]])
        member._place_replicas()
        assert member.replicas["S-R3F-test"] is replica
        assert replica.peers == moved["group"]["peers"] and replica.assignment is moved
        assert not member.refused
        # Scaled down to this server alone, which would have to lead: refused, the only copy kept.
        streams["A", "S"] = _assignment(ours, [ours])
        member._place_replicas()
        assert list(member.refused) == ["S-R3F-test"]
        assert member.replicas.get("S-R3F-test") is replica and replica.dir.exists()
        # Moved off this server: the replica stops, its data removed.
        streams["A", "S"] = _assignment(ours, OTHERS)
        member._place_replicas()
        assert not member.replicas and not replica.dir.exists()
    finally:
        member.stop()


def test_replica_follows_its_peer_set(tmp_path: Path) -> None:
    asyncio.run(_peer_changes(tmp_path))


@pytest.mark.parametrize("group", ["..", "../x", "a/b", "", "S-R3F-\x00", "x" * 65])
def test_a_group_name_that_is_no_plain_name_gets_no_directory(tmp_path: Path, group: str) -> None:
    """A replica's directory is its group's name under the replica root: a name that would leave it (or
    is no name nats-server makes) is refused, whoever proposed the assignment."""
    with pytest.raises(ValueError):
        replica_directory(tmp_path, group)


def test_a_plain_group_name_is_one_directory_below_the_root(tmp_path: Path) -> None:
    assert replica_directory(tmp_path, "S-R3F-1a2B3c4D") == tmp_path / "S-R3F-1a2B3c4D"
    assert replica_directory(tmp_path, "_meta_") == tmp_path / "_meta_"
