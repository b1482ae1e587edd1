"""JetStream advisories and metrics on `$JS.EVENT.>`, nats-server 2.15.1 against pynatsd: a watcher hears the
same events, in the same order, with the same JSON, while a client creates a stream and consumers, NAKs a
message past max_deliver, lets one run out its ack wait, acks with sample_freq 100%, terminates one, and
deletes it all. Ids, times and what names the server or the connection are checked for shape, not value."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js import api

from pynatsd.broker.internal import InternalClient
from tests.jetstream.conftest import JsServer
from tests.servers import ServerProcess, jetstream_pair, require, server_with_config

Event = tuple[str, dict[str, Any]]

_NUID = re.compile(r"[0-9A-Za-z]{22}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z")
AUDITED = 10  # the scenario's API requests


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with jetstream_pair(tmp_path_factory.mktemp("advisories")) as (ref, ours):
        yield {"nats-server": ref, "pynatsd": ours}


async def _until(events: list[Event], done: Any, what: str, required: bool = True) -> None:
    for _ in range(200 if required else 20):
        if done([subject for subject, _ in events]):
            return
        await asyncio.sleep(0.025)
    assert not required, f"never heard {what}: {[s for s, _ in events]}"


async def _scenario(url: str) -> tuple[list[Event], int]:
    """The actions, each waited for (acks as requests: nats-server answers them once done); returns the
    events heard and how many terminated advisories a stream captured."""
    watcher = await nats.connect(url, name="watcher", allow_reconnect=False)
    events: list[Event] = []

    async def heard(msg: Any) -> None:
        events.append((msg.subject, json.loads(msg.data)))

    await watcher.subscribe("$JS.EVENT.>", cb=heard)
    await watcher.flush()
    nc = await nats.connect(url, name="actor", allow_reconnect=False)
    js = nc.jetstream()
    try:
        await js.add_stream(name="EVENTS", subjects=["$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>"])
        await js.add_stream(name="S", subjects=["s.>"])
        for i in range(3):
            await js.publish(f"s.{i}", b"x")
        config = api.ConsumerConfig(
            durable_name="C", ack_policy=api.AckPolicy.EXPLICIT, max_deliver=2, sample_freq="100%"
        )
        await js.add_consumer("S", config)
        pull = await js.pull_subscribe_bind("C", "S")
        for _ in range(2):  # s.0 delivered twice, NAKed twice: max_deliver reached
            (msg,) = await pull.fetch(1)
            await nc.request(msg.reply, b"-NAK")
        (msg,) = await pull.fetch(1)  # s.1: s.0 is given up on first
        await nc.request(msg.reply, b"+ACK")
        (msg,) = await pull.fetch(1)
        await nc.request(msg.reply, b"+TERM done with it")
        await js.delete_consumer("S", "C")
        # Audited with its error, and with who really asked: not who the request's header claims to be.
        forged = {"Nats-Request-Info": '{"acc":"$G","name":"mallory","kind":"Client"}'}
        await nc.request("$JS.API.CONSUMER.INFO.S.C", b"", headers=forged)
        # Given up on when its ack wait runs out, never acked.
        config = api.ConsumerConfig(
            durable_name="W", ack_policy=api.AckPolicy.EXPLICIT, max_deliver=1, ack_wait=0.3
        )
        await js.add_consumer("S", config)
        (msg,) = await (await js.pull_subscribe_bind("W", "S")).fetch(1)
        given_up = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.W"
        await _until(events, lambda subjects: given_up in subjects, given_up)
        await js.update_stream(api.StreamConfig(name="S", subjects=["s.>"], max_msgs=10))
        await js.delete_stream("S")  # with consumer W
        captured = (await js.stream_info("EVENTS")).state.messages
        await js.delete_stream("EVENTS")
        # The last events: the audits (which may come after the next answer), and EVENTS deleted (which
        # nats-server may not send: see the test).
        audits = "$JS.EVENT.ADVISORY.API"
        await _until(events, lambda subjects: subjects.count(audits) == AUDITED, f"{AUDITED} audits")
        gone = "$JS.EVENT.ADVISORY.STREAM.DELETED.EVENTS"
        await _until(events, lambda subjects: gone in subjects, gone, required=False)
    finally:
        await nc.close()
        await watcher.close()
    return events, captured


def _normalized(subject: str, doc: dict[str, Any]) -> dict[str, Any]:
    """The event with what differs between servers checked for shape and replaced by its kind."""
    doc = {**doc, "order": list(doc)}  # nats-server's field order, as its structs declare them
    assert _NUID.fullmatch(doc.pop("id")), doc
    assert _TIME.fullmatch(doc.pop("timestamp")), doc
    if "ack_time" in doc:
        assert isinstance(doc["ack_time"], int) and doc["ack_time"] > 0, doc
        doc["ack_time"] = "ns"
    if doc["type"].endswith("api_audit"):
        assert isinstance(doc.pop("server"), str)
        client = dict(doc["client"])
        assert _TIME.fullmatch(client.pop("start")), client
        assert isinstance(client.pop("id"), int)
        assert isinstance(client.pop("server"), str)
        # Measured by a PING nats-server sends at once, pynatsd after its first ping interval (2 s).
        client.pop("rtt", None)
        doc["client"] = client
        response = json.loads(doc["response"])
        doc["response"] = {"type": response["type"], "keys": sorted(response), "error": response.get("error")}
    return doc


def _audits(events: list[Event]) -> list[dict[str, Any]]:
    """The API audits, in the order of their requests: nats-server's API workers answer in parallel and
    each audits after its answer, so the audit of one request may come after the next one's."""
    audits = [_normalized(s, d) for s, d in events if s == "$JS.EVENT.ADVISORY.API"]
    return sorted(audits, key=lambda a: json.dumps(a, sort_keys=True))


