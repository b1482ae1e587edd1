"""Profile pynatsd with py-spy while one scenario runs; print self time by function and by line.

python bench/broker/profile.py [--scenario 1-1|1-1-mix|1-1-split|queue-4|pub|pub-mix|i-1-1|i-queue-4]
                              [--size 16] [--out FILE]

py-spy samples the broker process (it needs ptrace rights: root, or kernel.yama.ptrace_scope=0).
Lines are `path:line`; "<idle/loop>" is time in uvloop's C code (socket reads and writes, polling).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.broker import scenarios  # noqa: E402
from tests.servers import start_server  # noqa: E402

ONE, MIX = [scenarios.SUBJECT], [scenarios.SUBJECT, scenarios.SUBJECT + "2"]
# name -> (publishers, subscribers, queue group, subjects published in turn, subscribed subject)
SCENARIOS: dict[str, tuple[int, int, bool, list[str], str]] = {
    "pub": (1, 0, False, ONE, scenarios.SUBJECT),
    "1-1": (1, 1, False, ONE, scenarios.SUBJECT),
    "1-1-mix": (1, 1, False, MIX, "bench.*"),
    "1-1-split": (1, 1, False, MIX, scenarios.SUBJECT),
    "pub-mix": (1, 0, False, MIX, scenarios.SUBJECT),
    "queue-4": (1, 4, True, ONE, scenarios.SUBJECT),
    "i-1-1": (1, 1, False, scenarios.interleaved(1000), "bench.*"),  # the realistic rows' traffic
    "i-queue-4": (1, 4, True, scenarios.interleaved(1000), "bench.*"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scenario", default="1-1", choices=sorted(SCENARIOS))
    ap.add_argument("--size", type=int, default=16)
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--out", help="also write the report here")
    args = ap.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    server = start_server("pynatsd")
    raw = Path(tempfile.mkdtemp()) / "profile.txt"
    try:
        scenarios.pubsub(server.port, 1, 1, 16, 50_000)  # warm-up
        rec = subprocess.Popen(
            [spy, "record", "-r", "500", "-f", "raw", "-o", str(raw), "--pid", str(server.proc.pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1)
        rates = []
        for _ in range(3):
            pubs, subs, queue, published, subscribed = SCENARIOS[args.scenario]
            args_ = (server.port, pubs, subs, args.size, args.messages, queue, 0, published, subscribed)
            r = scenarios.pubsub(*args_)
            rates.append(r["rate"])
        rec.send_signal(signal.SIGINT)
        rec.wait(30)
    finally:
        server.stop()
    by_func: collections.Counter[str] = collections.Counter()
    by_line: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        leaf = stack.split(";")[-1]
        name, _, where = leaf.partition(" (")
        n = int(count)
        total += n
        if name == "Runner.run":
            name = where = "<idle/loop>"
        by_func[name] += n
        by_line[f"{name} {where.rstrip(')')}"] += n
    lines = [
        f"pynatsd under {args.scenario}, {args.size} B: {', '.join(f'{r / 1e6:.2f}M' for r in rates)} msgs/s "
        f"while sampled; {total} samples (py-spy, 500 Hz)",
        "self time by function:",
        *(f"  {n / total:6.1%}  {k}" for k, n in by_func.most_common(12)),
        "self time by line:",
        *(f"  {n / total:6.1%}  {k}" for k, n in by_line.most_common(15)),
    ]
    report = "\n".join(lines)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
