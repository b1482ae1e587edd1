"""A private Docker engine for the image tests, and a Debian base image built locally.

No image registry is reachable in CI, so the base image is a minimal Debian (with python3-venv) made by
debootstrap and imported with `docker import`. dockerd runs with the vfs storage driver and no bridge or
iptables (containers use host networking), its state in a temporary folder removed afterwards.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BASE_TAG = "pynatsd-localbase:bookworm"
MIRROR = os.environ.get("PYNATSD_MIRROR", "http://deb.debian.org/debian")
CA_BUNDLE = Path(os.environ.get("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt"))


def engine_available() -> bool:
    """dockerd, its CLI, debootstrap and root (dockerd and debootstrap need it) are all here."""
    return os.geteuid() == 0 and all(shutil.which(t) for t in ("dockerd", "debootstrap", "docker-compose"))


@dataclass
class Engine:
    """A running dockerd; `run()` calls the docker CLI that came with it."""

    root: Path
    proc: subprocess.Popen[bytes]
    docker: str
    base: str = ""  # the base image tag, once built
    step: subprocess.Popen[bytes] | None = None  # a long step of its preparation (debootstrap)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": f"unix://{self.root / 'docker.sock'}", "DOCKER_BUILDKIT": "1"}

    def run(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.docker, *args], env=self.env, capture_output=True, text=True, check=check, timeout=timeout
        )

    def stop(self, remove: bool = True) -> None:
        """Stop dockerd and unmount what it left; delete its state folder unless `remove` is False (the
        caller removes it later: with vfs layers that takes minutes)."""
        if self.step is not None and self.step.poll() is None:
            os.killpg(self.step.pid, signal.SIGKILL)  # its own session: the script and all it started
            self.step.wait()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        # dockerd leaves its default network namespace bind-mounted under exec-root.
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        for mount in sorted((m for m in mounts if m.startswith(f"{self.root}/")), reverse=True):
            subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)


def background(cmd: list[str]) -> list[str]:
    """`cmd` at the lowest CPU and I/O priority (it execs, so the process keeps the pid): work that overlaps
    the rest of the test suite must not slow the tests it runs beside."""
    return ["nice", "-n", "19", "ionice", "-c", "3", *cmd]


def start_engine(timeout: float = 60, niced: bool = False) -> Engine:
    """Start dockerd on a private socket and wait until it answers `docker info`; `niced`: dockerd and
    all it runs (builds, containers) at background priority."""
    root = Path(tempfile.mkdtemp(prefix="pynatsd-dockerd-"))
    dockerd = shutil.which("dockerd")
    assert dockerd is not None
    # Debian's docker.io CLI (/usr/bin) builds with BuildKit on its own; newer CLIs need the buildx plugin.
    docker = shutil.which("docker", path=f"/usr/bin{os.pathsep}{os.environ.get('PATH', '')}") or "docker"
    cmd = [
        dockerd,
        "--storage-driver=vfs",
        "--iptables=false",
        "--ip6tables=false",
        "--bridge=none",
        f"--data-root={root / 'data'}",
        f"--exec-root={root / 'exec'}",
        f"--pidfile={root / 'dockerd.pid'}",
        f"--host=unix://{root / 'docker.sock'}",
    ]
    if niced:
        cmd = background(cmd)
    log = open(root / "dockerd.log", "wb")  # noqa: SIM115 - outlives this function, closed with the process
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    engine = Engine(root, proc, docker)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if engine.run("info", check=False, timeout=30).returncode == 0:
            return engine
        time.sleep(0.5)
    text = (root / "dockerd.log").read_text(errors="replace")[-4000:]
    engine.stop()
    raise RuntimeError(f"dockerd did not start: {' '.join(cmd)}\n{text}")


def build_base_image(engine: Engine, niced: bool = False) -> str:
    """debootstrap a minimal Debian bookworm with python3-venv (and what the compiled message path builds
    with: gcc, the C library's and Python's headers) and import it as BASE_TAG."""
    rootfs = engine.root / "rootfs"
    cmd = [
        "debootstrap",
        "--variant=minbase",
        "--include=python3-venv,python3-dev,gcc,libc6-dev",
        "bookworm",
        str(rootfs),
        MIRROR,
    ]
    engine.step = subprocess.Popen(
        background(cmd) if niced else cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    output, _ = engine.step.communicate(timeout=900)
    if engine.step.returncode != 0:
        raise subprocess.CalledProcessError(engine.step.returncode, cmd, output)
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(
        [engine.docker, "import", "-", BASE_TAG],
        stdin=tar.stdout,
        env=engine.env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    assert tar.stdout is not None
    tar.stdout.close()
    assert tar.wait() == 0
    shutil.rmtree(rootfs, ignore_errors=True)
    return BASE_TAG


def build_image(
    engine: Engine, repo: Path, tag: str, base: str, dockerfile: str = "docker/Dockerfile"
) -> None:
    """Build `dockerfile` from the repository, pip reaching PyPI over the host network."""
    args = [
        "build",
        "--network",
        "host",
        "--build-arg",
        f"BASE_IMAGE={base}",
        "-f",
        dockerfile,
        "-t",
        tag,
    ]
    if CA_BUNDLE.exists():
        args += ["--secret", f"id=cacert,src={CA_BUNDLE}"]
    result = subprocess.run(
        [engine.docker, *args, str(repo)], env=engine.env, capture_output=True, text=True, timeout=900
    )
    if result.returncode != 0:
        raise RuntimeError(f"docker build failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")


def wait_healthy(engine: Engine, container: str, timeout: float = 60) -> None:
    """Wait until Docker's own healthcheck (the image's HEALTHCHECK command) reports healthy."""
    deadline = time.monotonic() + timeout
    status = ""
    while time.monotonic() < deadline:
        status = engine.run("inspect", "-f", "{{.State.Health.Status}}", container).stdout.strip()
        if status == "healthy":
            return
        time.sleep(0.5)
    logs = engine.run("logs", container, check=False)
    raise AssertionError(f"{container} is {status!r} after {timeout}s\n{logs.stdout}{logs.stderr}")
