"""Lame duck mode (SIGUSR2, `--signal ldm`), as nats-server does it."""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING

from pynatsd.base.logging import get_logger
from pynatsd.broker.connection import SERVER_SHUTDOWN

if TYPE_CHECKING:
    from pynatsd.lifecycle.daemon import Daemon

log = get_logger()


async def run(server: Daemon) -> None:
    """nats-server's lame duck mode: close the listener, tell protocol-1 clients with an INFO carrying
    `ldm: true`, wait the grace period, then close the clients spread over the rest of
    `lame_duck_duration` (so they do not all reconnect elsewhere at once), then shut down."""
    opts = server.options
    log.info("Entering lame duck mode, stop accepting new clients")
    server.stop_accepting()
    if server.route_manager is not None:
        server.route_manager.lame_duck()  # peers stop advertising this server to their clients
    if not server.clients:
        await server.shutdown()
        return
    grace = abs(opts.lame_duck_grace_period)
    spread = opts.lame_duck_duration - grace
    if spread <= 0:
        spread = 1.0
    clients = list(server.clients.values())
    interval = min(spread / len(clients), 1.0)  # never more than a second between two closes
    for conn in clients:
        if conn.wants_async_info and not conn.closed:
            conn.send_raw(server.info_for(conn, ldm=True))
    await asyncio.sleep(grace)
    log.info("Closing existing clients")
    for i, conn in enumerate(clients):
        if conn.out is not None:
            conn.out.flush()
        conn.close(SERVER_SHUTDOWN)
        if i < len(clients) - 1:
            await asyncio.sleep(random.uniform(interval / 2, interval))
    await server.shutdown()
