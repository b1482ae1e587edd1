"""Shared by the system account tests: a config-mode setup with a system account, and comparing the
shape (keys, recursively) of pynatsd's JSON with nats-server's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS

from tests.servers import ServerProcess, free_port, require, server_with_config

KINDS = ["pynatsd", "nats-server"]

# Accounts SYS (the system account) and A, a user in each; `extra` is added to the file.
CONFIG = """
accounts {{
  SYS {{ users = [{{user: sys, password: sys}}] }}
  A {{ users = [{{user: a, password: a}}] }}
}}
system_account: SYS
http_port: {http_port}
{extra}
"""


@contextmanager
def system_server(kind: str, tmp_path: Path, extra: str = "") -> Iterator[ServerProcess]:
    """`kind` with the SYS/A configuration; its monitoring port in `http_port`."""
    require(kind)
    http_port = free_port()
    conf = CONFIG.format(http_port=http_port, extra=extra)
    with server_with_config(kind, tmp_path / f"{kind}.conf", conf) as server:
        server.http_port = http_port
        yield server


@asynccontextmanager
async def client(url: str, user: str, **options: Any) -> Any:
    nc = NATS()
    await nc.connect(url, user=user, password=user, allow_reconnect=False, **options)
    try:
        yield nc
    finally:
        await nc.close()


async def ask(nc: NATS, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    payload = json.dumps(body).encode() if body is not None else b""
    reply = await nc.request(subject, payload, timeout=5)
    data: dict[str, Any] = json.loads(reply.data)
    return data


def paths(value: Any, prefix: str = "") -> set[str]:
    """Every key path in `value` ("a.b", lists as "a[]" from their first element)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            path = f"{prefix}.{key}" if prefix else key
            found.add(path)
            found |= paths(inner, path)
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        found |= paths(value[0], f"{prefix}[]")
    return found


def assert_same_shape(ours: Any, theirs: Any, *, only_theirs: set[str] = frozenset(),
                      only_ours: set[str] = frozenset()) -> None:  # fmt: skip
    """The same key paths in pynatsd's JSON as in nats-server's, but for the differences named (and
    whatever lies under them)."""

    def outside(found: set[str], allowed: set[str]) -> set[str]:
        return {p for p in found if not any(p == a or p.startswith(a + ".") or p.startswith(a + "[]")
                                            for a in allowed)}  # fmt: skip

    ours_paths, theirs_paths = paths(ours), paths(theirs)
    missing = outside(theirs_paths - ours_paths, set(only_theirs))
    extra = outside(ours_paths - theirs_paths, set(only_ours))
    assert not missing and not extra, f"pynatsd lacks {sorted(missing)}, has extra {sorted(extra)}"


# nats-server's server block carries its JetStream feature flags; pynatsd has none (omitempty).
SERVER_ONLY_THEIRS = {"server.feature_flags"}
