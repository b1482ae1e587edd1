"""Consumer behaviour over time, nats-server 2.15.1 against pynatsd: the same nats-py actions on both, run
side by side, and what the clients observe compared (deliveries, counts, statuses). Times are windows with
margins, never tight bounds: each scenario reduces what it saw to counts that both servers must agree on.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api

from tests.conftest import need_tool
from tests.servers import ServerProcess, jetstream_pair, nats_server_binary, pynatsd_command, start_server

Scenario = Callable[[Client], Awaitable[Any]]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with jetstream_pair(tmp_path_factory.mktemp("consumer-behaviour")) as (ref, ours):
        yield {"nats-server": ref, "pynatsd": ours}


async def on_both(servers: dict[str, ServerProcess], scenario: Scenario) -> dict[str, Any]:
    """Run `scenario` against both servers at once (the windows overlap: half the wall time)."""

    async def run(server: ServerProcess) -> Any:
        nc = await nats.connect(f"nats://127.0.0.1:{server.port}", allow_reconnect=False)
        try:
            return await scenario(nc)
        finally:
            await nc.close()

    kinds = list(servers)
    results = await asyncio.gather(*(run(servers[k]) for k in kinds))
    return dict(zip(kinds, results, strict=True))


async def same_on_both(servers: dict[str, ServerProcess], scenario: Scenario) -> Any:
    seen = await on_both(servers, scenario)
    assert seen["pynatsd"] == seen["nats-server"]
    return seen["nats-server"]


def status_of(msg: Msg) -> str:
    return (msg.headers or {}).get("Status", "") if not msg.data else ""


class Inbox:
    """A subscription that keeps what arrives, to be read as counts within windows."""

    def __init__(self) -> None:
        self.msgs: list[Msg] = []
        self.arrived = asyncio.Event()

    async def cb(self, msg: Msg) -> None:
        self.msgs.append(msg)
        self.arrived.set()

    async def wait_for(self, count: int, within: float) -> None:
        """Until `count` messages are in (or `within` seconds passed: the caller compares what came)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while len(self.msgs) < count and loop.time() < deadline:
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), deadline - loop.time())
            except TimeoutError:
                break

    def statuses(self) -> list[str]:
        return [m.headers.get("Status", "") + " " + m.headers.get("Description", "") for m in self.msgs
                if m.headers and m.headers.get("Status")]  # fmt: skip

    def deliveries(self) -> list[tuple[int, int]]:
        """(stream sequence, delivery count) of each message, from its ack subject."""
        out = []
        for m in self.msgs:
            if m.reply and m.reply.startswith("$JS.ACK."):
                meta = m.metadata
                out.append((meta.sequence.stream, meta.num_delivered))
        return out


async def subscribe(nc: Client, subject: str | None = None) -> tuple[str, Inbox]:
    inbox = Inbox()
    subject = subject or nc.new_inbox()
    await nc.subscribe(subject, cb=inbox.cb)
    await nc.flush()
    return subject, inbox


async def stream_with(nc: Client, name: str, count: int) -> None:
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"])
    for i in range(count):
        await js.publish(f"{name}.m", b"m%d" % i)


async def pull(nc: Client, stream: str, consumer: str, reply: str, **request: Any) -> None:
    await nc.publish(
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", json.dumps(request).encode(), reply=reply
    )
    await nc.flush()


async def counts(nc: Client, stream: str, consumer: str) -> dict[str, int]:
    info = await nc.jetstream().consumer_info(stream, consumer)
    return {
        "num_ack_pending": info.num_ack_pending,
        "num_redelivered": info.num_redelivered,
        "num_waiting": info.num_waiting,
        "num_pending": info.num_pending,
        "delivered": info.delivered.stream_seq,
        "ack_floor": info.ack_floor.stream_seq,
    }


