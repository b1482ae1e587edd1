"""Message schedules against nats-server -js: `allow_msg_schedules` (what it cannot be combined with, at
create and update), every refusal of a schedule's headers, the schedules stored, the copies they fire onto
their targets (`@at`, `@every`, cron in a time zone, with TTL, rollup and source) and a client's purge; and
schedules that survive a kill -9."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from pynatsd.jetstream.scheduling import parse_cron
from tests.jetstream.conftest import jetstream_life
from tests.jetstream.test_api_errors import ask
from tests.jetstream.test_msg_ttl import _until

SEC = 1_000_000_000
CREATE, UPDATE = "$JS.API.STREAM.CREATE.", "$JS.API.STREAM.UPDATE."
FAR = "@at 2099-01-01T00:00:00Z"  # valid, and never fires while the tests run


CONFIG_CASES: list[tuple[str, Any]] = [
    (CREATE + "C1", {"name": "C1", "allow_msg_schedules": True}),
    (UPDATE + "C1", {"name": "C1", "allow_msg_schedules": False}),
    (UPDATE + "C1", {"name": "C1", "allow_msg_schedules": True, "deny_purge": True}),
    (CREATE + "C2", {"name": "C2", "allow_msg_schedules": True, "discard": "new"}),
    (CREATE + "C2", {"name": "C2", "allow_msg_schedules": True, "allow_msg_counter": True}),
    (CREATE + "C2", {"name": "C2", "allow_msg_schedules": True, "deny_purge": True}),
    (CREATE + "C3", {"name": "C3", "allow_msg_schedules": True, "mirror": {"name": "C1"}}),
    (CREATE + "C4", {"name": "C4", "allow_msg_schedules": True, "sources": [{"name": "C1"}]}),
    (CREATE + "C5", {"name": "C5", "subjects": ["c5"]}),
    (UPDATE + "C5", {"name": "C5", "subjects": ["c5"], "allow_msg_schedules": True}),
    (CREATE + "C6", {"name": "C6", "allow_msg_schedules": "yes"}),
    (CREATE + "C7", {"name": "C7", "allow_msg_schedules": True, "storage": "memory", "allow_msg_ttl": True}),
]  # fmt: skip


async def test_schedule_config_answered_as_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    for subject, body in CONFIG_CASES:
        assert await ask(ours, subject, body) == await ask(ref, subject, body), (subject, body)


def _at(seconds: float) -> str:
    return "@at " + (datetime.now(UTC) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


T = "Nats-Schedule-Target"
PUBLISH_CASES: list[tuple[str, dict[str, str] | None]] = [
    ("p.a", {"Nats-Schedule": FAR, T: "p.out", "X-Kept": "1"}),
    ("p.a", {"Nats-Schedule": FAR, T: "p.out", "Nats-Rollup": "sub"}),
    ("p.a", {"Nats-Schedule": FAR, T: "p.out", "Nats-Rollup": "all"}),
    ("p.a", {"Nats-Schedule": FAR}),
    ("p.a", {"Nats-Schedule": FAR, T: "p.a"}),
    ("p.a", {"Nats-Schedule": FAR, T: "p.*"}),
    ("p.a", {"Nats-Schedule": FAR, T: "elsewhere"}),
    ("p.a", {"Nats-Schedule": FAR, T: "p.out", "Nats-Schedule-TTL": "5s"}),
    ("p.a", {"Nats-Schedule": FAR, T: "p.out", "Nats-Schedule-TTL": "soon"}),
    ("p.a", {"Nats-Schedule": FAR, T: "p.out", "Nats-Schedule-Rollup": "all"}),
    ("p.a", {"Nats-Schedule": FAR, T: "p.out", "Nats-Schedule-Rollup": "sub"}),
    ("p.a", {"Nats-Schedule": FAR, T: "p.out", "Nats-Schedule-Source": "p.src"}),
    ("p.a", {"Nats-Schedule": FAR, T: "p.out", "Nats-Schedule-Source": "p.out"}),
    ("p.a", {"Nats-Schedule": FAR, T: "p.out", "Nats-Schedule-Source": "p.a"}),
    ("p.a", {"Nats-Schedule": FAR, T: "p.out", "Nats-Schedule-Source": "p.>"}),
    ("p.a", {"Nats-Schedule": FAR, T: "p.out", "Nats-Schedule-Source": "other"}),
    ("p.a", {"Nats-Schedule": "@at 2099-01-01T00:00:00+02:00", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "@at 2099-01-01T00:00:00.5Z", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "@at 2001-01-01T00:00:00Z", T: "p.out", "Nats-Schedule-Time-Zone": "UTC"}),
    ("p.a", {"Nats-Schedule": "@at 2099-13-01T00:00:00Z", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "@at 2099-01-01 00:00:00Z", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "@at tomorrow", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "@every 500ms", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "@every 1", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "@every -5s", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "@every 1h", T: "p.out", "Nats-Schedule-Time-Zone": "UTC"}),
    ("p.a", {"Nats-Schedule": "@every 1h", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "@yearly", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "@weekly", T: "p.out", "Nats-Schedule-Time-Zone": "Europe/Amsterdam"}),
    ("p.a", {"Nats-Schedule": "@daily", T: "p.out", "Nats-Schedule-Time-Zone": "Mars/Olympus"}),
    ("p.a", {"Nats-Schedule": "@daily", T: "p.out", "Nats-Schedule-Time-Zone": ""}),
    ("p.a", {"Nats-Schedule": "@fortnightly", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "0 0 0 1 1", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "0 0 12 * JAN-MAR mon-fri", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "0 30 9 1,15 * ?", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "*/0 * * * * *", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "60 * * * * *", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "0 0 0 0 * *", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "1-2-3 * * * * *", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "5-1 * * * * *", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "0 0 0 31 2 *", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "0 0 0 29 2 *", T: "p.out"}),
    ("p.a", {"Nats-Schedule": "0 0 0 1 1 * extra", T: "p.out"}),
    ("p.a", {"Nats-Schedule-Time-Zone": "Nowhere/Land"}),
    ("p.a", {"Nats-Scheduler": "p.b"}),
    ("p.a", {"Nats-Schedule-Next": "soon", "Nats-Scheduler": "p.b"}),
    ("p.a", {"Nats-Schedule-Next": "purge"}),
    ("p.a", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "p.a"}),
    ("p.a", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "p.*"}),
    ("p.src", {"Plain": "yes"}),
    ("p.a", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "p.src"}),
    ("p.a", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "p.never"}),
    ("p.b", {"Nats-Schedule": FAR, T: "p.out", "Nats-Msg-Id": "one"}),
    ("p.b", {"Nats-Schedule": FAR, T: "p.out", "Nats-Msg-Id": "one"}),
    ("p.c", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "p.b"}),
    ("off", {"Nats-Schedule": FAR, T: "off.out"}),
    ("off", {"Nats-Schedule": "@every 1", T: "off.out"}),
    ("off", {"Nats-Schedule-Time-Zone": "Nowhere/Land"}),
    ("off", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "off.x"}),
    ("off", {"Nats-Scheduler": "off.x"}),
    ("ttl", {"Nats-Schedule": FAR, T: "ttl.out", "Nats-Schedule-TTL": "5s"}),
]  # fmt: skip


def _message(got: dict[str, Any]) -> Any:
    if "error" in got:
        return got["error"]
    m = got["message"]
    return m["subject"], m["seq"], base64.b64decode(m.get("hdrs", "")), base64.b64decode(m.get("data", ""))


async def publish_answers(nc: Client) -> list[Any]:
    """PubAcks (or errors) for schedules, good and bad, on a stream with schedules and on one without; then
    every message stored."""
    for cfg in (
        {"name": "P", "subjects": ["p.>"], "allow_msg_schedules": True, "allow_msg_ttl": True},
        {"name": "OFF", "subjects": ["off", "off.>"]},
        {"name": "NOTTL", "subjects": ["ttl", "ttl.>"], "allow_msg_schedules": True},
    ):
        await nc.request(CREATE + cfg["name"], json.dumps(cfg).encode(), timeout=5)
    out: list[Any] = []
    for subject, hdrs in PUBLISH_CASES:
        msg = await nc.request(subject, b"body", timeout=5, headers=hdrs)
        out.append((subject, hdrs, json.loads(msg.data)))
    for stream in ("P", "OFF", "NOTTL"):
        info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)).data)
        last = info["state"]["last_seq"]
        for seq in range(1, last + 1):
            body = json.dumps({"seq": seq}).encode()
            got = json.loads((await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}", body, timeout=5)).data)
            out.append(_message(got))
    return out


async def test_schedule_publishes_answered_as_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    want, got = await asyncio.gather(publish_answers(ref), publish_answers(ours))
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        assert g == w, (i, w, g)


_NEXT = re.compile(rb"(Nats-Schedule-Next: )[0-9T:.\-]+")


async def _last(nc: Client, stream: str, subject: str) -> Any:
    body = json.dumps({"last_by_subj": subject}).encode()
    got = _message(json.loads((await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}", body, timeout=5)).data))
    if isinstance(got, tuple):  # the next firing's time masked (its offset kept)
        subject, _, hdrs, data = got
        return subject, _NEXT.sub(rb"\1<time>", hdrs), data
    return got


async def firing_flow(nc: Client) -> list[Any]:
    """Schedules that fire: once (`@at`, with a source), repeating (`@every` with TTL and rollup, cron each
    second in a time zone); the copies on their targets, the schedules left, a client's purge of one."""
    cfg = {"name": "F", "subjects": ["f.>"], "allow_msg_schedules": True, "allow_msg_ttl": True}
    out: list[Any] = [await ask(nc, CREATE + "F", cfg)]
    await nc.request("f.src", b"from-source", timeout=5, headers={"Src": "1"})
    cases: list[tuple[str, dict[str, str]]] = [
        ("f.once", {"Nats-Schedule": _at(0), T: "f.out.once", "X-A": "1", "Nats-Msg-Id": "m1",
                    "Nats-Expected-Stream": "F"}),
        ("f.sourced", {"Nats-Schedule": _at(0), T: "f.out.sourced", "Nats-Schedule-Source": "f.src"}),
        ("f.nosource", {"Nats-Schedule": _at(0), T: "f.out.nosource", "Nats-Schedule-Source": "f.none"}),
        ("f.every", {"Nats-Schedule": "@every 1s", T: "f.out.every", "Nats-Schedule-TTL": "1m",
                     "Nats-Schedule-Rollup": "sub", "Nats-TTL": "1h"}),
        ("f.cron", {"Nats-Schedule": "* * * * * *", T: "f.out.cron",
                    "Nats-Schedule-Time-Zone": "Asia/Kolkata"}),
    ]  # fmt: skip
    for subject, hdrs in cases:
        out.append(json.loads((await nc.request(subject, b"payload", timeout=5, headers=hdrs)).data))

    async def fired() -> bool:
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.F", b'{"subjects_filter":"f.out.>"}')).data)
        subjects = info["state"].get("subjects", {})
        return len(subjects) == 5 and subjects["f.out.every"] == 1

    await _until(fired)
    for subject in ("f.out.once", "f.out.sourced", "f.out.nosource", "f.out.every", "f.out.cron"):
        out.append(await _last(nc, "F", subject))
    for subject in ("f.once", "f.sourced", "f.every", "f.cron"):  # the `@at` ones are purged
        out.append(await _last(nc, "F", subject))
    purge = {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "f.every"}
    out.append(json.loads((await nc.request("f.stop", b"", timeout=5, headers=purge)).data))
    out.append(await _last(nc, "F", "f.every"))
    return out


