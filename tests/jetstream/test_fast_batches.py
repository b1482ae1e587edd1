"""Fast batch publishing against nats-server -js: `allow_batched` (its checks, API level 4), the batch named
in the reply subject (`<prefix>.<id>.<flow>.<gap mode>.<seq>.<op>.$FI`), every answer the publisher hears
on it (flow acks, gaps, errors mid-batch, the commit's PubAck) and every refusal, what is stored (read back),
and a kill -9: what was stored before it stays, the open batch is gone."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from pynatsd.jetstream import fast_batching
from tests.jetstream.conftest import JsServer, jetstream_life
from tests.jetstream.test_api_errors import ask
from tests.jetstream.test_batches import _stored
from tests.servers import require, server_with_config

CREATE, UPDATE = "$JS.API.STREAM.CREATE.", "$JS.API.STREAM.UPDATE."


async def test_fast_batch_config_answered_as_nats_server(clients: tuple[Client, Client]) -> None:
    cases: list[tuple[str, Any]] = [
        (CREATE + "C1", {"name": "C1", "allow_batched": True}),
        (UPDATE + "C1", {"name": "C1", "allow_batched": False}),
        (UPDATE + "C1", {"name": "C1", "allow_batched": True}),
        (CREATE + "C2", {"name": "C2", "allow_batched": True, "mirror": {"name": "C1"}}),
        (CREATE + "C3", {"name": "C3", "allow_batched": 1}),
        (
            CREATE + "C4",
            {"name": "C4", "allow_batched": True, "allow_atomic": True, "allow_msg_counter": True},
        ),
    ]
    ref, ours = clients
    for subject, body in cases:
        assert await ask(ours, subject, body) == await ask(ref, subject, body), (subject, body)
    levels = []
    for nc in clients:
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.C1", b"", timeout=5)).data)
        levels.append((info["config"]["allow_batched"], info["config"]["metadata"]["_nats.req.level"]))
    assert levels == [(True, "4"), (True, "4")]


def _reply(batch_id: str, seq: int, op: int, flow: int | str = 10, gap: str = "fail") -> str:
    return f"fb.{batch_id}.{flow}.{gap}.{seq}.{op}.$FI"


class Publisher:
    """Raw publishes with `.$FI` replies, each followed by a marker that cannot change any batch (a ping of
    an unknown batch, answered 10208 in order after what the stream sent before): the answers in between are
    that publish's."""

    def __init__(self, nc: Client, marker: str = _reply("sync", 2, 4)) -> None:
        self.nc = nc
        self.marker = marker
        self.heard: asyncio.Queue[Msg] = asyncio.Queue()

    async def start(self) -> None:
        await self.nc.subscribe("fb.>", cb=self.heard.put)

    async def publish(
        self, subject: str, reply: str, payload: bytes = b"x", headers: dict[str, str] | None = None
    ) -> list[tuple[str, Any]]:
        await self.nc.publish(subject, payload, reply=reply, headers=headers)
        await self.nc.publish(subject, b"", reply=self.marker)
        out = []
        while True:
            msg = await asyncio.wait_for(self.heard.get(), 5)
            if msg.subject == self.marker:
                return out
            out.append((msg.subject.split(".", 1)[1], json.loads(msg.data)))


