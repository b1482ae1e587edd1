"""Mirrors and sources of a stream on the other side of a leaf node link, through the `external` API prefix
of the hub's JetStream domain: the copies, their `Nats-Stream-Source` headers byte for byte, the info
blocks, and the catch-up after the hub restarts (nothing missed, nothing copied twice), as nats-server does
them; and a pynatsd leaf killed (-9) in the middle of a copy takes it up where its stored copies end."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nats
import pytest

from pynatsd.base.hashing import base62_sha256
from tests.leafnodes.conftest import TOPOLOGIES, track
from tests.leafnodes.test_jetstream_domains import _until_answered, hub_config, leaf_config
from tests.servers import ServerProcess, free_port, require, start_server

EXTERNAL = {"api": "$JS.hub.API", "deliver": "hub.deliver"}
COPIES = {
    "MIR": {"mirror": {"name": "ORIGIN", "external": EXTERNAL}},
    "SRC": {"sources": [{"name": "ORIGIN", "external": EXTERNAL}]},
    "SRCA": {"sources": [{"name": "ORIGIN", "filter_subject": "o.a", "external": EXTERNAL}]},
    "MIRB": {"mirror": {"name": "ORIGIN", "filter_subject": "o.b", "external": EXTERNAL}},
    # Caught up, it answers the origin's direct gets on its own server (the origin has none).
    "MIRD": {"mirror": {"name": "ORIGIN", "external": EXTERNAL}, "mirror_direct": True},
    "SRCT": {
        "sources": [
            {"name": "ORIGIN", "subject_transforms": [{"src": "o.b", "dest": "t.b"}], "external": EXTERNAL}
        ]
    },
}


class Pair:
    """A hub (JetStream domain `hub`) and a leaf (domain `leaf`) with their configs, restartable."""

    def __init__(self, topology: str, directory: Path, accounts: bool = False) -> None:
        self.hub_kind, self.leaf_kind = TOPOLOGIES[topology]
        leaf_port = free_port()
        self.hub_conf = directory / "hub.conf"
        self.leaf_conf = directory / "leaf.conf"
        if accounts:
            self.hub_conf.write_text(ACCOUNTS_HUB % (directory / "hub-store", leaf_port))
            self.leaf_conf.write_text(ACCOUNTS_LEAF % (directory / "leaf-store", leaf_port))
        else:
            self.hub_conf.write_text(hub_config(directory / "hub-store", leaf_port))
            self.leaf_conf.write_text(leaf_config(directory / "leaf-store", leaf_port, True))
        self.hub = start_server(self.hub_kind, ["-c", str(self.hub_conf)])
        self.leaf = start_server(self.leaf_kind, ["-c", str(self.leaf_conf)])

    def restart_hub(self) -> None:
        self.hub.stop()
        self.hub = start_server(self.hub_kind, ["-c", str(self.hub_conf)], port=self.hub.port)

    def restart_leaf(self, sig: int) -> None:
        self.leaf.stop(sig)
        self.leaf = start_server(self.leaf_kind, ["-c", str(self.leaf_conf)], port=self.leaf.port)

    def stop(self) -> None:
        self.leaf.stop()
        self.hub.stop()


# The hub's account A exports its JetStream API and deliveries, B imports them (nats-server's documented
# sourcing across accounts); the leaf's account L is B on the hub, its streams copy A's through JS.A.API.
ACCOUNTS_HUB = """
jetstream { store_dir: "%s", domain: hub }
accounts {
  A: { jetstream: enabled, users: [{user: a, password: a}],
       exports: [{service: "$JS.API.>"}, {service: "$JS.FC.>"}, {stream: "deliver.A.>"}] }
  B: { users: [{user: b, password: b}],
       imports: [{service: {account: A, subject: "$JS.API.>"}, to: "JS.A.API.>"},
                 {service: {account: A, subject: "$JS.FC.>"}},
                 {stream: {account: A, subject: "deliver.A.>"}}] }
}
leafnodes { listen: 127.0.0.1:%d, authorization { users [ {user: lb, password: lb, account: B} ] } }
"""
ACCOUNTS_LEAF = """
jetstream { store_dir: "%s", domain: leaf }
accounts { L { users [ {user: a, password: a} ], jetstream: enabled } }
leafnodes { remotes [ { url: "nats-leaf://lb:lb@127.0.0.1:%d", account: L } ] }
"""
ACROSS_ACCOUNTS = {"api": "JS.A.API", "deliver": "deliver.A"}


@contextmanager
def _pair(topology: str, directory: Path, accounts: bool = False) -> Iterator[Pair]:
    pair = Pair(topology, directory, accounts)
    try:
        yield pair
    finally:
        pair.stop()


async def _connect(server: ServerProcess, user: str = "a") -> nats.NATS:
    return track(await nats.connect(server.url, user=user, password=user, allow_reconnect=False))


async def _api(nc: nats.NATS, subject: str, body: Any = None) -> dict[str, Any]:
    payload = json.dumps(body).encode() if body is not None else b""
    answer: dict[str, Any] = json.loads((await nc.request(subject, payload, timeout=5)).data)
    return answer


async def _until_counted(nc: nats.NATS, counts: dict[str, int]) -> None:
    """Until each stream holds its count of messages (checking more than that never happens)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30.0
    while True:
        held = {name: (await _api(nc, f"$JS.API.STREAM.INFO.{name}"))["state"]["messages"] for name in counts}
        assert all(held[n] <= counts[n] for n in counts), f"more copies than messages: {held}"
        if held == counts:
            return
        assert loop.time() < deadline, f"copies stuck at {held}, want {counts}"
        await asyncio.sleep(0.05)


