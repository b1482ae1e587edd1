"""The NRG wire encodings, byte for byte as nats-server 2.15 writes them (learned from its raft.go).

All integers are little-endian. A peer is named by 8 characters (`peer_id`, nats-server's getHash of the
server name). Subjects, all in the system account by default:

- `$NRG.V.<group>`   vote requests (VoteRequest), answered on the candidate's `$NRG.R.<inbox>`
- `$NRG.AE.<group>`  append entries (AppendEntry) from the leader, answered (AppendEntryResponse) on its
  `$NRG.R.<inbox>`; a follower that is behind answers with the reply subject `$NRG.CR.<inbox>`, where the
  leader then streams the missing entries (catch-up)
- `$NRG.P.<group>`   a proposal forwarded to the leader (the entry's data as is)
- `$NRG.RP.<group>`  a forwarded remove-peer proposal (the 8-character peer name)
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from pynatsd.base.hashing import base62_sha256
from pynatsd.base.varint import put_uvarint, read_uvarint

ID_LEN = 8
VOTE_REQUEST_LEN = 24 + ID_LEN
VOTE_RESPONSE_LEN = 8 + ID_LEN + 1
APPEND_ENTRY_RESPONSE_LEN = 24 + 1
APPEND_ENTRY_BASE_LEN = ID_LEN + 4 * 8 + 2

ALL_SUBJECTS = "$NRG.>"
VOTE_SUBJECT = "$NRG.V.%s"
APPEND_SUBJECT = "$NRG.AE.%s"
PROPOSAL_SUBJECT = "$NRG.P.%s"
REMOVE_PEER_SUBJECT = "$NRG.RP.%s"
REPLY_SUBJECT = "$NRG.R.%s"
CATCHUP_SUBJECT = "$NRG.CR.%s"
META_GROUP = "_meta_"

_U64X3 = struct.Struct("<QQQ")
_U64X4_U16 = struct.Struct("<QQQQH")
_U32 = struct.Struct("<I")
_U32X2 = struct.Struct("<II")
_U16 = struct.Struct("<H")


class CodecError(ValueError):
    """A message that is not the NRG encoding it was sent as (nats-server drops these with a warning)."""


class EntryType(enum.IntEnum):
    NORMAL = 0
    OLD_SNAPSHOT = 1
    PEER_STATE = 2
    ADD_PEER = 3
    REMOVE_PEER = 4
    LEADER_TRANSFER = 5
    SNAPSHOT = 6
    CATCHUP = 7  # internal to a server (never on the wire nor in the log)


def peer_id(server_name: str) -> str:
    """The 8-character RAFT peer name of a server (nats-server's getHash of its server name)."""
    return base62_sha256(server_name, ID_LEN)


def _id_bytes(name: str) -> bytes:
    raw = name.encode()
    if len(raw) > ID_LEN:
        raise CodecError(f"peer name {name!r} longer than {ID_LEN} bytes")
    return raw.ljust(ID_LEN, b"\0")


def _id_text(raw: bytes) -> str:
    return raw.rstrip(b"\0").decode("latin-1")


@dataclass(frozen=True, slots=True)
class VoteRequest:
    term: int
    last_term: int
    last_index: int
    candidate: str

    def encode(self) -> bytes:
        return _U64X3.pack(self.term, self.last_term, self.last_index) + _id_bytes(self.candidate)

    @classmethod
    def decode(cls, msg: bytes) -> VoteRequest:
        if len(msg) != VOTE_REQUEST_LEN:
            raise CodecError("vote request: bad length")
        term, last_term, last_index = _U64X3.unpack_from(msg)
        return cls(term, last_term, last_index, _id_text(msg[24:]))


@dataclass(frozen=True, slots=True)
class VoteResponse:
    term: int
    peer: str
    granted: bool
    empty: bool = False  # the voter's log is empty

    def encode(self) -> bytes:
        flags = (1 if self.granted else 0) | (2 if self.empty else 0)
        return struct.pack("<Q", self.term) + _id_bytes(self.peer) + bytes((flags,))

    @classmethod
    def decode(cls, msg: bytes) -> VoteResponse:
        if len(msg) != VOTE_RESPONSE_LEN:
            raise CodecError("vote response: bad length")
        flags = msg[16]
        return cls(struct.unpack_from("<Q", msg)[0], _id_text(msg[8:16]), bool(flags & 1), bool(flags & 2))


@dataclass(frozen=True, slots=True)
class Entry:
    type: EntryType
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class AppendEntry:
    """One leader message: `entries` (none: a heartbeat) after the log position (pterm, pindex), the
    leader's commit index, and `lterm` (the leader's term when it catches a follower up with entries of
    older terms; 0 otherwise), a uvarint after the entries."""

    leader: str
    term: int
    commit: int
    pterm: int
    pindex: int
    entries: tuple[Entry, ...] = ()
    lterm: int = 0

    def encode(self) -> bytes:
        if len(self.entries) > 0xFFFF:
            raise CodecError("append entry: more than 65535 entries")
        parts = [
            _id_bytes(self.leader),
            _U64X4_U16.pack(self.term, self.commit, self.pterm, self.pindex, len(self.entries)),
        ]
        for e in self.entries:
            parts.append(_U32.pack(1 + len(e.data)))
            parts.append(bytes((e.type,)))
            parts.append(e.data)
        parts.append(put_uvarint(self.lterm))  # nats-server always appends it (one 0 byte when unset)
        return b"".join(parts)

    @classmethod
    def decode(cls, msg: bytes) -> AppendEntry:
        if len(msg) < APPEND_ENTRY_BASE_LEN:
            raise CodecError("append entry: too short")
        term, commit, pterm, pindex, count = _U64X4_U16.unpack_from(msg, ID_LEN)
        pos, end = APPEND_ENTRY_BASE_LEN, len(msg)
        entries = []
        for _ in range(count):
            if end - pos < 4:
                raise CodecError("append entry: truncated entry")
            size = _U32.unpack_from(msg, pos)[0]
            pos += 4
            if size == 0 or pos + size > end:
                raise CodecError("append entry: bad entry size")
            try:
                kind = EntryType(msg[pos])
            except ValueError:
                raise CodecError(f"append entry: unknown entry type {msg[pos]}") from None
            entries.append(Entry(kind, bytes(msg[pos + 1 : pos + size])))
            pos += size
        lterm = 0
        if pos < end:
            try:
                lterm = read_uvarint(msg, pos)[0]
            except ValueError:
                lterm = 0  # nats-server ignores a bad tail the same way
        return cls(_id_text(msg[:ID_LEN]), term, commit, pterm, pindex, tuple(entries), lterm)

    @property
    def is_heartbeat(self) -> bool:
        return not self.entries


@dataclass(frozen=True, slots=True)
class AppendEntryResponse:
    """A follower's answer: success with its last (term, index), or failure with its term (a newer leader)
    or its last (term, index) and a catch-up reply subject."""

    term: int
    index: int
    peer: str
    success: bool

    def encode(self) -> bytes:
        return (
            struct.pack("<QQ", self.term, self.index)
            + _id_bytes(self.peer)
            + (b"\1" if self.success else b"\0")
        )

    @classmethod
    def decode(cls, msg: bytes) -> AppendEntryResponse:
        if len(msg) != APPEND_ENTRY_RESPONSE_LEN:
            raise CodecError("append entry response: bad length")
        term, index = struct.unpack_from("<QQ", msg)
        return cls(term, index, _id_text(msg[16:24]), msg[24] == 1)


class Extension(enum.IntEnum):
    """Whether the group's JetStream domain is extended (leaf nodes); nats-server's extensionState."""

    UNDETERMINED = 0
    EXTENDED = 1
    NOT_EXTENDED = 2


@dataclass(frozen=True, slots=True)
class PeerState:
    """The group's membership (an EntryPeerState's data, and peers.idx on disk)."""

    known_peers: tuple[str, ...]
    cluster_size: int
    domain_ext: int = Extension.UNDETERMINED

    def encode(self) -> bytes:
        body = b"".join(_id_bytes(p) for p in self.known_peers)
        return _U32X2.pack(self.cluster_size, len(self.known_peers)) + body + _U16.pack(self.domain_ext)

    @classmethod
    def decode(cls, buf: bytes) -> PeerState:
        if len(buf) < 8:
            raise CodecError("peer state: too short")
        size, count = _U32X2.unpack_from(buf)
        if len(buf) < 8 + count * ID_LEN:
            raise CodecError("peer state: truncated")
        peers = tuple(_id_text(buf[8 + i * ID_LEN : 16 + i * ID_LEN]) for i in range(count))
        tail = 8 + count * ID_LEN
        ext = _U16.unpack_from(buf, tail)[0] if len(buf) - tail >= 2 else 0
        return cls(peers, size, ext)


def group_of(subject: str) -> tuple[str, str]:
    """(kind, rest) of an NRG subject: kind one of V, AE, P, RP, R, CR; rest the group or inbox."""
    parts = subject.split(".", 2)
    if len(parts) != 3 or parts[0] != "$NRG":
        raise CodecError(f"not an NRG subject: {subject!r}")
    return parts[1], parts[2]
