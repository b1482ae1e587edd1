"""No confused deputy in JetStream: what the server publishes itself is never executed as a request.

A user allowed only to pull from one consumer, or only to create consumers on one stream, picks the
subject JetStream delivers to (a pull request's reply, a push consumer's deliver subject). Pointed inside
`$JS.API.>`, `$JS.ACK.>` or an account's `$SYS.REQ` services, the delivery must not run there with the
account's rights: the victim stream survives, the other consumer's message stays unacknowledged. The
deliveries of stored messages into the API are compared with nats-server (which shows them to its API under
the stored message's subject); statuses, heartbeats and flow-control requests are pynatsd only: nats-server
2.15.1 executes those (a `no_wait` pull's 404 deletes the stream named by its reply), a bug not kept.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import AsyncIterator, Iterator
from itertools import count
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from tests.servers import ServerProcess, require, server_with_config

CONF = """
jetstream {{ store_dir: "{store}" }}
accounts {{
  A: {{
    jetstream: enabled
    users: [
      {{user: admin, password: admin}}
      {{user: puller, password: puller, permissions: {{
          publish: "$JS.API.CONSUMER.MSG.NEXT.*.C", subscribe: "_INBOX.>"}}}}
      {{user: creator, password: creator, permissions: {{
          publish: "$JS.API.CONSUMER.CREATE.>", subscribe: "_INBOX.>"}}}}
    ]
  }}
}}
"""

_names = count(1)


@pytest.fixture(scope="module", params=["pynatsd", "nats-server"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    require(request.param)
    with tempfile.TemporaryDirectory() as tmp:
        conf = CONF.format(store=Path(tmp) / "store")
        with server_with_config(request.param, Path(tmp) / "deputy.conf", conf) as proc:
            yield proc


@pytest.fixture
async def admin(server: ServerProcess) -> AsyncIterator[Client]:
    nc = await nats.connect(server.url, user="admin", password="admin", allow_reconnect=False)
    yield nc
    await nc.close()


async def api(nc: Client, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    msg = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=5)
    out: dict[str, Any] = json.loads(msg.data)
    return out


async def stream_with_message(nc: Client, name: str, payload: bytes) -> None:
    created = await api(nc, f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [name.lower()]})
    assert "error" not in created, created
    ack = await nc.request(name.lower(), payload, timeout=5)
    assert b'"seq":1' in ack.data, ack.data


async def victim_messages(nc: Client, name: str) -> int | None:
    """The victim stream's message count; None when it is gone."""
    info = await api(nc, f"$JS.API.STREAM.INFO.{name}")
    return None if "error" in info else int(info["state"]["messages"])


async def spy(nc: Client, subject: str) -> asyncio.Queue[Any]:
    """Receives what is delivered to `subject` (and gives a push consumer its interest)."""
    got: asyncio.Queue[Any] = asyncio.Queue()
    await nc.subscribe(subject, cb=got.put)
    await nc.flush()
    return got


def names() -> tuple[str, str]:
    n = next(_names)
    return f"S{n}", f"V{n}"


async def source_and_victim(nc: Client, payload: bytes) -> tuple[str, str]:
    """A source stream holding `payload` and a victim stream holding one message, new names each time."""
    source, victim = names()
    await stream_with_message(nc, source, payload)
    await stream_with_message(nc, victim, b"keep")
    return source, victim


ACTIONS = ["DELETE", "PURGE"]
PAYLOADS = [b"", b"{}"]


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("payload", PAYLOADS, ids=["empty", "json"])
async def test_pull_answer_to_an_api_reply_is_not_a_request(
    server: ServerProcess, admin: Client, action: str, payload: bytes
) -> None:
    source, victim = await source_and_victim(admin, payload)
    created = await api(
        admin, f"$JS.API.CONSUMER.CREATE.{source}.C", {"stream_name": source, "config": {"name": "C"}}
    )
    assert "error" not in created, created
    target = f"$JS.API.STREAM.{action}.{victim}"
    seen = await spy(admin, target)
    puller = await nats.connect(server.url, user="puller", password="puller", allow_reconnect=False)
    try:
        await puller.publish(f"$JS.API.CONSUMER.MSG.NEXT.{source}.C", b'{"batch":1}', reply=target)
        await puller.flush()
        delivered = await asyncio.wait_for(seen.get(), 5)
    finally:
        await puller.close()
    assert delivered.data == payload and delivered.reply.startswith(f"$JS.ACK.{source}.C.")
    assert await victim_messages(admin, victim) == 1


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("payload", PAYLOADS, ids=["empty", "json"])
async def test_push_delivery_to_an_api_subject_is_not_a_request(
    server: ServerProcess, admin: Client, action: str, payload: bytes
) -> None:
    source, victim = await source_and_victim(admin, payload)
    target = f"$JS.API.STREAM.{action}.{victim}"
    seen = await spy(admin, target)
    creator = await nats.connect(server.url, user="creator", password="creator", allow_reconnect=False)
    try:
        created = await api(
            creator,
            f"$JS.API.CONSUMER.CREATE.{source}.P",
            {"stream_name": source, "config": {"name": "P", "deliver_subject": target}},
        )
    finally:
        await creator.close()
    assert "error" not in created, created
    delivered = await asyncio.wait_for(seen.get(), 5)
    assert delivered.data == payload
    assert await victim_messages(admin, victim) == 1


