"""Server CPU per message a consumer delivers: pull (fetch batches, AckAll on each batch's last message, as
bench/jetstream/run.py's nats-py row), push (ack none, a deliver subject: what an ordered consumer is) and
explicit (pull batches, every message acked on its own reply subject: what nats-py's fetch + msg.ack() does).

A stream is filled with N messages of 100 B (acked publishes), then a raw-socket client consumes them all;
the server's CPU time (utime + stime from /proc/<pid>/stat) across the consuming, divided by N, is the
figure, and N over the wall time the rate. Medians of --reps, each on a consumer of its own.

    python bench/jetstream/consume_cpu.py [--messages 200000] [--reps 5] [--batch 1000]
                                          [--modes pull,push,explicit] [--servers pynatsd,nats-server]
                                          [--storage file,memory] [--profile FILE]
                                          [--retention limits|interest|workqueue] [--subjects 1]

`--retention workqueue` (or interest) has each acked message removed (the stream refilled before each
rep, outside the measured time). `--subjects K` spreads the messages round robin over K subjects (one
subject by default: a backlog all on one subject). `--storage` picks the stream's storage (each a server
and a stream of its own); `--profile FILE` runs pynatsd under cProfile (set PYNATSD_NO_EXTENSIONS=1 to see
the interpreted code) and writes the stats to FILE (one storage's last run wins).
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.jetstream.publish_cpu import connect, cpu_seconds, request, start  # noqa: E402

SIZE = 100
STREAM = "CONS"


def fill(s: socket.socket, n: int, storage: str, retention: str = "limits", subjects: int = 1) -> None:
    body = b'{"name":"%s","subjects":["cons.>"],"storage":"%s","retention":"%s"}' % (
        STREAM.encode(),
        storage.encode(),
        retention.encode(),
    )
    answer = request(s, b"$JS.API.STREAM.CREATE." + STREAM.encode(), body)
    if b'"error"' in answer:
        raise RuntimeError(answer.decode(errors="replace"))
    s.sendall(b"SUB _INBOX.fill 90\r\n")
    names = [b"cons.a"] if subjects == 1 else [b"cons.%d" % i for i in range(subjects)]
    frames = [b"PUB %s _INBOX.fill %d\r\n%s\r\n" % (name, SIZE, b"x" * SIZE) for name in names]
    sent, acked, tail = 0, 0, b""
    while acked < n:
        if sent < n and sent - acked < 10_000:  # at most 10k acks in flight
            count = min(1000, n - sent)
            s.sendall(b"".join(frames[i % len(frames)] for i in range(sent, sent + count)))
            sent += count
            continue
        both = tail + s.recv(1 << 20)
        acked += both.count(b'"seq":') - tail.count(b'"seq":')
        tail = both[-8:]
    s.sendall(b"UNSUB 90\r\n")


def consume(s: socket.socket, mode: str, name: str, n: int, batch: int) -> None:
    """Create consumer `name` and take all n messages from it."""
    config: dict[str, object] = {"durable_name": name, "deliver_policy": "all"}
    inbox = b"_INBOX.c." + name.encode()
    if mode == "push":
        config.update(ack_policy="none", deliver_subject=inbox.decode())
    else:
        config.update(ack_policy="explicit" if mode == "explicit" else "all")
    s.sendall(b"SUB %s %s\r\n" % (inbox, name.encode()))
    body = json.dumps({"stream_name": STREAM, "config": config}).encode()
    subject = b"$JS.API.CONSUMER.CREATE.%s.%s" % (STREAM.encode(), name.encode())
    answer = request(s, subject, body)
    if b'"error"' in answer:
        raise RuntimeError(answer.decode(errors="replace"))
    # Each delivered message carries its ack subject as reply: count those ($JS.ACK. is in no payload). A
    # push consumer starts delivering before its create answer is read: those count too.
    got = answer.count(b"$JS.ACK.") if mode == "push" else 0
    tail = answer[-64:]
    next_subject = b"$JS.API.CONSUMER.MSG.NEXT.%s.%s" % (STREAM.encode(), name.encode())
    while got < n:
        want = min(batch, n - got)
        if mode != "push":
            req = b'{"batch":%d}' % want
            s.sendall(b"PUB %s %s %d\r\n%s\r\n" % (next_subject, inbox, len(req), req))
        target = got + want
        received = []
        while got < target:
            data = s.recv(1 << 20)
            received.append(data)
            both = tail + data
            got += both.count(b"$JS.ACK.") - tail.count(b"$JS.ACK.")
            tail = both[-64:]
        if mode == "explicit":  # the whole batch has arrived: ack each message on its own subject
            acks = re.findall(rb"\$JS\.ACK\.[^ \r]+", b"".join(received))
            s.sendall(b"".join(b"PUB %s 0\r\n\r\n" % ack for ack in acks))
        if mode == "pull":  # AckAll: the batch's last message acks it all
            last = both.rindex(b"$JS.ACK.")
            ack = both[last : both.index(b" ", last)]
            s.sendall(b"PUB %s 0\r\n\r\n" % ack)
    s.sendall(b"UNSUB %s\r\n" % name.encode())


def run(
    kind: str,
    storage: str,
    n: int,
    reps: int,
    batch: int,
    modes: list[str],
    profile: str | None,
    retention: str = "limits",
    subjects: int = 1,
) -> None:
    with tempfile.TemporaryDirectory() as store:
        proc, port = start(kind, store, profile)
        try:
            s = connect(port)
            fill(s, n, storage, retention, subjects)
            for mode in modes:
                us, rates = [], []
                for rep in range(reps):
                    if retention != "limits" and rep:  # the last consumer took (removed) them all
                        fill(s, n, storage, retention, subjects)
                    cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
                    consume(s, mode, f"{mode}{rep}", n, batch)
                    wall, cpu = time.monotonic() - t0, cpu_seconds(proc.pid) - cpu0
                    if retention != "limits":  # a work queue takes one consumer at a time
                        request(
                            s, b"$JS.API.CONSUMER.DELETE.%s.%s%d" % (STREAM.encode(), mode.encode(), rep), b""
                        )
                    us.append(cpu / n * 1e6)
                    rates.append(n / wall)
                each = ", ".join(f"{u:.2f}" for u in us)
                print(
                    f"{kind} {storage} {mode}: server {statistics.median(us):.2f} µs/msg (runs {each}), "
                    f"{statistics.median(rates):,.0f} msgs/s",
                    flush=True,
                )
            s.close()
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--modes", default="pull,push")
    parser.add_argument("--servers", default="pynatsd,nats-server")
    parser.add_argument("--storage", default="file")
    parser.add_argument("--profile", default=None)
    parser.add_argument("--retention", default="limits", help="limits, interest or workqueue")
    parser.add_argument("--subjects", type=int, default=1, help="subjects the messages are spread over")
    args = parser.parse_args()
    for storage in args.storage.split(","):
        for kind in args.servers.split(","):
            profile = args.profile if kind == "pynatsd" else None
            modes = args.modes.split(",")
            options = (args.messages, args.reps, args.batch, modes, profile, args.retention, args.subjects)
            run(kind, storage, *options)


if __name__ == "__main__":
    main()
