"""Sourcing consumers (API levels 4 and 5, nats-server 2.14/2.15) against nats-server -js and pynatsd -js:
the `sourcing` option and the named direct sourcing feed of a mirror or source (made unique on a limits
stream, a durable acked by flow control on an interest or work queue stream), ack policy flow_control
(its defaults, refusals and acks by flow control answers), the origin's identity (its header, 10225) and
the API levels served (10185 past 5). Both servers play the same script at once; the answers are compared
with generated names and identities replaced."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

_RANDOM_SUFFIX = re.compile(r"-[A-Za-z0-9]{8}$")
_GENERATED = re.compile(r"^[A-Za-z0-9]{8}$")


def _shown(answer: dict[str, Any], identity: str) -> Any:
    """An answer without what legitimately differs: times, generated names, the stream's identity."""
    if "error" in answer:
        error = answer["error"]
        description = error["description"]
        return {
            **error,
            "description": description.replace(identity, "<identity>") if identity else description,
        }
    out = {k: v for k, v in answer.items() if k not in ("ts", "created", "type")}
    name = str(out.get("name") or "")
    out["name"] = "<generated>" if _GENERATED.match(name) else _RANDOM_SUFFIX.sub("-<random>", name)
    if "config" in out:
        config = dict(out["config"])
        if "name" in config:
            config["name"] = out["name"]
        out["config"] = config
    return out


async def _create(nc: Client, stream: str, config: dict[str, Any], **hdrs: str) -> tuple[str, dict[str, Any]]:
    body = json.dumps({"stream_name": stream, "config": config}).encode()
    headers = {k.replace("_", "-"): v for k, v in hdrs.items()} or None
    msg = await nc.request(f"$JS.API.CONSUMER.CREATE.{stream}", body, timeout=5, headers=headers)
    return (msg.headers or {}).get("Nats-Stream-Identity", ""), json.loads(msg.data)


