"""Outbound queues: what a connection still has to write, and the flusher that writes it.

Every connection owns an `Outbound`: a list of pending frame pieces plus a byte count. Producers only
enqueue. The queue is flushed — everything pending in one transport call, joined into one `write`, or as
a `writelines` gather when the pieces are large — either once the reads that filled it in this turn of
the event loop are processed (nats-server's "pcd" flush, per turn rather than per read: see
`FlushScheduler`) or by the connection's flusher task, woken condition-style only on the empty→non-empty
transition. Writes stop
while the transport is paused (`pause_writing`) and resume with it. Past `STALL_BYTES` pending (or 75% of
a smaller `max_pending`) the queue closes a gate on the producers feeding it (nats-server's fast-producer
stall): each stops reading until the queue drains under it, or for `STALL_HOLD_MAX` at most. Pending bytes
above `max_pending` make the connection a slow consumer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from pynatsd.base.histogram import HistogramCounts

# How long a producer waits at a closed gate (nats-server's stallClientMinDuration/MaxDuration): the
# longer one when the queue is at max_pending.
STALL_MIN = 0.002
STALL_MAX = 0.005
# How long a producer may be held in all while the consumer it waits for stays past its gate: its stall is
# renewed meanwhile, so that it reads again when that queue is under the gate, not at every timer (4 nats.go
# producers and 4 consumers on a loaded machine: one consumer went 3.7 MiB past a 1 MiB gate on timers
# alone, where a consumer without CPU for a few ms let every producer read another slice). A consumer that
# stays behind that long lets its producers go on, a slice at a time, toward max_pending and the
# slow-consumer cut, as nats-server's stalls do.
STALL_HOLD_MAX = 0.025

# The mean piece size from which pending frames are handed to the transport as they are, not joined.
_GATHER_MIN = 4096
# A backlog (a consumer that paused us) is joined 256 KiB at a time, each piece let go once copied: one join
# of all of it held both copies at once, plus join's 80-byte buffer record per piece (a 36 MiB backlog took
# the server 70 MiB above idle; memray).
_JOIN_MAX = 256 << 10
# A paused queue compacts every this many bytes (see Outbound._compact).
_COMPACT_EVERY = 256 << 10
# The most a consumer may have pending (queued here and buffered by its transport) before the producers
# feeding it are stalled, whatever max_pending allows. nats-server's producers write to their consumers'
# sockets themselves (flushClients), so a consumer behind slows them by its socket alone and its 75% gate
# is rarely reached; here writes never block, and with only that gate (48 MiB of the default 64 MiB) a
# nats.go 1 -> 4 fan-out held 16-40 MiB above idle against nats-server's 4-8.
STALL_BYTES = 1 << 20


# After a backlog, the C heap is trimmed once no backlog has been written for this long (see
# FlushScheduler.backlog_written).
TRIM_AFTER = 1.0


def _find_malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None (another libc)."""
    try:
        import ctypes

        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
        return trim
    except (OSError, AttributeError):
        return None


_malloc_trim = _find_malloc_trim()


class Producer(Protocol):
    """What the stall gate needs of a producer: its id and a way to stop and restart reading it."""

    cid: int
    closed: bool

    def hold_reading(self) -> None: ...

    def release_reading(self) -> None: ...


class Consumer(Protocol):
    """What the stall gate needs of a consumer: its queue and its count of producers stalled on it."""

    out: Outbound | None
    stalls: int


