"""`python -m build` makes an sdist and a wheel that install into a fresh venv and run there: the console
script starts a server clients reach, from the installed files, with the LICENSE and package data shipped.

The build is the interpreted one (PYNATSD_NO_EXTENSIONS=1: mypyc's two minutes are `make compile`'s to
spend) and offline: the fresh venvs see the test venv's site-packages (for the dependencies and the build
backend) behind their own, and pip installs pynatsd with `--no-index --no-build-isolation`.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.conftest import need_tool
from tests.servers import REPO_ROOT, free_port, wait_for_port
from tests.wire import WireClient


def _run(*args: str | Path, cwd: Path, **env: str) -> str:
    full_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYNATSD_NO_EXTENSIONS")}
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env={**full_env, **env}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _fresh_venv(path: Path) -> Path:
    """A venv without pip whose dependencies resolve from this venv's site-packages, after its own."""
    _run(sys.executable, "-m", "venv", "--without-pip", path, cwd=path.parent)
    python = path / "bin" / "python"
    purelib = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=path)
    (Path(purelib.strip()) / "shared-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:  # the distribution: `import build` would find the checkout's build/ directory
        importlib.metadata.version("build")
    except importlib.metadata.PackageNotFoundError:
        need_tool(False, "python -m build (requirements-dev.txt)")
    out = tmp_path_factory.mktemp("dist")
    # No --sdist/--wheel: the wheel is built from the sdist (in a temporary directory), as pip would from
    # an index, so what the sdist leaves out is missing from the installed wheel too.
    log = _run(
        sys.executable, "-m", "build", "--no-isolation", "--outdir", out, REPO_ROOT,
        cwd=out, PYNATSD_NO_EXTENSIONS="1",
    )  # fmt: skip
    assert "_BetaConfiguration" not in log and "SetuptoolsDeprecationWarning" not in log, log
    return out


def test_sdist_and_wheel_carry_the_license_and_package_data(dist: Path) -> None:
    (sdist,) = dist.glob("pynatsd-*.tar.gz")
    (wheel,) = dist.glob("pynatsd-*.whl")
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert {"LICENSE", "pyproject.toml", "setup.py", "pynatsd/cli.py"} <= names
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        metadata = whl.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)
    assert {"pynatsd/py.typed", "pynatsd/monitor/static/index.html"} <= names
    assert not any(n.startswith("tests/") for n in names)
    assert "License-Expression: Apache-2.0" in metadata and "Classifier: Typing :: Typed" in metadata
    assert 'Requires-Dist: nats-py<3,>=2.16; extra == "spark"' in metadata


@pytest.mark.parametrize("artifact", ["wheel", "sdist"])
def test_installs_into_a_fresh_venv_and_serves(dist: Path, tmp_path: Path, artifact: str) -> None:
    (path,) = dist.glob("pynatsd-*.whl" if artifact == "wheel" else "pynatsd-*.tar.gz")
    python = _fresh_venv(tmp_path / "venv")
    _run(
        sys.executable, "-m", "pip", "--python", python, "install", "-q",
        "--no-index", "--no-build-isolation", path, cwd=tmp_path, PYNATSD_NO_EXTENSIONS="1",
    )  # fmt: skip
    where = _run(python, "-c", "import pynatsd; print(pynatsd.__file__)", cwd=tmp_path)
    assert where.startswith(str(tmp_path / "venv")), where
    script = tmp_path / "venv" / "bin" / "pynatsd"
    assert "Usage: pynatsd [options]" in _run(script, "--help", cwd=tmp_path)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYNATSD_NO_EXTENSIONS")}
    with subprocess.Popen(
        [script, "-a", "127.0.0.1", "-p", str(port)], cwd=tmp_path, env=env, stderr=subprocess.DEVNULL
    ) as proc:
        try:
            wait_for_port(port, proc)  # type: ignore[arg-type]
            with WireClient(port) as client:
                assert client.info["version"]
                assert client.exchange(b'CONNECT {"verbose":false}\r\nSUB a 1\r\nPUB a 1\r\nx\r\n') == (
                    b"MSG a 1 1\r\nx\r\n",
                    False,
                )
        finally:
            proc.terminate()
            proc.wait(10)
