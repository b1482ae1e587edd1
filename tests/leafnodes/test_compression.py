"""Leafnode `compression`: pynatsd compresses nothing, so it takes the modes that run a link uncompressed
(`off`, `disabled`, false, `accept`) and refuses the compressing ones by name. A nats-server peer that asks
for S2 negotiates down to none: the links come up and carry messages, each way round and between two
nats-server nodes (the hub `s2_best`, the leaf `off`)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pynatsd.base.options import Options
from pynatsd.config.parser import parse
from pynatsd.config.schema import ConfigErrors, apply_config
from tests.leafnodes.conftest import TOPOLOGIES, collect, connect, hub_config, leaf_config, ready, settled
from tests.leafnodes.test_websocket import _leafz
from tests.servers import free_port, require, start_server


def _load(text: str) -> None:
    apply_config(Options(), parse(text, "t.conf"))


@pytest.mark.parametrize("mode", ["off", "disabled", "false", "False", "accept", '"not supported"'])
def test_uncompressed_modes_are_taken(mode: str) -> None:
    _load(f'leafnodes {{ compression: {mode}, remotes [ {{ url: "nats://h:1", compression: {mode} }} ] }}')


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("leafnodes { compression: s2_best }", '"compression": pynatsd does not support compressed leaf'),
        ("leafnodes { compression: true }", '"compression": pynatsd does not support compressed leaf'),
        ("leafnodes { compression: { mode: s2_auto } }", '"compression": pynatsd does not support'),
        ('leafnodes { remotes [ { url: "nats://h:1", compression: fast } ] }', '"compression": pynatsd'),
        ("leafnodes { compression: bogus }", 'unsupported compression mode "bogus"'),  # nats-server's words
    ],
)
def test_compressing_modes_are_refused(text: str, error: str) -> None:
    with pytest.raises(ConfigErrors, match=error):
        _load(text)


def _with_compression(config: str, mode: str) -> str:
    """`config` with `compression: mode` first in its `leafnodes {` block."""
    assert "leafnodes {\n" in config
    return config.replace("leafnodes {\n", f"leafnodes {{\n  compression: {mode}\n", 1)


@pytest.mark.parametrize("topology", list(TOPOLOGIES))
async def test_a_link_with_an_s2_peer_runs_uncompressed(topology: str, tmp_path: Path) -> None:
    """nats-server's side asks for S2 (its hub in the reference pair), pynatsd's says off or accept."""
    require("nats-server")
    hub_kind, leaf_kind = TOPOLOGIES[topology]
    leaf_port = free_port()
    hub_conf, leaf_conf = tmp_path / "hub.conf", tmp_path / "leaf.conf"
    hub_conf.write_text(
        _with_compression(hub_config(leaf_port), "s2_best" if hub_kind == "nats-server" else "accept")
    )
    leaf_s2 = leaf_kind == "nats-server" and hub_kind == "pynatsd"
    leaf_conf.write_text(_with_compression(leaf_config(leaf_port), "s2_best" if leaf_s2 else "off"))
    hub = start_server(hub_kind, ["-c", str(hub_conf)], http_port=free_port())
    leaf = start_server(leaf_kind, ["-c", str(leaf_conf)])
    try:
        deadline = time.monotonic() + 15
        while _leafz(hub)["leafnodes"] < 2:
            assert time.monotonic() < deadline, "the leaf never connected"
            time.sleep(0.05)
        on_hub, on_leaf = await connect(hub), await connect(leaf)
        received = await collect(on_hub, "s2.>")
        await ready(on_hub, on_leaf)
        await on_leaf.publish("s2.up", b"1")
        await settled(on_leaf, on_hub, received, "s2.mark")
        assert received == [("s2.up", b"1")]
    finally:
        leaf.stop()
        hub.stop()
