"""Clusters of real servers for tests and benchmarks: any mix of pynatsd and nats-server nodes.

Each node gets its own config file (server name, cluster name and listen port, a route to the seed node),
its client port and monitoring port on the command line as `tests/servers.py` starts every server. Node 0
is the seed; the others route to it and learn of each other through the route protocol's gossip, so a
formed mesh also proves gossip works. `Cluster.wait_mesh()` polls every node's /routez until each one has
a route to every other node (nats-server opens several route connections per peer when pooling, so the
check is on the set of remote server ids, not on the number of routes).
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.servers import ServerProcess, free_port, start_server

KINDS = ("pynatsd", "nats-server")
MESH_TIMEOUT = 30.0  # nats-server alone forms a 3-node mesh in about a second here
INTEREST_TIMEOUT = 15.0

# The three-node matrix: every mix of the two implementations that includes pynatsd, plus the reference.
MATRIX: dict[str, tuple[str, ...]] = {
    "3py": ("pynatsd", "pynatsd", "pynatsd"),
    "2py+1go": ("pynatsd", "pynatsd", "nats-server"),
    "1py+2go": ("pynatsd", "nats-server", "nats-server"),
    "3go": ("nats-server", "nats-server", "nats-server"),
}


def http_json(url: str, timeout: float = 5.0) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        body: dict[str, Any] = json.load(resp)
    return body


def node_config(name: str, cluster: str, cluster_port: int, seed: int | None, cluster_extra: str = "") -> str:
    """One node's config: its names, the cluster listener, the seed route (none for the seed itself), and
    `cluster_extra` lines inside the cluster block (a `tls {}` block, say)."""
    routes = f"  routes: [nats-route://127.0.0.1:{seed}]\n" if seed is not None else ""
    return (
        f"server_name: {name}\n"
        "cluster {\n"
        f"  name: {cluster}\n"
        f"  listen: 127.0.0.1:{cluster_port}\n"
        f"{routes}"
        f"{cluster_extra}"
        "}\n"
    )


@dataclass
class Node:
    """One cluster member: its kind, fixed ports (kept across restarts) and the running process."""

    index: int
    kind: str
    name: str
    port: int
    cluster_port: int
    http_port: int
    config: Path
    process: ServerProcess | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def monitor_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.proc.poll() is None

    def get(self, path: str) -> dict[str, Any]:
        """A monitoring endpoint's JSON (`path` like "/routez?subs=1")."""
        return http_json(self.monitor_url + path)

    def server_id(self) -> str:
        return str(self.get("/varz")["server_id"])

    def routes(self, subs: bool = False) -> list[dict[str, Any]]:
        routes: list[dict[str, Any]] = self.get("/routez?subs=1" if subs else "/routez")["routes"]
        return routes

    def remote_ids(self) -> set[str]:
        return {r["remote_id"] for r in self.routes()}

    def interest_from(self, subject: str, queue: str = "") -> set[str]:
        """Server ids of the peers that told this node of a subscription on `subject` (in `queue`)."""
        return {
            r["remote_id"]
            for r in self.get("/routez?subs=detail")["routes"]
            for d in r.get("subscriptions_list_detail") or ()
            if d["subject"] == subject and d.get("qgroup", "") == queue
        }

    def log(self) -> str:
        return self.process.log() if self.process is not None else ""

    def __repr__(self) -> str:
        return f"<{self.name} {self.kind} :{self.port}>"


