"""Consumer pause (`pause_until`, `CONSUMER.PAUSE`), `CONSUMER.RESET` and NAK delays, against nats-server -js:
the same API answers (timestamps aside), and the same deliveries over time with nats-py."""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from tests.jetstream.conftest import jetstream_life
from tests.servers import ServerProcess, jetstream_pair

Pair = tuple[ServerProcess, ServerProcess]  # (nats-server, pynatsd)
Flow = Callable[[Client, list[Any]], Awaitable[None]]  # a run on one server, noting what it sees
FAR = "2999-01-01T02:00:00.5+02:00"  # paused for good (Go's time.Until saturates: pause_remaining = max)
SCRIPT: list[tuple[str, Any]] = [
    ("$JS.API.STREAM.CREATE.P", {"name": "P", "subjects": ["p.>"]}),
    ("PUB p.a", b""),
    ("PUB p.b", b""),
    ("PUB p.c", b""),
    ("$JS.API.CONSUMER.CREATE.P.c",
     {"stream_name": "P", "config": {"durable_name": "c", "ack_policy": "explicit", "pause_until": FAR}}),
    ("$JS.API.CONSUMER.INFO.P.c", b""),
    # An update through CREATE keeps the pause (only CONSUMER.PAUSE changes it), in UTC from then on.
    ("$JS.API.CONSUMER.CREATE.P.c",
     {"stream_name": "P",
      "config": {"durable_name": "c", "ack_policy": "explicit", "pause_until": "2998-01-01T00:00:00Z"}}),
    ("$JS.API.CONSUMER.CREATE.P.c",
     {"stream_name": "P", "config": {"durable_name": "c", "ack_policy": "explicit", "max_deliver": 4}}),
    ("$JS.API.CONSUMER.PAUSE.P.c", {"pause_until": "2020-01-01T00:00:00Z"}),
    ("$JS.API.CONSUMER.INFO.P.c", b""),
    ("$JS.API.CONSUMER.PAUSE.P.c", b""),
    ("$JS.API.CONSUMER.INFO.P.c", b""),
    ("$JS.API.CONSUMER.PAUSE.P.c", {"bogus": 1}),
    ("$JS.API.CONSUMER.PAUSE.P.c", {"pause_until": "garbage"}),
    ("$JS.API.CONSUMER.PAUSE.P.c", b"not json"),
    ("$JS.API.CONSUMER.PAUSE.P.c", {"pause_until": "0001-01-01T00:00:00Z"}),
    ("$JS.API.CONSUMER.PAUSE.P.c", {"pause_until": "2999-01-01T00:00:00-01:00"}),
    ("$JS.API.CONSUMER.PAUSE.P.nope", b""),
    ("$JS.API.CONSUMER.PAUSE.NOPE.c", b""),
    ("$JS.API.CONSUMER.LIST.P", b""),
    ("$JS.API.CONSUMER.CREATE.P.z",
     {"stream_name": "P", "config": {"name": "z", "pause_until": "0001-01-01T00:00:00Z"}}),
    ("$JS.API.CONSUMER.CREATE.P.y",
     {"stream_name": "P", "config": {"name": "y", "pause_until": "2020-01-01T00:00:00.123000Z"}}),
    # RESET: to the ack floor (empty body) or a sequence, as the deliver policy allows it.
    ("$JS.API.CONSUMER.RESET.P.c", b""),
    ("$JS.API.CONSUMER.RESET.P.c", {"seq": 2}),
    ("$JS.API.CONSUMER.RESET.P.c", {"seq": 2, "x": 1}),
    ("$JS.API.CONSUMER.RESET.P.c", b"junk"),
    ("$JS.API.CONSUMER.CREATE.P.n", {"stream_name": "P", "config": {"name": "n", "deliver_policy": "new"}}),
    ("$JS.API.CONSUMER.RESET.P.n", {"seq": 2}),
    ("$JS.API.CONSUMER.RESET.P.n", b""),
    ("$JS.API.CONSUMER.CREATE.P.s",
     {"stream_name": "P",
      "config": {"name": "s", "deliver_policy": "by_start_sequence", "opt_start_seq": 2}}),
    ("$JS.API.CONSUMER.RESET.P.s", {"seq": 1}),
    ("$JS.API.CONSUMER.RESET.P.s", {"seq": 3}),
    ("$JS.API.CONSUMER.RESET.P.s", {"seq": 0}),
    ("$JS.API.CONSUMER.RESET.P.nope", b""),  # nats-server: no answer at all
]  # fmt: skip


