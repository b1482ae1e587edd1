"""broker.outbound with a fake transport: one write per queue per turn of reads, condition-style wake-ups,
pause/resume."""

from __future__ import annotations

import asyncio

from pynatsd.broker.outbound import (
    _COMPACT_EVERY,
    _JOIN_MAX,
    STALL_BYTES,
    STALL_HOLD_MAX,
    TRIM_AFTER,
    FlushScheduler,
    Outbound,
    StallGate,
)


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.buffered = 0
        self.gathered = 0  # pieces of the last writelines call

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def writelines(self, pieces: list[bytes]) -> None:
        self.writes.append(b"".join(pieces))
        self.gathered = len(pieces)

    def get_write_buffer_size(self) -> int:
        return self.buffered


def make(max_pending: int = 1 << 20) -> tuple[Outbound, FakeTransport, FlushScheduler]:
    transport = FakeTransport()
    scheduler = FlushScheduler()
    out = Outbound(transport, scheduler, max_pending)  # type: ignore[arg-type]
    out.start(lambda exc: None)
    return out, transport, scheduler


async def test_frames_queued_during_a_read_are_written_once_after_it() -> None:
    out, transport, scheduler = make()
    scheduler.reading = True
    for i in range(100):
        out.push(b"MSG %d\r\n" % i)
    assert transport.writes == []
    assert scheduler.touched == [out]  # registered once, on the empty→non-empty transition
    scheduler.reading = False
    scheduler.flush_touched()
    assert transport.writes == [b"".join(b"MSG %d\r\n" % i for i in range(100))]
    assert out.queued == 0 and out.batches == 1


async def test_reads_ready_in_one_turn_share_one_write_per_queue() -> None:
    # 16 requests ready together, each read feeding the same responder: one write, after the last read.
    out, transport, scheduler = make()
    scheduler.stall.loop = asyncio.get_running_loop()
    for i in range(16):
        scheduler.reading = True
        out.push(b"MSG req %d\r\n" % i)
        scheduler.reading = False
        scheduler.read_done()
    assert transport.writes == []  # not yet: the other reads of this turn come first
    await asyncio.sleep(0)
    assert transport.writes == [b"".join(b"MSG req %d\r\n" % i for i in range(16))]
    assert not scheduler.scheduled and scheduler.touched == []


async def test_outside_a_read_the_flusher_task_writes() -> None:
    out, transport, _ = make()
    out.push(b"PING\r\n")
    out.push(b"PONG\r\n")
    assert transport.writes == []
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert transport.writes == [b"PING\r\nPONG\r\n"]
    out.close()


async def test_paused_transport_is_not_written_until_resumed() -> None:
    out, transport, _ = make()
    transport.buffered = 1000
    out.pause()
    assert out.hard_limit == (1 << 20) - 1000  # slow consumer past max_pending, counting the transport's
    assert out.gate == (1 << 20) // 4 * 3 - 1000  # the stall gate at 75%
    out.push(b"a")
    out.flush()
    await asyncio.sleep(0)
    assert transport.writes == []
    transport.buffered = 0
    out.resume()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert transport.writes == [b"a"]
    out.close()


async def test_pending_bytes_include_the_transport_buffer() -> None:
    out, transport, scheduler = make()
    scheduler.reading = True
    out.push(b"x" * 10)
    transport.buffered = 5
    assert out.pending_bytes == 15
    out.close()
    assert out.pending_bytes == 0 and out.frames == type(out.frames)()


async def test_closed_queue_drops_frames() -> None:
    out, transport, _ = make()
    out.close()
    out.push(b"late")
    out.flush()
    await asyncio.sleep(0)
    assert transport.writes == []


async def test_large_pieces_are_gathered_small_ones_joined() -> None:
    out, transport, scheduler = make()
    scheduler.reading = True
    out.push(b"MSG a 1 1\r\nx\r\n")
    out.push(b"y" * 100_000)  # a run framed for this connection
    scheduler.reading = False
    scheduler.flush_touched()
    assert transport.gathered == 2 and transport.writes == [b"MSG a 1 1\r\nx\r\n" + b"y" * 100_000]
    scheduler.reading = True
    for i in range(3):
        out.push(b"MSG %d\r\n" % i)
    scheduler.reading = False
    scheduler.flush_touched()
    assert transport.gathered == 2 and transport.writes[1] == b"MSG 0\r\nMSG 1\r\nMSG 2\r\n"
    out.close()


class FakeProducer:
    def __init__(self, cid: int) -> None:
        self.cid = cid
        self.closed = False
        self.events: list[str] = []

    def hold_reading(self) -> None:
        self.events.append("hold")

    def release_reading(self) -> None:
        self.events.append("release")


class FakeConsumer:
    def __init__(self, out: Outbound) -> None:
        self.out: Outbound | None = out
        self.stalls = 0


