"""The packages' one-way order (docs/architecture.md, README "The code"): a module imports only from its
own layer or the layers before it, never from one after it; no circle of imports crosses packages; and an
import inside a function (which hides a dependency from the module's head) is one of the listed few that
keep the idle process small.

Read from the source with `ast`, type-only imports (`if TYPE_CHECKING:`) included: a type named from a
higher layer is a dependency on it all the same. `python -m tests.unit.test_layers` prints the package
graph (what the closing notes of issue 31 show before and after)."""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pynatsd"

# Lowest first. A module's layer is that of its longest listed prefix.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("pure", ("pynatsd", "pynatsd.protocol", "pynatsd.matcher", "pynatsd.extensions")),
    ("base", ("pynatsd.base",)),
    ("auth", ("pynatsd.auth",)),
    ("config", ("pynatsd.config",)),
    ("broker", ("pynatsd.broker",)),
    ("accounts", ("pynatsd.accounts",)),
    (
        "features",
        (
            "pynatsd.gateways",
            "pynatsd.jetstream",
            "pynatsd.leafnodes",
            "pynatsd.mqtt",
            "pynatsd.raft",
            "pynatsd.routes",
            "pynatsd.websocket",
        ),
    ),
    ("lifecycle", ("pynatsd.lifecycle",)),  # signals, lame duck, reload: they see a server as a Daemon
    ("node", ("pynatsd.node",)),
    ("monitor", ("pynatsd.monitor",)),
    ("server", ("pynatsd.server",)),
    ("testing", ("pynatsd.testing",)),  # an in-process server for tests, and the pytest plugin
    ("cli", ("pynatsd.cli", "pynatsd.__main__")),
]
# The Spark connector talks to the broker over the wire only, as any client: of pynatsd it may use only
# the pure layer.
APART: dict[str, str] = {"pynatsd.spark": "pure"}

# The package's own module is the pure root (the versions, the extensions switch) and the public face: it
# names the embedding API (pynatsd.__all__), typed by `if TYPE_CHECKING:` imports and loaded on first use
# (a module __getattr__), so `import pynatsd` loads no higher layer. These edges, and only these, go up.
PUBLIC_FACE: set[tuple[str, str]] = {("pynatsd", "pynatsd.server"), ("pynatsd", "pynatsd.base.options")}

