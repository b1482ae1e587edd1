"""JetStream: streams, consumers and their stores, served on `$JS.API.>` through internal clients.

`JetStream(server, config)` is created by the server when `-js` (or a `jetstream` block) is given; it
keeps one `JsAccount` per account ($G and each configured account), each with its own internal client,
API subscription, streams and consumers. Nothing here touches sockets: requests, captured messages,
deliveries and acks all travel through the broker's one delivery policy.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from pynatsd.broker.auth import DEFAULT_ACCOUNT
from pynatsd.broker.logging import get_logger
from pynatsd.jetstream import errors
from pynatsd.jetstream.config import JsConfig, from_options

if TYPE_CHECKING:
    from pynatsd.broker.server import Server
    from pynatsd.jetstream.account import JsAccount

log = get_logger()

__all__ = ["JetStream", "JsConfig", "from_options"]


class JetStream:
    """The server's JetStream: settings, accounts, and totals for monitoring."""

    def __init__(self, server: Server, config: JsConfig) -> None:
        self.server = server
        self.config = config
        self.domain = config.domain
        self.sync_interval = config.sync_interval
        self.sync_always = config.sync_always
        self.accounts: dict[str, JsAccount] = {}
        self.disabled_accounts: list[JsAccount] = []  # API responders only (see start)
        self.loop: asyncio.AbstractEventLoop = server.loop
        self.max_payload = server.options.max_payload
        self.limited = config.max_memory_store >= 0 or config.max_file_store >= 0
        self.stored_msgs = 0
        self.stored_bytes = 0
        self._sync_timer: asyncio.TimerHandle | None = None

    @property
    def store_root(self) -> Any:
        return self.config.store_dir / "jetstream"

    def start(self) -> None:
        from pynatsd.jetstream.account import JsAccount

        self.loop = self.server.loop
        self.store_root.mkdir(parents=True, exist_ok=True)
        # As nats-server: with accounts configured, JetStream is for those that enable it (not $G); the
        # others hear "JetStream not enabled for account" on their API.
        configured: dict[str, Any] = self.server.options.extra.get("accounts") or {}
        without = {name for name, acc in configured.items() if not acc.get("jetstream")}
        if configured:
            without.add(DEFAULT_ACCOUNT)
        names = {DEFAULT_ACCOUNT}
        names.update(configured.keys())
        names.update(p.name for p in self.store_root.iterdir() if p.is_dir())
        for name in sorted(names - without):
            self.accounts[name] = JsAccount(self, name)
        self.disabled_accounts = [JsAccount(self, name, enabled=False) for name in sorted(without)]
        for acc in [*self.accounts.values(), *self.disabled_accounts]:
            acc.start()
        log.info("Starting JetStream")
        log.info("  Store Directory: %r", str(self.config.store_dir))
        log.info("  Max Memory:      %s", _limit(self.config.max_memory_store))
        log.info("  Max Storage:     %s", _limit(self.config.max_file_store))
        if self.domain:
            log.info("  Domain:          %s", self.domain)
        if not self.sync_always:
            self._sync_timer = self.loop.call_later(self.sync_interval, self._sync)

    def _sync(self) -> None:
        for acc in self.accounts.values():
            acc.flush()
        self._sync_timer = self.loop.call_later(self.sync_interval, self._sync)

    def stop(self) -> None:
        if self._sync_timer is not None:
            self._sync_timer.cancel()
        for acc in [*self.accounts.values(), *self.disabled_accounts]:
            acc.stop()
        log.info("JetStream stopped")

    def check_capacity(self, storage: str, size: int) -> None:
        """Refuse a message that would take the server past max_memory_store / max_file_store (10023)."""
        limit = self.config.max_memory_store if storage == "memory" else self.config.max_file_store
        if limit >= 0 and self.usage()[storage if storage == "memory" else "storage"] + size > limit:
            raise errors.insufficient_resources()

    def usage(self) -> dict[str, int]:
        """Totals over every account (for /jsz, /varz and /metrics)."""
        out = {
            "streams": 0,
            "consumers": 0,
            "messages": 0,
            "bytes": 0,
            "memory": 0,
            "storage": 0,
            "api_total": 0,
            "api_errors": 0,
        }
        for acc in self.accounts.values():
            for key, value in acc.usage().items():
                out[key] += value
        return out


def _limit(n: int) -> str:
    return "unlimited" if n < 0 else f"{n} bytes"