async def _messages(nc: nats.NATS, name: str, api: str = "$JS.API") -> list[dict[str, Any]]:
    last = (await _api(nc, f"{api}.STREAM.INFO.{name}"))["state"]["last_seq"]
    out = []
    for seq in range(1, last + 1):
        answer = await _api(nc, f"{api}.STREAM.MSG.GET.{name}", {"seq": seq})
        if "message" in answer:
            msg = answer["message"]
            msg["hdrs"] = base64.b64decode(msg.get("hdrs") or "").decode()
            msg["data"] = base64.b64decode(msg.get("data") or "").decode()
            out.append(msg)
    return out


async def _publish(hub: nats.NATS, first: int, count: int) -> None:
    js = hub.jetstream()
    for i in range(first, first + count):
        headers = {"Nats-Msg-Id": f"id-{i}", "K": str(i)} if i % 3 == 0 else None
        await js.publish("o.a" if i % 2 else "o.b", b"payload %d" % i, headers=headers)


async def _observe(pair: Pair) -> dict[str, Any]:
    on_hub = await _connect(pair.hub)
    on_leaf = await _connect(pair.leaf)
    await _until_answered(on_leaf, "$JS.hub.API.INFO")
    await _api(on_hub, "$JS.API.STREAM.CREATE.ORIGIN", {"name": "ORIGIN", "subjects": ["o.>"]})
    await _publish(on_hub, 1, 20)
    for name, cfg in COPIES.items():
        await _api(on_leaf, f"$JS.API.STREAM.CREATE.{name}", {"name": name, **cfg})
    await _until_counted(on_leaf, {"MIR": 20, "SRC": 20, "SRCA": 10, "MIRB": 10, "SRCT": 10, "MIRD": 20})

    # The link drops, the origin's consumers are gone: each is made again.
    await asyncio.to_thread(pair.restart_hub)
    on_hub = await _connect(pair.hub)
    await _until_answered(on_leaf, "$JS.hub.API.INFO")
    await _publish(on_hub, 21, 10)
    await _until_counted(on_leaf, {"MIR": 30, "SRC": 30, "SRCA": 15, "MIRB": 15, "SRCT": 15, "MIRD": 30})
    direct = await on_leaf.request("$JS.API.DIRECT.GET.ORIGIN", b'{"seq": 2}', timeout=5)
    seen_direct = (direct.data, {k: v for k, v in (direct.headers or {}).items() if k != "Nats-Time-Stamp"})

    origin_info = await _api(on_hub, "$JS.API.STREAM.INFO.ORIGIN")
    identity = base62_sha256(origin_info["created"], 8)  # nats-server's hash of the creation time
    origin = {m["seq"]: m for m in await _messages(on_hub, "ORIGIN")}
    seen: dict[str, Any] = {"origin consumers": origin_info["state"]["consumer_count"]}
    seen["direct get of the origin on the leaf"] = seen_direct
    for name in COPIES:
        info = await _api(on_leaf, f"$JS.API.STREAM.INFO.{name}")
        blocks = [info["mirror"]] if "mirror" in info else info["sources"]
        seen[f"{name} info"] = [{k: v for k, v in b.items() if k != "active"} for b in blocks]
        seen[f"{name} heard from"] = [b["active"] >= 0 for b in blocks]
        seen[f"{name} state"] = {k: info["state"].get(k) for k in ("messages", "first_seq", "last_seq")}
        copies = []
        for msg in await _messages(on_leaf, name):
            hdrs = msg["hdrs"]
            if name.startswith("MIR"):
                assert msg["time"] == origin[msg["seq"]]["time"], "a mirror keeps the origin's times"
            else:
                # The source header as nats-server writes it, the origin's identity last.
                _, _, rest = hdrs.partition("Nats-Stream-Source: ")
                fields = rest.split("\r\n")[0].split(" ")
                assert fields[-1] == identity, hdrs
                hdrs = hdrs.replace(identity, "<origin identity>")
            copies.append((msg["seq"], msg["subject"], hdrs, msg["data"]))
        seen[f"{name} messages"] = copies
    return seen


