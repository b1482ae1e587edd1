"""The streaming reader's bounded, thread-safe message buffer (no Spark, no sockets: unit-testable).

Messages get consecutive sequence numbers on arrival (1, 2, …). A Spark offset is the sequence number of the
last message a micro-batch includes, so a batch is the range (start, end]. Messages stay buffered until Spark
commits a batch, which is what makes a re-planned or retried batch see exactly the same messages.

Overflow policy: when the buffer is full (too many messages or bytes not yet committed) a new message is
dropped and counted in `dropped`; buffered messages are never evicted, so what Spark has been promised stays
intact. Core NATS offers no back-pressure, so dropping the newest is the only choice that keeps the already
assigned offsets valid.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from itertools import islice
from typing import NamedTuple


class Message(NamedTuple):
    subject: str
    reply: str | None
    headers: dict[str, str] | None
    payload: bytes
    received_us: int  # microseconds since the epoch, UTC


class MessageBuffer:
    """Bounded FIFO of received messages addressed by sequence number."""

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._msgs: deque[Message] = deque()
        self._base = 0  # sequence number just before the first buffered message
        self._bytes = 0
        self._pinned = False
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.dropped = 0
        self.received = 0
        self.last_arrival = 0.0  # time.monotonic() of the newest message

    def append(self, msg: Message) -> bool:
        """Buffer a message; False (and `dropped` + 1) when the buffer is full."""
        return self.extend([msg]) == 0

    def extend(self, msgs: list[Message]) -> int:
        """Buffer several messages under one lock, in order; returns how many were dropped."""
        dropped = 0
        with self._lock:
            self.received += len(msgs)
            self.last_arrival = time.monotonic()
            queue, max_messages, max_bytes = self._msgs, self.max_messages, self.max_bytes
            for msg in msgs:
                size = len(msg.payload)
                if len(queue) >= max_messages or (queue and self._bytes + size > max_bytes):
                    dropped += 1
                    continue
                queue.append(msg)
                self._bytes += size
            self.dropped += dropped
            self._arrived.notify_all()
        return dropped

    @property
    def end(self) -> int:
        """Sequence number of the newest buffered message (0 before any)."""
        with self._lock:
            return self._base + len(self._msgs)

    def __len__(self) -> int:
        with self._lock:
            return len(self._msgs)

    def pin(self, start: int) -> None:
        """Fix numbering on the first call: a query restarted from a checkpoint at `start` continues after it.

        Messages of the previous run are gone (core NATS cannot replay), so this run's first message becomes
        start + 1. Later calls are no-ops.
        """
        with self._lock:
            if not self._pinned:
                self._pinned = True
                self._base = max(self._base, start)

    def slice(self, start: int, end: int) -> list[Message]:
        """Messages with start < seq <= end that are still buffered (committed ones are gone)."""
        with self._lock:
            lo = max(start - self._base, 0)
            hi = min(end - self._base, len(self._msgs))
            if hi <= lo:
                return []
            return list(islice(self._msgs, lo, hi))

    def release(self, end: int) -> None:
        """Forget messages with seq <= end (Spark committed them)."""
        with self._lock:
            while self._msgs and self._base < end:
                self._bytes -= len(self._msgs.popleft().payload)
                self._base += 1

    def take(self, timeout: float = 0.0) -> list[Message]:
        """Remove and return every buffered message, waiting up to `timeout` seconds for one to arrive."""
        with self._lock:
            if not self._msgs and timeout > 0:
                self._arrived.wait(timeout)
            msgs = list(self._msgs)
            self._msgs.clear()
            self._base += len(msgs)
            self._bytes = 0
            return msgs

    def wait_idle(self, idle: float, limit: float) -> None:
        """Block until no message arrived for `idle` seconds (counting from now), or `limit` seconds pass."""
        deadline = time.monotonic() + limit
        quiet_since = time.monotonic()
        while True:
            now = time.monotonic()
            last = max(quiet_since, self.last_arrival)
            if now - last >= idle or now >= deadline:
                return
            with self._lock:
                self._arrived.wait(min(idle - (now - last), deadline - now))
