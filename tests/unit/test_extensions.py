"""The compiled message path is what runs (under CI it must have been built), and PYNATSD_NO_EXTENSIONS=1
runs the very same modules from source."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import IN_CI, REPO_ROOT

PROBE = (
    "import pynatsd.extensions as e, pynatsd.protocol.parser as p, pynatsd.broker.connection as c;"
    "print(e.compiled(), p.__file__.endswith('.py'), c.__file__.endswith('.py'))"
)


def _probe(**env: str) -> str:
    full = {k: v for k, v in os.environ.items() if k != "PYNATSD_NO_EXTENSIONS"}
    full.update(PYTHONPATH=str(REPO_ROOT), **env)
    return subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO_ROOT, env=full, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_switch_forces_the_source_modules() -> None:
    assert _probe(PYNATSD_NO_EXTENSIONS="1") == "False True True"


@pytest.mark.compiled_pass_only  # make test's interpreted pass runs while the compile may be under way
def test_the_compiled_path_is_built_and_loaded() -> None:
    got = _probe()
    if got != "True False False" and not IN_CI:
        pytest.skip("no compiled modules here (run `make compile`)")
    assert got == "True False False"


@pytest.mark.parametrize(
    ("compiler_found", "named"), [(False, "no C compiler"), (True, "built without mypy, or the build failed")]
)
def test_an_unasked_interpreted_path_is_explained(
    monkeypatch: pytest.MonkeyPatch, compiler_found: bool, named: str
) -> None:
    """A build without compiled modules runs about 6x slower per message: start-up says why and how to get
    the compiled path; nothing is said when it is compiled or turned off on purpose."""
    from pynatsd import extensions

    monkeypatch.setattr(extensions, "compiled", lambda: False)
    monkeypatch.setattr(extensions, "disabled", lambda: False)
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}" if compiler_found else None)
    reason = extensions.interpreted_reason()
    assert named in reason and "make compile" in reason
    monkeypatch.setattr(extensions, "disabled", lambda: True)
    assert extensions.interpreted_reason() == ""
    monkeypatch.setattr(extensions, "disabled", lambda: False)
    monkeypatch.setattr(extensions, "compiled", lambda: True)
    assert extensions.interpreted_reason() == ""


def test_start_up_warns_when_interpreted_unasked(tmp_path: Path) -> None:
    """The warning is logged at start-up: a copy of the package with no compiled modules, run as is."""
    shutil.copytree(REPO_ROOT / "pynatsd", tmp_path / "pynatsd", ignore=shutil.ignore_patterns("*.so"))
    env = {k: v for k, v in os.environ.items() if k != "PYNATSD_NO_EXTENSIONS"}
    env["PYTHONPATH"] = str(tmp_path)
    cmd = [sys.executable, "-m", "pynatsd", "-a", "127.0.0.1", "-p", "-1"]
    with subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "Server is ready" in line:
                break
        proc.terminate()
    log = "".join(lines)
    assert "message path interpreted" in log and "[WRN] Message path interpreted, about 6x slower" in log, log
