"""The same JetStream API requests against nats-server -js and pynatsd -js: same JSON field sets
(recursively), same error codes, same status headers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from tests.servers import ServerProcess, jetstream_pair

# Values that legitimately differ (ids, times, generated names, versions) are compared by shape only.
Request = tuple[str, Any]

SCRIPT: list[Request] = [
    ("$JS.API.INFO", b""),
    ("$JS.API.STREAM.CREATE.S1", {"name": "S1", "subjects": ["foo", "bar.*"]}),
    ("$JS.API.STREAM.CREATE.S1", {"name": "S1", "subjects": ["foo", "bar.*"]}),
    ("$JS.API.STREAM.CREATE.S1", {"name": "S1", "subjects": ["foo"], "max_msgs": 5}),
    ("$JS.API.STREAM.CREATE.S2", {"name": "S2", "subjects": ["foo"]}),
    ("$JS.API.STREAM.CREATE.S3", {"name": "S3", "subjects": ["x"], "num_replicas": 3}),
    ("$JS.API.STREAM.CREATE.S4", {"name": "S5", "subjects": ["x"]}),
    ("$JS.API.STREAM.CREATE.S4", b"not json"),
    ("$JS.API.STREAM.CREATE.ALL", {"name": "ALL", "subjects": [">"]}),
    ("$JS.API.STREAM.CREATE.API", {"name": "API", "subjects": ["$JS.API.x"]}),
    ("$JS.API.STREAM.CREATE.SYS", {"name": "SYS", "subjects": ["$SYS.x"]}),
    ("$JS.API.STREAM.CREATE.DUP", {"name": "DUP", "subjects": ["d", "d"]}),
    ("$JS.API.STREAM.CREATE.OVL", {"name": "OVL", "subjects": ["o.*", "o.x"]}),
    ("$JS.API.STREAM.CREATE.BAD", {"name": "BAD", "subjects": ["a..b"]}),
    ("$JS.API.STREAM.CREATE.NA", {"name": "NA", "subjects": ["na"], "no_ack": False, "description": ""}),
    ("$JS.API.STREAM.CREATE.NA2", {"name": "NA2", "subjects": ["na2"], "no_ack": True}),
    ("PUB na2", b"no ack expected"),
    ("$JS.API.STREAM.CREATE.MEM", {"name": "MEM", "storage": "memory", "max_age": 1_000_000_000}),
    ("$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w w"]}),
    ("PUB foo", b"hello"),
    ("PUB bar.x", b"world"),
    ("PUB foo", b"again"),
    ("$JS.API.STREAM.INFO.S1", b""),
    ("$JS.API.STREAM.INFO.S1", {"subjects_filter": ">"}),
    ("$JS.API.STREAM.INFO.NOPE", b""),
    ("$JS.API.STREAM.NAMES", b""),
    ("$JS.API.STREAM.NAMES", {"subject": "bar.y"}),
    ("$JS.API.STREAM.LIST", b""),
    ("$JS.API.STREAM.UPDATE.S1", {"name": "S1", "subjects": ["foo", "bar.*"], "max_msgs": 10}),
    ("$JS.API.STREAM.UPDATE.S1", {"name": "S1", "subjects": ["foo"], "storage": "memory"}),
    ("$JS.API.STREAM.UPDATE.NOPE", {"name": "NOPE", "subjects": ["nope"]}),
    ("$JS.API.STREAM.MSG.GET.S1", {"seq": 1}),
    ("$JS.API.STREAM.MSG.GET.S1", {"last_by_subj": "bar.x"}),
    ("$JS.API.STREAM.MSG.GET.S1", {"seq": 100}),
    ("$JS.API.STREAM.MSG.DELETE.S1", {"seq": 1}),
    ("$JS.API.STREAM.MSG.DELETE.S1", {"seq": 1}),
    ("$JS.API.STREAM.INFO.S1", b""),
    ("$JS.API.CONSUMER.CREATE.S1", {"stream_name": "S1", "config": {"durable_name": "d1"}}),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S1.d2",
     {"stream_name": "S1",
      "config": {"durable_name": "d2", "ack_policy": "explicit", "deliver_subject": "push.d2"}}),
    # A deliver subject the stream captures would store its own deliveries: refused (10081).
    ("$JS.API.CONSUMER.CREATE.S1", {"stream_name": "S1", "config": {"deliver_subject": "foo"}}),
    ("$JS.API.CONSUMER.CREATE.S1", {"stream_name": "S1", "config": {"deliver_subject": "bar.x"}}),
    ("$JS.API.CONSUMER.CREATE.S1.d3",
     {"stream_name": "S1", "config": {"name": "d3", "ack_policy": "explicit", "filter_subject": "foo"}}),
    ("$JS.API.CONSUMER.CREATE.S1.d4.bar.x",
     {"stream_name": "S1", "config": {"name": "d4", "ack_policy": "explicit", "filter_subject": "foo"}}),
    ("$JS.API.CONSUMER.CREATE.S1", {"stream_name": "S1", "config": {"ack_policy": "explicit", "name": ""}}),
    ("$JS.API.CONSUMER.CREATE.S1.d5",
     {"stream_name": "S1", "config": {"name": "d5", "filter_subject": "zzz"}}),
    ("$JS.API.CONSUMER.CREATE.S1.d6", {"stream_name": "S1"}),
    ("$JS.API.CONSUMER.INFO.S1.d3", b""),
    ("$JS.API.CONSUMER.INFO.S1.nope", b""),
    ("$JS.API.CONSUMER.INFO.NOPE.d3", b""),
    ("$JS.API.CONSUMER.NAMES.S1", b""),
    ("$JS.API.CONSUMER.LIST.S1", b""),
    ("NEXT S1.d3", {"batch": 1, "no_wait": True}),
    ("NEXT S1.d3", {"batch": 5, "no_wait": True}),
    ("NEXT S1.d3", {"batch": 1, "max_bytes": 1, "no_wait": True}),
    ("NEXT S1.d3", {"batch": 2, "expires": 50_000_000}),
    ("NEXT S1.d2", {"batch": 1}),
    ("NEXT S1.d3", {"batch": 0, "no_wait": True}),
    ("NEXT S1.d3", {"batch": 1, "expires": 10_000_000, "idle_heartbeat": 9_000_000}),
    ("$JS.API.CONSUMER.CREATE.S1.lim",
     {"stream_name": "S1", "config": {"name": "lim", "max_batch": 2, "max_expires": 1_000_000_000}}),
    ("NEXT S1.lim", {"batch": 3}),
    ("NEXT S1.lim", {"batch": 1, "expires": 2_000_000_000}),
    ("NEXT S1.nope", {"batch": 1}),
    ("DIRECT S1", {"seq": 1}),
    ("$JS.API.CONSUMER.DELETE.S1.d3", b""),
    ("$JS.API.CONSUMER.DELETE.S1.d3", b""),
    ("$JS.API.CONSUMER.CREATE.S1.p1",
     {"stream_name": "S1", "config": {"name": "p1", "flow_control": True}}),
    ("$JS.API.CONSUMER.CREATE.S1.p2",
     {"stream_name": "S1", "config": {"name": "p2", "idle_heartbeat": 1_000_000_000}}),
    ("$JS.API.CONSUMER.CREATE.S1.p3",
     {"stream_name": "S1", "config": {"name": "p3", "deliver_subject": "p3.in", "flow_control": True,
                                      "idle_heartbeat": 5_000_000_000, "ack_policy": "none"}}),
    ("$JS.API.CONSUMER.CREATE.S1.p4",
     {"stream_name": "S1", "config": {"name": "p4", "deliver_policy": "by_start_sequence"}}),
    ("$JS.API.CONSUMER.CREATE.S1.p5",
     {"stream_name": "S1",
      "config": {"name": "p5", "deliver_policy": "by_start_sequence", "opt_start_seq": 2,
                 "ack_policy": "explicit", "backoff": [1_000_000_000, 2_000_000_000], "max_deliver": 2}}),
    ("$JS.API.CONSUMER.CREATE.S1.p5b",
     {"stream_name": "S1",
      "config": {"name": "p5b", "ack_policy": "explicit", "backoff": [1, 2, 3], "max_deliver": 2}}),
    ("$JS.API.CONSUMER.CREATE.S1.p6",
     {"stream_name": "S1", "config": {"name": "p6", "ack_policy": "explicit", "backoff": [1_000_000_000],
                                      "max_deliver": 5, "max_ack_pending": 7}}),
    ("$JS.API.CONSUMER.CREATE.S1.p6",
     {"stream_name": "S1", "action": "create",
      "config": {"name": "p6", "ack_policy": "explicit", "max_ack_pending": 8}}),
    ("$JS.API.CONSUMER.CREATE.S1.p7",
     {"stream_name": "S1", "action": "update", "config": {"name": "p7"}}),
    ("$JS.API.CONSUMER.CREATE.S1.p6",
     {"stream_name": "S1", "action": "update",
      "config": {"name": "p6", "ack_policy": "explicit", "backoff": [1_000_000_000],
                 "max_deliver": 5, "max_ack_pending": 9}}),
    ("$JS.API.CONSUMER.CREATE.S1.p8",
     {"stream_name": "S1", "config": {"name": "p8", "filter_subjects": ["foo", "bar.*"]}}),
    ("$JS.API.CONSUMER.CREATE.S1.p9",
     {"stream_name": "S1", "config": {"name": "p9", "filter_subject": "foo", "filter_subjects": ["bar.*"]}}),
    ("$JS.API.CONSUMER.CREATE.S1.p10",
     {"stream_name": "S1", "config": {"name": "p10", "deliver_policy": "last_per_subject",
                                      "filter_subject": ">", "headers_only": True}}),
    ("$JS.API.CONSUMER.INFO.S1.p10", b""),
    ("$JS.API.CONSUMER.CREATE.S1.q1",
     {"stream_name": "S1", "config": {"name": "q1", "deliver_policy": "last_per_subject"}}),
    ("$JS.API.CONSUMER.CREATE.S1.q2", {"stream_name": "S1", "config": {"name": "q2", "opt_start_seq": 3}}),
    ("$JS.API.CONSUMER.CREATE.S1.q3",
     {"stream_name": "S1", "config": {"name": "q3", "deliver_policy": "by_start_time", "opt_start_seq": 3,
                                      "opt_start_time": "2020-01-01T00:00:00Z"}}),
    ("$JS.API.CONSUMER.CREATE.S1.q4",
     {"stream_name": "S1", "config": {"name": "q4", "deliver_subject": "q4", "flow_control": True}}),
    ("$JS.API.CONSUMER.CREATE.S1.q5",
     {"stream_name": "S1", "config": {"name": "q5", "filter_subjects": ["bar.*", "bar.x"]}}),
    ("$JS.API.CONSUMER.CREATE.S1.p11",
     {"stream_name": "S1", "config": {"name": "p11", "deliver_policy": "by_start_time",
                                      "opt_start_time": "2020-01-01T00:00:00Z"}}),
    ("$JS.API.STREAM.CREATE.WQ",
     {"name": "WQ", "subjects": ["wq.>"], "retention": "workqueue"}),
    ("$JS.API.CONSUMER.CREATE.WQ.w1", {"stream_name": "WQ", "config": {"name": "w1"}}),
    ("$JS.API.CONSUMER.CREATE.WQ.w2",
     {"stream_name": "WQ", "config": {"name": "w2", "ack_policy": "explicit"}}),
    ("$JS.API.CONSUMER.CREATE.WQ.w3",
     {"stream_name": "WQ", "config": {"name": "w3", "ack_policy": "explicit"}}),
    ("$JS.API.CONSUMER.CREATE.WQ.w4",
     {"stream_name": "WQ", "config": {"name": "w4", "ack_policy": "explicit", "deliver_policy": "last"}}),
    ("$JS.API.STREAM.UPDATE.WQ", {"name": "WQ", "subjects": ["wq.>"], "retention": "limits"}),
    ("$JS.API.STREAM.DELETE.WQ", b""),
    ("NEXT S1.p6", {"batch": 1, "no_wait": True}),
    ("$JS.API.CONSUMER.INFO.S1.p6", b""),
    ("$JS.API.CONSUMER.LIST.S1", b""),
    ("$JS.API.STREAM.INFO.S1", b""),
    ("$JS.API.STREAM.MSG.GET.S1", {"next_by_subj": "bar.*", "seq": 1}),
    ("$JS.API.STREAM.INFO.S1", {"deleted_details": True}),
    ("$JS.API.STREAM.PURGE.S1", {"filter": "foo"}),
    ("$JS.API.STREAM.PURGE.S1", {"keep": 1}),
    ("$JS.API.STREAM.PURGE.S1", b""),
    ("$JS.API.STREAM.CREATE.KV_b",
     {"name": "KV_b", "subjects": ["$KV.b.>"], "allow_direct": True, "max_msgs_per_subject": 5,
      "allow_rollup_hdrs": True, "deny_delete": True, "discard": "new"}),
    ("PUB $KV.b.k1", b"v1"),
    ("DIRECT KV_b", {"last_by_subj": "$KV.b.k1"}),
    ("DIRECT KV_b.$KV.b.k1", b""),
    ("DIRECT KV_b", {"seq": 99}),
    ("$JS.API.STREAM.MSG.DELETE.KV_b", {"seq": 1}),
    ("$JS.API.STREAM.DELETE.S2", b""),
    ("$JS.API.STREAM.DELETE.S1", b""),
    ("$JS.API.STREAM.INFO.S1", b""),
    ("$JS.API.INFO", b""),
]  # fmt: skip


def shape(value: Any) -> Any:
    """The field structure of a JSON value: dict keys recursively, error codes and types kept verbatim."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "metadata":  # the server version and level differ by design
                out[k] = "meta"
            elif k in ("type", "err_code", "code", "did_create", "success", "duplicate"):
                out[k] = v
            else:
                out[k] = shape(v)
        return out
    if isinstance(value, list):  # the element shapes present, in any order (listing order is not fixed)
        return sorted({json.dumps(shape(v), sort_keys=True) for v in value})
    return type(value).__name__