# Per topology (the reference "nats-server" too): what _observe saw, or the error it raised.
_OBSERVED: dict[str, Any] = {}


async def _observe_every_topology(
    directory: Path, observe_pair: Callable[[Pair], Awaitable[dict[str, Any]]], into: dict[str, Any]
) -> None:
    """Each topology's pair observed at the same time (`observe_pair`), the outcomes kept in `into`: a
    nats-server leaf notices the restarted hub only at its 10 s source health check, and these waits now
    overlap (one after the other, the reference and the nats-server leaf row took 23 s and 21 s)."""

    async def observe(topology: str) -> dict[str, Any]:
        (directory / topology).mkdir()
        pair = await asyncio.to_thread(Pair, topology, directory / topology)
        try:
            return await observe_pair(pair)
        finally:
            await asyncio.to_thread(pair.stop)

    topologies = list(TOPOLOGIES)
    seen = await asyncio.gather(*(observe(t) for t in topologies), return_exceptions=True)
    into.update(zip(topologies, seen, strict=True))


@pytest.mark.parametrize("topology", [t for t in TOPOLOGIES if t != "nats-server"])
async def test_mirrors_and_sources_across_a_leaf_node_as_nats_server(topology: str, tmp_path: Path) -> None:
    """A leaf's mirror and sources of a hub stream (through `$JS.hub.API`) hold what nats-server's hold,
    headers byte for byte, the info blocks alike, after the hub restarted in between."""
    require("nats-server")
    if not _OBSERVED:
        await _observe_every_topology(tmp_path, _observe, _OBSERVED)
    reference, seen = _OBSERVED["nats-server"], _OBSERVED[topology]
    for observed in (reference, seen):
        if isinstance(observed, BaseException):
            raise observed
    assert seen == reference


async def test_a_leaf_killed_mid_copy_resumes_where_its_copies_end(tmp_path: Path) -> None:
    """pynatsd sourcing and mirroring a nats-server hub's stream, killed -9 while copying: restarted, it
    copies the rest from its stored position, each origin message exactly once."""
    require("nats-server")
    total = 30_000
    with _pair("pynatsd-leaf>nats-server-hub", tmp_path) as pair:
        on_hub = await _connect(pair.hub)
        on_leaf = await _connect(pair.leaf)
        await _until_answered(on_leaf, "$JS.hub.API.INFO")
        await _api(on_hub, "$JS.API.STREAM.CREATE.ORIGIN", {"name": "ORIGIN", "subjects": ["o.>"]})
        for i in range(total - 1):
            await on_hub.publish(f"o.{i % 7}", b"m%d" % i)
        await on_hub.jetstream().publish("o.last", b"last")  # acknowledged after all before it
        for name in ("MIR", "SRC"):
            await _api(on_leaf, f"$JS.API.STREAM.CREATE.{name}", {"name": name, **COPIES[name]})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30.0
        while True:
            held = (await _api(on_leaf, "$JS.API.STREAM.INFO.SRC"))["state"]["messages"]
            if held > 0:
                break
            assert loop.time() < deadline, "nothing copied"
            await asyncio.sleep(0.01)
        assert held < total, "copied before it could be killed: more messages needed"
        await on_leaf.close()
        pair.restart_leaf(signal.SIGKILL)
        on_leaf = await _connect(pair.leaf)
        await _until_counted(on_leaf, {"MIR": total, "SRC": total})
        info = await _api(on_leaf, "$JS.API.STREAM.INFO.MIR")
        assert (info["state"]["first_seq"], info["state"]["last_seq"]) == (1, total)
        # Every origin message once, in order: the source header of each copy tells its origin sequence.
        origin_seqs = []
        sub = await on_leaf.jetstream().subscribe("o.>", stream="SRC", ordered_consumer=True)
        for _ in range(total):
            msg = await sub.next_msg(timeout=10)
            origin_seqs.append(int((msg.headers or {})["Nats-Stream-Source"].split(" ")[1]))
        await sub.unsubscribe()
        assert origin_seqs == list(range(1, total + 1))


