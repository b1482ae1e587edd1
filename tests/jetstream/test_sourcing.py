"""Stream mirrors and sources: the same requests against nats-server -js and pynatsd -js give the same
answers (configs, copied messages with their sequences and Nats-Stream-Source headers, the mirror/sources
blocks of STREAM.INFO, the create/update errors); nats-py end to end; and the copy's position surviving a
kill -9 (no message copied twice, none left out)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.js import api

from tests.conftest import need_tool
from tests.jetstream.conftest import jetstream_life
from tests.servers import ServerProcess, jetstream_pair, nats_server_binary, server_with_config

# Values that differ by design or by the clock: left out of the comparison.
_VOLATILE = {"created", "ts", "first_ts", "last_ts", "time", "cluster", "metadata"}
_BAD_CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("mirror with subjects", {"name": "X", "subjects": ["x"], "mirror": {"name": "O"}}),
    ("mirror and sources", {"name": "X", "mirror": {"name": "O"}, "sources": [{"name": "O"}]}),
    ("mirror and first_seq", {"name": "X", "mirror": {"name": "O"}, "first_seq": 5}),
    ("mirror name invalid", {"name": "X", "mirror": {"name": "a.b"}}),
    ("mirror filter and transforms", {"name": "X", "mirror": {
        "name": "O", "filter_subject": "o.1", "subject_transforms": [{"src": "o.2", "dest": "x"}]}}),
    ("mirror transforms overlap", {"name": "X", "mirror": {
        "name": "O", "subject_transforms": [{"src": "o.*", "dest": ""}, {"src": "o.1", "dest": ""}]}}),
    ("mirror transform bad source", {"name": "X", "mirror": {
        "name": "O", "subject_transforms": [{"src": "o..", "dest": ""}]}}),
    ("mirror max msg size", {"name": "X", "max_msg_size": 10, "mirror": {"name": "SMALL"}}),
    ("source name invalid", {"name": "X", "sources": [{"name": "a b"}]}),
    ("source twice", {"name": "X", "sources": [{"name": "O"}, {"name": "O"}]}),
    ("source filter and transforms", {"name": "X", "sources": [{
        "name": "O", "filter_subject": "o.1", "subject_transforms": [{"src": "o.2", "dest": "x"}]}]}),
    ("source transform bad dest", {"name": "X", "sources": [{
        "name": "O", "subject_transforms": [{"src": "o.*", "dest": "x.{{wildcard(2)}}"}]}]}),
    ("source max msg size", {"name": "X", "max_msg_size": 10, "sources": [{"name": "SMALL"}]}),
    ("source unknown field", {"name": "X", "sources": [{"name": "O", "bogus": 1}]}),
    # Durable sourcing (a named durable of the origin): nats-server's checks of it, before any refusal.
    ("mirror durable name invalid", {"name": "X", "mirror": {
        "name": "O", "consumer": {"name": "a.b", "deliver_subject": "d"}}}),
    ("mirror durable deliver wildcard", {"name": "X", "mirror": {
        "name": "O", "consumer": {"name": "c", "deliver_subject": "d.*"}}}),
    ("mirror durable and start", {"name": "X", "mirror": {
        "name": "O", "opt_start_seq": 2, "consumer": {"name": "c", "deliver_subject": "d"}}}),
    ("mirror durable, filter and transforms", {"name": "X", "mirror": {
        "name": "O", "filter_subject": "o.1", "subject_transforms": [{"src": "o.2", "dest": "x"}],
        "consumer": {"name": "c", "deliver_subject": "d"}}}),
    ("mirror durable empty", {"name": "X", "mirror": {"name": "O", "consumer": {}}}),
    ("source durable and filter", {"name": "X", "sources": [{
        "name": "O", "filter_subject": "o.1", "consumer": {"name": "c", "deliver_subject": "d"}}]}),
    ("source durable twice", {"name": "X", "sources": [
        {"name": "O", "consumer": {"name": "c", "deliver_subject": "d"}},
        {"name": "O", "subject_transforms": [{"src": "o.1", "dest": ""}],
         "consumer": {"name": "c", "deliver_subject": "d2"}}]}),
    ("cycle", {"name": "O", "subjects": ["o.>"], "sources": [{"name": "S"}]}),
]  # fmt: skip


def _comparable(value: Any) -> Any:
    """A JSON answer without its volatile values; `active` as whether the origin was heard from."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in _VOLATILE:
                continue
            if k == "active":
                out[k] = "heard" if v >= 0 else v
            elif k == "hdrs":
                out[k] = _headers(v)
            elif k == "sources" and "state" in value:  # nats-server lists them in no fixed order
                out[k] = sorted(_comparable(v), key=lambda source: json.dumps(source, sort_keys=True))
            else:
                out[k] = _comparable(v)
        return out
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


