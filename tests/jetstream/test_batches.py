"""Atomic batch publishing against nats-server -js: `allow_atomic` (its checks), what each message of a batch
is answered (an empty message until the commit, then one PubAck with `batch` and `count`), every refusal
(disabled, bad id, missing sequence, gaps, unknown batch, bad commit, too large, headers a batch cannot
hold), what is stored (read back), and a kill -9: a batch not committed leaves nothing, a committed one is
stored whole."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from pynatsd.jetstream import batching
from tests.jetstream.conftest import JsServer, jetstream_life
from tests.jetstream.test_api_errors import ask
from tests.servers import require, server_with_config

CREATE, UPDATE = "$JS.API.STREAM.CREATE.", "$JS.API.STREAM.UPDATE."


async def test_atomic_config_answered_as_nats_server(clients: tuple[Client, Client]) -> None:
    cases: list[tuple[str, Any]] = [
        (CREATE + "A1", {"name": "A1", "allow_atomic": True}),
        (UPDATE + "A1", {"name": "A1", "allow_atomic": False}),
        (UPDATE + "A1", {"name": "A1", "allow_atomic": True}),
        (CREATE + "A2", {"name": "A2", "allow_atomic": True, "mirror": {"name": "A1"}}),
        (CREATE + "A3", {"name": "A3", "allow_atomic": 1}),
        (CREATE + "A4", {"name": "A4", "allow_atomic": True, "allow_msg_counter": True}),
    ]
    ref, ours = clients
    for subject, body in cases:
        assert await ask(ours, subject, body) == await ask(ref, subject, body), (subject, body)
    levels = []
    for nc in clients:
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.A1", b"", timeout=5)).data)
        levels.append(info["config"]["metadata"]["_nats.req.level"])
    assert levels == ["2", "2"]


def _batch(batch_id: str, seq: int | str | None, commit: str | None = None, **extra: str) -> dict[str, str]:
    hdrs = {"Nats-Batch-Id": batch_id, **extra}
    if seq is not None:
        hdrs["Nats-Batch-Sequence"] = str(seq)
    if commit is not None:
        hdrs["Nats-Batch-Commit"] = commit
    return hdrs


# (subject, headers, payload): published one after the other, each answer compared.
PUBLISHES: list[tuple[str, dict[str, str], bytes]] = [
    ("plain", _batch("p", 1, "1"), b"x"),
    ("b.a", _batch("x" * 65, 1), b"x"),
    ("b.a", _batch("nos", None), b"x"),
    ("b.a", _batch("bad", "one"), b"x"),
    ("b.a", _batch("late", 2), b"x"),
    ("b.a", _batch("huge", 1001), b"x"),
    ("b.a", _batch("ok", 1), b"one"),
    ("b.b", _batch("ok", 2, X="y"), b"two"),
    ("b.a", _batch("ok", 3, "1"), b"three"),
    ("b.a", _batch("eob", 1), b"e1"),
    ("b.c", _batch("eob", 2), b"e2"),
    ("b.a", _batch("eob", 3, "eob"), b""),
    ("b.a", _batch("eob1", 1, "eob"), b""),
    ("b.a", _batch("gap", 1), b"g1"),
    ("b.a", _batch("gap", 3), b"g3"),
    ("b.a", _batch("gap", 2, "1"), b"g2"),
    ("b.a", _batch("commit", 1), b"c1"),
    ("b.a", _batch("commit", 2, "yes"), b"c2"),
    ("b.a", _batch("commit", 1, "1"), b"c1"),
    ("b.a", _batch("lmi", 1), b"l1"),
    ("b.a", _batch("lmi", 2, "1", **{"Nats-Expected-Last-Msg-Id": "m"}), b"l2"),
    ("b.a", _batch("dup", 1, **{"Nats-Msg-Id": "same"}), b"d1"),
    ("b.a", _batch("dup", 2, "1", **{"Nats-Msg-Id": "same"}), b"d2"),
    ("b.a", _batch("els", 1, **{"Nats-Expected-Last-Sequence": "5"}), b"s1"),
    ("b.a", _batch("els", 2, "1"), b"s2"),
    ("b.a", _batch("els2", 1, **{"Nats-Expected-Last-Sequence": "7"}), b"s1"),
    ("b.a", _batch("els2", 2, "1", **{"Nats-Expected-Last-Sequence": "8"}), b"s2"),
    ("b.d", _batch("elss", 1, **{"Nats-Expected-Last-Subject-Sequence": "0"}), b"t1"),
    ("b.d", _batch("elss", 2, "1", **{"Nats-Expected-Last-Subject-Sequence": "0"}), b"t2"),
    ("b.a", _batch("ttl", 1, "1", **{"Nats-TTL": "5s"}), b"t"),
    ("b.a", _batch("roll", 1, "1", **{"Nats-Rollup": "sub"}), b"r"),
    ("b.a", _batch("est", 1, "1", **{"Nats-Expected-Stream": "OTHER"}), b"e"),
    ("b.a", _batch("msgid", 1, "1", **{"Nats-Msg-Id": "one"}), b"m"),
    ("b.a", _batch("msgid2", 1, "1", **{"Nats-Msg-Id": "one"}), b"m"),
    ("c.a", _batch("cnt", 1, **{"Nats-Incr": "2"}), b""),
    ("c.a", _batch("cnt", 2, **{"Nats-Incr": "3"}), b""),
    ("c.b", _batch("cnt", 3, "1", **{"Nats-Incr": "-1"}), b""),
    ("c.a", _batch("cnt2", 1, **{"Nats-Incr": "1"}), b""),
    ("c.a", _batch("cnt2", 2, "1"), b""),
    # D: TTLs and roll-ups allowed, discard new at 5 messages and 2 a subject.
    ("d.a", _batch("dttl", 1, "1", **{"Nats-TTL": "bogus"}), b"t"),
    ("d.a", _batch("dttl2", 1, "1", **{"Nats-TTL": "5s"}), b"t"),
    ("d.b", _batch("dsub", 1), b"r1"),
    ("d.b", _batch("dsub", 2, "1", **{"Nats-Rollup": "sub"}), b"r2"),
    ("d.c", _batch("dall", 1), b"r1"),
    ("d.e", _batch("dall", 2, "1", **{"Nats-Rollup": "all"}), b"r2"),
    ("d.c", _batch("dbad", 1, "1", **{"Nats-Rollup": "most"}), b"r"),
    ("d.f", _batch("dper", 1), b"p1"),
    ("d.f", _batch("dper", 2), b"p2"),
    ("d.f", _batch("dper", 3, "1"), b"p3"),
    ("d.g", _batch("dmax", 1), b"m1"),
    ("d.h", _batch("dmax", 2), b"m2"),
    ("d.i", _batch("dmax", 3), b"m3"),
    ("d.j", _batch("dmax", 4), b"m4"),
    ("d.k", _batch("dmax", 5, "1"), b"m5"),
    ("d.g", _batch("dfit", 1), b"m1"),
    ("d.h", _batch("dfit", 2, "1"), b"m2"),
]


async def _stored(nc: Client, stream: str) -> list[Any]:
    info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)).data)
    out = []
    for seq in range(1, info["state"]["last_seq"] + 1):
        got = json.loads((await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}", b'{"seq":%d}' % seq)).data)
        message = got.get("message") or got
        hdrs = base64.b64decode(message.get("hdrs", ""))
        out.append((message.get("subject"), hdrs, base64.b64decode(message.get("data", ""))))
    return out


async def batch_answers(nc: Client) -> list[Any]:
    for cfg in (
        {"name": "PLAIN", "subjects": ["plain"]},
        {"name": "B", "subjects": ["b.>"], "allow_atomic": True},
        {"name": "C", "subjects": ["c.>"], "allow_atomic": True, "allow_msg_counter": True},
        {
            "name": "D",
            "subjects": ["d.>"],
            "allow_atomic": True,
            "allow_msg_ttl": True,
            "allow_rollup_hdrs": True,
            "discard": "new",
            "max_msgs": 5,
            "max_msgs_per_subject": 2,
            "discard_new_per_subject": True,
        },
    ):
        await nc.request(CREATE + cfg["name"], json.dumps(cfg).encode(), timeout=5)
    out: list[Any] = []
    for subject, hdrs, payload in PUBLISHES:
        msg = await nc.request(subject, payload, timeout=5, headers=hdrs)
        out.append((subject, hdrs, json.loads(msg.data) if msg.data else msg.data))
    out.append(await _stored(nc, "B"))
    out.append(await _stored(nc, "C"))
    out.append(await _stored(nc, "D"))
    # 50 batches open on one stream at most: the 51st is refused, the others go on.
    await nc.request(CREATE + "T", b'{"name": "T", "subjects": ["t"], "allow_atomic": true}', timeout=5)
    for i in range(51):
        msg = await nc.request("t", b"", timeout=5, headers=_batch(f"open{i}", 1))
    out.append(json.loads(msg.data))
    msg = await nc.request("t", b"", timeout=5, headers=_batch("open0", 2, "1"))
    out.append(json.loads(msg.data))
    return out


async def test_batches_answered_and_stored_as_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    want, got = await batch_answers(ref), await batch_answers(ours)
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        assert g == w, (i, PUBLISHES[i] if i < len(PUBLISHES) else "stored")


@pytest.mark.parametrize("kind", ["nats-server", "pynatsd"])
async def test_batch_committed_or_not_at_all_across_kill_9(tmp_path: Path, kind: str) -> None:
    store = tmp_path / "store"
    async with jetstream_life(kind, store, kill=True) as (_, nc):
        cfg = {"name": "K", "subjects": ["k.>"], "allow_atomic": True}
        await nc.request(CREATE + "K", json.dumps(cfg).encode(), timeout=5)
        for seq in (1, 2):
            await nc.request("k.open", b"held %d" % seq, timeout=5, headers=_batch("open", seq))
        for seq, commit in ((1, None), (2, None), (3, "1")):
            ack = await nc.request("k.done", b"kept %d" % seq, timeout=5, headers=_batch("done", seq, commit))
        assert json.loads(ack.data) == {"stream": "K", "seq": 3, "batch": "done", "count": 3}
        await nc.request("k.open", b"held 3", timeout=5, headers=_batch("open", 3))
    async with jetstream_life(kind, store) as (_, nc):
        stored = await _stored(nc, "K")
        assert [(s, d) for s, _, d in stored] == [
            ("k.done", b"kept 1"),
            ("k.done", b"kept 2"),
            ("k.done", b"kept 3"),
        ]
        # The open batch did not survive: its commit now finds no batch.
        late = await nc.request("k.open", b"", timeout=5, headers=_batch("open", 4, "1"))
        assert json.loads(late.data)["error"]["err_code"] == 10176


async def test_idle_batch_dropped_after_its_timeout(
    js_server: JsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-server drops a batch idle for 10 s (shortened here): its commit then finds no batch."""
    monkeypatch.setattr(batching, "BATCH_TIMEOUT", 0.1)
    nc = await js_server.connect()
    await nc.request(CREATE + "I", b'{"name": "I", "subjects": ["i"], "allow_atomic": true}', timeout=5)
    assert (await nc.request("i", b"1", timeout=5, headers=_batch("idle", 1))).data == b""
    await asyncio.sleep(0.4)  # the batch's timer, not an event a client can wait for
    late = await nc.request("i", b"2", timeout=5, headers=_batch("idle", 2, "1"))
    assert json.loads(late.data)["error"]["err_code"] == 10176
    info = json.loads((await nc.request("$JS.API.STREAM.INFO.I", b"", timeout=5)).data)
    assert info["state"]["messages"] == 0