ID_65 = "x" * 65
# (subject, reply, headers, payload): published one after the other, each one's answers compared.
PUBLISHES: list[tuple[str, str, dict[str, str] | None, bytes]] = [
    # A batch of 25 acked every 10, committed; one ended by an end marker (not stored).
    *[("f.a", _reply("b25", i, 0 if i == 1 else 2 if i == 25 else 1), None, b"%d" % i) for i in range(1, 26)],
    ("f.b", _reply("eob", 1, 0, 3), None, b"e1"),
    ("f.b", _reply("eob", 2, 1, 3), None, b"e2"),
    ("f.b", _reply("eob", 3, 3, 3), None, b""),
    ("f.c", _reply("one", 1, 2), None, b"alone"),
    # Refused: disabled, patterns, ids.
    ("p.a", _reply("off", 1, 0), None, b"x"),
    ("f.a", "fb.$FI", None, b"x"),
    ("f.a", "fb.x.$FI", None, b"x"),
    ("f.a", _reply("pat", 2, 0), None, b"x"),
    ("f.a", _reply("pat", 1, 1), None, b"x"),
    ("f.a", _reply("pat", 1, 3), None, b"x"),
    ("f.a", _reply("pat", 1, 5), None, b"x"),
    ("f.a", _reply("pat", 0, 4), None, b"x"),
    ("f.a", _reply("pat", 1, 0, gap="maybe"), None, b"x"),
    ("f.a", _reply("pat", 18446744073709551615, 1), None, b"x"),
    ("f.a", _reply(ID_65, 1, 0), None, b"x"),
    ("f.a", _reply("nobody", 3, 1), None, b"x"),
    ("f.a", _reply("nobody", 3, 2), None, b"x"),
    # Gaps: the batch ends (gap mode fail) or goes on (ok).
    ("f.g", _reply("gf", 1, 0), None, b"g1"),
    ("f.g", _reply("gf", 3, 1), None, b"g3"),
    ("f.g", _reply("gf", 4, 2), None, b"g4"),
    ("f.g", _reply("go", 1, 0, 2, "ok"), None, b"o1"),
    ("f.g", _reply("go", 3, 1, 2, "ok"), None, b"o3"),
    ("f.g", _reply("go", 4, 1, 2, "ok"), None, b"o4"),
    ("f.g", _reply("go", 5, 1, 2, "ok"), None, b"o5"),
    ("f.g", _reply("go", 4, 1, 2, "ok"), None, b"o4again"),
    ("f.g", _reply("gb", 1, 0), None, b"b1"),
    ("f.g", _reply("gb", 2, 1), None, b"b2"),
    ("f.g", _reply("gb", 2, 1), None, b"b2again"),
    # Pings: the last flow ack again, or the gap up to it.
    ("f.p", _reply("ping", 1, 0, 2), None, b"p1"),
    ("f.p", _reply("ping", 1, 4, 2), None, b""),
    ("f.p", _reply("ping", 2, 1, 2), None, b"p2"),
    ("f.p", _reply("ping", 3, 1, 2), None, b"p3"),
    ("f.p", _reply("ping", 3, 4, 2), None, b""),
    ("f.p", _reply("ping", 5, 4, 2), None, b""),
    ("f.p", _reply("pok", 1, 0, 2, "ok"), None, b"k1"),
    ("f.p", _reply("pok", 4, 4, 2, "ok"), None, b""),
    ("f.p", _reply("pok", 5, 2, 2, "ok"), None, b"k5"),
    ("f.p", _reply("pnew", 1, 4), None, b""),
    # A message refused mid-batch: reported, the batch ends (fail) or goes on (ok); the first one refused is
    # answered as a plain publish.
    ("f.e", _reply("ef", 1, 0), None, b"e1"),
    ("f.e", _reply("ef", 2, 1), {"Nats-Expected-Stream": "OTHER"}, b"e2"),
    ("f.e", _reply("ef", 3, 2), None, b"e3"),
    ("f.e", _reply("eo", 1, 0, 10, "ok"), None, b"o1"),
    ("f.e", _reply("eo", 2, 1, 10, "ok"), {"Nats-Expected-Last-Sequence": "1"}, b"o2"),
    ("f.e", _reply("eo", 3, 1, 10, "ok"), None, b"o3"),
    ("f.e", _reply("eo", 4, 2, 10, "ok"), {"Nats-TTL": "1s"}, b"o4"),
    ("f.e", _reply("e1", 1, 0), {"Nats-Expected-Stream": "OTHER"}, b"x"),
    ("f.e", _reply("e1", 2, 2), None, b"x"),
    ("f.e", _reply("e1o", 1, 0, 10, "ok"), {"Nats-Expected-Stream": "OTHER"}, b"x"),
    ("f.e", _reply("e1o", 2, 2, 10, "ok"), None, b"y"),
    ("f.e", _reply("ec", 1, 2), {"Nats-Rollup": "sub"}, b"x"),
    # Duplicates (Nats-Msg-Id) are skipped; a batch of one duplicate is answered as a plain publish.
    ("f.d", _reply("dup", 1, 0), {"Nats-Msg-Id": "m1"}, b"d1"),
    ("f.d", _reply("dup", 2, 1), {"Nats-Msg-Id": "m1"}, b"d2"),
    ("f.d", _reply("dup", 3, 2), {"Nats-Msg-Id": "m3"}, b"d3"),
    ("f.d", _reply("dup1", 1, 2), {"Nats-Msg-Id": "m3"}, b"d"),
    ("f.d", _reply("dupc", 1, 0), None, b"c1"),
    ("f.d", _reply("dupc", 2, 2), {"Nats-Msg-Id": "m1"}, b"c2"),
    # The required API level: too high refuses the batch, met is taken out of the stored headers.
    ("f.l", _reply("lvl", 1, 0), {"Nats-Required-Api-Level": "4", "X": "y"}, b"l1"),
    ("f.l", _reply("lvl", 2, 1), {"Nats-Required-Api-Level": "9"}, b"l2"),
    ("f.l", _reply("lvl", 3, 2), None, b"l3"),
    ("f.l", _reply("lvl2", 1, 2), {"Nats-Required-Api-Level": "5"}, b"l"),
    ("f.l", _reply("lvl3", 1, 2), {"Nats-Required-Api-Level": "-1"}, b"l"),
    ("f.l", _reply("lvl4", 1, 2), {"Nats-Required-Api-Level": "five"}, b"l"),
    # The reply subject, not an atomic batch's headers, makes a message part of a fast batch.
    ("f.h", _reply("hdr", 1, 2), {"Nats-Batch-Id": "atomic", "Nats-Batch-Sequence": "1"}, b"h"),
    # The flow asked for: a default for none, at most 500.
    ("f.f", _reply("f0", 1, 0, 0), None, b"x"),
    ("f.f", _reply("f0", 2, 3, 0), None, b""),
    ("f.f", _reply("f9", 1, 0, 900), None, b"x"),
    ("f.f", _reply("f9", 2, 3, 900), None, b""),
    ("f.f", _reply("fz", 1, 0, "zz"), None, b"x"),
    ("f.f", _reply("fz", 2, 3, "zz"), None, b""),
    # Two batches at once: each paced to every message, then sped up.
    ("f.t", _reply("t1", 1, 0, 8), None, b"1"),
    ("f.t", _reply("t2", 1, 0, 8), None, b"1"),
    *[("f.t", _reply(b, i, 1, 8), None, b"%d" % i) for i in range(2, 9) for b in ("t1", "t2")],
    ("f.t", _reply("t1", 9, 2, 8), None, b"9"),
    ("f.t", _reply("t2", 9, 1, 8), None, b"9"),
    ("f.t", _reply("t2", 10, 3, 8), None, b""),
    # Discard new at 3 messages: the limit refuses mid-batch.
    ("n.a", _reply("lim", 1, 0), None, b"1"),
    ("n.a", _reply("lim", 2, 1), None, b"2"),
    ("n.a", _reply("lim", 3, 1), None, b"3"),
    ("n.a", _reply("lim", 4, 1), None, b"4"),
    ("n.a", _reply("lim", 5, 2), None, b"5"),
]


