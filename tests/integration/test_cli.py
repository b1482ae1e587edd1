"""The `pynatsd` command line as operators and client test suites use it (real subprocesses)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.servers import REPO_ROOT, free_port, start_server, wait_for_port
from tests.wire import WireClient

LISTEN = re.compile(r"\[INF\] Listening for client connections on (\S+):(\d+)")
LOG_LINE = re.compile(r"^\[\d+\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} \[(INF|DBG|TRC|WRN|ERR)\] ")


def run_cli(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pynatsd", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
    )


def spawn(*args: str) -> tuple[subprocess.Popen[str], int, list[str]]:
    """Start pynatsd with `args`; return the process, its port (from the log) and the lines read."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pynatsd", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=REPO_ROOT,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 15
    port = 0
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if m := LISTEN.search(line):
            port = int(m.group(2))
        if "[INF] Server is ready" in line:
            return proc, port, lines
    proc.kill()
    raise AssertionError(f"server did not become ready: {lines}")


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> tuple[int, str]:
    """Signal the broker and wait for its exit (a hang fails the test through the timeout)."""
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=10)
    return proc.returncode, err


def test_random_port_logs_and_graceful_sigterm() -> None:
    proc, port, lines = spawn("-p", "-1", "-a", "127.0.0.1")
    assert port > 0
    assert all(LOG_LINE.match(line) for line in lines), lines
    with WireClient(port) as client:
        assert client.info["port"] == port
        out, closed = client.exchange(b"CONNECT {}\r\n")
        assert (out, closed) == (b"+OK\r\n", False)
    code, err = stop(proc)
    assert code == 0
    assert "Traceback" not in err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stop_signals_flush_and_close_clients(sig: int) -> None:
    proc, port, _ = spawn("-p=-1", "--addr=127.0.0.1")
    with WireClient(port) as client:
        client.exchange(b'CONNECT {"verbose":false}\r\nSUB x 1\r\n')
        code, _ = stop(proc, sig)
        _, closed = client.read_until(b"never", timeout=5)
        assert closed
    assert code == 0


def test_go_style_flags() -> None:
    port = free_port()
    proc, got_port, _ = spawn(f"--port={port}", "-a", "127.0.0.1", "-n=edge-1", "-T=false", "-DV")
    try:
        assert got_port == port
        with WireClient(port) as client:
            assert client.info["server_name"] == "edge-1"
            client.exchange(b'CONNECT {"verbose":false}\r\nSUB trace.me 1\r\n')
    finally:
        code, err = stop(proc)
    assert code == 0
    assert re.search(r"^\[\d+\] \[TRC\] .* - <<- \[SUB trace.me 1\]$", err, re.M), err
    assert not re.search(r"\d{4}/\d\d/\d\d", err)  # -T=false: no timestamps


def test_server_name_long_flag_and_double_dash() -> None:
    port = free_port()
    proc, _, _ = spawn("--port", str(port), "--net", "127.0.0.1", "--server_name", "x")
    try:
        with WireClient(port) as client:
            assert client.info["server_name"] == "x" and client.info["host"] == "127.0.0.1"
    finally:
        stop(proc)


def test_version_and_help() -> None:
    result = run_cli("-v")
    assert result.returncode == 0 and "pynatsd" in result.stdout and "2." in result.stdout
    result = run_cli("--help")
    assert result.returncode == 0 and "--port" in result.stdout


@pytest.mark.parametrize("flag", ["bogus", "max_payload"])  # max_payload is config-only in nats-server
def test_unknown_flag_is_an_error(flag: str) -> None:
    result = run_cli(f"--{flag}", "1")
    assert result.returncode == 2 and f"flag provided but not defined: -{flag}" in result.stderr


def test_flag_without_value_is_an_error() -> None:
    result = run_cli("-p")
    assert result.returncode == 2 and "flag needs an argument" in result.stderr


def test_cluster_flags_start_a_cluster_listener() -> None:
    """--cluster and --cluster_name are nats-server's (pynatsd.routes), no longer warned about."""
    proc, _, lines = spawn(
        "-p", "-1", "-a", "127.0.0.1", "--cluster", "nats://127.0.0.1:-1", "--cluster_name", "c1"
    )
    stop(proc)
    assert any("Listening for route connections on 127.0.0.1:" in line for line in lines), lines
    assert any("Cluster name is c1" in line for line in lines), lines
    assert not any("not supported" in line for line in lines), lines


def test_port_in_use_fails_with_a_clear_message() -> None:
    server = start_server("pynatsd")
    try:
        result = run_cli("-p", str(server.port), "-a", "127.0.0.1")
        assert result.returncode == 1
        assert "Error listening on port" in result.stderr
    finally:
        server.stop()


def test_user_and_token_flags(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pynatsd", "-p", str(port), "-a", "127.0.0.1", "--user", "u", "--pass", "p"],
        stderr=subprocess.DEVNULL,
        cwd=REPO_ROOT,
    )
    try:
        wait_for_port(port, proc)  # type: ignore[arg-type]
        with WireClient(port) as client:
            assert client.info["auth_required"] is True
            assert client.exchange(b'CONNECT {"verbose":false,"user":"u","pass":"p"}\r\n') == (b"", False)
        with WireClient(port) as client:
            assert client.exchange(b'CONNECT {"user":"u","pass":"bad"}\r\n') == (
                b"-ERR 'Authorization Violation'\r\n",
                True,
            )
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_server_that_fails_to_start_reports_its_own_output() -> None:
    """The harness's error carries the server's log (it used to be deleted before it was read)."""
    with pytest.raises(RuntimeError, match="flag provided but not defined: -bogus-flag"):
        start_server("pynatsd", ["--bogus-flag"])
