"""Soak run (`make soak`): the chaos test's long form against a pynatsd subprocess.

Well-behaved publisher/subscriber pairs move sequence-numbered messages (plus one wildcard subscriber that
sees every pair's stream) for SOAK_SECONDS while hostile clients keep injecting faults: random bytes, frames
cut mid-way, subscription storms, slowloris control lines, subscribers that never read, oversized payloads
and connection floods. At the end it checks that every well-behaved subscriber got every message exactly
once and in order, that the broker answers PING, and prints messages moved, faults, loss and the broker's
peak RSS (VmHWM). Exit status 1 on any loss, duplicate, reorder or broker death.

    SOAK_SECONDS=120 SOAK_PAIRS=4 python -m tests.soak.soak
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.servers import ServerProcess, start_server

WINDOW = 20_000  # a publisher never runs further ahead of its slowest subscriber than this
BATCH = 200  # messages written between two drains


@dataclass
class Stream:
    """One pair's subject and what its subscribers saw."""

    subject: bytes
    published: int = 0
    received: dict[str, int] = field(default_factory=dict)  # subscriber name -> next expected seq
    delivered: int = 0  # MSGs received, all subscribers together
    gaps: int = 0  # sequence numbers skipped (lost in the middle of the stream)
    errors: list[str] = field(default_factory=list)  # gaps, duplicates and reorders, as found


@dataclass
class Totals:
    faults: dict[str, int] = field(default_factory=dict)
    delivered: int = 0
    peak_rss_kb: int = 0


def vm_kb(pid: int, key: str) -> int:
    """A `VmXXX:` figure (kB) from /proc/<pid>/status; 0 when the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    await reader.readline()  # INFO
    writer.write(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
    return reader, writer


async def subscriber(
    port: int,
    name: str,
    subject: bytes,
    streams: dict[bytes, Stream],
    ready: asyncio.Event,
    done: asyncio.Event,
) -> None:
    """Reads MSGs until `done`, checking each stream's sequence: exactly once, in order."""
    reader, writer = await connect(port)
    writer.write(b"SUB %s 1\r\nPING\r\n" % subject)
    await writer.drain()
    assert await reader.readline() == b"PONG\r\n"
    for stream in streams.values():
        if subject.endswith(b">") or stream.subject == subject:
            stream.received[name] = 0
    ready.set()
    while not (
        done.is_set() and all(s.received.get(name, s.published) >= s.published for s in streams.values())
    ):
        try:
            line = await asyncio.wait_for(reader.readline(), 1.0)
        except TimeoutError:
            continue
        if not line:
            raise RuntimeError(f"{name}: connection closed by the broker")
        if line == b"PING\r\n":
            writer.write(b"PONG\r\n")
            continue
        if not line.startswith(b"MSG "):
            raise RuntimeError(f"{name}: unexpected {line!r}")
        parts = line.split()
        payload = await reader.readexactly(int(parts[-1]) + 2)
        stream = streams[parts[1]]
        seq = int(payload[:-2])
        expected = stream.received[name]
        stream.delivered += 1
        if seq != expected:
            stream.errors.append(f"{name}: got {seq}, expected {expected}")
            stream.gaps += max(0, seq - expected)
        stream.received[name] = max(expected, seq + 1)
    writer.close()


async def publisher(port: int, stream: Stream, stop: asyncio.Event) -> None:
    reader, writer = await connect(port)
    subject = stream.subject
    while not stop.is_set():
        slowest = min(stream.received.values())
        if stream.published - slowest > WINDOW:
            await asyncio.sleep(0.005)
            continue
        start = stream.published
        writer.write(
            b"".join(b"PUB %s %d\r\n%d\r\n" % (subject, len(str(i)), i) for i in range(start, start + BATCH))
        )
        stream.published += BATCH
        await writer.drain()
    writer.write(b"PING\r\n")
    await writer.drain()
    while (line := await reader.readline()) != b"PONG\r\n":
        if not line:
            raise RuntimeError("publisher: connection closed by the broker")
    writer.close()


async def fault(port: int, rng: random.Random, totals: Totals) -> None:
    """One hostile client; counts the fault it injected by kind."""
    kind = rng.choice(
        ["garbage", "cut_frame", "sub_storm", "slowloris", "never_reads", "max_payload", "flood"]
    )
    totals.faults[kind] = totals.faults.get(kind, 0) + 1
    if kind == "flood":
        conns = await asyncio.gather(
            *(asyncio.open_connection("127.0.0.1", port) for _ in range(50)), return_exceptions=True
        )
        for conn in conns:
            if isinstance(conn, tuple):
                conn[1].transport.abort()
        return
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await reader.readline()
    hold = rng.random() * 0.5
    if kind == "garbage":
        writer.write(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 500))))
    elif kind == "cut_frame":
        writer.write(b"CONNECT {}\r\nPUB soak.0 100\r\nhalf")
    elif kind == "sub_storm":
        writer.write(
            b"CONNECT {}\r\n" + b"".join(b"SUB soak.%d %d\r\nUNSUB %d\r\n" % (i, i, i) for i in range(500))
        )
    elif kind == "slowloris":
        for b in b"SUB slow":
            writer.write(bytes([b]))
            await asyncio.sleep(0.05)
    elif kind == "never_reads":
        writer.write(b"CONNECT {}\r\nSUB soak.> 1\r\n")
        hold = 1 + rng.random() * 2
    else:  # max_payload
        writer.write(b"CONNECT {}\r\nPUB soak.0 2000000\r\n")
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    await asyncio.sleep(hold)
    writer.transport.abort()


