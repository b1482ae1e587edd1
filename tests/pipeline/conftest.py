"""Fixtures for the Spark pipeline tests: one local[2] SparkSession and one pynatsd for the whole module."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING

# The hypothesis pytest plugin imports hypothesis lazily at the end of the session; on CPython 3.11.7 that
# late (assertion-rewritten) import fails with "AST constructor recursion depth mismatch" once Spark's
# threads have run. Importing it up front, as the other suites do anyway, avoids the crash.
import hypothesis  # noqa: F401
import pytest

from tests.conftest import need_tool
from tests.pipeline.natsclient import SyncNats
from tests.servers import ServerProcess, start_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _spark_available() -> bool:
    return shutil.which("java") is not None and importlib.util.find_spec("pyspark") is not None


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    need_tool(_spark_available(), "Java and pyspark")
    from pipeline.spark import local_session

    session = local_session("pynatsd-tests")
    yield session
    session.stop()


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