async def fast_batch_answers(nc: Client) -> list[Any]:
    for cfg in (
        {"name": "F", "subjects": ["f.>"], "allow_batched": True, "allow_atomic": True},
        {"name": "P", "subjects": ["p.>"]},
        {"name": "N", "subjects": ["n.>"], "allow_batched": True, "discard": "new", "max_msgs": 3},
    ):
        await nc.request(CREATE + str(cfg["name"]), json.dumps(cfg).encode(), timeout=5)
    publisher = Publisher(nc)
    await publisher.start()
    out: list[Any] = []
    for subject, reply, hdrs, payload in PUBLISHES:
        out.append(await publisher.publish(subject, reply, payload, hdrs))
    out.append(await _stored(nc, "F"))
    out.append(await _stored(nc, "N"))
    # 1000 batches open on one stream at most: the 1001st is refused; switching batches off drops them all.
    await nc.request(CREATE + "T", b'{"name": "T", "subjects": ["t"], "allow_batched": true}', timeout=5)
    for i in range(1000):
        await nc.publish("t", b"", reply=_reply(f"open{i}", 1, 0))
    out.append(await publisher.publish("t", _reply("open1000", 1, 0)))
    out.append(await publisher.publish("t", _reply("open0", 2, 2)))
    out.append(await publisher.publish("t", _reply("open1000", 1, 0)))
    await nc.request(UPDATE + "T", b'{"name": "T", "subjects": ["t"]}', timeout=5)
    await nc.request(UPDATE + "T", b'{"name": "T", "subjects": ["t"], "allow_batched": true}', timeout=5)
    out.append(await publisher.publish("t", _reply("open1", 2, 2)))
    # No size limit (an atomic batch's is 1000): acked every 500, committed at 1001.
    for i in range(1, 1001):
        await nc.publish("t", b"%d" % i, reply=_reply("big", i, 0 if i == 1 else 1, 500))
    out.append(await publisher.publish("t", _reply("big", 1001, 2, 500)))
    return out


