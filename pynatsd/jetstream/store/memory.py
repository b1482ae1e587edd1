"""Memory storage: payloads in a dict, gone with the process (nats-server's `storage: memory`)."""

from __future__ import annotations

from pynatsd.jetstream.store.base import Locator, Removed, Store, StoredMsg


class MemoryStore(Store):
    def __init__(self) -> None:
        super().__init__()
        self._data: dict[int, tuple[bytes | None, bytes]] = {}

    def msg_size(self, subject: bytes, hdrs: bytes | None, data: bytes) -> int:
        # nats-server's memory store accounting: subject + headers + payload + 16.
        return len(subject) + (len(hdrs) if hdrs else 0) + len(data) + 16

    def _put(self, seq: int, subject: bytes, hdrs: bytes | None, data: bytes, ts: int) -> Locator:
        self._data[seq] = (hdrs, data)
        return (0, 0)

    def _get(self, seq: int, subject: bytes, ts: int, loc: Locator) -> StoredMsg | None:
        hdrs, data = self._data[seq]
        return StoredMsg(subject, seq, hdrs, data, ts)

    def _drop(self, removed: Removed, purge_to: int = 0, buffered: bool = False) -> None:
        if purge_to:
            self._data.clear()
        for seq, _ in removed:
            self._data.pop(seq, None)
