"""JetStream's advisories and metrics on `$JS.EVENT.>`, as nats-server 2.15 publishes them.

Each is published by the account's own internal client, in the account where the stream lives (nats-server
sends these to that account only; the system account hears only its cluster advisories), and only when
someone there listens: the interest is looked up before any JSON is built, so a server nobody watches pays
one subject match per event (and nothing per ack unless the consumer samples them, `sample_freq`).
Published by the server itself, an advisory is never taken as an API request or an ack by our own
subscribers (`InternalClient.origin_is_server`), whatever subject space a stream captures it into.

    API audit               $JS.EVENT.ADVISORY.API                                   api_audit
    stream action           $JS.EVENT.ADVISORY.STREAM.{CREATED,UPDATED,DELETED}.<stream>
    consumer action         $JS.EVENT.ADVISORY.CONSUMER.{CREATED,DELETED}.<stream>.<consumer>
    priority group pin      $JS.EVENT.ADVISORY.CONSUMER.{PINNED,UNPINNED}.<stream>.<consumer>
    max deliveries          $JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>
    nak, terminated         $JS.EVENT.ADVISORY.CONSUMER.{MSG_NAKED,MSG_TERMINATED}.<stream>.<consumer>
    snapshot, restore       $JS.EVENT.ADVISORY.STREAM.{SNAPSHOT,RESTORE}_{CREATE,COMPLETE}.<stream>
    ack sample (metric)     $JS.EVENT.METRIC.CONSUMER.ACK.<stream>.<consumer>
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pynatsd.base.formats import rfc3339nano
from pynatsd.base.ids import event_id
from pynatsd.broker.connection import Connection, _auth_user
from pynatsd.jetstream.util import encode, get_header, now_ns, rfc3339
from pynatsd.protocol import gojson
from pynatsd.protocol.gojson import GoJsonError

if TYPE_CHECKING:
    from pynatsd.broker.delivery import Client
    from pynatsd.jetstream.account import JsAccount

API_AUDIT = b"$JS.EVENT.ADVISORY.API"
_ADVISORY = "io.nats.jetstream.advisory.v1."
_STREAM_SUBJECTS = {"create": "CREATED", "modify": "UPDATED", "delete": "DELETED"}
_CONSUMER_SUBJECTS = {"create": "CREATED", "delete": "DELETED"}
_REQUEST_INFO = b"Nats-Request-Info"


class Advisories:
    """One account's advisories (see the module docstring)."""

    def __init__(self, account: JsAccount) -> None:
        self.client = account.client
        self.server = account.js.server
        self.domain = account.js.domain
        self.account_name = account.name

    def wanted(self, subject: bytes) -> bool:
        """Someone in the account (or importing from it, or across a route) listens on `subject`."""
        result = self.client.sublist.match(subject)
        return bool(result.plain or result.groups)

    def _publish(self, subject: bytes, kind: str, fields: dict[str, Any]) -> None:
        event: dict[str, Any] = {"type": kind, "id": event_id(), "timestamp": rfc3339(now_ns()), **fields}
        if self.domain:
            event["domain"] = self.domain
        self.client.publish(subject, None, None, encode(event))

    def stream_action(self, stream: str, action: str) -> None:
        """A stream created, updated ("modify") or deleted."""
        subject = b"$JS.EVENT.ADVISORY.STREAM.%s.%s" % (_STREAM_SUBJECTS[action].encode(), stream.encode())
        if self.wanted(subject):
            self._publish(subject, _ADVISORY + "stream_action", {"stream": stream, "action": action})

    def backup(self, event: str, stream: str, client: dict[str, Any] | None, **fields: Any) -> None:
        """A snapshot's or restore's progress (`event`: snapshot_create, restore_complete, ...), naming the
        client that asked for it."""
        subject = b"$JS.EVENT.ADVISORY.STREAM.%s.%s" % (event.upper().encode(), stream.encode())
        if self.wanted(subject):
            self._publish(subject, _ADVISORY + event, {"stream": stream, **fields, "client": client})

    def consumer_action(self, stream: str, consumer: str, action: str) -> None:
        """A consumer created or deleted (by the API, with its stream, or for inactivity)."""
        subject = b"$JS.EVENT.ADVISORY.CONSUMER.%s.%s.%s" % (
            _CONSUMER_SUBJECTS[action].encode(),
            stream.encode(),
            consumer.encode(),
        )
        if self.wanted(subject):
            fields = {"stream": stream, "consumer": consumer, "action": action}
            self._publish(subject, _ADVISORY + "consumer_action", fields)

    def delivery(
        self,
        subject: bytes,
        kind: str,
        names: tuple[str, str],
        seqs: tuple[int, int],
        deliveries: int,
        reason: str = "",
    ) -> None:
        """A message NAKed (`nak`) or terminated (`terminated`, with the `+TERM` reason): `subject` is the
        consumer's, `names` (stream, consumer), `seqs` the (consumer, stream) sequences."""
        if self.wanted(subject):
            fields = {**_message(names, seqs), "deliveries": deliveries}
            if reason:
                fields["reason"] = reason
            self._publish(subject, _ADVISORY + kind, fields)

    def consumer_pause(self, names: tuple[str, str], until: str, paused: bool) -> None:
        """A consumer's pause_until changed by an update (CONSUMER.PAUSE too), or its pause ended; `until`
        as its config has it (Go's zero time when none: nats-server's time.Time is never left out)."""
        subject = b"$JS.EVENT.ADVISORY.CONSUMER.PAUSE.%s.%s" % (names[0].encode(), names[1].encode())
        if self.wanted(subject):
            fields = {"stream": names[0], "consumer": names[1], "paused": paused}
            fields["pause_until"] = until or "0001-01-01T00:00:00Z"
            self._publish(subject, _ADVISORY + "consumer_pause", fields)

    def consumer_pin(self, names: tuple[str, str], group: str, pinned_id: str = "", reason: str = "") -> None:
        """A priority group's client pinned (`pinned_id`: what its requests carry from then on), or the pin
        let go (`reason` "admin" for CONSUMER.UNPIN, "timeout" without requests for priority_timeout)."""
        kind = "UNPINNED" if reason else "PINNED"
        stream, consumer = names[0].encode(), names[1].encode()
        subject = b"$JS.EVENT.ADVISORY.CONSUMER.%s.%s.%s" % (kind.encode(), stream, consumer)
        if self.wanted(subject):
            fields = {"account": self.account_name, "stream": names[0], "consumer": names[1], "group": group}
            if reason:
                fields["reason"] = reason
            else:
                fields["pinned_id"] = pinned_id
            self._publish(subject, _ADVISORY + "consumer_group_" + kind.lower(), fields)

    def max_deliveries(self, subject: bytes, names: tuple[str, str], seq: int, deliveries: int) -> None:
        """A message delivered max_deliver times without an ack: it will not be delivered again."""
        if self.wanted(subject):
            fields = {"stream": names[0], "consumer": names[1], "stream_seq": seq, "deliveries": deliveries}
            self._publish(subject, _ADVISORY + "max_deliver", fields)

    def ack_sample(
        self, subject: bytes, names: tuple[str, str], seqs: tuple[int, int], ack_time: int, deliveries: int
    ) -> None:
        """A sampled ack (`sample_freq`): its delay since the delivery in ns (`ack_time`)."""
        if self.wanted(subject):
            fields = {**_message(names, seqs), "ack_time": ack_time, "deliveries": deliveries}
            self._publish(subject, "io.nats.jetstream.metric.v1.consumer_ack", fields)

    def api_audit(
        self, subject: bytes, requester: dict[str, Any] | None, request: bytes, response: bytes
    ) -> None:
        """An API request answered (`requester`: its client info, taken when it came in)."""
        fields: dict[str, Any] = {
            "server": self.server.server_name,
            "client": requester,
            "subject": subject.decode(errors="replace"),
        }
        if request:
            fields["request"] = request.decode(errors="replace")
        fields["response"] = response.decode(errors="replace")
        self._publish(API_AUDIT, _ADVISORY + "api_audit", fields)

    def requester(self, origin: Client | None, hdrs: bytes | None) -> dict[str, Any] | None:
        """The client info an API audit names: that of the client connected here in this account
        (nats-server's ClientInfo without its JWT), else the `Nats-Request-Info` that the service import or
        the other server set (never one a client of ours wrote into its own request)."""
        if isinstance(origin, Connection) and origin.account == self.client.account:
            return self._client_info(origin)
        shared = get_header(hdrs, _REQUEST_INFO)
        if shared is not None:
            try:
                values = gojson.loads(shared)
            except GoJsonError:
                values = []
            if values and isinstance(values[-1], dict):
                return {k: v for k, v in values[-1].items() if k not in ("jwt", "alts")}
        return self._client_info(origin) if isinstance(origin, Connection) else None

    def _client_info(self, conn: Connection) -> dict[str, Any]:
        kind, user = _auth_user(conn.opts, conn.user)
        cluster = self.server.cluster
        info: dict[str, Any] = {
            "start": rfc3339nano(conn.start),
            "host": conn.ip,
            "id": conn.cid,
            "acc": conn.account,
            "user": user if kind else "",
            "name": conn.opts.name,
            "lang": conn.opts.lang,
            "ver": conn.opts.version,
            "rtt": int(conn.rtt * 1e9) if conn.rtt else 0,
            "server": self.server.server_name,
            "cluster": cluster.name if cluster is not None else "",
            "kind": "Client",
            "client_type": "websocket" if conn.is_websocket else "nats",
        }
        return {k: v for k, v in info.items() if v not in ("", 0, None)}


def _message(names: tuple[str, str], seqs: tuple[int, int]) -> dict[str, Any]:
    """The fields naming one delivered message: stream, consumer and its (consumer, stream) sequences."""
    return {"stream": names[0], "consumer": names[1], "consumer_seq": seqs[0], "stream_seq": seqs[1]}