# Imports made inside a function, each with why: loaded only when the configuration uses them, so a
# plain server's RSS stays small (tests/integration/test_idle_imports.py measures it).
_CLI = "the command line: --help, --version, -t and --signal run without loading the server"
_OPERATOR = "operator mode only: JWT verification (and PyNaCl with it)"
_CONFIGURED = "loaded only when the configuration asks for it"
_PUBLIC = "the public API, loaded when first named (import pynatsd stays cheap)"
LAZY_IMPORTS: dict[tuple[str, str], str] = {
    ("pynatsd.cli", "pynatsd.auth.users"): _CLI,
    ("pynatsd.cli", "pynatsd.base.listener"): _CLI,
    ("pynatsd.cli", "pynatsd.base.logging"): _CLI,
    ("pynatsd.cli", "pynatsd.config.cluster"): _CLI,
    ("pynatsd.cli", "pynatsd.config.jetstream"): _CLI,
    ("pynatsd.cli", "pynatsd.config.load"): _CLI,
    ("pynatsd.cli", "pynatsd.routes.manager"): _CLI,
    ("pynatsd.cli", "pynatsd.server"): _CLI,
    ("pynatsd.base.options", "pynatsd.base.formats"): "a reload's log lines only",
    ("pynatsd", "pynatsd.server"): _PUBLIC,
    ("pynatsd", "pynatsd.base.options"): _PUBLIC,
    ("pynatsd.testing.plugin", "pynatsd.testing"): "a pytest run loads the broker when a test asks for it",
    ("pynatsd.config.load", "pynatsd.config.parser"): _CONFIGURED + " (a configuration file)",
    ("pynatsd.config.load", "pynatsd.config.schema"): _CONFIGURED + " (a configuration file)",
    ("pynatsd.accounts.links", "pynatsd.auth.jwt"): _OPERATOR,
    ("pynatsd.auth.users", "pynatsd.auth.jwt"): _OPERATOR,
    ("pynatsd.auth.users", "pynatsd.auth.python"): _CONFIGURED + " (a Python authorizer)",
    ("pynatsd.config.schema", "pynatsd.auth.python"): _CONFIGURED + " (a Python authorizer)",
    ("pynatsd.config.schema", "pynatsd.auth.jwt"): _OPERATOR,
    ("pynatsd.config.schema", "pynatsd.auth.specs"): _CONFIGURED + " (an accounts block)",
    ("pynatsd.node", "pynatsd.accounts.links"): _CONFIGURED + " (imports between accounts)",
    ("pynatsd.node", "pynatsd.auth.specs"): _CONFIGURED + " (imports between accounts)",
    ("pynatsd.node", "pynatsd.accounts.resolver"): _CONFIGURED + " (a directory account resolver)",
    ("pynatsd.node", "pynatsd.broker.callout"): _CONFIGURED + " (an auth_callout block)",
    ("pynatsd.node", "pynatsd.jetstream"): _CONFIGURED + " (-js or a jetstream block)",
    ("pynatsd.node", "pynatsd.routes.jetstream"): _CONFIGURED + " (a cluster with a system account)",
    ("pynatsd.node", "pynatsd.raft.member"): _CONFIGURED + " (JetStream on a clustered server)",
    ("pynatsd.routes.jetstream", "pynatsd.jetstream.api"): _CONFIGURED
    + " (a meta group member's answer while the group has no leader)",
    ("pynatsd.node", "pynatsd.routes.manager"): _CONFIGURED + " (a cluster block)",
    ("pynatsd.node", "pynatsd.gateways.manager"): _CONFIGURED + " (a gateway block)",
    ("pynatsd.node", "pynatsd.leafnodes.manager"): _CONFIGURED + " (a leafnodes block)",
    ("pynatsd.leafnodes.manager", "pynatsd.websocket.client"): _CONFIGURED + " (a ws:// leafnode remote)",
    ("pynatsd.server", "pynatsd.monitor"): _CONFIGURED + " (a monitoring port: aiohttp, prometheus-client)",
    ("pynatsd.server", "pynatsd.monitor.system"): _CONFIGURED + " (a system account clients can reach)",
    ("pynatsd.websocket", "pynatsd.websocket.server"): _CONFIGURED + " (a websocket block)",
    ("pynatsd.mqtt", "pynatsd.mqtt.listener"): _CONFIGURED + " (an mqtt block)",
    ("pynatsd.jetstream", "pynatsd.jetstream.account"): "monitoring reads pynatsd.jetstream without -js",
    ("pynatsd.jetstream", "pynatsd.jetstream.monitor"): "monitoring reads pynatsd.jetstream without -js",
    ("pynatsd.jetstream", "pynatsd.jetstream.stream"): "monitoring reads pynatsd.jetstream without -js",
    ("pynatsd.jetstream.account", "pynatsd.jetstream.api"): "the API with the first JetStream account",
    ("pynatsd.monitor.metrics", "pynatsd.monitor.endpoints"): "/metrics reads the endpoints when scraped",
    ("pynatsd.spark.example.job", "pynatsd.spark.spark"): "pyspark in the driver only, not in each task",
}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    lazy: bool  # made inside a function body (not at module level, nor under `if TYPE_CHECKING:`)
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(source: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = source.split(".") if is_package else source.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _function_bodies(tree: ast.Module) -> set[int]:
    """The ids of import nodes that sit inside a function."""
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            inside.update(id(n) for n in ast.walk(fn) if isinstance(n, ast.Import | ast.ImportFrom))
    return inside


@functools.cache
def edges() -> list[Edge]:
    """Every import of a pynatsd module by a pynatsd module; `from pkg import module` names the module.
    Parsed in an interpreter of its own: in the suite's long process, CPython 3.11.7's ast module can be
    left in a state where every later parse fails (`SystemError: AST constructor recursion depth
    mismatch`, seen once in CI here after 2,800 other tests)."""
    out = subprocess.run(
        [sys.executable, __file__, "--edges"], capture_output=True, text=True, check=True, timeout=120
    )
    return [Edge(*fields) for fields in json.loads(out.stdout)]


def parse_edges() -> list[Edge]:
    """`edges`, in this process."""
    modules = {module_name(p) for p in PACKAGE.rglob("*.py")}
    found: list[Edge] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = module_name(path)
        tree = ast.parse(path.read_text(), str(path))
        lazy_nodes = _function_bodies(tree)
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(source, path.name == "__init__.py", node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in dict.fromkeys(targets):
                if target.split(".")[0] == "pynatsd" and target != source:
                    found.append(Edge(source, target, id(node) in lazy_nodes, node.lineno))
    return found


def layer_of(module: str) -> str:
    best, best_len = "", -1
    for name, prefixes in LAYERS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = name, len(prefix)
    for prefix, name in APART.items():
        if module == prefix or module.startswith(prefix + "."):
            return f"apart:{name}"
    assert best, f"{module} is in no layer: add it to LAYERS"
    return best


def rank(layer: str) -> int:
    return [name for name, _ in LAYERS].index(layer.removeprefix("apart:"))


def package_of(module: str) -> str:
    """The package a module counts in for circles: pynatsd.<first part> (top-level modules by themselves)."""
    parts = module.split(".")
    return ".".join(parts[:2])


def package_graph(found: list[Edge]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for edge in found:
        a, b = package_of(edge.source), package_of(edge.target)
        if a != b and b != "pynatsd":
            graph[a].add(b)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_import_runs_down_the_layers() -> None:
    upward = []
    found = edges()
    for edge in found:
        if (edge.source, edge.target) in PUBLIC_FACE:
            continue
        source, target = layer_of(edge.source), layer_of(edge.target)
        if source.startswith("apart:"):
            ok = target == source or rank(target) <= rank(source)
        else:
            ok = not target.startswith("apart:") and rank(target) <= rank(source)
        if not ok:
            upward.append(f"{edge.source}:{edge.line} ({source}) imports {edge.target} ({target})")
    assert upward == []
    assert PUBLIC_FACE - {(edge.source, edge.target) for edge in found} == set()  # none listed is gone


def test_no_circle_of_imports_crosses_packages() -> None:
    assert circles(package_graph(edges())) == []


def test_imports_inside_functions_are_the_listed_ones() -> None:
    lazy = {(edge.source, edge.target) for edge in edges() if edge.lazy}
    assert sorted(lazy - LAZY_IMPORTS.keys()) == []
    assert sorted(LAZY_IMPORTS.keys() - lazy) == []  # a listed one that no longer exists is struck off


def test_the_checks_see_a_violation() -> None:
    """The checks themselves: an upward edge and a two-package circle are found."""
    assert rank(layer_of("pynatsd.broker.connection")) < rank(layer_of("pynatsd.server"))
    graph = {"pynatsd.a": {"pynatsd.b"}, "pynatsd.b": {"pynatsd.a"}, "pynatsd.c": {"pynatsd.a"}}
    assert circles(graph) == [["pynatsd.a", "pynatsd.b"]]
    assert layer_of("pynatsd.spark.reader") == "apart:pure"


def main() -> None:
    if sys.argv[1:] == ["--edges"]:
        print(json.dumps([dataclasses.astuple(edge) for edge in parse_edges()]))
        sys.exit(0)
    graph = package_graph(parse_edges())
    for package in sorted(graph):
        print(f"{package} ({layer_of(package)}) -> {', '.join(sorted(graph[package]))}")
    for circle in circles(graph):
        print("circle:", " <-> ".join(circle))
    sys.exit(0)


if __name__ == "__main__":
    main()
