"""A reload that adds accounts to a file that had none: the system account becomes reachable, and its
services answer at once, as nats-server's do."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from tests.servers import require, server_with_config
from tests.system.common import KINDS, ask, client

ACCOUNTS = """
accounts {
  $SYS { users = [{user: sys, password: sys}] }
  A { users = [{user: a, password: a}] }
}
"""


async def _connect_when_admitted(url: str, deadline: float) -> None:
    """The reload is asynchronous (a signal): retry until the new user is admitted."""
    while True:
        nc = NATS()
        try:
            await nc.connect(url, user="sys", password="sys", allow_reconnect=False, max_reconnect_attempts=0)
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
        else:
            await nc.close()
            return


@pytest.mark.parametrize("kind", KINDS)
def test_accounts_added_by_reload_start_the_system_services(kind: str, tmp_path: Path) -> None:
    require(kind)
    conf = tmp_path / f"{kind}.conf"
    with server_with_config(kind, conf, "debug: false\n") as server:
        conf.write_text(ACCOUNTS)
        os.kill(server.proc.pid, signal.SIGHUP)

        async def check() -> dict[str, object]:
            await _connect_when_admitted(server.url, time.monotonic() + 10)
            async with client(server.url, "sys") as nc:
                return await ask(nc, "$SYS.REQ.SERVER.PING.VARZ")

        varz = asyncio.run(check())
    data = varz["data"]
    assert isinstance(data, dict)
    assert data["system_account"] == "$SYS"
    assert data["server_id"]