def _headers(b64: str) -> str:
    """A stored message's headers, the origin identity (a hash of its creation time) masked."""
    lines = base64.b64decode(b64).decode().split("\r\n")
    for i, line in enumerate(lines):
        if line.startswith("Nats-Stream-Source:"):
            fields = line.split(" ")
            lines[i] = " ".join([*fields[:-1], "<ident>"])
    return "\r\n".join(lines)


async def _request(nc: Client, subject: str, body: Any = b"") -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    msg = await nc.request(subject, data, timeout=3)
    return json.loads(msg.data)


async def _wait_for(nc: Client, stream: str, last_seq: int = 0, **state: int) -> None:
    """Until the stream's last sequence reached `last_seq` and its state has the values of `state` (a
    failure after 10 s, never a hang)."""
    for _ in range(200):
        info = await _request(nc, f"$JS.API.STREAM.INFO.{stream}")
        now = info.get("state", {})
        if now.get("last_seq", 0) >= last_seq and all(now.get(k) == v for k, v in state.items()):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{stream} never reached sequence {last_seq} and {state}: {info}")


async def _wait_for_error(nc: Client, stream: str) -> None:
    """Until its mirror or one of its sources tells of an error (a failure after 10 s, never a hang)."""
    for _ in range(200):
        info = await _request(nc, f"$JS.API.STREAM.INFO.{stream}")
        if any("error" in source for source in info.get("sources", [info.get("mirror", {})])):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{stream}: no source tells of an error: {info}")


