"""Fixtures for the cluster suite: three-node clusters of every mix, shared by the suite or private."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cluster.harness import MATRIX, Cluster, running_cluster, start_cluster
from tests.conftest import need_tool
from tests.interop.conftest import c_driver, driver, go_driver, python_driver  # noqa: F401 (the drivers)
from tests.servers import nats_server_binary

ClusterFactory = Callable[..., Cluster]


@pytest.fixture(scope="session", params=list(MATRIX))
def mix(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """Each cluster test runs on 3 pynatsd, 2 pynatsd + 1 nats-server, 1 pynatsd + 2 nats-server and, as
    the reference, 3 nats-server nodes (ids: 3py, 2py+1go, 1py+2go, 3go)."""
    kinds = MATRIX[request.param]
    if "nats-server" in kinds:
        need_tool(nats_server_binary() is not None, "nats-server")
    return kinds


@pytest.fixture(scope="session")
def cluster(mix: tuple[str, ...]) -> Iterator[Cluster]:
    """A meshed three-node cluster of the mix, shared by the tests of every module (each uses its own
    subjects; none stops a node of it): 4 clusters started instead of 12 (one per mix and module)."""
    with (
        tempfile.TemporaryDirectory(prefix="pynatsd-cluster-") as workdir,
        running_cluster(mix, Path(workdir)) as cluster,
    ):
        yield cluster


@pytest.fixture
def healthy_cluster(cluster: Cluster) -> Cluster:
    """The shared cluster, restarted and re-meshed if an earlier test left a node down."""
    for node in cluster.nodes:
        if not node.running:
            cluster.start(node)
    cluster.wait_mesh()
    return cluster


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[ClusterFactory]:
    """Private clusters (for kills and restarts), stopped after the test."""
    started: list[Cluster] = []

    def start(kinds: tuple[str, ...], cluster_extra: str = "") -> Cluster:
        if "nats-server" in kinds:
            need_tool(nats_server_binary() is not None, "nats-server")
        cluster = start_cluster(kinds, tmp_path / f"cluster{len(started)}", cluster_extra)
        started.append(cluster)
        return cluster

    yield start
    for cluster in started:
        cluster.stop_all()


@pytest.fixture
def subject() -> str:
    return f"cl.{uuid.uuid4().hex[:10]}"
