"""The stores directly: index operations, file recovery (torn tails, purges, deletes), segment rolling."""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right
from pathlib import Path

import pytest

from pynatsd.jetstream.store import FileStore, MemoryStore, SeqList, Store
from pynatsd.jetstream.store import file as file_mod


def fill(store: Store, n: int) -> None:
    for i in range(n):
        store.append(b"s.%d" % (i % 3), b"NATS/1.0\r\nK: v\r\n\r\n" if i % 2 else None, b"x" * i, 1000 + i)


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_index_operations(tmp_path: Path, kind: str) -> None:
    store: Store = MemoryStore() if kind == "memory" else FileStore(tmp_path)
    fill(store, 10)
    assert (store.msgs, store.first_seq, store.last_seq) == (10, 1, 10)
    assert store.last_for(b"s.1") == 8
    assert store.next_seq(3, lambda s: s == b"s.1") == 5
    assert store.remove(1) and not store.remove(1)
    assert store.first_seq == 2
    assert store.purge(lambda s: s == b"s.0", keep=1) == 2
    assert sorted(store.subjects) == [b"s.0", b"s.1", b"s.2"]
    msg = store.load(2)
    assert msg is not None and (msg.subject, msg.hdrs, msg.data, msg.ts) == (
        b"s.1",
        b"NATS/1.0\r\nK: v\r\n\r\n",
        b"x",
        1001,
    )
    assert store.purge() == 7
    assert (store.msgs, store.bytes, store.first_seq, store.last_seq) == (0, 0, 11, 10)
    store.close()


