"""`make bench-mqtt`: MQTT 1 -> 1 publish -> subscribe msgs/s, pynatsd against nats-server's MQTT listener
and Debian's mosquitto, same run, same client and load for all three.

python bench/mqtt/run.py [--reps 3] [--rows 0-0,1-0,1-1] [--size 16] [--count0 500000] [--count1 100000]
    [--smoke]

The generator is raw MQTT 3.1.1 (tests.mqtt.conftest's packets), faster than paho: one process publishes
pre-encoded batches of PUBLISH packets to one topic (QoS 0: written back to back, then a PINGREQ whose
PINGRESP says the broker read them all; QoS 1: batches of distinct packet ids, at most WINDOW messages
not yet acknowledged, PUBACKs counted by size), one process subscribes and counts delivered PUBLISH
packets by size (every one has the same length; at QoS 1 it answers each with its PUBACK, one write per
read). A row is a publish QoS and a subscription QoS (`1-0`: QoS 1 publishes, each stored by the broker
before its PUBACK: pynatsd and nats-server in JetStream's `$MQTT_msgs`, mosquitto in memory, delivered
to a QoS 0 subscription; `1-1`: to a QoS 1 subscription, pynatsd's and nats-server's a JetStream
consumer with max_ack_pending 1024, mosquitto given as many messages in flight and an unbounded queue so
that it drops none). The rate is end to end: from the first publish to the last delivery. The brokers
run alternately (A B C A B C ...); each figure is the median of --reps runs, with the broker's CPU
(utime + stime) per message and the messages not delivered (if any). Writes bench/results/mqtt.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.mqtt.conftest import RawClient, packet, publish_packet, start_mqtt_server, subscribe_packet  # noqa: E402
from tests.servers import free_port, nats_server_binary  # noqa: E402

TOPIC = b"bench"
BATCH = 1000  # messages per write
WINDOW = 16 * BATCH  # QoS 1 messages in flight (not yet acknowledged) at most
IDLE = 10.0  # seconds without a delivery after which a subscriber stops counting (the rest: not delivered)
CONFIG = """
jetstream {{ store_dir: "{store}" }}
mqtt {{ host: 127.0.0.1, port: {mqtt_port} }}
"""
# As many QoS 1 messages in flight to a subscriber as nats-server's MQTT max_ack_pending (1024; mosquitto's
# default is 20), and no queue limit (mosquitto drops past 1000 queued; JetStream keeps them all).
MOSQUITTO_CONFIG = """listener {port} 127.0.0.1
allow_anonymous true
persistence false
max_inflight_messages 1024
max_queued_messages 0
"""


class Broker:
    """One broker under test: its MQTT port and its process (for CPU time)."""

    def __init__(self, kind: str, port: int, proc: subprocess.Popen[bytes], stop: Any) -> None:
        self.kind, self.port, self.proc, self.stop = kind, port, proc, stop

    def cpu(self) -> float:
        """Seconds of CPU (user + system) the broker process has used."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_mosquitto(tmp: Path) -> Broker:
    port = free_port()
    conf = tmp / "mosquitto.conf"
    conf.write_text(MOSQUITTO_CONFIG.format(port=port))
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while True:
        try:
            probe = RawClient(port)
            ok = probe.connect(client_id=b"probe") == 0
            probe.close()
            if ok:
                break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("mosquitto did not start")
        time.sleep(0.05)

    def stop() -> None:
        proc.terminate()
        proc.wait(10)

    return Broker("mosquitto", port, proc, stop)


def start_broker(kind: str, tmp: Path) -> Broker:
    if kind == "mosquitto":
        return start_mosquitto(tmp)
    started = start_mqtt_server(kind, tmp, CONFIG)
    return Broker(kind, started.mqtt_port, started.server.proc, started.server.stop)


def _client(port: int, client_id: bytes) -> RawClient:
    client = RawClient(port)
    client.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client.sock.settimeout(300)
    assert client.connect(client_id=client_id) == 0
    return client


