"""Consumer priority groups (`priority_groups`, `priority_policy`, `priority_timeout`), pull requests with
their group fields, `Nats-Pin-Id`, `CONSUMER.UNPIN` and the pin advisories, against nats-server -js: the
same API answers and statuses, and the same deliveries over time to raw pull requests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from tests.jetstream.conftest import JsServer
from tests.jetstream.test_consumer_pause import Pair, _comparable, _on_both
from tests.servers import jetstream_pair

C = "$JS.API.CONSUMER.CREATE.PG."
UNPIN = "$JS.API.CONSUMER.UNPIN.PG."


def _consumer(name: str, **config: Any) -> tuple[str, Any]:
    return (C + name, {"stream_name": "PG", "config": {"durable_name": name, **config}})


SCRIPT: list[tuple[str, Any]] = [
    ("$JS.API.STREAM.CREATE.PG", {"name": "PG", "subjects": ["pg.>"]}),
    ("PUB pg.a", b""),
    ("PUB pg.b", b""),
    # The config's checks, one error each.
    _consumer("a", priority_policy="overflow"),
    _consumer("b", priority_groups=["g"]),
    _consumer("c", priority_timeout=1_000_000_000),
    _consumer("d", priority_policy="pinned_client", priority_groups=["g"], deliver_subject="to.d"),
    _consumer("e", priority_policy="overflow", priority_groups=["g", ""]),
    _consumer("f", priority_policy="overflow", priority_groups=["seventeen-chars-x"]),
    _consumer("g", priority_policy="overflow", priority_groups=["a b"]),
    _consumer("h", priority_policy="bogus", priority_groups=["g"]),
    _consumer("i", priority_policy="none", priority_groups=[], priority_timeout=-1),
    _consumer("j", priority_policy="prioritized", priority_groups=["g"], priority_timeout=-1),
    # Accepted: a pinned client gets a 2 min priority_timeout unless given one.
    _consumer("pin", priority_policy="pinned_client", priority_groups=["A", "b/c=_-9"]),
    _consumer("pin2", priority_policy="pinned_client", priority_groups=["A"], priority_timeout=-5),
    _consumer("pin3", priority_policy="pinned_client", priority_groups=["A"], priority_timeout=3_000_000_000),
    _consumer("ov", priority_policy="overflow", priority_groups=["A"], ack_policy="explicit"),
    _consumer("pr", priority_policy="prioritized", priority_groups=["A"]),
    _consumer("pr", priority_policy="overflow", priority_groups=["A", "B"]),  # an update
    ("$JS.API.CONSUMER.INFO.PG.pin", b""),
    ("$JS.API.CONSUMER.LIST.PG", b""),
    # CONSUMER.UNPIN's checks, in nats-server's order.
    (UNPIN + "pin", b""),
    (UNPIN + "pin", b"junk"),
    (UNPIN + "pin", {}),
    (UNPIN + "pin", {"group": 5}),
    (UNPIN + "pin", {"group": "bad name"}),
    (UNPIN + "pin", {"group": "seventeen-chars-x"}),
    ("$JS.API.CONSUMER.UNPIN.NOPE.pin", {"group": "A"}),
    (UNPIN + "nope", {"group": "A"}),
    (UNPIN + "pin", {"group": "Z"}),
    (UNPIN + "i", {"group": "A"}),
    (UNPIN + "pin", {"group": "A", "other": 1}),
    (UNPIN + "ov", {"group": "A"}),
    # Pull requests: their group fields' checks (statuses), and deliveries with or without a pin.
    ("NEXT i", {"batch": 1, "no_wait": True, "group": "A"}),
    ("NEXT i", {"batch": 1, "no_wait": True, "min_pending": 1}),
    ("NEXT i", {"batch": 1, "no_wait": True, "min_ack_pending": -1}),
    ("NEXT i", {"batch": 1, "no_wait": True, "id": "x"}),
    ("NEXT i", {"batch": 1, "no_wait": True, "priority": 10}),
    ("NEXT i", {"batch": 1, "no_wait": True, "priority": -1}),
    ("NEXT pin", {"batch": 1, "no_wait": True}),
    ("NEXT pin", {"batch": 1, "no_wait": True, "group": "Z"}),
    ("NEXT pin", {"batch": 1, "no_wait": True, "group": "A", "min_pending": 2}),
    ("NEXT pin", {"batch": 1, "no_wait": True, "group": "A", "priority": 3}),
    ("NEXT pin", {"batch": 1, "no_wait": True, "group": "A", "id": "not-the-pin"}),
    ("NEXT ov", {"batch": 1, "no_wait": True, "group": "A", "id": "x"}),
    ("NEXT ov", {"batch": 1, "no_wait": True, "group": "A", "min_pending": 1}),
    ("NEXT ov", {"batch": 1, "no_wait": True, "group": "A", "min_ack_pending": 1}),
    ("NEXT ov", {"batch": 1, "no_wait": True, "group": "A"}),
    ("NEXT pr", {"batch": 1, "no_wait": True, "group": "B", "priority": 9}),
    ("NEXT pin", {"batch": 1, "no_wait": True, "group": "A"}),
    ("NEXT pin", {"batch": 5, "no_wait": True, "group": "A"}),
    ("$JS.API.CONSUMER.INFO.PG.pin", b""),
    (UNPIN + "pin", {"group": "b/c=_-9"}),
    ("$JS.API.CONSUMER.INFO.PG.pin", b""),
    ("NEXT pin", {"batch": 1, "group": "A"}),
    # Malformed requests: json.Unmarshal's words (the group fields, embedded, named without their type).
    ("NEXT pin", {"batch": 1, "group": 5}),
    ("NEXT pin", {"group": "A", "priority": "x"}),
    ("NEXT pin", {"group": "A", "min_pending": 1.5}),
    ("NEXT pin", {"group": "A", "min_ack_pending": 1 << 63}),
    ("NEXT pin", {"group": "A", "id": ["x"]}),
    ("NEXT pin", {"batch": "x", "group": "A"}),
    ("NEXT pin", {"group": "A", "no_wait": "yes"}),
    ("NEXT pin", {"group": "A", "expires": 1.5}),
    ("NEXT pin", b'{"batch": 1, "group": "A"} {"batch": 2}'),
    ("NEXT pin", b'{"batch": 1, "group": '),
    ("NEXT pin", {"group": None, "batch": None}),
    ("PUB pg.c", b""),
    # A pin given for a message too big for the request goes with it; a bare request then takes the
    # message with an empty Nats-Pin-Id (it pins nobody).
    (UNPIN + "pin", {"group": "A"}),
    ("NEXT pin", {"batch": 1, "group": "A", "max_bytes": 1, "no_wait": True}),
    ("$JS.API.CONSUMER.INFO.PG.pin", b""),
    ("NEXT pin", b"1"),
    ("$JS.API.CONSUMER.INFO.PG.pin", b""),
]  # fmt: skip


def _status(msg: Msg) -> str | None:
    hdrs = msg.headers or {}
    status = hdrs.get("Status")
    return f"{status} {hdrs.get('Description', '')}".strip() if status else None


async def _run_script(nc: Client, out: list[Any]) -> None:
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox + ".*")
    for n, (subject, body) in enumerate(SCRIPT):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        if subject.startswith("PUB "):
            await nc.request(subject[4:], b"x", timeout=2)
        elif subject.startswith("NEXT "):
            await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.PG.{subject[5:]}", data, reply=f"{inbox}.{n}")
            # Read until the batch came or a status: a status for an earlier step shows that step.
            batch = body.get("batch") if isinstance(body, dict) else None
            batch = batch if isinstance(batch, int) else 1
            got: list[Any] = []
            while len(got) < batch:
                try:
                    msg = await sub.next_msg(0.4)
                except TimeoutError:
                    got.append("nothing")
                    break
                status = _status(msg)
                if status:  # on the request's own inbox: its step shows
                    got.append((msg.subject.rsplit(".", 1)[1], status))
                    break
                hdrs = msg.headers or {}
                got.append((msg.subject, "Nats-Pin-Id" in hdrs, len(hdrs.get("Nats-Pin-Id", ""))))
            out.append((subject, body, got))
        else:
            msg = await nc.request(subject, data, timeout=2)
            out.append((subject, body, _comparable(_without_pin(json.loads(msg.data)))))
    await sub.unsubscribe()


def _without_pin(body: Any) -> Any:
    """An answer with its pin's id and time shown by their shape (each server makes its own)."""
    for group in (body.get("priority_groups") or []) if isinstance(body, dict) else []:
        if "pinned_client_id" in group:
            group["pinned_client_id"] = len(group["pinned_client_id"])
        if group.get("pinned_ts") != "0001-01-01T00:00:00Z":
            group["pinned_ts"] = "set"
    return body


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    with jetstream_pair(tmp_path_factory.mktemp("pgroups")) as servers:
        yield servers