# -- consumers never wedge at max_ack_pending (issue 30 item 3) ----------------------------------------------
async def test_pull_worker_that_dies_hands_its_messages_to_the_next(
    servers: dict[str, ServerProcess],
) -> None:
    """Worker 1 takes 10 (max_ack_pending) and dies; after ack_wait worker 2 gets those 10, redelivered."""

    async def scenario(nc: Client) -> Any:
        await stream_with(nc, "WEDGEPULL", 20)
        await nc.jetstream().add_consumer(
            "WEDGEPULL", durable_name="d", ack_policy="explicit", ack_wait=0.5, max_ack_pending=10
        )
        reply1, worker1 = await subscribe(nc)
        await pull(nc, "WEDGEPULL", "d", reply1, batch=10, expires=2_000_000_000)
        await worker1.wait_for(10, 3)
        reply2, worker2 = await subscribe(nc)
        await pull(nc, "WEDGEPULL", "d", reply2, batch=10, expires=3_000_000_000)
        await worker2.wait_for(10, 4)
        seen = {"worker1": worker1.deliveries(), "worker2": sorted(worker2.deliveries())}
        seen["after redelivery"] = await counts(nc, "WEDGEPULL", "d")
        for msg in worker2.msgs:
            if msg.reply:
                await msg.ack_sync()
        reply3, worker3 = await subscribe(nc)
        await pull(nc, "WEDGEPULL", "d", reply3, batch=10, expires=2_000_000_000)
        await worker3.wait_for(10, 3)
        seen["worker3"] = worker3.deliveries()
        return seen

    seen = await same_on_both(servers, scenario)
    assert seen["worker2"] == [(seq, 2) for seq in range(1, 11)]


@pytest.mark.parametrize(
    "limits",
    [
        {"ack_wait": 0.3},
        {"ack_wait": 0.3, "max_deliver": 2},
        {"backoff": [0.2, 0.5], "max_deliver": 3},
    ],
    ids=["ack_wait", "max_deliver", "backoff"],
)
async def test_push_consumer_at_max_ack_pending_keeps_redelivering(
    servers: dict[str, ServerProcess], limits: dict[str, Any]
) -> None:
    """A subscriber that never acks: the consumer at max_ack_pending redelivers what expired, and moves on
    to the next messages once `max_deliver` gives up on the first ones."""
    max_deliver = limits.get("max_deliver", 0)
    stream = "WEDGEPUSH" + str(len(limits)) + str(max_deliver)

    async def scenario(nc: Client) -> Any:
        await stream_with(nc, stream, 4)
        deliver, sub = await subscribe(nc)
        await nc.jetstream().add_consumer(
            stream,
            durable_name="d",
            ack_policy="explicit",
            max_ack_pending=2,
            deliver_subject=deliver,
            **limits,
        )
        # Without max_deliver: both first messages redelivered twice; with it: all four, max_deliver times.
        expected = 4 * max_deliver if max_deliver else 6
        await sub.wait_for(expected, 6)
        await asyncio.sleep(0.6)  # nothing more comes (with max_deliver): a quiet window past ack_wait
        per_seq = Counter(seq for seq, _ in sub.deliveries())
        if not max_deliver:
            return {"seqs": sorted(per_seq), "all redelivered twice": min(per_seq.values()) >= 3}
        seen = await counts(nc, stream, "d")
        del seen["ack_floor"]  # nats-server leaves it at 0 here, pynatsd moves it past what it gave up on
        return {"per seq": sorted(per_seq.items()), "counts": seen}

    await same_on_both(servers, scenario)


# -- backoff and NAK delays -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["push", "pull"])
async def test_backoff_redelivers_on_its_schedule(servers: dict[str, ServerProcess], mode: str) -> None:
    """backoff [0.1 s, 0.2 s, 2 s], max_deliver 3: a message's three deliveries come within 1.5 s (at 0,
    0.1, 0.3 s), also while an older message waits out the long last step (its 2 s must not hold them)."""
    stream = f"BACKOFF{mode.upper()}"

    async def scenario(nc: Client) -> Any:
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=[f"{stream}.>"])
        deliver, sub = await subscribe(nc)
        await js.add_consumer(
            stream,
            durable_name="d",
            ack_policy="explicit",
            deliver_subject=deliver if mode == "push" else None,
            backoff=[0.1, 0.2, 2.0],
            max_deliver=3,
        )
        loop = asyncio.get_running_loop()

        async def deliveries_within(count: int, window: float) -> None:
            deadline = loop.time() + window
            if mode == "push":
                return await sub.wait_for(count, window)
            while len(sub.msgs) < count and loop.time() < deadline:  # a worker loop, one request a message
                wanted = len(sub.msgs) + 1
                await pull(nc, stream, "d", deliver, batch=1, expires=int((deadline - loop.time()) * 1e9))
                await sub.wait_for(wanted, deadline - loop.time())

        seen = {}
        for seq in (1, 2):
            await js.publish(f"{stream}.m", b"x")
            await deliveries_within(3 * seq, 1.5)
            seen[f"after message {seq}"] = sub.deliveries()
        return seen

    seen = await same_on_both(servers, scenario)
    assert seen["after message 2"] == [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3)]


