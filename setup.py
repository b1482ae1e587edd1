"""Build hook: compiles the message path with mypyc (the same typed source that runs interpreted).

`pip install .` and `make compile` build C extensions for the modules in `COMPILED`; where mypyc or a C
compiler is missing, or `PYNATSD_NO_EXTENSIONS=1` is set, the same modules install as plain Python and
the broker runs interpreted (slower, same behaviour: CI runs the differential, property and fuzz
suites both ways). Why mypyc and not Cython: see README "How a message flows" (measured there).
"""

from __future__ import annotations

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

# The modules every message passes through, compiled together (calls between them are native); routed
# messages too: a route's parser and connection (interpreted, a 2-node cluster moved 0.3x nats-server's
# rate across nodes, the receiving node's route parser the bottleneck; see bench/broker/cluster.py).
# A leaf node connection as well: interpreted, leaf -> hub 1 -> 1 at 16 B ran at 0.24-0.36x nats-server's
# (1 -> 4: 0.48-0.58x), compiled at 0.51-0.60x (0.93-1.00x), same loaded machine (make bench-leaf).
COMPILED = [
    "pynatsd/protocol/parser.py",
    "pynatsd/protocol/encoder.py",
    "pynatsd/protocol/route.py",
    "pynatsd/protocol/subjects.py",
    "pynatsd/matcher/sublist.py",
    "pynatsd/matcher/trie.py",
    "pynatsd/matcher/leaf.py",
    "pynatsd/broker/delivery.py",
    "pynatsd/base/histogram.py",
    "pynatsd/base/s2.py",
    "pynatsd/base/varint.py",
    "pynatsd/broker/internal.py",
    "pynatsd/broker/outbound.py",
    "pynatsd/broker/connection.py",
    "pynatsd/broker/sids.py",
    "pynatsd/routes/route.py",
    "pynatsd/gateways/connection.py",
    "pynatsd/leafnodes/leaf.py",
    "pynatsd/jetstream/store/base.py",
    "pynatsd/jetstream/store/file.py",
    "pynatsd/jetstream/store/memory.py",
    "pynatsd/jetstream/stream.py",
    "pynatsd/jetstream/consumer.py",
    "pynatsd/jetstream/util.py",
    # MQTT's message path (issue 36): interpreted, QoS 0 -> 0 used 2.5 µs of CPU per message, compiled 1.4-1.6
    "pynatsd/mqtt/packets.py",
    "pynatsd/mqtt/delivery.py",
    "pynatsd/mqtt/connection.py",
]


class OptionalBuildExt(build_ext):
    """A failed compile leaves the pure-Python modules in place instead of failing the install."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, no headers: the interpreted path still works
            print(f"pynatsd: C extensions not built ({exc}); running interpreted", file=sys.stderr)

    def build_extension(self, ext):  # type: ignore[no-untyped-def]
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(f"pynatsd: {ext.name} not compiled ({exc})", file=sys.stderr)


def extensions() -> list:  # type: ignore[type-arg]
    if os.environ.get("PYNATSD_NO_EXTENSIONS"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("pynatsd: mypyc not available; the broker will run interpreted", file=sys.stderr)
        return []
    try:
        # The group's shared library goes inside the package (pynatsd/_native__mypyc…so): `pip install .`
        # installs nothing but `pynatsd`.
        return mypycify(COMPILED, opt_level="3", group_name="pynatsd._native")
    except (Exception, SystemExit) as exc:  # mypyc refused the source: interpreted, and say so
        print(f"pynatsd: mypyc failed ({exc}); running interpreted", file=sys.stderr)
        return []


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
