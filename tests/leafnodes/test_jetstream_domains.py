"""JetStream across a leaf node link, as nats-server's domains work: a hub with JetStream in domain `hub`, a
leaf with JetStream of its own in domain `leaf` or with none. `$JS.API` stays on its side of the link (no
split brain: each server's JetStream answers its own clients); `$JS.<domain>.API` (and `$KV`/`$OBJ` under
it) reaches the other side's JetStream. Every topology's clients must observe what they observe between
two nats-server nodes doing the same things."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from tests.leafnodes.conftest import TOPOLOGIES, track
from tests.servers import ServerProcess, free_port, require, start_server

LEAF_JETSTREAM = {"leaf-with-js-domain": True, "leaf-without-js": False}


def hub_config(store: Path, leaf_port: int) -> str:
    return (
        f'jetstream {{ store_dir: "{store}", domain: hub }}\n'
        "accounts { A { users [ {user: a, password: a} ], jetstream: enabled } }\n"
        f"leafnodes {{ listen: 127.0.0.1:{leaf_port}, "
        "authorization { users [ {user: la, password: la, account: A} ] } }\n"
    )


def leaf_config(store: Path, leaf_port: int, jetstream: bool) -> str:
    account = "A { users [ {user: a, password: a} ]" + (", jetstream: enabled }" if jetstream else " }")
    return (
        (f'jetstream {{ store_dir: "{store}", domain: leaf }}\n' if jetstream else "")
        + f"accounts {{ {account} }}\n"
        + f'leafnodes {{ remotes [ {{ url: "nats-leaf://la:la@127.0.0.1:{leaf_port}", account: A }} ] }}\n'
    )


@contextmanager
def _servers(
    topology: str, jetstream: bool, directory: Path
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    hub_kind, leaf_kind = TOPOLOGIES[topology]
    leaf_port = free_port()
    (directory / "hub.conf").write_text(hub_config(directory / "hub-store", leaf_port))
    (directory / "leaf.conf").write_text(leaf_config(directory / "leaf-store", leaf_port, jetstream))
    hub = start_server(hub_kind, ["-c", str(directory / "hub.conf")])
    leaf = start_server(leaf_kind, ["-c", str(directory / "leaf.conf")])
    try:
        yield hub, leaf
    finally:
        leaf.stop()
        hub.stop()


async def _answers(nc: nats.NATS, subject: str, payload: bytes = b"") -> list[str]:
    """Who answers a request on `subject`: each answer's domain (or error code), in arrival order, within
    half a second after the first (a second answer would be a second JetStream: a split brain)."""
    inbox = nc.new_inbox()
    replies: list[Any] = []
    first = asyncio.Event()

    async def take(msg: Any) -> None:
        replies.append(msg)
        first.set()

    sub = await nc.subscribe(inbox, cb=take)
    await nc.publish(subject, payload, reply=inbox)
    try:
        await asyncio.wait_for(first.wait(), 2.0)
        await asyncio.sleep(0.5)
    except TimeoutError:
        pass
    await sub.unsubscribe()
    out = []
    for msg in replies:
        if msg.headers and msg.headers.get("Status") == "503":
            out.append("no responders")
            continue
        body = json.loads(msg.data)
        out.append(str(body.get("domain") or body.get("error", {}).get("code") or "no domain"))
    return out or ["nothing"]


async def _until_answered(nc: nats.NATS, subject: str) -> None:
    """Until the other side's interest in `subject` has crossed the link (a request there is answered)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15.0
    while True:
        try:
            await nc.request(subject, b"", timeout=0.5)
            return
        except (NoRespondersError, NatsTimeout):
            assert loop.time() < deadline, f"{subject} never answered across the link"
            await asyncio.sleep(0.1)


