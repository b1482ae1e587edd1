"""Per-message TTLs against nats-server -js: `allow_msg_ttl` and `subject_delete_marker_ttl` (their checks),
the `Nats-TTL` header on publish (its errors), messages gone at their TTL, delete markers where a message
of a subject's last one went, nats-py's KV with `limit_marker_ttl` and per-key TTLs, and pending TTLs that
still expire after a kill -9."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js import api
from nats.js.errors import KeyNotFoundError

from tests.jetstream.conftest import JsServer, jetstream_life
from tests.jetstream.test_api_errors import ask

SEC = 1_000_000_000
CREATE, UPDATE = "$JS.API.STREAM.CREATE.", "$JS.API.STREAM.UPDATE."


CONFIG_CASES: list[tuple[str, Any]] = [
    (CREATE + "C1", {"name": "C1", "allow_msg_ttl": True}),
    (UPDATE + "C1", {"name": "C1", "allow_msg_ttl": False}),
    (UPDATE + "C1", {"name": "C1", "allow_msg_ttl": True, "subject_delete_marker_ttl": 5 * SEC}),
    (CREATE + "C2", {"name": "C2", "subject_delete_marker_ttl": SEC // 2}),
    (CREATE + "C2", {"name": "C2", "subject_delete_marker_ttl": -1}),
    (CREATE + "C2", {"name": "C2", "subject_delete_marker_ttl": "1s"}),
    (CREATE + "C3", {"name": "C3", "subject_delete_marker_ttl": SEC}),
    (CREATE + "C4", {"name": "C4", "subject_delete_marker_ttl": 90 * SEC, "deny_purge": True}),
    (CREATE + "C5", {"name": "C5", "mirror": {"name": "C1"}, "subject_delete_marker_ttl": SEC}),
    (UPDATE + "C3", {"name": "C3", "subject_delete_marker_ttl": 0}),
    (UPDATE + "C3", {"name": "C3", "allow_msg_ttl": False, "allow_rollup_hdrs": True}),
]  # fmt: skip


async def test_ttl_config_answered_as_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    for subject, body in CONFIG_CASES:
        assert await ask(ours, subject, body) == await ask(ref, subject, body), (subject, body)


async def test_required_api_level_as_nats_server(clients: tuple[Client, Client]) -> None:
    """The `_nats.req.level` metadata (dropped as volatile by the comparisons above): 1 once TTLs are on."""
    cases: list[tuple[str, Any]] = [
        (CREATE + "L0", {"name": "L0"}),
        (CREATE + "L1", {"name": "L1", "allow_msg_ttl": True}),
        (CREATE + "L2", {"name": "L2", "subject_delete_marker_ttl": 5 * SEC}),
        (UPDATE + "L0", {"name": "L0", "allow_msg_ttl": True}),
        ("$JS.API.STREAM.INFO.L2", b""),
    ]
    levels: list[list[str]] = [[], []]
    for subject, body in cases:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        for nc, seen in zip(clients, levels, strict=True):
            answer = json.loads((await nc.request(subject, data, timeout=5)).data)
            seen.append(answer["config"]["metadata"]["_nats.req.level"])
    assert levels[0] == ["0", "1", "1", "1", "1"]
    assert levels[1] == levels[0]


async def publish_answers(nc: Client) -> list[Any]:
    """PubAcks (or errors) for Nats-TTL values on streams with and without TTLs, and what was stored."""
    for cfg in (
        {"name": "P0", "subjects": ["p0"]},
        {"name": "P1", "subjects": ["p1"], "allow_msg_ttl": True},
        {"name": "P2", "subjects": ["p2"], "subject_delete_marker_ttl": 5 * SEC},
    ):
        await nc.request(CREATE + cfg["name"], json.dumps(cfg).encode(), timeout=5)
    out: list[Any] = []
    values = ["1s", "5", "never", "NEVER", "1m", "1500ms", "1h30m", "0", "0s", "500ms", "-1", "+5", "x", ""]
    for stream in ("p0", "p1", "p2"):
        for value in values:
            msg = await nc.request(stream, b"v", timeout=5, headers={"Nats-TTL": value, "X": "y"})
            out.append((stream, value, json.loads(msg.data)))
    for name in ("P1", "P2"):
        for seq in (1, 3, 4):
            got = json.loads((await nc.request(f"$JS.API.STREAM.MSG.GET.{name}", b'{"seq":%d}' % seq)).data)
            out.append(base64.b64decode(got["message"].get("hdrs", "")))
    return out


async def test_publish_with_ttl_answered_as_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    assert await publish_answers(ours) == await publish_answers(ref)


async def _until(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    """Poll `check` until it holds (bounded: TTL expiry of 1 s on either server)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def _last(nc: Client, stream: str, subject: str) -> Any:
    body = json.dumps({"last_by_subj": subject}).encode()
    got = json.loads((await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}", body, timeout=5)).data)
    if "error" in got:
        return got["error"]["err_code"]
    msg = got["message"]
    return base64.b64decode(msg.get("hdrs", "")), base64.b64decode(msg.get("data", ""))


async def expiry_flow(nc: Client, storage: str) -> list[Any]:
    """TTLs expiring (markers in the place of a subject's last message), max_age with markers, and a
    `never` message outliving max_age; what a consumer sees, per subject."""
    js = nc.jetstream(timeout=5)
    name = f"E{storage}"
    await js.add_stream(
        name=name, subjects=[f"{name}.>"], storage=storage, subject_delete_marker_ttl=2, allow_msg_ttl=True
    )
    aged = f"A{storage}"
    await js.add_stream(name=aged, subjects=[f"{aged}.>"], storage=storage, max_age=1, allow_msg_ttl=True)
    # 2 s, not 1: room for a loaded machine between a marker's placing and the look at it.
    await js.publish(f"{name}.a", b"a", msg_ttl=2)
    await js.publish(f"{name}.b", b"b")
    await js.publish(f"{name}.c", b"c1", msg_ttl=2)
    await js.publish(f"{name}.c", b"c2", msg_ttl=2)
    await js.publish(f"{aged}.keep", b"k", headers={"Nats-TTL": "never"})
    await js.publish(f"{aged}.go", b"g")
    sub = await js.subscribe(f"{name}.>", ordered_consumer=True)

    async def markers_placed() -> bool:  # two markers stored (5, 6), what they replaced gone
        st = (await js.stream_info(name)).state
        return st.messages == 3 and st.last_seq == 6

    async def aged_out() -> bool:
        return (await js.stream_info(aged)).state.messages == 1

    await _until(markers_placed)
    await _until(aged_out)
    out: list[Any] = [await _last(nc, name, f"{name}.{s}") for s in "abc"]
    out += [await _last(nc, aged, f"{aged}.{s}") for s in ("keep", "go")]
    seen = [await sub.next_msg(5) for _ in range(6)]  # 4 published, 2 markers (order by expiry)
    out.append(sorted((m.subject, m.data, sorted((m.headers or {}).items())) for m in seen))

    async def markers_gone() -> bool:  # a marker's own TTL: it goes without a marker of its own
        return (await js.stream_info(name)).state.messages == 1

    await _until(markers_gone)
    st = (await js.stream_info(name)).state
    out.append((st.messages, st.last_seq))
    return out


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_ttl_expiry_and_markers_as_nats_server(clients: tuple[Client, Client], storage: str) -> None:
    ref, ours = clients
    want, got = await asyncio.gather(expiry_flow(ref, storage), expiry_flow(ours, storage))
    assert got == want
    assert got[0][0] == b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 2s\r\nNats-Rollup: sub\r\n\r\n"


async def kv_flow(nc: Client) -> list[Any]:
    """nats-py's KV: a bucket with limit_marker_ttl, a key created with a TTL, a watcher seeing it go."""
    js = nc.jetstream(timeout=5)
    kv = await js.create_key_value(config=api.KeyValueConfig(bucket="TTLKV", limit_marker_ttl=1))
    out: list[Any] = [(await kv.status()).marker_ttl]
    watcher = await kv.watchall()
    assert await watcher.updates(5) is None  # the initial nil marker: nothing stored yet
    out.append(await kv.create("short", b"v", msg_ttl=1))
    out.append(await kv.put("long", b"w"))

    async def gone() -> bool:
        try:
            await kv.get("short")
        except KeyNotFoundError:
            return True
        return False

    await _until(gone)
    updates = [await watcher.updates(5) for _ in range(3)]
    out.append([(e.key, e.value, e.operation) for e in updates])
    out.append((await kv.get("long")).value)
    await watcher.stop()
    return out


async def test_kv_key_ttl_as_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    want, got = await asyncio.gather(kv_flow(ref), kv_flow(ours))
    assert got == want
    assert got[-2][-1] == ("short", b"", "PURGE")


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
async def test_pending_ttls_expire_after_kill_9(tmp_path: Path, kind: str) -> None:
    """A message published with a TTL, the server killed before it expires: after the restart it still
    expires (and leaves its marker); one without a TTL stays."""
    store = tmp_path / "store"
    async with jetstream_life(kind, store, kill=True) as (_, nc):
        js = nc.jetstream(timeout=5)
        # One message per subject: its TTL is not raised to the markers' (60 s) then.
        await js.add_stream(name="K", subjects=["k.*"], subject_delete_marker_ttl=60, max_msgs_per_subject=1)
        await js.publish("k.ttl", b"t", msg_ttl=1)
        await js.publish("k.stay", b"s")
    async with jetstream_life(kind, store) as (_, nc):
        js = nc.jetstream(timeout=5)

        async def expired() -> bool:
            return (await js.get_last_msg("K", "k.ttl")).seq == 3

        await _until(expired)
        marker = await js.get_last_msg("K", "k.ttl")
        assert marker.headers == {"Nats-Marker-Reason": "MaxAge", "Nats-TTL": "1m0s", "Nats-Rollup": "sub"}
        assert (await js.get_last_msg("K", "k.stay")).data == b"s"
        assert (await js.stream_info("K")).state.messages == 2


async def test_ttl_heap_bounded_when_a_key_is_overwritten(tmp_path: Path) -> None:
    """Overwrites of one key (one message per subject) with an hour's TTL: the expiry heap stays about the
    size of the live messages instead of keeping an entry per overwritten message until its hour is up."""
    server = JsServer(tmp_path / "store")
    await server.start()
    try:
        nc = await server.connect()
        config = {"name": "KVT", "subjects": ["kvt.>"], "allow_msg_ttl": True, "max_msgs_per_subject": 1}
        await nc.request(CREATE + "KVT", json.dumps(config).encode(), timeout=5)
        for n in range(1000):
            await nc.publish("kvt.key", b"%d" % n, headers={"Nats-TTL": "1h"})
        await nc.flush()
        assert server.server is not None and server.server.jetstream is not None
        stream = server.server.jetstream.accounts["$G"].streams["KVT"]
        reply = await nc.request(CREATE + "KVT", json.dumps(config).encode(), timeout=5)
        assert json.loads(reply.data)["state"]["messages"] == 1
        assert stream.store.msgs == 1
        assert len(stream._ttl_heap) <= 2 * 1 + 64 + 1
    finally:
        await server.stop()
