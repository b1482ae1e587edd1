"""jetstream/backup: the entries of nats-server 2.15's backup archive (`NATSARC1`), read as bytes arrive."""

from __future__ import annotations

import pytest

from pynatsd.jetstream.backup import ArchiveReader, entry


def test_archive_entries() -> None:
    reader = ArchiveReader(1 << 20)
    data = b"NATSARC1" + entry(b"a.b", -5, 7, b"NATS/1.0\r\n\r\n", b"xy") + entry(b"", 0, 0, b"", b"")
    got = [e for i in range(len(data)) for e in reader.feed(data[i : i + 1])]
    assert [(e.name, e.ts, e.seq, e.hdr_len, e.data) for e in got] == [
        (b"a.b", -5, 7, 12, b"NATS/1.0\r\n\r\nxy"),
        (b"", 0, 0, 0, b""),
    ]
    assert reader.truncation() == "EOF"
    with pytest.raises(ValueError, match="archive format"):
        ArchiveReader(1 << 20).feed(b"not an archive")