async def sourcing_flow(nc: Client) -> list[Any]:
    out: list[Any] = []

    async def req(subject: str, body: Any = b"") -> None:
        out.append((subject, _comparable(await _request(nc, subject, body))))

    async def messages(stream: str, seqs: range, ordered: bool = True) -> None:
        """The messages at `seqs`; unless `ordered`, as a set (two sources of a stream copy concurrently
        in nats-server: which comes first is not fixed), without their sequences."""
        got = [_comparable(await _request(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": s})) for s in seqs]
        if not ordered:
            for answer in got:
                answer.get("message", {}).pop("seq", None)
            got.sort(key=lambda answer: json.dumps(answer, sort_keys=True))
        out.append((f"{stream} {seqs}", got))

    await req("$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"]})
    await req("$JS.API.STREAM.CREATE.SMALL", {"name": "SMALL", "subjects": ["small"], "max_msg_size": 100})
    for i in range(1, 4):
        await nc.request(f"o.{i}", b"m%d" % i, headers={"Nats-Msg-Id": str(i)}, timeout=2)
    for _, cfg in _BAD_CONFIGS[:-1]:
        await req("$JS.API.STREAM.CREATE.X", cfg)
    await req("$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O"}})
    await req("$JS.API.STREAM.CREATE.MF", {"name": "MF", "mirror": {"name": "O", "filter_subject": "o.2"}})
    await req(
        "$JS.API.STREAM.CREATE.MT",
        {"name": "MT", "mirror": {"name": "O", "subject_transforms": [{"src": "o.1", "dest": "mt.1"}]}},
    )
    await req(
        "$JS.API.STREAM.CREATE.S",
        {
            "name": "S",
            "subjects": ["s.>"],
            "sources": [
                {"name": "O", "filter_subject": "o.1"},
                {"name": "O", "subject_transforms": [{"src": "o.3", "dest": "t.3"}]},
                {"name": "LATE"},
            ],
        },
    )
    await req("$JS.API.STREAM.CREATE.ML", {"name": "ML", "mirror": {"name": "LATE", "opt_start_seq": 2}})
    await req("$JS.API.STREAM.CREATE.O", _BAD_CONFIGS[-1][1])  # O sourcing S: a cycle
    await _wait_for(nc, "M", 3)
    await _wait_for(nc, "S", 2)
    await _wait_for(nc, "MF", 2)
    await _wait_for(nc, "MT", 1)
    await req("s.own", b"own")
    # A source's header in a publish is the server's to write.
    forged = await nc.request("s.forged", b"x", headers={"Nats-Stream-Source": "O 1 > > o.1"}, timeout=2)
    out.append(("forged", json.loads(forged.data)))
    await req("$JS.API.STREAM.INFO.M")
    await req("$JS.API.STREAM.INFO.MF")
    await req("$JS.API.STREAM.INFO.MT")
    await messages("MT", range(1, 2))
    await _wait_for_error(nc, "S")  # (nats-server tells of the missing origin a little later)
    await req("$JS.API.STREAM.INFO.S")
    await _wait_for_error(nc, "ML")
    await req("$JS.API.STREAM.INFO.ML")
    await messages("M", range(1, 4))
    await messages("S", range(1, 3), ordered=False)
    await messages("S", range(3, 4))
    # Live: what the origin stores now is copied. (An origin that appears later is caught up from too, but
    # nats-server retries only after 10 s or more: test_late_origin_is_caught_up has pynatsd alone.)
    for i in (1, 3):
        await nc.request(f"o.{i}", b"live%d" % i, timeout=2)
    await _wait_for(nc, "M", 5)
    await _wait_for(nc, "S", 5)
    await messages("M", range(4, 6))
    await messages("S", range(4, 6), ordered=False)
    await req("$JS.API.STREAM.INFO.M")
    # Updates: a mirror's origin may not change (removing it promotes the mirror); sources may.
    await req("$JS.API.STREAM.UPDATE.M", {"name": "M", "mirror": {"name": "LATE"}})
    # (whether nats-server's answer has the missing origin's error yet is a race: left out)
    update = {"name": "S", "subjects": ["s.>"], "sources": [{"name": "LATE"}]}
    answer = _comparable(await _request(nc, "$JS.API.STREAM.UPDATE.S", update))
    answer["sources"][0].pop("error", None)
    out.append(("update of the sources", answer))
    await req("$JS.API.STREAM.UPDATE.MF", {"name": "MF", "subjects": ["mf"]})
    await req("$JS.API.STREAM.NAMES", {"subject": "o.1"})
    # mirror_direct: inherited from the origin's allow_direct; the caught-up mirror answers the origin's
    # direct gets (here once the origin is gone, so only the mirror can).
    await req("$JS.API.STREAM.CREATE.OD", {"name": "OD", "subjects": ["od"], "allow_direct": True})
    for i in range(2):
        await nc.request("od", b"d%d" % i, timeout=2)
    await req("$JS.API.STREAM.CREATE.MD", {"name": "MD", "mirror": {"name": "OD"}})
    await _wait_for(nc, "MD", 2)
    await req("$JS.API.STREAM.DELETE.OD")
    direct = await nc.request("$JS.API.DIRECT.GET.OD", b'{"seq": 2}', timeout=2)
    headers = {k: v for k, v in (direct.headers or {}).items() if k != "Nats-Time-Stamp"}
    out.append(("direct get of a mirrored stream", (headers, direct.data)))
    # An interest or work queue origin: its mirrors and sources are consumers that take each message; a
    # chain (a source of a source, a mirror of a mirror) keeps one source header, the last.
    await req("$JS.API.STREAM.CREATE.I", {"name": "I", "subjects": ["i"], "retention": "interest"})
    await req("$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w"], "retention": "workqueue"})
    await req("$JS.API.STREAM.CREATE.IM", {"name": "IM", "mirror": {"name": "I"}})
    await req("$JS.API.STREAM.CREATE.WS", {"name": "WS", "sources": [{"name": "W"}]})
    await req("$JS.API.STREAM.CREATE.S2", {"name": "S2", "sources": [{"name": "S", "filter_subject": "s.>"}]})
    await req("$JS.API.STREAM.CREATE.MM", {"name": "MM", "mirror": {"name": "M"}})
    await _wait_for(nc, "I", consumer_count=1)  # (the copying has begun: each origin has its consumer)
    await _wait_for(nc, "W", consumer_count=1)
    await req("i", b"x")
    await req("w", b"x")
    for stream, last in (("IM", 1), ("WS", 1), ("S2", 1), ("MM", 5)):
        await _wait_for(nc, stream, last)
    await _wait_for(nc, "I", messages=0)  # (taken by their consumers)
    await _wait_for(nc, "W", messages=0)
    for stream in ("I", "W", "IM", "WS", "S2", "MM"):
        await req(f"$JS.API.STREAM.INFO.{stream}")
    await messages("S2", range(1, 2))
    return out


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with jetstream_pair(tmp_path) as servers:
        yield servers


