"""`STREAM.SNAPSHOT` / `STREAM.RESTORE` across servers: a backup taken on pynatsd or nats-server restores on
either (nats-server -> nats-server is the reference), with its messages (subjects, headers, sequences with
their gaps, timestamps), config and consumers (delivered, ack floor, pending); errors as nats-server's; a
restored stream survives kill -9 of pynatsd."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import signal
import tarfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from pynatsd.base.s2 import S2Decoder, encode_stream
from pynatsd.jetstream.backup import MAGIC, entry
from tests.jetstream.backup_client import Snapshot, restore, snapshot
from tests.jetstream.conftest import jetstream_life
from tests.servers import ServerProcess, require, start_server

KINDS = ("pynatsd", "nats-server")
PAIRS = [(src, dst) for src in KINDS for dst in KINDS]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    require("nats-server")
    store = tmp_path_factory.mktemp("backup")
    started: dict[str, ServerProcess] = {}
    try:
        for kind in KINDS:
            started[kind] = start_server(kind, ["-js", "-sd", str(store / kind)])
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture
async def clients(servers: dict[str, ServerProcess]) -> AsyncIterator[dict[str, Client]]:
    ncs = {kind: await nats.connect(server.url, allow_reconnect=False) for kind, server in servers.items()}
    yield ncs
    for nc in ncs.values():
        await nc.close()


async def api(nc: Client, subject: str, body: Any = b"") -> dict[str, Any]:
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    reply = await nc.request(subject, payload, timeout=10)
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


def payload(i: int) -> bytes:
    """About 300 bytes that do not compress away, so a snapshot takes several 1 KiB chunks."""
    return b"".join(hashlib.sha256(b"%d.%d" % (i, k)).digest() for k in range(10))


async def populate(nc: Client, name: str) -> None:
    """A stream with headers, interior and trailing deleted sequences, an acked durable (`D`) and one with
    messages pending acks (`P`)."""
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"], duplicate_window=60)
    for i in range(1, 15):
        hdrs = {"K": f"v{i}", "Nats-Msg-Id": f"id{i}"} if i % 3 == 0 else None
        await js.publish(f"{name}.{'ab'[i % 2]}.{i}", payload(i), headers=hdrs)
    for seq in (3, 7, 8, 14):
        await js.delete_msg(name, seq)
    done = await js.pull_subscribe(f"{name}.>", durable="D", stream=name)
    for msg in await done.fetch(4):
        await msg.ack()
    held = await js.pull_subscribe(f"{name}.a.>", durable="P", stream=name)
    first, *_ = await held.fetch(3)
    await first.ack()


async def contents(nc: Client, name: str) -> dict[str, Any]:
    """What a restore must bring back: state, every message, the consumers' positions."""
    info = await api(nc, f"$JS.API.STREAM.INFO.{name}")
    state = info["state"]
    messages = {}
    for seq in range(1, state["last_seq"] + 1):
        got = await api(nc, f"$JS.API.STREAM.MSG.GET.{name}", {"seq": seq})
        messages[seq] = got.get("message") or got["error"]["err_code"]
    consumers = {}
    for durable in ("D", "P"):
        ci = await api(nc, f"$JS.API.CONSUMER.INFO.{name}.{durable}")
        if "error" not in ci:
            consumers[durable] = {
                k: ci[k]
                for k in ("delivered", "ack_floor", "num_ack_pending", "num_redelivered", "num_pending")
            }
            for pair in ("delivered", "ack_floor"):
                consumers[durable][pair].pop("last_active", None)
            consumers[durable]["config"] = {k: ci["config"].get(k) for k in ("filter_subject", "ack_policy")}
    return {
        "state": state,
        "messages": messages,
        "consumers": consumers,
        "subjects": info["config"]["subjects"],
    }