U = "$JS.API.CONSUMER.CREATE.U."
_BASE = {"durable_name": "u", "ack_policy": "explicit", "filter_subject": "u.a"}
# Consumer updates through CREATE: what may change, and the errors for what may not.
UPDATES: list[tuple[str, Any]] = [
    ("$JS.API.STREAM.CREATE.U", {"name": "U", "subjects": ["u.*"]}),
    ("PUB u.a", b""),
    ("PUB u.b", b""),
    (U + "u", {"stream_name": "U", "config": _BASE}),
    (U + "u", {"stream_name": "U", "action": "update", "config": {
        **_BASE, "description": "d", "ack_wait": 5_000_000_000, "max_deliver": 3, "max_ack_pending": 7,
        "headers_only": True, "sample_freq": "50%", "metadata": {"k": "v"},
        "inactive_threshold": 60_000_000_000,
        "filter_subject": "", "filter_subjects": ["u.a", "u.b"]}}),
    (U + "u", {"stream_name": "U", "config": {
        **_BASE, "backoff": [1_000_000_000, 2_000_000_000], "max_deliver": 2, "inactive_threshold": 0}}),
    (U + "u", {"stream_name": "U", "config": {**_BASE, "backoff": [1, 2, 3], "max_deliver": 2}}),
    (U + "u", {"stream_name": "U", "config": {**_BASE, "deliver_policy": "new"}}),
    (U + "u", {"stream_name": "U", "config": {**_BASE, "ack_policy": "all"}}),
    (U + "u", {"stream_name": "U", "config": {**_BASE, "replay_policy": "original"}}),
    (U + "u", {"stream_name": "U", "config": {**_BASE, "mem_storage": True}}),
    (U + "u", {"stream_name": "U", "config": {**_BASE, "max_waiting": 5}}),
    (U + "u", {"stream_name": "U", "config": {**_BASE, "deliver_subject": "to.u"}}),
    (U + "u", {"stream_name": "U", "action": "create", "config": {**_BASE, "description": "other"}}),
    (U + "v", {"stream_name": "U", "action": "update", "config": {"durable_name": "v"}}),
    (U + "t", {"stream_name": "U", "config": {
        "durable_name": "t", "deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:00Z"}}),
    (U + "t", {"stream_name": "U", "config": {
        "durable_name": "t", "deliver_policy": "by_start_time",
        "opt_start_time": "2020-01-01T01:00:00+01:00"}}),
    (U + "t", {"stream_name": "U", "config": {
        "durable_name": "t", "deliver_policy": "by_start_time", "opt_start_time": "2021-01-01T00:00:00Z"}}),
    (U + "p", {"stream_name": "U", "config": {"durable_name": "p", "deliver_subject": "to.p"}}),
    (U + "p", {"stream_name": "U", "config": {"durable_name": "p", "deliver_subject": "to.p2"}}),
    (U + "p", {"stream_name": "U", "config": {"durable_name": "p", "deliver_subject": "to.p2",
                                              "idle_heartbeat": 1_000_000_000}}),
    (U + "p", {"stream_name": "U", "config": {"durable_name": "p", "deliver_subject": "to.p2",
                                              "flow_control": True, "idle_heartbeat": 1_000_000_000}}),
    (U + "p", {"stream_name": "U", "config": {"durable_name": "p"}}),
    ("$JS.API.CONSUMER.INFO.U.u", b""),
]  # fmt: skip


def _comparable(body: Any) -> Any:
    """An API answer without what differs by design: times, the server's version and level."""
    if isinstance(body, list):
        return [_comparable(v) for v in body]
    if not isinstance(body, dict):
        return body
    out = {}
    for key, value in body.items():
        if key in ("ts", "created", "last_active"):
            continue
        if key == "metadata":
            value = {k: v for k, v in value.items() if k not in ("_nats.level", "_nats.ver")}
        if key == "pause_remaining" and value != (1 << 63) - 1:
            value = "remaining"
        out[key] = _comparable(value)
    return out


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    with jetstream_pair(tmp_path_factory.mktemp("pause")) as servers:
        yield servers