async def test_sourcing_matches_nats_server(pair: tuple[ServerProcess, ServerProcess]) -> None:
    ref_nc, our_nc = await nats.connect(pair[0].url), await nats.connect(pair[1].url)
    try:
        expected, got = await asyncio.gather(sourcing_flow(ref_nc), sourcing_flow(our_nc))
    finally:
        await ref_nc.close()
        await our_nc.close()
    diffs = [
        f"{subject}:\n  nats-server {want}\n  pynatsd     {have}"
        for (subject, want), (_, have) in zip(expected, got, strict=True)
        if have != want
    ]
    assert not diffs, "\n".join(diffs)


# Account B reaches account A's JetStream API under JS.A.API and receives its deliveries (nats-server's
# documented setup for sourcing across accounts).
_ACCOUNTS = """
jetstream { store_dir: "%s" }
accounts {
  A: {
    jetstream: enabled
    users: [{user: a, password: a}]
    exports: [{service: "$JS.API.>"}, {service: "$JS.FC.>"}, {stream: "deliver.A.>"}]
  }
  B: {
    jetstream: enabled
    users: [{user: b, password: b}]
    imports: [
      {service: {account: A, subject: "$JS.API.>"}, to: "JS.A.API.>"}
      {service: {account: A, subject: "$JS.FC.>"}}
      {stream: {account: A, subject: "deliver.A.>"}}
    ]
  }
}
"""
_EXTERNAL = {"api": "JS.A.API", "deliver": "deliver.A"}


async def external_flow(url: str) -> list[Any]:
    a = await nats.connect(url, user="a", password="a")
    b = await nats.connect(url, user="b", password="b")
    out: list[Any] = []

    async def req(nc: Client, subject: str, body: Any = b"") -> None:
        out.append((subject, _comparable(await _request(nc, subject, body))))

    try:
        await req(a, "$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"]})
        for i in range(3):
            await a.request(f"o.{i}", b"m%d" % i, timeout=2)
        await req(
            b, "$JS.API.STREAM.CREATE.S", {"name": "S", "sources": [{"name": "O", "external": _EXTERNAL}]}
        )
        await req(b, "$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O", "external": _EXTERNAL}})
        await req(b, "$JS.API.STREAM.CREATE.L", {"name": "L", "sources": [{"name": "O"}]})  # B's own: none
        await req(b, "$JS.API.STREAM.CREATE.N", {"name": "N", "sources": [
            {"name": "ZZ", "external": _EXTERNAL},  # no such stream there
            {"name": "O", "external": {"api": "NOWHERE.API", "deliver": "deliver.A"}},  # no answer
        ]})  # fmt: skip
        for bad in ({"api": "$JS.API", "deliver": "d"}, {"api": "JS.A.API", "deliver": "d.*"},
                    {"api": "JS.*.API", "deliver": "d"}):  # fmt: skip
            await req(
                b, "$JS.API.STREAM.CREATE.X", {"name": "X", "sources": [{"name": "O", "external": bad}]}
            )
        await a.request("o.live", b"live", timeout=2)
        await _wait_for(b, "S", 4)
        await _wait_for(b, "M", 4)
        for stream in ("S", "M", "L", "N"):
            if stream in "LN":  # (nats-server tells of a missing origin a little later)
                await _wait_for_error(b, stream)
            await req(b, f"$JS.API.STREAM.INFO.{stream}")
        for seq in range(1, 5):
            await req(b, "$JS.API.STREAM.MSG.GET.S", {"seq": seq})
        await req(b, "$JS.API.STREAM.MSG.GET.M", {"seq": 4})
        await req(a, "$JS.API.STREAM.INFO.O")
    finally:
        await a.close()
        await b.close()
    return out


async def test_external_matches_nats_server(tmp_path: Path) -> None:
    """A mirror and a source of another account's stream, through its API and deliver prefixes."""
    with contextlib.ExitStack() as stack:
        need_tool(nats_server_binary() is not None, "nats-server")
        ref, ours = (
            stack.enter_context(
                server_with_config(kind, tmp_path / f"{kind}.conf", _ACCOUNTS % (tmp_path / kind))
            )
            for kind in ("nats-server", "pynatsd")
        )
        expected, got = await asyncio.gather(external_flow(ref.url), external_flow(ours.url))
    diffs = [
        f"{subject}:\n  nats-server {want}\n  pynatsd     {have}"
        for (subject, want), (_, have) in zip(expected, got, strict=True)
        if have != want
    ]
    assert not diffs, "\n".join(diffs)


