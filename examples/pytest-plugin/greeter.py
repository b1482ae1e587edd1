"""A tiny NATS service: answers a request on `greet.<name>` with a greeting, and counts each name's
greetings in the JetStream key-value bucket `greetings`."""

from __future__ import annotations

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

BUCKET = "greetings"


class Greeter:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.kv: KeyValue | None = None
        self.subscription: Subscription | None = None

    async def start(self) -> None:
        self.kv = await self.client.jetstream().create_key_value(bucket=BUCKET)
        self.subscription = await self.client.subscribe("greet.*", queue="greeter", cb=self._greet)

    async def stop(self) -> None:
        if self.subscription is not None:
            await self.subscription.unsubscribe()

    async def _greet(self, msg: Msg) -> None:
        name = msg.subject.split(".", 1)[1]
        count = await self._count(name)
        await msg.respond(f"Hello, {name}! (greeting #{count})".encode())

    async def _count(self, name: str) -> int:
        assert self.kv is not None
        try:
            count = int((await self.kv.get(name)).value or b"0") + 1
        except KeyNotFoundError:
            count = 1
        await self.kv.put(name, str(count).encode())
        return count
