"""The steps of nats-py's examples/jetstream.py and examples/kv.py, call for call (their own files run
unchanged against `pynatsd -js` on 4222; these keep the same calls under test on a random port)."""

from __future__ import annotations

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout


async def test_jetstream_example(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="sample-stream", subjects=["foo"])
    for i in range(0, 10):
        ack = await js.publish("foo", f"hello world: {i}".encode())
        assert ack.seq == i + 1
    psub = await js.pull_subscribe("foo", "psub")
    for i in range(0, 10):
        msgs = await psub.fetch(1)
        assert [m.data for m in msgs] == [f"hello world: {i}".encode()]
    sub = await js.subscribe("foo")
    msg = await sub.next_msg()
    await msg.ack()
    sub = await js.subscribe("foo", durable="myapp")
    msg = await sub.next_msg()
    await msg.ack()
    got: list[bytes] = []

    async def qsub(msg: Msg) -> None:
        got.append(msg.data)
        await msg.ack()

    await js.subscribe("foo", "workers", cb=qsub)
    await js.subscribe("foo", "workers", cb=qsub)
    for i in range(0, 10):
        await js.publish("foo", f"hello world: {i}".encode())
    osub = await js.subscribe("foo", ordered_consumer=True)
    data = bytearray()
    while True:
        try:
            msg = await osub.next_msg()
            data.extend(msg.data)
        except NatsTimeout:
            break
    assert len(data) == 280
    assert len(got) == 20  # the deliver group saw the whole stream once


async def test_kv_example(nc: Client) -> None:
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="MY_KV")
    await kv.put("hello", b"world")
    await kv.put("goodbye", b"farewell")
    await kv.put("greetings", b"hi")
    await kv.put("greeting", b"hey")
    entry = await kv.get("hello")
    assert (entry.key, entry.value) == ("hello", b"world")
    assert await kv.keys(filters=["hello", "greet"]) == ["hello", "greetings", "greeting"]
