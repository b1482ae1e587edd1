"""One MQTT client: an asyncio protocol (duck-typed, as pynatsd.broker.connection's) and a delivery
`Client` whose frames are MQTT PUBLISH packets.

What it does as nats-server's MQTT client does: CONNECT with its checks and return codes (the server's
users, with this listener's single user/token/no_auth_user in their place when it sets any; their
permissions), keep-alive (1.5 times the client's period with nothing read closes it), PINGREQ,
DISCONNECT, SUBSCRIBE and UNSUBSCRIBE (a `#` filter also takes its parent level, as nats-server's extra
subscription), PUBLISH both ways with nats-server's `Nmqtt-Pub` header on what NATS subscribers get: QoS
0, and QoS 1 from the client (delivered, stored in the account's `$MQTT_msgs` stream as nats-server
stores it, then PUBACK), retained messages (kept in `$MQTT_rmsgs`, sent with RETAIN to each new
subscription they match), a will (with its QoS and RETAIN, as a PUBLISH), and sessions: a record per
client ID in `$MQTT_sess` (a clean session's removed when it ends), a persistent one's subscriptions
back on its next CONNECT (session present). Every message it publishes goes through the broker's
policy (pynatsd.broker.delivery.publish), and every message it receives comes through `deliver` to
`take`.

QoS 2 from the client too: held in `$MQTT_qos2in` (PUBREC) until its PUBREL delivers it once (PUBCOMP).

QoS 1 and 2 subscriptions: each a durable JetStream consumer (pynatsd.mqtt.delivery), its messages
sent with a packet identifier and acked in JetStream by the client's PUBACK, or PUBREC, PUBREL and
PUBCOMP; NATS and QoS 0 messages reach them as QoS 0 (the filter's plain NATS subscription).

An MQTT 5.0 client takes these same paths, its `v5` (pynatsd.mqtt.v5) reading and writing what 5.0
changes: properties, reason codes, its Receive Maximum over QoS 1/2 deliveries (`Session.held`).

What it refuses, clearly: without JetStream of its own (a clustered server serving its cluster's),
persistent sessions (CONNACK 3, server unavailable), QoS 1/2 and retained PUBLISH, wills and QoS 1/2
subscriptions (SUBACK failure 0x80). A malformed packet closes this connection only.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, cast

from pynatsd.auth.jwt import JwtError, decode
from pynatsd.auth.users import DEFAULT_ACCOUNT, Authenticator
from pynatsd.base.ids import event_id
from pynatsd.base.listener import peer_address
from pynatsd.base.logging import get_logger
from pynatsd.base.tls import session_info
from pynatsd.broker.connection import _HOLD_AUTH, SlicedReader
from pynatsd.broker.delivery import Message, Subscription, new_head, publish, size_fields
from pynatsd.jetstream.errors import ApiError
from pynatsd.mqtt import delivery, packets, properties
from pynatsd.mqtt.delivery import Delivery, Held, Session
from pynatsd.mqtt.packets import PacketError
from pynatsd.mqtt.store import (
    MSGS_PREFIX,
    MSGS_STREAM,
    RETAINED_PREFIX,
    delete_session,
    ensure_streams,
    load_session,
    qos2_headers,
    qos2_subject,
    retained,
    retained_headers,
    server_origin,
    session_record,
    session_subject,
    take_qos2,
)
from pynatsd.mqtt.v5 import HELD_PUBLISHER, HELD_REPLY, V5, is_v5
from pynatsd.protocol.connect import ConnectOptions

if TYPE_CHECKING:
    from pynatsd.broker.core import Broker
    from pynatsd.jetstream import JetStream
    from pynatsd.matcher import Sublist
    from pynatsd.mqtt.listener import MQTTListener

log = get_logger()

#: The header nats-server puts on a message an MQTT client published (its QoS), seen by NATS subscribers.
# Subjects no client may publish to, MQTT clients included (as pynatsd.broker.connection's, nats-server's
# processInboundClientMsg): gateway-routed replies and JetStream clustering's.
RESERVED_PUBLISH = (b"_GR_.", b"$NRG.")
PUB_HEADERS = [b"NATS/1.0\r\nNmqtt-Pub:%d\r\n\r\n" % qos for qos in range(3)]  # by QoS (2: a will's)
# A CONNECT's bound is max_payload (nats-server's); later packets may be a max_payload PUBLISH and its
# header, topic and nats-server's `Nmqtt-Pub` header, so anything much longer is refused at its header.
_PACKET_SLACK = 70_000


def _is_user_jwt(password: str) -> bool:
    """nats-server takes an MQTT password that decodes as a user JWT (its signature by its issuer checked)
    as the client's JWT: operator mode then admits a bearer one (an MQTT client cannot sign a nonce)."""
    if password.count(".") != 2:
        return False
    try:
        decode(password, "user")
    except JwtError:
        return False
    return True


