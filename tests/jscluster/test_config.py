"""No split brain: JetStream on a clustered pynatsd makes it a member of the cluster's meta group (issue
37), which needs a stable server name: without one it is refused in nats-server's words; a domain of its
own sets its JetStream apart instead (issue 32). Checked with -t: the same check runs before the server
starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nats
import pytest
from nats.errors import NoRespondersError

from tests.servers import REPO_ROOT, free_port, start_server

REFUSED = "jetstream cluster requires `server_name` to be set"


def _check(tmp_path: Path, config: str, *flags: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "node.conf"
    path.write_text(config)
    return subprocess.run(
        [sys.executable, "-m", "pynatsd", "-c", str(path), "-t", *flags],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("config", "flags"),
    [
        ("cluster { name: c, listen: 127.0.0.1:-1 }\njetstream { store_dir: '{dir}' }\n", ()),
        ("cluster { name: c, listen: 127.0.0.1:-1, routes: [nats-route://127.0.0.1:4248] }\n", ("-js",)),
        ("jetstream { store_dir: '{dir}' }\n", ("--cluster", "nats://127.0.0.1:-1")),
    ],
    ids=["config", "js-flag", "cluster-flag"],
)
def test_clustered_jetstream_needs_a_server_name(tmp_path: Path, config: str, flags: tuple[str, ...]) -> None:
    result = _check(tmp_path, config.replace("{dir}", str(tmp_path / "js")), *flags)
    assert result.returncode == 1
    assert REFUSED in result.stderr
    named = "server_name: n1\n" + config.replace("{dir}", str(tmp_path / "js"))
    result = _check(tmp_path, named, *flags)
    assert result.returncode == 0, result.stderr
    assert "is valid" in result.stderr
    result = _check(tmp_path, "no_system_account: true\n" + named, *flags)
    assert result.returncode == 1
    assert "jetstream cluster requires a system account" in result.stderr


def test_clustered_jetstream_in_its_own_domain_is_accepted(tmp_path: Path) -> None:
    config = "cluster { name: c, listen: 127.0.0.1:-1 }\n"
    config += f"jetstream {{ store_dir: '{tmp_path}', domain: edge }}\n"
    result = _check(tmp_path, config)
    assert result.returncode == 0, result.stderr
    assert "is valid" in result.stderr


def test_standalone_jetstream_and_clustered_without_it_are_accepted(tmp_path: Path) -> None:
    assert _check(tmp_path, f"jetstream {{ store_dir: '{tmp_path}' }}\n").returncode == 0
    assert _check(tmp_path, "cluster { name: c, listen: 127.0.0.1:-1 }\n").returncode == 0


async def test_clustered_jetstream_in_a_domain_answers_only_its_domain(tmp_path: Path) -> None:
    """A clustered pynatsd with JetStream in its own domain answers `$JS.<domain>.API` itself, and leaves
    `$JS.API` to the cluster's JetStream (here none: no responders) instead of shadowing it."""
    path = tmp_path / "node.conf"
    path.write_text(
        f"cluster {{ name: c, listen: 127.0.0.1:{free_port()} }}\n"
        f"jetstream {{ store_dir: '{tmp_path / 'js'}', domain: edge }}\n"
    )
    server = start_server("pynatsd", ["-c", str(path)])
    try:
        nc = await nats.connect(server.url)
        info = await nc.request("$JS.edge.API.INFO", b"", timeout=10)
        assert b'"domain":"edge"' in info.data
        with pytest.raises(NoRespondersError):
            await nc.request("$JS.API.INFO", b"", timeout=10)
        await nc.close()
    finally:
        server.stop()