def test_seq_list_is_a_sorted_list_through_removals_anywhere() -> None:
    """A subject's live sequences against a plain list: appends interleaved with removals at the front (the
    head moves, the dead prefix is cut once it is half), at the end and in the middle, and every reader."""
    rng = random.Random(34)
    seqs, model, newest = SeqList(1), [1], 1
    # Grow, drain mostly from the front (a work queue), then churn evenly.
    for weights in ((6, 2, 1, 1), (1, 7, 1, 1), (3, 3, 2, 2)):
        for _ in range(1500):
            op = rng.choices(("append", "front", "end", "middle"), weights)[0]
            if op == "append" or not model:
                newest += rng.randint(1, 3)
                seqs.append(newest)
                model.append(newest)
            else:
                victim = model[0] if op == "front" else model[-1] if op == "end" else rng.choice(model)
                seqs.discard(victim)
                model.remove(victim)
            assert len(seqs) == len(model) and bool(seqs) is bool(model) and list(seqs) == model
            if model:
                i = rng.randrange(len(model))
                assert (seqs[0], seqs[-1], seqs[i], seqs[i - len(model)]) == (
                    model[0],
                    model[-1],
                    model[i],
                    model[i],
                )
            with pytest.raises(IndexError):
                seqs[len(model)]
            probe = rng.randint(0, newest + 1)
            j, k = bisect_left(model, probe), bisect_right(model, probe)
            assert seqs.count_from(probe) == len(model) - j
            assert seqs.first_from(probe) == (model[j] if j < len(model) else 0)
            assert seqs.last_upto(probe) == (model[k - 1] if k else 0)
            n = rng.randint(-1, len(model) + 1)
            assert seqs.oldest(n) == model[: max(n, 0)]


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_work_queue_removals_from_the_front_of_one_subject(tmp_path: Path, kind: str) -> None:
    """Acking a one-subject backlog in order moves the subject's head instead of the whole array, and the
    store's readers of the subject index answer as before."""
    store: Store = MemoryStore() if kind == "memory" else FileStore(tmp_path)
    for i in range(1000):
        store.append(b"jobs" if i % 4 else b"other", None, b"x", 1000 + i)
    jobs = [seq for seq in range(1, 1001) if (seq - 1) % 4]
    for _ in range(300):
        assert store.remove(jobs.pop(0))
    assert store.subjects[b"jobs"]._head == 300  # nothing moved yet: 300 of 750 dead
    store.append(b"jobs", None, b"x", 3000)
    jobs.append(1001)
    assert store.remove(jobs.pop(len(jobs) // 2)) and store.remove(jobs.pop())
    assert list(store.subjects[b"jobs"]) == jobs and len(store.subjects[b"jobs"]) == len(jobs)
    assert store.next_seq_of(1, [b"jobs", b"none"]) == jobs[0]
    assert store.next_seq_of(jobs[-1] + 1, [b"jobs"]) is None
    assert store.count_from(jobs[10], lambda s: s == b"jobs") == len(jobs) - 10
    assert store.last_for(b"jobs") == jobs[-1]
    for _ in range(200):  # past half dead: the prefix is cut
        assert store.remove(jobs.pop(0))
    assert list(store.subjects[b"jobs"]) == jobs and store.subjects[b"jobs"]._head < 200
    assert store.purge(lambda s: s == b"jobs", keep=3) == len(jobs) - 3
    assert list(store.subjects[b"jobs"]) == jobs[-3:] and store.first_seq == 1
    assert store.remove_many(jobs[-3:]) == 3 and b"jobs" not in store.subjects
    store.close()


def test_file_recovery_keeps_state_and_cuts_torn_tail(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    fill(store, 20)
    store.remove(5)
    store.purge(upto=3)
    total_bytes = store.bytes
    store.close()
    seg = next(tmp_path.glob("*.blk"))
    good = seg.stat().st_size
    with seg.open("ab") as f:  # a record cut short by a crash
        f.write(b"".join(store._record(file_mod.MSG, 21, 9999, b"s.x", None, b"payload"))[:-3])
    again = FileStore(tmp_path)
    assert seg.stat().st_size == good
    assert (again.msgs, again.first_seq, again.last_seq, again.bytes) == (17, 3, 20, total_bytes)
    assert 5 not in again and again.load(20) is not None
    assert again.append(b"s.y", None, b"new", 5000) == 21
    again.close()


def test_file_recovery_corrupt_record(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    fill(store, 5)
    store.close()
    seg = next(tmp_path.glob("*.blk"))
    data = bytearray(seg.read_bytes())
    data[-2] ^= 0xFF  # flip a payload byte of the last record: its CRC fails
    seg.write_bytes(bytes(data))
    again = FileStore(tmp_path)
    assert (again.msgs, again.last_seq) == (4, 4)
    again.close()


def test_segments_roll_and_empty_ones_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_mod, "SEGMENT_BYTES", 4096)
    store = FileStore(tmp_path)
    for i in range(100):
        store.append(b"roll", None, b"y" * 200, i)
    assert len(list(tmp_path.glob("*.blk"))) > 3
    store.purge(upto=90)
    assert len(list(tmp_path.glob("*.blk"))) <= 2
    store.close()
    again = FileStore(tmp_path)
    assert (again.msgs, again.first_seq, again.last_seq) == (11, 90, 100)
    assert again.load(100) is not None and again.load(100).data == b"y" * 200  # type: ignore[union-attr]
    again.close()


def test_empty_stream_keeps_sequence_across_restart(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    fill(store, 3)
    store.purge()
    store.close()
    again = FileStore(tmp_path)
    assert (again.msgs, again.first_seq, again.last_seq) == (0, 4, 3)
    again.close()


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_front_trim_and_time_lookup(tmp_path: Path, kind: str) -> None:
    store: Store = MemoryStore() if kind == "memory" else FileStore(tmp_path)
    for i in range(10_000):
        store.append(b"a" if i % 2 else b"b", None, b"", 1000 + i)
    store.remove_many(list(range(1, 9000)))  # the columns' front is trimmed past here
    assert (store.msgs, store.first_seq) == (1001, 9000)
    assert store.next_seq(1) == 9000 and store.next_seq(9001, lambda s: s == b"b") == 9001
    assert store.next_seq_of(9002, [b"a", b"b"]) == 9002
    assert store.seq_for_time(1000 + 9500) == 9501 and store.seq_for_time(0) == 9000
    assert store.seq_for_time(10**9) == 10_001
    assert store.load(10_000) is not None and store.load(10) is None
    assert store.append(b"c", None, b"z", 99_999) == 10_001
    store.close()


def test_buffered_appends_written_at_commit_and_rolled_back_when_the_write_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path)
    fill(store, 4)
    assert store.pending_writes
    size = sum(p.stat().st_size for p in tmp_path.glob("*.blk"))
    store.commit()
    assert not store.pending_writes
    assert sum(p.stat().st_size for p in tmp_path.glob("*.blk")) > size
    fill(store, 3)  # sequences 5..7, buffered
    msg = store.load(6)  # a read writes the buffer first
    assert msg is not None and msg.data == b"x"
    fill(store, 2)  # 8, 9

    def full(fd: int, parts: list[bytes]) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(file_mod.os, "writev", full)
    with pytest.raises(OSError):
        store.commit()
    monkeypatch.undo()
    assert store.failed == {8, 9}
    assert (store.msgs, 8 in store, 9 in store) == (7, False, False)
    store.append(b"s.z", None, b"after", 2000)  # sequence 10 lands where the lost ones were cut off
    store.close()
    reopened = FileStore(tmp_path)
    assert (reopened.msgs, reopened.last_seq) == (8, 10)
    again = reopened.load(10)
    assert again is not None and again.data == b"after"
    reopened.close()


def test_buffered_removals_are_one_write_at_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Removals asked `buffered` (acked messages) leave the index at once and reach the file together, in
    the store's next commit: one write, after which they survive a kill -9 (a store never closed)."""
    store = FileStore(tmp_path)
    fill(store, 6)
    store.commit()
    writes: list[int] = []
    writev = file_mod.os.writev

    def counting(fd: int, parts: list[bytes]) -> int:
        writes.append(len(parts))
        return writev(fd, parts)

    monkeypatch.setattr(file_mod.os, "writev", counting)
    for seq in (2, 3, 5):
        assert store.remove_many([seq], buffered=True) == 1
    assert writes == [] and store.pending_writes
    assert (store.msgs, 3 in store) == (3, False)
    store.commit()
    assert writes == [3]
    monkeypatch.undo()
    reopened = FileStore(tmp_path)
    assert list(reopened.seqs_from(1)) == [1, 4, 6]
    reopened.close()
    store.close()


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_load_from_is_load_in_a_run(tmp_path: Path, kind: str) -> None:
    """load_from (a direct get's batch) gives what load gives, message by message: from the first stored
    sequence at or after the start, skipping removed ones and those the filter refuses, stopping at the
    limit or after the message that reaches max_bytes (subject + headers + payload), unbuffered writes
    included."""
    store: Store = MemoryStore() if kind == "memory" else FileStore(tmp_path)
    fill(store, 30)
    store.remove_many([4, 5, 17])

    def loaded(seqs: list[int]) -> list[object]:
        return [store.load(s) for s in seqs]

    live = [s for s in range(1, 31) if s not in (4, 5, 17)]
    assert store.load_from(1, 100, 1 << 30) == loaded(live)
    assert store.load_from(4, 3, 1 << 30) == loaded([6, 7, 8])  # starts at the next stored one
    assert store.load_from(31, 10, 1 << 30) == [] and store.load_from(1, 0, 1 << 30) == []
    odd = store.load_from(1, 100, 1 << 30, lambda s: s == b"s.1")
    assert odd == loaded([s for s in live if (s - 1) % 3 == 1])
    # Subject (3) + headers (18, even sequences) + payload (seq - 1): 1 -> 3, 2 -> 22, 3 -> 5: the third
    # brings the total to 30.
    assert [m.seq for m in store.load_from(1, 100, 30)] == [1, 2, 3]
    assert [m.seq for m in store.load_from(1, 100, 31)] == [1, 2, 3, 6]
    store.append(b"s.new", None, b"late", 5000)  # buffered (file): a run reads it all the same
    tail = store.load_from(30, 10, 1 << 30)
    assert [(m.seq, m.subject, m.data) for m in tail] == [(30, b"s.2", b"x" * 29), (31, b"s.new", b"late")]
    assert tail[1] == store.load(31) and tail[1] != tail[0] and "s.new" in repr(tail[1])
    store.close()


def test_file_loads_across_read_blocks_and_after_restart(tmp_path: Path) -> None:
    """A file store's loads (read through a cached block of READ_BLOCK bytes, the record located by the
    index alone) give back each message as appended: records that straddle a block's end, one larger than
    a block, empty payloads and headers, headers of every length; the same after a restart (locators
    rebuilt by recovery) and after removals."""
    store = FileStore(tmp_path)
    big = file_mod.READ_BLOCK + 12345
    expected: dict[int, tuple[bytes, bytes | None, bytes, int]] = {}
    for i in range(30_000):
        subject = b"s.%d" % (i % 7)
        hdrs = b"NATS/1.0\r\nK: %s\r\n\r\n" % (b"v" * (i % 300)) if i % 3 else None
        data = b"%d" % i * (i % 17) if i != 15_000 else b"B" * big
        seq = store.append(subject, hdrs, data, 1000 + i)
        expected[seq] = (subject, hdrs, data, 1000 + i)

    def check(s: FileStore) -> None:
        for seq, (subject, hdrs, data, ts) in expected.items():
            msg = s.load(seq)
            assert msg is not None and (msg.subject, msg.seq, msg.hdrs, msg.data, msg.ts) == (
                subject,
                seq,
                hdrs,
                data,
                ts,
            ), seq

    check(store)
    assert store.remove_many(list(range(2, 30_000, 5))) == len(range(2, 30_000, 5))
    for seq in range(2, 30_000, 5):
        del expected[seq]
    store.close()
    again = FileStore(tmp_path)
    assert again.load(2) is None
    check(again)
    again.close()


def _overwrite(store: FileStore, rounds: int, hot: int = 100, cold_every: int = 50) -> dict[bytes, int]:
    """A KV bucket's history-1 writes: `hot` keys overwritten round after round, and now and then a key
    written once (it pins its segment: without compaction no segment would ever empty). Returns each
    key's live sequence."""
    live: dict[bytes, int] = {}
    n = 0
    for r in range(rounds):
        for k in range(hot):
            key = b"kv.hot.%d" % k
            if n % cold_every == 0:
                key = b"kv.cold.%d" % n
            seq = store.append(key, None, b"%d:%d" % (r, k) * 8, 1000 + n)
            old = live.get(key)
            if old is not None:
                store.remove(old)
            live[key] = seq
            n += 1
    return live


def _disk(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*.blk"))


def test_segments_with_interior_deletes_are_compacted(tmp_path: Path) -> None:
    """Heavy overwrite with keys written once in every segment: the dead records are rewritten away, so the
    disk holds about the live data (not all that was ever written), and a restart finds exactly the live
    messages, readable, whatever segment they moved within."""
    store = FileStore(tmp_path, segment_bytes=64 * 1024)
    live = _overwrite(store, 300)
    written = store.last_seq * (file_mod._HEAD.size + 60)
    live_bytes = store.bytes
    assert store.compactions > 0
    assert _disk(tmp_path) < 2 * 64 * 1024 + 2 * live_bytes < written // 10
    for key, seq in live.items():
        msg = store.load(seq)
        assert msg is not None and msg.subject == key
    expected = {seq: store.load(seq) for seq in live.values()}
    store.close()
    again = FileStore(tmp_path, segment_bytes=64 * 1024)
    assert (again.msgs, again.last_seq, again.bytes) == (len(live), 30_000, live_bytes)
    assert {seq: again.load(seq) for seq in live.values()} == expected
    assert {key: again.last_for(key) for key in live} == live
    # More overwrites after the restart keep it bounded (what recovery learnt of the DEL records holds).
    _overwrite(again, 100)
    assert _disk(tmp_path) < 2 * 64 * 1024 + 2 * again.bytes
    again.close()


def test_compaction_keeps_deletes_of_messages_still_on_disk(tmp_path: Path) -> None:
    """A segment's DEL record for a message of an older segment that is not compacted (mostly live) stays
    through that segment's compaction: the message must not come back after a restart."""
    store = FileStore(tmp_path, segment_bytes=16 * 1024)
    for i in range(40):  # segment 1: mostly live
        store.append(b"keep.%d" % i, None, b"k" * 300, i)
    victim = 3
    for i in range(400):  # later segments: overwrites of one key, compacted
        store.append(b"hot", None, b"h" * 300, 100 + i)
        if i:
            store.remove(store.last_seq - 1)
        if i == 100:
            store.remove(victim)  # its DEL lands among the overwrites
    assert store.compactions > 0 and victim not in store
    store.close()
    again = FileStore(tmp_path, segment_bytes=16 * 1024)
    assert victim not in again and again.msgs == 40
    again.close()


_CRASH_CHILD = """
import asyncio
import sys
from pathlib import Path
from pynatsd.jetstream.store import FileStore


async def main() -> None:  # under a running loop: the rewrites go through the worker thread
    store = FileStore(Path(sys.argv[1]), segment_bytes=32 * 1024)
    live = {key: store.last_for(key) for key in list(store.subjects)}
    n = store.last_seq
    compactions = 0
    while True:
        n += 1
        key = b"kv.cold.%d" % n if n % 40 == 0 else b"kv.hot.%d" % (n % 50)
        seq = store.append(key, None, b"%d" % n * 20, n)
        store.commit()
        print(key.decode(), seq, flush=True)  # acknowledged: written (kill -9 keeps what the kernel has)
        if live.get(key):
            store.remove(live[key])
        live[key] = seq
        if store.compactions != compactions:
            compactions = store.compactions
            print("compacted", compactions, flush=True)
        await asyncio.sleep(0)


asyncio.run(main())
"""


async def test_compaction_under_a_running_loop_rewrites_in_a_worker_thread(tmp_path: Path) -> None:
    """With an event loop running, the removal that makes a segment due returns before the rewrite: a worker
    thread writes the new file (on the loop, a 4 MiB segment's rewrite stalled it 8-50 ms). Meanwhile the
    store reads, appends and removes, the moved messages too; the swap on a later turn keeps what is live
    and what was removed since stays removed, across a restart."""
    import asyncio

    store = FileStore(tmp_path, segment_bytes=64 * 1024)
    live: dict[bytes, int] = {}
    n = 0
    while not (store.compactions or store._compacting):
        key = b"kv.cold.%d" % n if n % 50 == 0 else b"kv.hot.%d" % (n % 100)
        seq = store.append(key, None, b"v%d" % n * 8, n)
        if key in live:
            store.remove(live[key])
        live[key] = seq
        n += 1
    assert store.compactions == 0  # not done on the loop
    (plan,) = store._compacting.values()
    assert plan.future is not None
    low, high = store._lowest[plan.seg], store._lowest[plan.seg + 1]  # the sequences it holds
    removed = [key for key, seq in live.items() if low <= seq < high][:3]
    assert removed
    for key in removed:
        store.remove(live.pop(key))
    for key, seq in live.items():
        msg = store.load(seq)
        assert msg is not None and msg.subject == key
    await asyncio.wrap_future(plan.future)
    await asyncio.sleep(0)
    assert store.compactions == 1 and not store._compacting and not list(tmp_path.glob("*.cmp"))
    expected = {seq: store.load(seq) for seq in live.values()}
    for key, seq in live.items():
        msg = expected[seq]
        assert msg is not None and msg.subject == key
    store.close()
    again = FileStore(tmp_path, segment_bytes=64 * 1024)
    assert {seq: again.load(seq) for seq in live.values()} == expected
    assert again.msgs == len(live) and all(again.last_for(key) == 0 for key in removed)
    again.close()


def test_kill_9_during_compaction_loses_nothing_acknowledged(tmp_path: Path) -> None:
    """A child overwrites keys through tiny segments (a compaction every few dozen writes) and is killed -9
    at random points, again and again: each restart finds every key's last acknowledged message (or a
    later one), intact, and no compaction leftover."""
    import random
    import signal
    import subprocess
    import sys
    import time

    acked: dict[str, int] = {}
    twice: set[str] = set()  # keys a kill left with their old value too (acknowledged, not yet removed)
    compacted = 0
    rng = random.Random(7)

    def take(line: str) -> None:
        nonlocal compacted
        key, number = line.split()
        if key == "compacted":
            compacted += 1
        else:
            acked[key] = int(number)
            last[0] = key

    last = [""]
    for life in range(4):
        child = subprocess.Popen(
            [sys.executable, "-c", _CRASH_CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        deadline = time.monotonic() + rng.uniform(0.4, 1.2)
        lines = 0
        # Killed at a random time, but only once this life has compacted (a loaded machine compacts later).
        while time.monotonic() < deadline or lines < 500 or compacted < 6 * (life + 1):
            take(child.stdout.readline())
            lines += 1
        child.send_signal(signal.SIGKILL)
        child.wait()
        for line in child.stdout:  # acknowledged before the kill, read after it
            if line.endswith("\n"):
                take(line)
        child.stdout.close()
        twice.add(last[0])
        store = FileStore(tmp_path, segment_bytes=32 * 1024)
        assert not list(tmp_path.glob("*.cmp"))
        for key, seq in acked.items():
            latest = store.last_for(key.encode())
            assert latest >= seq, (key, seq, latest)
            msg = store.load(latest)
            assert msg is not None and msg.data == b"%d" % msg.ts * 20
        # Nothing deleted came back (a DEL record dropped too soon would resurrect an older value): a key may
        # hold two only if the kill came between its new value and the removal of the old one.
        for subject, seqs in store.subjects.items():
            key = subject.decode()
            if len(seqs) > 1 and key not in twice:
                assert len(seqs) == 2 and seqs[-1] > acked[key], (key, list(seqs), acked[key])
                twice.add(key)
        store.close()
    assert compacted > 20
