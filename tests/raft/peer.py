"""A RaftNode driven over a NATS client connection in the system account: it subscribes to the
node's subjects, publishes its outbox, feeds it the clock. Tests use it to make pynatsd's RAFT node a
member of a real nats-server group."""

from __future__ import annotations

import asyncio
import contextlib

import nats
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from pynatsd.raft.codec import Entry
from pynatsd.raft.node import RaftNode


class ClientPeer:
    def __init__(self, nc: nats.NATS, node: RaftNode) -> None:
        self.nc = nc
        self.node = node
        self.subs: dict[str, Subscription] = {}
        self.applied: list[tuple[int, tuple[Entry, ...]]] = []
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def _on_msg(self, msg: Msg) -> None:
        self.node.receive(msg.subject, msg.reply, msg.data, asyncio.get_running_loop().time())
        await self._pump()

    async def _pump(self) -> None:
        wanted = self.node.subscriptions()
        for subject in wanted - set(self.subs):
            self.subs[subject] = await self.nc.subscribe(subject, cb=self._on_msg)
        for subject in set(self.subs) - wanted:
            await self.subs.pop(subject).unsubscribe()
        for out in self.node.take_outbox():
            await self.nc.publish(out.subject, out.data, reply=out.reply)
        for done in self.node.take_applied():
            self.applied.append((done.index, done.entries))

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = self.node.tick(loop.time())
            await self._pump()
            await asyncio.sleep(min(max(due - loop.time(), 0.01), 0.1))

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        for sub in self.subs.values():
            await sub.unsubscribe()
        self.subs.clear()
        self.node.close()
