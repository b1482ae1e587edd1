"""The RAFT log's files (pynatsd.raft.storage.FileStorage): appends written through, synced as nats-server
syncs its WAL."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pynatsd.raft.storage import SYNC_INTERVAL, FileStorage


def test_appends_are_written_through_without_a_sync_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An fsync per entry held a follower replica to ~300 entries/s (3 ms each) behind a nats-server leader
    (found by tests/raft/test_randomized.py publishing flat out): each append reaches the file at once, so
    a kill -9 loses none, and the log is synced every SYNC_INTERVAL and at close, as nats-server's WAL."""
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    storage = FileStorage(tmp_path)
    for index in range(1, 201):
        storage.append(index, b"entry %d" % index)
    assert synced == []
    after_a_crash = FileStorage(tmp_path)  # what a kill -9 leaves: nothing buffered in the process
    assert [after_a_crash.entry(i) for i in range(1, 201)] == [b"entry %d" % i for i in range(1, 201)]
    storage._synced -= SYNC_INTERVAL
    storage.append(201, b"entry 201")
    assert len(synced) == 1
    storage.append(202, b"entry 202")
    storage.sync()  # at close
    assert len(synced) == 2