class StallGate:
    """nats-server's fast-producer stall, all of it: past 75% of max_pending a consumer's queue closes a
    gate on the producers that feed it. While one read is processed, `passed` remembers the fullest
    queue that read pushed past its gate; when the read ends, `after_read` makes its producer stop
    reading until that queue drains (`opened`) or `STALL_MIN` passes (`STALL_MAX` when the queue is at
    max_pending). The kernel's socket buffers then slow the client down."""

    __slots__ = ("_consumer", "_stalled", "loop", "stalled_total")

    def __init__(self) -> None:
        self._consumer: Consumer | None = None  # the fullest consumer past its gate in this read
        # producer id -> (producer, the queue it waits for, its timer, when the stall began)
        self._stalled: dict[int, tuple[Producer, Outbound, asyncio.TimerHandle, float]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None  # set when the server starts
        self.stalled_total = 0  # producers stalled so far (nats-server's stalled_clients)

    def passed(self, consumer: Consumer, out: Outbound) -> None:
        """`consumer`'s queue `out` passed its gate during the read being processed."""
        current = self._consumer.out if self._consumer is not None else None
        if current is None or out.queued + out.backlog > current.queued + current.backlog:
            self._consumer = consumer

    def after_read(self, producer: Producer) -> None:
        """The read of `producer` is processed: stall it if it filled a queue past its gate."""
        consumer, self._consumer = self._consumer, None
        if consumer is None or consumer is producer or producer.closed or producer.cid in self._stalled:
            return
        out = consumer.out
        if out is None or self.loop is None:
            return
        consumer.stalls += 1  # counted on the consumer, as nats-server does
        self.stalled_total += 1
        producer.hold_reading()
        ttl = STALL_MAX if out.queued >= out.hard_limit else STALL_MIN
        timer = self.loop.call_later(ttl, self._expired, producer.cid)
        self._stalled[producer.cid] = (producer, out, timer, self.loop.time())
        out.gated += 1

    def opened(self, out: Outbound) -> None:
        """`out` drained below its gate (or closed): its producers read again."""
        if out.gated:
            for cid in [cid for cid, entry in self._stalled.items() if entry[1] is out]:
                self._release(cid)

    def forget(self, producer: Producer) -> None:
        """`producer` closed: drop its stall."""
        entry = self._stalled.pop(producer.cid, None)
        if entry is not None:
            entry[1].gated -= 1
            entry[2].cancel()

    def _expired(self, cid: int) -> None:
        """A stall's timer ran out: renewed while its queue is still past its gate (up to STALL_HOLD_MAX in
        all), else the producer reads again."""
        entry = self._stalled.get(cid)
        if entry is None:
            return
        producer, out, _, since = entry
        loop = self.loop
        if (
            loop is not None
            and not out.closed
            and out.pending_bytes > out.gate + out.backlog  # pending bytes still over the gate's bound
            and loop.time() - since < STALL_HOLD_MAX
        ):
            timer = loop.call_later(STALL_MIN, self._expired, cid)
            self._stalled[cid] = (producer, out, timer, since)
            return
        self._release(cid)

    def _release(self, cid: int) -> None:
        entry = self._stalled.pop(cid, None)
        if entry is None:
            return
        producer, out, timer, _ = entry
        out.gated -= 1
        timer.cancel()
        if not producer.closed:
            producer.release_reading()


class FlushScheduler:
    """The set of queues touched while the server processes reads, flushed once when every read that was
    ready in this turn of the event loop is processed (`read_done`).

    Not at the end of each read: 16 requesters whose requests are ready together made 16 writes of one
    message each to their responder; one write carries them all (nats.go request/reply, 16 requesters:
    2.0 -> 1.x writes per round trip; a write costs ~12 µs of kernel time on loopback). The wait is only
    for the other reads already ready (each at most READ_SLICE), as nats-server's flusher also coalesces
    what its read loops queue meanwhile. Outside a read (timers, shutdown) there is no producer to flush,
    so the queue's own flusher task is woken instead.
    """

    __slots__ = (
        "collecting",
        "flush_sizes",
        "last_backlog",
        "reading",
        "scheduled",
        "stall",
        "touched",
        "trims",
    )

    def __init__(self) -> None:
        self.reading = False
        # Outside a read, the queues touched are collected too (not their flushers woken), for the code
        # producing a run of messages to write them itself with `flush_now` (see `collect`).
        self.collecting = False
        self.touched: list[Outbound] = []
        self.scheduled = False  # a flush_touched is queued for the end of this turn
        self.stall = StallGate()
        self.flush_sizes = HistogramCounts(16384)  # frame pieces per socket write (monitoring)
        self.last_backlog = -1.0  # loop time of the last backlog written; -1: no trim pending
        self.trims = 0  # C heap trims done

    def backlog_written(self) -> None:
        """A queue wrote a backlog (more than _JOIN_MAX at once): once none has been for TRIM_AFTER, give
        the C heap's free pages back to the system. Frames joined into chunks of up to 256 KiB and reads
        of up to 256 KiB are malloc'd from the heap once glibc has raised its mmap threshold, and their
        free pages stayed in the process after the flood (a 4 -> 4 flood, nats.go: 8.7 MiB over idle)."""
        loop = self.stall.loop
        if loop is None or _malloc_trim is None:
            return
        if self.last_backlog < 0:
            loop.call_later(TRIM_AFTER, self._trim)
        self.last_backlog = loop.time()

    def _trim(self) -> None:
        loop = self.stall.loop
        if loop is None or _malloc_trim is None:
            return
        quiet = loop.time() - self.last_backlog
        if quiet < TRIM_AFTER:  # backlogs since: wait for the flood to end
            loop.call_later(TRIM_AFTER - quiet, self._trim)
            return
        self.last_backlog = -1.0
        self.trims += 1
        _malloc_trim(0)

    def read_done(self) -> None:
        """A read is processed: flush what it touched once this turn's ready reads are processed too."""
        if self.touched and not self.scheduled:
            loop = self.stall.loop
            if loop is None:  # no running server (unit tests): at once
                self.flush_touched()
                return
            self.scheduled = True
            loop.call_soon(self.flush_touched)

    def flush_touched(self) -> None:
        self.scheduled = False
        self.flush_now()

    def flush_now(self) -> None:
        """Write the queues touched so far (each in one call)."""
        touched = self.touched
        if touched:
            self.touched = []
            for out in touched:
                out.flush()

    def collect(self) -> bool:
        """Collect the queues touched from now on, outside a read, until `collected`: True if this call
        started collecting (False within a read or an outer collection, whose end writes them). A pull
        batch is written by its producer as it goes (the first message at once, the rest when built)
        instead of by the queue's flusher task a turn of the loop later (see Consumer._deliver_pull_run)."""
        if self.reading or self.collecting:
            return False
        self.collecting = True
        return True

    def collected(self) -> None:
        """End the collection `collect` started: write what it collected."""
        self.collecting = False
        self.flush_now()


class Outbound:
    """The pending frames of one connection and their flusher."""

    __slots__ = (
        "_flusher",
        "_on_error",
        "_wake",
        "backlog",
        "batches",
        "closed",
        "compacted",
        "compacted_at",
        "frames",
        "gate",
        "gated",
        "hard_limit",
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
        # A list, not a deque: the queue is only ever appended to and taken whole, and compiled code appends
        # to a list without a method call (measured with the in-process benchmark: 25 ns per message less).
        self.frames: list[bytes] = []
        self.queued = 0  # bytes in `frames`
        self.backlog = 0  # bytes the transport still buffers (sampled when it pauses or resumes)
        self.max_pending = max_pending
        self.gate = 0  # 75% of max_pending, less backlog: past it, producers are stalled
        self.hard_limit = 0  # max_pending less backlog: past it, a slow consumer
        # The hot-path threshold on `queued`: the gate; while paused, also the next compaction (`_compact`).
        self.limit = 0
        self.compacted = 0  # leading entries of `frames` that are compacted runs of frames
        self.compacted_at = 0  # `queued` when they were
        self.paused = False
        self._set_limits()
        self.gated = 0  # producers stalled until this queue drains (see StallGate)
        self.closed = False
        self.batches = 0  # flushes done (monitoring: frames per flush)
        self.written_bytes = 0
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._on_error: Callable[[BaseException], object] | None = None

    def start(self, on_error: Callable[[BaseException], object]) -> None:
        """Start the flusher task; `on_error` is told of a transport that fails a write."""
        self._on_error = on_error
        self._flusher = asyncio.get_running_loop().create_task(self._run())

    @property
    def pending_bytes(self) -> int:
        """Bytes accepted for this connection and not yet handed to the socket."""
        if self.closed:
            return 0
        return self.queued + self.transport.get_write_buffer_size()

    def _set_limits(self) -> None:
        self.hard_limit = self.max_pending - self.backlog
        self.gate = min(self.max_pending // 4 * 3, STALL_BYTES) - self.backlog
        self.limit = min(self.gate, self.compacted_at + _COMPACT_EVERY) if self.paused else self.gate

    def mark_dirty(self) -> None:
        """Called on the empty→non-empty transition: arrange for exactly one flush."""
        scheduler = self.scheduler
        if scheduler.reading or scheduler.collecting:
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

    def enqueue_msg(self, head: bytes, sid: bytes, tail: bytes) -> bool:
        """Queue one message frame from its three shared parts (`MSG subject `, `sid `, the rest), by
        reference; True once the queue is past its gate (`limit`). Only the delivery policy calls it."""
        frames = self.frames
        if not frames:
            self.mark_dirty()
        frames.append(head)
        frames.append(sid)
        frames.append(tail)
        self.queued += len(head) + len(sid) + len(tail)
        if self.queued > self.limit:
            return self._past_limit()
        return False

    def _past_limit(self) -> bool:
        """`queued` passed `limit`: compact a paused queue's newest frames (each _COMPACT_EVERY bytes, also
        past the gate, where this runs for every message); True if past the gate."""
        if self.paused and self.queued - self.compacted_at >= _COMPACT_EVERY:
            self._compact()
        return self.queued > self.gate

    def _compact(self) -> None:
        """Join the frames queued since the last compaction into one bytes. A paused queue holds each
        message as three references and a tail object of its own (about twice its frame's bytes, and
        max_pending counts frame bytes); joined, it holds the frame's bytes alone, as nats-server does."""
        frames = self.frames
        start = self.compacted
        if len(frames) - start > 1:
            frames[start:] = [b"".join(frames[start:])]
        self.compacted = len(frames)
        self.compacted_at = self.queued
        self.limit = min(self.gate, self.queued + _COMPACT_EVERY)

    def flush(self) -> None:
        """Hand everything pending to the transport in one call, unless it asked us to pause."""
        if self.paused or self.closed or not self.frames:
            return
        frames = self.frames
        n = len(frames)
        queued = self.queued
        self.scheduler.flush_sizes.observe(n)
        self.batches += 1
        self.written_bytes += queued
        self.queued = 0
        self.compacted = self.compacted_at = 0
        try:
            self.frames = []
            if n == 1:
                self.transport.write(frames[0])
            elif queued >= n * _GATHER_MIN:
                # Few large pieces (large payloads): uvloop writes them with one vectored send, which
                # spares copying them all into one bytes first.
                self.transport.writelines(frames)
            elif queued <= _JOIN_MAX:
                self.transport.write(b"".join(frames))
            else:
                _write_joined_in_chunks(self.transport, frames)
                self.scheduler.backlog_written()
        except (RuntimeError, OSError) as exc:
            # The transport closed under us (uvloop refuses writes between a failure and the
            # connection_lost it schedules): this connection goes, not the producer whose read fed it.
            self.closed = True
            if self._on_error is not None:
                self._on_error(exc)

    def pause(self) -> None:
        self.paused = True
        self.backlog = self.transport.get_write_buffer_size()
        self._set_limits()

    def resume(self) -> None:
        self.paused = False
        self.backlog = self.transport.get_write_buffer_size()
        self._set_limits()
        if self.frames:
            self._wake.set()
        if self.gated and self.queued <= self.gate:
            self.scheduler.stall.opened(self)

    def close(self) -> None:
        """Drop what is pending and stop the flusher."""
        self.closed = True
        self.frames = []
        self.compacted = self.compacted_at = 0
        self.queued = 0
        if self.gated:
            self.scheduler.stall.opened(self)
        if self._flusher is not None and not self._flusher.done():
            self._flusher.cancel()

    async def _run(self) -> None:
        wake = self._wake
        try:
            while not self.closed:
                await wake.wait()
                wake.clear()
                self.flush()
                # A resumed queue is written here, outside any read: the producers it stalled read again
                # as soon as it is under its gate, not when their timers run out.
                if self.gated and self.queued <= self.gate:
                    self.scheduler.stall.opened(self)
        except asyncio.CancelledError:
            pass


def _write_joined_in_chunks(transport: asyncio.Transport, frames: list[bytes]) -> None:
    """Write `frames` (emptied) as joins of about _JOIN_MAX bytes, releasing each piece once joined."""
    frames.reverse()  # popped from the end, in order
    while frames:
        chunk: list[bytes] = []
        size = 0
        while frames and size < _JOIN_MAX:
            piece = frames.pop()
            chunk.append(piece)
            size += len(piece)
        transport.write(b"".join(chunk))
