"""Which message path runs: the mypyc-compiled modules (see setup.py) or the same source interpreted.

`PYNATSD_NO_EXTENSIONS=1` makes every `pynatsd` module load from its `.py` file even where a compiled
module sits beside it (Python would otherwise prefer the extension), so one checkout runs both ways.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

#: The module that tells whether the message path is compiled (every compiled module is built together).
PROBE = "pynatsd.broker.delivery"


def disabled() -> bool:
    return os.environ.get("PYNATSD_NO_EXTENSIONS", "") not in ("", "0")


class _SourceFirst:
    """Finds `pynatsd.*` modules as source files, ahead of the default finder's extension modules.

    A meta path finder by its `find_spec` alone: subclassing `importlib.abc.MetaPathFinder` would import
    `importlib.resources` and with it tempfile, shutil, zipfile, bz2, lzma (1.5 MiB of the idle server's
    RSS, measured) into every process, since `pynatsd/__init__` imports this module."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("pynatsd.") or path is None:
            return None
        leaf = fullname.rpartition(".")[2]
        for entry in path:
            source = Path(entry) / f"{leaf}.py"
            if source.is_file():
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def prefer_source() -> None:
    """Install the source-first finder (idempotent)."""
    if not any(isinstance(finder, _SourceFirst) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirst())


def compiled() -> bool:
    """True when the message path runs compiled."""
    module = importlib.import_module(PROBE)
    return not str(getattr(module, "__file__", "")).endswith(".py")


def interpreted_reason() -> str:
    """Why the message path runs interpreted though nobody asked for it ('' when compiled or disabled on
    purpose), with how to get the compiled path (README "Installing")."""
    if disabled() or compiled():
        return ""
    import shutil
    import sysconfig

    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return (
            f"no compiled modules, and no C compiler ({compiler}) here to build them: install one (e.g. "
            "gcc and python3-dev), then reinstall pynatsd or run `make compile` in a checkout"
        )
    return (
        "no compiled modules (built without mypy, or the build failed): reinstall pynatsd where "
        "`pip install` can fetch mypy, or run `make compile` in a checkout"
    )


def describe() -> str:
    """For the start banner: `compiled (mypyc)` or `interpreted`, with why."""
    if compiled():
        return "compiled (mypyc)"
    return "interpreted (PYNATSD_NO_EXTENSIONS)" if disabled() else "interpreted (no compiled modules built)"
