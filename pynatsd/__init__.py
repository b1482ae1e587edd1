"""pynatsd: a standalone NATS-protocol pub/sub broker.

The public API is what `__all__` lists (docs/install.md): `Server` (build, `await start()`, `client_url`,
`await stop()`), `Options` (its settings), the versions; and the package `pynatsd.testing` (an in-process
server for tests, and its pytest plugin). `Server` and `Options` load on first use: `import pynatsd`
loads the same modules as before they were named here (pathlib, re, no asyncio, no typing).

Packages, lowest layer first (README "The code"; tests/unit/test_layers.py keeps imports running down):
`protocol` and `matcher` (pure), `base` (options, values, logging, listeners, TLS), `auth`, `config`,
`broker` (the core: Broker, connections, delivery, outbound), `accounts`, the features `jetstream`,
`routes`, `gateways`, `leafnodes` and `websocket`, `lifecycle`, `node` (the broker with its listeners and
features), `monitor`, `server` (the composition root), `testing` (pynatsd inside tests), `cli`; and `spark`
(the PySpark connector, an extra, over the wire only).
"""

from pynatsd import extensions

if extensions.disabled():
    extensions.prefer_source()

# typing.TYPE_CHECKING without importing typing (3-4 ms, a third of what `import pynatsd` costs); mypy
# takes any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pynatsd.base.options import Options
    from pynatsd.server import Server

__all__ = ["NATS_COMPAT_VERSION", "VARZ_VERSION", "Options", "Server", "__version__"]

__version__ = "0.1.0"
#: The nats-server release whose behaviour pynatsd implements (its tests compare against that binary):
#: INFO's `version`, which clients parse as a plain semver to gate features (headers since 2.2…); the
#: JetStream features served are named by the API level (pynatsd.jetstream.stream.API_LEVEL), which newer
#: clients check instead.
NATS_COMPAT_VERSION = "2.15.1"
#: /varz `version`: the level, with pynatsd's own release as semver build metadata (ignored when versions
#: are compared, so tools gate as for that nats-server; read by people as pynatsd's).
VARZ_VERSION = f"{NATS_COMPAT_VERSION}+pynatsd.{__version__}"


def __getattr__(name: str) -> object:
    """The public classes, imported when first named (PEP 562): the broker's modules (and asyncio) stay
    out of a process that only imports pynatsd, or a module of it such as pynatsd.cli for --help."""
    if name == "Server":
        from pynatsd.server import Server

        return Server
    if name == "Options":
        from pynatsd.base.options import Options

        return Options
    raise AttributeError(f"module 'pynatsd' has no attribute {name!r}")