def stalled() -> tuple[Outbound, FakeTransport, StallGate, FakeConsumer, FakeProducer]:
    """A queue past its gate (900 of 1000 bytes buffered by a paused transport) and a producer that the
    read which fed it stalled."""
    out, transport, scheduler = make(max_pending=1000)
    gate = scheduler.stall
    gate.loop = asyncio.get_running_loop()
    consumer, producer = FakeConsumer(out), FakeProducer(1)
    transport.buffered = 900
    out.pause()
    gate.passed(consumer, out)
    gate.after_read(producer)
    return out, transport, gate, consumer, producer


async def test_the_gate_opens_when_the_transport_drains_or_the_queue_closes() -> None:
    out, transport, gate, consumer, producer = stalled()
    assert producer.events == ["hold"] and consumer.stalls == 1 and gate.stalled_total == 1
    out.resume()  # still 900 buffered: above the gate (750)
    assert producer.events == ["hold"] and out.gate == 750 - 900
    transport.buffered = 10
    out.resume()
    assert producer.events == ["hold", "release"] and out.gated == 0
    second = FakeProducer(2)
    gate.passed(consumer, out)
    gate.after_read(second)
    out.close()
    assert second.events == ["hold", "release"]


async def test_a_stall_ends_by_itself_and_a_closed_producer_is_forgotten() -> None:
    out, _, gate, consumer, producer = stalled()
    await asyncio.sleep(0.05)  # STALL_MIN/STALL_MAX are milliseconds
    assert producer.events == ["hold", "release"] and out.gated == 0
    gone = FakeProducer(2)
    gate.passed(consumer, out)
    gate.after_read(gone)
    gone.closed = True
    gate.forget(gone)
    assert out.gated == 0
    out.close()
    assert gone.events == ["hold"]


async def test_a_transport_closed_under_the_queue_reports_instead_of_raising() -> None:
    """uvloop refuses writes on a transport closed before its connection_lost ran: the flush made at the
    end of a producer's read must not raise into that producer."""
    transport = FakeTransport()
    failures: list[BaseException] = []

    def refuse(data: bytes) -> None:
        raise RuntimeError("unable to perform operation on <TCPTransport closed=True>")

    transport.write = refuse  # type: ignore[method-assign]
    scheduler = FlushScheduler()
    out = Outbound(transport, scheduler, 1 << 20)  # type: ignore[arg-type]
    out.start(failures.append)
    scheduler.reading = True
    out.push(b"MSG a 1 1\r\nx\r\n")
    scheduler.reading = False
    scheduler.flush_touched()
    assert [str(exc) for exc in failures] == ["unable to perform operation on <TCPTransport closed=True>"]
    assert out.closed
    out.push(b"more")
    out.flush()  # closed: nothing written, nothing raised
    assert len(failures) == 1
    out.close()