async def test_priority_group_api_matches_nats_server(pair: Pair) -> None:
    expected, got = await _on_both(pair, _run_script)
    diffs = [
        f"{subject} {body!r}:\n  nats-server {want}\n  pynatsd     {have}"
        for (subject, body, want), (_, _, have) in zip(expected, got, strict=True)
        if have != want
    ]
    assert not diffs, "\n".join(diffs)


class Observer:
    """What the clients of one server see: pulled messages and statuses per client, the pin advisories;
    pin ids are shown as P1, P2... in the order they first appear (each server makes its own)."""

    def __init__(self, nc: Client, stream: str, consumer: str, acks: bool) -> None:
        self.nc = nc
        self.acks = acks  # each message pulled is acked (and the ack answered) before the next step
        self.next = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self.events = f"$JS.EVENT.ADVISORY.CONSUMER.*.{stream}.{consumer}"
        self.pins: dict[str, str] = {}
        self.advisories: asyncio.Queue[Any] = asyncio.Queue()

    def pin(self, pin_id: str) -> str:
        return self.pins.setdefault(pin_id, f"P{len(self.pins) + 1}") if pin_id else ""

    def pin_id(self, label: str) -> str:
        return next((k for k, v in self.pins.items() if v == label), label)

    async def watch_advisories(self) -> None:
        async def seen(msg: Msg) -> None:
            if msg.subject.split(".")[4] not in ("PINNED", "UNPINNED"):
                return
            event = json.loads(msg.data)
            what = event.get("reason") or self.pin(event.get("pinned_id", ""))
            fields = sorted(k for k in event if k not in ("id", "timestamp"))
            await self.advisories.put(
                (msg.subject.split(".")[4], event["type"], event["group"], what, fields)
            )

        await self.nc.subscribe(self.events, cb=seen)

    async def advisory(self) -> Any:
        return await asyncio.wait_for(self.advisories.get(), 10)

    async def pull(self, body: dict[str, Any], expect: int = 1) -> list[Any]:
        """One pull request: its messages' data (with the pin they carry) and the status that ended it,
        until `expect` messages came or a status did."""
        if "id" in body:
            body = {**body, "id": self.pin_id(body["id"])}
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        await self.nc.publish(self.next, json.dumps(body).encode(), reply=inbox)
        got: list[Any] = []
        try:
            while len(got) < expect:
                msg = await sub.next_msg(body.get("expires", 0) / 1e9 + 5)
                status = _status(msg)
                if status:
                    got.append(status)
                    break
                got.append((msg.data, self.pin((msg.headers or {}).get("Nats-Pin-Id", ""))))
                if self.acks:
                    await msg.ack_sync()
        finally:
            await sub.unsubscribe()
        return got

    async def api(self, subject: str, body: Any) -> Any:
        reply = await self.nc.request(subject, json.dumps(body).encode(), timeout=2)
        return _without_pin(json.loads(reply.data))