async def _on_both(pair: Pair, flow: Flow) -> tuple[list[Any], list[Any]]:
    """`flow` on both servers at once, each on its own connection: what it saw on nats-server, on pynatsd."""

    async def run(url: str) -> list[Any]:
        nc = await nats.connect(url)
        out: list[Any] = []
        try:
            await flow(nc, out)
        finally:
            await nc.close()
        return out

    expected, got = await asyncio.gather(run(pair[0].url), run(pair[1].url))
    return expected, got


async def _run_script(nc: Client, out: list[Any], script: list[tuple[str, Any]]) -> None:
    for subject, body in script:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        if subject.startswith("PUB "):
            await nc.request(subject[4:], b"x", timeout=2)
            continue
        try:
            msg = await nc.request(subject, data, timeout=0.5 if "RESET.P.nope" in subject else 2)
            out.append((subject, _comparable(json.loads(msg.data))))
        except nats.errors.TimeoutError:
            out.append((subject, "no answer"))


@pytest.mark.parametrize("script", [SCRIPT, UPDATES], ids=["pause-reset", "updates"])
async def test_consumer_api_matches_nats_server(pair: Pair, script: list[tuple[str, Any]]) -> None:
    expected, got = await _on_both(pair, functools.partial(_run_script, script=script))
    diffs = [
        f"{subject}:\n  nats-server {want}\n  pynatsd     {have}"
        for (subject, want), (_, have) in zip(expected, got, strict=True)
        if have != want
    ]
    assert not diffs, "\n".join(diffs)


def _in(seconds: float) -> tuple[float, str]:
    """A wall-clock time `seconds` from now, and its RFC 3339 text."""
    at = time.time() + seconds
    return at, datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


