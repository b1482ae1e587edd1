"""/leafz, /varz's `leaf` block and `leafnodes` count, /accountz's leafnode connections: a pynatsd hub and
leaf beside the same pair of nats-servers, the same fields and values (ids, ports, times and the random
part of loop detection subjects aside)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from selenium import webdriver

from tests.leafnodes.conftest import collect, connect, hub_config, leaf_config, ready
from tests.monitor.test_dashboard import browser, column, eventually, text_of  # noqa: F401 (a fixture)
from tests.servers import ServerProcess, free_port, require, start_server

KINDS = ("pynatsd", "nats-server")
Pairs = dict[str, tuple[ServerProcess, ServerProcess]]


def _get(server: ServerProcess, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}{path}", timeout=10) as response:
        return json.load(response)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pairs]:
    """A hub and its leaf (two remotes, accounts A and B) of each kind, both links up."""
    require("nats-server")
    started: dict[str, tuple[ServerProcess, ServerProcess]] = {}
    try:
        for kind in KINDS:
            directory = tmp_path_factory.mktemp(kind)
            leaf_port = free_port()
            hub_conf, leaf_conf = Path(directory / "hub.conf"), Path(directory / "leaf.conf")
            hub_conf.write_text(hub_config(leaf_port))
            leaf_conf.write_text(leaf_config(leaf_port))
            hub = start_server(kind, ["-c", str(hub_conf)], http_port=free_port())
            leaf = start_server(kind, ["-c", str(leaf_conf)], http_port=free_port())
            started[kind] = (hub, leaf)
        for hub, leaf in started.values():
            deadline = time.monotonic() + 15
            while _get(hub, "/leafz")["leafnodes"] < 2 or _get(leaf, "/leafz")["leafnodes"] < 2:
                assert time.monotonic() < deadline, "the leaf never connected"
                time.sleep(0.05)
        yield started
    finally:
        for hub, leaf in started.values():
            leaf.stop()
            hub.stop()


def _leafz(server: ServerProcess) -> list[dict[str, Any]]:
    """/leafz?subs=1 without what differs run to run, the connections in account order."""
    body = _get(server, "/leafz?subs=1")
    assert body["leafnodes"] == len(body["leafs"])
    shown = []
    for leaf in sorted(body["leafs"], key=lambda entry: entry["account"]):
        entry = {k: v for k, v in leaf.items() if k not in ("id", "name", "port", "rtt", "compression")}
        entry["keys"] = list(leaf)
        entry["subscriptions_list"] = sorted(
            "$LDS.*" if s.startswith("$LDS.") else s for s in leaf.get("subscriptions_list", [])
        )
        shown.append(entry)
    return shown


def _settled(server: ServerProcess) -> list[dict[str, Any]]:
    """_leafz once the interest has settled (two reads 0.2 s apart agree)."""
    before = _leafz(server)
    for _ in range(50):
        time.sleep(0.2)
        after = _leafz(server)
        if after == before:
            return after
        before = after
    raise AssertionError(f"the interest of {server.kind}'s links never settled")


@pytest.mark.parametrize("side", [0, 1], ids=["hub", "leaf"])
def test_leafz_and_varz_as_nats_server(pairs: Pairs, side: int) -> None:
    ours, theirs = pairs["pynatsd"][side], pairs["nats-server"][side]
    assert _settled(ours) == _settled(theirs)
    assert [leaf["is_spoke"] for leaf in _leafz(ours)] == [bool(side), bool(side)]
    for server in (ours, theirs):
        varz = _get(server, "/varz")
        assert varz["leafnodes"] == 2
        block = dict(varz["leaf"])
        if "port" in block:
            block["port"] = 0
        for remote in block.get("remotes", []):
            remote["urls"] = ["*"]
        server.extra["leaf_block"] = block
        detail = _get(server, "/accountz?acc=A")["account_detail"]
        assert detail["leafnode_connections"] == 1
    assert ours.extra["leaf_block"] == theirs.extra["leaf_block"]


@pytest.mark.parametrize("kind", KINDS)
async def test_message_totals_count_the_leaf_connections(pairs: Pairs, kind: str) -> None:
    """/varz in_msgs and out_msgs count what crosses a leaf connection, as nats-server's totals do."""
    hub, leaf = pairs[kind]
    on_hub = await connect(hub)
    on_leaf = await connect(leaf)
    received = await collect(on_leaf, "count.x")
    await ready(on_leaf, on_hub)
    before = _get(hub, "/varz")
    for _ in range(3):
        await on_hub.publish("count.x", b"12345")
    await on_hub.flush()
    await _until_received(received, 3)
    after = _get(hub, "/varz")
    assert (after["in_msgs"] - before["in_msgs"], after["out_msgs"] - before["out_msgs"]) == (3, 3)
    assert after["out_bytes"] - before["out_bytes"] == 15
    await on_hub.close()
    await on_leaf.close()


def _metrics(server: ServerProcess) -> dict[tuple[str, str], float]:
    """/metrics' `pynatsd_leafnode_*` samples: (name without that prefix, account) -> value."""
    url = f"http://127.0.0.1:{server.http_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("pynatsd_leafnode_"):
                samples[sample.name.removeprefix("pynatsd_leafnode_"), sample.labels["account"]] = (
                    sample.value
                )
    return samples


async def test_leafnode_metrics_follow_leafz(pairs: Pairs) -> None:
    """`pynatsd_leafnode_*`: the connections of each account, and the traffic /leafz shows, per account and
    other side's server (a hub's and a leaf's)."""
    hub, leaf = pairs["pynatsd"]
    on_hub = await connect(hub)
    on_leaf = await connect(leaf)
    received = await collect(on_leaf, "metrics.x")
    await ready(on_leaf, on_hub)
    before = _metrics(hub)
    for _ in range(4):
        await on_hub.publish("metrics.x", b"123")
    await on_hub.flush()
    await _until_received(received, 4)
    for server in (hub, leaf):
        samples = _metrics(server)
        assert [samples["connections", account] for account in ("A", "B")] == [1, 1]
        for entry in _get(server, "/leafz")["leafs"]:
            account = entry["account"]
            for field, name in (("in_msgs", "messages_in"), ("out_msgs", "messages_out")):
                assert samples[f"{name}_total", account] == entry[field]
            assert samples["subscriptions", account] == entry["subscriptions"]
    after = _metrics(hub)
    sent = [after[name, "A"] - before[name, "A"] for name in ("messages_out_total", "bytes_out_total")]
    assert sent == [4, 12]


async def test_dashboard_shows_the_leaf_connections(pairs: Pairs, browser: webdriver.Chrome) -> None:  # noqa: F811
    """The dashboard's leaf node table (a hub's accepted connections): one row per connection, from /leafz."""
    hub, _ = pairs["pynatsd"]
    browser.get(f"http://127.0.0.1:{hub.http_port}/")
    assert await eventually(lambda: text_of(browser, "status") == "live")
    assert await eventually(lambda: sorted(column(browser, "leaf-rows", 2)) == ["A", "B"])
    assert column(browser, "leaf-rows", 4) == ["from a leaf", "from a leaf"]
    assert "2 connection(s)" in text_of(browser, "leafs-caption")
    errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert errors == []


async def _until_received(received: list[object], count: int, timeout: float = 15.0) -> None:
    """Until `count` messages came (a failure within `timeout`, not a hang to the suite's limit)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while len(received) < count:
        assert asyncio.get_running_loop().time() < deadline, f"only {len(received)} of {count} came"
        await asyncio.sleep(0.02)