async def test_schedules_fire_as_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    want, got = await asyncio.gather(firing_flow(ref), firing_flow(ours))
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        if isinstance(w, dict) and "seq" in w:  # PubAcks: their sequences depend on the copies' timing
            w, g = {**w, "seq": 0}, {**g, "seq": 0}
        assert g == w, (i, w, g)
    cron_copy = got[10][1]  # f.out.cron
    assert b"Nats-Scheduler: f.cron\r\nNats-Schedule-Next: <time>" in cron_copy


async def _next_offset(nc: Client) -> bytes:
    """The offset a cron schedule's copy writes its next firing with (+05:30 in Asia/Kolkata)."""
    body = json.dumps({"last_by_subj": "f.out.cron"}).encode()
    got = json.loads((await nc.request("$JS.API.STREAM.MSG.GET.F", body, timeout=5)).data)
    hdrs = base64.b64decode(got["message"]["hdrs"])
    return hdrs.split(b"Nats-Schedule-Next: ", 1)[1].split(b"\r\n", 1)[0][-6:]


async def test_cron_next_firing_written_in_its_time_zone(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    assert await _next_offset(ours) == await _next_offset(ref) == b"+05:30"


def test_cron_next_firing() -> None:
    """The cron reading itself, at fixed times (nats-server's rules: day of month or of week unless one is
    `*`, names, steps, ranges; nothing within five years is no time)."""
    base = int(datetime(2026, 1, 30, 10, 0, 0, tzinfo=UTC).timestamp()) * SEC  # a Friday

    def at(pattern: str) -> str | None:
        when = parse_cron(pattern, None, base)
        return None if when is None else datetime.fromtimestamp(when // SEC, UTC).isoformat()

    assert at("* * * * * *") == "2026-01-30T10:00:01+00:00"
    assert at("0 0 12 * * *") == "2026-01-30T12:00:00+00:00"
    assert at("0 0 0 * * mon") == "2026-02-02T00:00:00+00:00"
    assert at("0 0 0 1,15 * mon") == "2026-02-01T00:00:00+00:00"  # either day field
    assert at("0 0 0 29 2 *") == "2028-02-29T00:00:00+00:00"
    assert at("0 0 0 31 2 *") is None
    assert at("*/20 5-10/5 * * FEB *") == "2026-02-01T00:05:00+00:00"


async def _scheduled_copy(nc: Client) -> list[Any]:
    body = json.dumps({"last_by_subj": "k.out"}).encode()
    got = json.loads((await nc.request("$JS.API.STREAM.MSG.GET.K", body, timeout=5)).data)
    return [_message(got)]


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
async def test_schedules_fire_after_kill_9(tmp_path: Path, kind: str) -> None:
    """A schedule due after the server was killed (-9) fires once it is back: its copy stored, the `@at`
    schedule purged; a repeating one carries on from the time its last copy named."""
    store = tmp_path / "store"
    async with jetstream_life(kind, store, kill=True) as (_, nc):
        cfg = {"name": "K", "subjects": ["k.>"], "allow_msg_schedules": True}
        await nc.request(CREATE + "K", json.dumps(cfg).encode(), timeout=5)
        await nc.request("k.once", b"late", timeout=5, headers={"Nats-Schedule": _at(4), T: "k.out"})
        hdrs = {"Nats-Schedule": "@every 1s", T: "k.tick"}
        await nc.request("k.every", b"tick", timeout=5, headers=hdrs)

        async def ticked() -> bool:
            body = json.dumps({"last_by_subj": "k.tick"}).encode()
            reply = await nc.request("$JS.API.STREAM.MSG.GET.K", body, timeout=5)
            return b'"message"' in reply.data

        await _until(ticked)
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.K", b'{"subjects_filter":"k.tick"}')).data)
        ticks = info["state"]["subjects"]["k.tick"]
    async with jetstream_life(kind, store) as (_, nc):

        async def fired() -> bool:
            info = json.loads((await nc.request("$JS.API.STREAM.INFO.K", b'{"subjects_filter":">"}')).data)
            subjects = info["state"].get("subjects", {})
            return "k.out" in subjects and subjects.get("k.tick", 0) > ticks

        await _until(fired)
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.K", b'{"subjects_filter":">"}')).data)
        subjects = info["state"]["subjects"]
        assert "k.once" not in subjects and subjects["k.every"] == 1 and subjects["k.out"] == 1
        ((subject, _, hdrs, data),) = await _scheduled_copy(nc)
        assert (subject, hdrs, data) == (
            "k.out",
            b"NATS/1.0\r\nNats-Scheduler: k.once\r\nNats-Schedule-Next: purge\r\n\r\n",
            b"late",
        )


async def sourced_schedule(nc: Client) -> list[Any]:
    """A stream sourcing one with schedules (it allows roll-ups): its copy of an `@at` schedule goes once
    the copy of its firing comes, as in the origin; a repeating one's copy stays."""
    origin = {"name": "ORIG", "subjects": ["o.>"], "allow_msg_schedules": True}
    copy = {"name": "COPY", "sources": [{"name": "ORIG"}], "allow_rollup_hdrs": True}
    out: list[Any] = [await ask(nc, CREATE + "ORIG", origin), await ask(nc, CREATE + "COPY", copy)]
    await nc.request("o.once", b"x", timeout=5, headers={"Nats-Schedule": _at(0), T: "o.out"})
    await nc.request("o.keep", b"y", timeout=5, headers={"Nats-Schedule": FAR, T: "o.out"})

    async def copied() -> bool:
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.COPY", b'{"subjects_filter":">"}')).data)
        return "o.out" in info["state"].get("subjects", {})

    await _until(copied)
    info = json.loads((await nc.request("$JS.API.STREAM.INFO.COPY", b'{"subjects_filter":">"}')).data)
    out.append(info["state"]["subjects"])
    return out


async def test_sourced_schedule_purged_as_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    want, got = await asyncio.gather(sourced_schedule(ref), sourced_schedule(ours))
    assert got == want
    assert want[-1] == {"o.keep": 1, "o.out": 1}
