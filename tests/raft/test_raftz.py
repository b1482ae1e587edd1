"""/raftz, /healthz's JetStream options and their `$SYS.REQ.SERVER` requests on a server in a RAFT group,
beside nats-server 2.15.1: one mixed cluster (pynatsd and two nats-server, JetStream on all three) where
pynatsd's answers are compared with the nats-server follower's, two lonely cluster members (one of each:
their only route leads nowhere), and two servers outside any cluster."""

from __future__ import annotations

import asyncio
import json
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from pynatsd.monitor import raftz
from pynatsd.raft.codec import META_GROUP, peer_id
from pynatsd.raft.node import State
from tests.cluster.harness import Cluster, Node, node_config, wait_until
from tests.conftest import need_tool
from tests.raft.sim import Sim
from tests.raft.test_codec_live import CONFIG
from tests.raft.test_meta_live import _start
from tests.servers import ServerProcess, free_port, nats_server_binary, start_server

pytestmark = pytest.mark.timeout(180)

WAIT = 60.0  # elections take 4-9 s (nats-server's timeouts), more on a loaded machine
KINDS = ("pynatsd", "nats-server")
# RaftzGroup's fields nats-server always writes, and those it omits when empty (monitor.go).
ALWAYS = {
    "id",
    "state",
    "size",
    "quorum_needed",
    "committed",
    "applied",
    "ever_had_leader",
    "term",
    "pterm",
    "pindex",
    "system_account",
    "traffic_account",
    "ipq_proposal_len",
    "ipq_entry_len",
    "ipq_resp_len",
    "ipq_apply_len",
    "wal",
    "peers",
}
OMITTED_WHEN_EMPTY = {
    "observer",
    "paused",
    "overrun",
    "overrun_count",
    "catching_up",
    "leader",
    "leader_since",
    "voted_for",
    "wal_error",
}
WAL_KEYS = {"messages", "bytes", "first_seq", "first_ts", "last_seq", "last_ts", "consumer_count"}
PEER_KEYS = {"name", "known"}
PEER_OPTIONAL = {"last_replicated_index", "last_seen"}


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _raftz(node: Node, query: str = "") -> dict[str, Any]:
    status, body = fetch(f"{node.monitor_url}/raftz{query}")
    assert status == 200, (node, query, status, body)
    result: dict[str, Any] = json.loads(body)
    return result


def _meta_group(node: Node) -> dict[str, Any]:
    group: dict[str, Any] = _raftz(node)["SYS"][META_GROUP]
    return group


def _check_shape(group: dict[str, Any]) -> None:
    """A RaftzGroup as nats-server writes it: its always-present fields, optional ones only when set."""
    assert ALWAYS <= group.keys() <= ALWAYS | OMITTED_WHEN_EMPTY, group.keys() ^ ALWAYS
    assert all(group[key] for key in group.keys() & OMITTED_WHEN_EMPTY), group
    assert group["wal"].keys() == WAL_KEYS
    for peer in group["peers"].values():
        assert PEER_KEYS <= peer.keys() <= PEER_KEYS | PEER_OPTIONAL, peer


