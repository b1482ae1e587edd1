"""The reader's fast lane over nats-py's parser: same messages, same order, whatever the read boundaries."""

from __future__ import annotations

import random
from typing import Any

import pytest

from pynatsd.spark.buffer import MessageBuffer
from pynatsd.spark.natsio import BufferingParser
from tests.pipeline.natsclient import feed_in_reads

BUFFER_SID, OTHER_SID = 1, 2


class RecordingClient:
    """Stands in for nats-py's Client: records what its parser dispatches outside the fast lane."""

    def __init__(self) -> None:
        self.stats: dict[str, int] = {"in_msgs": 0, "in_bytes": 0}
        self.events: list[tuple[Any, ...]] = []
        self.buffer: MessageBuffer | None = None

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        self.events.append(("msg", sid, subject, reply, data, headers))
        if sid == BUFFER_SID:  # what BufferingClient does for frames the lane leaves to nats-py
            assert self.buffer is not None
            self.buffer.append(_message(subject, reply, data))

    async def _process_ping(self) -> None:
        self.events.append(("ping",))

    async def _process_pong(self) -> None:
        self.events.append(("pong",))


def _message(subject: bytes, reply: bytes, data: bytes) -> tuple[str, str | None, bytes]:
    from pynatsd.spark.buffer import Message

    return Message(subject.decode(), reply.decode() or None, None, data, 0)


def _stream(
    rng: random.Random, n: int
) -> tuple[bytes, list[tuple[str, str | None, bytes]], list[tuple[Any, ...]]]:
    """A server stream mixing buffered MSGs with frames the lane must leave alone, and what each yields."""
    out, expected, others = [], [], []
    for i in range(n):
        kind = rng.choice(["msg", "msg", "msg", "reply", "other", "hmsg", "ping", "pong"])
        payload = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 5, 100])))
        subject = f"s.{rng.randrange(3)}".encode()
        if kind == "msg":
            out.append(b"MSG %s %d %d\r\n%s\r\n" % (subject, BUFFER_SID, len(payload), payload))
            expected.append((subject.decode(), None, payload))
        elif kind == "reply":
            reply = f"_INBOX.{i}".encode()
            out.append(b"MSG %s %d %s %d\r\n%s\r\n" % (subject, BUFFER_SID, reply, len(payload), payload))
            expected.append((subject.decode(), reply.decode(), payload))
        elif kind == "other":
            out.append(b"MSG %s %d %d\r\n%s\r\n" % (subject, OTHER_SID, len(payload), payload))
            others.append(("msg", OTHER_SID, subject, b"", payload, None))
        elif kind == "hmsg":
            hdr = b"NATS/1.0\r\nK: v\r\n\r\n"
            out.append(
                b"HMSG %s %d %d %d\r\n%s%s\r\n"
                % (subject, OTHER_SID, len(hdr), len(hdr) + len(payload), hdr, payload)
            )
            others.append(("msg", OTHER_SID, subject, b"", payload, hdr))
        else:
            out.append(b"%s\r\n" % kind.upper().encode())
            others.append((kind,))
    return b"".join(out), expected, others


@pytest.mark.parametrize("seed", range(20))
def test_lane_delivers_every_message_once_in_order_across_any_split(seed: int) -> None:
    rng = random.Random(seed)
    stream, expected, others = _stream(rng, 200)
    nc = RecordingClient()
    buffer = nc.buffer = MessageBuffer(10_000, 10_000_000)
    parser = BufferingParser(nc, {BUFFER_SID: buffer})  # type: ignore[arg-type]
    feed_in_reads(parser, stream, lambda: rng.choice([1, 2, 7, 64, 500, 4096]))
    got = [(m.subject, m.reply, m.payload) for m in buffer.slice(0, buffer.end)]
    assert got == expected
    assert [e for e in nc.events if e[1:2] != (BUFFER_SID,)] == others
    assert parser.buf == b""
    lane = sum(1 for e in nc.events if e[1:2] == (BUFFER_SID,))
    assert nc.stats["in_msgs"] == len(expected) - lane  # the lane counts what it takes; nats-py the rest


def test_lane_keeps_taking_frames_cut_by_reads() -> None:
    """A read that ends mid-frame must not hand the following reads to nats-py's slow path."""
    frame = b"MSG s.1 1 100\r\n" + b"x" * 100 + b"\r\n"
    stream = frame * 500 + b"MSG s.2 2 3\r\nabc\r\n" + frame * 500  # one callback frame in the middle
    nc = RecordingClient()
    buffer = nc.buffer = MessageBuffer(10_000, 10_000_000)
    parser = BufferingParser(nc, {BUFFER_SID: buffer})  # type: ignore[arg-type]
    feed_in_reads(parser, stream, lambda: 1000)  # 1000 is no multiple of the frame length
    assert buffer.end == 1000
    # nats-py parses its own frame and the rest of that one read (< 9 frames); the lane takes the rest.
    slow = [e[1] for e in nc.events]
    assert slow[0] == OTHER_SID and len(slow) < 10, slow
    assert nc.stats["in_msgs"] == 1000 - (len(slow) - 1)
