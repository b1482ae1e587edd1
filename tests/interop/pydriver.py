"""The nats-py driver: the same scenarios, arguments and JSON-lines output as the Go and C drivers.

Run as `python -m tests.interop.pydriver <scenario> <url> [args...]` (from the repository root).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import nats
from nats import errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from tests.interop.spec import (
    WILDCARD_PATTERNS,
    WILDCARD_SUBJECTS,
    burst_payload,
    payload,
    python_headers,
)

WAIT = 10.0  # bound for any single expected event
WATCHDOG = 25.0  # bound for the whole run
FAILOVER_WATCHDOG = 90.0  # the failover run lasts while nodes start and stop around it

Scenario = Callable[[str, list[str]], Awaitable[None]]


def emit(ev: str, **fields: Any) -> None:
    print(json.dumps({"ev": ev, **fields}), flush=True)


def header_pairs(msg: Msg) -> list[list[str]]:
    return sorted([k, v] for k, v in (msg.headers or {}).items())


def msg_event(ev: str, msg: Msg) -> None:
    emit(ev, subject=msg.subject, reply=msg.reply, data=msg.data.hex(), hdr=header_pairs(msg))


async def quiet(_: Exception) -> None:
    """nats-py prints errors by default; the scenarios report them themselves."""


async def connect(url: str, **opts: Any) -> Client:
    opts.setdefault("name", "interop-python")
    opts.setdefault("error_cb", quiet)
    return await nats.connect(url, connect_timeout=5, **opts)


async def settle(nc: Client) -> None:
    """A flush that really follows earlier publishes.

    nats-py 2.16's flush() writes its PING straight to the socket, ahead of publishes still sitting in its
    pending buffer, so the PONG can come back before the server has seen them. By the time that first PONG
    is back the flusher task has written the buffer, so a second round trip is ordered after it.
    """
    await nc.flush()
    await nc.flush()


async def wait_stdin() -> None:
    await asyncio.to_thread(sys.stdin.readline)


async def drain_pending(sub: Subscription) -> list[Msg]:
    """The messages already queued (after a flush every message sent before the PONG is queued)."""
    return [await sub.next_msg(timeout=WAIT) for _ in range(sub.pending_msgs)]


async def run_connect(url: str, args: list[str]) -> None:
    subject = args[0]
    noecho = await connect(url, name="interop-python-noecho", no_echo=True)
    echo = await connect(url, name="interop-python-echo")
    other = await connect(url)
    subs = {}
    for name, nc in (("noecho", noecho), ("echo", echo)):
        subs[name] = await nc.subscribe(subject)
        await settle(nc)
    for nc, data in ((noecho, b"from-noecho"), (echo, b"from-echo"), (other, b"sentinel")):
        await nc.publish(subject, data)
        await settle(nc)
    seen: dict[str, list[str]] = {}
    for name, sub in subs.items():
        seen[name] = []
        while not seen[name] or seen[name][-1] != "sentinel":
            seen[name].append((await sub.next_msg(timeout=WAIT)).data.decode())
    emit(
        "connect",
        headers=bool(noecho._server_info.get("headers")),  # what nats-py negotiates CONNECT headers from
        max_payload=noecho.max_payload,
        client_id=noecho.client_id,
        server_version=str(noecho.connected_server_version),
        noecho_seen=seen["noecho"],
        echo_seen=seen["echo"],
    )
    emit("ready")
    await wait_stdin()
    for nc in (noecho, echo, other):
        await nc.close()


async def run_pubsub(url: str, args: list[str]) -> None:
    subject, count = args[0], int(args[1])
    nc = await connect(url)
    sub = await nc.subscribe(subject)
    for i in range(count):
        await nc.publish(subject, payload(i))
    for _ in range(count):
        msg_event("msg", await sub.next_msg(timeout=WAIT))
    await nc.close()


async def run_wildcards(url: str, args: list[str]) -> None:
    prefix = args[0]
    nc = await connect(url)
    subs = [await nc.subscribe(f"{prefix}.{p}") for p in WILDCARD_PATTERNS]
    for s in WILDCARD_SUBJECTS:
        await nc.publish(f"{prefix}.{s}", s.encode())
    await nc.publish(prefix, b"bare")
    await settle(nc)
    for pattern, sub in zip(WILDCARD_PATTERNS, subs, strict=True):
        emit("wildcard", pattern=pattern, subjects=[m.subject for m in await drain_pending(sub)])
    await nc.close()


async def run_queue(url: str, args: list[str]) -> None:
    subject, count = args[0], int(args[1])
    nc = await connect(url)
    members = [await nc.subscribe(subject, queue="workers") for _ in range(3)]
    plain = await nc.subscribe(subject)
    for i in range(count):
        await nc.publish(subject, str(i).encode())
    await settle(nc)
    for name, sub in [*((f"q{i}", s) for i, s in enumerate(members)), ("plain", plain)]:
        emit("queue", member=name, seqs=[m.data.decode() for m in await drain_pending(sub)])
    await nc.close()


async def run_autounsub(url: str, args: list[str]) -> None:
    subject, limit, count = args[0], int(args[1]), int(args[2])
    nc, pub = await connect(url), await connect(url)
    sub = await nc.subscribe(subject)
    await sub.unsubscribe(limit=limit)
    await settle(nc)
    for i in range(count):
        await pub.publish(subject, str(i).encode())
    await settle(pub)
    await settle(nc)
    received = [(await sub.next_msg(timeout=WAIT)).data.decode() for _ in range(min(limit, count))]
    emit(
        "autounsub",
        received=received,
        in_msgs=nc.stats["in_msgs"],
        valid=sub._id in nc._subs,  # nats-py drops the subscription once the limit is reached
        extra_err="",  # nats-py has no per-subscription "max messages" error to read
    )
    await nc.close()
    await pub.close()


async def run_flush(url: str, args: list[str]) -> None:
    nc = await connect(url)
    for _ in range(100):
        await nc.publish("interop.flush", b"x")
    await nc.flush()
    await nc.flush(timeout=5)
    rtt = await nc.rtt()
    emit("flush", rtt_ns=int(rtt * 1e9), buffered=nc.pending_data_size, out_msgs=nc.stats["out_msgs"])
    await nc.close()


async def run_respond(url: str, args: list[str]) -> None:
    subject, count = args[0], int(args[1])
    nc = await connect(url)
    sub = await nc.subscribe(subject)
    await settle(nc)
    emit("ready")
    for _ in range(count):
        msg = await sub.next_msg(timeout=WAIT)
        msg_event("request", msg)
        headers = {**(msg.headers or {}), "X-Responder": "python", "X-Reply-To": msg.reply}
        await nc.publish(msg.reply, b"re:" + msg.data, headers=headers)
    await settle(nc)
    await nc.close()


async def run_request(url: str, args: list[str]) -> None:
    subject, count, style = args[0], int(args[1]), args[2]
    nc = await connect(url)
    for i in range(count):
        reply = await nc.request(
            subject, payload(i), timeout=WAIT, old_style=style == "old", headers=python_headers(i)
        )
        msg_event("reply", reply)
    await nc.close()


async def run_noresp(url: str, args: list[str]) -> None:
    for style in ("new", "old"):
        nc = await connect(url)
        try:
            await nc.request(args[0], b"anyone?", timeout=WAIT, old_style=style == "old")
            result = "ok"
        except errors.NoRespondersError:
            result = "no_responders"
        except errors.Error as exc:
            result = repr(exc)
        emit("noresp", style=style, result=result)
        await nc.close()


async def run_drain(url: str, args: list[str]) -> None:
    subject, count = args[0], int(args[1])
    closed = asyncio.Event()
    processed = 0

    async def on_closed() -> None:
        closed.set()

    async def handler(_: Msg) -> None:
        nonlocal processed
        await asyncio.sleep(0.001)
        processed += 1

    nc = await connect(url, closed_cb=on_closed)
    await nc.subscribe(subject, cb=handler)
    await settle(nc)
    pub = await connect(url)
    for i in range(count):
        await pub.publish(subject, str(i).encode())
    await settle(pub)
    await settle(nc)
    at_drain = processed
    await nc.drain()
    await asyncio.wait_for(closed.wait(), WAIT)
    try:
        await nc.publish(subject, b"late")
        after = "ok"
    except errors.Error as exc:
        after = f"{type(exc).__name__}: connection closed"
    emit("drain", processed=processed, processed_at_drain=at_drain, closed=nc.is_closed, publish_after=after)
    await pub.close()


async def run_reconnect(url: str, args: list[str]) -> None:
    subject, count = args[0], int(args[1])
    disconnected, reconnected = asyncio.Event(), asyncio.Event()

    async def on_disconnect() -> None:
        disconnected.set()

    async def on_reconnect() -> None:
        reconnected.set()

    nc = await connect(
        url,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.1,
        disconnected_cb=on_disconnect,
        reconnected_cb=on_reconnect,
    )
    sub = await nc.subscribe(subject)
    await settle(nc)
    emit("ready")
    await asyncio.wait_for(disconnected.wait(), WAIT)
    emit("disconnected")
    for i in range(count):
        await nc.publish(subject, str(i).encode())
    emit("buffered", bytes=nc.pending_data_size)
    await asyncio.wait_for(reconnected.wait(), WAIT)
    emit("reconnected", reconnects=nc.stats["reconnects"])
    seqs = [(await sub.next_msg(timeout=WAIT)).data.decode() for _ in range(count)]
    emit("delivered", seqs=seqs)
    await nc.close()


async def run_ldm(url: str, args: list[str]) -> None:
    """Waits (after "ready") for the server's lame duck mode notice, an async INFO with ldm. Losing the
    connection first is a failure: in lame duck mode the server keeps clients for a grace period."""
    notice, lost = asyncio.Event(), asyncio.Event()

    async def on_lame_duck() -> None:
        notice.set()

    async def on_disconnect() -> None:
        lost.set()

    nc = await connect(url, lame_duck_mode_cb=on_lame_duck, disconnected_cb=on_disconnect)
    emit("ready")
    waits = [asyncio.create_task(e.wait()) for e in (notice, lost)]
    await asyncio.wait(waits, timeout=WAIT, return_when=asyncio.FIRST_COMPLETED)
    for task in waits:
        task.cancel()
    if not notice.is_set():
        raise RuntimeError("disconnected before any lame duck mode notice" if lost.is_set() else "no notice")
    emit("lame_duck")
    await nc.close()


async def run_failover(url: str, args: list[str]) -> None:
    """Stays connected to a cluster that grows and shrinks around it: reports each reconnect
    ("reconnected" with the URL now used) and, for each stdin line "servers", the servers it learnt of
    from the cluster (INFO connect_urls). Stdin "quit" or its end finishes the run."""
    nc: Client

    async def on_reconnect() -> None:
        assert nc.connected_url is not None
        emit("reconnected", url=nc.connected_url.geturl())

    nc = await connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.05, reconnected_cb=on_reconnect)
    emit("ready")
    while (command := (await asyncio.to_thread(sys.stdin.readline)).strip()) != "quit" and command:
        if command == "servers":
            emit("servers", urls=[u.geturl() for u in nc.discovered_servers])
    await nc.close()


async def run_slow(url: str, args: list[str]) -> None:
    subject, count = args[0], 50
    release = asyncio.Event()
    slow_errors = 0

    async def on_error(exc: Exception) -> None:
        nonlocal slow_errors
        if isinstance(exc, errors.SlowConsumerError):
            slow_errors += 1

    async def blocked(_: Msg) -> None:
        await release.wait()

    nc = await connect(url, error_cb=on_error)
    await nc.subscribe(subject, cb=blocked, pending_msgs_limit=5)
    await settle(nc)
    pub = await connect(url)
    for i in range(count):
        await pub.publish(subject, str(i).encode())
    await settle(pub)
    await settle(nc)
    release.set()
    # nats-py reports one SlowConsumerError per dropped message
    emit("slow", reported=slow_errors > 0, dropped=slow_errors, published=count)
    await pub.close()
    await nc.close()


async def round_trip(nc: Client, subject: str) -> str:
    sub = await nc.subscribe(subject)
    await nc.publish(subject, b"secret")
    msg = await sub.next_msg(timeout=WAIT)
    await sub.unsubscribe()
    return "ok" if msg.data == b"secret" else f"round trip got {msg.data!r}"


async def attempt(url: str, check: bool, **opts: Any) -> str:
    """Connects (no retries) and optionally round-trips; returns "ok" or the error text."""
    try:
        nc = await connect(url, allow_reconnect=False, max_reconnect_attempts=0, **opts)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        return await round_trip(nc, "interop.secure") if check else "ok"
    finally:
        await nc.close()


async def run_auth(url: str, args: list[str]) -> None:
    mode, good, bad = args

    def cred(value: str) -> dict[str, str]:
        if mode == "user":
            user, _, password = value.partition(":")
            return {"user": user, "password": password}
        if mode == "creds":  # a creds file: user JWT and nkey seed
            return {"user_credentials": value}
        return {"token": value}

    emit("auth", case="good", result=await attempt(url, True, **cred(good)))
    emit("auth", case="bad", result=await attempt(url, False, **cred(bad)))
    emit("auth", case="none", result=await attempt(url, False))


async def run_tls(url: str, args: list[str]) -> None:
    trusted = ssl.create_default_context(cafile=args[0])
    emit("tls", case="trusted", result=await attempt(url, True, tls=trusted))
    emit("tls", case="untrusted", result=await attempt(url, False, tls=ssl.create_default_context()))


async def run_mtls(url: str, args: list[str]) -> None:
    ca, cert, key = args
    with_cert = ssl.create_default_context(cafile=ca)
    with_cert.load_cert_chain(cert, key)
    emit("mtls", case="with_cert", result=await attempt(url, True, tls=with_cert))
    without = ssl.create_default_context(cafile=ca)
    emit("mtls", case="without_cert", result=await attempt(url, True, tls=without))


async def run_pub(url: str, args: list[str]) -> None:
    subject, count = args[0], int(args[1])
    nc = await connect(url)
    for i in range(count):
        await nc.publish(subject, payload(i), headers=python_headers(i))
    await settle(nc)
    await nc.close()


async def run_sub(url: str, args: list[str]) -> None:
    subject, count = args[0], int(args[1])
    nc = await connect(url)
    sub = await nc.subscribe(subject)
    await settle(nc)
    emit("ready")
    for _ in range(count):
        msg_event("msg", await sub.next_msg(timeout=WAIT))
    await nc.close()


async def run_burst(url: str, args: list[str]) -> None:
    subject, count = args[0], int(args[1])
    nc = await connect(url)
    for i in range(count):
        await nc.publish(subject, burst_payload("p", i))
    await settle(nc)
    await nc.close()


SCENARIOS: dict[str, Scenario] = {
    "connect": run_connect,
    "pubsub": run_pubsub,
    "wildcards": run_wildcards,
    "queue": run_queue,
    "autounsub": run_autounsub,
    "flush": run_flush,
    "respond": run_respond,
    "request": run_request,
    "noresp": run_noresp,
    "drain": run_drain,
    "reconnect": run_reconnect,
    "slow": run_slow,
    "ldm": run_ldm,
    "failover": run_failover,
    "auth": run_auth,
    "tls": run_tls,
    "mtls": run_mtls,
    "pub": run_pub,
    "sub": run_sub,
    "burst": run_burst,
}


async def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in SCENARIOS:
        print(f"usage: pydriver <{'|'.join(SCENARIOS)}> <url> [args...]", file=sys.stderr)
        return 2
    try:
        watchdog = FAILOVER_WATCHDOG if argv[0] == "failover" else WATCHDOG
        await asyncio.wait_for(SCENARIOS[argv[0]](argv[1], argv[2:]), watchdog)
    except Exception as exc:
        emit("error", msg=f"{type(exc).__name__}: {exc}")
        return 1
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
