"""Who may publish RAFT traffic (`$NRG.`): a client of the system account may (a RAFT peer can be one),
a client of any other account may not; `_GR_.` stays refused to all. Both servers alike."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest

from tests.servers import require, server_with_config

CONFIG = (
    "accounts {\n"
    "  A: { users: [{user: a, password: a}] }\n"
    "  SYS: { users: [{user: sys, password: sys}] }\n"
    "}\n"
    "system_account: SYS\n"
)


async def _outcome(port: int, user: str, subject: str) -> tuple[bool, str]:
    """(delivered to the same account's subscriber, the error the publisher was sent)."""
    errors: list[str] = []

    async def on_error(e: Exception) -> None:
        errors.append(str(e).lower())

    url = f"nats://{user}:{user}@127.0.0.1:{port}"
    async with await nats.connect(url, error_cb=on_error, allow_reconnect=False) as nc:
        sub = await nc.subscribe(subject)
        await nc.publish(subject, b"x")
        await nc.flush()
        try:
            await sub.next_msg(timeout=0.5)
            delivered = True
        except nats.errors.TimeoutError:
            delivered = False
    return delivered, "".join(errors)


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_only_the_system_account_publishes_nrg(kind: str, tmp_path: Path) -> None:
    require(kind)
    with server_with_config(kind, tmp_path / "s.conf", CONFIG) as server:
        outcomes = {
            (user, subject): asyncio.run(_outcome(server.port, user, subject))
            for user in ("sys", "a")
            for subject in ("$NRG.AE.g", "_GR_.x.y")
        }
    assert outcomes[("sys", "$NRG.AE.g")] == (True, "")
    for refused in [("a", "$NRG.AE.g"), ("sys", "_GR_.x.y"), ("a", "_GR_.x.y")]:
        delivered, error = outcomes[refused]
        assert not delivered and "permissions violation for publish" in error, refused
