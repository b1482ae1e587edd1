"""nats.go (the Debian-packaged sources, built offline as the interop drivers are) against pynatsd -js and
nats-server -js: the same steps give the same events."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import need_tool
from tests.interop.drivers import BUILD_DIR, go_available, go_env
from tests.servers import ServerProcess, nats_server_binary, start_server

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def jsdriver() -> Path:
    need_tool(go_available(), "go and the nats.go sources")
    out = BUILD_DIR / "jsdriver-go"
    BUILD_DIR.mkdir(exist_ok=True)
    cmd = ["go", "build", "-o", str(out), "."]
    src = HERE / "go" / "jsdriver"
    subprocess.run(cmd, check=True, env=go_env(), cwd=src, capture_output=True, timeout=300)
    return out


@pytest.fixture
def both(tmp_path: Path) -> Iterator[dict[str, ServerProcess]]:
    need_tool(nats_server_binary() is not None, "nats-server")
    servers = {k: start_server(k, ["-js", "-sd", str(tmp_path / k)]) for k in ("nats-server", "pynatsd")}
    yield servers
    for srv in servers.values():
        srv.stop()


def run(driver: Path, url: str) -> list[dict[str, object]]:
    proc = subprocess.run([str(driver), url], capture_output=True, text=True, timeout=30, check=False)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert proc.returncode == 0 and events and events[-1] == {"ev": "done"}, proc.stdout + proc.stderr
    return events


def test_nats_go_jetstream_and_kv(jsdriver: Path, both: dict[str, ServerProcess]) -> None:
    ref = run(jsdriver, both["nats-server"].url)
    ours = run(jsdriver, both["pynatsd"].url)
    assert ours == ref
    assert {"ev": "kv_keys", "keys": ["k1"]} in ours
    assert {"ev": "obj_get_link", "same": True} in ours
    assert {"ev": "obj_list", "names": ["lnk", "renamed"]} in ours