BACKOFF_CONFIGS: list[dict[str, Any]] = [
    {"backoff": [1_000_000_000, 2_000_000_000, 3_000_000_000], "max_deliver": 2},
    {"backoff": [1_000_000_000, 2_000_000_000], "max_deliver": 2},
    {"backoff": [1_000_000_000, 2_000_000_000], "max_deliver": 1},
    {"backoff": [1_000_000_000, 2_000_000_000]},
    {"backoff": [1_000_000_000, 2_000_000_000], "max_deliver": -1},
    {"backoff": [2_000_000_000], "ack_wait": 5_000_000_000},
    {"backoff": [-1]},
    {"backoff": [1_000_000_000, -5]},
    {"backoff": [0]},
    {"backoff": []},
    {"backoff": [1_000_000_000], "ack_policy": "none"},
    {"backoff": [1_000_000_000], "ack_policy": "all"},
]


async def test_backoff_config_checked_as_nats_server_checks_it(servers: dict[str, ServerProcess]) -> None:
    """backoff against max_deliver and ack_wait: the same error (code, text) or the same stored values."""

    async def scenario(nc: Client) -> Any:
        await nc.jetstream().add_stream(name="BOCFG", subjects=["BOCFG.>"])
        answers = []
        for i, extra in enumerate(BACKOFF_CONFIGS):
            config = {"durable_name": f"c{i}", "ack_policy": "explicit", **extra}
            request = {"stream_name": "BOCFG", "config": config}
            msg = await nc.request(
                f"$JS.API.CONSUMER.CREATE.BOCFG.c{i}", json.dumps(request).encode(), timeout=2
            )
            answer = json.loads(msg.data)
            if "error" in answer:
                answers.append(answer["error"])
            else:
                stored = answer["config"]
                answers.append(
                    {k: stored.get(k) for k in ("ack_policy", "ack_wait", "backoff", "max_deliver")}
                )
        return answers

    await same_on_both(servers, scenario)


@pytest.mark.parametrize("nak", ["json", "duration"])
async def test_nak_with_delay_redelivers_after_the_delay(servers: dict[str, ServerProcess], nak: str) -> None:
    """`-NAK {"delay": 0.6 s}` (nats-py's nak(delay=)) or `-NAK 600ms`: nothing within 0.25 s, the message
    again within 2 s (ack_wait 5 s would be far later)."""
    stream = f"NAK{nak.upper()}"

    async def scenario(nc: Client) -> Any:
        await stream_with(nc, stream, 1)
        psub = await nc.jetstream().pull_subscribe(
            f"{stream}.m", "d", stream=stream, config=api.ConsumerConfig(ack_wait=5)
        )
        (msg,) = await psub.fetch(1, timeout=2)
        if nak == "json":
            await msg.nak(delay=0.6)
        else:
            await msg.respond(b"-NAK 600ms")
        await nc.flush()
        reply, inbox = await subscribe(nc)
        await pull(nc, stream, "d", reply, batch=1, expires=250_000_000)
        await inbox.wait_for(1, 2)
        early = inbox.deliveries() or inbox.statuses()
        await pull(nc, stream, "d", reply, batch=1, expires=2_000_000_000)
        await inbox.wait_for(2, 3)
        return {"within 0.25 s": early, "within 2 s": inbox.deliveries()}

    seen = await same_on_both(servers, scenario)
    assert seen["within 2 s"] == [(1, 2)]