async def run_script(nc: Client) -> list[Any]:
    results: list[Any] = []
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox + ".>")
    for n, (subject, body) in enumerate(SCRIPT):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        if subject.startswith(("PUB ", "DIRECT ", "NEXT ")):
            verb, target = subject.split(" ", 1)
            real = {
                "PUB": target,
                "DIRECT": f"$JS.API.DIRECT.GET.{target}",
                "NEXT": f"$JS.API.CONSUMER.MSG.NEXT.{target}",
            }[verb]
            await nc.publish(real, data, reply=f"{inbox}.{n}")
            got = []
            while True:
                try:
                    msg = await sub.next_msg(0.3)
                except nats.errors.TimeoutError:
                    break
                hdrs = dict(msg.headers or {})
                for k in ("Nats-Time-Stamp",):
                    hdrs.pop(k, None)
                got.append((hdrs, shape(json.loads(msg.data)) if msg.data.startswith(b"{") else msg.data))
            results.append((subject, got))
        else:
            msg = await nc.request(subject, data, timeout=2)
            results.append((subject, shape(json.loads(msg.data))))
    return results


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Fresh ones for each test (the conftest's are shared by the module)."""
    with jetstream_pair(tmp_path) as pair:
        yield pair


async def test_api_responses_match_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    # Both at once (each server on its own connection): the script's 20 quiet windows overlap (12 s before).
    expected, got = await asyncio.gather(run_script(ref), run_script(ours))
    diffs = [
        f"{subject}:\n  nats-server {want}\n  pynatsd     {have}"
        for (subject, want), (_, have) in zip(expected, got, strict=True)
        if have != want
    ]
    assert not diffs, "\n".join(diffs)


async def ack_flow(nc: Client) -> list[Any]:
    """Deliveries, acks of each kind, and the consumer's counters after each step (values, not shapes)."""
    js = nc.jetstream()
    await js.add_stream(name="ACK", subjects=["ack.*"])
    for i in range(6):
        await js.publish(f"ack.{i % 2}", b"%d" % i)
    await nc.request(
        "$JS.API.CONSUMER.CREATE.ACK.c",
        json.dumps({"stream_name": "ACK", "config": {"name": "c", "ack_policy": "explicit"}}).encode(),
    )
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    out: list[Any] = []

    async def info() -> None:
        ci = json.loads((await nc.request("$JS.API.CONSUMER.INFO.ACK.c", b"", timeout=2)).data)
        counters = ("num_ack_pending", "num_redelivered", "num_pending", "num_waiting")
        out.append({k: ci[k] for k in counters})
        for k in ("delivered", "ack_floor"):
            out.append({f: v for f, v in ci[k].items() if f != "last_active"})
            out.append(sorted(ci[k]))  # the field set, last_active included

    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.ACK.c", b'{"batch": 4, "no_wait": true}', reply=inbox)
    msgs = [await sub.next_msg(2) for _ in range(4)]
    out.append([(m.subject, m.data, m.reply.split(".")[:7]) for m in msgs])
    await info()
    reply = await nc.request(msgs[1].reply, b"+ACK", timeout=2)  # double ack: an empty answer
    out.append(reply.data)
    await info()
    await nc.publish(msgs[0].reply, b"+ACK")
    await nc.publish(msgs[2].reply, b"-NAK")
    await nc.publish(msgs[3].reply, b"+TERM")
    await nc.flush()
    await asyncio.sleep(0.1)
    await info()
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.ACK.c", b'{"batch": 1, "no_wait": true}', reply=inbox)
    again = await sub.next_msg(2)
    out.append((again.data, again.reply.split(".")[:7]))
    await info()
    return out


async def test_ack_flow_matches_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    expected = await ack_flow(ref)
    got = await ack_flow(ours)
    assert got == expected


async def ack_floor_flow(nc: Client) -> list[Any]:
    """The ack floor as explicit acks move it on a filtered consumer (gaps in the stream order: one of 12
    sequences, past what the floor's look-up probes), in order, out of order, and after a reset while the
    oldest pending is one delivered again."""
    js = nc.jetstream()
    await js.add_stream(name="FL", subjects=["fl.*"])
    for subject in ["fl.a"] * 2 + ["fl.b"] * 12 + ["fl.a"] * 3:  # fl.a: 1, 2, 15, 16, 17
        await js.publish(subject, b"x")
    config = {"name": "c", "ack_policy": "explicit", "filter_subject": "fl.a"}
    await nc.request(
        "$JS.API.CONSUMER.CREATE.FL.c", json.dumps({"stream_name": "FL", "config": config}).encode()
    )
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    out: list[Any] = []

    async def take(n: int) -> list[str]:
        body = json.dumps({"batch": n, "no_wait": True}).encode()
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.FL.c", body, reply=inbox)
        return [(await sub.next_msg(2)).reply for _ in range(n)]

    async def ack(reply: str) -> None:
        await nc.request(reply, b"+ACK", timeout=2)  # answered once taken
        ci = json.loads((await nc.request("$JS.API.CONSUMER.INFO.FL.c", b"", timeout=2)).data)
        floor = ci["ack_floor"]
        out.append((reply.split(".")[5], floor["stream_seq"], floor["consumer_seq"], ci["num_ack_pending"]))

    replies = await take(5)
    for i in (1, 0, 3, 2):  # 17 left pending: the oldest
        await ack(replies[i])
    await nc.request("$JS.API.CONSUMER.RESET.FL.c", b'{"seq": 1}', timeout=2)
    replies = await take(5)  # 17 again, now after 1, 2, 15 and 16
    for i in (1, 0, 3, 2, 4):
        await ack(replies[i])
    return out


async def test_ack_floor_matches_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    assert await ack_floor_flow(ours) == await ack_floor_flow(ref)


async def kv_flow(nc: Client) -> list[Any]:
    """nats-py's KV over each server: revisions, values, operations, keys, history, stream state."""
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="DIFF", history=3)
    out: list[Any] = [await kv.put("a", b"1"), await kv.put("b", b"2"), await kv.update("a", b"3", last=1)]
    await kv.delete("b")
    out.append(await kv.create("b", b"again"))
    await kv.purge("a")
    for key in ("a", "b"):
        try:
            e = await kv.get(key)
            out.append((e.key, e.value, e.revision, e.operation))
        except Exception as exc:
            out.append(type(exc).__name__)
    out.append(sorted(await kv.keys()))
    out.append([(e.key, e.value, e.revision, e.operation) for e in await kv.history("b")])
    info = json.loads((await nc.request("$JS.API.STREAM.INFO.KV_DIFF", b"", timeout=2)).data)
    out.append(shape(info))
    st = info["state"]
    out.append((st["messages"], st["first_seq"], st["last_seq"], st.get("num_deleted"), st["num_subjects"]))
    return out


