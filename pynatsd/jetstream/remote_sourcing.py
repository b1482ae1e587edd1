"""Mirrors and sources of a stream on another server: copied through that server's JetStream API.

When an `external` prefix is answered across a leaf node or route (another server's JetStream, in its
domain or account), pynatsd does what nats-server does: a consumer create request at `<api>.CONSUMER.CREATE`
for an ephemeral push consumer of the origin (no acks, one delivery, flow control, a heartbeat a second,
gone after 10 s without interest), delivered to `<deliver>.M.<random>` or `<deliver>.S.<random>`. Each
delivery's ack reply tells its origin sequence, time and what is pending (the lag). A gap in the delivery
sequence, a heartbeat telling a later one, a consumer not heard for 10 s, or the link coming back: the
consumer is made again from the last copied sequence, so nothing is missed nor copied twice. Refused create
requests are tried again after nats-server's backoff (2 s, then 10 s more per failure, at most 2 min).

A mirror or source with `consumer` (durable sourcing) is fed by a durable the origin's owner made (ack policy
flow_control, its own deliver subject), here or on another server: it is never created nor deleted, only
asked back to its ack floor by `CONSUMER.RESET` (a source with its API level and the origin it expects, a
mirror bare; answered within 5 s), then its deliveries are copied from its deliver subject and acked by the
flow control answers, which tell the last origin sequence stored. What it redelivers up to the copy's
position is skipped, so a restart (kill -9 included) neither loses nor doubles a message. A durable with
another ack policy is an error (10214, 10217); a missing one is not answered, and tried again; while that
waits, a delivery or heartbeat seen on its deliver subject has it tried again at once.
"""

from __future__ import annotations

import json
import os
import random
from typing import TYPE_CHECKING, Any

from pynatsd.base.hashing import base62_sha256
from pynatsd.base.logging import get_logger
from pynatsd.jetstream.errors import ApiError
from pynatsd.jetstream.util import get_header, now_ns, parse_rfc3339, rfc3339

if TYPE_CHECKING:
    from asyncio import TimerHandle

    from pynatsd.broker.delivery import Subscription
    from pynatsd.jetstream.sourcing import SourceLink

log = get_logger()

HEALTH_CHECK = 10.0  # seconds: nats-server's sourceHealthCheckInterval (a silent consumer is made again)
RETRY_THRESHOLD = 2.0  # seconds: nats-server's sourceConsumerRetryThreshold between two create requests
RETRY_BACKOFF = 5.0  # seconds per failure, doubled: nats-server's retryBackOff
RETRY_MAXIMUM = 120.0  # seconds: nats-server's retryMaximum
CREATE_WAIT = 30.0  # seconds: how long a create request's answer is waited for (srcConsumerWaitTime)
RESET_WAIT = 5.0  # seconds: how long a durable's reset answer is waited for (srcDurableConsumerWaitTime)
CAUGHT_UP = 10  # messages still pending below which a mirror answers direct gets (dgetCaughtUpThresh)
_BASE62 = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_DOWNGRADE = (10185, 10025)  # required API level, invalid JSON: an older server, asked again more simply
_IDENTITY_MISMATCH = 10225


def _random_token(size: int = 8) -> str:
    return bytes(_BASE62[b % 62] for b in os.urandom(size)).decode()


def _joined(prefix: str, rest: str) -> str:
    """nats-server joins a prefix and a subject replacing `..` (an empty or dotted prefix)."""
    return (prefix + rest).replace("..", ".")


def ack_reply_info(reply: bytes) -> tuple[bytes, int, int, int, int, int] | None:
    """(consumer, origin sequence, delivery sequence, delivery count, time ns, pending) of a JetStream ack
    reply subject, in its 9-token form or the 11+-token form with domain and account hash; None if not one."""
    tokens = reply.split(b".")
    count = len(tokens)
    if count < 9 or count == 10 or tokens[0] != b"$JS" or tokens[1] != b"ACK":
        return None
    at = 2 if count == 9 else 4
    try:  # one int() each, no generator: this runs once per copied message
        sseq, dseq, dc = int(tokens[at + 3]), int(tokens[at + 4]), int(tokens[at + 2])
        return tokens[at + 1], sseq, dseq, dc, int(tokens[at + 5]), int(tokens[at + 6])
    except ValueError:
        return None


