"""Mixed clusters where nats-server nodes keep the JetStream and pynatsd nodes (or, as the reference,
nats-server nodes with JetStream off in their place) serve it to their clients (issue 32)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cluster.harness import Cluster, Node, running_cluster, wait_until
from tests.conftest import need_tool
from tests.interop.drivers import build_go, go_available
from tests.servers import nats_server_binary

DOMAIN = "hub"  # the JetStream nodes' domain: clients of a JetStream-less node reach it as `$JS.API`
# Users of three accounts: A and B with JetStream, C without.
USERS = {"a": "A", "b": "B", "c": "C"}
ACCOUNTS = (
    "accounts {\n"
    "  A: { jetstream: enabled, users: [{user: a, password: a}] }\n"
    "  B: { jetstream: enabled, users: [{user: b, password: b}] }\n"
    "  C: { users: [{user: c, password: c}] }\n"
    "}\n"
)
JS_READY_TIMEOUT = 60.0  # the meta group elects its leader within a few seconds here, longer when loaded

# Each layout: per node, its kind and whether it keeps JetStream. The JetStream-less nodes are the ones
# clients connect to: pynatsd, or nats-server with JetStream off as the reference.
LAYOUTS: dict[str, tuple[tuple[str, bool], ...]] = {
    "1py+2js": (("pynatsd", False), ("nats-server", True), ("nats-server", True)),
    "1go+2js": (("nats-server", False), ("nats-server", True), ("nats-server", True)),
    "2py+3js": (("pynatsd", False), ("pynatsd", False), *(("nats-server", True),) * 3),
    "2go+3js": (("nats-server", False), ("nats-server", False), *(("nats-server", True),) * 3),
}


@dataclass
class JsCluster:
    cluster: Cluster
    layout: tuple[tuple[str, bool], ...]

    @property
    def clients(self) -> list[Node]:
        """The JetStream-less nodes (where the clients connect)."""
        return [n for n, (_, js) in zip(self.cluster.nodes, self.layout, strict=True) if not js]

    @property
    def js_nodes(self) -> list[Node]:
        return [n for n, (_, js) in zip(self.cluster.nodes, self.layout, strict=True) if js]

    @property
    def replicas(self) -> int:
        return len(self.js_nodes)

    def url(self, node: Node, user: str = "a") -> str:
        return f"nats://{user}:{user}@127.0.0.1:{node.port}"

    def node_named(self, name: str) -> Node:
        return next(n for n in self.cluster.nodes if n.name == name)

    def wait_ready(self) -> None:
        """Until the JetStream nodes agree on a meta leader and the client nodes know where the JetStream
        API is (the JetStream nodes' `$JS.API.>` interest in the system account)."""
        running = [n for n in self.js_nodes if n.running]

        def meta_leader() -> bool:
            leaders = {str((n.get("/jsz").get("meta_cluster") or {}).get("leader") or "") for n in running}
            return len(leaders) == 1 and "" not in leaders

        wait_until(meta_leader, JS_READY_TIMEOUT, lambda: f"no meta leader:\n{self.cluster.describe()}")
        # A leader known is not yet a meta group every node follows: a stream create in that window is
        # answered 10008 "JetStream system temporarily unavailable" (the reference too). /healthz says
        # when each JetStream node is current with the meta leader.
        wait_until(
            lambda: all(_healthy(n) for n in running),
            JS_READY_TIMEOUT,
            lambda: f"JetStream nodes not current:\n{self.cluster.describe()}",
        )
        self.cluster.wait_interest("$JS.API.>", self.clients, running)


def _healthy(node: Node) -> bool:
    try:
        return node.get("/healthz").get("status") == "ok"
    except (OSError, ValueError):  # 503 while not current (urllib's HTTPError is an OSError)
        return False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test of a cluster reports the cluster's routes and log tails, to tell a lost interest
    from a slow election afterwards."""
    outcome = yield
    report = outcome.get_result()
    js = getattr(item, "funcargs", {}).get("js_cluster")
    if report.failed and isinstance(js, JsCluster):
        report.sections.append(("cluster at failure", js.cluster.describe()))


def _node_extra(layout: tuple[tuple[str, bool], ...], config: str) -> Callable[[int, Path], str]:
    def extra(index: int, workdir: Path) -> str:
        text = config
        if layout[index][1]:
            text += f"jetstream {{ store_dir: '{workdir}/js{index}', domain: {DOMAIN} }}\n"
        return text

    return extra


@contextlib.contextmanager
def js_cluster_of(layout_name: str, config: str) -> Iterator[JsCluster]:
    """A started cluster of the layout, every node with `config` (its accounts), ready for JetStream."""
    need_tool(nats_server_binary() is not None, "nats-server")
    layout = LAYOUTS[layout_name]
    kinds = [kind for kind, _ in layout]
    with (
        tempfile.TemporaryDirectory(prefix="pynatsd-jscluster-") as workdir,
        running_cluster(kinds, Path(workdir), node_extra=_node_extra(layout, config)) as cluster,
    ):
        js = JsCluster(cluster, layout)
        js.wait_ready()
        yield js


@pytest.fixture(scope="module", params=list(LAYOUTS))
def js_cluster(request: pytest.FixtureRequest) -> Iterator[JsCluster]:
    """One cluster per layout and module: 1 pynatsd + 2 JetStream nats-server (R2), 2 pynatsd + 3 (R3),
    and the references with nats-server nodes with JetStream off in pynatsd's place."""
    with js_cluster_of(request.param, ACCOUNTS) as js:
        yield js


@pytest.fixture(scope="session")
def jsclient_go() -> Path:
    """The nats.go JetStream client program (go/jsclient), built once per session, offline."""
    need_tool(go_available(), "Go toolchain with nats.go (golang-go, golang-github-nats-io-go-nats-dev)")
    return build_go(Path(__file__).resolve().parent / "go" / "jsclient", "jsclient-go")