async def next_deliveries(nc: Client, name: str) -> list[tuple[int, str]]:
    sub = await nc.jetstream().pull_subscribe_bind("D", stream=name)
    msgs = await sub.fetch(3, timeout=5)
    await sub.unsubscribe()
    return [(m.metadata.sequence.stream, m.subject) for m in msgs]


def restored_state(before: dict[str, Any], messages: dict[int, Any]) -> dict[str, Any]:
    """nats-server's restored state: the same, but last_ts is the last kept message's (a trailing deleted
    sequence is padded out without its time)."""
    last = max(seq for seq, m in messages.items() if isinstance(m, dict))
    return {**before, "last_ts": messages[last]["time"]}


@pytest.mark.parametrize(("src", "dst"), PAIRS)
async def test_backup_restores_across_servers(clients: dict[str, Client], src: str, dst: str) -> None:
    name = f"BK_{src[0]}{dst[0]}".upper()
    await populate(clients[src], name)
    before = await contents(clients[src], name)
    snap = await snapshot(clients[src], name, {"chunk_size": 1024})
    assert snap.response["type"] == "io.nats.jetstream.api.v1.stream_snapshot_response"
    assert snap.response["state"]["consumer_count"] == 2 and snap.response["config"]["name"] == name
    assert len(snap.chunks) > 2 and snap.end_status == "204"
    assert all(m.reply.startswith(f"$JS.SNAPSHOT.ACK.{name}.") for m in snap.chunks[:-1])
    if src == dst:
        await clients[src].jetstream().delete_stream(name)
    resp = await restore(clients[dst], name, snap.response["config"], snap.response["state"], snap.data, 700)
    assert resp["type"] == "io.nats.jetstream.api.v1.stream_create_response", resp
    assert set(resp) == {"type", "config", "created", "state", "ts"}
    after = await contents(clients[dst], name)
    assert after["messages"] == before["messages"]
    assert after["state"] == resp["state"] == restored_state(before["state"], before["messages"])
    assert after["consumers"] == before["consumers"] and set(after["consumers"]) == {"D", "P"}
    assert after["subjects"] == before["subjects"]
    # The durable carries on where it was: the next live messages after its 4 acked deliveries.
    expected = [(6, f"{name}.a.6"), (9, f"{name}.b.9"), (10, f"{name}.a.10")]
    assert await next_deliveries(clients[dst], name) == expected
    # nats-server's restore does not bring the duplicate window's message ids back: a new message
    ack = await clients[dst].jetstream().publish(f"{name}.a.1", b"again", headers={"Nats-Msg-Id": "id12"})
    assert not ack.duplicate and ack.seq == 15


@pytest.mark.parametrize("kind", KINDS)
async def test_snapshot_without_consumers(clients: dict[str, Client], kind: str) -> None:
    name = f"NOCONS_{kind[0].upper()}"
    await populate(clients[kind], name)
    snap = await snapshot(clients[kind], name, {"no_consumers": True})
    assert snap.response["state"]["consumer_count"] == 2  # (the stream's: the archive's own says 0)
    assert snap.end_status is None and len(snap.chunks) == 1 and not snap.chunks[0].reply  # one short chunk
    await clients[kind].jetstream().delete_stream(name)
    resp = await restore(clients[kind], name, snap.response["config"], snap.response["state"], snap.data)
    assert resp["state"]["consumer_count"] == 0 and resp["state"]["messages"] == 10
    names = await api(clients[kind], f"$JS.API.CONSUMER.NAMES.{name}")
    assert names["consumers"] == []


async def test_snapshot_waits_for_acks(clients: dict[str, Client]) -> None:
    """A window of one chunk, never acked: one chunk, then 408 No Flow Response (after 5 s, both at once)."""
    for kind in KINDS:
        await populate(clients[kind], "UNACKED")

    async def unacked(kind: str) -> Snapshot:
        req = {"chunk_size": 1024, "window_size": 1024}
        return await snapshot(clients[kind], "UNACKED", req, ack=False, timeout=15)

    for snap in await asyncio.gather(*(unacked(kind) for kind in KINDS)):
        assert len(snap.chunks) == 1 and snap.chunks[0].reply.endswith(".1024.1")
        assert (snap.end_status, snap.end_description) == ("408", "No Flow Response")


