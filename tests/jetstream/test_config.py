"""JetStream settings: -js/-sd, the config file's jetstream block, and the storage limits they set."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js import api
from nats.js.errors import APIError

from pynatsd.base.options import Options
from pynatsd.config.jetstream import JsConfigError, from_options
from pynatsd.config.parser import parse
from pynatsd.config.schema import apply_config
from tests.conftest import need_tool
from tests.jetstream.conftest import JsServer
from tests.servers import nats_server_binary, server_with_config, start_server


def config_of(text: str) -> Options:
    opts = Options()
    apply_config(opts, parse(text))
    return opts


def test_block_and_switches() -> None:
    cfg = from_options(
        config_of("jetstream { store_dir: /data/js, max_mem: 1G, max_file_store: 10GB, domain: hub }")
    )
    assert cfg is not None
    assert (str(cfg.store_dir), cfg.max_memory_store, cfg.max_file_store, cfg.domain) == (
        "/data/js",
        1000**3,
        10 * 1024**3,
        "hub",
    )
    assert from_options(config_of("jetstream: enabled")) is not None
    assert from_options(config_of("jetstream: false")) is None
    assert from_options(Options()) is None
    always = from_options(config_of("jetstream { sync_interval: always }"))
    assert always is not None and always.sync_always
    compact = from_options(config_of("jetstream { meta_compact: 100, meta_compact_size: 1MB }"))
    assert compact is not None and (compact.meta_compact, compact.meta_compact_size) == (100, 1024**2)
    with pytest.raises(JsConfigError, match='Expected an absolute size for "meta_compact", got -1'):
        from_options(config_of("jetstream { meta_compact: -1 }"))
    flags = Options()
    flags.jetstream, flags.jetstream_store_dir = True, "/tmp/x"
    cfg = from_options(flags)
    assert cfg is not None and str(cfg.store_dir) == "/tmp/x"


async def test_config_file_enables_jetstream(tmp_path: Path) -> None:
    conf = tmp_path / "js.conf"
    conf.write_text(f'jetstream {{\n  store_dir: "{tmp_path / "store"}"\n  max_file_store: 1MB\n}}\n')
    srv = start_server("pynatsd", ["-c", str(conf)])
    try:
        nc = await nats.connect(srv.url)
        info = json.loads((await nc.request("$JS.API.INFO", b"", timeout=2)).data)
        # the server's max_file_store is not the account's limit: nats-server reports none (-1) either
        assert info["limits"]["max_storage"] == -1 and info["limits"]["max_memory"] == -1
        await nc.jetstream().add_stream(name="F", subjects=["f"])
        await nc.close()
        assert (tmp_path / "store" / "jetstream" / "$G" / "streams" / "F" / "meta.json").exists()
    finally:
        srv.stop()


async def test_storage_limit_refuses_publishes(tmp_path: Path) -> None:
    srv = JsServer(tmp_path / "lim", jetstream={"max_memory_store": 2000})
    await srv.start()
    try:
        nc: Client = await srv.connect()
        js = nc.jetstream()
        await js.add_stream(name="L", subjects=["l"], storage=api.StorageType.MEMORY)
        with pytest.raises(APIError) as err:
            for _ in range(100):
                await js.publish("l", b"x" * 100)
        assert err.value.err_code == 10023
        await asyncio.sleep(0)
    finally:
        await srv.stop()


async def test_jetstream_per_account(tmp_path: Path) -> None:
    conf = tmp_path / "acc.conf"
    conf.write_text(
        f'jetstream {{ store_dir: "{tmp_path / "store"}" }}\n'
        "accounts {\n"
        "  A: { jetstream: enabled, users: [ {user: a, password: a} ] }\n"
        "  B: { jetstream: enabled, users: [ {user: b, password: b} ] }\n"
        "}\n"
    )
    srv = start_server("pynatsd", ["-c", str(conf)])
    try:
        a = await nats.connect(srv.url, user="a", password="a")
        b = await nats.connect(srv.url, user="b", password="b")
        await a.jetstream().add_stream(name="SAME", subjects=["x"])
        await b.jetstream().add_stream(name="SAME", subjects=["x"], max_msgs=1)  # no clash across accounts
        for _ in range(3):
            await a.jetstream().publish("x", b"a")
            await b.jetstream().publish("x", b"b")
        assert (await a.jetstream().stream_info("SAME")).state.messages == 3
        assert (await b.jetstream().stream_info("SAME")).state.messages == 1
        await a.close()
        await b.close()
        assert (tmp_path / "store" / "jetstream" / "A" / "streams" / "SAME").is_dir()
    finally:
        srv.stop()


async def account_answers(url: str) -> list[object]:
    """What an account with JetStream and one without (configured with it off, or silent) hear from the
    JetStream API: answers without their timestamps, statuses for the subjects without an API handler."""
    out: list[object] = []
    for user in ("a", "b", "c"):
        nc = await nats.connect(url, user=user, password=user, allow_reconnect=False)
        for subject, body in (
            ("$JS.API.INFO", b""),
            ("$JS.API.STREAM.CREATE.X", b'{"name": "X", "allow_direct": true}'),
            ("$JS.API.STREAM.INFO.X", b""),
            ("$JS.API.STREAM.NAMES", b""),
            ("$JS.API.CONSUMER.CREATE.X.c", b'{"stream_name": "X", "config": {"name": "c"}}'),
            ("$JS.API.DIRECT.GET.X", b'{"seq": 1}'),
            ("$JS.API.CONSUMER.MSG.NEXT.X.c", b'{"no_wait": true}'),
        ):
            try:
                msg = await nc.request(subject, body, timeout=2)
            except nats.errors.NoRespondersError:
                out.append((user, subject, "no responders"))
                continue
            answer = json.loads(msg.data) if msg.data else dict(msg.headers or {})
            for key in ("ts", "created", "config", "state", "cluster", "limits", "memory", "storage", "api"):
                answer.pop(key, None)
            out.append((user, subject, answer))
        await nc.close()
    return out


async def test_account_without_jetstream_refused_as_by_nats_server(tmp_path: Path) -> None:
    """With accounts configured, JetStream is for the accounts that enable it: the others (off, or not
    saying) get 503 10039 'JetStream not enabled for account' from each API request, as from nats-server."""
    need_tool(nats_server_binary() is not None, "nats-server")
    answers = []
    for kind in ("nats-server", "pynatsd"):
        text = (
            f'jetstream {{ store_dir: "{tmp_path / kind}" }}\n'
            "accounts {\n"
            "  A: { jetstream: enabled, users: [ {user: a, password: a} ] }\n"
            "  B: { jetstream: disabled, users: [ {user: b, password: b} ] }\n"
            "  C: { users: [ {user: c, password: c} ] }\n"
            "}\n"
        )
        with server_with_config(kind, tmp_path / f"{kind}.conf", text) as server:
            answers.append(await account_answers(server.url))
    assert answers[1] == answers[0]
    refused = {"code": 503, "err_code": 10039, "description": "JetStream not enabled for account"}
    info = {"type": "io.nats.jetstream.api.v1.account_info_response", "error": refused}
    assert ("b", "$JS.API.INFO", info) in answers[1] and ("c", "$JS.API.INFO", info) in answers[1]