async def _create(nc: Client, stream: str, config: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps({"stream_name": stream, "config": config}).encode()
    reply = await nc.request(f"$JS.API.CONSUMER.CREATE.{stream}.{config['name']}", body, timeout=2)
    resp: dict[str, Any] = json.loads(reply.data)
    assert "error" not in resp, resp
    return resp


async def _pull(nc: Client, stream: str, name: str, batch: int, expires: float) -> list[Any]:
    """One pull request: the data of the messages it got, then the status that ended it (if any)."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    body = json.dumps({"batch": batch, "expires": int(expires * 1e9)}).encode()
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}", body, reply=inbox)
    got: list[Any] = []
    try:
        while len(got) < batch:
            msg = await sub.next_msg(expires + 3)
            status = (msg.headers or {}).get("Status")
            if status:
                got.append(status)
                break
            got.append(msg.data)
    finally:
        await sub.unsubscribe()
    return got


async def _pause_flow(nc: Client, out: list[Any]) -> None:
    js = nc.jetstream()
    await js.add_stream(name="PF", subjects=["pf.*"])
    for i in range(2):
        await js.publish(f"pf.{i}", b"m%d" % i)
    _, far = _in(3600)
    pull = await _create(nc, "PF", {"name": "pl", "ack_policy": "explicit", "pause_until": far})
    out.append((pull["paused"], pull["num_pending"]))
    # Paused: the request waits, gets nothing, and expires.
    out.append(await _pull(nc, "PF", "pl", 2, 0.4))
    resumed = json.loads((await nc.request("$JS.API.CONSUMER.PAUSE.PF.pl", b"", timeout=2)).data)
    out.append((resumed["paused"], resumed["pause_until"]))
    out.append(await _pull(nc, "PF", "pl", 2, 2))
    # A push consumer paused for a moment delivers when the pause ends, not before.
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    until, until_text = _in(1.5)  # room for the create to land before it, on a loaded machine
    push = await _create(nc, "PF", {"name": "ps", "deliver_subject": inbox, "pause_until": until_text})
    out.append(push["paused"])
    first = await sub.next_msg(10)
    arrived = time.time()
    out.append((first.data, arrived >= until))
    out.append((await sub.next_msg(2)).data)
    info = json.loads((await nc.request("$JS.API.CONSUMER.INFO.PF.ps", b"", timeout=2)).data)
    out.append((info.get("paused"), info.get("pause_remaining"), info["delivered"]["stream_seq"]))


async def test_paused_consumer_delivers_nothing_until_resumed(pair: Pair) -> None:
    expected, got = await _on_both(pair, _pause_flow)
    assert got == expected
    assert expected[1] == ["408"] and expected[3] == [b"m0", b"m1"]
    assert expected[5] == (b"m0", True)


async def _nak_flow(nc: Client, out: list[Any]) -> None:
    js = nc.jetstream()
    await js.add_stream(name="NK", subjects=["nk"])
    await js.publish("nk", b"once")
    sub = await js.pull_subscribe("nk", "nk", stream="NK")
    [msg] = await sub.fetch(1, timeout=2)
    sent = time.time()
    await msg.nak(delay=0.8)
    # Asked for at once, but not redelivered before the delay.
    [again] = await sub.fetch(1, timeout=5)
    waited = time.time() - sent
    out.append((again.data, again.metadata.num_delivered, waited >= 0.8))
    await again.ack_sync()
    info = await sub.consumer_info()
    floor = info.ack_floor.stream_seq if info.ack_floor else None
    out.append((info.num_ack_pending, info.num_redelivered, floor))
    # Under backoff nats-server redelivers a delayed NAK at `delay - ack_wait + the delivery's step`:
    # after the second delivery, 0.2 - 0.1 + 1.0 s.
    await js.publish("nk", b"backoff")
    config = {"name": "b", "durable_name": "b", "ack_policy": "explicit", "max_deliver": 5,
              "deliver_policy": "last", "backoff": [100_000_000, 1_000_000_000]}  # fmt: skip
    await _create(nc, "NK", config)
    sub = await js.pull_subscribe_bind("b", "NK")
    waits = []
    [msg] = await sub.fetch(1, timeout=2)
    for _ in range(2):
        sent = time.time()
        await msg.nak(delay=0.2)
        [msg] = await sub.fetch(1, timeout=5)
        waits.append(time.time() - sent)
    out.append((msg.data, msg.metadata.num_delivered, waits[0] >= 0.2, waits[1] >= 1.1 - 0.002))


async def test_nak_delay_redelivers_after_the_delay(pair: Pair) -> None:
    expected, got = await _on_both(pair, _nak_flow)
    assert got == expected
    assert expected[0] == (b"once", 2, True)
    assert expected[2] == (b"backoff", 3, True, True)


@pytest.mark.parametrize("kind", ["nats-server", "pynatsd"])
async def test_paused_durable_consumer_survives_restart(kind: str, tmp_path: Path) -> None:
    async with jetstream_life(kind, tmp_path) as (server, nc):
        await nc.jetstream().add_stream(name="R", subjects=["r"])
        await nc.jetstream().publish("r", b"kept")
        _, far = _in(3600)
        created = await _create(
            nc, "R", {"name": "d", "durable_name": "d", "ack_policy": "explicit", "pause_until": far}
        )
    async with jetstream_life(kind, tmp_path, port=server.port) as (_, nc):
        info = json.loads((await nc.request("$JS.API.CONSUMER.INFO.R.d", b"", timeout=2)).data)
        assert info["paused"] is True
        assert info["config"]["pause_until"] == created["config"]["pause_until"]
        assert await _pull(nc, "R", "d", 1, 0.4) == ["408"]
        await nc.request("$JS.API.CONSUMER.PAUSE.R.d", b"", timeout=2)
        assert await _pull(nc, "R", "d", 1, 2) == [b"kept"]


async def _inactive_after_update(nc: Client, out: list[Any]) -> None:
    """A durable given an inactive_threshold by an update is deleted once idle that long."""
    await nc.jetstream().add_stream(name="IT", subjects=["it"])
    config = {"name": "i", "durable_name": "i", "ack_policy": "explicit"}
    await _create(nc, "IT", config)
    updated = await _create(nc, "IT", {**config, "inactive_threshold": 300_000_000})
    out.append(updated["config"].get("inactive_threshold"))
    for _ in range(100):  # bounded: 10 s
        info = json.loads((await nc.request("$JS.API.CONSUMER.INFO.IT.i", b"", timeout=2)).data)
        if "error" in info:
            out.append(info["error"]["err_code"])
            break
        await asyncio.sleep(0.1)


async def test_updated_inactive_threshold_deletes_idle_durable(pair: Pair) -> None:
    expected, got = await _on_both(pair, _inactive_after_update)
    assert expected == [300_000_000, 10014]
    assert got == expected


async def _ack_wait_update(nc: Client, out: list[Any]) -> None:
    """A message awaiting its ack is due by the updated ack_wait, not by the one it was delivered under."""
    js = nc.jetstream()
    await js.add_stream(name="AW", subjects=["aw"])
    await js.publish("aw", b"slow")
    config = {"name": "w", "durable_name": "w", "ack_policy": "explicit", "ack_wait": 30_000_000_000}
    await _create(nc, "AW", config)
    sub = await js.pull_subscribe_bind("w", "AW")
    assert len(await sub.fetch(1, timeout=2)) == 1  # delivered, not acked
    await _create(nc, "AW", {**config, "ack_wait": 500_000_000})
    [again] = await sub.fetch(1, timeout=10)  # bounded; due about 0.5 s after the first delivery
    out.append((again.data, again.metadata.num_delivered))


async def test_updated_ack_wait_applies_to_pending_messages(pair: Pair) -> None:
    expected, got = await _on_both(pair, _ack_wait_update)
    assert expected == [(b"slow", 2)]
    assert got == expected


async def _released_flow(nc: Client, out: list[Any]) -> None:
    """Interest retention: a consumer reset past its unacked messages lets them go, one reset back keeps what
    is left, and a deleted consumer lets go of what it still held (another consumer acked everything); the
    deletion of a work queue's consumer removes nothing."""
    js = nc.jetstream()
    await js.add_stream(name="IR", subjects=["ir"], retention="interest")
    for name in ("a", "b"):
        await _create(nc, "IR", {"name": name, "durable_name": name, "ack_policy": "explicit"})
    for i in range(6):
        await js.publish("ir", b"%d" % i)
    a = await js.pull_subscribe_bind("a", "IR")
    b = await js.pull_subscribe_bind("b", "IR")
    for msg in (await a.fetch(6, timeout=2))[:2]:  # a's ack floor: 2
        await msg.ack_sync()
    for msg in await b.fetch(6, timeout=2):
        await msg.ack_sync()

    async def state(step: str) -> None:
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.IR", b"", timeout=2)).data)
        out.append((step, info["state"]["messages"], info["state"]["first_seq"]))

    await state("acked")
    for seq in (5, 2):
        reply = await nc.request("$JS.API.CONSUMER.RESET.IR.a", json.dumps({"seq": seq}).encode(), timeout=2)
        out.append(json.loads(reply.data).get("reset_seq"))
        await state(f"reset {seq}")
    await nc.request("$JS.API.CONSUMER.DELETE.IR.a", b"", timeout=2)
    await state("deleted")
    # A work queue's messages stay when its consumer goes, delivered or not.
    await js.add_stream(name="WQ", subjects=["wq"], retention="workqueue")
    for i in range(3):
        await js.publish("wq", b"%d" % i)
    await _create(nc, "WQ", {"name": "w", "durable_name": "w", "ack_policy": "explicit"})
    await (await js.pull_subscribe_bind("w", "WQ")).fetch(1, timeout=2)
    await nc.request("$JS.API.CONSUMER.DELETE.WQ.w", b"", timeout=2)
    info = json.loads((await nc.request("$JS.API.STREAM.INFO.WQ", b"", timeout=2)).data)
    out.append(("work queue", info["state"]["messages"]))


async def test_reset_and_delete_release_messages_as_nats_server(pair: Pair) -> None:
    expected, got = await _on_both(pair, _released_flow)
    assert expected[0] == ("acked", 4, 3) and expected[-1] == ("work queue", 3)
    assert got == expected
