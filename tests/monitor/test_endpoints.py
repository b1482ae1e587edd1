"""Monitoring endpoints checked against real nats-py traffic: every field the exporters and nats-top read."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import nats
import nats.aio.client as nats_client
import pytest

from pynatsd import VARZ_VERSION
from pynatsd.server import Server
from tests.monitor.conftest import Get
from tests.servers import free_port, server_with_config

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
UPTIME = re.compile(r"^(\d+y)?(\d+d)?(\d+h)?(\d+m)?\d+s$")


async def traffic(server: Server, n: int = 10, payload: bytes = b"hello") -> nats.NATS:
    """A named client that subscribes to foo.* and q (queue) and publishes n messages to itself."""
    nc = await nats.connect(f"nats://127.0.0.1:{server.port}", name="watcher")
    await nc.subscribe("foo.*")
    await nc.subscribe("work", queue="q")
    for _ in range(n):
        await nc.publish("foo.bar", payload)
    await nc.flush()
    await asyncio.sleep(0.05)
    return nc


async def test_varz_counts_real_traffic(mserver: Server, get: Get) -> None:
    nc = await traffic(mserver, 10)
    try:
        v = await get("/varz")
        assert v["server_id"] == mserver.server_id and v["server_name"] == mserver.server_name
        assert v["version"] == VARZ_VERSION and v["proto"] == 1  # the level implemented, +pynatsd.<ours>
        assert (v["connections"], v["total_connections"]) == (1, 1)
        assert (v["in_msgs"], v["out_msgs"], v["in_bytes"], v["out_bytes"]) == (10, 10, 50, 50)
        assert (v["in_client_msgs"], v["out_client_bytes"]) == (10, 50)
        # nats-py subscribes no response inbox until its first request: exactly our two subscriptions.
        assert v["subscriptions"] == 2
    finally:
        await nc.close()
    assert v["slow_consumers"] == 0 and v["stale_connections"] == 0
    assert isinstance(v["mem"], int) and v["mem"] > 10_000_000
    assert isinstance(v["cpu"], float | int) and v["cores"] >= 1
    assert RFC3339.match(v["start"]) and RFC3339.match(v["now"]) and UPTIME.match(v["uptime"])
    assert v["ping_interval"] == 3600 * 10**9 and v["write_deadline"] == 10 * 10**9
    assert v["max_payload"] == 1048576 and v["max_pending"] == 64 * 1024 * 1024
    assert v["http_port"] == mserver.http_port and v["port"] == mserver.port
    for key in ("cluster", "gateway", "leaf", "mqtt", "websocket", "jetstream"):
        assert v[key] == {}
    assert v["http_req_stats"]["/varz"] >= 1


async def test_varz_totals_survive_closed_connections(mserver: Server, get: Get) -> None:
    nc = await traffic(mserver, 7, b"abc")
    await nc.close()
    await asyncio.sleep(0.05)
    v = await get("/varz")
    assert (v["connections"], v["total_connections"], v["in_msgs"], v["in_bytes"]) == (0, 1, 7, 21)


async def test_connz_fields_nats_top_reads(mserver: Server, get: Get) -> None:
    nc = await traffic(mserver, 4)
    try:
        c = await get("/connz?subs=1")
        assert (c["num_connections"], c["total"], c["offset"], c["limit"]) == (1, 1, 0, 1024)
        [conn] = c["connections"]
        assert conn["cid"] == next(iter(mserver.clients)) and conn["name"] == "watcher"
        assert conn["lang"] == "python3" and conn["version"] == nats_client.__version__
        assert conn["ip"] == "127.0.0.1" and isinstance(conn["port"], int) and conn["port"] > 0
        assert (conn["in_msgs"], conn["out_msgs"], conn["in_bytes"], conn["out_bytes"]) == (4, 4, 20, 20)
        assert conn["subscriptions"] == 2 and sorted(conn["subscriptions_list"]) == ["foo.*", "work"]
        assert conn["pending_bytes"] == 0 and conn["kind"] == "Client" and conn["type"] == "nats"
        assert RFC3339.match(conn["start"]) and RFC3339.match(conn["last_activity"])
        assert UPTIME.match(conn["uptime"]) and UPTIME.match(conn["idle"])
        d = await get("/connz?subs=detail")
        details = {s["subject"]: s for s in d["connections"][0]["subscriptions_list_detail"]}
        assert details["foo.*"]["msgs"] == 4 and details["work"]["qgroup"] == "q"
        assert details["foo.*"]["cid"] == conn["cid"] and details["foo.*"]["sid"] == "1"
    finally:
        await nc.close()


async def test_connz_rtt_after_server_ping(mserver: Server, get: Get) -> None:
    mserver.options.ping_interval = 0.1
    nc = await nats.connect(f"nats://127.0.0.1:{mserver.port}")
    try:
        await asyncio.sleep(0.4)  # the first server PING (min(ping_interval, 2 s)) measures the RTT
        [conn] = (await get("/connz"))["connections"]
        assert re.match(r"^\d+(\.\d+)?(ns|µs|ms|s)$", conn["rtt"]), conn["rtt"]
    finally:
        await nc.close()


async def test_connz_sort_limit_offset_cid(mserver: Server, get: Get) -> None:
    clients = [await nats.connect(f"nats://127.0.0.1:{mserver.port}", name=f"c{i}") for i in range(4)]
    try:
        for i, nc in enumerate(clients):
            for _ in range(i):
                await nc.publish("x", b"1")
            await nc.flush()
        by_cid = await get("/connz")
        cids = [c["cid"] for c in by_cid["connections"]]
        assert cids == sorted(cids)
        by_msgs = await get("/connz?sort=msgs_from")
        assert [c["in_msgs"] for c in by_msgs["connections"]] == [3, 2, 1, 0]
        page = await get("/connz?sort=cid&limit=2&offset=1")
        assert [c["cid"] for c in page["connections"]] == cids[1:3]
        assert (page["num_connections"], page["total"], page["limit"], page["offset"]) == (2, 4, 2, 1)
        one = await get(f"/connz?cid={cids[2]}")
        assert [c["name"] for c in one["connections"]] == ["c2"]
    finally:
        for nc in clients:
            await nc.close()


async def test_connz_closed_connections_keep_reason(mserver: Server, get: Get) -> None:
    nc = await nats.connect(f"nats://127.0.0.1:{mserver.port}", name="gone")
    await nc.close()
    await asyncio.sleep(0.05)
    closed = await get("/connz?state=closed")
    [conn] = closed["connections"]
    assert conn["name"] == "gone" and conn["reason"] == "Client Closed" and RFC3339.match(conn["stop"])
    assert (await get("/connz?state=open"))["connections"] == []
    assert len((await get("/connz?state=any"))["connections"]) == 1


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/connz?sort=bogus", "invalid sorting option: bogus"),
        ("/connz?limit=x", "Error decoding int for 'limit': strconv.Atoi: parsing \"x\": invalid syntax"),
        (
            "/connz?subs=x",
            "Error decoding boolean for 'subs': strconv.ParseBool: parsing \"x\": invalid syntax",
        ),
        ("/connz?state=x", "Error decoding state for x"),
        ("/subsz?test=foo.*", "invalid test subject, must be valid publish subject: foo.*"),
    ],
)
async def test_bad_parameters_get_400_with_nats_server_text(get: Get, path: str, message: str) -> None:
    status, _headers, text = await get(path, raw=True)
    assert (status, text) == (400, message)


async def test_subsz_stats_and_test_subject(mserver: Server, get: Get) -> None:
    nc = await traffic(mserver, 3)
    try:
        s = await get("/subsz")
        assert s["num_subscriptions"] == 2 and s["num_inserts"] == 2 and s["num_matches"] >= 3
        assert 0 <= s["cache_hit_rate"] <= 1 and s["max_fanout"] >= 1
        assert "subscriptions_list" not in s
        listed = await get("/subsz?subs=1")
        assert sorted(x["subject"] for x in listed["subscriptions_list"]) == ["foo.*", "work"]
        tested = await get("/subsz?test=foo.baz")
        assert [x["subject"] for x in tested["subscriptions_list"]] == ["foo.*"]
    finally:
        await nc.close()


async def test_standalone_shapes(mserver: Server, get: Get) -> None:
    assert (await get("/routez"))["num_routes"] == 0
    assert (await get("/gatewayz"))["outbound_gateways"] == {}
    assert (await get("/leafz"))["leafnodes"] == 0
    assert "$G" in (await get("/accountz"))["accounts"]
    assert (await get("/accstatz"))["account_statz"] == []  # only accounts with connections, as nats-server
    assert "$G" in [a["acc"] for a in (await get("/accstatz?unused=1"))["account_statz"]]
    jsz = await get("/jsz")
    assert jsz["disabled"] is True and jsz["streams"] == 0
    status, headers, text = await get("/healthz", raw=True)
    assert (status, text) == (200, '{"status":"ok"}')
    assert headers["Access-Control-Allow-Origin"] == "*"


async def test_json_is_indented_like_nats_server(get: Get) -> None:
    _status, headers, text = await get("/varz", raw=True)
    assert headers["Content-Type"].startswith("application/json")
    assert text.startswith('{\n  "server_id": ')


async def test_dashboard_page_is_served(get: Get) -> None:
    status, _headers, text = await get("/", raw=True)
    assert status == 200 and "<title>pynatsd</title>" in text and 'fetch("varz")' in text
    assert "http://" not in text and "https://" not in text  # no CDN: everything inline


async def test_counts_cover_every_account(tmp_path: Path) -> None:
    """Subscriptions outside $G count in /varz, /subsz and /metrics, as nats-server sums its accounts."""
    http_port = free_port()
    conf = f"""
