"""Reading JetStream streams into Spark: offsets are stream sequences, executors fetch their own ranges.

The driver only asks the stream for its bounds and config (`$JS.API.STREAM.INFO`) and plans sequence ranges,
so no message data crosses the driver. Each task reads its range itself:

- with batched direct gets (`pynatsd.spark.directget`) when the stream allows them (`allow_direct`), the URL
  is plain `nats://` and at most one subject filter is set: measured fastest on both pynatsd and nats-server
  (no consumer to create, frames parsed straight from the socket into Arrow columns);
- otherwise through an ephemeral pull consumer (ack none) from the range's first sequence, over nats-py.

Option `fetchMode` (auto, direct, consumer) forces one of them.

Exactly-once: Spark checkpoints each micro-batch's (start, end] sequence range before running it, and a range
always yields the same messages, so a restarted query replays exactly the uncommitted ranges and a retried
task re-reads exactly its range.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import pyarrow as pa
from nats.aio.client import Client
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from pynatsd.spark.buffer import Message, MessageBuffer
from pynatsd.spark.directget import NoDirectGet, read_range_direct
from pynatsd.spark.natsio import BufferingClient, LoopThread, connect
from pynatsd.spark.options import _int, _servers
from pynatsd.spark.rawnats import Unsupported
from pynatsd.spark.reader import message_columns
from pynatsd.spark.schema import JS_READ_ARROW_SCHEMA

STATUS = "Status"  # nats-py puts a status line (e.g. "404 No Messages") under this header


@dataclass(frozen=True)
class StreamReadOptions:
    """Settings of a read over a JetStream stream (see README "Spark pipelines")."""

    servers: list[str]
    stream: str
    subjects: list[str]
    start_seq: int | None
    start_time: str | None
    latest: bool
    end_seq: int | None
    max_per_trigger: int | None
    partitions: int
    fetch_batch: int
    fetch_mode: str
    connect_timeout: float
    timeout: float

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> StreamReadOptions:
        stream = options.get("stream", "")
        if not stream:
            raise ValueError("pynatsd: option 'stream' is required for a JetStream read")
        start_seq = _int(options, "startSequence", 0, minimum=0) or None
        start_time = options.get("startTime") or None
        latest = options.get("latest", "false").lower() == "true"
        if (start_seq is not None) + (start_time is not None) + latest > 1:
            raise ValueError("pynatsd: use at most one of startSequence, startTime, latest")
        if start_time is not None:
            datetime.fromisoformat(start_time)  # fail on the driver, not in the server's parser
        return cls(
            servers=_servers(options),
            stream=stream,
            subjects=[s.strip() for s in options.get("subjects", "").split(",") if s.strip()],
            start_seq=start_seq,
            start_time=start_time,
            latest=latest,
            end_seq=_int(options, "endSequence", 0, minimum=0) or None,
            max_per_trigger=_int(options, "maxMessagesPerTrigger", 0) or None,
            partitions=_int(options, "numPartitions", 1, minimum=1),
            fetch_batch=_int(options, "fetchBatch", 10_000, minimum=1),
            fetch_mode=_fetch_mode(options.get("fetchMode", "auto")),
            connect_timeout=_int(options, "connectTimeoutMs", 5000, minimum=1) / 1000,
            timeout=_int(options, "fetchTimeoutMs", 30_000, minimum=1) / 1000,
        )

    def consumer_config(self, **deliver: Any) -> dict[str, Any]:
        """An ephemeral, unacknowledged, in-memory pull consumer over the wanted subjects."""
        cfg: dict[str, Any] = {
            "ack_policy": "none",
            "mem_storage": True,
            "inactive_threshold": 60 * 10**9,  # a task killed midway leaves nothing behind for long
            **deliver,
        }
        if len(self.subjects) == 1:
            cfg["filter_subject"] = self.subjects[0]
        elif self.subjects:
            cfg["filter_subjects"] = self.subjects
        return cfg


def _fetch_mode(mode: str) -> str:
    mode = mode.lower()
    if mode not in ("auto", "direct", "consumer"):
        raise ValueError(f"pynatsd: fetchMode must be auto, direct or consumer, not {mode!r}")
    return mode


class JsApiError(RuntimeError):
    pass


async def api(nc: Client, subject: str, body: dict[str, Any] | None, timeout: float) -> dict[str, Any]:
    """One JetStream API request; raises JsApiError on an error response."""
    msg = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=timeout)
    resp: dict[str, Any] = json.loads(msg.data)
    if "error" in resp:
        raise JsApiError(f"{subject}: {resp['error']}")
    return resp


async def create_consumer(nc: Client, opts: StreamReadOptions, cfg: dict[str, Any]) -> dict[str, Any]:
    body = {"stream_name": opts.stream, "config": cfg}
    return await api(nc, f"$JS.API.CONSUMER.CREATE.{opts.stream}", body, opts.timeout)


def close_quietly(io: LoopThread, nc: Any) -> None:
    """Close the connection (if open) and stop its loop; errors are moot when shutting down."""
    with contextlib.suppress(Exception):
        if nc is not None and not nc.is_closed:
            io.run(nc.close(), 5)
    io.stop()


def ack_coordinates(reply: str) -> tuple[int, int, int, int]:
    """(stream seq, delivery seq, timestamp ns, pending) from a `$JS.ACK...` reply subject.

    The classic form has 9 tokens; the newer one adds domain and account hash (and a trailing token).
    """
    t = reply.rsplit(".", 4) if reply.count(".") == 8 else reply.split(".")[6:11]
    return int(t[1]), int(t[2]), int(t[3]), int(t[4])


class StreamRange(InputPartition):
    """Stream sequences lo..hi (inclusive) to read in one task; `direct`: with direct gets."""

    def __init__(self, lo: int, hi: int, direct: bool = False) -> None:
        super().__init__((lo, hi, direct))
        self.lo, self.hi, self.direct = lo, hi, direct


def plan_ranges(lo: int, hi: int, parts: int, direct: bool = False) -> list[StreamRange]:
    """Split lo..hi into at most `parts` contiguous ranges of near-equal size."""
    n = hi - lo + 1
    if n <= 0:
        return []
    parts = min(parts, n)
    size = -(-n // parts)
    return [StreamRange(s, min(s + size - 1, hi), direct) for s in range(lo, hi + 1, size)]


def read_range(
    opts: StreamReadOptions, lo: int, hi: int, deliver: dict[str, Any] | None = None
) -> Iterator[pa.RecordBatch]:
    """Every message of the stream with lo <= seq <= hi (matching the filter), as Arrow batches; `deliver`
    replaces the consumer's start (from lo) by another deliver policy."""
    io = LoopThread("pynatsd-js-read")
    errors: list[BaseException] = []
    buffer = MessageBuffer(1 << 62, 1 << 62)  # bounded by the pull requests instead
    nc: Any = None
    try:
        nc = io.run(
            connect(opts.servers, opts.connect_timeout, "pynatsd-spark-js-reader", errors, BufferingClient()),
            opts.connect_timeout * 2,
        )
        inbox = nc.new_inbox()
        io.run(nc.subscribe_into(inbox, None, buffer), opts.timeout)
        cfg = opts.consumer_config(
            **(deliver or {"deliver_policy": "by_start_sequence", "opt_start_seq": lo})
        )
        info = io.run(create_consumer(nc, opts, cfg), opts.timeout + 5)
        if info.get("num_pending", 1) == 0:
            return
        next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{opts.stream}.{info['name']}"
        yield from _pull_range(opts, io, nc, inbox, next_subject, buffer, errors, lo, hi)
    finally:
        close_quietly(io, nc)  # the consumer expires by itself (inactive_threshold)


