"""JetStream: streams, consumers and their stores, served on `$JS.API.>` through internal clients.

`JetStream(server, config)` is created by the server when `-js` (or a `jetstream` block) is given; it
keeps one `JsAccount` per account ($G and each configured account), each with its own internal client,
API subscription, streams and consumers. Nothing here touches sockets: requests, captured messages,
deliveries and acks all travel through the broker's one delivery policy.
"""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING, Any

from pynatsd.auth.users import DEFAULT_ACCOUNT
from pynatsd.base.logging import get_logger
from pynatsd.config.jetstream import JsConfig, JsConfigError, account_js_limits, from_options
from pynatsd.jetstream import errors

if TYPE_CHECKING:
    from pynatsd.broker.core import Broker
    from pynatsd.jetstream.account import JsAccount

log = get_logger()

__all__ = ["JetStream", "JsConfig", "from_options"]


class JetStream:
    """The server's JetStream: settings, accounts, and totals for monitoring."""

    def __init__(self, server: Broker, config: JsConfig) -> None:
        self.server = server
        self.config = config
        self.domain = config.domain
        self.sync_interval = config.sync_interval
        self.sync_always = config.sync_always
        self.accounts: dict[str, JsAccount] = {}  # those with JetStream
        self.disabled: dict[str, JsAccount] = {}  # those without: their API answers 10039
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
        self.loop = self.server.loop
        configured = self.server.options.accounts
        system = self.server.auth.system_account
        if system and system in configured and configured[system].jetstream is not None:
            raise JsConfigError("Not allowed to enable JetStream on the system account")
        self.store_root.mkdir(parents=True, exist_ok=True)
        if self.server.auth.jwt is not None:  # as each account JWT says, when the account appears
            for name in list(self.server.account_sublists):  # those made before JetStream started
                self.account_created(name)
        elif configured:  # only the accounts given JetStream have it (not even $G), as in nats-server
            for name, spec in sorted(configured.items()):
                self.account_created(name, spec.jetstream)
            self.account_created(DEFAULT_ACCOUNT, None)
        else:
            self.account_created(DEFAULT_ACCOUNT, account_js_limits())
        if system:
            self.account_created(system, None)
        self._log_banner()
        if not self.sync_always:
            self._sync_timer = self.loop.call_later(self.sync_interval, self._sync)

    def account_created(self, name: str, limits: dict[str, Any] | None = None) -> None:
        """JetStream for an account: with `limits`, or in operator mode as its account JWT grants it (an
        account appears when a user of it connects); without (and always for the system account), its API
        answers 10039."""
        from pynatsd.jetstream.account import JsAccount

        if name in self.accounts or name in self.disabled:
            return
        jwt = self.server.auth.jwt
        tier = ""
        if name == self.server.auth.system_account:
            limits = None
        elif jwt is not None:
            account = jwt.account(name)
            limits = account.jetstream if account is not None else None
            tier = account.jetstream_tier if account is not None else ""
        acc = JsAccount(self, name, limits, tier)
        (self.accounts if limits is not None else self.disabled)[name] = acc
        acc.start()

    def _log_banner(self) -> None:
        """nats-server's JetStream block, with the figures /jsz reports (its config block): the limits in
        effect (75% of RAM and of the free disk when unset) and the store directory as used."""
        from pynatsd.jetstream.monitor import config_block
        from pynatsd.jetstream.stream import API_LEVEL

        config = config_block(self)
        log.info("Starting JetStream")
        log.info("---------------- JETSTREAM ----------------")
        log.info("  Strict:          true")
        log.info("  Max Memory:      %s", friendly_bytes(config["max_memory"]))
        log.info("  Max Storage:     %s", friendly_bytes(config["max_storage"]))
        log.info('  Store Directory: "%s"', config["store_dir"])
        if self.domain:
            log.info("  Domain:          %s", self.domain)
        log.info("  API Level:       %d", API_LEVEL)
        log.info("-------------------------------------------")

    def _sync(self) -> None:
        for acc in self.accounts.values():
            acc.flush()
        self._sync_timer = self.loop.call_later(self.sync_interval, self._sync)

    def stop(self) -> None:
        if self._sync_timer is not None:
            self._sync_timer.cancel()
        for acc in (*self.accounts.values(), *self.disabled.values()):
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


def friendly_bytes(n: int) -> str:
    """Bytes as nats-server's banner shows them: `512 B`, `1.50 KB`, `17.66 GB` (powers of 1024)."""
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n) / math.log(1024)), 6)
    return f"{n / 1024**exp:.2f} {'KMGTPE'[exp - 1]}B"
