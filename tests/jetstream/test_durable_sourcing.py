"""Durable sourcing (a mirror's or source's `consumer`: a named durable of the origin, made by its owner
with ack policy flow_control) against nats-server -js and pynatsd -js: the configs written back, the
copies with their `Nats-Stream-Source` headers (`<origin>:C=<hash>`), the info blocks (no error for a
durable not there, 10217 and 10214 for one with another ack policy), the durable acked by the flow control
answers and kept when the copy goes, a durable made late found by its deliver subject; nats-py end to end;
and a kill -9 of the copying server: it resumes from the durable's ack floor, nothing lost nor doubled."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import signal
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api

from tests.conftest import need_tool
from tests.jetstream.conftest import JsServer, jetstream_life
from tests.jetstream.test_sourcing import (
    _ACCOUNTS,
    _comparable,
    _copies,
    _request,
    _until_copied,
    _wait_for,
    _wait_for_error,
)
from tests.servers import nats_server_binary, server_with_config
from tests.wire import WireClient


def _durable(name: str, deliver: str, ack: str = "flow_control") -> dict[str, Any]:
    return {
        "stream_name": "O",
        "config": {"durable_name": name, "deliver_subject": deliver, "ack_policy": ack},
    }


def _through(name: str, deliver: str) -> dict[str, str]:
    return {"name": name, "deliver_subject": deliver}


async def _until_acked(nc: Client, consumer: str, seq: int) -> None:
    """Until the origin's durable has its ack floor at `seq` (the copy answered its flow control)."""
    for _ in range(200):
        info = await _request(nc, f"$JS.API.CONSUMER.INFO.O.{consumer}")
        if info["ack_floor"]["stream_seq"] >= seq:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{consumer} never acked up to {seq}: {info}")


