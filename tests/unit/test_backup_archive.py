"""jetstream/backup: nats-server 2.15's backup archive (`NATSARC1`) read as bytes arrive; the tar snapshots of
earlier servers (legacy_backup: message block records, consumer state)."""

from __future__ import annotations

import io
import struct
import tarfile

import pytest

from pynatsd.jetstream.backup import ArchiveReader, entry
from pynatsd.jetstream.legacy_backup import LegacyBackup, consumer_state


def test_archive_entries() -> None:
    reader = ArchiveReader(1 << 20)
    data = b"NATSARC1" + entry(b"a.b", -5, 7, b"NATS/1.0\r\n\r\n", b"xy") + entry(b"", 0, 0, b"", b"")
    got = [e for i in range(len(data)) for e in reader.feed(data[i : i + 1])]
    assert [(e.name, e.ts, e.seq, e.hdr_len, e.data) for e in got] == [
        (b"a.b", -5, 7, 12, b"NATS/1.0\r\n\r\nxy"),
        (b"", 0, 0, 0, b""),
    ]
    assert reader.truncation() == "EOF"
    with pytest.raises(ValueError, match="invalid archive"):
        ArchiveReader(1 << 20).feed(b"not an archive")


def test_consumer_state_of_nats_server() -> None:
    """o.dat nats-server 2.15.1 wrote: 4 delivered, the first 2 acked (seq 3 was deleted), 2 pending."""
    state = consumer_state(bytes.fromhex("16020203040502f6d1ccb00d010100020200 00".replace(" ", "")))
    assert state["delivered"] == {"consumer_seq": 4, "stream_seq": 5}
    assert state["ack_floor"] == {"consumer_seq": 2, "stream_seq": 3}
    assert {seq: p["sequence"] for seq, p in state["pending"].items()} == {"4": 3, "5": 4}
    assert "redelivered" not in state
    with pytest.raises(ValueError):
        consumer_state(b"\x16\x03")


def _record(seq: int, ts: int, subject: bytes, hdrs: bytes, data: bytes) -> bytes:
    body = subject + (struct.pack("<I", len(hdrs)) + hdrs if hdrs else b"") + data
    length = 22 + len(body) + 8
    return struct.pack("<IQqH", length | (1 << 31 if hdrs else 0), seq, ts, len(subject)) + body + b"\0" * 8


def _tar(files: dict[str, bytes]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def test_message_blocks() -> None:
    block = b"".join(
        (
            _record(1, 10, b"a", b"", b"one"),
            _record(2, 20, b"b", b"NATS/1.0\r\nK: v\r\n\r\n", b"two"),
            _record(3 | 1 << 63, 0, b"", b"", b""),  # erased
            _record(4, 40, b"a", b"", b"four"),
            _record(4 | 1 << 62, 40, b"", b"", b""),  # a tombstone: 4 was deleted later
        )
    )
    backup = LegacyBackup(_tar({"meta.inf": b'{"name":"S"}', "msgs/1.blk": block}))
    got = [(m.seq, m.ts, m.subject, m.hdrs, m.data) for m in backup.messages()]
    assert got == [(1, 10, b"a", None, b"one"), (2, 20, b"b", b"NATS/1.0\r\nK: v\r\n\r\n", b"two")]
    assert (backup.name, backup.last_seq, backup.last_ts) == ("S", 4, 40)
    with pytest.raises(ValueError, match="sanity"):
        list(LegacyBackup(_tar({"meta.inf": b"{}", "msgs/1.blk": block[:-3]})).messages())


def test_refused_tars() -> None:
    with pytest.raises(ValueError, match="encrypted"):
        LegacyBackup(_tar({"meta.inf": b"{}", "msgs/1.key": b"k"}))
    with pytest.raises(ValueError, match="unexpected content"):
        LegacyBackup(_tar({"../meta.inf": b"{}"}))
    with pytest.raises(ValueError, match="unexpected content"):
        LegacyBackup(io.BytesIO(b"no tar at all" * 100))
