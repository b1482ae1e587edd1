"""Outbound queues: what a connection still has to write, and the flusher that writes it.

Every connection owns an `Outbound`: a `collections.deque` of pending frame pieces (CPython's deque is a
linked list of blocks, so appends never copy the queue) plus a byte count. Producers only enqueue. The
queue is flushed — everything pending joined into one `transport.write` — either by the producer at the
end of the read that filled it (nats-server's per-read "pcd" flush, see `FlushScheduler`) or by the
connection's flusher task, woken condition-style only on the empty→non-empty transition. Writes stop
while the transport is paused (`pause_writing`) and resume with it; pending bytes above `max_pending`
make the connection a slow consumer.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from broker.histogram import HistogramCounts


class FlushScheduler:
    """The set of queues touched while the server processes one read, flushed once when the read ends.

    Outside a read (timers, shutdown) there is no producer to flush, so the queue's own flusher task is
    woken instead.
    """

    __slots__ = ("flush_sizes", "reading", "touched")

    def __init__(self) -> None:
        self.reading = False
        self.touched: list[Outbound] = []
        self.flush_sizes = HistogramCounts(16384)  # frame pieces per socket write (monitoring)

    def flush_touched(self) -> None:
        touched = self.touched
        if touched:
            self.touched = []
            for out in touched:
                out.flush()


class Outbound:
    """The pending frames of one connection and their flusher."""

    __slots__ = (
        "_flusher",
        "_wake",
        "backlog",
        "batches",
        "closed",
        "frames",
        "limit",
        "max_pending",
        "paused",
        "queued",
        "scheduler",
        "transport",
        "written_bytes",
    )

    def __init__(self, transport: asyncio.Transport, scheduler: FlushScheduler, max_pending: int) -> None:
        self.transport = transport
        self.scheduler = scheduler
        self.frames: deque[bytes] = deque()
        self.queued = 0  # bytes in `frames`
        self.backlog = 0  # bytes the transport still buffers (sampled when it pauses or resumes)
        self.max_pending = max_pending
        self.limit = max_pending  # max_pending - backlog: the hot-path slow-consumer threshold
        self.paused = False
        self.closed = False
        self.batches = 0  # flushes done (monitoring: frames per flush)
        self.written_bytes = 0
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None

    def start(self, on_error: Callable[[BaseException], Any]) -> None:
        """Start the flusher task."""
        self._flusher = asyncio.get_running_loop().create_task(self._run(on_error))

    @property
    def pending_bytes(self) -> int:
        """Bytes accepted for this connection and not yet handed to the socket."""
        if self.closed:
            return 0
        return self.queued + self.transport.get_write_buffer_size()

    def over_limit(self) -> bool:
        return self.queued > self.limit

    def mark_dirty(self) -> None:
        """Called on the empty→non-empty transition: arrange for exactly one flush."""
        scheduler = self.scheduler
        if scheduler.reading:
            scheduler.touched.append(self)
        else:
            self._wake.set()

    def push(self, data: bytes) -> None:
        """Queue one complete frame (control replies: PONG, +OK, -ERR, INFO)."""
        if self.closed:
            return
        if not self.frames:
            self.mark_dirty()
        self.frames.append(data)
        self.queued += len(data)

    def flush(self) -> None:
        """Write everything pending in one call, unless the transport asked us to pause."""
        if self.paused or self.closed or not self.frames:
            return
        frames = self.frames
        n = len(frames)
        self.scheduler.flush_sizes.observe(n)
        data = b"".join(frames) if n > 1 else frames[0]
        frames.clear()
        self.queued = 0
        self.batches += 1
        self.written_bytes += len(data)
        self.transport.write(data)

    def pause(self) -> None:
        self.paused = True
        self.backlog = self.transport.get_write_buffer_size()
        self.limit = self.max_pending - self.backlog

    def resume(self) -> None:
        self.paused = False
        self.backlog = self.transport.get_write_buffer_size()
        self.limit = self.max_pending - self.backlog
        if self.frames:
            self._wake.set()

    def close(self) -> None:
        """Drop what is pending and stop the flusher."""
        self.closed = True
        self.frames.clear()
        self.queued = 0
        if self._flusher is not None and not self._flusher.done():
            self._flusher.cancel()

    async def _run(self, on_error: Callable[[BaseException], Any]) -> None:
        wake = self._wake
        try:
            while not self.closed:
                await wake.wait()
                wake.clear()
                self.flush()
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # a transport failure: the connection handles it
            on_error(exc)