async def durable_flow(nc: Client) -> list[Any]:
    out: list[Any] = []

    async def req(subject: str, body: Any = b"") -> None:
        answer = _comparable(await _request(nc, subject, body))
        for block in ("delivered", "ack_floor"):  # (when, as the clock has it)
            answer.get(block, {}).pop("last_active", None)
        out.append((subject, answer))

    loop = asyncio.get_running_loop()
    await req("$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"]})
    # A source through a durable not there yet: no answer to its reset, no error, tried again.
    await req(
        "$JS.API.STREAM.CREATE.LATE",
        {"name": "LATE", "sources": [{"name": "O", "consumer": _through("L", "dl")}]},
    )
    late_since = loop.time()
    for i in range(3):
        await nc.request(f"o.{i}", b"m%d" % i, timeout=3)
    await req("$JS.API.CONSUMER.CREATE.O.D", _durable("D", "ds"))
    await req("$JS.API.CONSUMER.CREATE.O.DM", _durable("DM", "dm"))
    await req("$JS.API.CONSUMER.CREATE.O.DT", _durable("DT", "dt"))
    await req("$JS.API.CONSUMER.CREATE.O.E", _durable("E", "de", "explicit"))
    await req("$JS.API.CONSUMER.CREATE.O.EM", _durable("EM", "dem", "explicit"))
    await req(
        "$JS.API.STREAM.CREATE.S", {"name": "S", "sources": [{"name": "O", "consumer": _through("D", "ds")}]}
    )
    await req(
        "$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O", "consumer": _through("DM", "dm")}}
    )
    transforms = [{"src": "o.>", "dest": "t.>"}]
    await req("$JS.API.STREAM.CREATE.T", {"name": "T", "sources": [
        {"name": "O", "subject_transforms": transforms, "consumer": _through("DT", "dt")}]})  # fmt: skip
    await req(
        "$JS.API.STREAM.CREATE.X", {"name": "X", "sources": [{"name": "O", "consumer": _through("E", "de")}]}
    )
    for stream in ("S", "M", "T"):
        await _wait_for(nc, stream, 3)
    await req(
        "$JS.API.STREAM.CREATE.XM", {"name": "XM", "mirror": {"name": "O", "consumer": _through("EM", "dem")}}
    )
    await _wait_for_error(nc, "X")
    await _wait_for_error(nc, "XM")
    await nc.request("o.live", b"live", timeout=3)
    for stream in ("S", "M", "T"):
        await _wait_for(nc, stream, 4)
    for consumer in ("D", "DM", "DT"):
        await _until_acked(nc, consumer, 4)
    for stream in ("S", "M", "T", "X", "XM", "LATE"):
        await req(f"$JS.API.STREAM.INFO.{stream}")
    for stream, seq in (("S", 1), ("S", 4), ("M", 4), ("T", 2)):
        await req(f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
    for consumer in ("D", "DM", "E"):
        await req(f"$JS.API.CONSUMER.INFO.O.{consumer}")
    # The copy goes, the durable stays (it is its owner's).
    await req("$JS.API.STREAM.DELETE.S")
    await req("$JS.API.CONSUMER.NAMES.O")
    # Made now, the late durable is seen on its deliver subject while the copy backs off: asked again.
    await asyncio.sleep(max(0.0, late_since + 5.5 - loop.time()))  # past the 5 s its reset was waited for
    await req("$JS.API.CONSUMER.CREATE.O.L", _durable("L", "dl"))
    await _wait_for(nc, "LATE", 4)
    await req("$JS.API.STREAM.MSG.GET.LATE", {"seq": 4})
    for stream in ("O", "M", "T", "X", "XM", "LATE"):
        await req(f"$JS.API.STREAM.DELETE.{stream}")
    return out


async def test_durable_sourcing_matches_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    expected, got = await asyncio.gather(durable_flow(ref), durable_flow(ours))
    diffs = [
        f"{subject}:\n  nats-server {want}\n  pynatsd     {have}"
        for (subject, want), (_, have) in zip(expected, got, strict=True)
        if have != want
    ]
    assert not diffs, "\n".join(diffs)
    infos = dict(got)
    assert infos["$JS.API.STREAM.INFO.X"]["sources"][0]["error"]["err_code"] == 10217
    assert infos["$JS.API.STREAM.INFO.XM"]["mirror"]["error"]["err_code"] == 10214
    assert infos["$JS.API.STREAM.INFO.S"]["sources"][0]["seq"] == 4


async def test_kill_9_resumes_from_the_durable(tmp_path: Any) -> None:
    """nats-py end to end: a source and a mirror through durables of the origin on the same server; kill -9
    while copying, a restart, more messages: every origin message once in each, in order, and the durables
    acked up to the last (what they redelivered from their ack floor was skipped). The origin and its
    durables are made in a life of their own (a durable's state is written 50 ms after it changed)."""
    store = tmp_path / "store"
    total = 1500
    async with jetstream_life("pynatsd", store) as (_, nc):
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="O", subjects=["o.>"])
        for name in ("D", "DM"):
            config = api.ConsumerConfig(
                durable_name=name, deliver_subject=f"d.{name}", ack_policy="flow_control"
            )
            await js.add_consumer("O", config)
        for i in range(total - 1):
            await nc.publish(f"o.{i % 3}", b"a%d" % i)
        await js.publish("o.1", b"a%d" % (total - 1))
    async with jetstream_life("pynatsd", store, kill=True) as (srv, nc):
        js = nc.jetstream(timeout=5)
        source = {"name": "S", "sources": [{"name": "O", "consumer": _through("D", "d.D")}]}
        await _request(nc, "$JS.API.STREAM.CREATE.S", source)
        await _request(
            nc,
            "$JS.API.STREAM.CREATE.M",
            {"name": "M", "mirror": {"name": "O", "consumer": _through("DM", "d.DM")}},
        )
        await _until_copied(js, "S", 1)  # the copying has begun: kill it somewhere along the way
        srv.stop(signal.SIGKILL)
    async with jetstream_life("pynatsd", store) as (_, nc):
        js = nc.jetstream(timeout=5)
        for i in range(total, total + 100):
            await js.publish(f"o.{i % 3}", b"a%d" % i)
        end = total + 100
        await _until_copied(js, "S", end)
        await _until_copied(js, "M", end)
        copies = await _copies(js, "S")
        assert [int(header.split(" ")[1]) for _, header, _ in copies] == list(range(1, end + 1))
        assert [data for _, _, data in copies] == [b"a%d" % i for i in range(end)]
        assert copies[0][1].split(" ")[0].startswith("O:C=")
        mirror = await _copies(js, "M")
        assert [(seq, data) for seq, _, data in mirror] == [(s, b"a%d" % (s - 1)) for s in range(1, end + 1)]
        for name in ("D", "DM"):
            await _until_acked(nc, name, end)
        assert (await js.stream_info("S")).state.messages == end  # nothing more came