def _same_types(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    for key in ours.keys() & theirs.keys():
        assert type(ours[key]) is type(theirs[key]), (key, ours[key], theirs[key])
        if isinstance(ours[key], dict) and key != "peers":
            _same_types(ours[key], theirs[key])


@pytest.fixture(scope="module")
def mixed() -> Iterator[Cluster]:
    """pynatsd and two nats-server, JetStream on each, settled: one meta leader (a nats-server), which has
    replicated its whole log to pynatsd."""
    need_tool(nats_server_binary() is not None, "nats-server")
    with tempfile.TemporaryDirectory(prefix="pynatsd-raftz-") as workdir:
        cluster = _start(["pynatsd", "nats-server", "nats-server"], Path(workdir), [True, True, True])
        try:
            wait_until(
                lambda: _settled(cluster), WAIT, lambda: f"meta group not settled: {cluster.describe()}"
            )
            yield cluster
        finally:
            cluster.stop_all()


def _settled(cluster: Cluster) -> bool:
    try:
        groups = {node.name: _meta_group(node) for node in cluster.nodes}
    except (OSError, ValueError, KeyError, AssertionError):
        return False
    leaders = {group.get("leader", "") for group in groups.values()}
    if len(leaders) != 1 or "" in leaders:
        return False
    leader = next(g for g in groups.values() if g["state"] == "LEADER")
    ours = groups[cluster[0].name]
    seen = leader["peers"].get(ours["id"], {})
    return bool(
        ours["committed"] == leader["committed"]
        and seen.get("last_replicated_index") == leader["pindex"]
        and ours["applied"] == ours["committed"]
    )


def _follower(cluster: Cluster) -> Node:
    """The nats-server that is not the meta leader: the reference for pynatsd's (a follower's) view."""
    return next(n for n in cluster.nodes[1:] if _meta_group(n)["state"] == "FOLLOWER")


def test_meta_group_as_nats_server_shows_it(mixed: Cluster) -> None:
    ours_node, theirs_node = mixed[0], _follower(mixed)
    ours, theirs = _raftz(ours_node), _raftz(theirs_node)
    assert ours.keys() == theirs.keys() == {"SYS"}  # without `acc`: the system account's groups
    assert ours["SYS"].keys() == theirs["SYS"].keys() == {META_GROUP}
    mine, reference = ours["SYS"][META_GROUP], theirs["SYS"][META_GROUP]
    for group in (mine, reference):
        _check_shape(group)
    _same_types(mine, reference)
    assert mine["id"] == peer_id(ours_node.name)
    assert mine["observer"] is True  # pynatsd votes but never campaigns
    for key in ("state", "size", "quorum_needed", "term", "leader", "ever_had_leader", "traffic_account"):
        assert mine[key] == reference[key], key
    assert mine["system_account"] is reference["system_account"] is True
    assert "leader_since" not in mine
    by_id = {peer_id(n.name): n.name for n in mixed.nodes}
    assert {mine["id"], *mine["peers"]} == {reference["id"], *reference["peers"]} == by_id.keys()
    for pid, peer in mine["peers"].items():
        assert peer["name"] == by_id[pid]
        assert peer["known"] is True
    assert "last_seen" in mine["peers"][mine["leader"]]  # a follower tracks its leader
    # The leader's side: pynatsd known, caught up to the last index.
    leader = _meta_group(next(n for n in mixed.nodes if peer_id(n.name) == mine["leader"]))
    assert leader["committed"] == mine["committed"] == mine["applied"]
    assert leader["peers"][mine["id"]] | {"last_seen": ""} == {
        "name": ours_node.name,
        "known": True,
        "last_replicated_index": leader["pindex"],
        "last_seen": "",
    }


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (f"?group={META_GROUP}", {"SYS": {META_GROUP}}),
        (f"?acc=SYS&group={META_GROUP}", {"SYS": {META_GROUP}}),
        ("?group=nope", {}),
        ("?acc=SYS&group=nope", {}),
        ("?acc=A", {}),  # no stream groups in this module
        ("?acc=nope", {}),
    ],
)
def test_filters(mixed: Cluster, query: str, expected: dict[str, set[str]]) -> None:
    for node in (mixed[0], _follower(mixed)):
        got = _raftz(node, query)
        assert {acc: set(groups) for acc, groups in got.items()} == expected, (node, query)


async def _replies(url: str, subject: str, payload: bytes, count: int) -> list[dict[str, Any]]:
    """Up to `count` answers to a system request (those arriving within a few seconds)."""
    async with await nats.connect(url, user="sys", password="sys") as nc:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish(subject, payload, reply=inbox)
        answers = []
        try:
            for _ in range(count):
                msg = await sub.next_msg(timeout=5)
                answers.append(json.loads(msg.data))
        except nats.errors.TimeoutError:
            pass
        return answers