async def test_errors_as_nats_server(clients: dict[str, Client]) -> None:
    heard: dict[str, list[Any]] = {}
    for kind, nc in clients.items():
        await nc.jetstream().add_stream(name="ERRS", subjects=["errs.>"])
        await nc.jetstream().publish("errs.1", b"one")
        good = await snapshot(nc, "ERRS", {})
        answers: list[Any] = []
        for subject, body in [
            ("$JS.API.STREAM.SNAPSHOT.ERRS", b""),
            ("$JS.API.STREAM.SNAPSHOT.ERRS", b"{}"),
            ("$JS.API.STREAM.SNAPSHOT.ERRS", b"x"),
            ("$JS.API.STREAM.SNAPSHOT.ERRS", {"deliver_subject": "a.*"}),
            ("$JS.API.STREAM.SNAPSHOT.ERRS", {"deliver_subject": ""}),
            ("$JS.API.STREAM.SNAPSHOT.NOPE", {"deliver_subject": "a"}),
            ("$JS.API.STREAM.RESTORE.Z", b""),
            ("$JS.API.STREAM.RESTORE.Z", b"{}"),
            ("$JS.API.STREAM.RESTORE.Z", b"x"),
            ("$JS.API.STREAM.RESTORE.Z", {"config": {"name": "Q"}}),
            ("$JS.API.STREAM.RESTORE.ERRS", {"config": {"name": "ERRS"}}),
        ]:
            answers.append(await api(nc, subject, body))
        config = {"name": "BAD", "subjects": ["bad.>"]}
        framed = good.data
        for data in (b"garbage", framed[:20], framed[:-3], framed[:10], framed + b"trailing"):
            answers.append(await restore(nc, "BAD", config, {}, data))
            if "error" not in answers[-1]:  # the trailing bytes are ignored: it restored
                answers[-1] = {k: answers[-1]["state"][k] for k in ("messages", "first_seq", "last_seq")}
                await nc.jetstream().delete_stream("BAD")
        # A configured first_seq past the backup's first message: its sequences cannot be kept.
        answers.append(
            await restore(nc, "FSEQ", {"name": "FSEQ", "subjects": ["fseq"], "first_seq": 100}, {}, framed)
        )
        heard[kind] = answers
    assert heard["pynatsd"] == heard["nats-server"]
    assert [a["error"]["err_code"] for a in heard["pynatsd"][:11]] == [
        10003, 10003, 10025, 10015, 10015, 10059, 10003, 10003, 10025, 10056, 10130,
    ]  # fmt: skip


async def test_restored_stream_survives_kill9(clients: dict[str, Client], tmp_path: Path) -> None:
    await populate(clients["nats-server"], "DURABLE")
    before = await contents(clients["nats-server"], "DURABLE")
    snap = await snapshot(clients["nats-server"], "DURABLE", {})
    store = tmp_path / "ours"
    async with jetstream_life("pynatsd", store, kill=True) as (server, nc):
        resp = await restore(nc, "DURABLE", snap.response["config"], snap.response["state"], snap.data)
        assert "error" not in resp, resp
        server.stop(signal.SIGKILL)  # right after the answer: what it said it restored is on disk
    async with jetstream_life("pynatsd", store, port=server.port) as (_, nc):
        after = await contents(nc, "DURABLE")
    assert after["messages"] == before["messages"]
    assert after["state"] == restored_state(before["state"], before["messages"])
    assert after["consumers"] == before["consumers"]


