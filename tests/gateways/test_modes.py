"""An outbound gateway connection's choice of what to send, on fakes (nats-server 2.15 always asks for
interest-only mode, so its optimistic mode and the switch cannot be reached through the binary): the
optimistic mode and its RS-, the switch by INFO command, queue groups preferring the local cluster,
mapped replies, the hash nats-server gives a cluster name."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator

import pytest

from pynatsd.base.blocks import GatewayOptions, LeafNodeOptions
from pynatsd.base.options import Options
from pynatsd.broker.delivery import Client, Message, Subscription, publish, size_fields
from pynatsd.gateways.connection import Gateway
from pynatsd.gateways.manager import GatewayManager, gw_hash
from pynatsd.jetstream.consumer import _interested as consumer_interest
from pynatsd.leafnodes.leaf import LeafConnection
from pynatsd.leafnodes.manager import LeafManager
from pynatsd.server import Server
from tests.unit.test_read_slices import FakeTransport


@pytest.fixture
async def outbound() -> AsyncIterator[Gateway]:
    server = Server(Options())
    server.loop = asyncio.get_running_loop()
    server.scheduler.stall.loop = server.loop
    manager = GatewayManager(server, GatewayOptions(name="A", port=-1))
    gateway = Gateway(manager, outbound=True, name="B", url="nats://127.0.0.1:1")
    gateway.connection_made(FakeTransport())  # type: ignore[arg-type]
    yield gateway
    gateway.close("test over")


def handshake(gateway: Gateway, iom: bool) -> None:
    gateway.on_info({"server_id": "NB", "gateway": "B", "headers": True, "gateway_iom": iom})
    assert gateway.registered


def sent(gateway: Gateway, subject: bytes, reply: bytes | None = None) -> int:
    """Publish `subject` here; how many messages the gateway sent for it."""
    before = gateway.out_msgs
    msg = Message(None)
    msg.set(subject, reply, size_fields(None, b"x"), None, b"x", b"MSG " + subject + b" ")
    publish(gateway.server.sublist, msg, gateway.server.fanout.counts)
    return gateway.out_msgs - before


def command(gateway: Gateway, cmd: int, account: str) -> None:
    payload = base64.b64encode(account.encode()).decode()
    gateway.on_info({"server_id": "NB", "gateway": "B", "gateway_cmd": cmd, "gateway_cmd_payload": payload})


class LocalMember(Client):
    """A queue group's member in this cluster (takes what it is given)."""

    def take(self, sub: Subscription, msg: Message) -> bool:
        return True


async def test_optimistic_mode_sends_until_rs_minus(outbound: Gateway) -> None:
    handshake(outbound, iom=False)
    assert sent(outbound, b"foo") == 1
    outbound.on_runsub(b"$G", b"foo", None)  # the remote has no interest in foo
    assert (sent(outbound, b"foo"), sent(outbound, b"bar")) == (0, 1)
    outbound.on_rsub(b"$G", b"*", None, 1)  # a wildcard that covers it clears the no-interest
    assert sent(outbound, b"foo") == 1


async def test_switch_to_interest_only_mode(outbound: Gateway) -> None:
    handshake(outbound, iom=False)
    command(outbound, 2, "$G")
    outbound.on_rsub(b"$G", b"bar", None, 1)
    command(outbound, 3, "$G")
    assert outbound.accounts[b"$G"].mode == "Interest-Only"
    assert (sent(outbound, b"foo"), sent(outbound, b"bar")) == (0, 1)
    outbound.on_runsub(b"$G", b"bar", None)
    assert sent(outbound, b"bar") == 0


async def test_interest_only_from_the_start(outbound: Gateway) -> None:
    handshake(outbound, iom=True)
    assert sent(outbound, b"foo") == 0


async def test_queue_group_crosses_only_without_a_local_member(outbound: Gateway) -> None:
    handshake(outbound, iom=True)
    outbound.on_rsub(b"$G", b"work", b"q", 1)
    assert sent(outbound, b"work") == 1
    local = Subscription(LocalMember(), b"work", b"q", 1)
    outbound.server.sublist.insert(local)
    assert sent(outbound, b"work") == 0


async def test_mapped_replies(outbound: Gateway) -> None:
    handshake(outbound, iom=True)
    assert gw_hash("B") == b"b2oh2L"  # as nats-server 2.15 maps a reply for cluster "B"
    assert sent(outbound, b"_GR_.b2oh2L.abcdef._INBOX.x") == 1  # to B whatever its interest
    assert sent(outbound, b"_GR_.zzzzzz.abcdef._INBOX.x") == 0
    outbound.track_reply(b"$G", b"_GR_.b2oh2L.abcdef._INBOX.y")
    assert sent(outbound, b"_INBOX.y") == 1  # an answer goes back mapped
    assert outbound.out is not None
    outbound.out.flush()
    written = bytes(outbound.transport.data)  # type: ignore[union-attr]
    assert b"RMSG $G _GR_.b2oh2L.abcdef._INBOX.y 1\r\nx\r\n" in written


class Taker(Client):
    """A local subscriber recording what it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.got: list[bytes] = []

    def take(self, sub: Subscription, msg: Message) -> bool:
        self.got.append(msg.subject)
        return True


async def test_the_system_account_crosses_no_gateway(outbound: Gateway) -> None:
    """Neither way: no `>` taken for it outbound, and what an inbound names in it is dropped (a peer's
    `$SYS.REQ.…` would be answered with this server's rights); an ordinary account's message is delivered.
    The outbound's catch-all is nobody's interest (`is_gateway`: leaf nodes and JetStream skip it)."""
    server = outbound.server
    system = server.auth.system_account
    assert system and not outbound.gateways.carries(system) and outbound.gateways.carries("$G")
    outbound.watch_account(system)
    outbound.watch_account("$G")
    catch_alls = [sub for sub in server.sublist_for("$G").match(b"any").plain if sub.conn is outbound]
    assert len(catch_alls) == 1 and catch_alls[0].conn.is_gateway
    assert not [s for s in server.sublist_for(system).match(b"any").plain if s.conn is outbound]
    inbound = Gateway(outbound.gateways, outbound=False, name="B")
    inbound.connection_made(FakeTransport())  # type: ignore[arg-type]
    inbound.registered = inbound._connect_received = True  # (its CONNECT taken)
    taker = Taker()
    for account in (system, "$G"):
        server.sublist_for(account).insert(Subscription(taker, b"x.>", None, b"1"))
        inbound.on_rmsg(account.encode(), b"x.y", None, None, None, b"hi")
    assert taker.got == [b"x.y"]  # the `$G` one only
    inbound.close("test over")
    # A hub's leaf is told the account's interest: not the gateway's catch-all (it asked for everything)
    leafs = LeafManager(server, LeafNodeOptions())
    hub_side = LeafConnection(leafs)
    assert leafs._tells(hub_side, catch_alls[0]) is False
    assert leafs._tells(hub_side, Subscription(taker, b"x.>", None, b"1")) is True
    # ... nor does it bind a push consumer or keep a pull request's requester alive
    assert not consumer_interest((catch_alls[0],))
    assert consumer_interest((catch_alls[0], Subscription(taker, b"x.>", None, b"1")))