async def test_nak_at_max_deliver_is_not_delivered_again(servers: dict[str, ServerProcess]) -> None:
    """max_deliver 1: the NAKed message is not handed out again (the next fetch gets the next message), it
    leaves num_ack_pending, and the ack floor and num_redelivered stay as nats-server keeps them."""

    async def scenario(nc: Client) -> Any:
        js = nc.jetstream()
        await stream_with(nc, "NAKMAX", 2)
        cfg = api.ConsumerConfig(durable_name="d", max_deliver=1)
        psub = await js.pull_subscribe("NAKMAX.m", "d", stream="NAKMAX", config=cfg)
        _, second = await psub.fetch(2, timeout=2)
        await js.publish("NAKMAX.m", b"late")
        await nc.request(second.reply, b"-NAK", timeout=2)  # answered once the NAK is taken in
        again = [m.metadata.sequence.stream for m in await psub.fetch(5, timeout=1)]
        info = await js.consumer_info("NAKMAX", "d")
        return again, info.num_ack_pending, info.num_redelivered, info.ack_floor.stream_seq

    assert await same_on_both(servers, scenario) == ([3], 2, 0, 0)


async def test_filtered_consumer_delivered_stays_at_its_last_delivery(
    servers: dict[str, ServerProcess],
) -> None:
    """A filtered consumer that has found nothing more: delivered.stream_seq (and, all acked, the ack floor)
    stay at the last message it delivered; num_pending and the next delivery count the later matches."""

    async def scenario(nc: Client) -> Any:
        js = nc.jetstream()
        await js.add_stream(name="FLT", subjects=["FLT.*"])
        for subject in ["FLT.a", "FLT.b", "FLT.a", "FLT.a"]:
            await js.publish(subject, b"")
        cfg = api.ConsumerConfig(durable_name="d", filter_subject="FLT.b")
        psub = await js.pull_subscribe("FLT.b", "d", stream="FLT", config=cfg)
        for msg in await psub.fetch(3, timeout=1):  # seq 2, then nothing more for the filter
            await msg.ack_sync()
        seen = []
        for subject in ["FLT.a", "FLT.b", "FLT.a"]:
            info = await js.consumer_info("FLT", "d")
            seen.append((info.delivered.stream_seq, info.ack_floor.stream_seq, info.num_pending))
            await js.publish(subject, b"")
        seen.append([m.metadata.sequence.stream for m in await psub.fetch(3, timeout=1)])
        return seen

    assert await same_on_both(servers, scenario) == [(2, 2, 0), (2, 2, 0), (2, 2, 1), [6]]


# -- pull requests: expiry, no_wait, heartbeats, max_waiting, max_bytes -------------------------------------
@pytest.mark.parametrize("batch", [1, 5])
async def test_fetch_that_timed_out_leaves_no_request_behind(
    servers: dict[str, ServerProcess], batch: int
) -> None:
    """After a fetch timed out, the next message goes to the next fetch at once (within 1.5 s), not to a
    request left over from the first."""
    stream = f"ORPHAN{batch}"

    async def scenario(nc: Client) -> Any:
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=[f"{stream}.>"])
        psub = await js.pull_subscribe(f"{stream}.m", "d", stream=stream)
        outcomes = []
        for timeout in (0.5, 1.0):
            try:
                await psub.fetch(batch, timeout=timeout)
                outcomes.append("message")
            except TimeoutError:  # nats-py raises its own or asyncio's
                outcomes.append("timeout")
        await js.publish(f"{stream}.m", b"x")
        try:
            msgs = await psub.fetch(batch, timeout=1.5)
            outcomes.append(len(msgs))
        except TimeoutError:  # nats-py raises its own or asyncio's
            outcomes.append("timeout")
        info = await counts(nc, stream, "d")
        return {"fetches": outcomes, "num_waiting": info["num_waiting"]}

    seen = await same_on_both(servers, scenario)
    assert seen["fetches"] == ["timeout", "timeout", 1]