async def test_advisories(clients: dict[str, Client]) -> None:
    """Snapshot and restore advisories, in nats-server's order and shapes (the client that asked named)."""
    heard: dict[str, list[tuple[Any, ...]]] = {}
    for kind, nc in clients.items():
        events: list[tuple[Any, ...]] = []
        done = asyncio.Event()

        async def on_event(
            msg: Any, events: list[tuple[Any, ...]] = events, done: asyncio.Event = done
        ) -> None:
            body = json.loads(msg.data)
            events.append((msg.subject, body["type"], sorted(body), body.get("client", {}).get("acc")))
            if len(events) == 7:  # (the snapshot's completion may come last)
                done.set()

        sub = await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.*.ADV", cb=on_event)
        await nc.jetstream().add_stream(name="ADV", subjects=["adv"])
        await nc.jetstream().publish("adv", b"x")
        snap = await snapshot(nc, "ADV", {})
        await nc.jetstream().delete_stream("ADV")
        await restore(nc, "ADV", snap.response["config"], snap.response["state"], snap.data)
        await asyncio.wait_for(done.wait(), 10)
        await sub.unsubscribe()
        heard[kind] = events
    # (nats-server sends SNAPSHOT_COMPLETE when its sender is done: at times after the DELETED that followed)
    assert sorted(heard["pynatsd"]) == sorted(heard["nats-server"])
    assert sorted(event[0].split(".")[4] for event in heard["pynatsd"]) == [
        "CREATED", "CREATED", "DELETED", "RESTORE_COMPLETE", "RESTORE_CREATE", "SNAPSHOT_COMPLETE",
        "SNAPSHOT_CREATE",
    ]  # fmt: skip


@pytest.mark.parametrize(("src", "dst"), [("nats-server", "pynatsd"), ("pynatsd", "nats-server")])
async def test_memory_stream_with_ephemeral_and_ttl(clients: dict[str, Client], src: str, dst: str) -> None:
    """A memory stream's backup, its messages' Nats-TTL headers and an ephemeral consumer with them."""
    name = f"MEM_{src[0]}{dst[0]}".upper()
    js = clients[src].jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"], storage="memory", allow_msg_ttl=True)
    for i in range(5):
        await js.publish(f"{name}.{i}", b"x%d" % i, headers={"Nats-TTL": "1h"} if i == 2 else None)
    config = {"name": "EPH", "ack_policy": "explicit", "inactive_threshold": 60_000_000_000}
    await api(clients[src], f"$JS.API.CONSUMER.CREATE.{name}", {"stream_name": name, "config": config})
    snap = await snapshot(clients[src], name, {})
    resp = await restore(clients[dst], name, snap.response["config"], snap.response["state"], snap.data)
    assert resp["config"]["storage"] == "memory" and resp["state"]["messages"] == 5
    ttl = await api(clients[dst], f"$JS.API.STREAM.MSG.GET.{name}", {"seq": 3})
    assert base64.b64decode(ttl["message"]["hdrs"]) == b"NATS/1.0\r\nNats-TTL: 1h\r\n\r\n"
    eph = await api(clients[dst], f"$JS.API.CONSUMER.INFO.{name}.EPH")
    assert (eph["num_pending"], eph["config"]["inactive_threshold"]) == (5, 60_000_000_000)
    assert "durable_name" not in eph["config"]


