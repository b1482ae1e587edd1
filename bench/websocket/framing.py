"""Framing micro-benchmark behind pynatsd.websocket's choice of framer (issue 22).

Decodes client (masked) frames carrying NATS PUBs as one server read would hold them, and frames a server
flush, with: pynatsd's own framer (pynatsd.websocket.framing), wsproto's sans-IO FrameProtocol, and
aiohttp's compiled WebSocketReader (fed directly, as its server does). Prints MB/s of payload, median of
--reps runs. `python bench/websocket/framing.py`
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wsproto.frame_protocol import FrameProtocol

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from pynatsd.websocket.framing import Control, Decoder, frame_header


def client_frames(size: int, count: int) -> bytes:
    """`count` masked binary frames of `size` bytes each, as a client sends them."""
    client = FrameProtocol(client=True, extensions=[])
    payload = os.urandom(size)
    return b"".join(client.send_data(payload, fin=True) for _ in range(count))


def own_decoder(data: bytes) -> Callable[[], int]:
    def run() -> int:
        dec = Decoder()
        return sum(len(x) for x in dec.feed(data) if not isinstance(x, Control))

    return run


def wsproto_decoder(data: bytes) -> Callable[[], int]:
    def run() -> int:
        proto = FrameProtocol(client=False, extensions=[])
        proto.receive_bytes(data)
        return sum(len(f.payload) for f in proto.received_frames())

    return run


def aiohttp_decoder(data: bytes) -> Callable[[], int]:
    from aiohttp._websocket.reader import WebSocketDataQueue, WebSocketReader

    class _Proto:
        _reading_paused = False

        def pause_reading(self) -> None:
            pass

    loop = asyncio.new_event_loop()

    def run() -> int:
        queue: Any = WebSocketDataQueue(_Proto(), 1 << 30, loop=loop)  # type: ignore[arg-type]
        reader = WebSocketReader(queue, 0, compress=False, decode_text=False)
        reader.feed_data(data)
        return sum(len(m.data) for m, _ in queue._buffer)

    return run


def own_encoder(pieces: list[bytes]) -> Callable[[], int]:
    def run() -> int:
        total = sum(len(p) for p in pieces)
        out = [frame_header(total), *pieces]  # handed to writelines as is
        return len(out)

    return run


def wsproto_encoder(pieces: list[bytes]) -> Callable[[], int]:
    proto = FrameProtocol(client=False, extensions=[])

    def run() -> int:
        return len(proto.send_data(b"".join(pieces), fin=True))

    return run


def measure(fn: Callable[[], int], nbytes: int, reps: int, inner: int) -> float:
    rates = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        rates.append(nbytes * inner / (time.perf_counter() - t0) / 1e6)
    return statistics.median(rates)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    read = 64 * 1024
    print(f"{'case':<34}{'own':>10}{'wsproto':>10}{'aiohttp':>10}   (MB/s of payload, median of {args.reps})")
    for size in (16, 128, 1024, 16384):
        frame = size + 64  # a PUB line plus its payload in each frame
        count = max(1, read // frame)
        data = client_frames(frame, count)
        nbytes = frame * count
        inner = max(5, 2_000_000 // nbytes)
        row = [
            measure(make(data), nbytes, args.reps, inner)
            for make in (own_decoder, wsproto_decoder, aiohttp_decoder)
        ]
        print(f"decode {count} x {frame} B frames{'':<10}"[:34] + "".join(f"{r:>10.0f}" for r in row))
    for size in (128, 65536):
        pieces = [os.urandom(size)] * 32
        nbytes = size * 32
        inner = max(50, 20_000_000 // nbytes)
        row = [measure(make(pieces), nbytes, args.reps, inner) for make in (own_encoder, wsproto_encoder)]
        print(
            f"encode flush of 32 x {size} B{'':<14}"[:34] + "".join(f"{r:>10.0f}" for r in row) + f"{'-':>10}"
        )


if __name__ == "__main__":
    main()
