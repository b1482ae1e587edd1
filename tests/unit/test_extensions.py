"""The compiled message path is what runs (under CI it must have been built), and PYNATSD_NO_EXTENSIONS=1
runs the very same modules from source."""

from __future__ import annotations

import os
import subprocess
import sys

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


def test_the_compiled_path_is_built_and_loaded() -> None:
    got = _probe()
    if got != "True False False" and not IN_CI:
        pytest.skip("no compiled modules here (run `make compile`)")
    assert got == "True False False"
