"""Stream `subject_transform` and `republish` against nats-server: the same config checks and errors, the same
stored subjects for each mapping function, the same republished messages (headers included, timestamps
aside), and a republish into `$JS.API` never executed as a request."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nats.aio.client import Client

from tests.jetstream.test_api_errors import ask

CREATE = "$JS.API.STREAM.CREATE."


def stream(name: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    return CREATE + name, {"name": name, "subjects": [f"{name.lower()}.>"], **extra}


# Config checks: each create answered (config or error) as nats-server answers it.
CONFIGS: list[tuple[str, dict[str, Any]]] = [
    stream("C1", subject_transform={"src": "c1.*", "dest": "x.{{wildcard(1)}}"}),
    stream("C2", subject_transform={"src": "c2..x", "dest": "y"}),
    stream("C3", subject_transform={"src": "c3.*", "dest": "x.{{nope(1)}}"}),
    stream("C4", subject_transform={"src": "c4.*", "dest": "x.{{wildcard(2)}}"}),
    stream("C5", subject_transform={"src": "c5.*", "dest": "x.*"}),
    stream("C6", subject_transform={"src": "c6.*", "dest": "x.{{left(1,2)}}"}),
    stream("C7", subject_transform={"src": "c7.*", "dest": "x..y"}),
    stream("C8", subject_transform={"src": "c8.>", "dest": "x"}),
    stream("C9", subject_transform={"src": "c9.*", "dest": "x.{{wildcard()}}"}),
    stream("C10", subject_transform={"src": "c10.*", "dest": "x.{{splitFromLeft(1)}}"}),
    stream("C11", subject_transform={"src": "c11.*", "dest": "x.{{partition(a,1)}}"}),
    stream("C12", subject_transform={"dest": "x.y"}),
    stream("C13", subject_transform={"src": "c13.*", "dest": ""}),
    stream("C14", subject_transform={"src": "c14", "dest": "x.{{wildcard(1)}}"}),
    stream("R1", republish={"src": "r1.>", "dest": "out.r1.>"}),
    stream("R2", republish={"dest": "r2.again"}),
    stream("R3", republish={"src": "r3.*", "dest": "x.{{nope(1)}}"}),
    stream("R4", republish={"dest": "out.r4.>", "headers_only": True}),
    stream("R5", republish={"src": "r5.*", "dest": "out.$1.$2"}),
    stream("R6", republish={"src": ">", "dest": ">"}),
    stream("R7", republish={"src": "r7.*", "dest": "out.r7"}),
    stream("R8", subject_transform={"src": "r8.>", "dest": "t8.>"}, republish={"src": ">", "dest": ">"}),
    stream("R9", republish={"src": "r9.>", "dest": ">"}),
    stream("R10", republish={"src": 5, "dest": "x"}),
]  # fmt: skip

# (a stream's transform from `f<n>.*.*`, what is published): the stored subject shows the function's output.
FUNCTIONS = [
    "d.{{wildcard(2)}}.{{wildcard(1)}}",
    "d.$2.$1",
    "d.{{partition(7,1,2)}}",
    "d.{{partition(7)}}",
    "d.{{splitFromLeft(1,2)}}",
    "d.{{splitFromRight(1,2)}}",
    "d.{{sliceFromLeft(1,4)}}",
    "d.{{sliceFromRight(1,4)}}",
    "d.{{split(2,-)}}",
    "d.{{right(1,3)}}",
    "d.{{SplitFromLeft( 1 , 9 )}}.$2",
    "d.{{random(1)}}",
]
FUNCTION_SUBJECT = "abcdefghij.-x--y-z-"


async def test_transform_and_republish_configs_answered_as_nats_server(
    clients: tuple[Client, Client],
) -> None:
    diffs, accepted = [], 0
    for subject, body in CONFIGS:
        want, got = await asyncio.gather(*(ask(nc, subject, body) for nc in clients))
        accepted += "config" in want
        if want != got:
            diffs.append(f"{json.dumps(body)}\n  nats-server {want}\n  pynatsd     {got}")
    assert not diffs, "\n".join(diffs)
    assert 0 < accepted < len(CONFIGS)  # both accepted and refused configs compared


async def stored_subjects(nc: Client, name: str) -> Any:
    msg = await nc.request(f"$JS.API.STREAM.INFO.{name}", b'{"subjects_filter":">"}', timeout=5)
    return json.loads(msg.data)["state"].get("subjects")


async def transform_flow(nc: Client) -> list[Any]:
    """Streams with a transform per mapping function, and republishing ones: what each stores, what a
    subscriber on the republish subjects gets."""
    results: list[Any] = []
    for n, dest in enumerate(FUNCTIONS):
        cfg = {
            "name": f"F{n}",
            "subjects": [f"f{n}.*.*"],
            "subject_transform": {"src": f"f{n}.*.*", "dest": dest},
        }
        await ask(nc, CREATE + cfg["name"], cfg)
        await nc.request(f"f{n}.{FUNCTION_SUBJECT}", b"x", timeout=5)
        results.append((dest, await stored_subjects(nc, f"F{n}")))
    out = await nc.subscribe("out.>")
    p1_republish = {"src": "p1.*.x", "dest": "out.p1.{{wildcard(1)}}"}
    configs = [
        {"name": "P1", "subjects": ["p1.>"], "republish": p1_republish},
        {"name": "P2", "subjects": ["p2.>"], "republish": {"dest": "out.p2.>", "headers_only": True}},
        {"name": "P3", "subjects": ["p3.>"], "subject_transform": {"src": "p3.>", "dest": "out.p3.>"},
         "republish": {"src": ">", "dest": ">"}},
    ]  # fmt: skip
    for cfg in configs:
        results.append(await ask(nc, CREATE + cfg["name"], cfg))
    published = [
        ("p1.a.x", None, b"one"),
        ("p1.b.y", None, b"not republished"),
        ("p1.a.x", {"X-Own": "1"}, b"two"),
        ("p2.q", {"Nats-Msg-Id": "m1"}, b"three bytes"),
        ("p2.q", None, b""),
        ("p3.k", None, b"transformed"),
    ]
    for subject, headers, data in published:
        ack = await nc.request(subject, data, timeout=5, headers=headers)
        results.append(json.loads(ack.data))
    for _ in range(5):
        msg = await out.next_msg(5)
        hdrs = {k: v for k, v in (msg.headers or {}).items() if k != "Nats-Time-Stamp"}
        results.append((msg.subject, hdrs, msg.data))
    results.append(await stored_subjects(nc, "P3"))
    await out.unsubscribe()
    return results


async def test_transformed_and_republished_messages_match_nats_server(clients: tuple[Client, Client]) -> None:
    expected, got = await asyncio.gather(*(transform_flow(nc) for nc in clients))
    diffs = [
        f"nats-server {want}\npynatsd     {have}"
        for want, have in zip(expected, got, strict=True)
        if want != have
    ]
    assert not diffs, "\n".join(diffs)
    # What the flow compared: republished messages on their mapped subjects.
    assert [m[0] for m in expected[-6:-1]] == [
        "out.p1.a",
        "out.p1.a",
        "out.p2.p2.q",
        "out.p2.p2.q",
        "out.p3.k",
    ]


async def test_republish_is_not_a_request_nor_an_ack(clients: tuple[Client, Client]) -> None:
    """A republished message is the server's own: one landing on `$JS.API.STREAM.DELETE.<x>` deletes nothing,
    one landing on a consumer's ack subject acks nothing (the work-queue message stays). The API ignores a
    message without a reply anyway; the ack subject needs none, so that half fails without the origin check.
    pynatsd only, on purpose: nats-server 2.15.1 executes both (whoever may publish to the stream acts with
    the server's rights), a confused deputy pynatsd does not copy."""
    nc = clients[1]
    assert "config" in await ask(nc, CREATE + "VICTIM", {"name": "VICTIM", "subjects": ["victim"]})
    cfg = {
        "name": "DEPUTY",
        "subjects": ["deputy"],
        "republish": {"src": "deputy", "dest": "$JS.API.STREAM.DELETE.VICTIM"},
    }
    assert "config" in await ask(nc, CREATE + "DEPUTY", cfg)
    await nc.request("deputy", b"", timeout=5)
    await nc.flush()
    info = json.loads((await nc.request("$JS.API.STREAM.INFO.VICTIM", b"", timeout=5)).data)
    assert "error" not in info, info
    js = nc.jetstream(timeout=5)
    queue = {"name": "WQ", "subjects": ["wq"], "retention": "workqueue"}
    assert "config" in await ask(nc, CREATE + "WQ", queue)
    await js.publish("wq", b"one")
    await js.publish("wq", b"two")
    sub = await js.pull_subscribe("wq", "C", stream="WQ")
    first, second = await sub.fetch(2, timeout=5)
    assert first.reply is not None and first.reply.startswith("$JS.ACK.WQ.C.")
    cfg = {"name": "ACKER", "subjects": ["acker"], "republish": {"src": "acker", "dest": first.reply}}
    assert "config" in await ask(nc, CREATE + "ACKER", cfg)
    await nc.request("acker", b"", timeout=5)  # its republish (an ack of `first` if run as one) went out
    await second.ack_sync(timeout=5)  # a real ack after it: the work queue drops `second`
    info = json.loads((await nc.request("$JS.API.STREAM.INFO.WQ", b"", timeout=5)).data)
    assert info["state"]["messages"] == 1 and info["state"]["first_seq"] == 1, info["state"]