LIMITED = """
jetstream {{ store_dir: "{store}" }}
accounts {{ L: {{ jetstream: {{ max_mem: 1K, max_file: 4K }}, users: [{{user: l, password: l}}] }} }}
"""


@pytest.mark.parametrize("kind", ["nats-server", "pynatsd"])
async def test_batch_past_the_account_limit_is_refused(tmp_path: Path, kind: str) -> None:
    """Two messages of 600 B in an account of 1 KiB of memory: the commit gets 10002, as from nats-server.
    pynatsd checks the whole batch before storing any of it, so nothing is stored; nats-server 2.15.1 stores
    the first message (it checks each one as it stores it), which breaks the batch's all-or-nothing."""
    require(kind)
    text = LIMITED.format(store=tmp_path / "store")
    with server_with_config(kind, tmp_path / "limits.conf", text) as srv:
        nc = await nats.connect(srv.url, user="l", password="l", allow_reconnect=False)
        cfg = {"name": "M", "subjects": ["m"], "storage": "memory", "allow_atomic": True}
        await nc.request(CREATE + "M", json.dumps(cfg).encode(), timeout=5)
        assert (await nc.request("m", b"x" * 600, timeout=5, headers=_batch("b", 1))).data == b""
        commit = await nc.request("m", b"x" * 600, timeout=5, headers=_batch("b", 2, "1"))
        assert json.loads(commit.data)["error"]["err_code"] == 10002
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.M", b"", timeout=5)).data)
        if kind == "pynatsd":
            assert info["state"]["messages"] == 0
        await nc.close()
