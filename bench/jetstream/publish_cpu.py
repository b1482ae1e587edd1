"""Server CPU per acknowledged JetStream publish: the Spark sink's pattern without Spark.

A raw-socket publisher sends N messages (HPUB, 100 B, a `Nats-Msg-Id` each, its own reply inbox) to a file
stream, keeping `--window` acks in flight, and waits for every ack. The server's CPU time (utime + stime
from /proc/<pid>/stat) across the run, divided by N, is the figure; so is N over the wall time.

    python bench/jetstream/publish_cpu.py [--messages 200000] [--reps 5] [--window 20000]
                                          [--servers pynatsd,nats-server] [--profile FILE]

`--profile FILE` runs pynatsd under cProfile (one rep; set PYNATSD_NO_EXTENSIONS=1 to see the interpreted
code) and writes the stats to FILE.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.servers import free_port, nats_server_binary  # noqa: E402

CONNECT = b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n'
SIZE = 100
CHUNK = 500
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def connect(port: int) -> socket.socket:
    deadline = time.monotonic() + 20
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port))
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    while b"\r\n" not in buf:
        buf += s.recv(65536)
    s.sendall(CONNECT)
    return s


def request(s: socket.socket, subject: bytes, body: bytes) -> bytes:
    s.sendall(b"SUB _INBOX.req 99\r\nPUB %s _INBOX.req %d\r\n%s\r\nPING\r\n" % (subject, len(body), body))
    buf = b""
    while b"PONG\r\n" not in buf or b"MSG _INBOX.req" not in buf:
        buf += s.recv(65536)
    s.sendall(b"UNSUB 99\r\n")
    return buf


def run_once(pid: int, port: int, n: int, window: int, stream: str) -> tuple[float, float]:
    s = connect(port)
    subject = stream.lower().encode()
    body = b'{"name":"%s","subjects":["%s"]}' % (stream.encode(), subject)
    answer = request(s, b"$JS.API.STREAM.CREATE." + stream.encode(), body)
    if b'"error"' in answer:
        raise RuntimeError(answer.decode(errors="replace"))
    s.sendall(b"SUB _INBOX.a.* 1\r\nPING\r\n")
    buf = b""
    while b"PONG\r\n" not in buf:
        buf += s.recv(65536)
    acked = [0]
    done = threading.Event()

    def reader() -> None:
        tail = b""
        while acked[0] < n:
            data = s.recv(1 << 20)
            if not data:
                break
            both = tail + data
            acked[0] += both.count(b'"seq":') - tail.count(b'"seq":')
            tail = both[-8:]
        done.set()

    payload = b"x" * SIZE
    frames = []
    for i in range(n):
        hdr = b"NATS/1.0\r\nNats-Msg-Id: bench/0/%d\r\n\r\n" % i
        frames.append(
            b"HPUB %s _INBOX.a.%d %d %d\r\n%s%s\r\n" % (subject, i, len(hdr), len(hdr) + SIZE, hdr, payload)
        )
    thread = threading.Thread(target=reader, daemon=True)
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    thread.start()
    sent = 0
    while sent < n:
        if sent - acked[0] >= window:
            time.sleep(0.0005)
            continue
        s.sendall(b"".join(frames[sent : sent + CHUNK]))
        sent = min(n, sent + CHUNK)
    if not done.wait(120):
        raise RuntimeError(f"timeout: {acked[0]} of {n} acked")
    wall, cpu = time.monotonic() - t0, cpu_seconds(pid) - cpu0
    request(s, b"$JS.API.STREAM.DELETE." + stream.encode(), b"")
    s.close()
    return cpu / n * 1e6, n / wall


def start(kind: str, store: str, profile: str | None) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    if kind == "pynatsd":
        cmd = [sys.executable]
        if profile:
            cmd += ["-m", "cProfile", "-o", profile]
        cmd += ["-m", "pynatsd", "-js", "-sd", store]
    else:
        cmd = [str(nats_server_binary()), "-js", "-sd", store]
    cmd += ["-a", "127.0.0.1", "-p", str(port)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, port


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--window", type=int, default=20_000)
    parser.add_argument("--servers", default="pynatsd")
    parser.add_argument("--profile", default=None)
    args = parser.parse_args()
    for kind in args.servers.split(","):
        with tempfile.TemporaryDirectory() as store:
            proc, port = start(kind, store, args.profile if kind == "pynatsd" else None)
            try:
                connect(port).close()
                reps = 1 if args.profile else args.reps
                runs = [run_once(proc.pid, port, args.messages, args.window, f"B{i}") for i in range(reps)]
            finally:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
            us = [r[0] for r in runs]
            rates = [r[1] for r in runs]
            each = ", ".join(f"{u:.2f}" for u in us)
            print(
                f"{kind}: server {statistics.median(us):.2f} µs/msg (runs {each}), "
                f"{statistics.median(rates):,.0f} acked msgs/s"
            )


if __name__ == "__main__":
    main()