@pytest.mark.parametrize("shared_inbox", [False, True], ids=["three inboxes", "one inbox"])
async def test_nowait_fetches_in_flight_deliver_every_message(
    servers: dict[str, ServerProcess], shared_inbox: bool
) -> None:
    """117 messages, three fetches of 50 at once (three workers, or one subscription): every message
    arrives, once."""
    stream = f"NOWAIT{int(shared_inbox)}"

    async def scenario(nc: Client) -> Any:
        await stream_with(nc, stream, 117)
        js = nc.jetstream()
        shared = await js.pull_subscribe(f"{stream}.m", "d", stream=stream)
        workers = (
            [shared] * 3
            if shared_inbox
            else [await js.pull_subscribe(f"{stream}.m", "d", stream=stream) for _ in range(3)]
        )

        async def fetch(psub: Any) -> list[int]:
            try:
                return [m.metadata.sequence.stream for m in await psub.fetch(50, timeout=1.5)]
            except TimeoutError:  # nats-py raises its own or asyncio's
                return []

        got = await asyncio.gather(*(fetch(w) for w in workers))
        return sorted(seq for seqs in got for seq in seqs)

    assert await same_on_both(servers, scenario) == list(range(1, 118))


def pending_statuses(inbox: Inbox) -> list[str]:
    """Statuses with their pending counts (what nats-server puts on 408/409)."""
    out = []
    for m in inbox.msgs:
        if m.headers and m.headers.get("Status"):
            extra = [m.headers.get(h, "") for h in ("Nats-Pending-Messages", "Nats-Pending-Bytes")]
            out.append(" ".join([m.headers["Status"], m.headers.get("Description", ""), *extra]).strip())
    return out


async def test_pull_request_answers_match_nats_server(servers: dict[str, ServerProcess]) -> None:
    """no_wait with and without expires, expiry, max_bytes, max_waiting, heartbeats, a deleted consumer:
    the same messages and statuses (with their pending counts), window by window."""

    async def scenario(nc: Client) -> Any:
        js = nc.jetstream()
        await js.add_stream(name="PULLS", subjects=["PULLS.>"])
        await js.add_consumer("PULLS", durable_name="d", ack_policy="explicit", max_waiting=3)
        seen: dict[str, Any] = {}

        async def step(name: str, window: float, expect: int, **request: Any) -> None:
            reply, inbox = await subscribe(nc)
            await pull(nc, "PULLS", "d", reply, **request)
            await inbox.wait_for(expect, window)
            seen[name] = [seq for seq, _ in inbox.deliveries()] + pending_statuses(inbox)

        await step("no_wait, nothing", 1, 1, batch=1, no_wait=True)
        await step("no_wait + expires, nothing", 1.5, 1, batch=2, no_wait=True, expires=300_000_000)
        await step("expires, nothing", 1.5, 1, batch=2, expires=300_000_000)
        for i in range(3):
            await js.publish("PULLS.m", b"%03d" % i * 20)  # 60-byte payloads
        await step("no_wait, 3 of 5", 1, 4, batch=5, no_wait=True)
        for i in range(4):
            await js.publish("PULLS.m", b"%03d" % i * 20)
        await step("max_bytes for 2", 1, 3, batch=10, max_bytes=300, expires=500_000_000)
        await step("max_bytes under one", 1, 1, batch=10, max_bytes=50, expires=500_000_000)
        await step("no_wait + expires, 2 of 5", 1, 3, batch=5, no_wait=True, expires=500_000_000)
        await step("heartbeat too large", 1, 1, batch=1, expires=200_000_000, idle_heartbeat=150_000_000)
        reply, inbox = await subscribe(nc)
        for _ in range(4):  # three fit under max_waiting
            await pull(nc, "PULLS", "d", reply, batch=1, expires=5_000_000_000)
        await inbox.wait_for(1, 1)
        seen["max_waiting"] = pending_statuses(inbox)
        seen["waiting"] = (await counts(nc, "PULLS", "d"))["num_waiting"]
        await js.delete_consumer("PULLS", "d")
        await inbox.wait_for(4, 1)
        seen["consumer deleted"] = pending_statuses(inbox)
        return seen

    await same_on_both(servers, scenario)


