"""Loop detection: two servers that are each other's hub and leaf close a loop; the loop detection
subject (`$LDS.`) comes back to the one that sent it, which closes the link with nats-server's error and
delays its reconnect. Each pairing: pynatsd with pynatsd, with nats-server, and the reference."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import ServerProcess, free_port, require, start_server

PAIRINGS = {
    "pynatsd": ("pynatsd", "pynatsd"),
    "mixed": ("pynatsd", "nats-server"),
    "nats-server": ("nats-server",) * 2,
}
LOOP = 'Loop detected for leafnode account="$G"'


@pytest.fixture(params=list(PAIRINGS))
def looped(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    require("nats-server")
    ports = [free_port(), free_port()]
    servers: list[ServerProcess] = []
    try:
        for i, kind in enumerate(PAIRINGS[request.param]):
            conf = tmp_path / f"s{i}.conf"
            conf.write_text(
                f'leafnodes {{ listen: 127.0.0.1:{ports[i]}, reconnect: "1s"\n'
                f'  remotes [ {{ url: "nats-leaf://127.0.0.1:{ports[1 - i]}" }} ] }}\n'
            )
            servers.append(start_server(kind, ["-c", str(conf)]))
        yield servers
    finally:
        for server in servers:
            server.stop()


def test_a_loop_of_two_hubs_is_detected(looped: list[ServerProcess]) -> None:
    deadline = time.monotonic() + 20
    # every pynatsd logs it (found, or the peer's -ERR naming it): nats-server's detection alone is not enough
    while not all(LOOP in server.log() for server in looped if server.kind == "pynatsd") or not any(
        LOOP in server.log() for server in looped
    ):
        assert time.monotonic() < deadline, "no loop detected:\n" + "\n".join(s.log() for s in looped)
        time.sleep(0.05)
