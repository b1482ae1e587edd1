"""Raw-protocol load tools for the pipeline benchmark (faster than what they measure, unlike nats-py).

python rawnats.py pub PORT SUBJECT COUNT SIZE   -> pre-encoded PUB frames written in 1000-frame chunks
python rawnats.py sub PORT SUBJECT COUNT SIZE   -> counts MSG frames by their known length; prints
                                                   "ready" once subscribed, then the CLOCK_MONOTONIC time
                                                   of the last byte
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.broker.gen import connect, ping


def pub(port: int, subject: str, count: int, size: int) -> None:
    s = connect(port)
    frame = f"PUB {subject} {size}\r\n".encode() + b"x" * size + b"\r\n"
    chunk = frame * 1000
    for _ in range(count // 1000):
        s.sendall(chunk)
    s.sendall(frame * (count % 1000))
    ping(s)  # the server has read everything
    s.close()


def sub(port: int, subject: str, count: int, size: int) -> None:
    s = connect(port)
    s.sendall(f"SUB {subject} 1\r\n".encode())
    ping(s)
    print("ready", flush=True)
    expected = len(f"MSG {subject} 1 {size}\r\n") + size + 2
    total, need = 0, expected * count
    deadline = time.monotonic() + 120
    while total < need and time.monotonic() < deadline:
        total += len(s.recv(1 << 20))
    print(time.monotonic() if total >= need else "timeout", total // expected, flush=True)


if __name__ == "__main__":
    mode, port, subject, count, size = sys.argv[1:6]
    (pub if mode == "pub" else sub)(int(port), subject, int(count), int(size))
