"""Operator lifecycle, end to end on real subprocesses: the `-P` pid file, the `--ports_file_dir` ports file,
SIGUSR1 log reopening, `--signal <verb>` and a restart on the same port right after a SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import need_tool
from tests.servers import REPO_ROOT, ServerProcess, free_port, nats_server_binary, start_server

KINDS = ["pynatsd", "nats-server"]


def need_kind(kind: str) -> None:
    if kind == "nats-server":
        need_tool(nats_server_binary() is not None, "nats-server")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pynatsd", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )


def wait_until(what: str, check: object, timeout: float = 15.0) -> None:
    """Poll `check()` until it is truthy; fail with `what` when it never is."""
    assert callable(check)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    pytest.fail(f"timed out waiting for {what}")


def written(path: Path) -> bool:
    """The file exists and has content (nats-server writes in place: it can be seen empty for a moment)."""
    return path.exists() and path.stat().st_size > 0


def exited(server: ServerProcess, timeout: float = 15.0) -> int:
    return server.proc.wait(timeout)


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path, Path]]:
    """pynatsd with a pid file and a log file; yields (server, pid file, log file)."""
    pid_file, log_file = tmp_path / "pynatsd.pid", tmp_path / "pynatsd.log"
    server = start_server("pynatsd", ["-P", str(pid_file), "-l", str(log_file)], log_dir=tmp_path)
    wait_until("the pid file", lambda: written(pid_file))
    yield server, pid_file, log_file
    server.stop(signal.SIGKILL)


# -- pid file -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_pid_file_holds_the_pid_without_newline(kind: str, tmp_path: Path) -> None:
    need_kind(kind)
    pid_file = tmp_path / "server.pid"
    server = start_server(kind, ["-P", str(pid_file)], log_dir=tmp_path)
    try:
        wait_until("the pid file", lambda: written(pid_file))
        assert pid_file.read_bytes() == str(server.proc.pid).encode()
    finally:
        assert server.stop() == 0


def test_pid_file_removed_on_clean_exit(running: tuple[ServerProcess, Path, Path]) -> None:
    server, pid_file, _log = running
    assert pid_file.read_text() == str(server.proc.pid)
    server.proc.send_signal(signal.SIGTERM)
    assert exited(server) == 0
    assert not pid_file.exists()


def test_pid_file_and_ports_dir_from_config(tmp_path: Path) -> None:
    pid_file = tmp_path / "conf.pid"
    conf = tmp_path / "server.conf"
    conf.write_text(f'pid_file: "{pid_file}"\nports_file_dir: "{tmp_path}"\n')
    server = start_server("pynatsd", ["-c", str(conf)], log_dir=tmp_path)
    try:
        wait_until("the pid file", lambda: written(pid_file))
        assert pid_file.read_text() == str(server.proc.pid)
        ports = tmp_path / f"pynatsd_{server.proc.pid}.ports"
        wait_until("the ports file", lambda: written(ports))
        assert json.loads(ports.read_text()) == {"nats": [f"nats://127.0.0.1:{server.port}"]}
    finally:
        assert server.stop() == 0
    assert not pid_file.exists() and not ports.exists()


def test_unwritable_pid_file_is_fatal(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pynatsd",
            "-a",
            "127.0.0.1",
            "-p",
            str(port),
            "-P",
            str(tmp_path / "no/such.pid"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 1
    assert "[FTL] Could not write pidfile:" in proc.stderr
    assert "Traceback" not in proc.stderr


# -- ports file -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_ports_file_lists_client_and_monitoring_urls(kind: str, tmp_path: Path) -> None:
    """`<exe>_<pid>.ports` in the directory, nats-server's JSON, removed on exit; the same for both."""
    need_kind(kind)
    ports_dir = tmp_path / "ports"
    ports_dir.mkdir()
    http_port = free_port()
    server = start_server(kind, ["--ports_file_dir", str(ports_dir)], http_port=http_port, log_dir=tmp_path)
    ports = ports_dir / f"{kind}_{server.proc.pid}.ports"
    try:
        wait_until("the ports file", lambda: written(ports))
        assert json.loads(ports.read_text()) == {
            "nats": [f"nats://127.0.0.1:{server.port}"],
            "monitoring": [f"http://127.0.0.1:{http_port}"],
        }
        assert sorted(p.name for p in ports_dir.iterdir()) == [ports.name]
    finally:
        assert server.stop() == 0
    assert list(ports_dir.iterdir()) == []


def test_ports_file_on_wildcard_address_lists_interfaces(tmp_path: Path) -> None:
    """Bound to 0.0.0.0, the file lists the port on every interface address, loopback included."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pynatsd", "-p", str(port), "--ports_file_dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=REPO_ROOT,
    )
    ports = tmp_path / f"pynatsd_{proc.pid}.ports"
    try:
        wait_until("the ports file", lambda: written(ports))
        urls = json.loads(ports.read_text())["nats"]
        assert f"nats://127.0.0.1:{port}" in urls
        assert all(url.startswith("nats://") and url.endswith(f":{port}") for url in urls)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    assert not ports.exists()


# -- SIGUSR1: log reopen --------------------------------------------------------------------------------


def test_sigusr1_reopens_the_log_file_after_rotation(running: tuple[ServerProcess, Path, Path]) -> None:
    """logrotate's way: rename the file, send SIGUSR1; new lines go to a new file at the original path."""
    server, _pid, log_file = running
    wait_until("the log file", lambda: "Server is ready" in log_file.read_text())
    rotated = log_file.with_name(log_file.name + ".1")
    log_file.rename(rotated)
    server.proc.send_signal(signal.SIGUSR1)
    wait_until("a new log file", log_file.exists)
    wait_until("the reopen notice", lambda: "[INF] File log re-opened" in log_file.read_text())
    server.proc.send_signal(signal.SIGTERM)
    assert exited(server) == 0
    old, new = rotated.read_text(), log_file.read_text()
    assert "Server is ready" in old and 'Trapped "user defined signal 1" signal' in old
    assert "Server is ready" not in new and "Server Exiting.." in new
    assert "Server Exiting.." not in old


