"""Chaos on loopback: a well-behaved publisher/subscriber pair must lose nothing while other clients send
garbage, disconnect abruptly, stall their reads and churn subscriptions."""

from __future__ import annotations

import asyncio
import contextlib
import random
from pathlib import Path

import pytest

from tests.servers import ServerProcess, start_server

MESSAGES = 3000
GARBAGE_CLIENTS = 20


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await reader.readline()  # INFO
    return reader, writer


async def _garbage(port: int, rng: random.Random) -> int:
    """One hostile client; returns the number of faults it injected."""
    _reader, writer = await _connect(port)
    kind = rng.randrange(4)
    if kind == 0:  # random bytes
        writer.write(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))))
    elif kind == 1:  # abrupt close mid-frame
        writer.write(b"CONNECT {}\r\nPUB seq 100\r\nhalf")
    elif kind == 2:  # subscribe storm, never read (slow consumer candidate)
        writer.write(b"CONNECT {}\r\n" + b"".join(b"SUB seq %d\r\nUNSUB %d\r\n" % (i, i) for i in range(200)))
        writer.write(b"SUB seq 9999\r\n")
    else:  # slowloris: a control line dribbled byte by byte
        for b in b"SUB sl":
            writer.write(bytes([b]))
            await asyncio.sleep(0.01)
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    await asyncio.sleep(rng.random() * 0.3)
    writer.transport.abort()
    return 1


async def _scenario(server: ServerProcess) -> None:
    rng = random.Random(7)
    sub_r, sub_w = await _connect(server.port)
    sub_w.write(b'CONNECT {"verbose":false}\r\nSUB seq 1\r\nPING\r\n')
    assert await sub_r.readline() == b"PONG\r\n"
    pub_r, pub_w = await _connect(server.port)
    pub_w.write(b'CONNECT {"verbose":false}\r\n')

    async def publish() -> None:
        for i in range(MESSAGES):
            body = str(i).encode()
            pub_w.write(b"PUB seq %d\r\n%s\r\n" % (len(body), body))
            if i % 100 == 0:
                await pub_w.drain()
                await asyncio.sleep(0)
        pub_w.write(b"PING\r\n")
        await pub_w.drain()
        assert await pub_r.readline() == b"PONG\r\n"

    async def receive() -> list[int]:
        got: list[int] = []
        while len(got) < MESSAGES:
            line = await asyncio.wait_for(sub_r.readline(), 30)
            assert line.startswith(b"MSG seq 1 "), line
            got.append(int((await sub_r.readline()).strip()))
        return got

    receiver = asyncio.create_task(receive())
    faults = await asyncio.gather(publish(), *(_garbage(server.port, rng) for _ in range(GARBAGE_CLIENTS)))
    got = await receiver
    assert got == list(range(MESSAGES)), "loss, duplicate or reorder"
    assert sum(f for f in faults if f) == GARBAGE_CLIENTS
    # Still alive and answering after the storm.
    sub_w.write(b"PING\r\n")
    assert await asyncio.wait_for(sub_r.readline(), 5) == b"PONG\r\n"
    sub_w.close()
    pub_w.close()


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_chaos_no_loss(kind: str, tmp_path: Path) -> None:
    server = start_server(kind, log_dir=tmp_path)
    try:
        asyncio.run(_scenario(server))
        assert server.proc.poll() is None, "server died"
    finally:
        server.stop()
    log = server.log()
    assert log, "server log missing"
    assert "Traceback" not in log