@dataclass
class Cluster:
    """Nodes of one cluster, started from their own config files in `workdir`."""

    nodes: list[Node]
    name: str
    workdir: Path
    ids: dict[int, str] = field(default_factory=dict)

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    @property
    def monitor_urls(self) -> list[str]:
        return [n.monitor_url for n in self.nodes]

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(n.kind for n in self.nodes)

    def __getitem__(self, index: int) -> Node:
        return self.nodes[index]

    def start(self, node: Node) -> None:
        self.ids.pop(node.index, None)  # a restarted node has a new server id
        node.process = start_server(
            node.kind,
            ["-c", str(node.config)],
            port=node.port,
            http_port=node.http_port,
            log_dir=self.workdir,
        )

    def stop(self, node: Node, sig: int = signal.SIGTERM) -> None:
        if node.process is not None:
            node.process.stop(sig)

    def kill(self, node: Node) -> None:
        self.stop(node, signal.SIGKILL)

    def restart(self, node: Node) -> None:
        self.stop(node)
        self.start(node)

    def stop_all(self) -> None:
        for node in self.nodes:
            self.stop(node)

    def wait_mesh(self, timeout: float = MESH_TIMEOUT) -> None:
        """Until every running node has a route to every other running node."""
        running = [n for n in self.nodes if n.running]

        def formed() -> bool:
            self.ids.update({n.index: n.server_id() for n in running})
            return all(n.remote_ids() >= {self.ids[o.index] for o in running if o is not n} for n in running)

        wait_until(formed, timeout, lambda: f"cluster {self.kinds} not meshed:\n{self.describe()}")

    def wait_interest(
        self,
        subject: str,
        at: Sequence[Node],
        sources: Sequence[Node],
        queue: str = "",
        timeout: float = INTEREST_TIMEOUT,
    ) -> None:
        """Until each node in `at` knows (from /routez?subs=detail) that every node in `sources` has a
        subscription on `subject` (in `queue`): a message published there now reaches them."""

        def known() -> bool:
            for node in at:
                wanted = {self.ids.get(s.index) or s.server_id() for s in sources if s is not node}
                if not node.interest_from(subject, queue) >= wanted:
                    return False
            return True

        wait_until(known, timeout, lambda: f"{subject!r} not propagated to {at}:\n{self.describe()}")

    def wait_no_interest(self, subject: str, at: Sequence[Node], timeout: float = INTEREST_TIMEOUT) -> None:
        """Until no node in `at` lists remote interest in `subject` (an unsubscribe has propagated)."""
        wait_until(
            lambda: not any(n.interest_from(subject) for n in at),
            timeout,
            lambda: f"{subject!r} still known on {at}:\n{self.describe()}",
        )

    def describe(self) -> str:
        """Each node's routes and log tail, for failure messages."""
        lines = []
        for n in self.nodes:
            try:
                routes = [(r.get("remote_name"), r.get("remote_id")) for r in n.routes()]
            except (OSError, ValueError, KeyError) as e:
                routes = [("error", repr(e))]
            lines.append(f"{n!r} running={n.running} routes={routes}\n  log: {n.log()[-1500:]!r}")
        return "\n".join(lines)


def wait_until(check: Callable[[], bool], timeout: float, message: Callable[[], str]) -> None:
    """Poll `check` (HTTP errors count as not yet) until true or fail with `message()`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError):
            if check():
                return
        time.sleep(0.1)
    raise AssertionError(message())


def build_cluster(
    kinds: Sequence[str],
    workdir: Path,
    cluster_extra: str = "",
    name: str = "pyc",
    node_extra: Callable[[int, Path], str] | None = None,
) -> Cluster:
    """Nodes of the given kinds with ports allocated and config files written (none started);
    `node_extra(index, workdir)`: more top-level config lines for one node (a `jetstream {}` block, say)."""
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(kind)
    workdir.mkdir(parents=True, exist_ok=True)
    cluster_ports = [free_port() for _ in kinds]
    nodes = []
    for i, kind in enumerate(kinds):
        node_name = f"n{i}-{'py' if kind == 'pynatsd' else 'go'}"
        config = workdir / f"{node_name}.conf"
        seed = cluster_ports[0] if i else None
        extra = node_extra(i, workdir) if node_extra is not None else ""
        config.write_text(node_config(node_name, name, cluster_ports[i], seed, cluster_extra) + extra)
        nodes.append(Node(i, kind, node_name, free_port(), cluster_ports[i], free_port(), config))
    return Cluster(nodes, name, workdir)


PORT_ATTEMPTS = 3


def start_cluster(
    kinds: Sequence[str],
    workdir: Path,
    cluster_extra: str = "",
    node_extra: Callable[[int, Path], str] | None = None,
) -> Cluster:
    """Build and start a cluster and wait for its mesh. Ports are picked free but only bound later, so
    another process on a busy machine may take one first: a node that cannot bind its port is retried
    with fresh ports (and only that failure is)."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        cluster = build_cluster(kinds, workdir / f"try{attempt}", cluster_extra, node_extra=node_extra)
        try:
            # The seed first, then the others at once: they route to it, and each pynatsd takes 1-2 s to
            # start on a loaded machine (a three-pynatsd cluster took 4-5 s to start one after another).
            seed, *others = cluster.nodes
            cluster.start(seed)
            with ThreadPoolExecutor(max(len(others), 1)) as pool:
                for started in [pool.submit(cluster.start, node) for node in others]:
                    started.result()
            cluster.wait_mesh()
            return cluster
        except RuntimeError as e:
            cluster.stop_all()
            if "address already in use" not in str(e).lower() or attempt == PORT_ATTEMPTS:
                raise
        except BaseException:
            cluster.stop_all()
            raise
    raise AssertionError("unreachable")


@contextlib.contextmanager
def running_cluster(
    kinds: Sequence[str],
    workdir: Path,
    cluster_extra: str = "",
    node_extra: Callable[[int, Path], str] | None = None,
) -> Iterator[Cluster]:
    """A started, fully meshed cluster; every node stopped on exit."""
    cluster = start_cluster(kinds, workdir, cluster_extra, node_extra)
    try:
        yield cluster
    finally:
        cluster.stop_all()