http_port: {http_port}
no_system_account: true  # the system account's own subscriptions (tests/system) would count too
accounts {{
  A: {{ users: [{{user: a, password: a}}] }}
  B: {{ users: [{{user: b, password: b}}] }}
}}
"""
    with server_with_config("pynatsd", tmp_path / "acc.conf", conf) as proc:
        a = await nats.connect(proc.url, user="a", password="a")
        b = await nats.connect(proc.url, user="b", password="b")
        try:
            await a.subscribe("t.*")
            await b.subscribe("t.x")
            await b.subscribe("u", queue="q")
            await a.flush()
            await b.flush()
            await b.publish("t.x", b"1")
            await b.flush()
            async with aiohttp.ClientSession() as session:

                async def fetch(path: str) -> Any:
                    async with session.get(f"http://127.0.0.1:{http_port}{path}") as resp:
                        return json.loads(await resp.text())

                assert (await fetch("/varz"))["subscriptions"] == 3
                subsz = await fetch("/subsz?subs=1")
                assert subsz["num_subscriptions"] == 3 and subsz["total"] == 3
                assert sorted(s["subject"] for s in subsz["subscriptions_list"]) == ["t.*", "t.x", "u"]
                tested = await fetch("/subsz?test=t.x")
                assert sorted(s["subject"] for s in tested["subscriptions_list"]) == ["t.*", "t.x"]
                async with session.get(f"http://127.0.0.1:{http_port}/metrics") as resp:
                    metrics = await resp.text()
                assert re.search(r"^pynatsd_subscriptions\{[^}]*\} 3\.0$", metrics, re.M), metrics
        finally:
            await a.close()
            await b.close()
