"""examples/pytest-plugin, a project whose tests use only the plugin's fixtures, run as its users run it:
pytest in its directory, the plugin found by the `pytest11` entry point of pyproject.toml (this checkout is
not installed, so the run gets a dist-info written from pyproject.toml's entry points)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.servers import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "pytest-plugin"


def entry_points_as_installed(site: Path) -> None:
    """A pynatsd dist-info in `site` declaring pyproject.toml's entry points, as pip would install them."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    dist = site / f"pynatsd-{project['version']}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: pynatsd\nVersion: {project['version']}\n")
    lines = [
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in points.items())
        for group, points in project["entry-points"].items()
    ]
    (dist / "entry_points.txt").write_text("\n".join(lines))


def test_the_example_project_passes_with_the_plugin_from_its_entry_point(tmp_path: Path) -> None:
    site = tmp_path / "site"
    entry_points_as_installed(site)
    path = os.pathsep.join([str(site), str(REPO_ROOT), str(EXAMPLE)])
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=EXAMPLE,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 passed" in run.stdout
