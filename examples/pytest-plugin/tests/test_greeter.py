from __future__ import annotations

import nats
import pytest
from greeter import BUCKET, Greeter
from nats.aio.client import Client

pytestmark = pytest.mark.nats_server(jetstream=True)


async def test_greets_by_name(client: Client, greeter: Greeter) -> None:
    reply = await client.request("greet.ada", b"", timeout=5)
    assert reply.data == b"Hello, ada! (greeting #1)"


async def test_counts_greetings_in_the_bucket(client: Client, greeter: Greeter) -> None:
    for _ in range(3):
        await client.request("greet.grace", b"", timeout=5)
    kv = await client.jetstream().key_value(BUCKET)
    assert (await kv.get("grace")).value == b"3"


async def test_each_test_starts_from_an_empty_bucket(client: Client, greeter: Greeter) -> None:
    reply = await client.request("greet.grace", b"", timeout=5)
    assert reply.data.endswith(b"(greeting #1)")


@pytest.mark.nats_server(jetstream=True, config="authorization { token: s3cret }")
async def test_with_a_configuration(nats_url: str) -> None:
    client = await nats.connect(nats_url, token="s3cret")
    service = Greeter(client)
    await service.start()
    reply = await client.request("greet.linus", b"", timeout=5)
    assert reply.data == b"Hello, linus! (greeting #1)"
    await service.stop()
    await client.close()
