"""Entries of the meta group `_meta_` as nats-server 2.15 proposes them: an op byte, then the stream or
consumer assignment as JSON (one line, as Go's json.Encoder writes it), or for a compressed consumer
assignment the same JSON in an S2 stream. A meta snapshot
is the JSON array of the stream assignments (each with its `consumers`) in one S2 block."""

from __future__ import annotations

import enum
import json
from typing import Any

from pynatsd.base.s2 import S2Decoder, S2Error, decode_block


class EntryOp(enum.IntEnum):
    """nats-server's entryOp (only ever appended to, so the values are the wire's)."""

    ASSIGN_STREAM = 0
    ASSIGN_CONSUMER = 1
    REMOVE_STREAM = 2
    REMOVE_CONSUMER = 3
    STREAM_MSG = 4
    PURGE_STREAM = 5
    DELETE_MSG = 6
    UPDATE_DELIVERED = 7
    UPDATE_ACKS = 8
    ASSIGN_COMPRESSED_CONSUMER = 9
    UPDATE_SKIP = 10
    UPDATE_STREAM = 11
    ADD_PENDING_REQUEST = 12
    REMOVE_PENDING_REQUEST = 13
    COMPRESSED_STREAM_MSG = 14
    DELETE_RANGE = 15
    BATCH_MSG = 16
    BATCH_COMMIT_MSG = 17
    RESET_SEQ = 18


META_JSON_OPS = frozenset(
    {
        EntryOp.ASSIGN_STREAM,
        EntryOp.ASSIGN_CONSUMER,
        EntryOp.REMOVE_STREAM,
        EntryOp.REMOVE_CONSUMER,
        EntryOp.UPDATE_STREAM,
    }
)


def decode_meta_entry(data: bytes) -> tuple[EntryOp, dict[str, Any]]:
    """(op, assignment) of a meta entry; a compressed consumer assignment decompressed (the same JSON as
    the uncompressed op's). ValueError when malformed."""
    if not data:
        raise ValueError("empty meta entry")
    op = EntryOp(data[0])
    if op == EntryOp.ASSIGN_COMPRESSED_CONSUMER:
        decoder = S2Decoder()
        try:
            text = decoder.feed(data[1:])
        except S2Error as e:
            raise ValueError(str(e)) from None
        if not decoder.at_chunk_boundary:
            raise ValueError("s2: truncated stream")
        body: dict[str, Any] = json.loads(text)
        return op, body
    if op not in META_JSON_OPS:
        raise ValueError(f"not a meta op: {op.name}")
    body = json.loads(data[1:])
    return op, body


def decode_meta_snapshot(data: bytes) -> list[dict[str, Any]]:
    """The stream assignments of a meta snapshot (empty data: none). ValueError when malformed."""
    if not data:
        return []
    try:
        streams = json.loads(decode_block(data))
    except S2Error as e:
        raise ValueError(str(e)) from None
    if not isinstance(streams, list):
        raise ValueError("meta snapshot: not a list of streams")
    return streams


def encode_meta_entry(op: EntryOp, assignment: dict[str, Any]) -> bytes:
    """An uncompressed meta entry (the key order of `assignment` is kept, as Go's encoder keeps its
    struct's field order)."""
    text = json.dumps(assignment, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in _GO_ESCAPES:  # Go's encoder escapes these for HTML and JavaScript
        text = text.replace(char, escaped)
    return bytes((op,)) + text.encode() + b"\n"


_GO_ESCAPES = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)
