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
from nats.protocol.parser import AWAITING_MSG_PAYLOAD, CRLF_SIZE, MAX_CONTROL_LINE_SIZE, Parser

from pynatsd.spark.buffer import Message, MessageBuffer

T = TypeVar("T")
MAX_CACHED_LINES = 4096
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


class LaneParser(Parser):
    """nats-py's parser with a fast lane of a subclass's own (`parse`): `_resume` first lets nats-py finish a
    frame it is midway through, and joins what it had buffered to the new read."""

    async def _resume(self, data: bytes) -> bytes | None:
        """The bytes the lane may look at, from the start of a frame; None when nats-py took them all."""
        if self.state == AWAITING_MSG_PAYLOAD:
            # nats-py is midway through a frame of its own: give it exactly the bytes that complete it,
            # so that it does not go on to parse the whole read the slow way.
            need = self.needed + CRLF_SIZE - len(self.buf)
            if len(data) < need:
                await super().parse(data)
                return None
            await super().parse(data[:need])
            data = data[need:]
        if self.buf:
            self.buf.extend(data)
            data = bytes(self.buf)
            self.buf.clear()
        return data


class BufferingParser(LaneParser):
    """nats-py's parser with a fast lane for plain MSG frames addressed to buffer subscriptions.

    nats-py matches each frame with a regex and awaits a coroutine per message, which caps delivery near
    0.17M msgs/s here. The lane takes the run of such frames at the head of each read with `find` and
    slicing, and hands the whole run to the MessageBuffer under one lock; every other frame (HMSG, PING,
    INFO, -ERR, a MSG for a callback subscription) and any partial frame go through nats-py's own parser.
    """

    def __init__(self, nc: Client, buffers: dict[int, MessageBuffer]) -> None:
        super().__init__(nc)
        self._buffers = buffers
        # A subscription sees the same few control lines over and over: parse each once.
        self._lines: dict[bytes, tuple[MessageBuffer, str, str | None, int]] = {}

    async def parse(self, data: bytes = b"") -> None:
        if not self._buffers:
            await super().parse(data)
            return
        resumed = await self._resume(data)
        if resumed is None:
            return
        data = resumed
        rest, partial = self._take_buffered(data)
        if partial:  # a frame of ours cut by the read: keep it for the next one
            self.buf.extend(rest)
            return
        await super().parse(rest)

    def _control_line(self, line: bytes) -> tuple[MessageBuffer, str, str | None, int] | None:
        """(buffer, subject, reply, payload size) of `MSG subject sid [reply] size`, None if not ours."""
        args = line.split()
        if len(args) == 4:
            _, subject, sid, size = args
            reply = None
        elif len(args) == 5:
            _, subject, sid, raw_reply, size = args
            reply = raw_reply.decode()
        else:
            return None  # malformed: nats-py reports it
        buffer = self._buffers.get(int(sid))
        if buffer is None:
            return None
        parsed = (buffer, subject.decode(), reply, int(size))
        if reply is None and len(self._lines) < MAX_CACHED_LINES:  # replies are unique: never cache them
            self._lines[line] = parsed
        return parsed

    def _take_buffered(self, data: bytes) -> tuple[bytes, bool]:
        """Buffer the leading MSG frames of buffer subscriptions; return the rest of `data`, and whether
        that rest is only the incomplete start of such a frame."""
        lines, new_message = self._lines, tuple.__new__
        received_us = time.time_ns() // 1000  # one read, one arrival time
        pos, end = 0, len(data)
        taken: list[Message] = []
        target: MessageBuffer | None = None
        nmsgs = nbytes = 0
        partial = False
        while data.startswith(b"MSG ", pos):
            eol = data.find(b"\r\n", pos)
            if eol < 0:
                partial = end - pos < MAX_CONTROL_LINE_SIZE  # longer: nats-py reports the bad line
                break
            line = data[pos:eol]
            parsed = lines.get(line) or self._control_line(line)
            if parsed is None:
                break
            buffer, subject, reply, size = parsed
            stop = eol + 2 + size
            if stop + 2 > end:
                partial = True
                break
            if buffer is not target:
                if target is not None:
                    target.extend(taken)
                    taken = []
                target = buffer
            # tuple.__new__ skips NamedTuple's Python-level constructor: half the cost per message.
            taken.append(new_message(Message, (subject, reply, None, data[eol + 2 : stop], received_us)))
            nmsgs += 1
            nbytes += size
            pos = stop + 2
        if target is not None and taken:
            target.extend(taken)
        if pos:
            stats = self.nc.stats
            stats["in_msgs"] += nmsgs
            stats["in_bytes"] += nbytes
        return data[pos:], partial


class BufferingClient(Client):
    """nats-py client whose buffer subscriptions feed a MessageBuffer through `BufferingParser`.

    Subscriptions made with the public `subscribe()` keep nats-py's normal path.
    """

    def __init__(self) -> None:
        super().__init__()
        self._buffers: dict[int, MessageBuffer] = {}
        self._ps = BufferingParser(self, self._buffers)

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