async def _request(nc: Client, subject: str, body: Any = b"") -> dict[str, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    answer: dict[str, Any] = json.loads((await nc.request(subject, data, timeout=5)).data)
    return answer


def _feed(deliver: str) -> dict[str, Any]:
    """The config of nats-server 2.15's mirror feed, as its mirror asks for it."""
    return {
        "name": "JS_MIRROR_feed",
        "deliver_subject": deliver,
        "deliver_policy": "all",
        "ack_policy": "none",
        "ack_wait": 22 * 3600 * 10**9,
        "max_deliver": 1,
        "idle_heartbeat": 10**9,
        "flow_control": True,
        "direct": True,
        "sourcing": True,
        "inactive_threshold": 10 * 10**9,
    }


async def _script(nc: Client) -> list[Any]:
    seen: list[Any] = []
    for retention in ("limits", "interest", "workqueue"):
        name = "R" + retention[0].upper()
        await _request(
            nc,
            f"$JS.API.STREAM.CREATE.{name}",
            {"name": name, "subjects": [f"{name}.>"]} | {"retention": retention},
        )
        for i in range(3):
            await nc.request(f"{name}.m", b"%d" % i, timeout=5)
        identity, answer = await _create(nc, name, {"deliver_subject": f"d1.{name}", "sourcing": True})
        seen.append((retention, "push", bool(identity), _shown(answer, identity)))
        _, answer = await _create(nc, name, {"sourcing": True})
        seen.append((retention, "pull", _shown(answer, identity)))
        _, answer = await _create(nc, name, _feed(f"d2.{name}"), Nats_Required_Api_Level="4")
        seen.append((retention, "feed", _shown(answer, identity)))
        _, answer = await _create(nc, name, _feed(f"d3.{name}"), Nats_Stream_Identity="nope")
        seen.append((retention, "other origin", _shown(answer, identity)))
        _, answer = await _create(nc, name, _feed(f"d4.{name}"), Nats_Stream_Identity=identity)
        seen.append((retention, "same origin", _shown(answer, identity)))
        listed = await _request(nc, f"$JS.API.CONSUMER.NAMES.{name}")
        info = await _request(nc, f"$JS.API.STREAM.INFO.{name}")
        seen.append((retention, len(listed["consumers"]), info["state"]["consumer_count"]))
        await _request(nc, f"$JS.API.STREAM.DELETE.{name}")

    await _request(nc, "$JS.API.STREAM.CREATE.E", {"name": "E", "subjects": ["E.>"], "max_consumers": 1})
    cases: list[dict[str, Any]] = [
        {"name": "up", "deliver_subject": "up.d"},
        {"name": "up", "deliver_subject": "up.d", "sourcing": True},  # sourcing can not be updated
        {"name": "src", "deliver_subject": "src.d", "sourcing": True},  # the limit is reached
        {"name": "fc", "ack_policy": "flow_control"},  # pull
        {"name": "fc", "deliver_subject": "fc.d", "ack_policy": "flow_control", "max_ack_pending": -1},
        {"name": "fc", "deliver_subject": "fc.d", "ack_policy": "flow_control", "ack_wait": 10**9},
        {"name": "fc", "deliver_subject": "fc.d", "ack_policy": "flow_control", "backoff": [10**9]},
        {"name": "fc", "deliver_subject": "fc.d", "ack_policy": "flow_control", "max_deliver": 3},
    ]
    for config in cases:
        identity, answer = await _create(nc, "E", config)
        seen.append(("E", config, _shown(answer, identity)))
    await _request(nc, "$JS.API.CONSUMER.DELETE.E.up")
    for config in (
        {"name": "src", "deliver_subject": "src.d", "sourcing": True},
        {"name": "fc", "deliver_subject": "fc.d", "ack_policy": "flow_control", "idle_heartbeat": 5 * 10**9},
        {"name": "third", "deliver_subject": "third.d"},  # the sourcing one is not counted
        {"name": "dc", "deliver_subject": "dc.d", "direct": True},  # nor limited, as a direct one
    ):
        identity, answer = await _create(nc, "E", config)
        seen.append(("E", config, _shown(answer, identity)))
    for level in ("5", "6", "x"):
        identity, answer = await _create(
            nc, "E", {"deliver_subject": "lv.d", "sourcing": True}, Nats_Required_Api_Level=level
        )
        seen.append(("level", level, _shown(answer, identity)))
    await _request(nc, "$JS.API.STREAM.DELETE.E")

    # A work queue's sourcing consumers take no part in its exclusivity.
    await _request(
        nc, "$JS.API.STREAM.CREATE.WQ", {"name": "WQ", "subjects": ["WQ.>"], "retention": "workqueue"}
    )
    for config in (
        {"durable_name": "one", "ack_policy": "explicit", "filter_subject": "WQ.a"},
        {"deliver_subject": "wq.d", "sourcing": True, "ack_policy": "none", "deliver_policy": "new"},
        {"durable_name": "two", "ack_policy": "explicit", "filter_subject": "WQ.b"},
    ):
        identity, answer = await _create(nc, "WQ", config)
        seen.append(("WQ", config, _shown(answer, identity)))
    await _request(nc, "$JS.API.STREAM.DELETE.WQ")
    return seen


async def test_sourcing_consumers_answered_as_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    want, got = await asyncio.gather(_script(ref), _script(ours))
    diffs = [f"nats-server {w}\npynatsd     {g}" for w, g in zip(want, got, strict=True) if w != g]
    assert not diffs, "\n\n".join(diffs)
    levels = [entry[2] for entry in got if entry[0] == "level"]
    assert "error" not in levels[0] and [e.get("err_code") for e in levels[1:]] == [10185, 10185]


async def _acked_by_flow_control(nc: Client) -> list[Any]:
    """A 2.15 mirror's feed of an interest stream: a durable acked by flow control answers, made again from
    its ack floor when asked for again."""
    seen: list[Any] = []
    await _request(
        nc, "$JS.API.STREAM.CREATE.IN", {"name": "IN", "subjects": ["IN.>"], "retention": "interest"}
    )
    _, answer = await _create(nc, "IN", _feed("in.d1"))  # interest first: the messages are kept for it
    seen.append(("created", _shown(answer, "")))
    for i in range(3):
        await nc.request("IN.m", b"%d" % i, timeout=5)

    async def take(deliver: str, count: int) -> tuple[list[Msg], Msg | None]:
        """The first `count` messages on `deliver` and the flow control request that came with them."""
        got: list[Msg] = []
        fc: list[Msg] = []
        done = asyncio.get_running_loop().create_future()

        async def on_msg(msg: Msg) -> None:
            if msg.headers and msg.headers.get("Status") == "100":
                fc.extend([msg] if msg.reply else [])
            else:
                got.append(msg)
            if len(got) >= count and (fc or count < 3) and not done.done():
                done.set_result(None)

        sub = await nc.subscribe(deliver, cb=on_msg)
        await asyncio.wait_for(done, 10)
        await sub.unsubscribe()
        return got, fc[0] if fc else None

    first, fc = await take("in.d1", 3)  # a flow control request follows, on the next idle heartbeat
    seen.append(("delivered", [(m.data, m.reply.split(".")[4:7]) for m in first]))
    # Asked for again (the mirror made its feed again): from the ack floor, as nothing was acked. The flow
    # control request still outstanding is the one whose answer counts.
    _, answer = await _create(nc, "IN", _feed("in.d2"))
    seen.append(("made again", _shown(answer, "")["config"]))
    again, _ = await take("in.d2", 2)
    seen.append(("redelivered", [(m.data, m.reply.split(".")[4:7]) for m in again]))
    assert fc is not None and fc.reply
    await nc.publish(fc.reply, b"", headers={"Nats-Last-Consumer": "2", "Nats-Last-Stream": "2"})
    await nc.flush()
    for _ in range(50):  # the ack is the server's own work after the answer: its effect is awaited
        info = await _request(nc, "$JS.API.STREAM.INFO.IN")
        if info["state"]["messages"] == 1:
            break
        await asyncio.sleep(0.05)
    consumer = await _request(nc, "$JS.API.CONSUMER.INFO.IN.JS_MIRROR_feed")
    floor = {k: v for k, v in consumer["ack_floor"].items() if k != "last_active"}
    seen.append(("acked", info["state"]["messages"], info["state"]["first_seq"], floor))
    seen.append(("pending", consumer["num_ack_pending"], consumer["delivered"]["stream_seq"]))
    await _request(nc, "$JS.API.STREAM.DELETE.IN")
    return seen


async def test_flow_control_acks_a_durable_feed_as_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    want, got = await asyncio.gather(_acked_by_flow_control(ref), _acked_by_flow_control(ours))
    diffs = [f"nats-server {w}\npynatsd     {g}" for w, g in zip(want, got, strict=True) if w != g]
    assert not diffs, "\n\n".join(diffs)
    assert got[-1][1:3] == (1, 3)


async def _reset_and_next(nc: Client) -> list[Any]:
    """CONSUMER.RESET and MSG.NEXT asked with an API level and an expected identity (a durable feed's)."""
    seen: list[Any] = []
    await _request(nc, "$JS.API.STREAM.CREATE.RS", {"name": "RS", "subjects": ["RS.>"]})
    await nc.request("RS.a", b"x", timeout=5)
    identity, _ = await _create(nc, "RS", {"deliver_subject": "rs.feed", "sourcing": True})
    await _create(nc, "RS", {"name": "pull", "ack_policy": "explicit"})
    await _create(nc, "RS", {"name": "push", "deliver_subject": "rs.push", "ack_policy": "explicit"})
    for hdrs in (
        {"Nats-Required-Api-Level": "6"},
        {"Nats-Required-Api-Level": "5", "Nats-Stream-Identity": "nope"},
        {"Nats-Stream-Identity": ""},
        {},
    ):
        msg = await nc.request("$JS.API.CONSUMER.RESET.RS.pull", b"", timeout=5, headers=hdrs or None)
        told = (msg.headers or {}).get("Nats-Stream-Identity")
        seen.append(
            (
                "reset",
                hdrs,
                told == identity if told is not None else None,
                _shown(json.loads(msg.data), identity),
            )
        )
    for consumer in ("pull", "push"):
        msg = await nc.request(
            f"$JS.API.CONSUMER.MSG.NEXT.RS.{consumer}",
            b"",
            timeout=5,
            headers={"Nats-Required-Api-Level": "6"},
        )
        seen.append(("next", consumer, (msg.headers or {}).get("Status"), msg.data))
    await _request(nc, "$JS.API.STREAM.DELETE.RS")
    return seen


async def test_reset_and_next_asked_with_levels_and_identity_as_nats_server(
    clients: tuple[Client, Client],
) -> None:
    ref, ours = clients
    want, got = await asyncio.gather(_reset_and_next(ref), _reset_and_next(ours))
    diffs = [f"nats-server {w}\npynatsd     {g}" for w, g in zip(want, got, strict=True) if w != g]
    assert not diffs, "\n\n".join(diffs)
    assert got[0][3]["err_code"] == 10185 and got[1][2] is True