async def test_fast_batches_answered_and_stored_as_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    want, got = await asyncio.gather(fast_batch_answers(ref), fast_batch_answers(ours))
    diffs = [
        f"{PUBLISHES[i] if i < len(PUBLISHES) else i}:\n  nats-server {w}\n  pynatsd     {g}"
        for i, (w, g) in enumerate(zip(want, got, strict=True))
        if g != w
    ]
    assert not diffs, "\n".join(diffs)


# Streams whose own rules come first: (config, publishes).
SPECIAL: list[tuple[dict[str, Any], list[tuple[str, str, dict[str, str] | None, bytes]]]] = [
    (
        {"name": "SZ", "subjects": ["sz"], "allow_batched": True, "max_msg_size": 8},
        [
            ("sz", _reply("big", 1, 0), None, b"small"),
            ("sz", _reply("big", 2, 1), None, b"far too large"),
            ("sz", _reply("big", 2, 2), None, b"fits"),
            ("sz", _reply("off", 1, 0, gap="x"), None, b"far too large"),
        ],
    ),
    (
        {"name": "CN", "subjects": ["cn.>"], "allow_batched": True, "allow_msg_counter": True},
        [
            ("cn.a", _reply("c", 1, 0), {"Nats-Incr": "2"}, b""),
            ("cn.a", _reply("c", 2, 1), {"Nats-Incr": "x"}, b""),
            ("cn.b", _reply("c", 2, 1, gap="fail"), {"Nats-Incr": "5"}, b""),
            ("cn.a", _reply("c", 3, 2), {"Nats-Incr": "1"}, b""),
        ],
    ),
    (
        {
            "name": "TR",
            "subjects": ["tr.>"],
            "allow_batched": True,
            "subject_transform": {"src": "tr.>", "dest": "moved.>"},
            "allow_msg_ttl": True,
            "allow_rollup_hdrs": True,
        },
        [
            ("tr.a", _reply("t", 1, 0), {"Nats-TTL": "1h"}, b"1"),
            ("tr.b", _reply("t", 2, 1), None, b"2"),
            ("tr.a", _reply("t", 3, 2), {"Nats-Rollup": "all"}, b"3"),
        ],
    ),
    (
        {"name": "IN", "subjects": ["in"], "allow_batched": True, "retention": "interest"},
        [
            ("in", _reply("i", 1, 0, 2), None, b"1"),
            ("in", _reply("i", 2, 1, 2), None, b"2"),
            ("in", _reply("i", 3, 2, 2), None, b"3"),
        ],
    ),
]


async def special_answers(nc: Client) -> list[Any]:
    publisher = Publisher(nc)
    await publisher.start()
    out: list[Any] = []
    for cfg, publishes in SPECIAL:
        name = str(cfg["name"])
        out.append(await ask(nc, CREATE + name, cfg))
        for subject, reply, hdrs, payload in publishes:
            out.append(await publisher.publish(subject, reply, payload, hdrs))
        out.append(await _stored(nc, name))
    # Sealed: refused before anything else.
    await ask(nc, UPDATE + "SZ", {**SPECIAL[0][0], "sealed": True})
    out.append(await publisher.publish("sz", _reply("late", 1, 0), b"x"))
    out.append(await publisher.publish("sz", _reply(ID_65, 1, 9), b"x"))
    return out