async def test_system_request(mixed: Cluster) -> None:
    """`$SYS.REQ.SERVER.PING.RAFTZ` is answered by every server, pynatsd included; its options filter, and
    a wrongly typed one is refused as nats-server refuses it."""
    url = mixed[0].url
    answers = await _replies(url, "$SYS.REQ.SERVER.PING.RAFTZ", b"", 3)
    assert {a["server"]["name"] for a in answers} == {n.name for n in mixed.nodes}
    for answer in answers:
        assert set(answer["data"]["SYS"]) == {META_GROUP}, answer
        _check_shape(answer["data"]["SYS"][META_GROUP])
    outcomes = []
    for node in (mixed[0], _follower(mixed)):
        subject = f"$SYS.REQ.SERVER.{node.server_id()}.RAFTZ"
        (filtered,) = await _replies(url, subject, b'{"group": "nope"}', 1)
        assert filtered["data"] == {}, node
        (wrong,) = await _replies(url, subject, b'{"account": 5}', 1)
        outcomes.append(wrong["error"])
    assert outcomes[0] == outcomes[1]
    assert outcomes[0]["code"] == 400


HEALTHZ_OK = ["", "?js-enabled-only=true", "?js-server-only=true", "?js-meta-only=true", "?details=true"]


def test_healthz_options_in_cluster(mixed: Cluster) -> None:
    for node in (mixed[0], _follower(mixed)):
        for query in HEALTHZ_OK:
            assert fetch(f"{node.monitor_url}/healthz{query}") == (200, '{"status":"ok"}'), (node, query)
    ours, theirs = (
        fetch(f"{n.monitor_url}/healthz?js-meta-only=maybe") for n in (mixed[0], _follower(mixed))
    )
    assert ours == theirs
    assert ours[0] == 400


JSZ_QUERIES = [
    "",
    "?accounts=true",
    "?streams=true",
    "?consumers=true&config=true",
    "?acc=A",
    "?acc=nope&streams=true",
]


@pytest.mark.parametrize("query", JSZ_QUERIES)
def test_member_jsz_as_nats_server(mixed: Cluster, query: str) -> None:
    """A member hosting no stream: /jsz as nats-server's for such a node (its JetStream settings, the
    accounts with JetStream and their details when asked, one RAFT group)."""
    ours, theirs = (node.get(f"/jsz{query}") for node in (mixed[0], _follower(mixed)))
    assert list(ours) == list(theirs), query  # the same fields, in nats-server's order
    assert ours["config"].keys() == theirs["config"].keys()
    for key in ("accounts", "ha_assets", "limits", "streams", "consumers", "total"):
        assert ours[key] == theirs[key], (query, key)
    assert ours.get("account_details") == theirs.get("account_details"), query
    assert ours["config"]["store_dir"].endswith("/jetstream")


@pytest.fixture(scope="module")
def lonely() -> Iterator[dict[str, ServerProcess]]:
    """One member of each kind alone in its cluster (its route leads nowhere), JetStream on: no meta
    leader, ever."""
    need_tool(nats_server_binary() is not None, "nats-server")
    with tempfile.TemporaryDirectory(prefix="pynatsd-raftz-lonely-") as workdir:
        servers: dict[str, ServerProcess] = {}
        try:
            for kind in KINDS:
                conf = Path(workdir) / f"{kind}.conf"
                store = Path(workdir) / kind
                conf.write_text(
                    node_config(f"lonely-{kind}", f"solo-{kind}", free_port(), free_port())
                    + CONFIG
                    + f"jetstream {{ store_dir: '{store}' }}\n"
                )
                servers[kind] = start_server(kind, ["-c", str(conf)], http_port=free_port())
            yield servers
        finally:
            for server in servers.values():
                server.stop()


LONELY_HEALTHZ = [
    "",
    "?js-meta-only=true",
    "?details=true",
    "?js-server-only=true",
    "?js-enabled-only=true",
    "?js-enabled=true&details=true",
]


