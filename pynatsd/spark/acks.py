"""Publish acks for the JetStream sink, counted in bulk, and HPUB frames built for a whole Arrow batch.

A write task publishes every row with the same reply inbox and only needs to know how many publishes the
stream acknowledged and whether any was refused (acks are counted, never matched to rows: every message
carries its own Nats-Msg-Id). nats-py hands each received message to a coroutine, and even a per-frame loop
in Python costs more than the publish itself (measured: 1.1 of the writer's 2.2 µs per message went to
its acks). Here a run of ack frames is recognised by one regular expression and counted with one
`bytes.count`, so an ack costs no Python bytecode of its own.
"""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from nats.aio.client import Client
from nats.protocol.parser import CRLF_SIZE, MAX_CONTROL_LINE_SIZE

from pynatsd.spark.natsio import LaneParser

#: What a refused publish's answer contains (nats-server and pynatsd: `{"error":{…},"stream":…}`).
ERROR_MARK = b'"error"'


class AckCounter:
    """How many publishes were acknowledged, the first refusal, and a wake-up for whoever waits."""

    def __init__(self) -> None:
        self.acked = 0
        self.refused: str | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._wake_at = 0

    def add(self, count: int) -> None:
        self.acked += count
        if self._waiter is not None and self.acked >= self._wake_at:
            self._wake()

    def refuse(self, reason: str) -> None:
        if self.refused is None:
            self.refused = reason
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        self._waiter = None

    async def wait(self, count: int, timeout: float) -> None:
        """Return once `count` publishes are acknowledged; raise on a refusal or after `timeout` seconds."""
        while self.refused is None and self.acked < count:
            self._wake_at = count
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(self._waiter, timeout)
            except TimeoutError:
                raise TimeoutError(f"pynatsd writer: {count - self.acked} publish ack(s) missing") from None
        if self.refused is not None:
            raise RuntimeError(f"pynatsd writer: publish refused: {self.refused}")


class AckParser(LaneParser):
    """nats-py's parser with a lane for runs of ack frames (`MSG <inbox> <sid> <size>` + a one-line JSON
    object) addressed to the watched subscription; everything else (PING, INFO, -ERR, an HMSG status such
    as 503 no responders) goes through nats-py's own parser, and so does any ack the lane does not
    recognise (the client's `_process_msg` counts those one by one)."""

    def __init__(self, nc: Client, counter: AckCounter) -> None:
        super().__init__(nc)
        self.counter = counter
        self._run: re.Pattern[bytes] | None = None
        self._head = b""

    def watch(self, inbox: bytes, sid: int) -> None:
        self._head = b"MSG %s %d " % (inbox, sid)
        # JSON answers hold no CR or LF: a frame's payload is `{…}` up to the next CRLF.
        self._run = re.compile(rb"(?:%s\d+\r\n\{[^\r\n]*\}\r\n)+" % re.escape(self._head))

    async def parse(self, data: bytes = b"") -> None:
        run = self._run
        if run is None:
            await super().parse(data)
            return
        resumed = await self._resume(data)
        if resumed is None:
            return
        data = resumed
        m = run.match(data)
        pos = 0
        if m is not None:
            pos = m.end()
            refused = data.find(ERROR_MARK, 0, pos)
            if refused >= 0:  # the frames before the refused one are acks; it and the rest: nats-py's
                pos = data.rfind(self._head, 0, refused)
            self.counter.add(data.count(b"\r\n{", 0, pos))
        if self._partial(data, pos):
            self.buf.extend(data[pos:] if pos else data)
            return
        if pos < len(data):
            await super().parse(data[pos:] if pos else data)

    def _partial(self, data: bytes, pos: int) -> bool:
        """Whether `data[pos:]` is only the start of an ack frame (kept for the next read)."""
        if not data.startswith(self._head, pos):
            return False
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            return len(data) - pos < MAX_CONTROL_LINE_SIZE  # longer: nats-py reports the bad line
        size = data[pos + len(self._head) : eol]
        return size.isdigit() and eol + 2 + int(size) + CRLF_SIZE > len(data)


class AckingClient(Client):
    """nats-py client for a write task: its ack subscription feeds an AckCounter through `AckParser`."""

    def __init__(self) -> None:
        super().__init__()
        self.counter = AckCounter()
        self._ps: AckParser = AckParser(self, self.counter)
        self._ack_sid = -1

    async def count_acks(self) -> bytes:
        """Subscribe a fresh inbox whose answers count as acks; returns it (the publishes' reply subject)."""
        inbox = self.new_inbox()
        sub = await self.subscribe(inbox, pending_msgs_limit=0, pending_bytes_limit=0)
        self._ack_sid = sub._id
        self._ps.watch(inbox.encode(), sub._id)
        return inbox.encode()

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        if sid != self._ack_sid:
            await super()._process_msg(sid, subject, reply, data, headers)
            return
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        # A stored message's ack is {"stream":..,"seq":..[,"duplicate":true]}; a status (503: no stream
        # listens on the subject) comes as headers with an empty payload.
        if ERROR_MARK in data or not data:
            self.counter.refuse(f"{data!r} {headers!r}")
        else:
            self.counter.add(1)


def _binary(array: pa.Array) -> pa.Array:
    return pc.cast(array, pa.large_binary())


def hpub_frames(
    subjects: pa.Array, payloads: pa.Array, reply: bytes, id_header: bytes, id_prefix: bytes, first_row: int
) -> tuple[memoryview, np.ndarray]:
    """The HPUB frames of a batch's rows, row `first_row + i` carrying the header `<id_header>:
    <id_prefix>/<row>`: one buffer with every frame and the offsets of each frame in it (n + 1 of them,
    from 0), built by Arrow kernels without a Python step per row. Null payloads publish as empty; a null,
    empty or blank-holding subject raises ValueError."""
    n = len(subjects)
    bad = pc.or_kleene(
        pc.equal(pc.binary_length(subjects), 0), pc.match_substring_regex(subjects, r"[ \t\r\n]")
    )
    if subjects.null_count or pc.any(bad).as_py():
        first = pc.index(pc.fill_null(bad, True), True).as_py()
        raise ValueError(f"pynatsd writer: bad subject {subjects[first].as_py()!r}")
    rows = pa.array(np.arange(first_row, first_row + n, dtype=np.int64)).cast(pa.string())
    hdr_base = b"NATS/1.0\r\n%s: %s/" % (id_header, id_prefix)
    hdr_sizes = pc.add(pc.binary_length(rows), len(hdr_base) + 4)  # + `\r\n\r\n`
    data = pc.fill_null(_binary(payloads), b"")
    total_sizes = pc.add(hdr_sizes, pc.binary_length(data).cast(pa.int64()))
    frames = pc.binary_join_element_wise(
        pa.scalar(b"HPUB ", pa.large_binary()),
        _binary(subjects),
        pa.scalar(b" %s " % reply, pa.large_binary()),
        _binary(hdr_sizes.cast(pa.string())),
        pa.scalar(b" ", pa.large_binary()),
        _binary(total_sizes.cast(pa.string())),
        pa.scalar(b"\r\n" + hdr_base, pa.large_binary()),
        _binary(rows),
        pa.scalar(b"\r\n\r\n", pa.large_binary()),
        data,
        pa.scalar(b"\r\n", pa.large_binary()),
        pa.scalar(b"", pa.large_binary()),  # the separator
    )
    _, offsets_buf, data_buf = frames.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[frames.offset : frames.offset + n + 1]
    base = int(offsets[0])
    return memoryview(data_buf)[base : int(offsets[-1])], offsets - base
