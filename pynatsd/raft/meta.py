"""Entries of the meta group `_meta_` as nats-server 2.15 proposes them: an op byte, then the stream or
consumer assignment as JSON (one line, as Go's json.Encoder writes it), or for a compressed consumer
assignment the same JSON in an S2 stream. A meta snapshot
is the JSON array of the stream assignments (each with its `consumers`) in one S2 block."""

from __future__ import annotations

import enum
import json
from typing import Any

from pynatsd.base.s2 import S2Decoder, S2Error, decode_block, encode_block


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
    return bytes((op,)) + _go_json(assignment).encode() + b"\n"


def _go_json(value: Any) -> str:
    """`value` as Go's json.Marshal writes it: compact, key order kept, HTML and JS separators escaped."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in _GO_ESCAPES:  # Go's encoder escapes these for HTML and JavaScript
        text = text.replace(char, escaped)
    return text


_GO_ESCAPES = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)


def service_account(client: Any) -> str:
    """The account an assignment belongs to, as nats-server keys it (ClientInfo.serviceAccount)."""
    if not isinstance(client, dict):
        return ""
    return str(client.get("svc") or client.get("acc") or "")


# What a meta snapshot keeps of an assignment's client (nats-server's ClientInfo.forAssignmentSnap).
_SNAP_CLIENT_KEYS = ("acc", "svc", "cluster")
_STREAM_SNAP_KEYS = ("created", "stream", "group", "sync")
_CONSUMER_SNAP_KEYS = ("created", "name", "stream", "consumer", "group")


class MetaState:
    """The meta group's applied state: stream assignments by (account, stream) and each stream's consumer
    assignments by name, as nats-server's meta entries and snapshots change them."""

    def __init__(self) -> None:
        self.streams: dict[tuple[str, str], dict[str, Any]] = {}
        self.consumers: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}

    def apply_entry(self, data: bytes) -> None:
        """A normal entry of the meta log (ops not about assignments are ignored, as nats-server's meta
        layer does with what it does not know). ValueError, KeyError or TypeError when malformed."""
        if not data or data[0] not in _ASSIGNMENT_OPS:
            return
        op, body = decode_meta_entry(data)
        if op in (EntryOp.ASSIGN_STREAM, EntryOp.UPDATE_STREAM, EntryOp.REMOVE_STREAM):
            key = (service_account(body.get("client")), str(body["stream"]["name"]))
            if op == EntryOp.REMOVE_STREAM:
                self.streams.pop(key, None)
                self.consumers.pop(key, None)
            else:
                self.streams[key] = body
                self.consumers.setdefault(key, {})
            return
        key = (service_account(body.get("client")), str(body["stream"]))
        name = str(body["name"])
        consumers = self.consumers.get(key)
        if consumers is None:
            return  # nats-server drops a consumer assignment for a stream it does not know
        if op == EntryOp.REMOVE_CONSUMER:
            consumers.pop(name, None)
        else:
            consumers[name] = body

    def load_snapshot(self, data: bytes) -> None:
        """Replace the state with a meta snapshot's (nats-server's or ours)."""
        self.streams, self.consumers = {}, {}
        for sa in decode_meta_snapshot(data):
            key = (service_account(sa.get("client")), str(sa["stream"]["name"]))
            self.streams[key] = {k: v for k, v in sa.items() if k != "Consumers"}
            self.consumers[key] = {str(ca["name"]): ca for ca in sa.get("Consumers") or ()}

    def encode_snapshot(self) -> bytes:
        """The state as nats-server's meta snapshot: the JSON array of stream assignments, each with its
        `Consumers` (Go's field name: it has no JSON tag), in one S2 block; empty when there are none."""
        if not self.streams:
            return b""
        out = []
        for key, sa in self.streams.items():
            wsa = _snap_fields(sa, _STREAM_SNAP_KEYS)
            wsa["Consumers"] = [
                _snap_fields(ca, _CONSUMER_SNAP_KEYS) for ca in self.consumers.get(key, {}).values()
            ]
            out.append(wsa)
        return encode_block(_go_json(out).encode())


def _snap_fields(assignment: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    client = assignment.get("client")
    if isinstance(client, dict):
        out["client"] = {k: client[k] for k in _SNAP_CLIENT_KEYS if client.get(k)}
    for k in keys:
        out[k] = assignment.get(k, "" if k == "sync" else None)
    return out


_ASSIGNMENT_OPS = frozenset(META_JSON_OPS | {EntryOp.ASSIGN_COMPRESSED_CONSUMER})
