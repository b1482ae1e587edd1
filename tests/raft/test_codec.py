"""The NRG codec's edges (its round trips on real traffic are in test_codec_live.py)."""

from __future__ import annotations

import json

import pytest

from pynatsd.base.s2 import encode_stream
from pynatsd.base.varint import put_uvarint, read_uvarint
from pynatsd.raft.codec import (
    AppendEntry,
    AppendEntryResponse,
    CodecError,
    Entry,
    EntryType,
    PeerState,
    VoteRequest,
    VoteResponse,
    group_of,
    peer_id,
)
from pynatsd.raft.meta import EntryOp, decode_meta_entry, decode_meta_snapshot


def test_peer_id_is_nats_servers_node_name() -> None:
    # nats-server 2.15.1 logs `Node: IpgZxq4Y` for the server named n0-go (its startup banner).
    assert peer_id("n0-go") == "IpgZxq4Y"


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**32, 2**64 - 1])
def test_uvarint_round_trip(value: int) -> None:
    raw = put_uvarint(value)
    assert read_uvarint(raw + b"tail") == (value, len(raw))


def test_append_entry_round_trip_with_lterm() -> None:
    ae = AppendEntry(
        "abcdefgh", 5, 3, 4, 9, (Entry(EntryType.NORMAL, b"x"), Entry(EntryType.ADD_PEER, b"ijklmnop")), 7
    )
    assert AppendEntry.decode(ae.encode()) == ae
    heartbeat = AppendEntry("abcdefgh", 5, 3, 4, 9)
    assert heartbeat.encode()[-1:] == b"\0" and AppendEntry.decode(heartbeat.encode()).is_heartbeat


@pytest.mark.parametrize(
    "decode, data",
    [
        (VoteRequest.decode, b"\0" * 31),
        (VoteResponse.decode, b"\0" * 18),
        (AppendEntryResponse.decode, b"\0" * 24),
        (AppendEntry.decode, b"\0" * 41),
        (AppendEntry.decode, b"\0" * 40 + b"\1\0" + b"\5\0\0\0\0"),  # an entry longer than the message
        (AppendEntry.decode, b"\0" * 40 + b"\1\0" + b"\0\0\0\0"),  # an entry of no bytes (not even a type)
        (AppendEntry.decode, b"\0" * 40 + b"\1\0" + b"\1\0\0\0\x63"),  # an unknown entry type
        (PeerState.decode, b"\3\0\0\0\2\0\0\0abcdefgh"),  # two peers announced, one there
    ],
)
def test_malformed_messages_are_refused(decode: object, data: bytes) -> None:
    with pytest.raises(CodecError):
        decode(data)  # type: ignore[operator]


def test_subjects() -> None:
    assert group_of("$NRG.AE._meta_") == ("AE", "_meta_")
    with pytest.raises(CodecError):
        group_of("$JS.API.INFO")


def test_compressed_meta_entries_decode() -> None:
    """A compressed consumer assignment is its JSON in an S2 stream, a meta snapshot the stream
    assignments' JSON array in one S2 block (a meta snapshot from a real nats-server is decoded in
    test_meta_live.py); what is not S2 is refused as malformed."""
    ca = {"name": "C", "stream": "S", "consumer": {"durable_name": "C"}, "group": {"peers": ["a"]}}
    data = bytes((EntryOp.ASSIGN_COMPRESSED_CONSUMER,)) + encode_stream(json.dumps(ca).encode() + b"\n")
    assert decode_meta_entry(data) == (EntryOp.ASSIGN_COMPRESSED_CONSUMER, ca)
    with pytest.raises(ValueError, match="s2"):
        decode_meta_entry(bytes((EntryOp.ASSIGN_COMPRESSED_CONSUMER,)) + b"{}")
    with pytest.raises(ValueError, match="truncated"):
        decode_meta_entry(data[:-3])
    streams = [{"stream": {"name": "S"}, "group": {"peers": ["a"]}, "consumers": []}]
    text = json.dumps(streams).encode()
    assert 60 < len(text) <= 256
    block = put_uvarint(len(text)) + bytes((60 << 2, len(text) - 1)) + text  # one literal, 1-byte length
    assert decode_meta_snapshot(block) == streams
    assert decode_meta_snapshot(b"") == []
    with pytest.raises(ValueError):
        decode_meta_snapshot(b"\x05junk")