async def test_a_backlog_is_written_in_bounded_joins_in_order() -> None:
    # A paused consumer's 3.2 MiB of small frames: joined _JOIN_MAX at a time, not all at once (which held
    # the pieces and their join together: twice the backlog), and nothing reordered or lost.
    out, transport, _ = make(max_pending=64 << 20)
    out.pause()
    frames = [b"MSG bench.%d 1 16\r\n0123456789abcdef\r\n" % (i % 1000) for i in range(100_000)]
    for frame in frames:
        out.push(frame)
    assert transport.writes == []
    out.resume()
    await asyncio.sleep(0)
    assert b"".join(transport.writes) == b"".join(frames)
    assert len(transport.writes) == -(-len(b"".join(frames)) // _JOIN_MAX)
    assert all(len(w) < _JOIN_MAX + 64 for w in transport.writes)
    assert out.queued == 0 and out.frames == []
    out.close()


async def test_a_paused_queue_compacts_its_frames_in_order() -> None:
    # While the transport holds us back, every _COMPACT_EVERY bytes of message frames become one bytes (a
    # message queued by reference costs about twice its frame), the gate still counts frame bytes, and the
    # write after resume is the frames in order.
    out, transport, _ = make(max_pending=64 << 20)
    out.pause()
    head, tail = b"MSG bench.7 ", b" 16\r\n0123456789abcdef\r\n"
    sids = [b"%d" % (i % 50) for i in range(60_000)]
    past = [out.enqueue_msg(head, sid, tail) for sid in sids]
    expected = b"".join(head + sid + tail for sid in sids)
    assert len(expected) > STALL_BYTES and not past[0] and past[-1]  # the gate is passed on the way
    assert out.queued == len(expected)
    # Past the gate too, compacted every _COMPACT_EVERY bytes, not at every message.
    assert out.compacted == len(expected) // _COMPACT_EVERY
    assert all(len(chunk) >= _COMPACT_EVERY for chunk in out.frames[: out.compacted])
    assert len(out.frames) < out.compacted + 3 * _COMPACT_EVERY // len(head + b"1" + tail)
    out.resume()
    await asyncio.sleep(0)
    assert b"".join(transport.writes) == expected
    assert out.compacted == 0 and out.frames == []
    out.close()


async def test_compaction_does_not_move_the_gate() -> None:
    out, _, _ = make(max_pending=1 << 20)  # gate: 768 KiB
    out.pause()
    frame = (b"MSG s ", b"1", b" 1000\r\n" + b"x" * 1000 + b"\r\n")
    size = sum(map(len, frame))
    past = [out.enqueue_msg(*frame) for _ in range((1 << 20) // size)]
    first = past.index(True)
    assert first == out.gate // size  # the first message past 75% of max_pending, as without compaction
    assert all(past[first:]) and out.compacted >= 3
    out.close()


async def test_the_gate_bounds_pending_bytes_whatever_max_pending_allows() -> None:
    # With nats-server's default max_pending (64 MiB) its 75% gate would let a consumer behind hold 48 MiB
    # before any producer waits; the gate is at STALL_BYTES of pending bytes (queued and buffered by the
    # transport) instead, and the slow-consumer limit stays at max_pending.
    out, transport, _ = make(max_pending=64 << 20)
    assert out.gate == STALL_BYTES and out.hard_limit == 64 << 20
    transport.buffered = 300 << 10
    out.pause()
    assert out.gate == STALL_BYTES - (300 << 10) and out.hard_limit == (64 << 20) - (300 << 10)
    frame = (b"MSG s ", b"1", b" 16\r\n0123456789abcdef\r\n")
    size = sum(map(len, frame))
    past = [out.enqueue_msg(*frame) for _ in range(2 * STALL_BYTES // size)]
    assert past.index(True) == out.gate // size  # the first message that takes pending past STALL_BYTES
    out.close()
    small, _, _ = make(max_pending=1 << 20)  # a smaller max_pending keeps nats-server's 75%
    assert small.gate == (1 << 20) // 4 * 3
    small.close()


async def test_a_stall_is_renewed_while_its_queue_stays_past_the_gate() -> None:
    # A consumer without CPU for a few ms made no room: at the timer the producer waits on (up to
    # STALL_HOLD_MAX in all) rather than reading another slice into a queue already past its gate.
    out, transport, gate, _, producer = stalled()  # 900 pending, gate at 750
    gate._expired(producer.cid)
    assert producer.events == ["hold"] and out.gated == 1
    transport.buffered = 700  # drained under the gate, not yet resumed
    gate._expired(producer.cid)
    assert producer.events == ["hold", "release"] and out.gated == 0
    late = FakeProducer(2)
    transport.buffered = 900
    gate.passed(FakeConsumer(out), out)
    gate.after_read(late)
    gate._stalled[late.cid] = (*gate._stalled[late.cid][:3], gate.loop.time() - 2 * STALL_HOLD_MAX)
    gate._expired(late.cid)  # held for STALL_HOLD_MAX already: goes on toward max_pending
    assert late.events == ["hold", "release"] and out.gated == 0
    out.close()


async def test_the_c_heap_is_trimmed_once_backlogs_stop() -> None:
    # Queues written in backlogs arm one trim; it waits until none has been written for TRIM_AFTER.
    out, transport, scheduler = make(max_pending=64 << 20)
    loop = asyncio.get_running_loop()
    scheduler.stall.loop = loop
    out.pause()
    for i in range(20_000):
        out.push(b"MSG bench.%d 1 16\r\n0123456789abcdef\r\n" % (i % 1000))
    out.resume()
    await asyncio.sleep(0)
    assert len(transport.writes) > 1 and scheduler.last_backlog >= 0  # a backlog, written in chunks
    scheduler._trim()  # its timer, early: backlogs are still being written
    assert scheduler.trims == 0 and scheduler.last_backlog >= 0
    scheduler.last_backlog = loop.time() - TRIM_AFTER
    scheduler._trim()
    assert scheduler.trims == 1 and scheduler.last_backlog == -1.0
    out.close()


async def test_a_collection_is_written_by_its_producer_not_the_flusher() -> None:
    # A pull batch outside a read: what it queues waits for the producer's flush_now (its first message)
    # or the collection's end (the rest), each one write; the flusher task is not woken for it.
    out, transport, scheduler = make()
    assert scheduler.collect()
    assert not scheduler.collect()  # an inner producer leaves the writing to the outer one
    out.push(b"MSG 1\r\n")
    assert scheduler.touched == [out] and transport.writes == []
    scheduler.flush_now()
    assert transport.writes == [b"MSG 1\r\n"]
    out.push(b"MSG 2\r\n")
    out.push(b"MSG 3\r\n")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert transport.writes == [b"MSG 1\r\n"]  # the flusher was not woken
    scheduler.collected()
    assert transport.writes == [b"MSG 1\r\n", b"MSG 2\r\nMSG 3\r\n"]
    assert not scheduler.collecting and scheduler.touched == []
    scheduler.reading = True
    assert not scheduler.collect()  # within a read, the read's end writes
    scheduler.reading = False
