"""The pid and ports files, as nats-server writes them (`-P`, `--ports_file_dir`), and the URLs a bound
socket answers on."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

from pynatsd.base.logging import get_logger

log = get_logger()


class LifecycleFiles:
    """The files this process wrote, removed on a clean exit."""

    def __init__(self) -> None:
        self.pid_file = ""
        self.ports_file = ""

    def write_pid_file(self, path: str) -> None:
        """The pid, without a trailing newline, as nats-server writes it; PidFileError if it cannot."""
        try:
            write_atomically(Path(path), str(os.getpid()))
        except OSError as exc:
            raise PidFileError(f"Could not write pidfile: {exc}") from exc
        self.pid_file = path

    def write_ports_file(self, directory: str, ports: dict[str, list[str]]) -> None:
        """`<dir>/<exe>_<pid>.ports`: the URLs clients and monitoring answer on, in nats-server's JSON."""
        path = Path(directory) / f"{executable_name()}_{os.getpid()}.ports"
        try:
            write_atomically(path, json.dumps(ports, separators=(",", ":")))
        except OSError as exc:
            log.error("Error writing ports file (%s): %s", path, exc)
            return
        self.ports_file = str(path)

    def remove(self) -> None:
        # nats-server leaves its pid file behind; pynatsd removes it on a clean exit, so a stale file can
        # never point `--signal` at an unrelated process that reused the pid.
        for path, what in ((self.ports_file, "ports"), (self.pid_file, "pid")):
            if path:
                try:
                    os.remove(path)
                except OSError as exc:
                    log.error("Error cleaning up %s file %s: %s", what, path, exc)
        self.ports_file = self.pid_file = ""


class PidFileError(OSError):
    """The `-P` pid file could not be written (the server does not start)."""


def write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file and a rename, so a reader never sees the file empty or half written; in
    place (as nats-server does) when the directory does not let us create the temporary file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        path.write_text(text)


def executable_name() -> str:
    """The base name nats-server puts in the ports file name; `pynatsd` when run as `python -m pynatsd`."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name and not name.endswith(".py") else "pynatsd"
