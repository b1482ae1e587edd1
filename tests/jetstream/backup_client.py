"""A client's side of `$JS.API.STREAM.SNAPSHOT` / `RESTORE`, as nats.go's jsm drives them (nats-py has no
backup API): chunks to a deliver subject acked one by one, an empty message ending the transfer."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg


@dataclass
class Snapshot:
    """What a snapshot request brought: its answer, the archive, and the closing message's status."""

    response: dict[str, Any]
    data: bytes = b""
    chunks: list[Msg] = field(default_factory=list)
    end_status: str | None = None  # the closing message's status (None: no status header)
    end_description: str = ""


async def snapshot(
    nc: Client, stream: str, request: dict[str, Any] | None = None, ack: bool = True, timeout: float = 10.0
) -> Snapshot:
    """Take a snapshot of `stream`: its chunks acked as they come (`ack=False`: none acked)."""
    inbox = nc.new_inbox()
    queue: asyncio.Queue[Msg] = asyncio.Queue()

    async def on_chunk(msg: Msg) -> None:
        await queue.put(msg)

    sub = await nc.subscribe(inbox, cb=on_chunk)
    try:
        body = {"deliver_subject": inbox, **(request or {})}
        reply = await nc.request(f"$JS.API.STREAM.SNAPSHOT.{stream}", json.dumps(body).encode(), timeout)
        result = Snapshot(json.loads(reply.data))
        if "error" in result.response:
            return result
        parts: list[bytes] = []
        while True:
            msg = await asyncio.wait_for(queue.get(), timeout)
            if not msg.data:
                hdrs = msg.headers or {}
                result.end_status = hdrs.get("Status")
                result.end_description = hdrs.get("Description", "")
                break
            result.chunks.append(msg)
            parts.append(msg.data)
            if msg.reply and ack:
                await nc.publish(msg.reply, b"")
        result.data = b"".join(parts)
        return result
    finally:
        await sub.unsubscribe()


async def restore(
    nc: Client,
    stream: str,
    config: dict[str, Any],
    state: dict[str, Any] | None,
    data: bytes,
    chunk_size: int = 128 * 1024,
    timeout: float = 10.0,
) -> dict[str, Any]:
    """Restore `data` as `stream`: the restore request's error, a chunk's error, or the final answer."""
    body = {"config": config, "state": state or {}}
    reply = await nc.request(f"$JS.API.STREAM.RESTORE.{stream}", json.dumps(body).encode(), timeout)
    resp: dict[str, Any] = json.loads(reply.data)
    if "error" in resp:
        return resp
    deliver = resp["deliver_subject"]
    for at in range(0, len(data), chunk_size):
        ack = await nc.request(deliver, data[at : at + chunk_size], timeout)
        if ack.data:  # a failure ends the restore on this chunk's reply
            answer: dict[str, Any] = json.loads(ack.data)
            return answer
    end = await nc.request(deliver, b"", timeout)
    final: dict[str, Any] = json.loads(end.data)
    return final