def _by_stream(events: list[Event]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """The other events, in order per stream (each of nats-server's streams sends them from its own queue)."""
    out: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for subject, doc in events:
        if subject != "$JS.EVENT.ADVISORY.API":
            out.setdefault(doc["stream"], []).append((subject, _normalized(subject, doc)))
    return out


async def test_same_events_as_nats_server(servers: dict[str, ServerProcess]) -> None:
    kinds = list(servers)
    runs = await asyncio.gather(*(_scenario(servers[k].url) for k in kinds))
    seen = dict(zip(kinds, runs, strict=True))
    ref, ours = seen["nats-server"], seen["pynatsd"]
    ours_by_stream, ref_by_stream = _by_stream(ours[0]), _by_stream(ref[0])
    for name in ("S", "EVENTS"):
        deleted = f"$JS.EVENT.ADVISORY.STREAM.DELETED.{name}"
        assert ours_by_stream[name][-1][0] == deleted
        if ref_by_stream[name][-1][0] != deleted:
            # nats-server sends it through the stream's queue, which may stop first (1 run in 10 here).
            ours_by_stream[name].pop()
    assert ours_by_stream == ref_by_stream
    assert len(_audits(ref[0])) == AUDITED
    for audit, expected in zip(_audits(ours[0]), _audits(ref[0]), strict=True):
        assert audit == expected
    assert not [a for a in _audits(ours[0]) if a["client"]["name"] != "actor"]
    assert ours[1] == ref[1] == 1  # the terminated advisory, captured by a stream like any message
    subjects = [s for s, _ in ours[0]]
    for subject in (
        "$JS.EVENT.ADVISORY.STREAM.CREATED.S",
        "$JS.EVENT.ADVISORY.CONSUMER.CREATED.S.C",
        "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.S.C",
        "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.C",
        "$JS.EVENT.METRIC.CONSUMER.ACK.S.C",
        "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.S.C",
        "$JS.EVENT.ADVISORY.CONSUMER.DELETED.S.C",
        "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.W",
        "$JS.EVENT.ADVISORY.STREAM.UPDATED.S",
        "$JS.EVENT.ADVISORY.CONSUMER.DELETED.S.W",
        "$JS.EVENT.ADVISORY.STREAM.DELETED.S",
    ):
        assert subject in subjects  # the scenario reaches every kind of event


async def test_nothing_published_without_interest(tmp_path: Path) -> None:
    """No listener, no advisory: the account's client publishes only the answers (and nothing for acks)."""
    server = JsServer(tmp_path / "store")
    await server.start()
    try:
        assert server.server is not None
        assert server.server.jetstream is not None
        account = server.server.jetstream.accounts["$G"]
        nc = await server.connect()
        js = nc.jetstream()
        before = account.client.in_msgs
        await js.add_stream(name="Q", subjects=["q"])
        await js.publish("q", b"x")
        config = api.ConsumerConfig(durable_name="D", ack_policy=api.AckPolicy.EXPLICIT, sample_freq="100")
        await js.add_consumer("Q", config)
        (msg,) = await (await js.pull_subscribe_bind("D", "Q")).fetch(1)
        await nc.request(msg.reply, b"-NAK")
        (msg,) = await (await js.pull_subscribe_bind("D", "Q")).fetch(1)
        await nc.request(msg.reply, b"+ACK")
        await js.delete_stream("Q")
        # 3 API answers, 1 publish ack, 2 deliveries and 2 ack replies: nothing on $JS.EVENT.
        assert account.client.in_msgs - before == 8
    finally:
        await server.stop()


async def test_advisories_come_from_the_server(tmp_path: Path) -> None:
    """An advisory is the server's own message (no confused deputy): a server-side subscriber sees it with
    the server as its origin, which no API request handler or ack handler executes."""
    server = JsServer(tmp_path / "store")
    await server.start()
    try:
        assert server.server is not None
        probe = InternalClient(server.server, "$G", "probe")
        seen: list[tuple[bytes, bool]] = []
        probe.subscribe(b"$JS.EVENT.>", lambda subject, *_: seen.append((subject, probe.origin_is_server)))
        nc = await server.connect()
        await nc.jetstream().add_stream(name="O", subjects=["o"])
        for _ in range(100):
            if len(seen) == 2:
                break
            await asyncio.sleep(0.01)
        assert seen == [(b"$JS.EVENT.ADVISORY.STREAM.CREATED.O", True), (b"$JS.EVENT.ADVISORY.API", True)]
        probe.close()
    finally:
        await server.stop()


@pytest.mark.parametrize("kind", ["nats-server", "pynatsd"])
async def test_domain_named(kind: str, tmp_path: Path) -> None:
    """A server in a JetStream domain names it last in each advisory (and the audit)."""
    require(kind)
    text = f'jetstream {{ domain: hub, store_dir: "{tmp_path / "store"}" }}\n'
    with server_with_config(kind, tmp_path / "js.conf", text) as server:
        nc = await nats.connect(server.url, allow_reconnect=False)
        try:
            events: list[Event] = []

            async def heard(msg: Any) -> None:
                events.append((msg.subject, json.loads(msg.data)))

            await nc.subscribe("$JS.EVENT.>", cb=heard)
            await nc.jetstream().add_stream(name="D", subjects=["d"])
            await _until(events, lambda subjects: len(subjects) == 2, "2 events")
        finally:
            await nc.close()
    assert sorted((subject, list(doc)[-1], doc["domain"]) for subject, doc in events) == [
        ("$JS.EVENT.ADVISORY.API", "domain", "hub"),
        ("$JS.EVENT.ADVISORY.STREAM.CREATED.D", "domain", "hub"),
    ]


async def _pause_scenario(url: str) -> list[dict[str, Any]]:
    """A consumer created paused (not announced), paused anew through CONSUMER.PAUSE until a moment ahead
    (announced, then again when that moment passes), paused far ahead and resumed (announced each)."""
    watcher = await nats.connect(url, allow_reconnect=False)
    events: list[Event] = []

    async def heard(msg: Any) -> None:
        events.append((msg.subject, json.loads(msg.data)))

    await watcher.subscribe("$JS.EVENT.ADVISORY.CONSUMER.PAUSE.>", cb=heard)
    await watcher.flush()
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        await js.add_stream(name="P", subjects=["p.>"])
        soon = datetime.now(UTC) + timedelta(seconds=1)
        later = datetime.now(UTC) + timedelta(hours=1)
        create = {"stream_name": "P", "config": {"durable_name": "D", "ack_policy": "explicit"}}
        create["config"]["pause_until"] = later.strftime("%Y-%m-%dT%H:%M:%SZ")
        await nc.request("$JS.API.CONSUMER.CREATE.P.D", json.dumps(create).encode(), timeout=5)
        for until in (soon, None, later, None):
            body = json.dumps({"pause_until": until.strftime("%Y-%m-%dT%H:%M:%S.%fZ")} if until else {})
            await nc.request("$JS.API.CONSUMER.PAUSE.P.D", body.encode(), timeout=5)
            if until is soon:  # its end is announced too
                await _until(events, lambda s: len(s) >= 2, "the end of a pause")
        await _until(events, lambda s: len(s) >= 5, "every pause change")
        await js.delete_stream("P")
    finally:
        await nc.close()
        await watcher.close()
    return [_normalized(s, d) | {"subject": s} for s, d in events]


async def test_pause_advisories_as_nats_server(servers: dict[str, ServerProcess]) -> None:
    """Each change of pause_until, and each pause's end, on both servers; pause_until Go's zero time when
    none (its time.Time is never left out)."""
    seen = {k: await _pause_scenario(s.url) for k, s in servers.items()}
    for events in seen.values():
        for event in events:
            if event["pause_until"] != "0001-01-01T00:00:00Z":
                assert _TIME.fullmatch(event["pause_until"]), event
            event["pause_until"] = event["pause_until"].startswith("0001")  # a time, or Go's zero one
    assert [(e["paused"], e["pause_until"]) for e in seen["pynatsd"]] == [
        (True, False),  # paused until soon
        (False, False),  # ...which passed
        (False, True),  # resumed (already): the zero time
        (True, False),  # paused until later
        (False, True),  # resumed
    ]
    # The end's `paused`: nats-server compares the wall clock with the deadline when its timer (monotonic)
    # fires, and says true here (3 runs of 3), as a wall clock slewed behind makes it; pynatsd says false.
    seen["nats-server"][1]["paused"] = False
    assert seen["pynatsd"] == seen["nats-server"]