def test_lonely_member_healthz(lonely: dict[str, ServerProcess]) -> None:
    """Before any route came up the meta layer is still recovering: 503 with nats-server's words (and no
    status_code in the HTTP body), but for the options that stop before the meta check."""
    for query in LONELY_HEALTHZ:
        ours, theirs = (fetch(f"http://127.0.0.1:{lonely[k].http_port}/healthz{query}") for k in KINDS)
        assert ours == theirs, query
    assert ours == (200, '{"status":"ok"}')
    status, body = fetch(f"http://127.0.0.1:{lonely['pynatsd'].http_port}/healthz")
    assert (status, json.loads(body)) == (
        503,
        {"status": "unavailable", "error": "JetStream is still recovering meta layer"},
    )


async def test_lonely_member_system_healthz(lonely: dict[str, ServerProcess]) -> None:
    """`$SYS.REQ.SERVER.PING.HEALTHZ` honours the healthz options in its body, as nats-server does."""
    for options in (b"", b'{"js-server-only": true}', b'{"js-enabled-only": true}', b'{"details": true}'):
        datas = []
        for kind in KINDS:
            (answer,) = await _replies(
                f"nats://sys:sys@127.0.0.1:{lonely[kind].port}", _PING_HEALTHZ, options, 1
            )
            datas.append(answer["data"])
        assert datas[0] == datas[1], options
        assert datas[0]["status_code"] == (503 if options in (b"", b'{"details": true}') else 200)


_PING_HEALTHZ = "$SYS.REQ.SERVER.PING.HEALTHZ"


def test_lonely_member_raftz(lonely: dict[str, ServerProcess]) -> None:
    """The meta group before any leader: no leader, none ever, no vote, an empty log."""
    groups = []
    for kind in KINDS:
        status, body = fetch(f"http://127.0.0.1:{lonely[kind].http_port}/raftz")
        assert status == 200, body
        got = json.loads(body)
        assert set(got) == {"SYS"} and set(got["SYS"]) == {META_GROUP}
        groups.append(got["SYS"][META_GROUP])
    for group in groups:
        _check_shape(group)
        assert group["ever_had_leader"] is False
        assert not {"leader", "leader_since", "voted_for"} & group.keys()
        assert (group["committed"], group["term"], group["wal"]["messages"]) == (0, 0, 0)
    _same_types(groups[0], groups[1])
    assert groups[0]["id"] == peer_id("lonely-pynatsd")


async def _stream_with_consumer(port: int) -> None:
    async with await nats.connect(f"nats://127.0.0.1:{port}") as nc:
        await nc.jetstream().add_stream(name="RAFTZ", subjects=["raftz"])
        await nc.jetstream().add_consumer("RAFTZ", durable_name="C")


@pytest.fixture(scope="module")
def unclustered() -> Iterator[dict[str, ServerProcess]]:
    need_tool(nats_server_binary() is not None, "nats-server")
    with tempfile.TemporaryDirectory(prefix="pynatsd-raftz-single-") as workdir:
        servers: dict[str, ServerProcess] = {}
        try:
            for kind in KINDS:
                args = ["-js", "-sd", str(Path(workdir) / kind)]
                servers[kind] = start_server(kind, args, http_port=free_port())
                asyncio.run(_stream_with_consumer(servers[kind].port))
            yield servers
        finally:
            for server in servers.values():
                server.stop()


@pytest.mark.parametrize("query", ["", "?acc=$G", "?acc=x&group=y"])
def test_unclustered_server_has_no_raft_nodes(unclustered: dict[str, ServerProcess], query: str) -> None:
    ours, theirs = (fetch(f"http://127.0.0.1:{unclustered[k].http_port}/raftz{query}") for k in KINDS)
    assert ours == theirs == (404, raftz.NO_NODES)