async def test_late_origin_is_caught_up(nc: Client) -> None:
    """A mirror or source of a stream not there yet copies it from its start once it is created."""
    js = nc.jetstream(timeout=5)
    await js.add_stream(name="ML", mirror=api.StreamSource(name="LATE", opt_start_seq=2))
    await js.add_stream(name="SL", sources=[api.StreamSource(name="LATE")])
    info = await js.stream_info("ML")
    assert info.mirror is not None and info.mirror.error is not None
    await js.add_stream(name="LATE", subjects=["late"])
    for i in range(3):
        await js.publish("late", b"%d" % i)
    await _until_copied(js, "ML", 2)
    await _until_copied(js, "SL", 3)
    assert [(seq, data) for seq, _, data in await _copies(js, "ML")] == [(2, b"1"), (3, b"2")]
    assert [data for _, _, data in await _copies(js, "SL")] == [b"0", b"1", b"2"]
    info = await js.stream_info("ML")
    assert info.mirror is not None and info.mirror.error is None and info.mirror.lag == 0


async def _copies(js: Any, stream: str) -> list[tuple[int, str, bytes]]:
    """Every message of a stream, read by a consumer: (sequence, its source header or '', payload)."""
    total = (await js.stream_info(stream)).state.messages
    reader = await js.pull_subscribe(
        "", stream=stream, config=api.ConsumerConfig(ack_policy=api.AckPolicy.NONE)
    )
    out: list[tuple[int, str, bytes]] = []
    while len(out) < total:
        for msg in await reader.fetch(min(500, total - len(out)), timeout=5):
            header = (msg.headers or {}).get("Nats-Stream-Source", "")
            out.append((msg.metadata.sequence.stream, header, msg.data))
    await reader.unsubscribe()
    return out


async def _until_copied(js: Any, stream: str, count: int) -> None:
    for _ in range(400):
        if (await js.stream_info(stream)).state.messages >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{stream}: fewer than {count} messages copied")


async def test_kill_9_keeps_the_copy_position(tmp_path: Path) -> None:
    """nats-py end to end: a mirror and a source copy the origin; kill -9 once the catch-up has begun
    (2000 messages: a few turns of the loop), a restart, more messages: each origin message is in the
    mirror under its own sequence and in the source exactly once, in order."""
    store = tmp_path / "store"
    async with jetstream_life("pynatsd", store, kill=True) as (srv, nc):
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="ORIGIN", subjects=["orig.>"])
        for i in range(1999):
            await nc.publish(f"orig.{i % 3}", b"a%d" % i)
        await js.publish("orig.1", b"a1999")  # (after all those before it)
        await js.add_stream(name="MIRROR", mirror=api.StreamSource(name="ORIGIN"))
        await js.add_stream(
            name="AGG", sources=[api.StreamSource(name="ORIGIN", filter_subject="orig.>")], subjects=["agg"]
        )
        await _until_copied(js, "AGG", 1)  # the copying has begun: kill it somewhere along the way
        srv.stop(signal.SIGKILL)
    async with jetstream_life("pynatsd", store, kill=True) as (srv, nc):
        js = nc.jetstream(timeout=5)
        for i in range(2000, 2100):
            await js.publish(f"orig.{i % 3}", b"a%d" % i)
        await _until_copied(js, "MIRROR", 2100)
        await _until_copied(js, "AGG", 2100)
        mirror = await _copies(js, "MIRROR")
        assert [(seq, data) for seq, _, data in mirror] == [(s, b"a%d" % (s - 1)) for s in range(1, 2101)]
        agg = await _copies(js, "AGG")
        origin_seqs = [int(header.split(" ")[1]) for _, header, _ in agg]
        assert origin_seqs == list(range(1, 2101))  # every one once, in order
        assert [data for _, _, data in agg] == [b"a%d" % i for i in range(2100)]
        info = await js.stream_info("AGG")
        assert info.sources is not None and info.sources[0].lag == 0 and info.sources[0].active is not None
        # A consumer on the mirror reads the copies as from any stream.
        sub = await js.pull_subscribe("orig.1", "reader", stream="MIRROR")
        first = (await sub.fetch(1))[0]
        assert (first.data, first.metadata.sequence.stream) == (b"a1", 2)
        # Purged, the copies no longer tell where the source stands: the saved position does.
        await js.purge_stream("AGG")
        srv.stop(signal.SIGKILL)
    async with jetstream_life("pynatsd", store) as (_, nc):
        js = nc.jetstream(timeout=5)
        await js.publish("orig.1", b"after purge")
        await _until_copied(js, "AGG", 1)
        assert [(int(h.split(" ")[1]), data) for _, h, data in await _copies(js, "AGG")] == [
            (2101, b"after purge")
        ]
