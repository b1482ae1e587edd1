"""CPU seconds per process of a local Spark job, from /proc (Linux): the broker, the driver's Python, the
JVM, Spark's Python worker daemon and each Python worker it forked.

`snapshot()` before and after a job, `cpu_delta()` of the two: per role, the CPU seconds (user + system)
spent in between. Workers that exited in between are counted through their parent's cutime/cstime.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    cmd: str
    cpu: float  # own user + system seconds
    children_cpu: float  # waited-for children's user + system seconds


def _read(pid: int) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) "
    utime, stime, cutime, cstime = (int(x) / TICK for x in fields[11:15])
    return Proc(pid, int(fields[1]), cmd, utime + stime, cutime + cstime)


def _tree(root: int) -> dict[int, Proc]:
    procs = {p.pid: p for p in (_read(int(d)) for d in os.listdir("/proc") if d.isdigit()) if p}
    out: dict[int, Proc] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in procs:
            out[pid] = procs[pid]
            todo.extend(p.pid for p in procs.values() if p.ppid == pid)
    return out


def snapshot(broker_pid: int) -> dict[int, tuple[str, Proc]]:
    """Role and counters of the broker and of this process's tree (driver, JVM, Python workers)."""
    out: dict[int, tuple[str, Proc]] = {}
    broker = _read(broker_pid)
    if broker:
        out[broker_pid] = ("broker", broker)
    tree = _tree(os.getpid())
    daemons = {p.pid for p in tree.values() if "pyspark.daemon" in p.cmd and tree.get(p.ppid, p).cmd != p.cmd}
    for pid, p in tree.items():
        if pid == broker_pid:
            continue
        if pid == os.getpid():
            role = "driver"
        elif "java" in p.cmd.split(" ", 1)[0]:
            role = "jvm"
        elif pid in daemons:
            role = "daemon"
        elif p.ppid in daemons:
            role = f"worker-{pid}"
        else:
            role = f"other-{pid}"
        out[pid] = (role, p)
    return out


def cpu_delta(before: dict[int, tuple[str, Proc]], after: dict[int, tuple[str, Proc]]) -> dict[str, float]:
    """CPU seconds per role between two snapshots; exited children land in their parent's row."""
    out: dict[str, float] = {}
    for pid, (role, p) in after.items():
        old = before.get(pid)
        cpu = p.cpu + p.children_cpu - ((old[1].cpu + old[1].children_cpu) if old else 0.0)
        if role.startswith("worker") and old is None:
            role = "worker-new"
        out[role] = out.get(role, 0.0) + cpu
    return {k: v for k, v in out.items() if v > 0}
