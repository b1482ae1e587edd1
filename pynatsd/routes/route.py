"""One route connection to another server of the cluster (see pynatsd.routes for the interface)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from pynatsd.broker.delivery import Client, Subscription

if TYPE_CHECKING:
    from pynatsd.broker.server import Server


class Route(Client):
    """A route: a `delivery.Client` whose subscriptions are the remote server's interest."""

    def __init__(self, server: Server, rid: int, did_solicit: bool, url: str = "") -> None:
        super().__init__()
        self.server = server
        self.rid = rid
        self.did_solicit = did_solicit
        self.is_configured = False  # solicited because it is in `routes` (explicit), not gossiped
        self.url = url
        self.remote_id = ""
        self.remote_name = ""
        self.remote_cluster = ""
        self.host = ""
        self.port = 0
        self.start = datetime.now(UTC)
        self.last_activity = self.start
        self.rtt: float | None = None
        self.in_msgs = 0
        self.in_bytes = 0
        self.pool_idx = 0
        self.compression = "off"
        # (account, subject, queue) -> the remote interest's subscription in that account's sublist
        self.remote_subs: dict[tuple[bytes, bytes, bytes | None], Subscription] = {}

    @property
    def pending_bytes(self) -> int:
        return self.out.pending_bytes if self.out is not None else 0

    @property
    def num_subs(self) -> int:
        return len(self.remote_subs)

    def subjects(self) -> list[str]:
        """The remote interest: `subject`, or `subject queue` for a queue group's."""
        return sorted((s + b" " + q if q else s).decode("utf-8", "replace") for _, s, q in self.remote_subs)

    def idle_for(self) -> timedelta:
        return datetime.now(UTC) - self.last_activity