async def _setup(nc: Client, stream: str, messages: int, **config: Any) -> Observer:
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=[f"{stream}.>"])
    for i in range(messages):
        await js.publish(f"{stream}.m", b"m%d" % i)
    body = {"stream_name": stream, "config": {"durable_name": "c", "ack_policy": "explicit", **config}}
    created = json.loads(
        (await nc.request(f"$JS.API.CONSUMER.CREATE.{stream}.c", json.dumps(body).encode())).data
    )
    assert "error" not in created, created
    obs = Observer(nc, stream, "c", acks=config.get("ack_policy") != "none")
    await obs.watch_advisories()
    return obs


EXPIRES = 600_000_000  # a held request's expiry, in ns


async def _pinned_flow(nc: Client, out: list[Any]) -> None:
    """The pin goes to the first requester and stays while it pulls; others wait (or are told 423 for a
    wrong id); it moves after priority_timeout without a request, and after an UNPIN."""
    obs = await _setup(nc, "PIN", 12, priority_policy="pinned_client", priority_groups=["G"],
                       priority_timeout=1_000_000_000)  # fmt: skip
    a = await obs.pull({"batch": 1, "group": "G", "expires": EXPIRES})
    out.append(("a pinned", a, await obs.advisory()))
    # b waits while a pulls with its pin; b's request expires unserved.
    b = asyncio.create_task(obs.pull({"batch": 1, "group": "G", "expires": EXPIRES}))
    await asyncio.sleep(0.05)
    out.append(("a again", await obs.pull({"batch": 2, "group": "G", "id": "P1", "expires": EXPIRES}, 2)))
    out.append(("b held", await b))
    out.append(("b wrong id", await obs.pull({"batch": 1, "group": "G", "id": "guess", "no_wait": True})))
    info = await obs.api("$JS.API.CONSUMER.INFO.PIN.c", {})
    out.append(("info", info["priority_groups"], info["num_pending"]))
    # No request from a for priority_timeout: the pin goes; b gets the next one.
    out.append(("timeout", await obs.advisory()))
    out.append(
        ("b pinned", await obs.pull({"batch": 1, "group": "G", "expires": EXPIRES}), await obs.advisory())
    )
    out.append(("a old pin", await obs.pull({"batch": 1, "group": "G", "id": "P1", "no_wait": True})))
    # An admin's UNPIN: a request still carrying the old pin is told so, a fresh one is pinned.
    out.append(("unpin", await obs.api("$JS.API.CONSUMER.UNPIN.PIN.c", {"group": "G"}), await obs.advisory()))
    out.append(("b old pin", await obs.pull({"batch": 1, "group": "G", "id": "P2", "expires": EXPIRES})))
    out.append(
        ("a pinned", await obs.pull({"batch": 1, "group": "G", "expires": EXPIRES}), await obs.advisory())
    )
    info = await obs.api("$JS.API.CONSUMER.INFO.PIN.c", {})
    out.append(("info", info["priority_groups"], info["num_pending"], info["num_ack_pending"]))


