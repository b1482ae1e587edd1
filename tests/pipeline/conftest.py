"""Fixtures for the Spark pipeline tests: one local[2] SparkSession and one pynatsd for the whole module."""

from __future__ import annotations

import gc
import importlib.util
import shutil
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING

# Same CPython 3.11.7 bug as below: when only this package runs, the hypothesis plugin's late import at the
# end of the session would hit it; importing hypothesis up front (as the other suites do anyway) avoids it.
import hypothesis  # noqa: F401
import pytest

from tests.conftest import need_tool
from tests.pipeline.natsclient import SyncNats
from tests.servers import ServerProcess, require, start_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _spark_available() -> bool:
    return shutil.which("java") is not None and importlib.util.find_spec("pyspark") is not None


@pytest.fixture(scope="package")
def spark() -> Iterator[SparkSession]:
    """One session for this package, torn down completely before the other suites run (see below)."""
    need_tool(_spark_available(), "Java and pyspark")
    from pynatsd.spark.spark import local_session

    # local[2,2]: a failed task is retried once, as on a cluster (the task-retry tests need it).
    session = local_session("pynatsd-tests", master="local[2,2]")
    yield session
    _shut_down_spark(session)


def _shut_down_spark(session: SparkSession) -> None:
    """Stop Spark and its JVM gateway, then collect Py4J's proxies.

    Left alive, Py4J proxies are finalised during later garbage collections in the middle of whatever the
    main thread does; on CPython 3.11.7 that breaks ast's recursion accounting ("AST constructor recursion
    depth mismatch") in suites that run after this package (seen in hypothesis' inspect.getsource).
    """
    from pyspark import SparkContext

    session.stop()
    gateway = SparkContext._gateway
    if gateway is not None:
        gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    gc.collect()


@pytest.fixture(scope="module")
def broker() -> Iterator[ServerProcess]:
    """pynatsd as a subprocess, shared by a module's tests (each test uses its own subjects)."""
    server = start_server("pynatsd")
    yield server
    server.stop()


@pytest.fixture
def nats_client(broker: ServerProcess) -> Iterator[SyncNats]:
    client = SyncNats(broker.url)
    yield client
    client.close()


@pytest.fixture(scope="module", params=["pynatsd", "nats-server"])
def js_broker(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """A JetStream-enabled server (each kind in turn) with its own store directory, for one test module."""
    require(request.param)
    server = start_server(request.param, ["-js", "-sd", tempfile.mkdtemp(prefix="pynatsd-js-")])
    yield server
    server.stop()
