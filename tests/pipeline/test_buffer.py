"""The reader's bounded buffer on its own: numbering, slicing, release, overflow and restart pinning."""

from __future__ import annotations

import threading
import time

from pynatsd.spark.buffer import Message, MessageBuffer


def _msg(i: int, size: int = 1) -> Message:
    return Message(f"s.{i}", None, None, b"x" * size, i)


def test_sequence_slice_release() -> None:
    buf = MessageBuffer(100, 10_000)
    for i in range(10):
        assert buf.append(_msg(i))
    assert buf.end == 10
    assert [m.received_us for m in buf.slice(3, 6)] == [3, 4, 5]  # seq 4..6 are messages 3..5
    buf.release(5)
    assert len(buf) == 5 and buf.end == 10
    assert [m.received_us for m in buf.slice(0, 7)] == [5, 6]  # released ones are gone
    assert buf.slice(10, 10) == []


def test_overflow_drops_newest_by_count_and_bytes() -> None:
    buf = MessageBuffer(3, 10_000)
    assert [buf.append(_msg(i)) for i in range(5)] == [True, True, True, False, False]
    assert buf.dropped == 2 and buf.received == 5 and buf.end == 3
    buf.release(1)
    assert buf.append(_msg(9))  # room again after a commit
    assert [m.received_us for m in buf.slice(0, 10)] == [1, 2, 9]

    by_bytes = MessageBuffer(100, 25)
    assert [by_bytes.append(_msg(i, 10)) for i in range(3)] == [True, True, False]
    assert by_bytes.dropped == 1


def test_pin_continues_numbering_after_a_restart() -> None:
    buf = MessageBuffer(10, 1000)
    buf.append(_msg(0))
    buf.pin(500)  # restarted from a checkpoint at offset 500
    buf.pin(900)  # later calls change nothing
    assert buf.end == 501
    assert [m.received_us for m in buf.slice(500, 501)] == [0]
    assert buf.slice(0, 500) == []  # the previous run's messages cannot be replayed


def test_wait_idle_returns_after_quiet_period() -> None:
    buf = MessageBuffer(1000, 100_000)

    def feed() -> None:
        for i in range(5):
            buf.append(_msg(i))
            time.sleep(0.05)

    feeder = threading.Thread(target=feed)
    feeder.start()
    buf.wait_idle(idle=0.5, limit=10)
    feeder.join()
    assert buf.end == 5  # it waited for the burst to end
    buf.wait_idle(idle=5, limit=0.1)  # the limit bounds the wait