async def across_accounts(url: str) -> list[Any]:
    """Account B's source and mirror of account A's stream through A's durables, on one server: the API
    reached by B's service import (`external`), the deliveries by its stream import."""
    a = await nats.connect(url, user="a", password="a")
    b = await nats.connect(url, user="b", password="b")
    external = {"api": "JS.A.API", "deliver": "deliver.A"}
    out: list[Any] = []
    try:
        await _request(a, "$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"]})
        for i in range(3):
            await a.request(f"o.{i}", b"m%d" % i, timeout=3)
        for name in ("D", "DM"):
            await _request(a, f"$JS.API.CONSUMER.CREATE.O.{name}", _durable(name, f"deliver.A.{name}"))
        copies = {
            "S": {"sources": [{"name": "O", "external": external, "consumer": _through("D", "deliver.A.D")}]},
            "M": {"mirror": {"name": "O", "external": external, "consumer": _through("DM", "deliver.A.DM")}},
        }
        for name, cfg in copies.items():
            answer = await _request(b, f"$JS.API.STREAM.CREATE.{name}", {"name": name, **cfg})
            out.append(answer["config"].get("sources") or answer["config"].get("mirror"))
        for name in copies:
            await _wait_for(b, name, 3)
        for name in ("D", "DM"):
            await _until_acked(a, name, 3)
        for name in copies:
            info = await _request(b, f"$JS.API.STREAM.INFO.{name}")
            out.append(_comparable(info.get("sources") or info.get("mirror")))
        message = (await _request(b, "$JS.API.STREAM.MSG.GET.S", {"seq": 1}))["message"]
        out.append(" ".join(base64.b64decode(message["hdrs"]).decode().split(" ")[:-1]))  # (the identity)
    finally:
        await a.close()
        await b.close()
    return out


async def test_durable_of_another_account_as_nats_server(tmp_path: Path) -> None:
    need_tool(nats_server_binary() is not None, "nats-server")
    with contextlib.ExitStack() as stack:
        ref, ours = (
            stack.enter_context(
                server_with_config(kind, tmp_path / f"{kind}.conf", _ACCOUNTS % (tmp_path / kind))
            )
            for kind in ("nats-server", "pynatsd")
        )
        expected, got = await asyncio.gather(across_accounts(ref.url), across_accounts(ours.url))
    assert got == expected


async def test_a_forged_flow_control_request_is_not_answered_as_the_account(
    js_server: JsServer, nc: Client
) -> None:
    """No confused deputy: a flow control request forged on a durable's deliver subject, its reply another
    durable's flow control subject, is answered as the server, so it acks nothing there; the real ones ack
    the feed's own durable."""
    js = nc.jetstream(timeout=5)
    await js.add_stream(name="O", subjects=["o.>"])
    for name in ("D", "OTHER"):
        config = api.ConsumerConfig(durable_name=name, deliver_subject=f"d.{name}", ack_policy="flow_control")
        await js.add_consumer("O", config)
    flow_control: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def on_other(msg: Msg) -> None:  # OTHER's subscriber, who never answers its flow control
        if msg.headers and msg.headers.get("Status") == "100" and msg.reply and not flow_control.done():
            flow_control.set_result(msg.reply)

    await nc.subscribe("d.OTHER", cb=on_other)
    source = {"name": "S", "sources": [{"name": "O", "consumer": _through("D", "d.D")}]}
    await _request(nc, "$JS.API.STREAM.CREATE.S", source)
    await js.publish("o.1", b"x")
    await _until_copied(js, "S", 1)
    reply = (await asyncio.wait_for(flow_control, 10)).encode()
    forged = b"NATS/1.0 100 FlowControl Request\r\n\r\n"
    frame = b'CONNECT {"headers":true}\r\nHPUB d.D %s %d %d\r\n%s\r\n' % (
        reply,
        len(forged),
        len(forged),
        forged,
    )

    def forge() -> None:
        with WireClient(js_server.port) as wire:
            assert b"-ERR" not in wire.exchange(frame)[0]

    await asyncio.to_thread(forge)
    await _until_acked(nc, "D", 1)  # (the feed's own flow control, after the forged one)
    assert (await js.consumer_info("O", "OTHER")).ack_floor.stream_seq == 0