async def _overflow_flow(nc: Client, out: list[Any]) -> None:
    """Overflow: a request with min_pending / min_ack_pending is served only while the consumer is that
    far behind; one without them always."""
    obs = await _setup(nc, "OVF", 5, priority_policy="overflow", priority_groups=["O"], ack_policy="none")
    out.append(await obs.pull({"batch": 1, "group": "O", "min_pending": 10, "expires": EXPIRES}))
    out.append(await obs.pull({"batch": 3, "group": "O", "min_pending": 4, "expires": EXPIRES}, 3))
    out.append(await obs.pull({"batch": 1, "group": "O", "min_pending": 3, "expires": EXPIRES}))
    out.append(await obs.pull({"batch": 1, "group": "O", "no_wait": True}))
    # Held until enough messages come: published while it waits.
    held = asyncio.create_task(
        obs.pull({"batch": 2, "group": "O", "min_pending": 3, "expires": 3 * EXPIRES}, 2)
    )
    await asyncio.sleep(0.1)
    for i in range(3):
        await nc.jetstream().publish("OVF.m", b"late%d" % i)
    out.append(await held)
    # min_ack_pending: served once that many messages await their ack.
    obs2 = await _setup(nc, "OVA", 3, priority_policy="overflow", priority_groups=["O"])
    first = await obs2.pull({"batch": 1, "group": "O", "min_ack_pending": 1, "expires": EXPIRES})
    out.append(first)
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(obs2.next, b'{"batch": 1, "group": "O"}', reply=inbox)
    unacked = await sub.next_msg(5)  # kept unacked: one pending
    out.append(unacked.data)
    out.append(await obs2.pull({"batch": 1, "group": "O", "min_ack_pending": 1, "expires": EXPIRES}))
    out.append(await obs2.pull({"batch": 1, "group": "O", "min_ack_pending": 3, "expires": EXPIRES}))


