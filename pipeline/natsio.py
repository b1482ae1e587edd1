"""nats-py plumbing shared by the reader and writers: connecting, and a private event loop in a thread."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import nats
from nats.aio.client import Client

from pipeline.buffer import Message, MessageBuffer

T = TypeVar("T")
C = TypeVar("C", bound=Client)


async def connect(
    servers: list[str],
    connect_timeout: float,
    name: str,
    errors: list[BaseException],
    client: C,
) -> C:
    """Connect without reconnecting: a task that loses its connection must fail, not silently drop data."""

    async def on_error(e: Exception) -> None:
        errors.append(e)

    nc = client
    await nc.connect(
        servers=servers,
        name=name,
        connect_timeout=math.ceil(connect_timeout),
        allow_reconnect=False,
        max_reconnect_attempts=0,
        error_cb=on_error,
        # Larger client-side write buffer: fewer, bigger socket writes when publishing fast.
        pending_size=16 * 1024 * 1024,
        flusher_queue_size=4096,
    )
    return nc


class BufferingClient(Client):
    """nats-py client that appends the messages of its buffer subscriptions straight into a MessageBuffer.

    nats-py's callback path builds a Msg, queues it and runs a coroutine per message, which caps delivery
    near 0.15M msgs/s here; hooking its per-MSG dispatch (`_process_msg`, nats-py 2.16, pinned) more than
    doubles that. Subscriptions made with the public `subscribe()` keep the normal path.
    """

    def __init__(self) -> None:
        super().__init__()
        self._buffers: dict[int, MessageBuffer] = {}

    async def subscribe_into(self, subject: str, queue: str | None, buffer: MessageBuffer) -> None:
        # A callback-less subscription with no pending limits: the MessageBuffer alone decides overflow.
        sub = await self.subscribe(subject, queue=queue or "", pending_msgs_limit=0, pending_bytes_limit=0)
        self._buffers[sub._id] = buffer

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        buffer = self._buffers.get(sid)
        if buffer is None:
            await super()._process_msg(sid, subject, reply, data, headers)
            return
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        hdrs = await self._process_headers(headers) if headers else None
        buffer.append(
            Message(
                subject.decode(),
                reply.decode() if reply else None,
                dict(hdrs) if hdrs else None,
                data,
                time.time_ns() // 1000,
            )
        )


class LoopThread:
    """An asyncio loop running in a daemon thread, so synchronous Spark callbacks can drive nats-py."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)


async def wait_for_subscriber(nc: Client, subject: str, timeout: float, probe_timeout: float = 0.25) -> None:
    """Return once some client subscribes to `subject` (raises TimeoutError otherwise).

    Core NATS tells a requester "no responders" at once when nobody is subscribed, while a subscriber that
    does not answer makes the request time out: that difference is the only interest signal the protocol
    offers. The probes themselves reach the subscriber (with a reply subject): receivers should ignore them.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        try:
            await nc.request(subject, b"", timeout=probe_timeout)
            return
        except nats.errors.NoRespondersError:
            await asyncio.sleep(0.05)
        except nats.errors.TimeoutError:
            return
    raise TimeoutError(f"nobody subscribed to {subject!r} within {timeout}s")
