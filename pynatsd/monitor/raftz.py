"""/raftz: the RAFT groups this server is a member of, as nats-server 2.15 shows them (monitor.go, Raftz):
account -> group name -> the node's state, its log (`wal`) and its peers.

The groups come from the JetStream cluster member (`MetaMember.groups()`: the meta group, and whatever
groups it holds besides), read through the nodes' public attributes. As nats-server: a server in no group
answers 404 "No Raft nodes registered"; without `acc` only the system account's groups are shown; a filter
matching nothing gives `{}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pynatsd.base.formats import go_duration, rfc3339nano

if TYPE_CHECKING:
    from pynatsd.node import Node
    from pynatsd.raft.node import RaftNode

NO_NODES = "No Raft nodes registered"
NOTHING_MATCHED = "No Raft nodes returned, check supplied filters"
GO_ZERO_TIME = "0001-01-01T00:00:00Z"
_NEVER_SEEN = -1e17  # below it, a peer's last_seen is RaftNode's "never"


class NotFound(Exception):
    """/raftz's 404, with nats-server's text."""


def registered(server: Node) -> bool:
    """Whether this server has RAFT nodes at all (nats-server registers them only in a JetStream cluster)."""
    return server.meta_member is not None


def raftz(server: Node, account: str = "", group: str = "") -> dict[str, dict[str, dict[str, Any]]] | None:
    """nats-server's Raftz: the groups of `account` (the system account when empty), of name `group` when
    given; None when there is no account to show (no system account and none asked for)."""
    member = server.meta_member
    account = account or (server.auth.system_account or "")
    if not account:
        return None
    status: dict[str, dict[str, dict[str, Any]]] = {}
    if member is None:
        return status
    names = member.server_names()
    now = server.loop.time()
    for acc, name, node in member.groups():
        if acc != account or (group and name != group):
            continue
        status.setdefault(acc, {})[name] = _group(node, names, member.system_account, now)
    return status


def http_raftz(server: Node, query: Mapping[str, str]) -> dict[str, dict[str, dict[str, Any]]]:
    """The HTTP endpoint's answer, or NotFound with nats-server's words."""
    if not registered(server):
        raise NotFound(NO_NODES)
    status = raftz(server, query.get("acc", ""), query.get("group", ""))
    if status is None:
        raise NotFound(NOTHING_MATCHED)
    return status


def _group(node: RaftNode, names: Mapping[str, str], system_account: str, now: float) -> dict[str, Any]:
    """One node's RaftzGroup (the fields nats-server omits when empty are left out the same way).
    pynatsd's nodes have no queues between the transport and the state machine: the ipq lengths are 0."""
    info: dict[str, Any] = {
        "id": node.id,
        "state": node.state.value.upper(),
        "size": node.cluster_size,
        "quorum_needed": node.quorum,
    }
    if node.observer:
        info["observer"] = True
    info["committed"] = node.commit
    info["applied"] = node.applied
    if node.catchup is not None:
        info["catching_up"] = True
    if node.leader:
        info["leader"] = node.leader
    if node.is_leader and node.leader_since is not None:
        info["leader_since"] = rfc3339nano(datetime.now(UTC) - timedelta(seconds=now - node.leader_since))
    info["ever_had_leader"] = node.ever_had_leader
    info["term"] = node.term
    if node.vote:
        info["voted_for"] = node.vote
    info["pterm"] = node.pterm
    info["pindex"] = node.pindex
    info["system_account"] = True  # its traffic goes over the system account, as nats-server's
    info["traffic_account"] = system_account
    for queue in ("proposal", "entry", "resp", "apply"):
        info[f"ipq_{queue}_len"] = 0
    info["wal"] = wal_state(node)
    change = node.membership_change
    peers: dict[str, dict[str, Any]] = {}
    for pid, seen in node.members.items():
        if pid == node.id:
            continue
        peer: dict[str, Any] = {"name": names.get(pid, ""), "known": change is None or change.peer != pid}
        if seen.last_index:
            peer["last_replicated_index"] = seen.last_index
        if seen.last_seen > _NEVER_SEEN:
            peer["last_seen"] = go_duration(max(now - seen.last_seen, 0.0))
        peers[pid] = peer
    info["peers"] = peers
    return info


def wal_state(node: RaftNode) -> dict[str, Any]:
    """The log as nats-server shows its WAL's stream state: the entries held, their bytes, the first and
    last index (after a compaction that left nothing, first = the snapshot's index + 1 and last = it).
    pynatsd's log stores no times: both timestamps are Go's zero time."""
    storage = node.storage
    first, last = storage.first_index(), storage.last_index()
    if not first:
        snapshot = storage.load_snapshot()
        last = snapshot.last_index if snapshot is not None else 0
        first = last + 1 if last else 0
    held = range(storage.first_index(), last + 1) if storage.first_index() else range(0)
    return {
        "messages": len(held),
        "bytes": sum(len(storage.entry(i) or b"") for i in held),
        "first_seq": first,
        "first_ts": GO_ZERO_TIME,
        "last_seq": last,
        "last_ts": GO_ZERO_TIME,
        "consumer_count": 0,
    }
