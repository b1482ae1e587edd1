"""Streaming read: subscribe on the driver, hand Spark each micro-batch as Arrow data inside its partitions.

Spark builds (and pickles) this reader several times, so the connection is opened lazily on the first offset
call, in the one long-lived driver-side Python process that serves the query. Messages land in a bounded
`MessageBuffer`; `partitions()` turns an offset range into Arrow IPC blobs carried by the partitions, so the
executors' `read()` needs no connection and a retried task sees exactly the same rows.

Delivery: within a running query every buffered message is delivered exactly once (a batch is released only
when Spark commits it). Core NATS keeps nothing, so messages that arrive while no query runs, those of a batch
that was planned but not committed when the driver died, and those dropped by a full buffer are lost:
at-most-once across a driver crash.
"""

from __future__ import annotations

import atexit
import logging
import math
import signal
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from pynatsd.spark.buffer import Message, MessageBuffer
from pynatsd.spark.natsio import BufferingClient, LoopThread, connect
from pynatsd.spark.options import ReadOptions
from pynatsd.spark.schema import READ_ARROW_SCHEMA

log = logging.getLogger("pynatsd.spark.reader")


class ArrowPartition(InputPartition):
    """One slice of a micro-batch, serialised as an Arrow IPC stream (bytes pickle cheaply)."""

    def __init__(self, ipc: bytes) -> None:
        super().__init__(ipc)


def message_columns(msgs: Sequence[Message], received_us: Sequence[int] | None = None) -> list[pa.Array]:
    """The columns every read yields before `seq`: subject, reply, headers, payload, received_at.

    With `received_us` (a JetStream read: the reply is the ack subject, the time the stream's), the reply
    column is null and received_at comes from `received_us`.
    """
    n = len(msgs)
    # One pass per column: zip(*msgs) over a whole micro-batch costs more than the Arrow conversion.
    headers = [m.headers for m in msgs]
    map_type = READ_ARROW_SCHEMA.field(2).type
    headers_col = (
        pa.array([None if h is None else list(h.items()) for h in headers], map_type)
        if any(h is not None for h in headers)
        else pa.nulls(n, map_type)
    )
    return [
        pa.array([m.subject for m in msgs], pa.string()),
        pa.array([m.reply for m in msgs], pa.string()) if received_us is None else pa.nulls(n, pa.string()),
        headers_col,
        pa.array([m.payload for m in msgs], pa.binary()),
        pa.array(
            [m.received_us for m in msgs] if received_us is None else received_us,
            READ_ARROW_SCHEMA.field(4).type,
        ),
    ]


def to_record_batch(msgs: Sequence[Message], first_seq: int) -> pa.RecordBatch:
    """Columnar form of `msgs`; the i-th message gets seq first_seq + i."""
    seqs = pa.array(np.arange(first_seq, first_seq + len(msgs), dtype=np.int64))
    return pa.RecordBatch.from_arrays([*message_columns(msgs), seqs], schema=READ_ARROW_SCHEMA)


def to_ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def _seq(offset: dict[str, Any]) -> int:
    return int(offset["seq"])


def _offset(seq: int) -> dict[str, int]:
    # Spark compares offsets by their JSON text: keep exactly one key so the form never varies.
    return {"seq": seq}


class NatsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Driver-side subscription feeding micro-batches; see the module docstring for delivery guarantees."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._buffer: MessageBuffer | None = None
        self._io: LoopThread | None = None
        self._nc: Any = None
        self._errors: list[BaseException] = []
        self._target: int | None = None  # AvailableNow: never go past this offset
        self._warned_drops = 0

    # Pickling happens before any connection exists; never ship live state.
    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    # --- connection -------------------------------------------------------------------------------------
    def _start(self) -> MessageBuffer:
        if self._buffer is not None:
            return self._buffer
        opts = self.options
        buffer = MessageBuffer(opts.buffer_messages, opts.buffer_bytes)
        io = LoopThread("pynatsd-reader")

        async def subscribe() -> Any:
            nc = await connect(
                opts.servers, opts.connect_timeout, "pynatsd-spark-reader", self._errors, BufferingClient()
            )
            for subject in opts.subjects:
                await nc.subscribe_into(subject, opts.queue, buffer)
            await nc.flush(math.ceil(opts.connect_timeout))  # the server has registered the subscriptions
            return nc

        self._nc = io.run(subscribe(), opts.connect_timeout * 2)
        self._io, self._buffer = io, buffer
        atexit.register(self.stop)
        _chain_sigterm(self.stop)
        log.info("pynatsd reader subscribed to %s (queue=%s)", opts.subjects, opts.queue)
        return buffer

    def _check(self) -> None:
        if self._errors:
            raise RuntimeError(f"pynatsd reader connection failed: {self._errors[0]!r}")
        if self._nc is not None and self._nc.is_closed:
            raise RuntimeError("pynatsd reader connection closed by the server")

    # --- Spark API -------------------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, int]:
        self._start()
        return _offset(0)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # Core NATS has no backlog to measure, so "available now" is what arrives until the subjects go
        # quiet for availableNowIdleMs (at most availableNowMaxMs after the trigger starts).
        buffer = self._start()
        buffer.wait_idle(self.options.available_now_idle, self.options.available_now_max)
        self._target = buffer.end
        log.info("pynatsd reader: AvailableNow target offset %d", self._target)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        buffer = self._start()
        begin = _seq(start)
        buffer.pin(begin)
        self._check()
        self._warn_drops(buffer)
        end = buffer.end if self._target is None else min(buffer.end, self._target)
        if isinstance(limit, ReadMaxRows):
            end = min(end, begin + limit.max_rows)
        return _offset(max(end, begin))

    def reportLatestOffset(self) -> dict[str, int] | None:
        # Shown in the query progress (sources[].latestOffset): where the stream is and what overflow cost.
        if self._buffer is None:
            return None
        b = self._buffer
        return {"seq": b.end, "buffered": len(b), "received": b.received, "dropped": b.dropped}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        buffer = self._start()
        lo, hi = _seq(start), _seq(end)
        buffer.pin(hi)  # a batch replayed after a restart: its messages are gone, number after it
        msgs = buffer.slice(lo, hi)
        if not msgs:
            return []
        first = hi - len(msgs) + 1
        parts = min(self.options.partitions, len(msgs))
        size = -(-len(msgs) // parts)
        return [
            ArrowPartition(to_ipc(to_record_batch(msgs[i : i + size], first + i)))
            for i in range(0, len(msgs), size)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        with pa.ipc.open_stream(partition.value) as r:
            yield from r

    def commit(self, end: dict[str, Any]) -> None:
        if self._buffer is not None:
            self._buffer.release(_seq(end))

    def stop(self) -> None:
        nc, io = self._nc, self._io
        self._nc = self._io = None
        if io is None:
            return
        try:
            if nc is not None and not nc.is_closed:
                io.run(nc.close(), 5)
        except Exception:  # shutting down: nothing left to report to
            log.debug("pynatsd reader close failed", exc_info=True)
        io.stop()

    def _warn_drops(self, buffer: MessageBuffer) -> None:
        if buffer.dropped > self._warned_drops:
            log.warning(
                "pynatsd reader buffer full: %d message(s) dropped so far (bufferSize=%d, bufferBytes=%d)",
                buffer.dropped,
                buffer.max_messages,
                buffer.max_bytes,
            )
            self._warned_drops = buffer.dropped


def _chain_sigterm(cleanup: Any) -> None:
    """Spark usually ends the driver-side Python worker with SIGTERM instead of calling stop()."""
    try:
        previous = signal.getsignal(signal.SIGTERM)

        def handler(signum: int, frame: FrameType | None) -> None:
            cleanup()
            if callable(previous):
                previous(signum, frame)
            else:
                raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: atexit still covers a normal exit
        pass
