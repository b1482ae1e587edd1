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
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from pynatsd.spark.buffer import MessageBuffer
from pynatsd.spark.natsio import BufferingClient, connect
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


class Acks:
    """Acks of one task's JetStream publishes. Every publish carries the same reply inbox (acks are counted,
    never matched to rows), so the acks land in a MessageBuffer through the parser's fast lane with a cached
    control line (a callback per ack would cap the rate)."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.buffer = MessageBuffer(1 << 62, 1 << 62)
        self.inbox = ""
        self.acked = 0

    async def subscribe(self, nc: BufferingClient) -> None:
        self.inbox = nc.new_inbox()
        await nc.subscribe_into(self.inbox, None, self.buffer)

    async def wait(self, count: int) -> None:
        """Return once `count` publishes are acknowledged; raise on the first refused one."""
        deadline = time.monotonic() + self.options.flush_timeout
        while True:
            for m in self.buffer.take():
                # A stored message's ack is {"stream":..,"seq":..[,"duplicate":true]}; a status (503: no
                # stream listens on the subject) comes as headers with an empty payload.
                if b'"error"' in m.payload or not m.payload:
                    raise RuntimeError(f"pynatsd writer: publish refused: {m.payload!r} {m.headers}")
                self.acked += 1
            if self.acked >= count:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"pynatsd writer: {count - self.acked} publish ack(s) missing")
            await asyncio.sleep(0.001)  # the acks arrive on this same loop

    async def publish_plain(
        self, nc: BufferingClient, subjects: list[str], payloads: list[Any], prefix: str, row: int
    ) -> int:
        """Publish rows without headers of their own; returns the next row number.

        The HPUB frames are formatted here and queued in chunks: nats-py's publish() costs several times
        more per message (header validation, one queue entry each).
        """
        limit = self.options.max_pending
        reply = self.inbox.encode()
        hdr_format = b"NATS/1.0\r\n%s: %s/%%d\r\n\r\n" % (
            self.options.msg_id_header.encode(),
            prefix.encode(),
        )
        encoded: dict[str, bytes] = {}
        frames: list[bytes] = []
        for subject, payload in zip(subjects, payloads, strict=True):
            data = payload.encode() if isinstance(payload, str) else payload or b""
            subj = encoded.get(subject)
            if subj is None:
                if not subject or any(c in subject for c in " \t\r\n"):
                    raise ValueError(f"pynatsd writer: bad subject {subject!r}")
                subj = encoded[subject] = subject.encode()
            hdr = hdr_format % row
            frames.append(
                b"HPUB %s %s %d %d\r\n%s%s\r\n" % (subj, reply, len(hdr), len(hdr) + len(data), hdr, data)
            )
            row += 1
            if len(frames) >= 1000 or row - self.acked > limit:
                await self._send(nc, frames)
                frames = []
                if row - self.acked > limit:
                    await self.wait(row - limit // 2)
        await self._send(nc, frames)
        return row

    @staticmethod
    async def _send(nc: BufferingClient, frames: list[bytes]) -> None:
        if frames:
            nc.stats["out_msgs"] += len(frames)
            await nc._send_command(b"".join(frames))
            await nc._flush_pending()


async def publish_batches(
    options: WriteOptions, batches: Iterator[pa.RecordBatch], msg_id_prefix: str | None
) -> int:
    """Publish every row of `batches`; returns the count once the server has them: flushed in core mode,
    acknowledged by the stream in JetStream mode (where the `reply` column is ignored)."""
    errors: list[BaseException] = []
    acks = Acks(options) if options.stream else None
    client = BufferingClient()
    nc = await connect(options.servers, options.connect_timeout, "pynatsd-spark-writer", errors, client)
    row = 0
    try:
        if acks:
            await acks.subscribe(client)
        for batch in batches:
            subjects = batch.column(batch.schema.get_field_index("subject")).to_pylist()
            payloads = batch.column(batch.schema.get_field_index("payload")).to_pylist()
            replies = _column(batch, "reply")
            headers = _column(batch, "headers")
            publish = nc.publish
            if acks and headers is None and msg_id_prefix is not None:
                row = await acks.publish_plain(client, subjects, payloads, msg_id_prefix, row)
                if errors:
                    break
                continue
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
                reply = acks.inbox if acks else (replies[i] if replies else None)
                await publish(subject, data, reply=reply or "", headers=hdrs)
                row += 1
                if acks and row - acks.acked > options.max_pending:
                    await acks.wait(row - options.max_pending // 2)
            if errors:
                break
        await nc.flush(math.ceil(options.flush_timeout))
        if acks:
            await acks.wait(row)
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
