"""Client ops as produced by the parser.

Ops are plain tuples tagged by a small int in position 0: the parser builds one per PUB on the hot path,
and a tuple costs a tenth of a dataclass instance. Layouts:

    (CONNECT, options: dict)
    (PUB,   subject: bytes, reply: bytes | None, payload: bytes, msg_tail: bytes)
        msg_tail is `[reply ]size\r\npayload\r\n`, the part of a MSG frame after the sid
        (pynatsd.protocol.encoder.msg_tail); for a canonical PUB line it is sliced from the input, not rebuilt
    (HPUB,  subject: bytes, reply: bytes | None, headers: bytes, payload: bytes)
        headers is the raw header block (`NATS/1.0…\\r\\n\\r\\n`), payload what follows it
    (PUBRUN, subject: bytes, reply: bytes | None, prefix: bytes, chunk: memoryview, count: int,
             nbytes: int, size: int)
        `count` >= 2 back-to-back canonical PUBs (`PUB subject [reply ]size\r\n`, single spaces) to one
        subject and reply, as sent, in `chunk` (a view of the read, not a copy). `prefix` (`PUB subject `)
        starts every frame, so `bytes(chunk).replace(prefix, b"MSG subject sid ")` frames every message
        for one subscriber at once — unless a payload holds `prefix` too: the result then grows by other
        than `count` times the difference, and the caller falls back to single PUBs. `nbytes` is the
        payload total; `size` is the payload size when all frames are alike but for their payloads'
        bytes (one control line, so a frame starts every `len(chunk) // count` bytes), else -1.
        Emitted only by a Parser made with `runs=True`; `pynatsd.protocol.parser.expand_run` turns it back
        into PUB ops.
    (PUBMIX, subjects: list[(subject, prefix)], chunk: memoryview, count: int, nbytes: int,
             frames: list[int], sizes: list[int])
        `count` >= 2 back-to-back canonical PUBs without a reply to a few subjects, interleaved, as
        sent in `chunk`. Each subject's frames start with its `prefix` (`PUB subject `). `frames` holds,
        for each frame, its offset in `chunk` and the index of its subject in `subjects`, one after the
        other; `sizes` the payload bytes per subject. A subscriber that receives every subject can have
        them all framed by one `replace` per subject, under the same length check as PUBRUN; others by
        slicing at the offsets. Also from `runs=True` only; `expand_run` turns it back into PUB ops.
    (SUB,   subject: bytes, queue: bytes | None, sid: bytes)
    (UNSUB, sid: bytes, max_msgs: int | None)     max_msgs -1 when given but not a valid size
    (PING,) (PONG,) (OK,)
    (ERR,   text: str)                              a client-sent -ERR
    (INFO,  info: dict)                             a client-sent INFO (ignored by the server)
"""

from __future__ import annotations

from typing import Any

CONNECT = 1
PUB = 2
HPUB = 3
SUB = 4
UNSUB = 5
PING = 6
PONG = 7
OK = 8
ERR = 9
INFO = 10
PUBRUN = 11
PUBMIX = 12

NAMES = {
    CONNECT: "CONNECT",
    PUB: "PUB",
    HPUB: "HPUB",
    SUB: "SUB",
    UNSUB: "UNSUB",
    PING: "PING",
    PONG: "PONG",
    OK: "+OK",
    ERR: "-ERR",
    INFO: "INFO",
    PUBRUN: "PUB",
    PUBMIX: "PUB",
}

Op = tuple[Any, ...]