async def test_api_answer_to_an_api_reply_is_not_a_request(server: ServerProcess, admin: Client) -> None:
    """The API's own answer, sent to a reply subject inside `$JS.API`, runs nothing there."""
    source, victim = await source_and_victim(admin, b"x")
    target = f"$JS.API.STREAM.DELETE.{victim}"
    seen = await spy(admin, target)
    await admin.publish(f"$JS.API.STREAM.INFO.{source}", b"", reply=target)
    answer = await asyncio.wait_for(seen.get(), 5)
    assert json.loads(answer.data)["config"]["name"] == source
    assert await victim_messages(admin, victim) == 1


async def test_push_delivery_to_another_consumers_ack_subject_is_not_its_ack(
    server: ServerProcess, admin: Client
) -> None:
    """An empty message delivered to the `$JS.ACK...` reply of another consumer's pending message does not
    acknowledge it."""
    source, _ = names()
    await stream_with_message(admin, source, b"")
    await api(
        admin,
        f"$JS.API.CONSUMER.CREATE.{source}.C",
        {"stream_name": source, "config": {"name": "C", "ack_policy": "explicit"}},
    )
    inbox = admin.new_inbox()
    pulled = await spy(admin, inbox)
    await admin.publish(f"$JS.API.CONSUMER.MSG.NEXT.{source}.C", b'{"batch":1}', reply=inbox)
    held = await asyncio.wait_for(pulled.get(), 5)
    seen = await spy(admin, held.reply)
    created = await api(
        admin,
        f"$JS.API.CONSUMER.CREATE.{source}.P",
        {"stream_name": source, "config": {"name": "P", "deliver_subject": held.reply}},
    )
    assert "error" not in created, created
    await asyncio.wait_for(seen.get(), 5)
    info = await api(admin, f"$JS.API.CONSUMER.INFO.{source}.C")
    assert info["num_ack_pending"] == 1, info


# -- pynatsd only: nats-server 2.15.1 executes these (see the module docstring) ---------------------------
@pytest.mark.parametrize("server", ["pynatsd"], indirect=True)
@pytest.mark.parametrize("action", ACTIONS)
async def test_pull_status_to_an_api_reply_is_not_a_request(
    server: ServerProcess, admin: Client, action: str
) -> None:
    source, victim = names()
    await stream_with_message(admin, victim, b"keep")
    await api(admin, f"$JS.API.STREAM.CREATE.{source}", {"name": source, "subjects": [source.lower()]})
    await api(admin, f"$JS.API.CONSUMER.CREATE.{source}.C", {"stream_name": source, "config": {"name": "C"}})
    target = f"$JS.API.STREAM.{action}.{victim}"
    seen = await spy(admin, target)
    await admin.publish(f"$JS.API.CONSUMER.MSG.NEXT.{source}.C", b'{"batch":1,"no_wait":true}', reply=target)
    status = await asyncio.wait_for(seen.get(), 5)
    assert status.headers and status.headers.get("Status") == "404", status.headers
    assert await victim_messages(admin, victim) == 1


@pytest.mark.parametrize("server", ["pynatsd"], indirect=True)
async def test_heartbeat_and_flow_control_to_an_api_subject_are_not_requests(
    server: ServerProcess, admin: Client
) -> None:
    source, victim = await source_and_victim(admin, b"x")
    # Past half of the flow-control window (2 MiB, as nats-server's) a flow-control request goes out.
    for _ in range(24):
        await admin.publish(source.lower(), b"x" * 65536)
    await admin.flush()
    target = f"$JS.API.STREAM.PURGE.{victim}"
    seen = await spy(admin, target)
    config = {"name": "P", "deliver_subject": target, "idle_heartbeat": 100_000_000, "flow_control": True}
    created = await api(
        admin, f"$JS.API.CONSUMER.CREATE.{source}.P", {"stream_name": source, "config": config}
    )
    assert "error" not in created, created
    kinds: set[str] = set()
    for _ in range(200):  # heartbeats come every 100 ms: bounded, so a missing kind fails, never hangs
        if kinds == {"heartbeat", "flow control"}:
            break
        msg = await asyncio.wait_for(seen.get(), 5)
        if msg.headers and msg.headers.get("Status") == "100":
            kinds.add("flow control" if msg.reply else "heartbeat")
    assert kinds == {"heartbeat", "flow control"}
    assert await victim_messages(admin, victim) == 1
