"""`-c` and `-t` with real processes, compared with the reference nats-server on the same files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import REPO_ROOT, nats_server_binary, server_with_config
from tests.wire import WireClient

GOOD = """
# limits from a file; flags given on the command line override it
max_payload: 2kb
authorization { user: alice, password: "s3cret" }
"""


def _check(kind: str, conf: Path) -> subprocess.CompletedProcess[str]:
    if kind == "pynatsd":
        cmd = [sys.executable, "-m", "pynatsd"]
    else:
        binary = nats_server_binary()
        assert binary is not None
        cmd = [binary]
    return subprocess.run(
        [*cmd, "-t", "-c", str(conf)], capture_output=True, text=True, timeout=20, cwd=REPO_ROOT
    )


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_check_config_accepts_good_and_rejects_typo(kind: str, tmp_path: Path) -> None:
    good = tmp_path / "good.conf"
    good.write_text(GOOD)
    bad = tmp_path / "bad.conf"
    bad.write_text("max_paylod: 3\n")
    assert _check(kind, good).returncode == 0
    result = _check(kind, bad)
    assert result.returncode != 0
    assert "max_paylod" in result.stderr + result.stdout


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_config_file_sets_limits_and_user(kind: str, tmp_path: Path) -> None:
    with server_with_config(kind, tmp_path / "s.conf", GOOD) as server:
        with WireClient(server.port, read_info=False) as client:
            info = client.read_line()
        assert b'"max_payload":2048' in info
        assert b'"auth_required":true' in info
        with WireClient(server.port) as client:
            reply, _ = client.exchange(
                b'CONNECT {"user":"alice","pass":"s3cret","verbose":false}\r\nPING\r\n'
            )
            assert reply.startswith(b"PONG")
        with WireClient(server.port) as client:
            reply, _ = client.exchange(b'CONNECT {"user":"alice","pass":"wrong","verbose":false}\r\nPING\r\n')
            assert b"-ERR 'Authorization Violation'" in reply
