"""Message stores for streams: one index (`base.Store`) over two payload backends (memory, files)."""

from pynatsd.jetstream.store.base import SeqList, Store, StoredMsg
from pynatsd.jetstream.store.file import FileStore
from pynatsd.jetstream.store.memory import MemoryStore

__all__ = ["FileStore", "MemoryStore", "SeqList", "Store", "StoredMsg"]
