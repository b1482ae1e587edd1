"""In-process cost of the message path: ns per message from `data_received` to the subscriber's socket
write, with fake transports (no kernel, no client). Measures the code, not the machine's network.

    python bench/broker/inproc.py [--subjects 1000] [--size 16] [--subs 1] [--messages 200000]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any


class NullTransport:
    """Takes writes and counts their bytes, like a socket that never pushes back."""

    def __init__(self) -> None:
        self.written = 0

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def writelines(self, pieces: list[bytes]) -> None:
        self.written += sum(map(len, pieces))

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def stream(subjects: int, size: int, count: int, read: int = 65536) -> list[bytes]:
    """The publisher's input as reads of `read` bytes: `count` PUBs cycling through `subjects` subjects."""
    payload = b"x" * size
    frames = [b"PUB bench.%d %d\r\n%s\r\n" % (i % subjects, size, payload) for i in range(subjects)]
    data = b"".join(frames[i % subjects] for i in range(count))
    return [data[i : i + read] for i in range(0, len(data), read)]


async def measure(subjects: int, size: int, subs: int, count: int, read: int = 65536) -> float:
    from pynatsd.base.options import Options
    from pynatsd.broker.connection import Connection
    from pynatsd.server import Server

    server = Server(Options())
    server.loop = asyncio.get_running_loop()
    server.scheduler.stall.loop = server.loop
    sinks = []
    for _ in range(subs):
        sub = Connection(server)
        transport = NullTransport()
        sub.connection_made(transport)  # type: ignore[arg-type]
        sub.data_received(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB bench.* 1\r\n')
        sinks.append(transport)
    pub = Connection(server)
    pub.connection_made(NullTransport())  # type: ignore[arg-type]
    pub.data_received(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
    reads = stream(subjects, size, count, read)
    await asyncio.sleep(0.01)  # the INFOs go out (flusher tasks), so every queue starts empty
    start = time.process_time()  # CPU time: another process taking the core does not count
    for data in reads:
        pub.data_received(data)
        while pub._input or pub._holds:  # the turns of the loop that this read takes
            await asyncio.sleep(0)
    elapsed = time.process_time() - start
    assert all(sink.written > count * size for sink in sinks), "not delivered"
    return elapsed / count * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--subjects", type=int, default=1000)
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--subs", type=int, default=1)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--read", type=int, default=65536, help="bytes per read (a client's write size)")
    args = parser.parse_args()
    runs = [
        asyncio.run(measure(args.subjects, args.size, args.subs, args.messages, args.read))
        for _ in range(args.reps)
    ]
    runs.sort()
    print(f"{runs[len(runs) // 2]:.0f} ns/msg (min {runs[0]:.0f}, max {runs[-1]:.0f})")


if __name__ == "__main__":
    main()
