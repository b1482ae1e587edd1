"""A sans-IO RAFT node speaking nats-server's NRG: the caller feeds it messages (`receive`) and time
(`tick`) and carries out what it asks (`take_outbox`: messages to publish; `subscriptions`: the subjects
it listens on; `take_applied`: committed entries for the state machine). Nothing here does I/O but
through its Storage.

nats-server's variant of RAFT, as its raft.go runs it (this is a reimplementation, not a port):
- A log index holds one append entry (a batch of entries), not one entry; the term of an index is the
  term of the leader that sent it. Heartbeats are append entries without entries, not stored.
- Quorum is cluster size / 2 + 1, the cluster size from the peer state (it can exceed the peers known
  while a group boots). A vote counts from a known peer, or from anyone while fewer peers than the
  cluster size are known; "empty" votes (the voter's log is empty) do not make a quorum alone, unless
  every member voted.
- A leader opens its term by storing its peer state (its no-op entry). It counts a follower's ack of an
  index only when the follower's last term is the leader's term, and commits through that index.
- A follower that is behind answers with its last (term, index) and a catch-up inbox (`$NRG.CR.`); the
  leader streams the missing indexes there (re-encoded with its term as lterm), after its snapshot when
  it compacted them away. The follower acks catch-up entries on the entries' reply (`$NRG.CP.`, 2.15.1)
  but never acks them on the group's subject: catch-up never makes quorum. New entries are ignored while
  catching up.
- A follower that holds entries the leader does not truncates them back to the last matching index and
  answers nothing (the next heartbeat starts a catch-up).
- A leader that heard from fewer than a quorum within the lost-quorum interval steps down. Observers
  follow and ack but never campaign; one that `hands_over`, named by a leader transfer, campaigns only to
  pass the leadership on at once to a peer that voted for it (nats-server's observers ignore the transfer,
  which leaves the group leaderless until an election timeout). Unknown peers that ack are proposed as
  new peers by the leader (unless the group's membership is managed or the peer was removed).
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass, field

from pynatsd.raft.codec import (
    APPEND_SUBJECT,
    CATCHUP_SUBJECT,
    ID_LEN,
    PROPOSAL_SUBJECT,
    REMOVE_PEER_SUBJECT,
    REPLY_SUBJECT,
    VOTE_SUBJECT,
    AppendEntry,
    AppendEntryResponse,
    CodecError,
    Entry,
    EntryType,
    PeerState,
    VoteRequest,
    VoteResponse,
)
from pynatsd.raft.storage import Snapshot, Storage

CATCHUP_PROGRESS_SUBJECT = "$NRG.CP.%s"
MAX_CATCHUP_IN_FLIGHT = 64  # indexes sent ahead of a catch-up follower's acks


class State(enum.Enum):
    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class Timing:
    """nats-server's defaults, in seconds (tests may shrink them)."""

    min_election: float = 4.0
    max_election: float = 9.0
    min_campaign: float = 0.1
    max_campaign: float = 0.8
    heartbeat: float = 1.0
    lost_quorum: float = 10.0
    catchup_stall: float = 2.0


@dataclass(frozen=True, slots=True)
class Outbound:
    subject: str
    reply: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Committed:
    """Entries committed at `index` for the state machine (normal, snapshot, add and remove peer)."""

    index: int
    entries: tuple[Entry, ...]


@dataclass(slots=True)
class _Peer:
    last_seen: float = -1e18
    last_index: int = 0


@dataclass(slots=True)
class _Catchup:
    """A follower's catch-up in progress: the leader's position it must reach, and its own progress."""

    inbox: str
    cterm: int
    cindex: int
    pindex: int
    active: float


@dataclass(slots=True)
class _Feeding:
    """A leader streaming a follower's missing indexes."""

    subject: str
    progress: str
    next: int
    last: int
    acked: int
    active: float


@dataclass(slots=True)
class _MembershipChange:
    index: int
    peer: str
    removed: _Peer | None = None