def test_sigusr1_without_log_file_is_ignored(tmp_path: Path) -> None:
    server = start_server("pynatsd", log_dir=tmp_path)
    try:
        server.proc.send_signal(signal.SIGUSR1)
        wait_until("the notice", lambda: "File log re-open ignored, not a file logger" in server.log())
        assert server.proc.poll() is None
    finally:
        assert server.stop() == 0


# -- --signal -------------------------------------------------------------------------------------------


def _expect_log(log_file: Path, text: str) -> None:
    wait_until(repr(text), lambda: log_file.exists() and text in log_file.read_text())


@pytest.mark.parametrize(
    ("verb", "trapped", "exit_code"),
    [
        ("quit", "interrupt", 0),
        ("term", "terminated", 0),
        ("ldm", "user defined signal 2", 0),  # no clients: lame duck mode ends at once
        ("stop", None, -signal.SIGKILL),
    ],
)
def test_signal_verbs_that_end_the_server(
    running: tuple[ServerProcess, Path, Path], verb: str, trapped: str | None, exit_code: int
) -> None:
    server, pid_file, log_file = running
    result = run_cli("--signal", verb, "-P", str(pid_file))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert exited(server) == exit_code
    if trapped is not None:
        assert f'Trapped "{trapped}" signal' in log_file.read_text()
        assert not pid_file.exists()  # a clean exit removes it
    else:
        assert pid_file.exists()  # SIGKILL: nothing cleaned up


@pytest.mark.parametrize(
    ("verb", "effect"), [("reopen", "File log re-opened"), ("reload", 'Trapped "hangup" signal')]
)
def test_signal_verbs_that_keep_the_server(
    running: tuple[ServerProcess, Path, Path], verb: str, effect: str
) -> None:
    server, pid_file, log_file = running
    result = run_cli("--signal", verb, "-P", str(pid_file))
    assert (result.returncode, result.stderr) == (0, "")
    _expect_log(log_file, effect)
    assert server.proc.poll() is None


def test_signal_with_explicit_pid_or_pid_file(running: tuple[ServerProcess, Path, Path]) -> None:
    server, pid_file, log_file = running
    assert run_cli(f"--signal=reopen={server.proc.pid}").returncode == 0
    _expect_log(log_file, "File log re-opened")
    assert run_cli("-sl", f"quit={pid_file}").returncode == 0
    assert exited(server) == 0
    assert 'Trapped "interrupt" signal' in log_file.read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--signal", "quit"], "no process to signal: give a pid file with -P <file>"),
        (["--signal", "quit", "-P", "/nonexistent/pynatsd.pid"], "no pid file at /nonexistent/pynatsd.pid"),
        (["--signal", "quit=notapid"], "invalid pid: 'notapid'"),
        (["--signal", "bogus=1"], "unknown signal 'bogus'"),
        (["--signal", "quit=1=2"], "invalid signal parameters"),
    ],
)
def test_signal_errors(args: list[str], message: str) -> None:
    result = run_cli(*args)
    assert result.returncode == 1
    assert result.stderr.startswith("pynatsd: ") and message in result.stderr, result.stderr


def test_signal_to_a_process_that_is_gone(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    pid_file = tmp_path / "stale.pid"
    pid_file.write_text(str(gone.pid))
    result = run_cli("--signal", "reload", "-P", str(pid_file))
    assert result.returncode == 1
    assert f"signal 'reload' {gone.pid}: no such process" in result.stderr


# -- restart after SIGKILL ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_restart_on_the_same_port_right_after_sigkill(kind: str, tmp_path: Path) -> None:
    """The killed server's accepted sockets linger (TIME_WAIT) on the port; the new server binds anyway."""
    need_kind(kind)
    first = start_server(kind, log_dir=tmp_path)
    clients = [_ping(socket.create_connection(("127.0.0.1", first.port), timeout=5)) for _ in range(3)]
    first.stop(signal.SIGKILL)
    for sock in clients:
        sock.close()  # both sides closed: the server's side of each now sits in TIME_WAIT
    second = start_server(kind, port=first.port, log_dir=tmp_path)
    try:
        _ping(socket.create_connection(("127.0.0.1", second.port), timeout=5)).close()
    finally:
        assert second.stop() == 0


def _ping(sock: socket.socket) -> socket.socket:
    """CONNECT and PING on `sock`; returns it once the PONG arrived."""
    sock.sendall(b"CONNECT {}\r\nPING\r\n")
    got = b""
    while b"PONG\r\n" not in got:
        chunk = sock.recv(4096)
        assert chunk, f"connection closed before PONG: {got!r}"
        got += chunk
    return sock
