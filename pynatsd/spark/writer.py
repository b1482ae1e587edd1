"""Batch and streaming writers: each Spark task publishes its rows over one connection and flushes before it
reports success, so a committed batch is on the server. Streaming messages carry a deterministic
`Nats-Msg-Id` (`<batch>/<partition>/<row>`) so consumers can drop the duplicates of a replayed batch.

JetStream mode (option `stream`): every publish waits for the stream's ack before the task succeeds, and the
id becomes `<query id>/<batch>/<partition>/<row>` (streaming) or `<write id>/<partition>/<row>` (batch), so
the stream itself drops what a retried task or replayed batch publishes again (within its duplicate window):
exactly-once into the stream."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from nats.aio.client import Client
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from pynatsd.spark.acks import AckingClient, hpub_frames
from pynatsd.spark.natsio import connect
from pynatsd.spark.options import WriteOptions

# Spark's micro-batch execution puts the batch id in this task-local property.
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


@dataclass
class Published(WriterCommitMessage):
    partition: int
    count: int


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    idx = batch.schema.get_field_index(name)
    return None if idx < 0 else batch.column(idx).to_pylist()


#: Rows per socket write of a batch's frames (a few hundred kB): the broker starts on the first ones while
#: the rest are still being handed over.
CHUNK_ROWS = 4096


async def _send(nc: Client, frames: memoryview, count: int) -> None:
    nc.stats["out_msgs"] += count
    await nc._send_command(frames)  # type: ignore[arg-type]  # nats-py joins buffers of any kind
    await nc._flush_pending()


async def publish_framed(
    nc: AckingClient, options: WriteOptions, reply: bytes, batch: pa.RecordBatch, prefix: str, row: int
) -> int:
    """Publish a batch's rows (no headers of their own) with ids `<prefix>/<row>`, at most `max_pending`
    unacknowledged; returns the next row number. The frames come from `hpub_frames` in one buffer, and go
    out in slices of it: no Python step per row."""
    frames, offsets = hpub_frames(
        batch.column(batch.schema.get_field_index("subject")),
        batch.column(batch.schema.get_field_index("payload")),
        reply,
        options.msg_id_header.encode(),
        prefix.encode(),
        row,
    )
    counter, limit = nc.counter, options.max_pending
    n, i = len(offsets) - 1, 0
    while i < n:
        room = limit - (row - counter.acked)
        if room <= 0:
            await counter.wait(row - limit // 2, options.flush_timeout)
            continue
        j = min(n, i + min(room, CHUNK_ROWS))
        await _send(nc, frames[offsets[i] : offsets[j]], j - i)
        row += j - i
        i = j
    # Let the flusher hand this batch to the socket now: the broker stores it while Spark hands over the
    # next batch (that read blocks this loop).
    await asyncio.sleep(0)
    return row


async def publish_batches(
    options: WriteOptions, batches: Iterator[pa.RecordBatch], msg_id_prefix: str | None
) -> int:
    """Publish every row of `batches`; returns the count once the server has them: flushed in core mode,
    acknowledged by the stream in JetStream mode (where the `reply` column is ignored)."""
    errors: list[BaseException] = []
    client = AckingClient()
    nc = await connect(options.servers, options.connect_timeout, "pynatsd-spark-writer", errors, client)
    counter = client.counter
    row = 0
    try:
        inbox = await client.count_acks() if options.stream else None
        for batch in batches:
            headers = _column(batch, "headers")
            if inbox is not None and headers is None and msg_id_prefix is not None:
                row = await publish_framed(client, options, inbox, batch, msg_id_prefix, row)
                if errors or counter.refused is not None:
                    break
                continue
            subjects = batch.column(batch.schema.get_field_index("subject")).to_pylist()
            payloads = batch.column(batch.schema.get_field_index("payload")).to_pylist()
            replies = _column(batch, "reply")
            publish = nc.publish
            if replies is None and headers is None and msg_id_prefix is None:
                for subject, payload in zip(subjects, payloads, strict=True):
                    await publish(subject, payload.encode() if isinstance(payload, str) else payload or b"")
                row += len(subjects)
                continue
            for i, subject in enumerate(subjects):
                payload = payloads[i]
                data = payload.encode() if isinstance(payload, str) else payload or b""
                hdrs: dict[str, str] | None = dict(headers[i]) if headers and headers[i] else None
                if msg_id_prefix is not None:  # a row's own id (e.g. a result's natural key) wins
                    hdrs = hdrs or {}
                    hdrs.setdefault(options.msg_id_header, f"{msg_id_prefix}/{row}")
                reply = inbox.decode() if inbox is not None else (replies[i] if replies else None)
                await publish(subject, data, reply=reply or "", headers=hdrs)
                row += 1
                if inbox is not None and row - counter.acked > options.max_pending:
                    await counter.wait(row - options.max_pending // 2, options.flush_timeout)
            if errors:
                break
        await nc.flush(math.ceil(options.flush_timeout))
        if inbox is not None:
            await counter.wait(row, options.flush_timeout)
        if errors:
            raise RuntimeError(f"pynatsd writer: connection error: {errors[0]!r}")
    finally:
        await nc.close()
    return row


def _partition_id() -> int:
    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


class NatsArrowWriter(DataSourceArrowWriter):
    """`df.write.format("pynatsd")`: publish each row once. In JetStream mode each message carries
    `<write id>/<partition>/<row>` (the id is drawn once on the driver) so a retried task is de-duplicated."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.write_id = uuid.uuid4().hex if options.stream else None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        partition = _partition_id()
        prefix = f"{self.write_id}/{partition}" if self.write_id else None
        count = asyncio.run(publish_batches(self.options, iterator, prefix))
        return Published(partition, count)


class NatsStreamArrowWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("pynatsd")`: publish each row with a deterministic message id."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        ctx = TaskContext.get()
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        partition = _partition_id()
        prefix = f"{batch_id if batch_id is not None else 'x'}/{partition}"
        if self.options.stream:
            # The query id survives restarts (it lives in the checkpoint): a batch replayed by a restarted
            # query gets the same ids as its first attempt, within the stream's duplicate window.
            query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
            prefix = f"{query_id or 'q'}/{prefix}"
        count = asyncio.run(publish_batches(self.options, iterator, prefix))
        return Published(partition, count)