def subscriber(port: int, qos: int, count: int, frame: int, pid_at: int, ready: Any, results: Any) -> None:
    """Count `count` PUBLISHes of `frame` bytes (QoS 1: acknowledged, their packet id at `pid_at`)."""
    client = _client(port, b"bench-sub")
    client.send(subscribe_packet(1, [(TOPIC, qos)]))
    assert client.read() == (0x90, b"\x00\x01" + bytes((qos,)))
    ready.put(1)
    expected = count * frame
    received = len(client.buf)
    partial = client.buf  # (QoS 1: the bytes of a PUBLISH not all read yet)
    client.sock.settimeout(IDLE)
    last = time.perf_counter()
    while received < expected:
        if qos:  # a PUBACK for each whole PUBLISH read, in one write
            whole = len(partial) // frame * frame
            if whole:
                client.sock.sendall(
                    b"".join(
                        b"\x40\x02" + partial[i + pid_at : i + pid_at + 2] for i in range(0, whole, frame)
                    )
                )
                partial = partial[whole:]
        try:
            chunk = client.sock.recv(1 << 20)
        except TimeoutError:
            break
        if not chunk:
            break
        received += len(chunk)
        if qos:
            partial += chunk
        last = time.perf_counter()
    results.put((last, received // frame))
    client.close()


def publisher(port: int, qos: int, count: int, size: int, ready: Any, go: Any, results: Any) -> None:
    client = _client(port, b"bench-pub")
    payload = b"x" * size
    if qos == 0:
        batches = [publish_packet(TOPIC, payload) * BATCH]
    else:  # distinct packet ids per batch, reused once the batch is acknowledged (WINDOW < all of them)
        topic = struct.pack(">H", len(TOPIC)) + TOPIC
        ids = [[struct.pack(">H", b * BATCH + i + 1) for i in range(BATCH)] for b in range(64)]
        batches = [b"".join(packet(0x32, topic + pid + payload) for pid in batch) for batch in ids]
    ready.put(1)
    go.wait()
    t0 = time.perf_counter()
    sent = acked = 0
    acks = b""
    while sent < count:
        client.sock.sendall(batches[(sent // BATCH) % len(batches)])
        sent += BATCH
        if qos:
            while sent - acked > WINDOW:
                acks += client.sock.recv(1 << 20)
                acked += len(acks) // 4  # PUBACKs: 4 bytes each
                acks = acks[len(acks) // 4 * 4 :]
    if qos:
        while acked < sent:
            acks += client.sock.recv(1 << 20)
            acked += len(acks) // 4
            acks = acks[len(acks) // 4 * 4 :]
    else:
        client.send(b"\xc0\x00")  # PINGREQ: answered once everything before it is read
        assert client.read() == (0xD0, b"")
    results.put(t0)
    client.close()


def one_run(broker: Broker, qos: int, sub_qos: int, count: int, size: int) -> tuple[float, float, int]:
    """(msgs/s delivered, broker CPU µs per message, messages not delivered)."""
    count = count // BATCH * BATCH
    delivered_qos = min(qos, sub_qos)
    frame = len(
        packet(
            0x30 | delivered_qos << 1,
            struct.pack(">H", len(TOPIC)) + TOPIC + b"\0\1" * delivered_qos + b"x" * size,
        )
    )
    ctx = mp.get_context("fork")
    ready, results, go, pub_results = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Queue()
    args = (broker.port, delivered_qos, count, frame, frame - size - 2, ready, results)
    sub = ctx.Process(target=subscriber, args=args)
    sub.start()
    ready.get(timeout=30)
    pub = ctx.Process(target=publisher, args=(broker.port, qos, count, size, ready, go, pub_results))
    pub.start()
    ready.get(timeout=30)
    cpu0 = broker.cpu()
    go.set()
    t0 = pub_results.get(timeout=600)
    t1, delivered = results.get(timeout=600)
    cpu = broker.cpu() - cpu0
    pub.join(30)
    sub.join(30)
    return delivered / (t1 - t0), cpu * 1e6 / max(delivered, 1), count - delivered


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rows", default="0-0,1-0,1-1", help="publish QoS - subscription QoS, comma-separated")
    ap.add_argument("--size", type=int, default=16)
    ap.add_argument("--count0", type=int, default=500_000, help="messages per QoS 0 run")
    ap.add_argument("--count1", type=int, default=100_000, help="messages per QoS 1 run")
    ap.add_argument("--brokers", default="pynatsd,nats-server,mosquitto", help="nats-server is always one")
    ap.add_argument("--smoke", action="store_true", help="seconds-long: tiny counts, one rep")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    if args.smoke:
        args.reps, args.count0, args.count1 = 1, 5_000, 2_000
    tmp = Path(tempfile.mkdtemp(prefix="bench-mqtt-"))
    kinds = tuple(dict.fromkeys([*args.brokers.split(","), "nats-server"]))  # (the ratios' reference)
    brokers: dict[str, Broker] = {}
    rows: list[dict[str, Any]] = []
    try:
        for kind in kinds:
            (tmp / kind).mkdir()
            brokers[kind] = start_broker(kind, tmp / kind)
        for qos, sub_qos in (tuple(int(q) for q in r.split("-")) for r in args.rows.split(",")):
            count = args.count1 if qos else args.count0
            for broker in brokers.values():  # warm-up (JetStream streams created, code paths hot)
                one_run(broker, qos, sub_qos, max(BATCH, count // 10), args.size)
            runs: dict[str, list[tuple[float, float, int]]] = {k: [] for k in kinds}
            for _ in range(args.reps):
                for kind, broker in brokers.items():
                    runs[kind].append(one_run(broker, qos, sub_qos, count, args.size))
            row: dict[str, Any] = {
                "qos": qos,
                "sub_qos": sub_qos,
                "size": args.size,
                "count": count,
                "runs": runs,
            }
            for kind in kinds:
                rates = [r[0] for r in runs[kind]]
                row[kind] = {
                    "min": min(rates),
                    "median": statistics.median(rates),
                    "max": max(rates),
                    "cpu_us_per_msg": statistics.median(r[1] for r in runs[kind]),
                    "not_delivered": max(r[2] for r in runs[kind]),
                }
            reference = row["nats-server"]["median"]
            for kind in kinds:
                row[kind]["ratio_to_nats_server"] = row[kind]["median"] / reference
            rows.append(row)
            for kind in kinds:
                r = row[kind]
                print(
                    f"QoS {qos}->{sub_qos} 1->1 {args.size} B {kind:>11}: median {r['median']:>9,.0f} msgs/s "
                    f"(min {r['min']:,.0f}, max {r['max']:,.0f})  ratio {r['ratio_to_nats_server']:.2f}  "
                    f"CPU {r['cpu_us_per_msg']:.2f} µs/msg  not delivered {r['not_delivered']}",
                    flush=True,
                )
    finally:
        for broker in brokers.values():
            broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    versions = {
        "nats-server": subprocess.run(
            [nats_server_binary() or "nats-server", "--version"], capture_output=True, text=True
        ).stdout.strip(),
        "mosquitto": subprocess.run(
            [shutil.which("mosquitto") or "/usr/sbin/mosquitto", "-h"], capture_output=True, text=True
        ).stdout.splitlines()[0],
    }
    report = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "reps": args.reps,
        "versions": versions,
        "rows": rows,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mqtt.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
