"""Counter streams against nats-server -js: `allow_msg_counter` (what it cannot be combined with, at create
and update), `Nats-Incr` publishes (their PubAcks with `val`, every refusal), the `{"val":"..."}` bodies
and headers stored, read back through STREAM.MSG.GET and direct get, and counters summed from sources."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

from nats.aio.client import Client

from tests.jetstream.test_api_errors import ask

SEC = 1_000_000_000
CREATE, UPDATE = "$JS.API.STREAM.CREATE.", "$JS.API.STREAM.UPDATE."


CONFIG_CASES: list[tuple[str, Any]] = [
    (CREATE + "K1", {"name": "K1", "allow_msg_counter": True}),
    (UPDATE + "K1", {"name": "K1", "allow_msg_counter": False}),
    (UPDATE + "K1", {"name": "K1", "allow_msg_counter": True, "max_msgs_per_subject": 3}),
    (CREATE + "K2", {"name": "K2", "allow_msg_counter": True, "discard": "new"}),
    (CREATE + "K2", {"name": "K2", "allow_msg_counter": True, "allow_msg_ttl": True}),
    (CREATE + "K2", {"name": "K2", "allow_msg_counter": True, "retention": "interest"}),
    (CREATE + "K2", {"name": "K2", "allow_msg_counter": True, "retention": "workqueue"}),
    (CREATE + "K2", {"name": "K2", "allow_msg_counter": True, "discard_new_per_subject": True}),
    (CREATE + "K3", {"name": "K3", "allow_msg_counter": True, "mirror": {"name": "K1"}}),
    (CREATE + "K4", {"name": "K4", "subjects": ["k4"]}),
    (UPDATE + "K4", {"name": "K4", "subjects": ["k4"], "allow_msg_counter": True}),
    (CREATE + "K5", {"name": "K5", "allow_msg_counter": "yes"}),
    (CREATE + "K6", {"name": "K6", "allow_msg_counter": True, "sources": [{"name": "K1"}]}),
    (CREATE + "K7", {"name": "K7", "allow_msg_counter": True, "subject_delete_marker_ttl": SEC}),
    (CREATE + "K8", {"name": "K8", "allow_msg_counter": True, "storage": "memory", "max_msgs": 1}),
]  # fmt: skip


async def test_counter_config_answered_as_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    for subject, body in CONFIG_CASES:
        assert await ask(ours, subject, body) == await ask(ref, subject, body), (subject, body)


async def test_counter_stream_requires_api_level_2(clients: tuple[Client, Client]) -> None:
    body = json.dumps({"name": "LVL", "allow_msg_counter": True}).encode()
    levels = []
    for nc in clients:
        answer = json.loads((await nc.request(CREATE + "LVL", body, timeout=5)).data)
        levels.append(
            (answer["config"].get("allow_msg_counter"), answer["config"]["metadata"]["_nats.req.level"])
        )
    assert levels == [(True, "2"), (True, "2")]


HUGE = "9" * 5000  # past Python's int() digit limit; nats-server's big.Int takes it


async def publish_answers(nc: Client) -> list[Any]:
    """PubAcks (or errors) for increments on a counter stream and a plain one, then every stored message."""
    for cfg in (
        {"name": "CNT", "subjects": ["cnt.>"], "allow_msg_counter": True, "allow_direct": True},
        {"name": "PLAIN", "subjects": ["plain"]},
        {
            "name": "ONE",
            "subjects": ["one"],
            "allow_msg_counter": True,
            "storage": "memory",
            "max_msgs_per_subject": 1,
        },
    ):
        await nc.request(CREATE + cfg["name"], json.dumps(cfg).encode(), timeout=5)
    out: list[Any] = []
    cases: list[tuple[str, dict[str, str] | None, bytes]] = [
        ("cnt.a", {"Nats-Incr": "1"}, b""),
        ("cnt.a", {"Nats-Incr": "+5"}, b""),
        ("cnt.a", {"Nats-Incr": "-10"}, b""),
        ("cnt.a", {"Nats-Incr": "0"}, b""),
        ("cnt.a", {"Nats-Incr": "007", "X-Other": "kept"}, b""),
        ("cnt.b", {"Nats-Incr": "99999999999999999999999999999999"}, b""),
        ("cnt.b", {"Nats-Incr": "99999999999999999999999999999999"}, b""),
        ("cnt.c", {"Nats-Incr": "-0"}, b""),
        ("cnt.d", {"Nats-Incr": HUGE}, b""),
        ("cnt.d", {"Nats-Incr": "1"}, b""),
        ("cnt.a", {"Nats-Incr": "abc"}, b""),
        ("cnt.a", {"Nats-Incr": "1.5"}, b""),
        ("cnt.a", {"Nats-Incr": "1_000"}, b""),
        ("cnt.a", {"Nats-Incr": "1e3"}, b""),
        ("cnt.a", {"Nats-Incr": "--1"}, b""),
        ("cnt.a", {"Nats-Incr": ""}, b""),
        ("cnt.a", {"Nats-Incr": "2"}, b"payload"),
        ("cnt.a", None, b""),
        ("cnt.a", {"X": "y"}, b"body"),
        ("cnt.a", {"Nats-Incr": "1", "Nats-Expected-Stream": "CNT"}, b""),
        ("cnt.a", {"Nats-Incr": "1", "Nats-Expected-Last-Sequence": "5"}, b""),
        ("cnt.a", {"Nats-Incr": "1", "Nats-Expected-Last-Subject-Sequence": "5"}, b""),
        ("cnt.a", {"Nats-Incr": "1", "Nats-Expected-Last-Msg-Id": "m"}, b""),
        ("cnt.a", {"Nats-Incr": "1", "Nats-Rollup": "sub"}, b""),
        ("cnt.a", {"Nats-Incr": "3", "Nats-Msg-Id": "once"}, b""),
        ("cnt.a", {"Nats-Incr": "3", "Nats-Msg-Id": "once"}, b""),
        ("plain", {"Nats-Incr": "1"}, b""),
        ("plain", {"Nats-Incr": "x"}, b""),
        ("plain", {"Nats-Incr": ""}, b"kept"),
        ("one", {"Nats-Incr": "4"}, b""),
        ("one", {"Nats-Incr": "4"}, b""),
    ]
    for subject, hdrs, payload in cases:
        msg = await nc.request(subject, payload, timeout=5, headers=hdrs)
        out.append((subject, hdrs, json.loads(msg.data)))
    for seq in range(1, 12):
        got = json.loads((await nc.request("$JS.API.STREAM.MSG.GET.CNT", b'{"seq":%d}' % seq)).data)
        if "error" in got:
            out.append(got["error"])
            continue
        message = got["message"]
        out.append(
            (message["subject"], base64.b64decode(message.get("hdrs", "")), base64.b64decode(message["data"]))
        )
    for subject in ("cnt.a", "cnt.b", "cnt.c", "cnt.d"):
        msg = await nc.request("$JS.API.DIRECT.GET.CNT", json.dumps({"last_by_subj": subject}).encode())
        out.append(
            (subject, msg.data, {k: v for k, v in (msg.headers or {}).items() if k != "Nats-Time-Stamp"})
        )
    return out


async def test_increments_answered_and_stored_as_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    want, got = await publish_answers(ref), await publish_answers(ours)
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        assert g == w, i


async def _last_stored(nc: Client, stream: str, subject: str) -> tuple[bytes, bytes]:
    """The last message of `subject`: headers (the source line's origin identity dropped) and body."""
    body = json.dumps({"last_by_subj": subject}).encode()
    message = json.loads((await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}", body, timeout=5)).data)[
        "message"
    ]
    lines = []
    for line in base64.b64decode(message.get("hdrs", "")).split(b"\r\n"):
        if line.startswith(b"Nats-Stream-Source:"):
            line = b" ".join(line.split(b" ")[:6])  # nats-server ends it with an identity of its own
        lines.append(line)
    return b"\r\n".join(lines), base64.b64decode(message["data"])


async def _until_stored(nc: Client, stream: str, count: int) -> None:
    for _ in range(400):  # a source's catch-up, bounded (10 s)
        info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)).data)
        if info["state"]["messages"] >= count:
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"{stream} never held {count} messages")


