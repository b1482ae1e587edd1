"""Batch and streaming writers: each Spark task publishes its rows over one connection and flushes before it
reports success, so a committed batch is on the server. Streaming messages carry a deterministic
`Nats-Msg-Id` (`<batch>/<partition>/<row>`) so consumers can drop the duplicates of a replayed batch."""

from __future__ import annotations

import asyncio
import math
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

from pynatsd.spark.natsio import connect
from pynatsd.spark.options import WriteOptions

# Spark's micro-batch execution puts the batch id in this task-local property.
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass
class Published(WriterCommitMessage):
    partition: int
    count: int


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    idx = batch.schema.get_field_index(name)
    return None if idx < 0 else batch.column(idx).to_pylist()


async def publish_batches(
    options: WriteOptions, batches: Iterator[pa.RecordBatch], msg_id_prefix: str | None
) -> int:
    """Publish every row of `batches`; returns the count once the server has acknowledged them (flush)."""
    errors: list[BaseException] = []
    nc = await connect(options.servers, options.connect_timeout, "pynatsd-spark-writer", errors, Client())
    row = 0
    try:
        for batch in batches:
            subjects = batch.column(batch.schema.get_field_index("subject")).to_pylist()
            payloads = batch.column(batch.schema.get_field_index("payload")).to_pylist()
            replies = _column(batch, "reply")
            headers = _column(batch, "headers")
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
                if msg_id_prefix is not None:
                    hdrs = hdrs or {}
                    hdrs[options.msg_id_header] = f"{msg_id_prefix}/{row}"
                reply = replies[i] if replies else None
                await publish(subject, data, reply=reply or "", headers=hdrs)
                row += 1
            if errors:
                break
        await nc.flush(math.ceil(options.flush_timeout))
        if errors:
            raise RuntimeError(f"pynatsd writer: connection error: {errors[0]!r}")
    finally:
        await nc.close()
    return row


def _partition_id() -> int:
    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


class NatsArrowWriter(DataSourceArrowWriter):
    """`df.write.format("pynatsd")`: publish each row once."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        count = asyncio.run(publish_batches(self.options, iterator, None))
        return Published(_partition_id(), count)


class NatsStreamArrowWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("pynatsd")`: publish each row with a deterministic message id."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        ctx = TaskContext.get()
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        partition = _partition_id()
        prefix = f"{batch_id if batch_id is not None else 'x'}/{partition}"
        count = asyncio.run(publish_batches(self.options, iterator, prefix))
        return Published(partition, count)
