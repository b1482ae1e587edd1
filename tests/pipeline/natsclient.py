"""A blocking nats-py wrapper for the synchronous Spark tests (its event loop runs in a thread)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import nats
from nats.aio.msg import Msg
from nats.protocol.parser import Parser

from pynatsd.spark.natsio import LoopThread, wait_for_subscriber


def feed_in_reads(parser: Parser, data: bytes, read_size: Callable[[], int]) -> None:
    """Hand `data` to a nats-py parser in reads of `read_size()` bytes each, as a socket would cut it."""

    async def run() -> None:
        pos = 0
        while pos < len(data):
            step = read_size()
            await parser.parse(data[pos : pos + step])
            pos += step

    asyncio.run(run())


class Collector:
    """Messages received on one subscription, in arrival order."""

    def __init__(self) -> None:
        self.msgs: list[Msg] = []
        self._cond = threading.Condition()

    async def on_msg(self, msg: Msg) -> None:
        with self._cond:
            self.msgs.append(msg)
            self._cond.notify_all()

    def wait_for(self, count: int, timeout: float) -> list[Msg]:
        """Wait until at least `count` messages arrived (or `timeout`); returns all received so far."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.msgs) < count and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            return list(self.msgs)


class SyncNats:
    def __init__(self, url: str) -> None:
        self.io = LoopThread("test-nats")
        self.nc: Any = self.io.run(nats.connect(url, allow_reconnect=False), 10)

    def subscribe(self, subject: str, queue: str = "") -> Collector:
        collector = Collector()

        async def sub() -> None:
            await self.nc.subscribe(subject, queue=queue, cb=collector.on_msg)
            await self.nc.flush()

        self.io.run(sub(), 10)
        return collector

    def publish_all(self, msgs: Iterable[tuple[str, bytes, dict[str, str] | None, str]]) -> None:
        """Publish (subject, payload, headers, reply) tuples in order and wait for the server to have them."""

        async def pub() -> None:
            for subject, payload, headers, reply in msgs:
                await self.nc.publish(subject, payload, reply=reply, headers=headers)
            await self.nc.flush(30)

        self.io.run(pub(), 60)

    def wait_for_subscriber(self, subject: str, timeout: float = 60) -> None:
        self.io.run(wait_for_subscriber(self.nc, subject, timeout), timeout + 5)

    def close(self) -> None:
        self.io.run(self.nc.close(), 10)
        self.io.stop()