def _pull_range(
    opts: StreamReadOptions,
    io: LoopThread,
    nc: Any,
    inbox: str,
    next_subject: str,
    buffer: MessageBuffer,
    errors: list[BaseException],
    lo: int,
    hi: int,
) -> Iterator[pa.RecordBatch]:
    # Requests ask for at most what is left of the range; the next one goes out when half of the outstanding
    # messages arrived, so the server never idles on a round trip.
    budget = hi - lo + 1
    requested = received = 0
    last_dseq = 0
    while True:
        if requested < budget and requested - received <= opts.fetch_batch // 2:
            n = min(opts.fetch_batch, budget - requested)
            body = json.dumps({"batch": n, "no_wait": True}).encode()
            io.run(nc.publish(next_subject, body, reply=inbox), opts.timeout)
            requested += n
        msgs = buffer.take(opts.timeout if requested - received > 0 else 0.0)
        if errors:
            raise RuntimeError(f"pynatsd JetStream read failed: {errors[0]!r}")
        if not msgs:
            if requested - received > 0:
                raise TimeoutError(f"pynatsd: no message from stream {opts.stream} for {opts.timeout}s")
            return  # everything requested arrived and the range is not done: cannot happen, but never spin
        rows: list[Message] = []
        seqs: list[int] = []
        times: list[int] = []
        done = False
        for m in msgs:
            if m.headers and STATUS in m.headers and not m.payload:
                code = m.headers[STATUS][:3]
                if code in ("404", "408"):  # nothing more in the stream right now: the range is complete
                    done = True
                    break
                if code == "100":  # heartbeat
                    continue
                raise RuntimeError(f"pynatsd JetStream pull failed: {m.headers}")
            assert m.reply is not None
            sseq, dseq, ts, pending = ack_coordinates(m.reply)
            received += 1
            if dseq != last_dseq + 1:  # the server dropped messages (slow consumer): fail, Spark retries
                raise RuntimeError(f"pynatsd: delivery gap in stream {opts.stream} after {last_dseq}")
            last_dseq = dseq
            if sseq > hi:
                done = True
                break
            rows.append(m)
            seqs.append(sseq)
            times.append(ts // 1000)
            if sseq == hi or pending == 0:
                done = True
                break
        if rows:
            yield _record_batch(rows, seqs, times, opts.stream)
        if done:
            return


def _record_batch(msgs: Sequence[Message], seqs: list[int], times: list[int], stream: str) -> pa.RecordBatch:
    names = pa.array([stream] * len(msgs), pa.string())
    return pa.RecordBatch.from_arrays(
        [*message_columns(msgs, times), pa.array(seqs, pa.int64()), names], schema=JS_READ_ARROW_SCHEMA
    )


def read_partition(opts: StreamReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    # Spark runs one partition with value None when partitions() planned none (an empty range).
    if partition.value is None:
        return
    lo, hi, direct = partition.value
    if direct:
        try:
            yield from read_range_direct(
                opts.servers,
                opts.stream,
                opts.subjects[0] if opts.subjects else None,
                lo,
                hi,
                opts.fetch_batch,
                opts.timeout,
                opts.connect_timeout,
            )
            return
        except (Unsupported, NoDirectGet):
            # Raised before any row (at connect, or by the first answer): the consumer reads the range.
            if opts.fetch_mode == "direct":
                raise
    yield from read_range(opts, lo, hi)


class StreamAdmin:
    """Driver-side JetStream API calls (stream bounds, sequence of a time); connects lazily."""

    def __init__(self, opts: StreamReadOptions) -> None:
        self.opts = opts
        self._io: LoopThread | None = None
        self._nc: Any = None
        self._errors: list[BaseException] = []
        self.allow_direct: bool | None = None  # from the last STREAM.INFO

    def _call(self, subject: str, body: dict[str, Any] | None) -> dict[str, Any]:
        opts = self.opts
        if self._nc is None or self._nc.is_closed:
            self.close()
            self._io = LoopThread("pynatsd-js-admin")
            self._nc = self._io.run(
                connect(opts.servers, opts.connect_timeout, "pynatsd-spark-js-admin", self._errors, Client()),
                opts.connect_timeout * 2,
            )
        assert self._io is not None
        return self._io.run(api(self._nc, subject, body, opts.timeout), opts.timeout + 5)

    def bounds(self) -> tuple[int, int]:
        """(first, last) sequence of the stream; last < first when it is empty."""
        info = self._call(f"$JS.API.STREAM.INFO.{self.opts.stream}", None)
        state = info["state"]
        self.allow_direct = bool(info.get("config", {}).get("allow_direct"))
        last = int(state.get("last_seq", 0))
        return max(int(state.get("first_seq", 0)), 1), last

    def direct(self) -> bool:
        """Whether tasks should read with direct gets (see the module docstring)."""
        mode = self.opts.fetch_mode
        if mode == "consumer" or len(self.opts.subjects) > 1:
            return False
        if mode == "direct":
            return True
        if self.allow_direct is None:
            self.bounds()
        return bool(self.allow_direct)

    def seq_at(self, when: str) -> int:
        """The first sequence stored at or after `when` (ISO 8601); last + 1 when there is none."""
        deliver = {"deliver_policy": "by_start_time", "opt_start_time": _rfc3339(when)}
        for batch in read_range(replace(self.opts, fetch_batch=1), 1, 1 << 62, deliver):
            return int(
                batch.column(5)[0].as_py()
            )  # leaving the generator deletes nothing: the consumer expires
        return self.bounds()[1] + 1

    def start_offset(self) -> int:
        """The offset (last sequence already consumed) a new query starts from."""
        opts = self.opts
        if opts.start_seq is not None:
            return opts.start_seq - 1
        if opts.start_time is not None:
            return self.seq_at(opts.start_time) - 1
        first, last = self.bounds()
        return last if opts.latest else first - 1

    def close(self) -> None:
        nc, io = self._nc, self._io
        self._nc = self._io = None
        if io is not None:
            close_quietly(io, nc)


def _rfc3339(when: str) -> str:
    t = datetime.fromisoformat(when)
    if t.tzinfo is None:
        t = t.astimezone()  # a naive time is local, as Spark's own timestamps without a zone
    return t.isoformat()


def _seq(offset: dict[str, Any]) -> int:
    return int(offset["seq"])


class JetStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over a stream: offset {"seq": last sequence included}; see the module docstring."""

    def __init__(self, options: StreamReadOptions) -> None:
        self.options = options
        self._admin = StreamAdmin(options)
        self._target: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    def initialOffset(self) -> dict[str, int]:
        return {"seq": self._admin.start_offset()}

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._admin.bounds()[1]

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        begin = _seq(start)
        end = self._admin.bounds()[1]
        if self._target is not None:
            end = min(end, self._target)
        if isinstance(limit, ReadMaxRows):  # counts sequences: with a filter, a trigger may match fewer
            end = min(end, begin + limit.max_rows)
        return {"seq": max(end, begin)}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return plan_ranges(_seq(start) + 1, _seq(end), self.options.partitions, self._admin.direct())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        pass  # the stream keeps its messages; its retention policy, not this query, decides when they go

    def stop(self) -> None:
        self._admin.close()


class JetStreamBatchReader(DataSourceReader):
    """`spark.read` over a stream: sequences from the start option (default: first) to endSequence (default:
    last at planning time)."""

    def __init__(self, options: StreamReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        admin = StreamAdmin(self.options)
        try:
            lo = admin.start_offset() + 1
            hi = self.options.end_seq or admin.bounds()[1]
            direct = admin.direct()
        finally:
            admin.close()
        return plan_ranges(lo, hi, self.options.partitions, direct)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)