async def _observe_accounts(pair: Pair) -> dict[str, Any]:
    """A leaf's copies of a stream of another account of the hub (through its imports), and what a client
    of the importing account sees of a push consumer's deliveries."""
    on_a = await _connect(pair.hub)
    on_b = await _connect(pair.hub, "b")
    on_leaf = await _connect(pair.leaf)
    await _until_answered(on_leaf, "JS.A.API.INFO")
    await _api(on_a, "$JS.API.STREAM.CREATE.ORIGIN", {"name": "ORIGIN", "subjects": ["o.>"]})
    await _publish(on_a, 1, 6)
    seen: dict[str, Any] = {}
    # A push consumer of A's delivering to B (and on to the leaf): shown with the message's own subject.
    inbox = await on_b.subscribe("deliver.A.push")
    at_leaf = await on_leaf.subscribe("deliver.A.push")
    await _until_reached(on_a, "deliver.A.push", [inbox, at_leaf])
    config = {"deliver_subject": "deliver.A.push", "filter_subject": "o.a"}
    await _api(on_a, "$JS.API.CONSUMER.CREATE.ORIGIN", {"stream_name": "ORIGIN", "config": config})
    for who, sub in (("importer", inbox), ("importer's leaf", at_leaf)):
        msg = await sub.next_msg(timeout=10)
        while msg.data == b"probe":
            msg = await sub.next_msg(timeout=10)
        seen[f"{who} sees a delivery as"] = (msg.subject, msg.data, msg.reply.startswith("$JS.ACK.ORIGIN."))
    copies = {
        "XMIR": {"mirror": {"name": "ORIGIN", "external": ACROSS_ACCOUNTS}},
        "XSRC": {"sources": [{"name": "ORIGIN", "external": ACROSS_ACCOUNTS}]},
    }
    for name, cfg in copies.items():
        await _api(on_leaf, f"$JS.API.STREAM.CREATE.{name}", {"name": name, **cfg})
    await _until_counted(on_leaf, {"XMIR": 6, "XSRC": 6})
    identity = base62_sha256((await _api(on_a, "$JS.API.STREAM.INFO.ORIGIN"))["created"], 8)
    for name in copies:
        info = await _api(on_leaf, f"$JS.API.STREAM.INFO.{name}")
        blocks = [info["mirror"]] if "mirror" in info else info["sources"]
        seen[f"{name} info"] = [{k: v for k, v in b.items() if k != "active"} for b in blocks]
        seen[f"{name} messages"] = [
            (m["seq"], m["subject"], m["hdrs"].replace(identity, "<origin identity>"), m["data"])
            for m in await _messages(on_leaf, name)
        ]
    return seen


