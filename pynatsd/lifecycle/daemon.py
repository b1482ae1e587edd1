"""What the daemon's life needs of a running server: the lifecycle modules sit below the node that
uses them (pynatsd.node), so they name it through this view instead of importing it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pynatsd.auth.users import Authenticator
    from pynatsd.base.options import Options
    from pynatsd.broker.connection import Connection
    from pynatsd.routes.manager import RouteManager


class Daemon(Protocol):
    """A running server, as signals, lame duck mode and reload drive it."""

    options: Options
    auth: Authenticator
    clients: dict[int, Connection]
    loop: asyncio.AbstractEventLoop
    ldm: bool
    reloader: Callable[[], Options] | None
    route_manager: RouteManager | None

    def info_for(
        self, conn: Connection, connect_info: bool = False, ldm: bool = False, update: bool = False
    ) -> bytes: ...
    async def shutdown(self) -> None: ...
    def stop_accepting(self) -> None: ...
    def configure_links(self) -> None: ...
    def limits_changed(self) -> None: ...
    def start_system(self) -> None: ...
    def reload(self) -> None: ...
    def reopen_log_file(self) -> None: ...
    def enter_lame_duck_mode(self) -> None: ...