async def faults_forever(port: int, stop: asyncio.Event, totals: Totals, concurrency: int = 4) -> None:
    rng = random.Random(7)

    async def worker() -> None:
        while not stop.is_set():
            await fault(port, rng, totals)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def sample_rss(pid: int, stop: asyncio.Event, totals: Totals) -> None:
    while not stop.is_set():
        totals.peak_rss_kb = max(totals.peak_rss_kb, vm_kb(pid, "VmHWM"))
        await asyncio.sleep(1)


async def soak(server: ServerProcess, seconds: float, pairs: int) -> int:
    streams = {b"soak.%d" % i: Stream(b"soak.%d" % i) for i in range(pairs)}
    totals = Totals()
    stop, done = asyncio.Event(), asyncio.Event()
    readies = [asyncio.Event() for _ in range(pairs + 1)]
    subs = [
        asyncio.create_task(subscriber(server.port, f"sub{i}", s, streams, readies[i], done))
        for i, s in enumerate(streams)
    ]
    subs.append(
        asyncio.create_task(subscriber(server.port, "wildcard", b"soak.>", streams, readies[-1], done))
    )
    await asyncio.gather(*(r.wait() for r in readies))
    started = time.monotonic()
    pubs = [asyncio.create_task(publisher(server.port, s, stop)) for s in streams.values()]
    chaos = asyncio.create_task(faults_forever(server.port, stop, totals))
    rss = asyncio.create_task(sample_rss(server.proc.pid, stop, totals))
    next_report = started + 10
    while time.monotonic() - started < seconds:
        await asyncio.sleep(1)
        if server.proc.poll() is not None:
            break
        if time.monotonic() >= next_report:
            next_report += 10
            moved = sum(s.delivered for s in streams.values())
            faults = sum(totals.faults.values())
            print(
                f"  t={time.monotonic() - started:5.0f}s delivered={moved:,} faults={faults:,}"
                f" rss={vm_kb(server.proc.pid, 'VmRSS') / 1024:.1f} MiB",
                flush=True,
            )
    stop.set()
    await asyncio.gather(*pubs, chaos)
    published = sum(s.published for s in streams.values())
    done.set()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*subs), 60)
    elapsed = time.monotonic() - started
    totals.peak_rss_kb = max(totals.peak_rss_kb, vm_kb(server.proc.pid, "VmHWM"))
    rss.cancel()

    reader, writer = await connect(server.port)
    t0 = time.monotonic()
    writer.write(b"PING\r\n")
    await writer.drain()
    pong = await asyncio.wait_for(reader.readline(), 5)
    ping_ms = (time.monotonic() - t0) * 1000
    writer.close()

    delivered = sum(s.delivered for s in streams.values())
    # Lost = skipped in the middle + missing at the end of each subscriber's stream.
    loss = sum(
        s.gaps + sum(max(0, s.published - nxt) for nxt in s.received.values()) for s in streams.values()
    )
    errors = [e for s in streams.values() for e in s.errors]
    print(f"soak: {elapsed:.0f} s, {pairs} publisher/subscriber pairs + 1 wildcard subscriber")
    print(f"  messages published: {published:,}")
    print(f"  messages delivered: {delivered:,} ({delivered / elapsed:,.0f}/s)")
    print(f"  faults injected:    {sum(totals.faults.values()):,} {dict(sorted(totals.faults.items()))}")
    print(f"  loss:               {loss}")
    print(f"  out of sequence:    {len(errors)}{' ' + '; '.join(errors[:5]) if errors else ''}")
    print(f"  broker peak RSS:    {totals.peak_rss_kb / 1024:.1f} MiB (VmHWM)")
    print(f"  final PING:         {pong.strip().decode()} in {ping_ms:.1f} ms")
    return 0 if loss == 0 and not errors and pong == b"PONG\r\n" else 1


def main() -> int:
    seconds = float(os.environ.get("SOAK_SECONDS", "120"))
    pairs = int(os.environ.get("SOAK_PAIRS", "4"))
    with tempfile.TemporaryDirectory(prefix="soak-") as log_dir:
        server = start_server("pynatsd", log_dir=Path(log_dir))
        try:
            status = asyncio.run(soak(server, seconds, pairs))
            alive = server.proc.poll() is None
        finally:
            code = server.stop(signal.SIGTERM)
        log = server.log()
    if not alive or "Traceback" in log:
        print(f"soak: broker died or logged a traceback\n{log[-5000:]}", file=sys.stderr)
        return 1
    print(f"  broker exit:        {code}")
    return status if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