@dataclass
class RaftNode:
    """One member of one group. `peers`: the group's members when it boots (ours included)."""

    group: str
    id: str
    storage: Storage
    peers: list[str]
    now: float
    rng: random.Random = field(default_factory=random.Random)
    timing: Timing = field(default_factory=Timing)
    observer: bool = False
    hands_over: bool = False
    managed: bool = False

    def __post_init__(self) -> None:
        if len(self.id) != ID_LEN:
            raise ValueError(f"peer id must be {ID_LEN} characters")
        self.state = State.FOLLOWER
        self.term, self.vote = self.storage.load_term_vote()
        self.leader = ""
        self.ever_had_leader = False  # a leader heard of since start (nats-server's pleader, for /raftz)
        self.leader_since: float | None = None  # when this node last became the leader (its clock)
        self.pterm = self.pindex = self.commit = self.applied = 0
        self._outbox: list[Outbound] = []
        self._applied: list[Committed] = []
        self.members: dict[str, _Peer] = {}
        self.removed: set[str] = set()
        self.cluster_size = 0
        self.quorum = 1
        self.membership_change: _MembershipChange | None = None
        self.catchup: _Catchup | None = None
        self.feeding: dict[str, _Feeding] = {}
        self.acks: dict[int, set[str]] = {}
        self.votes: set[str] = set()
        self.empty_votes: set[str] = set()
        self.vote_inbox = REPLY_SUBJECT % self._token()
        self.append_inbox = REPLY_SUBJECT % self._token()
        self.progress_inbox = CATCHUP_PROGRESS_SUBJECT % self._token()
        self.last_active = self.now
        # A hands-over observer named by a leader transfer: the leader that named it (campaigning once),
        # and while it campaigns, the peer it hands over to rather than back to that leader.
        self.transfer_from = self.handing_back = ""
        self.hand_over_due = float("inf")
        self.heartbeat_due = self.lost_quorum_due = 0.0
        state = self.storage.load_peer_state()
        if state is None:
            state = PeerState(tuple(self.peers), len(self.peers))
            self.storage.save_peer_state(state)
        self._take_peer_state(state)
        self._recover()
        self._reset_election(self._election_timeout())

    # The transport's side.

    def subscriptions(self) -> set[str]:
        subjects = {
            VOTE_SUBJECT % self.group,
            APPEND_SUBJECT % self.group,
            self.vote_inbox,
            self.append_inbox,
            self.progress_inbox,
        }
        if self.catchup is not None:
            subjects.add(self.catchup.inbox)
        if self.state == State.LEADER:
            subjects |= {PROPOSAL_SUBJECT % self.group, REMOVE_PEER_SUBJECT % self.group}
        return subjects

    def take_outbox(self) -> list[Outbound]:
        out, self._outbox = self._outbox, []
        return out

    def take_applied(self) -> list[Committed]:
        out, self._applied = self._applied, []
        return out

    def receive(self, subject: str, reply: str, data: bytes, now: float) -> None:
        """One message on one of `subscriptions()`; a malformed one is dropped (as nats-server does)."""
        if self.state == State.CLOSED:
            return
        self.now = max(self.now, now)
        try:
            if subject == APPEND_SUBJECT % self.group:
                self._on_append(AppendEntry.decode(data), reply, new=True)
            elif self.catchup is not None and subject == self.catchup.inbox:
                self._on_append(AppendEntry.decode(data), reply, new=False)
            elif subject == VOTE_SUBJECT % self.group:
                self._on_vote_request(VoteRequest.decode(data), reply)
            elif subject == self.vote_inbox:
                self._on_vote_response(VoteResponse.decode(data))
            elif subject == self.append_inbox:
                self._on_append_response(AppendEntryResponse.decode(data), reply)
            elif subject == self.progress_inbox:
                self._on_catchup_progress(AppendEntryResponse.decode(data))
            elif subject == PROPOSAL_SUBJECT % self.group and self.state == State.LEADER:
                self._send_append((Entry(EntryType.NORMAL, bytes(data)),))
            elif subject == REMOVE_PEER_SUBJECT % self.group and len(data) == ID_LEN:
                self.propose_remove_peer(data.decode("latin-1"))
        except CodecError:
            return

    def tick(self, now: float) -> float:
        """Advance time to `now`; returns when the node next needs a tick."""
        if self.state == State.CLOSED:
            return float("inf")
        self.now = max(self.now, now)
        if self.state == State.LEADER and self.now >= self.hand_over_due:
            self.step_down(min(self.votes - {self.id}, default=""))
        if self.state == State.LEADER:
            if self.now >= self.heartbeat_due:
                if self.now - self.last_active >= self.timing.heartbeat:
                    self._send_append(())
                self.heartbeat_due = self.now + self.timing.heartbeat
            if self.now >= self.lost_quorum_due:
                self.lost_quorum_due = self.now + self.timing.lost_quorum
                if self._lost_quorum():
                    self._step_down("")
            for peer, feed in list(self.feeding.items()):
                if self.now - feed.active > self.timing.catchup_stall:
                    del self.feeding[peer]
        elif self.now >= self.election_due:
            self._on_election_timeout()
        if self.state == State.LEADER:
            return min(self.heartbeat_due, self.lost_quorum_due)
        return self.election_due

    # The state machine's side.

    def propose(self, data: bytes) -> bool:
        """Propose a normal entry: stored and sent when leader, forwarded to a known leader otherwise."""
        if self.state == State.LEADER:
            self._send_append((Entry(EntryType.NORMAL, data),))
            return True
        if self.leader:
            self._publish(PROPOSAL_SUBJECT % self.group, "", data)
            return True
        return False

    def propose_add_peer(self, peer: str) -> bool:
        return self._membership(Entry(EntryType.ADD_PEER, peer.encode()))

    def propose_remove_peer(self, peer: str) -> bool:
        if self.state != State.LEADER:
            if self.leader:
                self._publish(REMOVE_PEER_SUBJECT % self.group, "", peer.encode())
                return True
            return False
        return self._membership(Entry(EntryType.REMOVE_PEER, peer.encode()))

    def step_down(self, preferred: str = "") -> None:
        """Hand leadership to `preferred` when a member, else to a follower heard from lately (a leader
        transfer entry), then follow."""
        if self.state != State.LEADER:
            return
        heard = [
            p for p, seen in self.members.items() if self.now - seen.last_seen < 3 * self.timing.heartbeat
        ]
        for peer in (preferred, *heard) if preferred in self.members else heard:
            if peer != self.id:
                self._send_append((Entry(EntryType.LEADER_TRANSFER, peer.encode()),))
                break
        self._step_down("")

    def install_snapshot(self, data: bytes) -> None:
        """The state machine's `data` as of the applied index: the log up to it is compacted away."""
        if self.applied == 0:
            return
        term = self._term_at(self.applied)
        self.storage.save_snapshot(Snapshot(term, self.applied, self._peer_state().encode(), data))
        self.storage.compact_through(self.applied)

    def close(self) -> None:
        self.state = State.CLOSED
        self.storage.sync()

    @property
    def is_leader(self) -> bool:
        return self.state == State.LEADER

    # Elections.

    def _election_timeout(self) -> float:
        return self.rng.uniform(self.timing.min_election, self.timing.max_election)

    def _reset_election(self, after: float) -> None:
        self.election_due = self.now + after

    def _on_election_timeout(self) -> None:
        if self.observer and not self.transfer_from:
            self._reset_election(48 * 3600.0)
            return
        self.handing_back, self.transfer_from = self.transfer_from, ""
        if self.catchup is not None:
            if self._catchup_stalled():
                self.catchup = None
            self._reset_election(self._election_timeout())
            return
        if self.membership_change is not None and self.membership_change.peer == self.id:
            self.leader = ""
            self._reset_election(self.timing.min_election)
            return
        if self.id not in self.members:
            # Not (yet) a member: a node joining a running group follows until its leader adds it.
            self.leader = ""
            self._reset_election(self.timing.min_election)
            return
        self.term += 1
        self.vote = self.id
        self.leader = ""
        self.state = State.CANDIDATE
        self._save_term_vote()
        self._reset_election(self._election_timeout())
        self.votes, self.empty_votes = {self.id}, set()
        request = VoteRequest(self.term, self.pterm, self.pindex, self.id)
        self._publish(VOTE_SUBJECT % self.group, self.vote_inbox, request.encode())
        self._check_won()

    def _on_vote_request(self, vr: VoteRequest, reply: str) -> None:
        if vr.candidate == self.id:
            return  # our own, heard back
        empty = self.pindex == 0
        if vr.term < self.term:
            self._publish(reply, "", VoteResponse(self.term, self.id, False, empty).encode())
            return
        if vr.term > self.term:
            if self.state != State.FOLLOWER:
                self._become_follower("")
            self.catchup = None
            self.term, self.vote, self.leader = vr.term, "", ""
            self._save_term_vote()
        granted = False
        if self.vote in ("", vr.candidate) and (
            vr.last_term > self.pterm or (vr.last_term == self.pterm and vr.last_index >= self.pindex)
        ):
            self.vote = vr.candidate
            self._save_term_vote()
            granted = True
            self._reset_election(self._election_timeout())
        elif self.vote == "" and self.state != State.CANDIDATE:
            # Our log is more up to date: campaign sooner.
            self._reset_election(self.rng.uniform(self.timing.min_campaign, self.timing.max_campaign))
        self._publish(reply, "", VoteResponse(self.term, self.id, granted, empty).encode())

    def _on_vote_response(self, vr: VoteResponse) -> None:
        if self.state == State.LEADER:
            if vr.term > self.term:
                self._step_down("")
            return
        if self.state != State.CANDIDATE:
            return
        if vr.granted and vr.term == self.term:
            self._seen(vr.peer)
            if vr.peer in self.members or len(self.members) < self.cluster_size:
                (self.empty_votes if vr.empty else self.votes).add(vr.peer)
            self._check_won()
        elif vr.term > self.term:
            self.term, self.vote = vr.term, ""
            self._save_term_vote()
            self._become_follower("")

    def _check_won(self) -> None:
        if len(self.votes) >= self.quorum or len(self.votes) + len(self.empty_votes) >= self.cluster_size:
            self._become_leader()

    def _become_leader(self) -> None:
        self.state = State.LEADER
        self.leader = self.id
        self.ever_had_leader, self.leader_since = True, self.now
        self.acks.clear()
        self.feeding.clear()
        self.catchup = None
        self.heartbeat_due = self.now + self.timing.heartbeat
        self.lost_quorum_due = self.now + self.timing.lost_quorum
        for peer in self.members.values():
            peer.last_seen = self.now  # each gets a lost-quorum interval to answer the new leader
        self._save_term_vote()
        self._send_append((Entry(EntryType.PEER_STATE, self._peer_state().encode()),))
        # Won only to hand over (an observer): to the first peer but the leader that named us to ack our
        # entry, so up to date and heard from; after a heartbeat interval to one that voted for us.
        self.hand_over_due = self.now + self.timing.heartbeat if self.observer else float("inf")

    def _become_follower(self, leader: str) -> None:
        self.state = State.FOLLOWER
        self.acks.clear()
        self.feeding.clear()
        self.leader = leader
        self.ever_had_leader |= bool(leader)
        self.leader_since = None
        self._reset_election(self._election_timeout())
        self._save_term_vote()

    def _step_down(self, leader: str) -> None:
        self._become_follower(leader)

    def _lost_quorum(self) -> bool:
        alive = sum(
            1
            for peer, seen in self.members.items()
            if peer == self.id or self.now - seen.last_seen < self.timing.lost_quorum
        )
        return alive < self.quorum

    # The leader's side of replication.

    def _send_append(self, entries: tuple[Entry, ...]) -> None:
        if self.state != State.LEADER:
            return
        ae = AppendEntry(self.id, self.term, self.commit, self.pterm, self.pindex, entries)
        data = ae.encode()
        if entries:
            self._store(ae, data)
            self.last_active = self.now
        self._publish(APPEND_SUBJECT % self.group, self.append_inbox, data)
        if self.quorum <= 1 and entries:
            self._try_commit(self.pindex)

    def _membership(self, entry: Entry) -> bool:
        if self.state != State.LEADER or self.membership_change is not None:
            return False
        peer = entry.data.decode("latin-1")
        known = self.members.get(peer)
        if (entry.type == EntryType.ADD_PEER) == (known is not None):
            return False
        self.membership_change = _MembershipChange(self.pindex + 1, peer, known)
        self._send_append((entry,))
        if entry.type == EntryType.ADD_PEER:
            self.members.setdefault(peer, _Peer())
        else:
            self.members.pop(peer, None)
        self._resize()
        if self.quorum <= 1:
            self._try_commit(self.pindex)
        return True

    def _on_append_response(self, ar: AppendEntryResponse, reply: str) -> None:
        if self.state != State.LEADER:
            return
        self._seen(ar.peer)
        if ar.success:
            peer = self.members.get(ar.peer)
            if (
                self.observer
                and peer is not None
                and ar.index >= self.pindex
                and ar.peer != self.handing_back
            ):
                self.step_down(ar.peer)
                return
            if peer is not None and ar.index > peer.last_index:
                peer.last_index = ar.index
            if ar.index <= self.commit or ar.term != self.term or peer is None:
                return
            self.acks.setdefault(ar.index, set()).add(ar.peer)
            if self._try_commit(ar.index):
                self._send_append(())  # followers learn the commit without waiting for a heartbeat
        elif reply:
            self._start_feeding(ar, reply)
        elif ar.term > self.term:
            self.term, self.vote = ar.term, ""
            self._step_down("")

    def _try_commit(self, index: int) -> bool:
        acks = len(self.acks.get(index, ())) + (1 if self.id in self.members else 0)
        if acks < self.quorum:
            return False
        for i in range(self.commit + 1, min(index, self.pindex) + 1):
            self._apply(i)
            if self.state != State.LEADER:
                break
        return True

    def _start_feeding(self, ar: AppendEntryResponse, subject: str) -> None:
        start = ar.index + 1
        first = self.storage.first_index()
        if first == 0 or start < first:
            snap = self.storage.load_snapshot()
            if snap is not None and (first == 0 or start < first):
                ae = AppendEntry(
                    self.id,
                    self.term,
                    self.commit,
                    snap.last_term,
                    snap.last_index,
                    (Entry(EntryType.SNAPSHOT, snap.data), Entry(EntryType.PEER_STATE, snap.peer_state)),
                )
                self._publish(subject, self.append_inbox, ae.encode())
                start = snap.last_index + 1
        if start > self.pindex:
            return
        if self.storage.entry(start) is None:
            self._step_down("")  # asked for what we do not have: let a better leader take over
            return
        feed = _Feeding(subject, self.progress_inbox, start, self.pindex, start - 1, self.now)
        self.feeding[ar.peer] = feed
        self._feed(ar.peer)

    def _feed(self, peer: str) -> None:
        feed = self.feeding[peer]
        while feed.next <= feed.last and feed.next - feed.acked <= MAX_CATCHUP_IN_FLIGHT:
            raw = self.storage.entry(feed.next)
            if raw is None:
                del self.feeding[peer]
                return
            ae = AppendEntry.decode(raw)
            ae = AppendEntry(ae.leader, ae.term, ae.commit, ae.pterm, ae.pindex, ae.entries, self.term)
            self._publish(feed.subject, feed.progress, ae.encode())
            feed.next += 1
        if feed.acked >= feed.last:
            del self.feeding[peer]

    def _on_catchup_progress(self, ar: AppendEntryResponse) -> None:
        feed = self.feeding.get(ar.peer)
        if feed is None or self.state != State.LEADER:
            return
        self._seen(ar.peer)
        if ar.index > feed.acked:
            feed.acked, feed.active = ar.index, self.now
        self._feed(ar.peer)

    # The follower's side.

    def _on_append(self, ae: AppendEntry, reply: str, new: bool) -> None:
        if ae.leader == self.id:
            return  # our own, heard back on the group's subject while we lead
        self._reset_election(self._election_timeout())
        lterm = ae.lterm or ae.term
        if self.state == State.LEADER:
            if lterm >= self.term:
                if lterm > self.term:
                    self.term, self.vote = lterm, ""
                    self._save_term_vote()
                self._step_down(ae.leader)
            else:
                self._publish(reply, "", AppendEntryResponse(self.term, self.pindex, self.id, False).encode())
                return
        if self.state == State.CANDIDATE and lterm >= self.term:
            if lterm > self.term:
                self.term, self.vote = lterm, ""
                self._save_term_vote()
            self._step_down(ae.leader)
        catching_up = self.catchup is not None
        if not new and (ae.lterm == 0 or ae.pindex < self.pindex) and not catching_up:
            return
        if lterm > self.term:
            self.term, self.vote = lterm, ""
            if new:
                self._save_term_vote()
            if self.state != State.FOLLOWER:
                self._step_down(ae.leader)
        elif lterm < self.term:
            if new:
                self._publish(reply, "", AppendEntryResponse(self.term, self.pindex, self.id, False).encode())
            return
        if self.catchup is not None:
            if self.pterm >= self.catchup.cterm and self.pindex >= self.catchup.cindex:
                self.catchup, catching_up = None, False
            elif new:
                if self._catchup_stalled():
                    self._ask_catchup(ae, reply)
                return
        if new and self.leader != ae.leader and self.state == State.FOLLOWER:
            self.leader = ae.leader
            self.ever_had_leader |= bool(ae.leader)
            self._save_term_vote()
        if new and ae.leader in self.members and ae.leader == self.leader:
            self.members[ae.leader].last_seen = self.now

        if ae.pterm != self.pterm or ae.pindex != self.pindex:
            if ae.pindex <= self.pindex:
                if not self._realign(ae, new):
                    self.catchup = None
                    return
            elif catching_up:
                self._install_leader_snapshot(ae)
                return
            else:
                self._ask_catchup(ae, reply)
                return

        if ae.entries:
            self._store(ae, ae.encode() if ae.lterm == 0 else self._without_lterm(ae))
            for e in ae.entries:
                self._track_membership(e)
                transfer = new and e.type == EntryType.LEADER_TRANSFER and e.data == self.id.encode()
                if transfer and (not self.observer or self.hands_over):
                    self.transfer_from = ae.leader if self.observer else ""
                    self._reset_election(0.01)  # the leader hands over to us: campaign now
        if ae.commit > self.commit:
            for i in range(self.commit + 1, min(ae.commit, self.pindex) + 1):
                self._apply(i)
        if reply:  # the leader's inbox for new entries, its catch-up progress inbox for catch-up ones
            self._publish(reply, "", AppendEntryResponse(self.pterm, self.pindex, self.id, True).encode())

    @staticmethod
    def _without_lterm(ae: AppendEntry) -> bytes:
        return AppendEntry(ae.leader, ae.term, ae.commit, ae.pterm, ae.pindex, ae.entries).encode()

    def _realign(self, ae: AppendEntry, new: bool) -> bool:
        """The leader's previous index is at or before our last: True when, truncated to it, we may store
        `ae` next; False when we only dropped (or already have) entries and answer nothing."""
        if ae.pindex < self.commit:
            return False  # already committed here
        if ae.pindex == 0:
            if self.commit == 0:
                self._truncate(0, 0)
                return True
            return False
        stored = self.storage.entry(ae.pindex)
        if stored is None:
            snap = self.storage.load_snapshot()
            if snap is not None and snap.last_index == ae.pindex and snap.last_term == ae.pterm:
                self._truncate(snap.last_term, snap.last_index)
                return self.pterm == ae.pterm and self.pindex == ae.pindex
            if ae.pindex == self.pindex and self.commit <= ae.pindex:
                self._truncate(ae.pterm, ae.pindex)
                return True
            return False
        term_there = AppendEntry.decode(stored).term
        if term_there == ae.pterm:
            self._truncate(ae.pterm, ae.pindex)
            return True
        previous = AppendEntry.decode(stored)
        if previous.pindex >= self.commit:
            self._truncate(previous.pterm, previous.pindex)
        return False

    def _truncate(self, term: int, index: int) -> None:
        self.storage.truncate_after(index)
        snap = self.storage.load_snapshot()
        if snap is not None and snap.last_index > index:
            self.storage.remove_snapshot()
        self.pterm, self.pindex = term, index
        for i in [i for i in self.acks if i > index]:
            del self.acks[i]
        change = self.membership_change
        if change is not None and change.index > index:
            if change.removed is not None:
                self.members[change.peer] = change.removed
            else:
                self.members.pop(change.peer, None)
            self.membership_change = None
            self._resize()
            self.storage.save_peer_state(self._peer_state())

    def _ask_catchup(self, ae: AppendEntry, reply: str) -> None:
        """Tell the leader where our log ends, with an inbox for the missing indexes."""
        inbox = CATCHUP_SUBJECT % self._token()
        self.catchup = _Catchup(inbox, ae.pterm, ae.pindex, self.pindex, self.now)
        self._publish(reply, inbox, AppendEntryResponse(self.pterm, self.pindex, self.id, False).encode())

    def _catchup_stalled(self) -> bool:
        cu = self.catchup
        if cu is None:
            return False
        if cu.pindex == self.pindex:
            return self.now - cu.active > self.timing.catchup_stall
        cu.pindex, cu.active = self.pindex, self.now
        return False

    def _install_leader_snapshot(self, ae: AppendEntry) -> None:
        """The first catch-up message when the leader compacted past us: its snapshot and peer state."""
        kinds = [e.type for e in ae.entries]
        if kinds != [EntryType.SNAPSHOT, EntryType.PEER_STATE]:
            self.catchup = None
            return
        try:
            state = PeerState.decode(ae.entries[1].data)
        except CodecError:
            self.catchup = None
            return
        self._take_peer_state(state)
        self.storage.save_peer_state(state)
        self.storage.save_snapshot(Snapshot(ae.pterm, ae.pindex, state.encode(), ae.entries[0].data))
        self.storage.truncate_after(0)
        self.pterm, self.pindex, self.commit, self.applied = ae.pterm, ae.pindex, ae.pindex, ae.pindex
        self._applied.append(Committed(ae.pindex, ae.entries[:1]))

    # The log and the state machine.

    def _store(self, ae: AppendEntry, data: bytes) -> None:
        index = ae.pindex + 1
        self.storage.append(index, data)
        self.pterm, self.pindex = ae.term, index

    def _term_at(self, index: int) -> int:
        if index == self.pindex:
            return self.pterm
        raw = self.storage.entry(index)
        if raw is not None:
            return AppendEntry.decode(raw).term
        snap = self.storage.load_snapshot()
        return snap.last_term if snap is not None and snap.last_index == index else 0

    def _track_membership(self, e: Entry) -> None:
        """A membership change counts from when it is stored, and is undone if truncated away."""
        if e.type not in (EntryType.ADD_PEER, EntryType.REMOVE_PEER) or len(e.data) != ID_LEN:
            return
        peer = e.data.decode("latin-1")
        if e.type == EntryType.ADD_PEER:
            self.membership_change = _MembershipChange(self.pindex, peer)
            self.members.setdefault(peer, _Peer())
        else:
            self.membership_change = _MembershipChange(self.pindex, peer, self.members.pop(peer, _Peer()))
        self._resize()

    def _apply(self, index: int) -> None:
        if index <= self.commit:
            return
        raw = self.storage.entry(index)
        if raw is None:
            return
        ae = AppendEntry.decode(raw)
        self.commit = index
        self.acks.pop(index, None)
        out: list[Entry] = []
        removed_self = False
        for e in ae.entries:
            if e.type == EntryType.NORMAL:
                out.append(e)
            elif e.type in (EntryType.SNAPSHOT, EntryType.OLD_SNAPSHOT):
                out.append(Entry(EntryType.SNAPSHOT, e.data))
            elif e.type == EntryType.PEER_STATE:
                if self.state != State.LEADER:
                    self._take_peer_state(PeerState.decode(e.data))
                    self.storage.save_peer_state(self._peer_state())
            elif e.type in (EntryType.ADD_PEER, EntryType.REMOVE_PEER):
                peer = e.data.decode("latin-1")
                if e.type == EntryType.ADD_PEER:
                    self.removed.discard(peer)
                    self.members.setdefault(peer, _Peer())
                else:
                    self.removed.add(peer)
                    self.members.pop(peer, None)
                    removed_self = peer == self.id
                self.membership_change = None
                self._resize()
                self.storage.save_peer_state(self._peer_state())
                out.append(e)
        self.applied = index
        self._applied.append(Committed(index, tuple(out)))
        if removed_self and self.state == State.LEADER:
            self.step_down()

    def _recover(self) -> None:
        """Restart from the snapshot and the log: re-apply what the stored entries say was committed."""
        snap = self.storage.load_snapshot()
        if snap is not None:
            self.pterm, self.pindex = snap.last_term, snap.last_index
            self.commit = self.applied = snap.last_index
            self._applied.append(Committed(snap.last_index, (Entry(EntryType.SNAPSHOT, snap.data),)))
        first, last = self.storage.first_index(), self.storage.last_index()
        if first and first > self.pindex + 1:
            self.storage.truncate_after(0)  # a log that does not follow the snapshot is of no use
            return
        committed = 0
        for index in range(first, last + 1) if first else ():
            if index <= self.pindex:
                continue
            raw = self.storage.entry(index)
            if raw is None:
                break
            ae = AppendEntry.decode(raw)
            self.pterm, self.pindex = ae.term, index
            for e in ae.entries:
                self._track_membership(e)
            committed = max(committed, ae.commit)
        for index in range(self.commit + 1, min(committed, self.pindex) + 1):
            self._apply(index)

    # Membership.

    def _peer_state(self) -> PeerState:
        return PeerState(tuple(self.members), self.cluster_size)

    def _take_peer_state(self, state: PeerState) -> None:
        old = self.members
        self.members = {p: old.get(p, _Peer()) for p in state.known_peers}
        self.removed |= set(old) - set(self.members)
        self.removed -= set(self.members)
        self.cluster_size = state.cluster_size
        self.quorum = self.cluster_size // 2 + 1

    def _resize(self) -> None:
        self.cluster_size = len(self.members)
        self.quorum = self.cluster_size // 2 + 1

    def _seen(self, peer: str) -> None:
        known = self.members.get(peer)
        if known is not None:
            known.last_seen = self.now
        elif self.state == State.LEADER and not self.managed and peer not in self.removed:
            self.propose_add_peer(peer)

    # Plumbing.

    def _save_term_vote(self) -> None:
        self.storage.save_term_vote(self.term, self.vote)

    def _publish(self, subject: str, reply: str, data: bytes) -> None:
        if subject:
            self._outbox.append(Outbound(subject, reply, data))

    def _token(self) -> str:
        alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
        return "".join(self.rng.choice(alphabet) for _ in range(ID_LEN))