async def test_kv_matches_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    assert await kv_flow(ours) == await kv_flow(ref)


async def push_flow(nc: Client) -> list[Any]:
    """A push consumer bound after creation, then an ordered-style one (flow control, heartbeats)."""
    js = nc.jetstream()
    await js.add_stream(name="PUSH", subjects=["push.*"])
    for i in range(4):
        await js.publish(f"push.{i}", b"%d" % i, headers={"X": str(i)} if i == 1 else None)
    inbox = nc.new_inbox()
    cfg = {
        "name": "p",
        "deliver_subject": inbox,
        "ack_policy": "explicit",
        "deliver_policy": "last_per_subject",
        "filter_subject": "push.*",
    }
    created = json.loads(
        (
            await nc.request(
                "$JS.API.CONSUMER.CREATE.PUSH.p", json.dumps({"stream_name": "PUSH", "config": cfg}).encode()
            )
        ).data
    )
    out: list[Any] = [shape(created), created["num_pending"]]
    sub = await nc.subscribe(inbox)
    msgs = [await sub.next_msg(2) for _ in range(4)]
    out.append([(m.subject, m.data, m.headers, m.reply.split(".")[:7], m.reply.split(".")[-1]) for m in msgs])
    info = json.loads((await nc.request("$JS.API.CONSUMER.INFO.PUSH.p", b"", timeout=2)).data)
    out.append((shape(info), info.get("push_bound"), info["num_ack_pending"]))
    return out


