"""The private Docker engine of the deploy tests, started once per session with the Debian base image and
the pynatsd image built (debootstrap and the image's mypyc build: most of the 225 s setup of the first
deploy test in CI, 352 s on a loaded machine; the image and cluster tests share it).

When a session collects tests that need it, the engine is prepared on a background thread at the lowest
CPU and I/O priority from the end of collection, and those tests run last: the preparation overlaps the
rest of the suite instead of adding to it (a session of the deploy tests alone waits for it, as before)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

import pytest

from tests.conftest import need_tool
from tests.deploy.engine import Engine, build_base_image, build_image, engine_available, start_engine
from tests.servers import REPO_ROOT

IMAGE = "pynatsd:test"
NATS_SERVER_IMAGE = "nats-server-pypi:test"
PROMETHEUS_IMAGE = "pynatsd-test-prometheus:host"
_prepared: list[Future[Engine]] = []  # the background preparation, once started
_preparing: list[Engine] = []  # its engine, as soon as dockerd runs


def prepare_engine(niced: bool = False) -> Engine:
    """dockerd started, the base image and the pynatsd image built; `niced`: at background priority."""
    engine = start_engine(niced=niced)
    if niced:
        _preparing.append(engine)
    try:
        engine.base = build_base_image(engine, niced=niced)
        build_image(engine, REPO_ROOT, IMAGE, engine.base)
        if shutil.which("prometheus"):  # the compose tests' images too: their setup then hits the cache
            with tempfile.TemporaryDirectory(prefix="pynatsd-prometheus-image-") as context:
                build_cluster_images(engine, Path(context))
    except BaseException:
        stop(engine)
        raise
    return engine


def build_cluster_images(engine: Engine, context: Path) -> None:
    """The compose tests' other images: nats-server from its Dockerfile, Prometheus from the host's binary
    (it needs only libc) in `context`. Built by the background preparation (16.6 s there, measured at
    load 7), the compose tests' setup finds them in the build cache (1.6 s)."""
    binary = shutil.which("prometheus")
    assert binary is not None
    build_image(engine, REPO_ROOT, NATS_SERVER_IMAGE, engine.base, dockerfile="docker/Dockerfile.nats-server")
    shutil.copy(binary, context / "prometheus")
    (context / "Dockerfile").write_text(
        f'FROM {engine.base}\nCOPY prometheus /bin/prometheus\nENTRYPOINT ["/bin/prometheus"]\n'
    )
    engine.run("build", "-t", PROMETHEUS_IMAGE, str(context))


def stop(engine: Engine) -> None:
    """Whoever stops the engine pays for that under its own timeout: the state folder (gigabytes of vfs
    layers) is deleted when the interpreter exits instead."""
    engine.stop(remove=False)
    atexit.register(shutil.rmtree, engine.root, ignore_errors=True)


@pytest.hookimpl(trylast=True)  # after -m/-k deselection: only the tests that will run count
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    needing = [item for item in items if "engine" in getattr(item, "fixturenames", ())]
    if not needing or config.option.collectonly or not engine_available():
        return
    moved = set(map(id, needing))
    items[:] = [item for item in items if id(item) not in moved] + needing
    executor = ThreadPoolExecutor(1, thread_name_prefix="deploy-engine")
    _prepared.append(executor.submit(prepare_engine, niced=True))
    executor.shutdown(wait=False)


def pytest_sessionfinish() -> None:
    """An engine prepared for tests that never ran (an interrupted session) is stopped, not left behind:
    stopping it ends the preparation's step under way, so the session ends at once."""
    for future in _prepared:
        future.cancel()
        for engine in _preparing:
            stop(engine)
        wait([future])
    _prepared.clear()


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    need_tool(engine_available(), "dockerd, debootstrap and docker-compose as root (Debian docker.io etc.)")
    engine = _prepared[0].result() if _prepared else prepare_engine()
    _prepared.clear()  # stopped below, by this fixture
    _preparing.clear()
    try:
        yield engine
    finally:
        stop(engine)  # by the session's last test, whichever it is