class RemoteFeed:
    """The consumer on another server that feeds one mirror or source (its SourceLink), and its upkeep."""

    def __init__(self, link: SourceLink) -> None:
        self.link = link
        stream = link.stream
        self.client = stream.account.client
        self.loop = stream.account.js.loop
        external = link.external or {}
        self.api = external.get("api") or ""
        self.durable = link.durable
        self.deliver = external.get("deliver") or ""
        self.consumer = b""  # the current consumer's name ("": none yet)
        self.dseq = 0  # its last delivery sequence taken
        self.lag = 0
        self.last = 0  # ns: the last message or heartbeat from it (0: never heard)
        self.error: dict[str, Any] | None = None
        self.fails = 0
        self.in_progress = False
        self.last_request = 0.0  # loop time of the last create request
        self.api_level = 5 if not link.is_mirror else 4
        self.sourcing = True
        self.name = ""
        self._reply_sub: Subscription | None = None
        self._deliver_sub: Subscription | None = None
        self._probe_sub: Subscription | None = None  # a durable's deliver subject, watched while backing off
        self._retry: TimerHandle | None = None
        self._wait: TimerHandle | None = None
        self._commit_due = False
        self._stopped = False
        kind = "MIRROR" if link.is_mirror else "SRC"
        ident = f"{stream.account.name} {stream.name} {link.iname}"
        self.base_name = f"JS_{kind}_{base62_sha256(ident, 8)}"

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> None:
        self.setup()

    def stop(self) -> None:
        self._stopped = True
        self._cancel()
        for handle in (self._retry, self._wait):
            if handle is not None:
                handle.cancel()
        self._retry = self._wait = None

    def delete_consumer(self) -> None:
        """The copy is deleted: its consumer on the origin too, one try (nats-server's
        tryDeleteSourcingConsumer), as the durable feed of an interest or work queue origin would keep
        every message for it. The answer is not waited for."""
        subject = _joined(self.api + ".", f"CONSUMER.DELETE.{self.link.name}.{self.base_name}")
        self.client.publish(subject.encode(), ("$JSC.R." + _random_token()).encode(), None, b"")

    def _cancel(self) -> None:
        """Forget the current consumer (its stray deliveries are dropped; the origin ends it when idle)."""
        for sub in (self._reply_sub, self._deliver_sub, self._probe_sub):
            if sub is not None:
                self.client.unsubscribe(sub)
        self._reply_sub = self._deliver_sub = self._probe_sub = None
        self.consumer = b""
        self.in_progress = False
        if self._wait is not None:
            self._wait.cancel()
            self._wait = None

    def tick(self, reachable: bool, was_reachable: bool) -> None:
        """Once a second (the link's heartbeat): a consumer silent for 10 s is made again, and at once when
        the other server became reachable again (nats-server retries its silent sync consumers when a
        leaf node connects; pynatsd any, since deliveries sent while the link was down are lost)."""
        if self._stopped:
            return
        if reachable and not was_reachable:  # the link came back: what it carried meanwhile was lost
            self.fails = 0  # (a create request in flight too: asked again rather than waited for 30 s)
            self._cancel()
            self._schedule(0.0)
            return
        silent = self.last == 0 or now_ns() - self.last > HEALTH_CHECK * 1e9
        if not self.in_progress and self._deliver_sub is not None and silent and self._retry is None:
            self._cancel()
            self._schedule(0.0)

    def _schedule(self, extra: float) -> None:
        """Set up again after the retry threshold, the backoff for the failures so far and some jitter."""
        if self._retry is not None:
            self._retry.cancel()
        wait = max(0.0, RETRY_THRESHOLD - (self.loop.time() - self.last_request)) + extra
        wait += min(RETRY_BACKOFF * self.fails * 2, RETRY_MAXIMUM) + 0.1 + random.random() * 0.1
        self._retry = self.loop.call_later(wait, self._retry_now)

    def _retry_now(self) -> None:
        self._retry = None
        if not self._stopped:
            self.setup()

    # -- the consumer create request ---------------------------------------------------------------------
    def setup(self) -> None:
        self._cancel()
        if self._stopped:
            return
        link = self.link
        if not link.recovered:
            link._recover()
        self.in_progress = True
        self.last_request = self.loop.time()
        self.api_level = 5 if not link.is_mirror else 4
        self.sourcing = True
        self.name = self.base_name
        self._send_request()

    def _request(self) -> tuple[bytes, bytes]:
        """The create request's subject and body for the current copy position."""
        link = self.link
        stream = link.stream
        tag = ".M" if link.is_mirror else ".S"
        deliver = _joined(self.deliver, tag) if self.deliver else "$JS" + tag
        deliver += "." + _random_token()
        meta_key = "mirror" if link.is_mirror else "src"
        metadata = {f"_nats.{meta_key}.stream": stream.name, f"_nats.{meta_key}.acc": stream.account.name}
        if stream.account.js.domain:
            metadata[f"_nats.{meta_key}.domain"] = stream.account.js.domain
        config: dict[str, Any] = {"name": self.name, "deliver_subject": deliver}
        config.update(self._start())
        config.update(
            {
                "ack_policy": "none",
                "ack_wait": 22 * 3600 * 10**9,
                "max_deliver": 1,
                "idle_heartbeat": 10**9,
                "flow_control": True,
                "direct": True,
                "inactive_threshold": int(HEALTH_CHECK * 1e9),
                "metadata": metadata,
            }
        )
        if self.sourcing:
            config["sourcing"] = True
        filters = [src.decode() for src, _ in link.transforms] or ([link.filter] if link.filter else [])
        if len(filters) == 1:
            config["filter_subject"] = filters[0]
            tail = f"CONSUMER.CREATE.{link.name}.{self.name}.{filters[0]}"
        else:
            if filters:
                config["filter_subjects"] = filters
            tail = f"CONSUMER.CREATE.{link.name}"
        body = {"stream_name": link.name, "config": config}
        return _joined(self.api + ".", tail).encode(), json.dumps(body).encode()

    def _start(self) -> dict[str, Any]:
        """Where the consumer starts: after the last copied sequence, else the configured start."""
        link = self.link
        if link.position:
            return {"deliver_policy": "by_start_sequence", "opt_start_seq": link.position + 1}
        start_seq = link.spec.get("opt_start_seq") or 0
        if start_seq:
            return {"deliver_policy": "by_start_sequence", "opt_start_seq": int(start_seq)}
        start_time = link.spec.get("opt_start_time")
        if start_time:
            return {"deliver_policy": "by_start_time", "opt_start_time": rfc3339(parse_rfc3339(start_time))}
        return {"deliver_policy": "all"}

    def _reset_request(self) -> tuple[bytes, bytes]:
        """A durable's reset request (back to its ack floor): its subject, and an empty body."""
        assert self.durable is not None
        api = self.api if self.link.external is not None else "$JS.API"
        tail = f"CONSUMER.RESET.{self.link.name}.{self.durable['name']}"
        return _joined(api + ".", tail).encode(), b""

    def _send_request(self) -> None:
        subject, body = self._request() if self.durable is None else self._reset_request()
        reply = ("$JSC.R." + _random_token()).encode()
        if self._reply_sub is not None:
            self.client.unsubscribe(self._reply_sub)
        self._reply_sub = self.client.subscribe(reply, self._on_created)
        hdrs = None
        if self.sourcing and not (self.durable is not None and self.link.is_mirror):  # (a mirror's: bare)
            hdrs = b"NATS/1.0\r\nNats-Required-Api-Level: %d\r\n" % self.api_level
            if self.api_level >= 5:
                hdrs += b"Nats-Stream-Identity: %s\r\n" % self.link.ident.encode()
            hdrs += b"\r\n"
        if self._wait is not None:
            self._wait.cancel()
        wait = CREATE_WAIT if self.durable is None else RESET_WAIT
        self._wait = self.loop.call_later(wait, self._timed_out)
        self.client.publish(subject, reply, hdrs, body, as_account=True)  # (the stream's config chose it)

    def _timed_out(self) -> None:
        self._wait = None
        self._failed(None)
        if self.durable is not None:  # a durable heard from meanwhile is asked again without waiting
            deliver = self.durable["deliver_subject"].encode()
            self._probe_sub = self.client.subscribe(deliver, self._on_probe)

    def _on_probe(self, subject: bytes, reply: bytes | None, hdrs: bytes | None, payload: bytes) -> None:
        if self._stopped or self.in_progress or self.fails == 0 or self._retry is None:
            return
        self._retry.cancel()
        self._retry = None
        self.fails = 0
        self.setup()

    def _failed(self, error: dict[str, Any] | None) -> None:
        if error is not None:
            self.error = error
        self.fails += 1
        self._cancel()
        self._schedule(0.0)

    def _on_created(self, subject: bytes, reply: bytes | None, hdrs: bytes | None, payload: bytes) -> None:
        if not self.in_progress or self._stopped:
            return
        try:
            answer = json.loads(payload)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):  # e.g. a 503 "no responders" status: the origin is not there
            log.warning("JetStream bad %s consumer create response: %r", self._kind(), payload[:200])
            self._failed(None)
            return
        error = answer.get("error")
        config = answer.get("config")
        if error is not None or not isinstance(config, dict):
            code = error.get("err_code") if isinstance(error, dict) else None
            if code == _IDENTITY_MISMATCH:  # the origin was recreated: copy it again from its start
                self.link.position, self.link.ident = 0, ""
                self.error = None
                self._cancel()
                self._schedule(0.0)
                return
            if code in _DOWNGRADE and self.sourcing and not (self.durable and self.link.is_mirror):
                if self.api_level > 4:
                    self.api_level -= 1
                elif self.durable is not None:  # no server without level 4 has durable sourcing
                    self._failed(error if isinstance(error, dict) else None)
                    return
                else:  # a server without sourcing consumers: a unique name, as it will not make one
                    self.sourcing = False
                    self.name = f"{self.base_name}_{_random_token()}"
                self._send_request()
                return
            error = error if isinstance(error, dict) else {"code": 500, "description": "invalid response"}
            log.warning(
                "JetStream error response for stream %s create %s consumer %s: %s",
                self.link.stream.name,
                self._kind(),
                self.link.name,
                error.get("description"),
            )
            self._failed(error)
            return
        if self.durable is not None and config.get("ack_policy") != "flow_control":
            kind = self._kind()  # nats-server's JS{Mirror,Source}ConsumerRequiresAckFCErr
            code = 10214 if self.link.is_mirror else 10217
            description = f"stream {kind} consumer requires flow control ack policy"
            self._failed({"code": 400, "err_code": code, "description": description})
            return
        self._created(answer, config, hdrs)

    def _created(self, answer: dict[str, Any], config: dict[str, Any], hdrs: bytes | None) -> None:
        link = self.link
        if self._reply_sub is not None:
            self.client.unsubscribe(self._reply_sub)
            self._reply_sub = None
        if self._wait is not None:
            self._wait.cancel()
            self._wait = None
        if not link.is_mirror:
            identity = get_header(hdrs, b"Nats-Stream-Identity") if hdrs else None
            link.take_identity(identity.decode() if identity else "")
        delivered = answer.get("delivered") or {}
        delivered_seq = delivered.get("stream_seq") or 0
        if isinstance(delivered_seq, int) and delivered_seq > link.position:
            link.position = delivered_seq
        self.consumer = str(answer.get("name") or "").encode()
        self.dseq = 0
        self.error = None
        self.fails = 0
        self.last = now_ns()
        self.in_progress = False
        deliver = str(config["deliver_subject"] if self.durable is None else self.durable["deliver_subject"])
        self._deliver_sub = self.client.subscribe(deliver.encode(), self._on_message, shown=True)

    def _kind(self) -> str:
        return "mirror" if self.link.is_mirror else "source"

    # -- deliveries -----------------------------------------------------------------------------------
    def _on_message(self, subject: bytes, reply: bytes | None, hdrs: bytes | None, payload: bytes) -> None:
        if self._stopped:
            return
        if hdrs is not None and hdrs.startswith(b"NATS/1.0 100") and not payload:
            self._on_control(reply, hdrs)
            return
        info = ack_reply_info(reply) if reply is not None else None
        if info is None or info[0] != self.consumer:
            return  # a delivery of a consumer given up on
        self.last = now_ns()
        _, sseq, dseq, dc, ts, pending = info
        link = self.link
        if dc > 1:
            return
        if sseq <= link.position:
            if dseq == self.dseq + 1:
                self.dseq = dseq
            return
        if dseq != self.dseq + 1:  # a delivery missed: from the last copied sequence again
            self.fails = 0
            self._cancel()
            self._schedule(0.0)
            return
        self.dseq = dseq
        self.lag = pending - 1 if pending else 0
        if pending < CAUGHT_UP and link.is_mirror:  # with mirror_direct it answers the origin's direct gets
            link.caught_up = True
        try:
            link._copy(subject, sseq, _without_expected(hdrs), payload, ts)
        except (ApiError, OSError) as exc:
            log.warning(
                "Error processing inbound %s message for '%s' > '%s': %s",
                self._kind(),
                link.stream.account.name,
                link.stream.name,
                exc,
            )
        link.position = sseq
        if not self._commit_due:
            self._commit_due = True
            self.loop.call_soon(self._commit)

    def _commit(self) -> None:
        """What a turn of the loop copied is written once (nobody publishes into this stream)."""
        self._commit_due = False
        try:
            self.link.stream.store.commit()
        except OSError as exc:
            log.error("JetStream stream %s: storing failed: %s", self.link.stream.name, exc)

    def _on_control(self, reply: bytes | None, hdrs: bytes) -> None:
        self.last = now_ns()
        if reply:  # a flow control request: answered with where the copy stands
            if self._commit_due:  # written first: a durable takes the answer as the ack of all up to it
                self._commit()
            answer = b"NATS/1.0\r\nNats-Last-Consumer: %d\r\nNats-Last-Stream: %d\r\n\r\n" % (
                self.dseq,
                self.link.position,
            )
            self.client.publish(reply, None, answer, b"", as_account=self._own_flow_control(reply))
            return
        last = get_header(hdrs, b"Nats-Last-Consumer")
        if last is not None and last.isdigit() and int(last) > 0 and int(last) != self.dseq:
            self._cancel()  # the heartbeat tells of deliveries that never came
            self._schedule(0.0)
            return
        stalled = get_header(hdrs, b"Nats-Consumer-Stalled")
        if stalled:
            self.client.publish(stalled, None, None, b"", as_account=self._own_flow_control(stalled))

    def _own_flow_control(self, reply: bytes) -> bool:
        """Whether a control message's reply is its consumer's flow control subject: answered as the account
        (a consumer on this server takes no answer of the server's own). Any other reply it names is
        answered as the server, so never acted on: whoever may publish on the deliver subject could name
        any (another consumer's ack, an API request)."""
        return bool(self.consumer) and reply.startswith(
            b"$JS.FC.%s.%s." % (self.link.name.encode(), self.consumer)
        )

    def info_lag(self) -> int:
        return self.lag if self.consumer else 0


def _without_expected(hdrs: bytes | None) -> bytes | None:
    """A copy's headers without Nats-Expected-* and Nats-Batch-* (never checked again by the copy)."""
    if not hdrs or (b"\r\nNats-Expected-" not in hdrs and b"\r\nNats-Batch-" not in hdrs):
        return hdrs
    lines = hdrs.split(b"\r\n")
    kept = [ln for ln in lines if not ln.startswith((b"Nats-Expected-", b"Nats-Batch-"))]
    return b"\r\n".join(kept)
