"""Key-value through nats-py's client-side KV: put/get/create/update/delete/purge/history/keys/watch."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client
from nats.js.errors import KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError, NoKeysError

from tests.jetstream.conftest import JsServer


async def test_kv_basics(nc: Client) -> None:
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="B", history=5)
    assert await kv.put("a", b"1") == 1
    assert await kv.put("b", b"x") == 2
    entry = await kv.get("a")
    assert (entry.key, entry.value, entry.revision) == ("a", b"1", 1)
    assert await kv.update("a", b"2", last=1) == 3
    with pytest.raises(KeyWrongLastSequenceError):
        await kv.update("a", b"3", last=1)
    with pytest.raises(Exception):  # noqa: B017 - nats-py raises its own error type per version
        await kv.create("a", b"again")
    assert await kv.create("c", b"new") == 4
    await kv.delete("c")
    with pytest.raises((KeyDeletedError, KeyNotFoundError)):
        await kv.get("c")
    assert await kv.create("c", b"back") == 6  # create over a delete marker is allowed
    assert sorted(await kv.keys()) == ["a", "b", "c"]
    history = await kv.history("a")
    assert [e.value for e in history] == [b"1", b"2"]
    await kv.purge("a")
    with pytest.raises((KeyDeletedError, KeyNotFoundError)):
        await kv.get("a")
    assert len(await kv.history("a")) == 1  # the purge marker rolled the key's history up
    status = await kv.status()
    assert status.bucket == "B"
    with pytest.raises(KeyNotFoundError):
        await kv.get("never")


async def test_kv_history_limit_and_empty_keys(nc: Client) -> None:
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="H", history=2)
    with pytest.raises(NoKeysError):
        await kv.keys()
    for i in range(5):
        await kv.put("k", b"%d" % i)
    assert [e.value for e in await kv.history("k")] == [b"3", b"4"]


async def test_kv_watch(nc: Client) -> None:
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="W")
    await kv.put("x", b"0")
    watcher = await kv.watchall()
    first = await watcher.updates(timeout=2)
    assert (first.key, first.value) == ("x", b"0")
    assert await watcher.updates(timeout=2) is None  # end of the initial values
    await kv.put("y", b"1")
    await kv.delete("x")
    upd = await watcher.updates(timeout=2)
    assert (upd.key, upd.value) == ("y", b"1")
    dele = await watcher.updates(timeout=2)
    assert (dele.key, dele.operation) == ("x", "DEL")
    await watcher.stop()


async def test_kv_survives_restart(js_server: JsServer) -> None:
    nc = await js_server.connect()
    kv = await nc.jetstream().create_key_value(bucket="R")
    await kv.put("k", b"v1")
    await kv.put("k", b"v2")
    await js_server.restart()
    nc = await js_server.connect()
    kv = await nc.jetstream().key_value("R")
    assert (await kv.get("k")).value == b"v2"
    await asyncio.sleep(0)