async def test_nowait_requests_wait_out_max_ack_pending(servers: dict[str, ServerProcess]) -> None:
    """max_ack_pending 10, a worker acking each message as it comes, three no_wait requests of 50 in flight:
    all 117 messages arrive (nats-server answers a no_wait request only at the end of the stream, not while
    max_ack_pending holds it)."""

    async def scenario(nc: Client) -> Any:
        await stream_with(nc, "NOWAITACK", 117)
        await nc.jetstream().add_consumer(
            "NOWAITACK", durable_name="d", ack_policy="explicit", max_ack_pending=10
        )
        inbox = Inbox()

        async def ack_each(msg: Msg) -> None:
            await inbox.cb(msg)
            if msg.reply:
                await msg.ack()

        reply = nc.new_inbox()
        await nc.subscribe(reply, cb=ack_each)
        for _ in range(3):
            await pull(nc, "NOWAITACK", "d", reply, batch=50, no_wait=True)
        await inbox.wait_for(117 + 1, 3)
        # How many requests end with a 404 depends on how acks and deliveries interleave: only the kinds.
        return {"delivered": len(inbox.deliveries()), "statuses": set(pending_statuses(inbox))}

    seen = await same_on_both(servers, scenario)
    assert seen["delivered"] == 117


# -- concurrency -------------------------------------------------------------------------------------------
async def test_a_bound_durable_push_consumer_is_not_taken_over(servers: dict[str, ServerProcess]) -> None:
    """One client subscribes with a durable; nine more then subscribe with it at once: one runs, nine get the
    error, and the messages reach the first only. The consumer's deliver subject changes only once nobody
    listens there (nats-server: 10013 "consumer name already in use"); ten creates with action `create`
    and ten deliver subjects at once: one is made, nine get 10148."""

    async def scenario(nc: Client) -> Any:
        await stream_with(nc, "RACE", 3)
        url = nc.connected_url
        assert url is not None
        clients = [await nats.connect(f"nats://{url.netloc}", allow_reconnect=False) for _ in range(10)]
        received = [Inbox() for _ in clients]

        async def subscribe_durable(client: Client, inbox: Inbox) -> str:
            try:
                await client.jetstream().subscribe("RACE.m", durable="d", cb=inbox.cb, manual_ack=True)
                return "subscribed"
            except Exception as error:  # the error's text is what is compared
                return f"{type(error).__name__}: {getattr(error, 'description', error)}"

        async def create(config: dict[str, Any], action: str | None = None) -> str:
            request: dict[str, Any] = {"stream_name": "RACE", "config": config}
            if action:
                request["action"] = action
            subject = f"$JS.API.CONSUMER.CREATE.RACE.{config['durable_name']}"
            answer = json.loads((await nc.request(subject, json.dumps(request).encode(), timeout=2)).data)
            return str(answer.get("error", {}).get("err_code", "ok"))

        try:
            first = await subscribe_durable(clients[0], received[0])
            rest = await asyncio.gather(
                *(subscribe_durable(c, i) for c, i in zip(clients[1:], received[1:], strict=True))
            )
            await received[0].wait_for(3, 2)
            seen: dict[str, Any] = {"first": first, "others": Counter(rest)}
            seen["deliveries"] = [len(i.msgs) for i in received]
            takeover = (await nc.jetstream().consumer_info("RACE", "d")).config.as_dict()
            takeover["deliver_subject"] = "elsewhere"
            seen["takeover while bound"] = await create(takeover)
            await clients[0].close()
            # The server notices the close on its own time: wait until it reports the consumer unbound.
            for _ in range(100):
                if not (await nc.jetstream().consumer_info("RACE", "d")).push_bound:
                    break
                await asyncio.sleep(0.02)
            seen["takeover once unbound"] = await create(takeover)
            creates = [
                create({"durable_name": "r", "deliver_subject": f"r.{i}"}, "create") for i in range(10)
            ]
            seen["action create"] = Counter(await asyncio.gather(*creates))
            return seen
        finally:
            for client in clients:
                await client.close()

    seen = await same_on_both(servers, scenario)
    assert seen["takeover while bound"] == "10013"


# -- heartbeats and flow control -----------------------------------------------------------------------------
def heartbeats(inbox: Inbox) -> list[dict[str, str]]:
    return [
        {k: v for k, v in m.headers.items() if k.startswith("Nats-")}
        for m in inbox.msgs
        if m.headers and m.headers.get("Status") == "100" and not m.reply
    ]