def tar_of(directory: Path) -> bytes:
    """A directory as nats-server before 2.15 sent a snapshot: its files in a PAX tar."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            tar.add(path, arcname=str(path.relative_to(directory)))
    return buf.getvalue()


async def test_tar_snapshot_of_earlier_servers(clients: dict[str, Client], tmp_path: Path) -> None:
    """The store directory of a stream nats-server wrote (what its snapshots before 2.15 were: a tar of
    it, S2-framed), restored by nats-server 2.15 (the reference) and by pynatsd alike."""
    source = start_server("nats-server", ["-js", "-sd", str(tmp_path)])
    try:
        nc = await nats.connect(source.url, allow_reconnect=False)
        await populate(nc, "LEGACY")
        before = await contents(nc, "LEGACY")
        config = (await api(nc, "$JS.API.STREAM.INFO.LEGACY"))["config"]
        await nc.close()
    finally:
        source.stop()  # flushed: its blocks, index and consumer state are on disk
    data = encode_stream(tar_of(tmp_path / "jetstream" / "$G" / "streams" / "LEGACY"))
    config["metadata"] = {}
    for kind, nc in clients.items():
        wrong = await restore(nc, "OTHER", {**config, "name": "OTHER", "subjects": ["other"]}, {}, data)
        assert wrong["error"] == {
            "code": 500,
            "err_code": 10062,
            "description": "restore failed: stream names do not match",
        }, kind
        resp = await restore(nc, "LEGACY", config, {}, data)
        assert resp["type"] == "io.nats.jetstream.api.v1.stream_create_response", (kind, resp)
        after = await contents(nc, "LEGACY")
        assert after["messages"] == before["messages"], kind
        assert after["state"] == resp["state"] == before["state"], kind  # the deleted last one's time too
        assert after["consumers"] == before["consumers"], kind
        expected = [(6, "LEGACY.a.6"), (9, "LEGACY.b.9"), (10, "LEGACY.a.10")]
        assert await next_deliveries(nc, "LEGACY") == expected, kind


async def test_unfinished_restore_is_dropped_after_kill9(clients: dict[str, Client], tmp_path: Path) -> None:
    """Killed halfway through a restore, pynatsd comes back without it, and a new stream of that name does
    not inherit its messages."""
    await populate(clients["nats-server"], "HALF")
    snap = await snapshot(clients["nats-server"], "HALF", {})
    store = tmp_path / "ours"
    async with jetstream_life("pynatsd", store, kill=True) as (server, nc):
        body = {"config": snap.response["config"], "state": snap.response["state"]}
        started = await api(nc, "$JS.API.STREAM.RESTORE.HALF", body)
        meanwhile = await api(nc, "$JS.API.STREAM.CREATE.HALF", {"name": "HALF", "subjects": ["HALF.>"]})
        assert meanwhile["error"]["err_code"] == 10058  # the name is taken while it is restored
        # Framed in small S2 chunks (nats-server's is one), so the first three quarters decode.
        archive = S2Decoder().feed(snap.data)
        parts = [encode_stream(archive[at : at + 512])[10:] for at in range(0, len(archive), 512)]
        data = encode_stream(b"") + b"".join(parts[: len(parts) * 3 // 4])
        for at in range(0, len(data), 256):  # no empty chunk: the restore is never finished
            await nc.request(started["deliver_subject"], data[at : at + 256], timeout=10)
        server.stop(signal.SIGKILL)  # halfway: before the client's close could end the restore
    async with jetstream_life("pynatsd", store, port=server.port) as (_, nc):
        names = await api(nc, "$JS.API.STREAM.NAMES")
        created = await api(nc, "$JS.API.STREAM.CREATE.HALF", {"name": "HALF", "subjects": ["HALF.>"]})
    assert not names["streams"]
    assert (created["state"]["messages"], created["state"]["last_seq"]) == (0, 0)


def archive_with(consumers: list[tuple[str, Any]], **state_fields: Any) -> bytes:
    """A version 2 backup of one message and these `consumers/<name>` entries, as a client could send it."""
    state = {"messages": 1, "bytes": 0, "first_seq": 1, "last_seq": 1, "consumer_count": len(consumers)}
    state.update(state_fields)
    parts = [MAGIC, entry(b"state.json", 1, 0, b"", json.dumps(state).encode())]
    parts += [
        entry(f"consumers/{name}".encode(), 1, 0, b"", json.dumps(body).encode()) for name, body in consumers
    ]
    parts += [entry(b"x", 1_700_000_000_000_000_000, 1, b"", b"hi"), entry(b"", 0, 0, b"", b"")]
    return encode_stream(b"".join(parts))


async def test_bad_consumers_in_a_backup(clients: dict[str, Client]) -> None:
    """A backup's consumers are checked as creates are: a bad one fails the restore (10062), nothing of it
    is kept, and a name is never a path."""
    cases = [
        ("../evil", {"config": {"ack_policy": "explicit"}, "state": {}}),
        ("ok", {"config": {"durable_name": "ok", "ack_policy": "explicit"}, "state": {"delivered": "x"}}),
        ("ok", {"config": {"durable_name": "ok", "ack_policy": "bogus"}, "state": {}}),
        ("ok", {"state": {}}),
        (
            "ok",
            {"config": {"durable_name": "other", "ack_policy": "explicit"}, "state": {}},
        ),  # its config names it
    ]
    heard: dict[str, list[Any]] = {}
    for kind, nc in clients.items():
        heard[kind] = []
        for i, case in enumerate(cases):
            name = f"BADC{i}"
            resp = await restore(nc, name, {"name": name, "subjects": [f"badc{i}"]}, {}, archive_with([case]))
            names = await api(nc, f"$JS.API.CONSUMER.NAMES.{name}")
            heard[kind].append((resp.get("error", {}).get("err_code"), names.get("consumers")))
        bad_state = await restore(nc, "BADS", {"name": "BADS"}, {}, archive_with([], first_seq="x"))
        heard[kind].append((bad_state["error"]["err_code"], bad_state["error"]["description"][:35]))
    assert heard["pynatsd"] == heard["nats-server"] == [
        (10062, []), (10062, []), (10062, []), (10062, []), (None, ["other"]),
        (10062, "restore failed: error in state.json"),
    ]  # fmt: skip


async def test_empty_stream_restores_as_on_nats_server(clients: dict[str, Client]) -> None:
    """A snapshot of an empty stream, from either server, restored on both: the same state (nats-server
    reports first_seq 1 for the restored stream, 0 for the one it was taken from)."""
    restored: dict[str, list[Any]] = {kind: [] for kind in KINDS}
    for src in KINDS:
        name = f"EMPTY_{src[0].upper()}"
        await clients[src].jetstream().add_stream(name=name, subjects=[f"{name}.>"])
        snap = await snapshot(clients[src], name)
        await clients[src].jetstream().delete_stream(name)
        for dst in KINDS:
            resp = await restore(
                clients[dst], name, snap.response["config"], snap.response["state"], snap.data
            )
            info = await api(clients[dst], f"$JS.API.STREAM.INFO.{name}")
            for state in (resp["state"], info["state"]):
                restored[dst].append({k: v for k, v in state.items() if k not in ("first_ts", "last_ts")})
            await clients[dst].jetstream().delete_stream(name)
    assert restored["pynatsd"] == restored["nats-server"]


async def test_snapshot_nobody_receives_ends_as_on_nats_server(clients: dict[str, Client]) -> None:
    """A snapshot whose deliver subject nobody subscribes to: nats-server waits 2 s for a subscriber, sends
    its chunks anyway up to the window, and ends with 408 No Flow Response once no ack came for 5 s (its
    snapshot_complete advisory says "no flow response")."""

    async def unheard(kind: str) -> str:
        nc = clients[kind]
        await populate(nc, "UNHEARD")
        complete: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def on_complete(msg: Any) -> None:
            if not complete.done():
                complete.set_result(json.loads(msg.data).get("error", ""))

        sub = await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.SNAPSHOT_COMPLETE.UNHEARD", cb=on_complete)
        req = {"deliver_subject": "nobody.listens", "chunk_size": 1024, "window_size": 1024}
        answer = await api(nc, "$JS.API.STREAM.SNAPSHOT.UNHEARD", req)
        assert answer["type"] == "io.nats.jetstream.api.v1.stream_snapshot_response"
        error = await asyncio.wait_for(complete, 15)
        await sub.unsubscribe()
        await nc.jetstream().delete_stream("UNHEARD")
        return error

    assert await asyncio.gather(*(unheard(kind) for kind in KINDS)) == ["no flow response"] * 2
