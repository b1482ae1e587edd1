"""The private Docker engine of the deploy tests, started once per session with the Debian base image and
the pynatsd image built (about 75 s here; the image and cluster tests share it)."""

from __future__ import annotations

import atexit
import shutil
from collections.abc import Iterator

import pytest

from tests.conftest import need_tool
from tests.deploy.engine import Engine, build_base_image, build_image, engine_available, start_engine
from tests.servers import REPO_ROOT

IMAGE = "pynatsd:test"


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    need_tool(engine_available(), "dockerd, debootstrap and docker-compose as root (Debian docker.io etc.)")
    engine = start_engine()
    try:
        engine.base = build_base_image(engine)
        build_image(engine, REPO_ROOT, IMAGE, engine.base)
        yield engine
    finally:
        # The session's last test, whichever it is, pays for this teardown under its own timeout: the
        # state folder (gigabytes of vfs layers) is deleted when the interpreter exits instead.
        engine.stop(remove=False)
        atexit.register(shutil.rmtree, engine.root, ignore_errors=True)