async def test_push_matches_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    assert await push_flow(ours) == await push_flow(ref)


async def publish_flow(nc: Client) -> list[Any]:
    """PubAcks (bodies verbatim) under limits, discard policies, rollups and expectations."""
    out: list[Any] = []

    async def create(cfg: dict[str, Any]) -> None:
        resp = json.loads(
            (await nc.request(f"$JS.API.STREAM.CREATE.{cfg['name']}", json.dumps(cfg).encode())).data
        )
        out.append(resp.get("error"))

    async def pub(subject: str, data: bytes = b"x", **hdrs: str) -> None:
        msg = await nc.request(subject, data, timeout=2, headers=hdrs or None)
        out.append(msg.data)

    await create({"name": "N", "subjects": ["n.*"], "max_msgs": 2, "discard": "new", "max_msg_size": 8})
    for _ in range(3):
        await pub("n.a")
    await pub("n.b", b"123456789")
    await create({"name": "NB", "subjects": ["nb"], "max_bytes": 100, "discard": "new"})
    for _ in range(3):
        await pub("nb", b"y" * 30)
    await create(
        {
            "name": "PS",
            "subjects": ["ps.*"],
            "max_msgs_per_subject": 1,
            "discard": "new",
            "discard_new_per_subject": True,
        }
    )
    await pub("ps.a")
    await pub("ps.a")
    await pub("ps.b")
    await create({"name": "RU", "subjects": ["ru.*"], "allow_rollup_hdrs": True})
    await pub("ru.a", **{"Nats-Rollup": "bogus"})
    await pub("ru.a", **{"Nats-Rollup": "sub"})
    await pub("ps.a", **{"Nats-Rollup": "sub"})
    await pub("ru.a", **{"Nats-Expected-Last-Subject-Sequence": "5"})
    await pub("ru.a", **{"Nats-Msg-Id": "one"})
    await pub("ru.a", **{"Nats-Msg-Id": "one"})
    await pub("ru.b", **{"Nats-Expected-Last-Msg-Id": "two"})
    await create({"name": "SE", "subjects": ["se"], "deny_purge": True})
    await pub("se")
    purge = json.loads((await nc.request("$JS.API.STREAM.PURGE.SE", b"")).data)
    out.append(purge.get("error"))
    seal = {"name": "SE", "subjects": ["se"], "deny_purge": True, "sealed": True}
    upd = json.loads((await nc.request("$JS.API.STREAM.UPDATE.SE", json.dumps(seal).encode())).data)
    out.append(upd.get("error"))
    await pub("se")
    out.append(
        json.loads((await nc.request("$JS.API.STREAM.MSG.DELETE.SE", b'{"seq": 1}')).data).get("error")
    )
    return out