async def no_ack_answers(nc: Client) -> list[Any]:
    """A stream without acks answers no error and no first flow ack, but flow acks, gaps, errors mid-batch
    and the commit's PubAck all the same; the marker is a ping of a batch kept open."""
    cfg = {"name": "NA", "subjects": ["na"], "allow_batched": True, "no_ack": True, "max_msg_size": 8}
    await ask(nc, CREATE + "NA", cfg)
    publisher = Publisher(nc, _reply("sync", 1, 4))
    await publisher.start()
    await nc.publish("na", b"s", reply=_reply("sync", 1, 0))
    out: list[Any] = []
    for reply, payload in [
        (_reply("n", 1, 0, 2), b"1"),
        (_reply("n", 2, 1, 2), b"2"),
        (_reply("n", 3, 1, 2), b"far too large"),
        (_reply("n", 5, 1, 2), b"5"),
        (_reply("m", 4, 1), b"unknown"),
        (_reply("o", 1, 0, 2, "ok"), b"1"),
        (_reply("o", 3, 1, 2, "ok"), b"3"),
        (_reply("o", 4, 2, 2, "ok"), b"4"),
    ]:
        out.append(await publisher.publish("na", reply, payload))
    out.append(await _stored(nc, "NA"))
    return out


async def test_fast_batches_on_special_streams_as_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    for scenario in (special_answers, no_ack_answers):
        want, got = await asyncio.gather(scenario(ref), scenario(ours))
        diffs = [
            f"{scenario.__name__} {i}:\n  nats-server {w}\n  pynatsd     {g}"
            for i, (w, g) in enumerate(zip(want, got, strict=True))
            if g != w
        ]
        assert not diffs, "\n".join(diffs)


@pytest.mark.parametrize("kind", ["nats-server", "pynatsd"])
async def test_fast_batch_across_kill_9(tmp_path: Path, kind: str) -> None:
    """What a fast batch stored before a kill -9 stays (each message is stored as it comes, and its flow ack
    sent once written); the open batch is gone, so its next message names an unknown batch."""
    store = tmp_path / "store"
    async with jetstream_life(kind, store, kill=True) as (_, nc):
        cfg = {"name": "K", "subjects": ["k.>"], "allow_batched": True}
        await nc.request(CREATE + "K", json.dumps(cfg).encode(), timeout=5)
        publisher = Publisher(nc)
        await publisher.start()
        await publisher.publish("k.a", _reply("open", 1, 0, 2), b"kept 1")
        heard = await publisher.publish("k.a", _reply("open", 2, 1, 2), b"kept 2")
        assert heard == [(_reply("open", 2, 1, 2)[3:], {"type": "ack", "seq": 2, "msgs": 2})]
    async with jetstream_life(kind, store) as (_, nc):
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.K", b"", timeout=5)).data)
        assert info["config"]["allow_batched"] is True
        stored = await _stored(nc, "K")
        assert [(s, d) for s, _, d in stored] == [("k.a", b"kept 1"), ("k.a", b"kept 2")]
        publisher = Publisher(nc)
        await publisher.start()
        late = await publisher.publish("k.a", _reply("open", 3, 2, 2), b"late")
        assert [body["error"]["err_code"] for _, body in late] == [10208]