async def _observe(hub: ServerProcess, leaf: ServerProcess, leaf_js: bool) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    on_hub = track(await nats.connect(hub.url, user="a", password="a", allow_reconnect=False))
    on_leaf = track(await nats.connect(leaf.url, user="a", password="a", allow_reconnect=False))
    await _until_answered(on_leaf, "$JS.hub.API.INFO")
    if leaf_js:
        await _until_answered(on_hub, "$JS.leaf.API.INFO")
    seen["leaf asks $JS.API"] = await _answers(on_leaf, "$JS.API.INFO")
    seen["leaf asks $JS.hub.API"] = await _answers(on_leaf, "$JS.hub.API.INFO")
    seen["hub asks $JS.API"] = await _answers(on_hub, "$JS.API.INFO")
    seen["hub asks $JS.leaf.API"] = await _answers(on_hub, "$JS.leaf.API.INFO")
    seen["leaf asks an unknown hub API"] = await _answers(on_leaf, "$JS.hub.API.NOPE")

    # A leaf client works the hub's JetStream through its domain: a stream, publishes, a pull consumer.
    hub_js = on_leaf.jetstream(domain="hub")
    await hub_js.add_stream(name="S", subjects=["s.>"])
    ack = await hub_js.publish("s.1", b"one")
    seen["publish ack from the leaf"] = (ack.stream, ack.seq, ack.domain)
    await on_leaf.publish("s.2", b"two")  # a plain publish crosses to the hub's stream as any message
    await on_leaf.flush()
    consumer = await hub_js.pull_subscribe("s.>", durable="C", stream="S")
    fetched = await consumer.fetch(2, timeout=5)
    seen["fetched on the leaf"] = [(m.subject, m.data, m.metadata.sequence.stream) for m in fetched]
    for msg in fetched:
        await msg.ack_sync()
    info = await on_hub.jetstream().stream_info("S")
    seen["stream on the hub"] = (info.state.messages, info.state.last_seq)
    seen["consumer ack floor"] = (await on_hub.jetstream().consumer_info("S", "C")).ack_floor.stream_seq

    # A key-value bucket of the hub's, from the leaf: `$JS.hub.API.$KV.<bucket>.<key>` is a put there, as
    # nats.go's KV in a domain writes (nats-py's would publish `$KV.cfg.color`, which stays on the leaf).
    kv = await hub_js.create_key_value(bucket="cfg")
    put = await on_leaf.request("$JS.hub.API.$KV.cfg.color", b"blue", timeout=5)
    entry = await kv.get("color")
    seen["kv from the leaf"] = (json.loads(put.data), entry.value, entry.revision)
    seen["nats-py's kv put from the leaf"] = await _answers(on_leaf, "$KV.cfg.color", b"red")
    hub_kv = await on_hub.jetstream().key_value("cfg")
    seen["kv on the hub"] = (await hub_kv.get("color")).value

    if leaf_js:
        # The leaf's own JetStream: its clients' $JS.API, the hub's clients through domain `leaf`.
        local = on_leaf.jetstream()
        await local.add_stream(name="L", subjects=["l.>"])
        ack = await local.publish("l.1", b"local")
        seen["leaf's own publish ack"] = (ack.stream, ack.seq, ack.domain)
        remote_info = await on_hub.jetstream(domain="leaf").stream_info("L")
        seen["hub reads the leaf's stream"] = (remote_info.config.name, remote_info.state.messages)
        seen["hub's streams"] = sorted(await on_hub.jetstream().streams_info(), key=lambda s: s.config.name)
        seen["hub's streams"] = [s.config.name for s in seen["hub's streams"]]
        seen["leaf's streams"] = [s.config.name for s in await local.streams_info()]
    return seen


_REFERENCE: dict[bool, dict[str, Any]] = {}


async def _reference(leaf_js: bool, directory: Path) -> dict[str, Any]:
    if leaf_js not in _REFERENCE:
        directory.mkdir()
        with _servers("nats-server", leaf_js, directory) as (hub, leaf):
            _REFERENCE[leaf_js] = await _observe(hub, leaf, leaf_js)
    return _REFERENCE[leaf_js]


@pytest.mark.parametrize("leaf_kind", list(LEAF_JETSTREAM))
@pytest.mark.parametrize("topology", [t for t in TOPOLOGIES if t != "nats-server"])
async def test_jetstream_domains_across_a_leaf_node_as_nats_server(
    topology: str, leaf_kind: str, tmp_path: Path
) -> None:
    require("nats-server")
    leaf_js = LEAF_JETSTREAM[leaf_kind]
    expected = await _reference(leaf_js, tmp_path / "reference")
    with _servers(topology, leaf_js, tmp_path) as (hub, leaf):
        assert await _observe(hub, leaf, leaf_js) == expected
