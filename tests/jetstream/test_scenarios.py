"""The JetStream scenario catalogue (scenarios.py) played through nats-py against nats-server and pynatsd:
every answer, sequence and error code must be the same.

CI plays a sample (every error, config, KV and object-store scenario, a sixth of the limits and consumer
matrices); `PYNATSD_JS_SCENARIOS=full` plays the whole catalogue (a few hundred scenarios).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import nats
import pytest

from tests.jetstream.scenarios import GROUPS, Player, Scenario, catalogue, short_catalogue
from tests.servers import ServerProcess, jetstream_pair

FULL = os.environ.get("PYNATSD_JS_SCENARIOS", "") == "full"


def selected(group: str) -> list[Scenario]:
    return catalogue(group) if FULL else short_catalogue(group)


@pytest.fixture(scope="module")
def server_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with jetstream_pair(tmp_path_factory.mktemp("scenarios")) as pair:
        yield pair


async def play_all(url: str, scenarios: list[Scenario]) -> list[list[Any]]:
    nc = await nats.connect(url)
    try:
        # nats-server removes an account's streams directory with its last file stream, and a file stream
        # created meanwhile fails ("error creating store for stream"): one stream stays for the whole run.
        await nc.request("$JS.API.STREAM.CREATE.KEEP", b'{"name": "KEEP", "subjects": ["keep"]}', timeout=3)
        player = Player(nc)
        return [await player.play(s) for s in scenarios]
    finally:
        await nc.close()


def delta(want: Any, have: Any, path: str = "") -> list[str]:
    """Where two answers differ, as `path: nats-server value != pynatsd value` lines."""
    if isinstance(want, dict) and isinstance(have, dict):
        return [
            line
            for k in sorted(set(want) | set(have), key=str)
            for line in delta(want.get(k, "<absent>"), have.get(k, "<absent>"), f"{path}.{k}")
        ]
    if isinstance(want, list | tuple) and isinstance(have, list | tuple) and len(want) == len(have):
        return [
            line
            for i, (a, b) in enumerate(zip(want, have, strict=True))
            for line in delta(a, b, f"{path}[{i}]")
        ]
    return [] if want == have else [f"{path or '.'}: {want!r:.300} != {have!r:.300}"]


async def differences(pair: tuple[ServerProcess, ServerProcess], scenarios: list[Scenario]) -> list[str]:
    """Each scenario played against both servers at once; for each that differs: its name, the step where
    it first differs, and where the answers differ."""
    ref, ours = pair
    want, have = await asyncio.gather(play_all(ref.url, scenarios), play_all(ours.url, scenarios))
    out = []
    for scenario, a, b in zip(scenarios, want, have, strict=True):
        for step, x, y in zip(scenario.steps, a, b, strict=True):
            if x != y:
                lines = "\n    ".join(delta(x, y))
                out.append(f"{scenario.name}\n  step {step!r:.200}\n    {lines}")
                break
    return out


@pytest.mark.parametrize("group", list(GROUPS))
async def test_scenarios_match_nats_server(
    server_pair: tuple[ServerProcess, ServerProcess], group: str
) -> None:
    scenarios = selected(group)
    assert scenarios, "no scenario selected"
    diffs = await differences(server_pair, scenarios)
    assert not diffs, f"{len(diffs)} of {len(scenarios)} scenarios differ:\n" + "\n".join(diffs)