def test_unclustered_jsz_account_details(unclustered: dict[str, ServerProcess]) -> None:
    """A single server's /jsz account details: the reservations of an account without limits as
    nats-server shows them (Go's uint64 of -1), and a stream's cluster block naming this server."""
    details = []
    for kind in KINDS:
        server = unclustered[kind]
        (detail,) = json.loads(fetch(f"http://127.0.0.1:{server.http_port}/jsz?streams=true")[1])[
            "account_details"
        ]
        name = json.loads(fetch(f"http://127.0.0.1:{server.http_port}/varz")[1])["server_name"]
        (stream,) = detail.pop("stream_detail")
        assert stream["cluster"] == {"leader": name}, kind
        details.append(detail)
    assert details[0] == details[1]
    assert details[0]["reserved_memory"] == details[0]["reserved_storage"] == (1 << 64) - 1


ASSET_HEALTHZ = [
    "?account=$G",
    "?account=nope",
    "?stream=RAFTZ",
    "?consumer=C",
    "?account=$G&consumer=C",
    "?account=$G&stream=RAFTZ",
    "?account=$G&stream=nope",
    "?account=$G&stream=RAFTZ&consumer=C",
    "?account=$G&stream=RAFTZ&consumer=nope",
    "?account=nope&stream=RAFTZ&details=true",
    "?stream=RAFTZ&details=true",
    "?account=$G&stream=nope&details=1",
    "?account=$G&stream=RAFTZ&consumer=nope&details=1",
    "?js-server-only=1&stream=RAFTZ",
    "?js-enabled-only=1&account=nope",
]


@pytest.mark.parametrize("query", ASSET_HEALTHZ)
def test_unclustered_healthz_assets(unclustered: dict[str, ServerProcess], query: str) -> None:
    """healthz's `account`, `stream` and `consumer`: each must be on this server (404 otherwise, 400
    without the one before it), as nats-server answers."""
    ours, theirs = (fetch(f"http://127.0.0.1:{unclustered[k].http_port}/healthz{query}") for k in KINDS)
    assert ours == theirs
    assert ours[0] != 200 or "nope" not in query or "enabled-only" in query, ours  # a missing one is never ok


@pytest.mark.parametrize(
    "query", ["?account=A", "?account=A&stream=S&details=true", "?js-meta-only=1&account=A"]
)
def test_member_healthz_assets(mixed: Cluster, query: str) -> None:
    """A cluster member's healthz looks for the account among the meta group's assignments (none here)."""
    ours, theirs = (fetch(f"{node.monitor_url}/healthz{query}") for node in (mixed[0], _follower(mixed)))
    assert ours == theirs
    assert ours[0] == (200 if "js-meta-only" in query else 404), ours


def test_leader_and_followers_in_a_group() -> None:
    """A group's leader shows when it became leader and what each follower has replicated; followers
    show the leader they follow (RaftNode in a simulated network: pynatsd's meta member never leads)."""
    sim = Sim(7, 3, loss=0.0)
    sim.run(20.0)
    leader = sim.leader()
    assert leader is not None
    for _ in range(3):
        sim.propose()
    sim.run(2.0)
    names = {pid: f"server-{pid}" for pid in sim.ids}
    ours = raftz._group(leader, names, "SYS", sim.now)
    _check_shape(ours)
    assert ours["state"] == "LEADER" and ours["leader"] == leader.id and ours["ever_had_leader"] is True
    assert "leader_since" in ours
    assert ours["wal"]["messages"] == ours["wal"]["last_seq"] == leader.pindex
    for pid, peer in ours["peers"].items():
        assert peer["name"] == names[pid] and peer["last_replicated_index"] == leader.pindex
    follower = next(n for n in sim.nodes.values() if n.state == State.FOLLOWER)
    theirs = raftz._group(follower, names, "SYS", sim.now)
    assert theirs["leader"] == leader.id and "leader_since" not in theirs and theirs["ever_had_leader"]
    sim.snapshot(follower.id)  # compacted through the applied index: an empty log after it
    wal = raftz.wal_state(follower)
    assert (wal["messages"], wal["first_seq"], wal["last_seq"]) == (0, follower.applied + 1, follower.applied)