async def test_idle_heartbeats_reach_an_idle_push_subscriber(servers: dict[str, ServerProcess]) -> None:
    """idle_heartbeat 0.2 s: an idle subscriber gets at least three within 1.5 s, before and after a
    delivery, with the last consumer and stream sequences."""

    async def scenario(nc: Client) -> Any:
        js = nc.jetstream()
        await js.add_stream(name="HB", subjects=["HB.>"])
        deliver, inbox = await subscribe(nc)
        await js.add_consumer("HB", durable_name="d", deliver_subject=deliver, idle_heartbeat=0.2)
        await inbox.wait_for(3, 1.5)
        seen: dict[str, Any] = {"idle": heartbeats(inbox)[:3]}
        await js.publish("HB.m", b"x")
        await inbox.wait_for(len(inbox.msgs) + 4, 1.5)
        seen["after a message"] = heartbeats(inbox)[-1]
        return seen

    seen = await same_on_both(servers, scenario)
    assert len(seen["idle"]) == 3


async def test_pull_request_heartbeats(servers: dict[str, ServerProcess]) -> None:
    """A pull request with idle_heartbeat 0.2 s and expires 1 s: heartbeats while it waits, then 408."""

    async def scenario(nc: Client) -> Any:
        await nc.jetstream().add_stream(name="PULLHB", subjects=["PULLHB.>"])
        await nc.jetstream().add_consumer("PULLHB", durable_name="d", ack_policy="explicit")
        reply, inbox = await subscribe(nc)
        await pull(nc, "PULLHB", "d", reply, batch=1, expires=1_000_000_000, idle_heartbeat=200_000_000)
        await inbox.wait_for(100, 1.5)
        statuses = pending_statuses(inbox)
        return {"heartbeats >= 3": statuses.count("100 Idle Heartbeat") >= 3, "last": statuses[-1]}

    assert (await same_on_both(servers, scenario))["heartbeats >= 3"]


async def test_flow_control_with_a_subscriber_that_does_not_answer(servers: dict[str, ServerProcess]) -> None:
    """Flow control as nats-server runs it: a subscriber that does not answer still gets 600 small messages
    (well under the first window); of 3 MB more it gets about 2 MiB, then the consumer stalls (heartbeats
    say so); once it answers, the rest arrives."""

    async def scenario(nc: Client) -> Any:
        js = nc.jetstream()
        await js.add_stream(name="FC", subjects=["FC.>"])
        answering = False
        flow_requests: list[Msg] = []
        inbox = Inbox()

        async def subscriber(msg: Msg) -> None:
            if msg.headers and msg.headers.get("Description") == "FlowControl Request":
                flow_requests.append(msg)
                if answering:
                    await msg.respond(b"")
                return
            await inbox.cb(msg)

        await nc.subscribe("fc.deliver", cb=subscriber)
        await js.add_consumer(
            "FC", durable_name="d", deliver_subject="fc.deliver", flow_control=True, idle_heartbeat=0.3
        )
        for _ in range(600):
            await nc.publish("FC.small", b"s" * 100)
        await inbox.wait_for(600, 3)
        seen: dict[str, Any] = {"small, unanswered": len(inbox.deliveries())}
        for _ in range(300):
            await nc.publish("FC.large", b"L" * 10_000)
        await inbox.wait_for(900, 1.5)
        stalled_at = len(inbox.deliveries()) - 600
        seen["large, unanswered: about 2 MiB"] = 180 <= stalled_at <= 230
        await inbox.wait_for(len(inbox.msgs) + 2, 1)  # a heartbeat or two
        last_heartbeat = heartbeats(inbox)[-1]
        seen["heartbeat says stalled"] = (
            last_heartbeat.get("Nats-Consumer-Stalled") == flow_requests[-1].reply
        )
        answering = True
        await flow_requests[-1].respond(b"")
        await inbox.wait_for(len(inbox.msgs) + 900 - len(inbox.deliveries()), 3)
        seen["after answering"] = len(inbox.deliveries())
        return seen

    seen = await same_on_both(servers, scenario)
    assert seen["after answering"] == 900


