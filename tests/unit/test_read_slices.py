"""Connection input in slices (issue 16): a big read is processed READ_SLICE bytes per turn of the loop, the
rest kept by reference with reading held, and reads that arrive meanwhile come after it, in order."""

from __future__ import annotations

import asyncio
from typing import Any

from pynatsd.base.options import Options
from pynatsd.broker.connection import READ_SLICE, Connection
from pynatsd.server import Server


class FakeTransport:
    """Takes writes; records pause/resume of reading."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.reading = True
        self.pauses = 0

    def write(self, data: bytes) -> None:
        self.data += data

    def writelines(self, pieces: list[bytes]) -> None:
        for piece in pieces:
            self.data += piece

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def pause_reading(self) -> None:
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def connect(server: Server, ops: bytes) -> tuple[Connection, FakeTransport]:
    conn = Connection(server)
    transport = FakeTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(b'CONNECT {"verbose":false,"pedantic":false}\r\n' + ops)
    return conn, transport


def pubs(first: int, count: int) -> bytes:
    return b"".join(b"PUB s.%d 6\r\nm%05d\r\n" % (i % 7, i) for i in range(first, first + count))


def payloads(data: bytes) -> list[bytes]:
    return [line for line in bytes(data).split(b"\r\n") if line.startswith(b"m")]


async def test_a_big_read_takes_several_turns_and_later_reads_come_after_it() -> None:
    server = Server(Options())
    server.loop = asyncio.get_running_loop()
    server.scheduler.stall.loop = server.loop
    _, sub = connect(server, b"SUB s.* 1\r\nPING\r\n")
    pub, pub_transport = connect(server, b"")
    await asyncio.sleep(0.01)
    first = pubs(0, 10_000)  # 190 KB in one read, cut mid-op wherever READ_SLICE falls
    assert len(first) > 5 * READ_SLICE
    pub.data_received(first)
    assert not pub_transport.reading and pub._input  # the rest waits for the next turn
    pub.data_received(pubs(10_000, 5))  # a read already in flight: queued behind the rest
    pub.data_received(b"PUB s.1 6\r\nm9")  # and one that ends mid-payload
    pub.data_received(b"9999\r\n")
    turns = 0
    while (pub._input or not pub_transport.reading) and turns < 100:
        await asyncio.sleep(0)
        turns += 1
    await asyncio.sleep(0)  # the last turn's flush
    assert turns >= 5  # one slice per turn
    expected = [b"m%05d" % i for i in range(10_005)] + [b"m99999"]
    assert payloads(sub.data) == expected
    assert pub_transport.reading and pub_transport.pauses >= 5