async def sourced_totals(nc: Client) -> list[Any]:
    """Two counter streams summed by a third that sources both (and counts increments of its own): what
    each copy stores depends on the order the sources' copies interleave, so only the totals and the last
    message of each subject (the source totals it carries) are compared."""
    for cfg in (
        {"name": "EU", "subjects": ["eu.>"], "allow_msg_counter": True},
        {"name": "US", "subjects": ["us.>"], "allow_msg_counter": True},
    ):
        await nc.request(CREATE + cfg["name"], json.dumps(cfg).encode(), timeout=5)
    for subject, incr in (("eu.hits", "2"), ("us.hits", "5"), ("eu.hits", "3"), ("eu.miss", "-1")):
        await nc.request(subject, b"", timeout=5, headers={"Nats-Incr": incr})
    world = {
        "name": "WORLD",
        "subjects": ["all.>"],
        "allow_msg_counter": True,
        "sources": [
            {"name": "EU", "subject_transforms": [{"src": "eu.>", "dest": "all.>"}]},
            {"name": "US", "subject_transforms": [{"src": "us.>", "dest": "all.>"}]},
        ],
    }
    out: list[Any] = [await ask(nc, CREATE + "WORLD", world)]
    await _until_stored(nc, "WORLD", 4)
    ack = await nc.request("all.hits", b"", timeout=5, headers={"Nats-Incr": "100"})
    out.append(json.loads(ack.data))
    await nc.request("us.hits", b"", timeout=5, headers={"Nats-Incr": "10"})
    await _until_stored(nc, "WORLD", 6)
    for subject in ("all.hits", "all.miss"):
        out.append(await _last_stored(nc, "WORLD", subject))
    return out


async def test_sourced_counters_summed_as_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    want, got = await sourced_totals(ref), await sourced_totals(ours)
    assert got == want
    assert want[-2][1] == b'{"val":"120"}'