async def _until_reached(nc: nats.NATS, subject: str, subs: list[Any]) -> None:
    """Until a probe published on `subject` reaches each of `subs` (their interest crossed imports and
    the link); probes may still be queued on them afterwards."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15.0
    for sub in subs:
        while True:
            await nc.publish(subject, b"probe")
            try:
                await sub.next_msg(timeout=0.2)
                break
            except nats.errors.TimeoutError:
                assert loop.time() < deadline, f"{subject} never reached a subscriber"


_ACCOUNTS_REFERENCE: dict[str, Any] = {}


@pytest.mark.parametrize("topology", [t for t in TOPOLOGIES if t != "nats-server"])
async def test_copies_of_another_accounts_stream_across_a_leaf_node_as_nats_server(
    topology: str, tmp_path: Path
) -> None:
    """The external prefix reaches another account of the hub (a service import of its `$JS.API`, a
    stream import of its deliveries): the leaf's mirror and source hold what nats-server's hold."""
    require("nats-server")
    if not _ACCOUNTS_REFERENCE:
        (tmp_path / "reference").mkdir()
        with _pair("nats-server", tmp_path / "reference", accounts=True) as pair:
            _ACCOUNTS_REFERENCE.update(await _observe_accounts(pair))
    with _pair(topology, tmp_path, accounts=True) as pair:
        assert await _observe_accounts(pair) == _ACCOUNTS_REFERENCE


async def _observe_interest_origin(pair: Pair) -> dict[str, Any]:
    """A leaf's mirror of a hub's interest stream and source of its work queue: each copied through a
    durable sourcing consumer there (API level 4), acked by the flow control answers, so the origins let
    go of what was copied."""
    on_hub = await _connect(pair.hub)
    on_leaf = await _connect(pair.leaf)
    await _until_answered(on_leaf, "$JS.hub.API.INFO")
    origins = {"INT": ("interest", "i.>", "MIR"), "WQ": ("workqueue", "w.>", "SRC")}
    for name, (retention, subjects, _) in origins.items():
        await _api(
            on_hub,
            f"$JS.API.STREAM.CREATE.{name}",
            {"name": name, "subjects": [subjects]} | {"retention": retention},
        )
    await _api(
        on_leaf, "$JS.API.STREAM.CREATE.MIR", {"name": "MIR", "mirror": {"name": "INT", "external": EXTERNAL}}
    )
    await _api(
        on_leaf,
        "$JS.API.STREAM.CREATE.SRC",
        {"name": "SRC", "sources": [{"name": "WQ", "external": EXTERNAL}]},
    )
    seen: dict[str, Any] = {}
    for name in origins:  # the feed is there (an interest stream keeps nothing before it)
        await _until_listed(on_hub, name)
    js = on_hub.jetstream()
    for i in range(10):
        await js.publish(f"i.{i % 2}", b"i%d" % i)
        await js.publish(f"w.{i % 2}", b"w%d" % i)
    await _until_counted(on_leaf, {"MIR": 10, "SRC": 10})
    for name in origins:  # acked when the copies answered flow control
        await _until_emptied(on_hub, name)
    for name in origins:
        listed = (await _api(on_hub, f"$JS.API.CONSUMER.LIST.{name}"))["consumers"]
        seen[f"{name} feeds"] = [
            {
                "name": c["name"].split("_")[1],
                **{k: c["config"].get(k) for k in ("ack_policy", "sourcing", "direct", "flow_control")},
                "durable": c["config"].get("durable_name") == c["name"],
            }
            for c in listed
        ]
    for name in ("MIR", "SRC"):
        seen[f"{name} data"] = [m["data"] for m in await _messages(on_leaf, name)]
    # The copies deleted: their feeds on the hub too (they would keep every message for them).
    for name in ("MIR", "SRC"):
        await _api(on_leaf, f"$JS.API.STREAM.DELETE.{name}")
    for name in origins:
        await _until_listed(on_hub, name, 0)
    return seen


async def _until_emptied(nc: nats.NATS, stream: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30.0
    while (await _api(nc, f"$JS.API.STREAM.INFO.{stream}"))["state"]["messages"]:
        assert loop.time() < deadline, f"{stream} kept copied messages"
        await asyncio.sleep(0.05)


async def _until_listed(nc: nats.NATS, stream: str, count: int = 1) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30.0
    while len((await _api(nc, f"$JS.API.CONSUMER.NAMES.{stream}"))["consumers"]) != count:
        assert loop.time() < deadline, f"{stream} never had {count} feeds"
        await asyncio.sleep(0.05)


_INTEREST_REFERENCE: dict[str, Any] = {}


@pytest.mark.parametrize("topology", [t for t in TOPOLOGIES if t != "nats-server"])
async def test_interest_and_work_queue_origins_fed_through_flow_control_acks(
    topology: str, tmp_path: Path
) -> None:
    """A mirror and a source of an interest and a work queue stream across the link: the origin's feeds
    are durable sourcing consumers acked by flow control (API level 4), as nats-server makes them, in
    every direction."""
    require("nats-server")
    if not _INTEREST_REFERENCE:
        (tmp_path / "reference").mkdir()
        with _pair("nats-server", tmp_path / "reference") as pair:
            _INTEREST_REFERENCE.update(await _observe_interest_origin(pair))
    with _pair(topology, tmp_path) as pair:
        assert await _observe_interest_origin(pair) == _INTEREST_REFERENCE


async def _observe_durable(pair: Pair) -> dict[str, Any]:
    """A leaf's source and mirror of a hub stream through durables made on the hub (durable sourcing): the
    copies, the info blocks, the durables acked by the flow control answers; the leaf restarted in between
    resumes from them."""
    on_hub = await _connect(pair.hub)
    on_leaf = await _connect(pair.leaf)
    await _until_answered(on_leaf, "$JS.hub.API.INFO")
    await _api(on_hub, "$JS.API.STREAM.CREATE.ORIGIN", {"name": "ORIGIN", "subjects": ["o.>"]})
    durables = {"D": "hub.durable.src", "DM": "hub.durable.mir"}
    for name, deliver in durables.items():
        config = {"durable_name": name, "deliver_subject": deliver, "ack_policy": "flow_control"}
        await _api(
            on_hub, f"$JS.API.CONSUMER.CREATE.ORIGIN.{name}", {"stream_name": "ORIGIN", "config": config}
        )
    await _publish(on_hub, 1, 10)
    through = {name: {"name": name, "deliver_subject": deliver} for name, deliver in durables.items()}
    copies = {
        "DSRC": {"sources": [{"name": "ORIGIN", "external": EXTERNAL, "consumer": through["D"]}]},
        "DMIR": {"mirror": {"name": "ORIGIN", "external": EXTERNAL, "consumer": through["DM"]}},
    }
    seen: dict[str, Any] = {}
    for name, cfg in copies.items():
        answer = await _api(on_leaf, f"$JS.API.STREAM.CREATE.{name}", {"name": name, **cfg})
        seen[f"{name} config"] = answer["config"].get("sources") or answer["config"].get("mirror")
    await _until_counted(on_leaf, {"DSRC": 10, "DMIR": 10})
    await on_leaf.close()
    await asyncio.to_thread(pair.restart_leaf, signal.SIGTERM)
    on_leaf = await _connect(pair.leaf)
    await _publish(on_hub, 11, 5)
    await _until_counted(on_leaf, {"DSRC": 15, "DMIR": 15})
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30.0
    for name in durables:  # acked by the flow control answers
        while (info := await _api(on_hub, f"$JS.API.CONSUMER.INFO.ORIGIN.{name}"))["ack_floor"][
            "stream_seq"
        ] < 15:
            assert loop.time() < deadline, f"{name} never acked: {info}"
            await asyncio.sleep(0.05)
        seen[f"{name} on the hub"] = {
            "delivered": info["delivered"]["stream_seq"],
            **{k: info[k] for k in ("num_ack_pending", "num_pending", "num_redelivered")},
        }
    identity = base62_sha256((await _api(on_hub, "$JS.API.STREAM.INFO.ORIGIN"))["created"], 8)
    for name in copies:
        info = await _api(on_leaf, f"$JS.API.STREAM.INFO.{name}")
        blocks = [info["mirror"]] if "mirror" in info else info["sources"]
        seen[f"{name} info"] = [{k: v for k, v in b.items() if k != "active"} for b in blocks]
        seen[f"{name} messages"] = [
            (m["seq"], m["subject"], m["hdrs"].replace(identity, "<origin identity>"), m["data"])
            for m in await _messages(on_leaf, name)
        ]
    for name in copies:  # the copies go, the durables stay (they are the hub's)
        await _api(on_leaf, f"$JS.API.STREAM.DELETE.{name}")
    seen["hub consumers"] = sorted((await _api(on_hub, "$JS.API.CONSUMER.NAMES.ORIGIN"))["consumers"])
    return seen


_DURABLE_OBSERVED: dict[str, Any] = {}


@pytest.mark.parametrize("topology", [t for t in TOPOLOGIES if t != "nats-server"])
async def test_durable_sourcing_across_a_leaf_node_as_nats_server(topology: str, tmp_path: Path) -> None:
    """A source and a mirror through durables of the hub's stream, in every direction (a pynatsd leaf of a
    nats-server hub, a nats-server leaf of a pynatsd hub, both pynatsd): what nats-server holds and shows,
    across a restart of the leaf. Every topology is observed at once, at the first test."""
    require("nats-server")
    if not _DURABLE_OBSERVED:
        await _observe_every_topology(tmp_path, _observe_durable, _DURABLE_OBSERVED)
    reference, seen = _DURABLE_OBSERVED["nats-server"], _DURABLE_OBSERVED[topology]
    for observed in (reference, seen):
        if isinstance(observed, BaseException):
            raise observed
    assert seen == reference
