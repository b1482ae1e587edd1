"""kill -9 during a publish flood: after a restart every acknowledged message is there once, in order, the
store is readable end to end, and a durable consumer resumes from its ack floor."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from nats.js import api

from tests.jetstream.conftest import jetstream_life


async def test_kill_9_during_publish_flood(tmp_path: Path) -> None:
    store = tmp_path / "store"
    async with jetstream_life("pynatsd", store, kill=True) as (srv, nc):
        js = nc.jetstream(timeout=2)
        await js.add_stream(name="CRASH", subjects=["crash.>"])
        for i in range(100):
            await js.publish("crash.pre", b"pre-%d" % i)
        psub = await js.pull_subscribe("crash.pre", "reader", stream="CRASH")
        for m in await psub.fetch(40):
            await m.ack_sync()
        await asyncio.sleep(0.3)  # consumer state is written within 50 ms of an ack

        acked: dict[int, bytes] = {}
        stop = asyncio.Event()

        async def flood(worker: int) -> None:
            n = 0
            while not stop.is_set():
                payload = b"w%d-%d" % (worker, n)
                n += 1
                try:
                    ack = await js.publish(f"crash.w{worker}", payload, timeout=1)
                except Exception:
                    return  # the server is gone: this publish was never acknowledged
                assert ack.seq not in acked
                acked[ack.seq] = payload

        workers = [asyncio.create_task(flood(w)) for w in range(8)]
        while len(acked) < 2000:
            await asyncio.sleep(0.01)
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(10)
        stop.set()
        await asyncio.gather(*workers)

    async with jetstream_life("pynatsd", store) as (_, nc):
        js = nc.jetstream(timeout=5)
        info = await js.stream_info("CRASH")
        st = info.state
        assert st.first_seq == 1 and st.last_seq >= max(acked)
        assert st.messages == st.last_seq  # nothing lost in the middle, nothing twice
        # Read the whole stream back in order through an ordered pass of a fresh consumer.
        reader = await js.pull_subscribe(
            "crash.>", "all", stream="CRASH", config=api.ConsumerConfig(ack_policy=api.AckPolicy.NONE)
        )
        seen: dict[int, bytes] = {}
        last = 0
        while last < st.last_seq:
            for m in await reader.fetch(500, timeout=5):
                seq = m.metadata.sequence.stream
                assert seq == last + 1
                last = seq
                seen[seq] = m.data
        for seq, payload in acked.items():
            assert seen[seq] == payload
        assert len(set(seen.values())) == len(seen)
        # The durable consumer resumes right after its ack floor.
        ci = await js.consumer_info("CRASH", "reader")
        assert ci.ack_floor.stream_seq == 40
        psub = await js.pull_subscribe("crash.pre", "reader", stream="CRASH")
        (m,) = await psub.fetch(1)
        assert m.metadata.sequence.stream == 41 and m.data == b"pre-40"


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
async def test_kill_9_keeps_a_message_stored_without_a_reply(tmp_path: Path, kind: str) -> None:
    """A core publish (no reply, so no PubAck to wait for) into a file stream is on disk within its turn,
    not buffered until a later publish with a reply: a kill -9 after it keeps it, as nats-server does."""
    async with jetstream_life(kind, tmp_path, kill=True) as (srv, nc):
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="QUIET", subjects=["quiet.>"])
        await nc.publish("quiet.one", b"no reply")
        await nc.flush()
        assert (await js.stream_info("QUIET")).state.messages == 1
    async with jetstream_life(kind, tmp_path, port=srv.port) as (_, nc):
        assert (await nc.jetstream(timeout=5).get_msg("QUIET", 1)).data == b"no reply"


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
async def test_kill_9_right_after_a_consumer_create_keeps_the_durable(tmp_path: Path, kind: str) -> None:
    """A durable whose create was answered survives a kill -9 that comes at once, with its config, and an
    update's answer likewise (pynatsd wrote a new durable's state 50 ms after answering: a kill -9 then
    lost a consumer the client had been told exists)."""
    async with jetstream_life(kind, tmp_path, kill=True) as (srv, nc):
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="FRESH", subjects=["fresh.>"])
        await js.add_consumer("FRESH", durable_name="D", ack_policy=api.AckPolicy.EXPLICIT, max_deliver=5)
        await js.add_consumer("FRESH", durable_name="D", ack_policy=api.AckPolicy.EXPLICIT, max_deliver=7)
    async with jetstream_life(kind, tmp_path, port=srv.port) as (_, nc):
        info = await nc.jetstream(timeout=5).consumer_info("FRESH", "D")
        assert (info.config.durable_name, info.config.max_deliver) == ("D", 7)


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
async def test_kill_9_after_ack_sync_keeps_the_acked_messages_removed(tmp_path: Path, kind: str) -> None:
    """A work-queue message whose AckSync was answered is removed for good: a kill -9 right after does not
    bring it back (pynatsd writes a turn's removals together, before the answers)."""
    async with jetstream_life(kind, tmp_path, kill=True) as (srv, nc):
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="WORK", subjects=["work.>"], retention=api.RetentionPolicy.WORK_QUEUE)
        for i in range(5):
            await js.publish(f"work.{i}", b"job %d" % i)
        sub = await js.pull_subscribe("work.>", durable="W")
        msgs = await sub.fetch(5, timeout=5)
        for msg in msgs[:3]:
            await msg.ack_sync()
    async with jetstream_life(kind, tmp_path, port=srv.port) as (_, nc):
        state = (await nc.jetstream(timeout=5).stream_info("WORK")).state
        assert (state.messages, state.first_seq) == (2, 4)
