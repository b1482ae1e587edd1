"""The JetStream sink's write path without Spark: frames built per batch by Arrow kernels, acks counted in
bulk (whatever the read boundaries), and what a write task does against real servers: every row acked and
stored once, a repeated task de-duplicated, a refusal failing the task."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from typing import Any

import pyarrow as pa
import pytest

from pynatsd.spark.acks import AckCounter, AckParser, hpub_frames
from pynatsd.spark.options import WriteOptions
from pynatsd.spark.writer import publish_batches
from tests.pipeline.natsclient import SyncNats, feed_in_reads
from tests.servers import ServerProcess

INBOX, ACK_SID, OTHER_SID = b"_INBOX.w", 3, 4


# -- frames ----------------------------------------------------------------------------------------------
def _expected_frame(subject: bytes, payload: bytes, reply: bytes, prefix: bytes, row: int) -> bytes:
    hdr = b"NATS/1.0\r\nNats-Msg-Id: %s/%d\r\n\r\n" % (prefix, row)
    return b"HPUB %s %s %d %d\r\n%s%s\r\n" % (subject, reply, len(hdr), len(hdr) + len(payload), hdr, payload)


@pytest.mark.parametrize("payload_type", [pa.binary(), pa.large_binary(), pa.string()])
def test_frames_match_hand_framed_hpubs(payload_type: pa.DataType) -> None:
    subjects = ["a.b", "c", "ü.x", "a.b", "d"]
    payloads: list[Any] = ["x" * 100, "", None, "é", "0123456789" * 3]
    batch = pa.RecordBatch.from_pydict(
        {"subject": subjects, "payload": pa.array(payloads, payload_type)}
    ).slice(1)  # a sliced batch: offsets must be taken relative to the slice
    frames, offsets = hpub_frames(batch.column(0), batch.column(1), INBOX, b"Nats-Msg-Id", b"q/7/1", 98)
    expected = [
        _expected_frame(s.encode(), (p or "").encode(), INBOX, b"q/7/1", 98 + i)
        for i, (s, p) in enumerate(zip(subjects[1:], payloads[1:], strict=True))
    ]
    assert bytes(frames) == b"".join(expected)
    assert list(offsets) == [sum(len(f) for f in expected[:i]) for i in range(len(expected) + 1)]


@pytest.mark.parametrize("bad", ["", "a b", "a\tb", "a\r\nPUB x 1", None])
def test_frames_refuse_bad_subjects(bad: str | None) -> None:
    subjects = pa.array(["ok", bad, "ok2"], pa.string())
    with pytest.raises(ValueError, match="bad subject"):
        hpub_frames(subjects, pa.array([b"1", b"2", b"3"]), INBOX, b"Nats-Msg-Id", b"p", 0)


# -- ack lane --------------------------------------------------------------------------------------------
class RecordingClient:
    """Stands in for AckingClient: what its parser leaves to nats-py, counted as AckingClient does."""

    def __init__(self, counter: AckCounter) -> None:
        self.stats: dict[str, int] = {"in_msgs": 0, "in_bytes": 0}
        self.counter = counter
        self.others: list[tuple[Any, ...]] = []

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        if sid == ACK_SID:
            if b'"error"' in data or not data:
                self.counter.refuse(repr(data))
            else:
                self.counter.add(1)
        else:
            self.others.append(("msg", sid, data))

    async def _process_ping(self) -> None:
        self.others.append(("ping",))

    async def _process_pong(self) -> None:
        self.others.append(("pong",))


def _ack(seq: int, duplicate: bool = False) -> bytes:
    body = b'{"stream":"S","seq":%d%s}' % (seq, b',"duplicate": true' if duplicate else b"")
    return b"MSG %s %d %d\r\n%s\r\n" % (INBOX, ACK_SID, len(body), body)


def _feed(data: bytes, rng: random.Random) -> tuple[AckCounter, RecordingClient]:
    counter = AckCounter()
    client = RecordingClient(counter)
    parser = AckParser(client, counter)  # type: ignore[arg-type]
    parser.watch(INBOX, ACK_SID)
    feed_in_reads(parser, data, lambda: rng.choice([1, 2, 7, 50, 300, 5000]))
    return counter, client


@pytest.mark.parametrize("seed", range(20))
def test_acks_counted_once_across_any_split(seed: int) -> None:
    rng = random.Random(seed)
    parts, others, n = [], [], 0
    for i in range(400):
        kind = rng.choice(["ack", "ack", "ack", "dup", "ping", "other"])
        if kind in ("ack", "dup"):
            parts.append(_ack(i * 1000 + rng.randrange(1000), kind == "dup"))
            n += 1
        elif kind == "ping":
            parts.append(b"PING\r\n")
            others.append(("ping",))
        else:
            parts.append(b"MSG x %d 2\r\n{}\r\n" % OTHER_SID)
            others.append(("msg", OTHER_SID, b"{}"))
    counter, client = _feed(b"".join(parts), rng)
    assert counter.acked == n
    assert counter.refused is None
    assert client.others == others


@pytest.mark.parametrize("seed", range(10))
def test_a_refusal_among_acks_is_reported(seed: int) -> None:
    rng = random.Random(seed)
    err = (
        b'{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},'
        b'"stream":"S","seq":0}'
    )
    refusal = b"MSG %s %d %d\r\n%s\r\n" % (INBOX, ACK_SID, len(err), err)
    at = rng.randrange(50)
    counter, _ = _feed(b"".join([_ack(i) for i in range(at)] + [refusal] + [_ack(i) for i in range(30)]), rng)
    assert counter.refused is not None and "maximum messages exceeded" in counter.refused
    assert counter.acked == at + 30


def test_a_status_instead_of_an_ack_is_a_refusal() -> None:
    status = b"NATS/1.0 503\r\n\r\n"
    frame = b"HMSG %s %d %d %d\r\n%s\r\n" % (INBOX, ACK_SID, len(status), len(status), status)
    counter, _ = _feed(_ack(1) + frame + _ack(2), random.Random(0))
    assert counter.refused is not None
    assert counter.acked == 2


# -- a write task against real servers ------------------------------------------------------------------
def _add_stream(server: ServerProcess, name: str, subjects: list[str], **config: Any) -> SyncNats:
    client = SyncNats(server.url)

    async def add() -> None:
        await client.nc.jetstream().add_stream(name=name, subjects=subjects, **config)

    client.io.run(add(), 10)
    return client


def _stream_state(client: SyncNats, name: str) -> tuple[int, list[str]]:
    """(messages, the ids of the first and last message) of a stream."""

    async def state() -> tuple[int, list[str]]:
        js = client.nc.jetstream()
        info = await js.stream_info(name)
        ids = []
        for seq in (info.state.first_seq, info.state.last_seq):
            msg = await js.get_msg(name, seq)
            ids.append((msg.headers or {}).get("Nats-Msg-Id", ""))
        return int(info.state.messages), ids

    return client.io.run(state(), 10)


def _batches(n: int, size: int, subject: str) -> list[pa.RecordBatch]:
    return [
        pa.RecordBatch.from_pydict(
            {
                "subject": [subject] * min(size, n - lo),
                "payload": [b"%d" % i for i in range(lo, min(n, lo + size))],
            }
        )
        for lo in range(0, n, size)
    ]


def test_task_publishes_every_row_once_and_a_rerun_is_deduplicated(js_broker: ServerProcess) -> None:
    client = _add_stream(js_broker, "WT", ["wt.>"])
    try:
        # A small ack window so that the task waits for acks many times within and across batches.
        options = WriteOptions.parse({"url": js_broker.url, "stream": "WT", "maxPending": "1500"})
        prefix = f"{uuid.uuid4().hex}/0"
        n = 25_000
        assert asyncio.run(publish_batches(options, iter(_batches(n, 3000, "wt.a")), prefix)) == n
        assert _stream_state(client, "WT") == (n, [f"{prefix}/0", f"{prefix}/{n - 1}"])
        # The same task again (a retry): every publish is acked as a duplicate, nothing is stored twice.
        assert asyncio.run(publish_batches(options, iter(_batches(n, 7000, "wt.a")), prefix)) == n
        assert _stream_state(client, "WT")[0] == n
        # A retry that gets further than the first attempt stores only the new rows.
        assert asyncio.run(publish_batches(options, iter(_batches(n + 10, 7000, "wt.a")), prefix)) == n + 10
        assert _stream_state(client, "WT")[0] == n + 10
    finally:
        client.close()


def test_task_fails_when_the_stream_refuses(js_broker: ServerProcess) -> None:
    client = _add_stream(js_broker, "WF", ["wf.>"], max_msgs=100, discard="new")
    try:
        options = WriteOptions.parse({"url": js_broker.url, "stream": "WF", "flushTimeoutMs": "5000"})
        with pytest.raises(RuntimeError, match=r"refused.*maximum messages"):
            asyncio.run(publish_batches(options, iter(_batches(500, 200, "wf.a")), "p/0"))
        # No stream listens: the server answers 503 no responders.
        with pytest.raises(RuntimeError, match="refused"):
            asyncio.run(publish_batches(options, iter(_batches(5, 5, "nowhere.a")), "p/1"))
        with pytest.raises(ValueError, match="bad subject"):
            asyncio.run(publish_batches(options, iter(_batches(5, 5, "wf a")), "p/2"))
    finally:
        client.close()


def test_a_rerun_after_the_duplicate_window_is_stored_again(js_broker: ServerProcess) -> None:
    # The window is in nanoseconds on the wire (nats-py takes seconds).
    client = _add_stream(js_broker, "WD", ["wd.>"], duplicate_window=1.0)
    try:
        options = WriteOptions.parse({"url": js_broker.url, "stream": "WD"})
        prefix = f"{uuid.uuid4().hex}/0"
        assert asyncio.run(publish_batches(options, iter(_batches(300, 100, "wd.a")), prefix)) == 300
        assert asyncio.run(publish_batches(options, iter(_batches(300, 100, "wd.a")), prefix)) == 300
        assert _stream_state(client, "WD")[0] == 300  # within the window: every one a duplicate
        time.sleep(1.5)
        # Past the window the ids are forgotten: the same rows are stored again, then deduplicated again.
        assert asyncio.run(publish_batches(options, iter(_batches(300, 100, "wd.a")), prefix)) == 300
        assert asyncio.run(publish_batches(options, iter(_batches(300, 100, "wd.a")), prefix)) == 300
        assert _stream_state(client, "WD") == (600, [f"{prefix}/0", f"{prefix}/299"])
    finally:
        client.close()