async def _prioritized_flow(nc: Client, out: list[Any]) -> None:
    """Prioritized: the waiting request with the lowest priority number is served first, whenever it came."""
    obs = await _setup(nc, "PRI", 0, priority_policy="prioritized", priority_groups=["P"], ack_policy="none")
    low = asyncio.create_task(obs.pull({"batch": 2, "group": "P", "priority": 5, "expires": 4 * EXPIRES}, 2))
    await asyncio.sleep(0.05)
    high = asyncio.create_task(obs.pull({"batch": 1, "group": "P", "priority": 1, "expires": 4 * EXPIRES}))
    await asyncio.sleep(0.05)
    bare = asyncio.create_task(obs.pull({"batch": 1, "group": "P", "expires": 4 * EXPIRES}))
    await asyncio.sleep(0.1)
    for i in range(4):
        await nc.jetstream().publish("PRI.m", b"m%d" % i)
    out.append(await asyncio.gather(high, bare, low))


# Each flow with what nats-server's clients saw first (the flows compare every step; this pins the gist).
FLOWS = [
    (_pinned_flow, ("a pinned", [(b"m0", "P1")])),
    (_overflow_flow, ["408 Request Timeout"]),
    (_prioritized_flow, [[(b"m1", "")], [(b"m0", "")], [(b"m2", ""), (b"m3", "")]]),
]


@pytest.mark.parametrize(("flow", "first"), FLOWS, ids=["pinned", "overflow", "prioritized"])
async def test_pull_requests_over_time_match_nats_server(pair: Pair, flow: Any, first: Any) -> None:
    expected, got = await _on_both(pair, flow)
    assert expected[0][: len(first)] == first if isinstance(first, tuple) else expected[0] == first
    assert got == expected


async def test_priority_config_survives_restart(js_server: JsServer) -> None:
    """A durable's priority groups come back with it after a restart (the pin, in memory as in nats-server,
    does not): the next request is pinned anew."""
    nc = await js_server.connect()
    obs = await _setup(nc, "RS", 2, priority_policy="pinned_client", priority_groups=["G"])
    first = await obs.pull({"batch": 1, "group": "G", "expires": EXPIRES})
    await nc.flush()
    await js_server.restart()
    nc = await js_server.connect()
    obs = Observer(nc, "RS", "c", acks=True)
    obs.pins["old"] = "P1"
    info = await obs.api("$JS.API.CONSUMER.INFO.RS.c", {})
    assert info["config"]["priority_policy"] == "pinned_client" and info["config"]["priority_groups"] == ["G"]
    assert info["priority_groups"] == [{"group": "G", "pinned_ts": "0001-01-01T00:00:00Z"}]
    assert first == [(b"m0", "P1")]
    assert await obs.pull({"batch": 1, "group": "G", "expires": EXPIRES}) == [(b"m1", "P2")]