class MQTTConnection(SlicedReader):
    """An MQTT client connection (see the module docstring): a reader under the server's one per-turn
    budget and stall gate, as client connections, routes and leaf nodes are (SlicedReader)."""

    def __init__(self, server: Broker, listener: MQTTListener) -> None:
        super().__init__(server)
        self.listener = listener
        self.cid = server.next_cid()  # (the stall gate's producer id too)
        self.ip = ""
        self.port = 0
        self.nonce = ""
        self.opts = ConnectOptions()
        self.user = ""
        self.account = DEFAULT_ACCOUNT
        self.connected = False
        self.client_id = ""
        self.close_reason = ""
        self.in_msgs = 0
        self.in_bytes = 0
        # Deliveries to it: not in out_msgs/out_bytes, which nats-server leaves at 0 for MQTT clients
        # (its deliveries to them are internal callbacks); in pynatsd_mqtt_messages_out.
        self.delivered_msgs = 0
        self.delivered_bytes = 0
        # /connz fields, as a client connection's (pynatsd.broker.connection.Connection)
        self.start = datetime.now(UTC)
        self.stop: datetime | None = None
        self.rtt: float | None = None
        self.name = self.lang = self.version = ""
        self.tls_version = self.tls_cipher = ""
        self.tls_first = False
        self.is_websocket = False
        self.sublist: Sublist[Subscription] = server.sublist
        self.subs: dict[bytes, Subscription] = {}  # sid (the filter's subject, or `subject fwc`) -> sub
        self.reserved: set[Subscription] = set()  # filters starting with a wildcard: no `$` subjects
        self.will: packets.Will | None = None
        self.clean = True
        self.session_subject = b""  # where its session record is kept (pynatsd.mqtt.store)
        self.session_subs: dict[str, int] = {}  # the record's filters (NATS subjects) and their QoS
        self.session: Session | None = None  # its QoS 1/2 state (pynatsd.mqtt.delivery)
        self.sub_qos: dict[Subscription, int] = {}  # plain subscriptions of QoS 1/2 filters: their QoS
        self.deliveries: dict[Subscription, Delivery] = {}  # subscriptions on consumers' deliver subjects
        self.pubrel_sub: Subscription | None = None  # on the PUBREL consumer's deliver subject
        # nats-server's applyAccountLimits: the server's limits, lowered by a JWT user's and its account's
        self.max_payload: int = server.options.max_payload
        self.max_subs: int = server.options.max_subscriptions or -1  # (-1: no limit)
        self._buf = bytearray()
        self._pending: list[bytes] = []  # packets written at the end of this turn of the loop
        self._flush_handle: asyncio.Handle | None = None
        self._keep_alive = 0.0  # seconds without input that close the connection (0: none)
        self._start_mono = self._last_in = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self._expiry: asyncio.TimerHandle | None = None  # a JWT user's authentication ends
        self._authenticating = False
        self._heads: dict[bytes, bytes] = server.msg_heads
        self._msg = Message(self)
        self._fanout = server.fanout.counts
        self.pub_topic = b""  # the topic of the PUBLISH being delivered (its own receivers see it as sent)
        self.pub_subject = b""
        self.pub_retain = False
        self.fresh = True  # a clean session (3.1.1) or clean start (5.0): no stored session taken up
        self.v5: V5 | None = None  # a 5.0 client's state (pynatsd.mqtt.v5)

    @property
    def connection_type(self) -> str:
        """nats-server's connection type, for users' `allowed_connection_types`."""
        return "MQTT_WS" if self.is_websocket else "MQTT"

    def __repr__(self) -> str:
        tag = f"{self.ip}:{self.port} - mid:{self.cid}"
        return f'{tag} - "{self.client_id}"' if self.client_id else tag

    @property
    def last_activity(self) -> datetime:
        """Wall-clock time of the last bytes received (/connz)."""
        return self.start + timedelta(seconds=self._last_in - self._start_mono)

    @property
    def pending_bytes(self) -> int:
        transport = self.transport
        queued = sum(len(data) for data in self._pending)
        return queued + (transport.get_write_buffer_size() if transport is not None else 0)

    @property
    def mqtt_client(self) -> str:
        """Its MQTT client ID once its CONNECT is taken (/connz `mqtt_client`)."""
        return self.client_id if self.connected else ""

    def authenticator(self) -> Authenticator:
        return self.listener.authenticator()

    def account_connections(self, account: str) -> int:
        return self.listener.account_connections(account)

    # -- asyncio protocol -----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        peer = peer_address(self.transport)
        if peer is not None:
            self.ip, self.port = peer
        self.out = None  # deliveries come to `take`
        self.headers = False
        server = self.server
        limit = server.options.max_connections  # MQTT clients count among the clients, as nats-server's
        if limit < 0 or (limit > 0 and len(server.clients) + len(self.listener.clients) >= limit):
            log.error("%r - maximum connections exceeded", self)
            self.close("Maximum Connections Exceeded")
            return
        self.listener.clients.add(self)
        self.tls_version, self.tls_cipher = session_info(self.transport)
        server.stats.total_connections += 1
        log.debug("%r - Client connection created", self)
        if self.authenticator().required:
            timeout = self.listener.mqtt.auth_timeout or self.server.options.effective_auth_timeout
            self._timer = self.server.loop.call_later(timeout, self._auth_timeout)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self._last_in = time.monotonic()
        if self._input:  # earlier input still waits for its turn: this comes after it
            self._input.append(data)
            return
        self._take_slice(data)

    def _parse_slice(self, data: bytes, start: int, budget: int) -> int:
        """The packets of `data[start:]` that begin within `budget` bytes (after the partial packet held
        from earlier reads); return where the rest begins in `data` (SlicedReader's contract). A partial
        packet at the end is held here; a CONNECT being checked holds the rest (_HOLD_AUTH)."""
        held = len(self._buf)
        buf: bytes | bytearray = data
        pos = start
        if held:
            self._buf += memoryview(data)[start:]
            buf, self._buf, pos = self._buf, bytearray(), 0
        limit = pos + budget
        max_payload = self.server.options.max_payload
        scheduler = self.server.scheduler
        scheduler.reading = True
        try:
            subjects = packets.publish_subjects
            size = len(buf)
            while pos < limit and not self.closed and not self._authenticating:
                if pos + 4 < size and buf[pos] == 0x30 and self.connected and self.v5 is None:
                    # A 3.1.1 QoS 0 PUBLISH (no DUP, no RETAIN), whole, with a remaining length of 1 or 2
                    # bytes, to a topic checked before: delivered without the general path's calls
                    # (split_packet, _packet, parse_publish, _publish; what they check holds).
                    n = buf[pos + 1]
                    at = pos + 2
                    if n & 0x80:
                        n = n & 0x7F | buf[at] << 7 if buf[at] < 0x80 else -1
                        at += 1
                    topic_end = at + 2 + (buf[at] << 8 | buf[at + 1])
                    if at + 2 < topic_end <= at + n <= size:
                        topic = bytes(buf[at + 2 : topic_end])
                        subject = subjects.get(topic)
                        if subject is not None:
                            pos = at + n
                            self._deliver(topic, subject, bytes(buf[topic_end:pos]))
                            continue
                if not self.connected and pos < len(buf):
                    packets.check_first(buf, pos)
                packet = packets.split_packet(
                    buf, pos, max_payload + _PACKET_SLACK if self.connected else max_payload, self.v5 is None
                )
                if packet is None:  # a partial packet: kept for the next read
                    self._buf = bytearray(buf[pos:])
                    pos = len(buf)
                    break
                first, body_start, end = packet
                pos = end
                self._packet(first, bytes(buf[body_start:end]))
        except packets.ConnectRefused as refused:  # (its own name: compiled, one name has one type)
            log.error("%r - %s", self, refused)
            self._refuse_connect(refused.code)
            self.close("Protocol Violation")
        except PacketError as exc:
            log.error("%r - %s", self, exc)
            if self.v5 is not None:
                self.v5.refuse(exc)
            self.close("Protocol Violation")
        except Exception:  # a fault of ours: this connection goes, never the server (nor a replay of it)
            log.exception("%r - unexpected error while processing MQTT data", self)
            self.close("Protocol Violation")
        finally:
            scheduler.reading = False
            scheduler.read_done()
            scheduler.stall.after_read(self)
        if self.closed:
            return len(data)
        if self._authenticating:
            self.hold_reading(_HOLD_AUTH)
        if not held:
            return pos
        if pos < held:  # stopped inside the held packet (cannot happen: it completes first): keep it all
            self._buf = bytearray(buf[pos:held])
            return start
        return start + pos - held

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.close("Read Error" if exc is not None else "Client Closed")

    def pause_writing(self) -> None:
        """(The transport's buffer is checked against max_pending at each delivery.)"""

    def resume_writing(self) -> None:
        """(See pause_writing.)"""

    # -- packets ---------------------------------------------------------------------------------------
    def _packet(self, first: int, body: bytes) -> None:
        kind = first & 0xF0
        if not self.connected:
            if is_v5(body):
                self.v5 = V5(self)
                self._connect(packets.parse_connect(body, properties.parse))
            else:
                self._connect(packets.parse_connect(body))
        elif self.v5 is not None and self.v5.packet(first, body):
            return
        elif kind == packets.PUBLISH:
            self._publish(packets.parse_publish(first, body))
        elif kind == packets.SUBSCRIBE:
            self._subscribe(body)
        elif kind == packets.UNSUBSCRIBE:
            self._unsubscribe(body)
        elif kind == packets.PINGREQ:
            self._write(packets.PINGRESP_PACKET)
        elif kind == packets.DISCONNECT:
            self.will = None  # a normal disconnect discards the will [MQTT-3.1.2-8]
            self.close("Client Closed")
        elif kind == packets.CONNECT:
            raise PacketError("received a second CONNECT packet")
        elif kind == packets.PUBACK:
            self._acked(packets.packet_id(body))
        elif kind == packets.PUBCOMP:
            self._completed(packets.packet_id(body))
        elif kind == packets.PUBREL:
            self._release(packets.packet_id(body))
        elif kind == packets.PUBREC:
            self._received(packets.packet_id(body))
        else:
            raise PacketError(f"received unknown packet type {kind >> 4}")

    def _connect(self, connect: packets.Connect) -> None:
        self.client_id = connect.client_id or event_id()  # a NUID, as nats-server names it
        if self.v5 is not None:
            self.v5.connect(connect)
        self.fresh = connect.clean
        self.clean = connect.clean if self.v5 is None else self.v5.session_expiry == 0
        if not self.clean and self.listener.jetstream is None:
            log.error("%r - pynatsd keeps persistent MQTT sessions in its own JetStream: none here", self)
            self._refuse_connect(packets.SERVER_UNAVAILABLE)
            self.close("Protocol Violation")
            return
        will = connect.will
        if will is not None and (will.qos or will.retain) and self.listener.jetstream is None:
            raise PacketError("pynatsd keeps MQTT QoS 1/2 and retained wills in its own JetStream: none here")
        password = connect.password or ""
        self.opts = ConnectOptions(
            verbose=False,
            pedantic=False,
            user=connect.username or "",
            password=password,
            auth_token=password,
            jwt=password if _is_user_jwt(password) else "",  # MQTT has no field of its own for it
        )
        self._keep_alive = connect.keep_alive * 1.5
        self.will = will
        auth = self.authenticator()
        if not auth.is_slow(self.opts):
            self._authenticated(auth.authenticate(self, self.opts))
            return
        # bcrypt: off the loop, as client connections do; packets behind the CONNECT wait for it.
        self._authenticating = True
        checking = self.server.loop.run_in_executor(
            self.server.auth_workers, auth.authenticate, self, self.opts
        )
        checking.add_done_callback(self._checked)

    def _checked(self, done: asyncio.Future[tuple[str, str] | None]) -> None:
        self._authenticating = False
        if self.closed:
            return
        try:
            identity = done.result()
        except Exception as exc:  # (a broken hash): refused
            log.error("%r - authentication check failed: %s", self, exc)
            identity = None
        self._authenticated(identity)
        self.release_reading(_HOLD_AUTH)  # the packets after the CONNECT wait in _input

    def _authenticated(self, identity: tuple[str, str] | None) -> None:
        server = self.server
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if identity is None:
            server.stats.auth_failures += 1
            log.error("%r - authentication error", self)
            self._refuse_connect(packets.NOT_AUTHORIZED)
            self.close("Authentication Failure")
            return
        self.user, self.account = identity
        self.perms = self.authenticator().permissions(self.user)
        self.sublist = server.sublist_for(self.account)
        if server.links is not None and server.auth.jwt is not None:
            server.links.ensure(self.account)  # operator mode: its account's imports, as its JWT has them
        if not self._apply_grant():
            return
        js = self.listener.jetstream
        if js is not None:
            try:
                stored = ensure_streams(
                    js, self.account, self.listener.mqtt.stream_replicas, self.listener.domain
                )
            except ApiError as exc:
                log.error(
                    "%r - unable to connect: create MQTT streams for account %r: %s",
                    self,
                    self.account,
                    exc,
                )
                self.close("Protocol Violation")
                return
            if not stored:  # nats-server keeps every MQTT session's state in JetStream
                log.error("%r - unable to connect: JetStream not enabled for account %r", self, self.account)
                self.close("Protocol Violation")
                return
        self.listener.take_over(self)
        restored: dict[str, int] = {}
        present = False  # a stored session taken up again [MQTT-3.2.2-2]
        if js is not None:
            pending = self.listener.mqtt.max_ack_pending or delivery.DEFAULT_MAX_ACK_PENDING
            receive_maximum = self.v5.client_receive_maximum if self.v5 is not None else 0
            session = self.session = Session(self.client_id, pending, receive_maximum)
            self.session_subject = session_subject(self.listener.domain, self.client_id)
            found = load_session(js, self.account, self.session_subject)
            if found is not None:
                seq, record = found
                if record.get("id") != self.client_id:
                    log.error("%r - unable to connect: stored session does not match client ID", self)
                    self._refuse_connect(packets.IDENTIFIER_REJECTED)
                    self.close("Protocol Violation")
                    return
                session.restore(record)
                expires = record.get("expires")
                expired = isinstance(expires, (int, float)) and expires <= time.time()
                # [MQTT-3.1.2-6]: a clean session starts anew (5.0: a clean start, or an expired session)
                if self.fresh or record.get("clean") or expired:
                    delivery.delete_consumers(js, self.account, session)
                    delete_session(js, self.account, seq)
                else:
                    subs = record.get("subs")
                    restored = subs if isinstance(subs, dict) else {}
                    present = True
                    if self.v5 is not None:
                        self.v5.restore(record)
                    before = self.listener.sessions.get((self.account, self.client_id))
                    if before is not None and before.client_id == self.client_id:
                        session.resume(before)
            self.listener.sessions[(self.account, self.client_id)] = session
            for subject, qos in restored.items():
                code = self._add_filter(subject.encode(), qos) if qos in (0, 1, 2) else packets.SUBACK_FAILURE
                if code == packets.SUBACK_FAILURE:
                    log.error("%r - subscription %r of the stored session not restored", self, subject)
                else:
                    self.session_subs[subject] = code
            self._save_session()
        self.connected = True
        log.debug("%r - Client connected", self)
        if self.v5 is not None:
            self.v5.resumed(self.fresh)
            self._write(self.v5.connack(present, max_payload=server.options.max_payload + _PACKET_SLACK))
        else:
            self._write(packets.connack(packets.ACCEPTED, session_present=present))
        if self._keep_alive:
            self._timer = server.loop.call_later(self._keep_alive, self._keep_alive_tick)

    def _refuse_connect(self, code: int) -> None:
        """CONNACK refusing the CONNECT with 3.1.1 return code `code` (5.0: its reason code)."""
        self._write(packets.connack(code) if self.v5 is None else self.v5.refused(code))

    def _apply_grant(self) -> bool:
        """A JWT user's limits, the lower of its own, its account's and the server's (a SUBSCRIBE past
        `subs` fails, a PUBLISH past `payload` closes the connection, as nats-server's), and its expiry
        (its connection closes then). True: it may go on."""
        grant = self.authenticator().grant(self.user)
        if grant is None:
            return True
        if grant.subs >= 0 and (self.max_subs < 0 or grant.subs < self.max_subs):
            self.max_subs = grant.subs
        if grant.payload >= 0:
            self.max_payload = min(grant.payload, self.max_payload)
        if grant.expires_in > 0:
            self._expiry = self.server.loop.call_later(
                grant.expires_in, self._auth_expired, grant.expiry_error
            )
        return True

    def _auth_expired(self, err_text: str) -> None:
        self._expiry = None
        log.error("%r - %s", self, err_text)
        self.close("Authentication Expired")

    def _save_session(self, expires: float | None = None) -> None:
        """Store this session's record (nats-server keeps one for clean sessions too, while they last;
        `expires`: when a 5.0 session ends, in epoch seconds)."""
        session = self.session
        cons, pubrel = (session.cons, session.pubrel) if session is not None else ({}, None)
        stored = self.v5.stored if self.v5 is not None else None
        record = session_record(
            server_origin(self.server.server_name),
            self.client_id,
            self.clean,
            self.session_subs,
            cons,
            pubrel,
            expires,
            stored,
        )
        subject = self.session_subject
        msg = self._msg
        msg.set(subject, None, size_fields(None, record), None, record, b"MSG " + subject + b" ")
        publish(self.sublist, msg, self._fanout)

    def _publish(self, pub: packets.Publish) -> None:
        if (pub.qos or pub.retain) and self.listener.jetstream is None:
            raise PacketError(
                "pynatsd keeps MQTT QoS 1 and retained messages in its own JetStream: none here"
            )
        if pub.qos == 2:
            self._hold_qos2(pub)
        elif self._deliver(pub.topic, pub.subject, pub.payload, pub.qos, pub.retain) and pub.qos == 1:
            self._write(packets.puback(pub.packet_id))

    def _hold_qos2(self, pub: packets.Publish, extra: bytes = b"") -> None:
        """A QoS 2 PUBLISH, as nats-server's mqttStoreQoS2MsgOnce: held in `$MQTT_qos2in` under its packet
        id (a duplicate is dropped by the stream) until its PUBREL delivers it; PUBREC. (`extra`: a 5.0
        PUBLISH's properties as header lines.)"""
        flags = 0x04 | (0x01 if pub.retain else 0) | (0x08 if pub.dup else 0)
        headers = qos2_headers(pub.subject, flags, extra)
        size = len(headers) + len(pub.payload)
        if size > self.max_payload:
            log.error("%r - maximum payload exceeded: %d vs %d", self, size, self.max_payload)
            self.close("Maximum Payload Exceeded")
            return
        held = qos2_subject(self.client_id, pub.packet_id)
        msg = self._msg
        msg.set(held, None, size_fields(headers, pub.payload), headers, pub.payload, b"MSG " + held + b" ")
        publish(self.sublist, msg, self._fanout)
        self._write(packets.pubrec(pub.packet_id))

    def _release(self, packet_id: int) -> None:
        """PUBREL: the QoS 2 message held for `packet_id`, if any, is delivered (nats-server's
        mqttProcessPubRel); PUBCOMP either way (5.0: with 0x92 when none was held)."""
        js = self.listener.jetstream
        try:
            held = (
                None if js is None else take_qos2(js, self.account, qos2_subject(self.client_id, packet_id))
            )
        except ValueError as exc:
            self._write(packets.pubcomp(packet_id))
            raise PacketError(str(exc)) from None
        if held is not None:
            subject, retain, payload, extra = held
            headers, reply = (None, None) if self.v5 is None else self.v5.released(extra)
            self._deliver(packets.subject_to_topic(subject), subject, payload, 2, retain, headers, reply)
        elif self.v5 is not None:  # 5.0: 0x92, packet identifier not found
            self._write(self.v5.not_found(packet_id))
            return
        self._write(packets.pubcomp(packet_id))

    def _deliver(
        self,
        topic: bytes,
        subject: bytes,
        payload: bytes,
        qos: int = 0,
        retain: bool = False,
        with_headers: bytes | None = None,
        reply: bytes | None = None,
    ) -> bool:
        """Publish an MQTT message to the account as nats-server does: a NATS message with its
        `Nmqtt-Pub` header, under the client's publish permissions (a denied one is dropped, logged); a
        retained one is first stored in `$MQTT_rmsgs` (an empty one removes it), a QoS 1 one then in
        `$MQTT_msgs` (pynatsd.mqtt.store). A 5.0 PUBLISH's properties are `with_headers` (`Nmqtt-Pub`
        first) and `reply`. False if refused."""
        headers = PUB_HEADERS[qos] if with_headers is None else with_headers
        size = len(headers) + len(payload)
        self.in_msgs += 1
        self.in_bytes += size - 2  # as nats-server counts it: less a CR LF that an MQTT message does not have
        max_payload = self.max_payload
        if size > max_payload:
            log.error("%r - maximum payload exceeded: %d vs %d", self, size, max_payload)
            self.close("Maximum Payload Exceeded")
            return False
        if not self.may_publish(subject):
            return True  # (as nats-server: dropped, yet acknowledged)
        msg = self._msg
        if retain:
            flags = (qos << 1) | 0x01
            extra = b"" if with_headers is None else with_headers.split(b"\r\n", 2)[2][:-2]
            if reply is not None:
                extra += HELD_REPLY + reply + b"\r\n"
            kept = retained_headers(
                topic, flags, not payload, server_origin(self.server.server_name), self.user, extra
            )
            where = RETAINED_PREFIX + subject
            msg.set(where, None, size_fields(kept, payload), kept, payload, b"MSG " + where + b" ")
            publish(self.sublist, msg, self._fanout)
        sizes = size_fields(headers, payload)
        head = self._heads.get(subject) or new_head(self._heads, subject)
        msg.set(subject, reply, sizes, headers, payload, head)
        self.pub_topic, self.pub_subject, self.pub_retain = topic, subject, retain
        publish(self.sublist, msg, self._fanout)
        if qos:
            stored = MSGS_PREFIX + subject
            if reply is not None:  # (a 5.0 Response Topic: kept as a header, a stored message has no reply)
                headers = headers[:-2] + HELD_REPLY + reply + b"\r\n\r\n"
            if self.v5 is not None:  # (who published it, for its No Local subscriptions)
                headers = headers[:-2] + HELD_PUBLISHER + self.v5.publisher() + b"\r\n\r\n"
            if reply is not None or self.v5 is not None:
                sizes = size_fields(headers, payload)
            msg.set(stored, None, sizes, headers, payload, b"MSG " + stored + b" ")
            publish(self.sublist, msg, self._fanout)
        return True

    def may_publish(self, subject: bytes) -> bool:
        """Whether the client may publish to `subject` (a denial is logged)."""
        if subject.startswith(RESERVED_PUBLISH) or (
            self.perms is not None and not self.perms.can_publish(subject)
        ):
            log.error('%r - Publish Violation - User "%s", Subject "%s"', self, self.user, subject.decode())
            return False
        return True

    def _subscribe(self, body: bytes) -> None:
        packet_id, filters = packets.parse_filters(body, subscribe=True)
        granted = [self._add_filter(subject, qos) for _topic, subject, qos in filters]
        self._write(packets.suback(packet_id, granted))
        js = self.listener.jetstream
        if js is None:
            return
        changed = False
        for (_topic, subject, _qos), code in zip(filters, granted, strict=True):
            if subject is not None and code != packets.SUBACK_FAILURE:
                changed |= self.session_subs.get(subject.decode()) != code
                self.session_subs[subject.decode()] = code
        if changed:
            self._save_session()
        for (_topic, subject, _qos), code in zip(filters, granted, strict=True):
            if subject is not None and code != packets.SUBACK_FAILURE:
                self._send_retained(js, subject, code)

    def _send_retained(self, js: JetStream, subject: bytes, sub_qos: int) -> None:
        """The retained messages a new subscription on `subject` matches (with `foo/#`, `foo`'s too), with
        the RETAIN flag [MQTT-3.3.1-8], but those its subscribe-deny permissions keep from it; each with
        the lower of its QoS and the subscription's (a packet identifier of its own, nothing to ack)."""
        found = retained(js, self.account, subject)
        if len(subject) > 2 and subject.endswith(b".>"):
            found += retained(js, self.account, subject[:-2])
        perms = self.perms
        session = self.session
        for stored_subject, topic, payload, stored_qos, _headers, _stored_at in found:
            if perms is not None and perms.sub_deny and perms.delivery_denied(stored_subject):
                continue
            qos = min(stored_qos, sub_qos)
            pi = session.track_retained(subject) if qos and session is not None else 0
            header = delivery.publish_header(topic, len(payload), qos if pi else 0, pi, False, True)
            self._write(header)
            self._write(payload)

    def _add_filter(self, subject: bytes | None, qos: int, queue: bytes | None = None) -> int:
        """Subscribe one filter (a QoS 1/2 one with its consumers; `queue`: a 5.0 shared subscription's
        group, granted QoS 0); the QoS granted, or SUBACK_FAILURE."""
        if subject is None or subject.startswith(packets.NATS_PREFIX.encode()):
            return packets.SUBACK_FAILURE
        if queue is not None:  # (its QoS 1/2 would take a consumer its group shares: none yet)
            qos = 0
        if qos and (self.session is None or self.listener.jetstream is None):
            log.error("%r - pynatsd keeps MQTT QoS 1/2 subscriptions in its own JetStream: none here", self)
            return packets.SUBACK_FAILURE
        if qos == 2 and not self._ensure_pubrel():
            return packets.SUBACK_FAILURE
        tag = b"" if queue is None else b" $share " + queue
        sids = [(subject, subject + tag)]
        if len(subject) > 2 and subject.endswith(b".>"):  # `foo/#` takes `foo` too
            sids.append((subject[:-2], subject[:-2] + b" fwc" + tag))
        reserved = packets.is_reserved_filter(subject)
        added: list[Subscription] = []
        for sub_subject, sid in sids:
            at_limit = self._subs_at_limit()  # (nats-server checks before it looks for the sid)
            sub = None if at_limit else self.subs.get(sid)
            if sub is None and not at_limit:
                sub = self._add_sub(sub_subject, sid, reserved, queue)
                if sub is not None:
                    added.append(sub)
            if sub is None or not self._qos_consumer(sub_subject, sid, qos, reserved):
                # Refused as a whole, as nats-server's cleanupFailedSub.
                for done in added:
                    self.remove_sub(done)
                for _sub_subject, done_sid in sids:
                    self._drop_consumer(done_sid)
                return packets.SUBACK_FAILURE
            if qos:
                self.sub_qos[sub] = qos
            else:
                self.sub_qos.pop(sub, None)
        return qos

    def _qos_consumer(self, subject: bytes, sid: bytes, qos: int, reserved: bool) -> bool:
        """The consumer of a filter's sid for QoS 1/2 (created, or its stored one taken up again), and the
        subscription on its deliver subject; a QoS 0 filter's consumer, if it had one, deleted
        (nats-server's processJSConsumer). False if it cannot be."""
        session, js = self.session, self.listener.jetstream
        if session is None or js is None:
            return not qos
        key = sid.decode()
        cfg = session.cons.get(key)
        if not qos:
            if cfg is not None:
                self._drop_consumer(sid)
            return True
        if cfg is not None:
            sub = self.subs.get(str(cfg["deliver_subject"]).encode())
            if sub is not None and sub in self.deliveries:
                self.deliveries[sub].qos = qos
                return True
        else:
            cfg = delivery.subscription_consumer(self.listener.mqtt, session, subject)
            total = session.total_ack_pending + int(cfg["max_ack_pending"])
            if total > delivery.MAX_ACK_TOTAL:
                log.error(
                    "%r - max_ack_pending for all consumers would be %d which exceeds the limit of %d",
                    self,
                    total,
                    delivery.MAX_ACK_TOTAL,
                )
                return False
        try:
            delivery.ensure_consumer(js, self.account, MSGS_STREAM, cfg)
        except ApiError as exc:
            log.error("%r - Unable to add JetStream consumer for subscription on %r: %s", self, key, exc)
            return False
        if key not in session.cons:
            session.total_ack_pending += int(cfg.get("max_ack_pending") or 0)
        session.cons[key] = cfg
        inbox = str(cfg["deliver_subject"]).encode()
        sub = self._internal_sub(inbox)
        if sub is None:
            return False
        self.deliveries[sub] = Delivery(str(cfg["durable_name"]), qos, reserved, sid)
        return True

    def _subs_at_limit(self) -> bool:
        if 0 <= self.max_subs <= len(self.subs):
            log.error("%r - maximum subscriptions exceeded", self)
            return True
        return False

    def _internal_sub(self, subject: bytes) -> Subscription | None:
        """A subscription of the server's own on a consumer's deliver subject (its sid: the subject, as
        nats-server's), outside the client's permissions but counted in its subscription limit (None
        past it)."""
        sub = self.subs.get(subject)
        if sub is None:
            if self._subs_at_limit():
                return None
            sub = Subscription(self, subject, None, subject)
            self.sublist.insert(sub)
            self.subs[subject] = sub
        return sub

    def _ensure_pubrel(self) -> bool:
        """The session's PUBREL consumer (for its QoS 2 deliveries) and the subscription on its deliver
        subject; False if it cannot be."""
        session, js = self.session, self.listener.jetstream
        if session is None or js is None:
            return False
        cfg = session.pubrel
        if cfg is None:
            cfg = delivery.pubrel_consumer(self.listener.mqtt, session)
            if session.total_ack_pending + int(cfg["max_ack_pending"]) > delivery.MAX_ACK_TOTAL:
                log.error("%r - failed to initialize PUBREL processing: max_ack_pending over the limit", self)
                return False
        elif self.pubrel_sub is not None:
            return True
        try:
            delivery.ensure_consumer(js, self.account, delivery.OUT_STREAM, cfg)
        except ApiError as exc:
            log.error("%r - Unable to add JetStream consumer for PUBREL: %s", self, exc)
            return False
        if session.pubrel is None:
            session.total_ack_pending += int(cfg.get("max_ack_pending") or 0)
        session.pubrel = cfg
        self.pubrel_sub = self._internal_sub(str(cfg["deliver_subject"]).encode())
        return self.pubrel_sub is not None

    def _drop_consumer(self, sid: bytes) -> None:
        """A filter's consumer goes (unsubscribed, or now QoS 0), with what it has in flight."""
        session, js = self.session, self.listener.jetstream
        cfg = session.cons.pop(sid.decode(), None) if session is not None else None
        if session is None or js is None or cfg is None:
            return
        durable = str(cfg["durable_name"])
        session.forget(durable)
        session.forget(delivery.retained_key(sid))
        session.total_ack_pending -= int(cfg.get("max_ack_pending") or 0)
        self._drop(str(cfg["deliver_subject"]).encode())
        delivery.delete_consumer(js, self.account, MSGS_STREAM, durable)

    def _add_sub(
        self, subject: bytes, sid: bytes, reserved: bool, queue: bytes | None = None
    ) -> Subscription | None:
        """One NATS subscription of a filter under the client's permissions; None if refused."""
        if self.perms is not None and not self.perms.can_subscribe(subject, queue):
            log.error("%r - subscription violation for %s", self, subject.decode())
            return None
        sub = Subscription(self, subject, queue, sid)
        try:
            self.sublist.insert(sub)
        except ValueError:  # an invalid subject
            return None
        self.subs[sid] = sub
        if reserved:
            self.reserved.add(sub)
        links = self.server.links
        if links is not None:
            links.subscribed(self.account, sub)
        return sub

    def _unsubscribe(self, body: bytes) -> None:
        packet_id, filters = packets.parse_filters(body, subscribe=False)
        changed = False
        for _topic, subject, _qos in filters:
            if subject is None:
                continue
            self._drop(subject)
            self._drop_consumer(subject)
            if len(subject) > 2 and subject.endswith(b".>"):
                self._drop(subject[:-2] + b" fwc")
                self._drop_consumer(subject[:-2] + b" fwc")
            changed |= self.session_subs.pop(subject.decode(), None) is not None
        self._write(packets.unsuback(packet_id))
        if changed and self.listener.jetstream is not None:
            self._save_session()

    def _drop(self, sid: bytes) -> None:
        sub = self.subs.pop(sid, None)
        if sub is not None:
            self.remove_sub(sub)

    def remove_sub(self, sub: Subscription) -> None:
        self.subs.pop(sub.sid if isinstance(sub.sid, bytes) else b"%d" % sub.sid, None)
        self.reserved.discard(sub)
        self.sub_qos.pop(sub, None)
        self.deliveries.pop(sub, None)
        if sub is self.pubrel_sub:
            self.pubrel_sub = None
        self.sublist.remove(sub)
        links = self.server.links
        if links is not None:
            links.unsubscribed(sub)

    # -- deliveries (pynatsd.broker.delivery.deliver) --------------------------------------------------
    def take(self, sub: Subscription, msg: Message) -> bool:
        """A message for one of this client's subscriptions, written as a QoS 0 PUBLISH: the topic as its
        MQTT publisher sent it, else the subject converted back (nats-server's mqttDeliverMsgCbQoS0). A
        QoS 1/2 message for a QoS 1/2 filter comes from its consumer instead (`_take_stored`)."""
        if self.deliveries or self.pubrel_sub is not None:
            found = self.deliveries.get(sub)
            if found is not None:
                return self._take_stored(found, msg)
            if sub is self.pubrel_sub:
                return self._take_pubrel(msg)
        subject = msg.subject
        if subject[:1] == b"$" and sub in self.reserved:
            return False
        if self.sub_qos and sub in self.sub_qos and delivery.message_qos(msg.headers):
            return False
        origin = msg.origin
        retain = False
        if isinstance(origin, MQTTConnection) and origin.pub_subject == subject:
            topic, retain = origin.pub_topic, origin.pub_retain
        else:
            topic = packets.subject_to_topic(subject)
        payload = msg.payload
        if self.v5 is not None:
            packet = self.v5.deliver(sub, msg, topic, retain)
            if packet is None:
                return False
            self._write(packet)
        elif not self.closed and self.transport is not None:  # (`_write`'s, once for both parts)
            pending = self._pending
            pending.append(packets.publish_header(topic, len(payload)))
            pending.append(payload)
            if self._flush_handle is None:
                self._flush_handle = self.server.loop.call_soon(self._flush)
        return self._sent(len(payload))

    def _take_stored(self, found: Delivery, msg: Message) -> bool:
        """A message of a QoS 1/2 filter's consumer (nats-server's mqttDeliverMsgCbQoS12)."""
        reply = msg.reply
        if not reply:
            return False
        # (its own subject, `$MQTT.msgs.<subject>`: the head's, as `msg` is delivered under the inbox's)
        return self._send_stored(Held(found, msg.head[4:-1], msg.headers, msg.payload, reply))

    def _send_stored(self, held: Held) -> bool:
        """Send a consumer's message with the lower of its QoS and the filter's, under a packet identifier
        its ack reply is kept by; a redelivery with DUP. One the filter may not see (or, to a 5.0 client,
        one expired or too large) is acked, not sent; one past a 5.0 client's Receive Maximum is held."""
        session, found, subject, ack = self.session, held.found, held.subject, held.ack
        if session is None or len(subject) <= len(MSGS_PREFIX):
            return False
        qos = min(delivery.message_qos(held.headers), found.qos)
        if not qos:
            return False
        stripped = subject[len(MSGS_PREFIX) :]
        perms = self.perms
        if (
            (found.reserved and stripped[:1] == b"$")
            or (perms is not None and perms.sub_deny and perms.delivery_denied(stripped))
            or (self.v5 is not None and self.v5.is_local(found, held.headers))
        ):
            self._js_ack(ack)
            return True
        if session.must_wait(found.durable, ack):
            session.hold(held)
            return True
        pi, dup = session.track_publish(found.durable, ack)
        if not pi:
            return True  # max_ack_pending in flight: JetStream redelivers it after ack_wait
        payload = held.payload
        topic = packets.subject_to_topic(stripped)
        if self.v5 is not None:
            packet = self.v5.stored_packet(held, topic, qos, pi, dup)
            if packet is None:
                self._acked(pi)
                return True
            self._write(packet)
        else:
            self._write(delivery.publish_header(topic, len(payload), qos, pi, dup, False))
            self._write(payload)
        return self._sent(len(payload))

    def _send_held(self) -> None:
        """Messages held back by a 5.0 client's Receive Maximum, as acknowledgements free places for them."""
        session = self.session
        if self.v5 is not None and self.v5.waiting_retained and not self.closed:
            self.v5.send_waiting()
        while session is not None and not self.closed and (held := session.next_held()) is not None:
            self._send_stored(held)

    def _take_pubrel(self, msg: Message) -> bool:
        """A PUBREL the session owes (from `$MQTT_out`): sent, its ack reply kept until PUBCOMP."""
        pi = delivery.pubrel_id(msg.headers)
        if self.session is None or not pi or not msg.reply:
            return False
        self.session.track_pubrel(pi, msg.reply)
        self._write(delivery.pubrel_packet(pi))
        return True

    def _acked(self, pi: int) -> None:
        """PUBACK: the QoS 1 message sent as `pi` is acked in JetStream (nats-server's mqttProcessPubAck)."""
        if self.session is not None:
            self._js_ack(self.session.untrack_publish(pi))
            if self.session.held or (self.v5 is not None and self.v5.waiting_retained):
                self._send_held()

    def _received(self, pi: int) -> None:
        """PUBREC: the QoS 2 message sent as `pi` is acked, its PUBREL stored in `$MQTT_out` until the
        client's PUBCOMP (nats-server's mqttProcessPubRec)."""
        session = self.session
        if session is None:
            return
        session.track_pubrel(pi, b"")
        ack = session.untrack_publish(pi)
        where = delivery.PUBREL_PREFIX + session.id_hash.encode()
        self._publish_internal(where, delivery.pubrel_headers(pi), b"")
        self._js_ack(ack)

    def _completed(self, pi: int) -> None:
        """PUBCOMP: the PUBREL sent as `pi` is acked in JetStream."""
        if self.session is not None:
            self._js_ack(self.session.untrack_pubrel(pi))
            if self.session.held or (self.v5 is not None and self.v5.waiting_retained):
                self._send_held()

    def _js_ack(self, reply: bytes) -> None:
        if reply:
            self._publish_internal(reply, None, b"")

    def _publish_internal(self, subject: bytes, headers: bytes | None, payload: bytes) -> None:
        """A message of the server's own for this session (a JetStream ack, a PUBREL to store), outside the
        client's permissions, as nats-server's jsa sends them."""
        msg = Message(self)  # (not `_msg`: this may run while that one is delivered)
        msg.set(subject, None, size_fields(headers, payload), headers, payload, b"MSG " + subject + b" ")
        publish(self.sublist, msg, self._fanout)

    def _sent(self, size: int) -> bool:
        """Count a PUBLISH of `size` payload bytes (written); a client past max_pending is a slow consumer."""
        self.delivered_msgs += 1
        self.delivered_bytes += size
        transport = self.transport
        if transport is not None and transport.get_write_buffer_size() > self.server.options.max_pending:
            log.error(
                "%r - Slow Consumer Detected: MaxPending of %d Exceeded",
                self,
                self.server.options.max_pending,
            )
            self.server.stats.slow_consumers += 1
            self.close("Slow Consumer (Pending Bytes)")
        return True

    # -- writing, timers, closing ------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        if self.closed or self.transport is None:
            return
        self._pending.append(data)
        if self._flush_handle is None:
            self._flush_handle = self.server.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        pending, self._pending = self._pending, []
        if pending and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(pending))

    def _auth_timeout(self) -> None:
        self._timer = None
        if not self.connected and not self.closed:
            log.error("%r - Authentication Timeout", self)
            self.close("Authentication Timeout")

    def _keep_alive_tick(self) -> None:
        idle = time.monotonic() - self._last_in
        if idle >= self._keep_alive:
            self._timer = None
            log.debug("%r - keep-alive expired, closing", self)
            self.close("Read Error")
            return
        self._timer = self.server.loop.call_later(self._keep_alive - idle, self._keep_alive_tick)

    def close(self, reason: str, err_text: str | None = None) -> None:
        """Close (idempotent): what is written so far goes out first; the will is published unless the
        client said DISCONNECT; its subscriptions go."""
        if self.closed:
            return
        self.closed = True  # first: the will's publish (a payload past the limit, say) cannot close it again
        self.close_reason = reason
        self.stop = datetime.now(UTC)
        will, self.will = self.will, None
        v5 = self.v5
        if v5 is not None:
            v5.closing(reason)
        if will is not None and self.connected:
            if v5 is None:
                self._deliver(will.topic, will.subject, will.message, will.qos, will.retain)
            elif reason == "Duplicate Client ID" or not v5.delay_will(will):  # (its session ended)
                v5.publish_will(will)
        for timer in (self._timer, self._expiry):
            if timer is not None:
                timer.cancel()
        self._timer = self._expiry = None
        kept = dict(self.subs)
        for sub in kept.values():
            self.remove_sub(sub)
        self.subs = kept  # (what /connz?state=closed counts, as nats-server)
        js = self.listener.jetstream
        if self.connected and self.clean and js is not None and self.session is not None:
            delivery.delete_consumers(js, self.account, self.session)
            if self.listener.sessions.get((self.account, self.client_id)) is self.session:
                del self.listener.sessions[(self.account, self.client_id)]
        if self.connected and self.clean and js is not None:  # a clean session ends with its connection
            found = load_session(js, self.account, self.session_subject)
            if found is not None and found[1].get("id") == self.client_id:
                delete_session(js, self.account, found[0])
        elif self.connected and js is not None and v5 is not None and reason != "Duplicate Client ID":
            expires = v5.expires()
            if expires is not None:  # a 5.0 session kept for its Session Expiry Interval
                self._save_session(expires)
        self.listener.forget(self)
        self.server.scheduler.stall.forget(self)
        self._input, self._buf = [], bytearray()  # input still waiting for its turn goes with it
        if self._flush_handle is not None:
            self._flush_handle.cancel()
        self._flush()
        if self.transport is not None:
            self.transport.close()
        log.debug("%r - Client connection closed: %s", self, reason)