async def test_idle_fast_batch_dropped_after_its_timeout(
    js_server: JsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-server drops a fast batch idle for 10 s (shortened here): what it stored stays, its next message
    names an unknown batch."""
    monkeypatch.setattr(fast_batching, "BATCH_TIMEOUT", 0.1)
    nc = await js_server.connect()
    await ask(nc, CREATE + "I", {"name": "I", "subjects": ["i"], "allow_batched": True})
    publisher = Publisher(nc)
    await publisher.start()
    assert await publisher.publish("i", _reply("idle", 1, 0), b"1") == [
        (_reply("idle", 1, 0)[3:], {"type": "ack", "seq": 0, "msgs": 10})
    ]
    await asyncio.sleep(0.4)  # the batch's timer, not an event a client can wait for
    late = await publisher.publish("i", _reply("idle", 2, 2), b"2")
    assert [body["error"]["err_code"] for _, body in late] == [10208]
    assert [d for _, _, d in await _stored(nc, "I")] == [b"1"]


async def test_open_fast_batches_counted_across_streams(
    js_server: JsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's limit of open fast batches (50 000, lowered here) counts every stream's; a batch ended,
    or its stream deleted, frees its place."""
    monkeypatch.setattr(fast_batching, "MAX_INFLIGHT_TOTAL", 2)
    nc = await js_server.connect()
    for name in ("X", "Y"):
        await ask(nc, CREATE + name, {"name": name, "subjects": [name.lower()], "allow_batched": True})
    publisher = Publisher(nc)
    await publisher.start()

    async def codes(subject: str, reply: str) -> list[Any]:
        return [body.get("error", {}).get("err_code") for _, body in await publisher.publish(subject, reply)]

    assert await codes("x", _reply("a", 1, 0)) == [None]
    assert await codes("y", _reply("b", 1, 0)) == [None]
    assert await codes("y", _reply("c", 1, 0)) == [10211]
    assert await codes("x", _reply("a", 2, 2)) == [None]  # committed: its place is free
    assert await codes("y", _reply("c", 1, 0)) == [None, None]  # (two open: a flow ack at once)
    assert await codes("x", _reply("d", 1, 0)) == [10211]
    await nc.request("$JS.API.STREAM.DELETE.Y", b"", timeout=5)
    assert await codes("x", _reply("d", 1, 0)) == [None]


IMPORTED = """
jetstream {{ store_dir: "{store}" }}
accounts {{
  A: {{ jetstream: enabled, users: [{{user: a, password: a}}], exports: [{{service: "svc.>"}}] }}
  B: {{ users: [{{user: b, password: b}}], imports: [{{service: {{account: A, subject: "svc.>"}}}}] }}
}}
"""


async def imported_answers(kind: str, tmp_path: Path) -> list[Any]:
    text = IMPORTED.format(store=tmp_path / kind)
    with server_with_config(kind, tmp_path / f"{kind}.conf", text) as srv:
        owner = await nats.connect(srv.url, user="a", password="a", allow_reconnect=False)
        importer = await nats.connect(srv.url, user="b", password="b", allow_reconnect=False)
        await ask(owner, CREATE + "S", {"name": "S", "subjects": ["svc.>"], "allow_batched": True})
        publisher = Publisher(importer)
        await publisher.start()
        out: list[Any] = []
        for reply, hdrs in [
            (_reply("sv", 1, 0, 2), {"X": "y"}),
            (_reply("sv", 2, 1, 2), None),
            (_reply("sv", 3, 1, 2), None),
            (_reply("sv", 4, 2, 2), None),
            ("fb.plain.$FI", None),
        ]:
            out.append(await publisher.publish("svc.x", reply, b"m", hdrs))
        out.append(await _stored(owner, "S"))
        await owner.close()
        await importer.close()
    return out


async def test_fast_batch_across_a_service_import(tmp_path: Path) -> None:
    """Published through a service import, the batch is named by the original reply subject, which the
    import keeps in Nats-Request-Info (not stored); the answers come back through the import."""
    require("nats-server")
    want = await imported_answers("nats-server", tmp_path)
    assert await imported_answers("pynatsd", tmp_path) == want
    assert want[3] == [(_reply("sv", 4, 2, 2)[3:], {"stream": "S", "seq": 4, "batch": "sv", "count": 4})]


class _BrokenStream:
    """What FastBatches uses of a stream, whose store fails with a bug."""

    name = "B"
    config = {"allow_batched": True}
    _no_ack = _sealed = False
    _max_msg_size = 1 << 20
    _ack_head = b'{"stream":"B",'

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.account = type("Account", (), {"api_errors_on_publish": 0, "js": None})()
        self.account.js = type("Js", (), {"loop": asyncio.get_running_loop()})()

    def _answer(self, reply: bytes, seq: int, body: bytes) -> None:
        self.sent.append(body)

    def process(self, subject: bytes, hdrs: bytes | None, payload: bytes) -> tuple[int, bool]:
        raise RuntimeError("boom")


async def test_a_bug_storing_a_message_is_answered() -> None:
    """A bug while storing is reported as an error mid-batch (500, 10051): nobody is left waiting."""
    stream = _BrokenStream()
    batches = fast_batching.FastBatches(stream, 5)  # type: ignore[arg-type]
    reply = _reply("bug", 1, 0, gap="ok").encode()
    batches.publish(b"b", reply, None, b"x", reply)
    batches.drop_all()
    assert [json.loads(body) for body in stream.sent] == [
        {"type": "ack", "seq": 0, "msgs": 10},
        {
            "type": "err",
            "seq": 1,
            "error": {"code": 500, "err_code": 10051, "description": "RuntimeError: boom"},
        },
    ]