# -- jetstream { max_buffered_msgs, max_buffered_size } ------------------------------------------------------
@pytest.mark.parametrize("limit", ["max_buffered_msgs: 1", "max_buffered_size: 2KB"])
async def test_stream_ingest_buffer_limits(tmp_path: Path, limit: str) -> None:
    """nats-server's stream ingest limits: a burst of 500 publishes past them is partly refused with 429
    (10167 "too many requests"), every publisher hears back, and a later single publish is stored."""
    need_tool(nats_server_binary() is not None, "nats-server")
    started: dict[str, ServerProcess] = {}
    try:
        for kind in ("nats-server", "pynatsd"):
            conf = tmp_path / f"{kind}.conf"
            conf.write_text(f'jetstream {{ store_dir: "{tmp_path / kind}", {limit} }}\n')
            started[kind] = start_server(kind, ["-c", str(conf)])

        async def scenario(nc: Client) -> Any:
            js = nc.jetstream()
            await js.add_stream(name="INGEST", subjects=["INGEST.>"])
            answers = Inbox()
            await nc.subscribe("answers.*", cb=answers.cb)
            for i in range(500):
                await nc.publish("INGEST.x", b"y" * 1000, reply=f"answers.{i}")
            await answers.wait_for(500, 5)
            refused = [m for m in answers.msgs if m.headers and m.headers.get("Status") == "429"]
            stored = (await js.stream_info("INGEST")).state.messages
            later = await js.publish("INGEST.x", b"later")
            return {
                "answered": len(answers.msgs),
                "stored + refused": stored + len(refused),
                "most refused": len(refused) > 250,
                "refusal": {
                    json.loads(m.data)["error"]["err_code"]: m.headers.get("Description") for m in refused
                },
                "later stored": later.seq == stored + 1,
            }

        seen = await same_on_both(started, scenario)
        assert seen["refusal"] == {10167: "Too Many Requests"}
    finally:
        for server in started.values():
            server.stop()


def test_ingest_buffer_keys_checked_as_nats_server_checks_them(tmp_path: Path) -> None:
    """The keys are accepted by `-t` on both; a count that is not a number fails both."""
    need_tool(nats_server_binary() is not None, "nats-server")
    commands = {"nats-server": [str(nats_server_binary())], "pynatsd": pynatsd_command()}
    good, bad = "max_buffered_msgs: 10, max_buffered_size: 1MB", 'max_buffered_msgs: "many"'
    valid = {}
    for kind, command in commands.items():
        for value in (good, bad):
            conf = tmp_path / "ingest.conf"
            conf.write_text(f'jetstream {{ store_dir: "{tmp_path}", {value} }}\n')
            done = subprocess.run(
                [*command, "-c", str(conf), "-t"], capture_output=True, timeout=30, check=False
            )
            valid[kind, value] = done.returncode == 0
    assert valid == {
        ("nats-server", good): True,
        ("nats-server", bad): False,
        ("pynatsd", good): True,
        ("pynatsd", bad): False,
    }


async def num_waiting_settled(nc: Client, stream: str, consumer: str, expected: int) -> int:
    """num_waiting once it is `expected` (nats-server registers a pull request on its own goroutine), or
    what it still is after a second."""
    for _ in range(20):
        waiting = (await counts(nc, stream, consumer))["num_waiting"]
        if waiting == expected:
            break
        await asyncio.sleep(0.05)
    return waiting


async def test_cancelled_pull_request_is_gone(servers: dict[str, ServerProcess]) -> None:
    """A waiting pull request whose requester unsubscribed no longer counts in num_waiting, and the next
    message goes to the next request."""

    async def scenario(nc: Client) -> Any:
        js = nc.jetstream()
        await js.add_stream(name="CANCEL", subjects=["CANCEL.>"])
        await js.add_consumer("CANCEL", durable_name="d", ack_policy="explicit")
        gone = await nc.subscribe(nc.new_inbox())
        await pull(nc, "CANCEL", "d", gone.subject, batch=1, expires=5_000_000_000)
        seen = {"waiting": await num_waiting_settled(nc, "CANCEL", "d", 1)}
        await gone.unsubscribe()
        await nc.flush()
        seen["waiting after unsubscribe"] = await num_waiting_settled(nc, "CANCEL", "d", 0)
        reply, inbox = await subscribe(nc)
        await pull(nc, "CANCEL", "d", reply, batch=1, expires=2_000_000_000)
        await js.publish("CANCEL.m", b"x")
        await inbox.wait_for(1, 1.5)
        seen["next request got"] = inbox.deliveries()
        return seen

    seen = await same_on_both(servers, scenario)
    assert seen["waiting after unsubscribe"] == 0
