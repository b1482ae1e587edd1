"""Reading a stream's sequence range with batched direct gets, straight into Arrow columns.

`$JS.API.DIRECT.GET.<stream>` with `{"seq": N, "batch": B, "max_bytes": M}` (nats-server >= 2.11, pynatsd)
answers up to B messages from sequence N on, each as an HMSG to the requester's inbox whose headers say
where it came from (`Nats-Subject`, `Nats-Sequence`, `Nats-Time-Stamp`, `Nats-Num-Pending`,
`Nats-Last-Sequence`), then an end-of-batch status `204 EOB` (or `404` when nothing is there). No consumer
is created, so nothing is left behind on the server by a killed task.

A range is read in windows of `batch` sequences with two requests in flight, so the server never waits for
a round trip. Windows and ranges are sequences while a batch counts messages: with deleted messages a window's
answer may run past its end (those rows are dropped), and an answer cut short by `max_bytes` is completed by
another request for the rest of its window (its rows then come after the next window's, so a partition's
rows are only ordered when that never happens) and later windows shrink to what fit. With a subject filter
(`next_by_subj`), one request at a time, each starting after the last sequence received.

The frames of messages without headers of their own are fixed text; one regular expression match takes all
fields of such a frame at once, and everything else (statuses, messages with their own headers, a frame cut
by the socket read) goes through the connection's general frame parser.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from pynatsd.spark.rawnats import RawConnection, parse_headers
from pynatsd.spark.schema import JS_READ_ARROW_SCHEMA

IN_FLIGHT = 2  # requests outstanding: the next answer is on its way while this one is parsed
# Per answer: two in flight stay well under the servers' slow-consumer limit (64 MiB pending by default).
MAX_BYTES = 8 * 1024 * 1024


class NoDirectGet(RuntimeError):
    """The stream does not answer direct gets (allow_direct off, or no such stream)."""


def _frame_pattern(inbox: bytes) -> re.Pattern[bytes]:
    return re.compile(
        b"HMSG " + re.escape(inbox) + rb" 1 (\d+) (\d+)\r\n"
        rb"NATS/1\.0\r\nNats-Stream: [^\r]*\r\nNats-Subject: ([^\r]*)\r\nNats-Sequence: (\d+)\r\n"
        rb"Nats-Time-Stamp: ([^\r]*)\r\nNats-Num-Pending: \d+\r\nNats-Last-Sequence: \d+\r\n\r\n"
    )


class Columns:
    """Rows of one Arrow batch as they arrive."""

    def __init__(self) -> None:
        self.subjects: list[bytes] = []
        self.seqs: list[int] = []
        self.times: list[bytes] = []
        self.payloads: list[bytes] = []
        self.headers: dict[int, list[tuple[str, str]]] = {}  # row -> the message's own headers

    def __len__(self) -> int:
        return len(self.seqs)

    def record_batch(self, stream: str) -> pa.RecordBatch:
        n = len(self.seqs)
        schema = JS_READ_ARROW_SCHEMA
        map_type = schema.field(2).type
        headers = (
            pa.array([self.headers.get(i) for i in range(n)], map_type)
            if self.headers
            else pa.nulls(n, map_type)
        )
        stamps = pc.cast(pa.array(self.times, pa.binary()).cast(pa.string()), pa.timestamp("ns", "UTC"))
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.subjects, pa.binary()).cast(pa.string()),
                pa.nulls(n, pa.string()),
                headers,
                pa.array(self.payloads, pa.binary()),
                pc.cast(stamps, schema.field(4).type, safe=False),  # ns -> us, truncated
                pa.array(self.seqs, pa.int64()),
                pa.repeat(pa.scalar(stream, pa.string()), n),
            ],
            schema=schema,
        )


class Answer:
    """How one request's answer ended: last sequence sent, messages pending after it, and whether any
    message lay past the window (so the window is complete)."""

    __slots__ = ("last", "past", "pending")

    def __init__(self) -> None:
        self.last = 0
        self.pending = 0
        self.past = False


class DirectGetReader:
    """Reads lo..hi of `stream` over `conn`; see the module docstring."""

    def __init__(
        self,
        conn: RawConnection,
        stream: str,
        subject_filter: str | None,
        batch: int,
        flush_rows: int,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self.conn = conn
        self.stream = stream
        self.filter = subject_filter
        self.batch = batch
        self.flush_rows = flush_rows
        self.max_bytes = max_bytes
        self.subject = b"$JS.API.DIRECT.GET." + stream.encode()
        self.pattern = _frame_pattern(conn.inbox)
        self.cols = Columns()

    def _request(self, seq: int, batch: int) -> None:
        body: dict[str, object] = {"seq": seq, "batch": batch, "max_bytes": self.max_bytes}
        if self.filter:
            body["next_by_subj"] = self.filter
        self.conn.publish(self.subject, json.dumps(body, separators=(",", ":")).encode())

    def read(self, lo: int, hi: int) -> Iterator[pa.RecordBatch]:
        if self.filter:
            yield from self._read_filtered(lo, hi)
        else:
            yield from self._read_windows(lo, hi)
        if len(self.cols):
            yield self._take()

    def _take(self) -> pa.RecordBatch:
        cols, self.cols = self.cols, Columns()
        return cols.record_batch(self.stream)

    def _read_windows(self, lo: int, hi: int) -> Iterator[pa.RecordBatch]:
        size = self.batch
        start = lo  # the next window's first sequence
        queue: list[tuple[int, int]] = []  # requested windows whose answers are not read yet, in order
        while start <= hi or queue:
            while start <= hi and len(queue) < IN_FLIGHT:
                end = min(start + size - 1, hi)
                self._request(start, end - start + 1)
                queue.append((start, end))
                start = end + 1
            first, end = queue.pop(0)
            answer = yield from self._answer(first, end)
            if answer.last < end and not answer.past and answer.pending > 0:
                # Cut short by max_bytes: ask for the rest of this window again, and make later windows
                # small enough to fit in one answer.
                size = max(1, min(size, answer.last - first + 1))
                self._request(answer.last + 1, end - answer.last)
                queue.append((answer.last + 1, end))

    def _read_filtered(self, lo: int, hi: int) -> Iterator[pa.RecordBatch]:
        start = lo
        while start <= hi:
            self._request(start, min(self.batch, hi - start + 1))
            answer = yield from self._answer(start, hi)
            if answer.past or answer.pending == 0 or answer.last < start:
                return
            start = answer.last + 1

    def _answer(self, lo: int, hi: int) -> Generator[pa.RecordBatch, None, Answer]:
        """Take one request's answer, keeping rows with lo <= seq <= hi."""
        conn, cols, match = self.conn, self.cols, self.pattern.match
        answer = Answer()
        while True:
            buf, pos = conn.buf, conn.pos
            end_of_data = len(buf)
            subjects, seqs, times, payloads = cols.subjects, cols.seqs, cols.times, cols.payloads
            while True:
                m = match(buf, pos)
                if m is None:
                    break
                hlen, total, subject, seq_b, ts = m.groups()
                start = m.end()
                stop = start + int(total) - int(hlen)
                if stop + 2 > end_of_data:
                    break
                pos = stop + 2
                seq = int(seq_b)
                answer.last = seq
                if seq > hi:
                    answer.past = True
                    continue
                if seq < lo:
                    continue
                subjects.append(subject)
                seqs.append(seq)
                times.append(ts)
                payloads.append(buf[start:stop])
            conn.pos = pos
            if len(cols) >= self.flush_rows:
                yield self._take()
                cols = self.cols
            frame = conn.next_frame()
            if frame.op == b"-ERR":
                raise RuntimeError(f"pynatsd: server error during direct get: {frame.args}")
            if frame.op != b"HMSG" or frame.args[0] != conn.inbox:
                continue  # an async INFO, or a stray message
            status, hdrs = parse_headers(frame.headers)
            if status.startswith(b"204"):  # end of batch
                answer.pending = int(hdrs.get("Nats-Num-Pending", "0"))
                return answer
            if status.startswith(b"404"):  # nothing at or after the start
                return answer
            if status.startswith(b"503"):
                raise NoDirectGet(f"stream {self.stream} does not answer direct gets")
            if status:
                raise RuntimeError(f"pynatsd: direct get failed: {status.decode(errors='replace')}")
            seq = int(hdrs["Nats-Sequence"])
            answer.last = seq
            if seq > hi:
                answer.past = True
                continue
            if seq < lo:
                continue
            own = _own_headers(frame.headers)
            if own:
                cols.headers[len(cols)] = own
            cols.subjects.append(hdrs["Nats-Subject"].encode())
            cols.seqs.append(seq)
            cols.times.append(hdrs["Nats-Time-Stamp"].encode())
            cols.payloads.append(frame.payload)


def _own_headers(block: bytes) -> list[tuple[str, str]]:
    """The message's own headers: the server appends its six `Nats-*` lines after them."""
    cut = block.rfind(b"\r\nNats-Stream: ")
    if cut < 0:
        return []
    out = []
    for line in block[:cut].split(b"\r\n")[1:]:
        key, sep, value = line.partition(b":")
        if sep:
            out.append((key.decode(), value.strip().decode()))
    return list(dict(out).items())  # one value per key, as the map column holds


def read_range_direct(
    servers: list[str],
    stream: str,
    subject_filter: str | None,
    lo: int,
    hi: int,
    batch: int,
    timeout: float,
    connect_timeout: float,
    flush_rows: int = 50_000,
    max_bytes: int = MAX_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Every message with lo <= seq <= hi (matching the filter) as Arrow batches of the JetStream schema."""
    conn = RawConnection.open(servers, connect_timeout, "pynatsd-spark-js-reader")
    try:
        conn.sock.settimeout(timeout)
        reader = DirectGetReader(conn, stream, subject_filter, batch, flush_rows, max_bytes)
        yield from reader.read(lo, hi)
    finally:
        conn.close()