async def test_publish_flow_matches_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    expected = await publish_flow(ref)
    got = await publish_flow(ours)
    assert got == expected


async def test_api_level_metadata_matches_nats_server(clients: tuple[Client, Client]) -> None:
    """`$JS.API.INFO`'s api level and the `_nats.*` metadata of streams and consumers, by value: the server's
    level (`_nats.level`, nats-server 2.15.1 reports 5) and the level each config needs (`_nats.req.level`)
    for a plain stream, TTLs, counters, schedules, and consumers with priority groups or a pause."""
    streams = [
        {"name": "PLAIN", "subjects": ["plain"]},
        {"name": "TTL", "subjects": ["ttl"], "allow_msg_ttl": True},
        {"name": "CTR", "subjects": ["ctr"], "allow_msg_counter": True},
        {"name": "SCHED", "subjects": ["sched.>"], "allow_msg_schedules": True},
    ]
    consumers = [
        {"durable_name": "plain", "ack_policy": "explicit"},
        {
            "durable_name": "prio",
            "ack_policy": "explicit",
            "priority_policy": "overflow",
            "priority_groups": ["g"],
        },
        {"durable_name": "paused", "ack_policy": "explicit", "pause_until": "2099-01-01T00:00:00Z"},
    ]

    async def levels(nc: Client) -> list[Any]:
        async def ask(subject: str, body: Any = b"") -> Any:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            return json.loads((await nc.request(subject, data, timeout=2)).data)

        got: list[Any] = [(await ask("$JS.API.INFO"))["api"]["level"]]
        for cfg in streams:
            got.append((await ask(f"$JS.API.STREAM.CREATE.{cfg['name']}", cfg))["config"]["metadata"])
            got.append((await ask(f"$JS.API.STREAM.INFO.{cfg['name']}"))["config"]["metadata"])
        for cfg in consumers:
            name = cfg["durable_name"]
            req = {"stream_name": "PLAIN", "config": cfg}
            got.append((await ask(f"$JS.API.CONSUMER.CREATE.PLAIN.{name}", req))["config"]["metadata"])
            got.append((await ask(f"$JS.API.CONSUMER.INFO.PLAIN.{name}"))["config"]["metadata"])
        return got

    ref, ours = clients
    expected = await levels(ref)
    assert expected[0] == 5 and expected[1]["_nats.level"] == "5"
    assert await levels(ours) == expected
