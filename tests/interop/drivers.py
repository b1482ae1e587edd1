"""Build the Go and C driver programs once per session and run their scenarios.

Each driver prints one JSON object per line; `run` collects them, `Interactive` lets a test react to
lines (stop a server, query monitoring) and write to the driver's stdin.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
BUILD_DIR = HERE / "build"
GOCODE = Path("/usr/share/gocode")
NATS_GO_SRC = GOCODE / "src/github.com/nats-io/nats.go"
RUN_TIMEOUT = 30.0  # the drivers' own watchdog is 25 s

Event = dict[str, Any]


class DriverError(AssertionError):
    """A driver exited badly or printed an error event."""


def go_available() -> bool:
    return shutil.which("go") is not None and NATS_GO_SRC.is_dir()


def c_available() -> bool:
    if shutil.which("gcc") is None or shutil.which("pkg-config") is None:
        return False
    return subprocess.run(["pkg-config", "--exists", "libnats"], check=False).returncode == 0


def go_cache() -> Path:
    """Go's own build cache, outside the checkout where Go keeps it (GOCACHE, else the user's cache folder):
    a fresh clone's first Go build compiled the standard library and nats.go again (25 s here); the
    checkout's build folder where that cache cannot be written."""
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "go-build"
    cache = Path(os.environ.get("GOCACHE") or default)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        return BUILD_DIR / "gocache"
    return cache if os.access(cache, os.W_OK) else BUILD_DIR / "gocache"


def go_env() -> dict[str, str]:
    """GOPATH mode against the Debian-packaged sources: no modules, no proxy, no downloads."""
    cache = go_cache()  # read before the environment's GO* variables are left out
    env = {k: v for k, v in os.environ.items() if not k.startswith("GO")}
    env.update(
        GO111MODULE="off",
        GOPATH=f"{BUILD_DIR / 'gopath'}{os.pathsep}{GOCODE}",
        GOPROXY="off",
        GOFLAGS="",
        GOTOOLCHAIN="local",
        GOENV="off",
        GOCACHE=str(cache),
        CGO_ENABLED="0",
    )
    return env


def _build_paths(name: str) -> tuple[Path, Path]:
    """The program's path, and the temporary one it is built at and then renamed from: test processes running
    at once may build the same program while another runs it (a half-written binary is not executable)."""
    BUILD_DIR.mkdir(exist_ok=True)
    return BUILD_DIR / name, BUILD_DIR / f"{name}.{os.getpid()}.building"


def build_go(src: Path = HERE / "go" / "natsinterop", name: str = "natsinterop-go") -> Path:
    """Builds the Go program in `src` (a main package importing nats.go) offline; returns the binary."""
    out, building = _build_paths(name)
    subprocess.run(
        ["go", "build", "-o", str(building), "."],  # GOPATH mode refuses absolute import paths
        check=True,
        env=go_env(),
        cwd=src,
        capture_output=True,
        timeout=300,
    )
    return building.replace(out)


def build_c() -> Path:
    out, building = _build_paths("natsinterop-c")
    flags = subprocess.run(
        ["pkg-config", "--cflags", "--libs", "libnats"], check=True, capture_output=True, text=True
    ).stdout.split()
    sources = sorted(str(p) for p in (HERE / "c").glob("*.c"))
    subprocess.run(
        [
            "gcc",
            "-std=gnu11",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-o",
            str(building),
            *sources,
            *flags,
            "-lpthread",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return building.replace(out)


def python_driver() -> Driver:
    """The nats-py driver needs no build: it runs from the repository root with this interpreter."""
    return Driver("python", (sys.executable, "-m", "tests.interop.pydriver"))


@dataclass(frozen=True)
class Driver:
    """One driver program (`lang` is "go", "c" or "python") and the command that starts it."""

    lang: str
    cmd: tuple[str, ...]

    def run(self, scenario: str, url: str, *args: object, stdin: str = "") -> list[Event]:
        """Runs a scenario to completion and returns its events (the final "done" is checked)."""
        proc = subprocess.run(
            [*self.cmd, scenario, url, *map(str, args)],
            cwd=REPO_ROOT,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )
        return check_events(self, scenario, proc.returncode, proc.stdout, proc.stderr)

    def start(self, scenario: str, url: str, *args: object) -> Interactive:
        return Interactive(self, scenario, [*self.cmd, scenario, url, *map(str, args)])


def check_events(driver: Driver, scenario: str, rc: int, stdout: str, stderr: str) -> list[Event]:
    events = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    errors = [e for e in events if e.get("ev") == "error"]
    if rc != 0 or errors or not events or events[-1] != {"ev": "done"}:
        raise DriverError(
            f"{driver.lang} {scenario}: rc={rc} errors={errors}\n"
            f"stdout={shorten(stdout)}\nstderr={shorten(stderr)}"
        )
    return events[:-1]


class Interactive:
    """A running driver whose events are read one by one, each wait bounded in time.

    A thread drains stdout continuously, so a chatty driver never blocks on a full pipe.
    """

    def __init__(self, driver: Driver, scenario: str, cmd: list[str]) -> None:
        self.driver, self.scenario = driver, scenario
        self.proc = subprocess.Popen(
            cmd,
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def expect(self, ev: str, timeout: float = 15.0) -> Event:
        """Reads events until one named `ev`; fails on an error event, exit or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise DriverError(
                    f"{self.driver.lang} {self.scenario}: no {ev!r} in time\n{self.output()}"
                ) from None
            if line is None:
                raise DriverError(
                    f"{self.driver.lang} {self.scenario}: exited before {ev!r}\n{self.output()}"
                )
            self.lines.append(line)
            event: Event = json.loads(line)
            if event.get("ev") == "error":
                raise DriverError(f"{self.driver.lang} {self.scenario}: {event}\n{self.output()}")
            if event.get("ev") == ev:
                return event

    def send(self, line: str = "") -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = RUN_TIMEOUT) -> None:
        """Waits for a clean exit ending with the "done" event."""
        self.expect("done", timeout)
        assert self.proc.wait(timeout) == 0, self.output()

    def output(self, limit: int = 4000) -> str:
        """The lines read so far, shortened for failure messages."""
        return shorten("".join(self.lines), limit)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)
        self._reader.join(5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe:
                pipe.close()


def shorten(text: str, limit: int = 4000) -> str:
    """Keeps failure output readable when drivers print 64 KiB payloads as hex."""
    return text if len(text) <= limit else text[: limit // 2] + "\n[...]\n" + text[-limit // 2 :]
