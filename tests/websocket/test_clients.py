"""nats-py over ws:// and wss:// against an in-process pynatsd: pub/sub, compression, large payloads spanning
frames, request/reply, auth, reconnect; raw sockets for origin refusal, ping/pong and close codes."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import aiohttp
import nats
import pytest
import trustme

from pynatsd.auth.jwt import UserGrant
from pynatsd.auth.users import Authenticator, Permissions
from pynatsd.base.options import Options
from pynatsd.broker.core import Broker
from pynatsd.config.websocket import WebSocketOptions
from pynatsd.server import Server
from pynatsd.websocket.server import WebSocketListener
from tests.servers import free_port

Start = Callable[..., Any]


@asynccontextmanager
async def ws_server(ws: WebSocketOptions, **opts: Any) -> AsyncIterator[Server]:
    options = Options(host="127.0.0.1", port=-1, ping_interval=3600, **opts)
    options.websocket = ws
    server = Server(options)
    await server.start()
    try:
        yield server
    finally:
        await server.shutdown()


def ws_url(server: Server, scheme: str = "ws") -> str:
    assert server.websocket is not None
    return f"{scheme}://127.0.0.1:{server.websocket.port}"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[trustme.CA, Path, Path]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    d = tmp_path_factory.mktemp("wscerts")
    cert.private_key_pem.write_to_path(str(d / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(d / "cert.pem"))
    return ca, d / "cert.pem", d / "key.pem"


async def roundtrip(url: str, sizes: tuple[int, ...], **connect: Any) -> None:
    nc = await nats.connect(url, **connect)
    try:
        sub = await nc.subscribe("ws.>")
        payloads = [os.urandom(n // 2) + b"z" * (n - n // 2) for n in sizes]  # half incompressible
        for i, p in enumerate(payloads):
            await nc.publish(f"ws.{i}", p, headers={"k": str(i)} if i % 2 else None)
        for i, p in enumerate(payloads):
            msg = await sub.next_msg(timeout=5)
            assert (msg.subject, msg.data) == (f"ws.{i}", p)
            assert (msg.headers or {}).get("k") == (str(i) if i % 2 else None)

        async def echo(msg: Any) -> None:
            await msg.respond(b"re:" + msg.data)

        await nc.subscribe("svc", cb=echo)
        assert (await nc.request("svc", b"hi", timeout=5)).data == b"re:hi"
    finally:
        await nc.close()


SIZES = (0, 1, 100, 4096, 70_000, 1024 * 1024 - 200)


@pytest.mark.parametrize("compression", [False, True])
async def test_nats_py_over_ws(compression: bool) -> None:
    async with ws_server(
        WebSocketOptions(host="127.0.0.1", port=-1, no_tls=True, compression=compression)
    ) as s:
        await roundtrip(ws_url(s), SIZES)
        # A TCP client and a WebSocket client share one subject space.
        tcp = await nats.connect(f"nats://127.0.0.1:{s.port}")
        ws = await nats.connect(ws_url(s))
        sub = await tcp.subscribe("mixed")
        await tcp.flush()
        await ws.publish("mixed", b"from ws")
        await ws.flush()
        assert (await sub.next_msg(timeout=5)).data == b"from ws"
        await tcp.close()
        await ws.close()


@pytest.mark.parametrize("compression", [False, True])
async def test_nats_py_over_wss(certs: tuple[trustme.CA, Path, Path], compression: bool) -> None:
    ca, cert, key = certs
    ws = WebSocketOptions(
        host="127.0.0.1", port=-1, tls={"cert_file": str(cert), "key_file": str(key)}, compression=compression
    )
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    async with ws_server(ws) as s:
        await roundtrip(ws_url(s, "wss"), SIZES, tls=ctx)
        nc = await nats.connect(ws_url(s, "wss"), tls=ctx)
        (conn,) = s.clients.values()
        assert conn.is_websocket and conn.tls_version.startswith("1.")
        await nc.close()


async def test_reconnect_after_restart() -> None:
    port = free_port()
    ws = WebSocketOptions(host="127.0.0.1", port=port, no_tls=True)
    reconnected = asyncio.Event()

    async def on_reconnect() -> None:
        reconnected.set()

    async with ws_server(ws) as s:
        nc = await nats.connect(
            ws_url(s), reconnected_cb=on_reconnect, reconnect_time_wait=0.2, max_reconnect_attempts=-1
        )
        sub = await nc.subscribe("again")
    async with ws_server(ws):
        await asyncio.wait_for(reconnected.wait(), 15)
        await nc.publish("again", b"after restart")
        assert (await sub.next_msg(timeout=5)).data == b"after restart"
        await nc.close()


async def test_websocket_authorization_overrides_the_servers() -> None:
    ws = WebSocketOptions(host="127.0.0.1", port=-1, no_tls=True, token="wstok")
    async with ws_server(ws, authorization="tcptok") as s:
        with pytest.raises(Exception):  # noqa: B017 - nats-py raises its own auth errors
            await nats.connect(ws_url(s), token="tcptok", allow_reconnect=False, max_reconnect_attempts=0)
        nc = await nats.connect(ws_url(s), token="wstok")
        await nc.close()
        nc = await nats.connect(f"nats://127.0.0.1:{s.port}", token="tcptok")
        await nc.close()


async def test_no_auth_user_of_the_websocket_block() -> None:
    ws = WebSocketOptions(host="127.0.0.1", port=-1, no_tls=True, no_auth_user="guest")
    users = [{"user": "guest", "password": "g"}, {"user": "admin", "password": "a"}]
    async with ws_server(ws, users=users) as s:
        ws_nc = await nats.connect(ws_url(s))  # no credentials: the block's no_auth_user
        (conn,) = s.clients.values()
        assert conn.user == "guest"
        await ws_nc.close()
        # Over TCP the server's own rules apply: no default user.
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        await reader.readline()  # INFO
        writer.write(b'CONNECT {"verbose":false}\r\nPING\r\n')
        assert await asyncio.wait_for(reader.readline(), 5) == b"-ERR 'Authorization Violation'\r\n"
        writer.close()
        await writer.wait_closed()


async def test_auth_timeout_of_the_block() -> None:
    ws = WebSocketOptions(host="127.0.0.1", port=-1, no_tls=True, token="t", auth_timeout=0.2)
    async with ws_server(ws) as s:
        session, client = await raw_ws(ws_url(s))
        try:
            await client.receive_bytes(timeout=5)  # INFO; then no CONNECT
            assert await client.receive_bytes(timeout=5) == b"-ERR 'Authentication Timeout'\r\n"
            close = await client.receive(timeout=5)
            assert (close.data, close.extra) == (1008, "Authentication Timeout")
        finally:
            await client.close()
            await session.close()


async def test_ping_interval_of_the_block() -> None:
    """The server's interval is an hour; the block's 0.2 s brings a second PING after the first PONG."""
    ws = WebSocketOptions(host="127.0.0.1", port=-1, no_tls=True, ping_interval=0.2)
    async with ws_server(ws) as s:
        session, client = await raw_ws(ws_url(s))
        try:
            await client.receive_bytes(timeout=5)  # INFO
            await client.send_bytes(b'CONNECT {"verbose":false}\r\n')
            for _ in range(2):
                assert await client.receive_bytes(timeout=10) == b"PING\r\n"
                await client.send_bytes(b"PONG\r\n")
        finally:
            await client.close()
            await session.close()


async def test_cookie_credentials() -> None:
    ws = WebSocketOptions(
        host="127.0.0.1", port=-1, no_tls=True, username="u", password="p", user_cookie="wsu"
    )
    ws.pass_cookie = "wsp"
    async with ws_server(ws) as s:
        headers = {"Cookie": ["wsu=u; wsp=p"]}
        nc = await nats.connect(ws_url(s), ws_connection_headers=headers)
        await nc.close()


# -- raw WebSocket: what nats-py does not show ----------------------------------------------------------
async def raw_ws(url: str, **kw: Any) -> tuple[aiohttp.ClientSession, aiohttp.ClientWebSocketResponse]:
    session = aiohttp.ClientSession()
    try:
        return session, await session.ws_connect(url, **kw)
    except Exception:
        await session.close()
        raise


async def test_info_ping_pong_and_close_codes() -> None:
    async with ws_server(WebSocketOptions(host="127.0.0.1", port=-1, no_tls=True)) as s:
        session, ws = await raw_ws(ws_url(s), autoping=False)
        try:
            info = await ws.receive_bytes(timeout=5)
            assert info.startswith(b"INFO ")
            fields = json.loads(info[5:])
            assert s.websocket is not None
            assert fields["port"] == s.websocket.port and "tls_required" not in fields
            await ws.ping(b"hello")
            pong = await ws.receive(timeout=5)
            assert (pong.type, pong.data) == (aiohttp.WSMsgType.PONG, b"hello")
            await ws.send_str('CONNECT {"verbose":false}\r\nPING\r\n')  # text frames carry NATS too
            assert await ws.receive_bytes(timeout=5) == b"PONG\r\n"
            await ws.send_bytes(b"BOGUS\r\n")
            err = await ws.receive_bytes(timeout=5)
            assert err == b"-ERR 'Unknown Protocol Operation'\r\n"
            close = await ws.receive(timeout=5)
            assert close.type == aiohttp.WSMsgType.CLOSE
            assert (close.data, close.extra) == (1002, "Protocol Violation")
        finally:
            await ws.close()
            await session.close()


async def test_client_close_is_echoed() -> None:
    async with ws_server(WebSocketOptions(host="127.0.0.1", port=-1, no_tls=True)) as s:
        session, ws = await raw_ws(ws_url(s))
        try:
            await ws.receive_bytes(timeout=5)
            await ws.close(code=4000, message=b"done")
            assert ws.close_code == 4000  # the server answered with the same code
            for _ in range(50):
                if not s.clients:
                    break
                await asyncio.sleep(0.05)
            assert s.closed_clients[-1].close_reason == "Client Closed"
        finally:
            await session.close()


async def test_server_shutdown_sends_going_away() -> None:
    async with ws_server(WebSocketOptions(host="127.0.0.1", port=-1, no_tls=True)) as s:
        session, ws = await raw_ws(ws_url(s))
        await ws.receive_bytes(timeout=5)
        await s.shutdown()
        try:
            close = await ws.receive(timeout=5)
            assert (close.type, close.data, close.extra) == (aiohttp.WSMsgType.CLOSE, 1001, "Server Shutdown")
        finally:
            await ws.close()
            await session.close()


async def http_exchange(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(65536), 5)
    writer.close()
    return data


def upgrade_request(extra: str = "") -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        f"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    ).encode()


async def test_origin_refused_with_403() -> None:
    ws = WebSocketOptions(host="127.0.0.1", port=-1, no_tls=True, allowed_origins=["http://good.example"])
    async with ws_server(ws) as s:
        assert s.websocket is not None
        port = s.websocket.port
        refused = await http_exchange(port, upgrade_request("Origin: http://evil.example\r\n"))
        assert refused.startswith(b"HTTP/1.1 403 Forbidden\r\n")
        accepted = await http_exchange(port, upgrade_request("Origin: http://good.example\r\n"))
        assert accepted.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")


async def test_handshake_timeout_closes_silent_sockets() -> None:
    ws = WebSocketOptions(host="127.0.0.1", port=-1, no_tls=True, handshake_timeout=0.3)
    async with ws_server(ws) as s:
        assert s.websocket is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", s.websocket.port)
        writer.write(b"GET / HTTP/1.1\r\n")  # and nothing more
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()


async def test_unmasked_client_frame_is_a_protocol_error() -> None:
    async with ws_server(WebSocketOptions(host="127.0.0.1", port=-1, no_tls=True)) as s:
        assert s.websocket is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", s.websocket.port)
        writer.write(upgrade_request())
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101")
        info_head = await reader.readexactly(2)
        length = info_head[1] & 0x7F
        if length == 126:
            length = struct.unpack("!H", await reader.readexactly(2))[0]
        await reader.readexactly(length)
        writer.write(b"\x82\x06PING\r\n")  # no mask bit
        close = await asyncio.wait_for(reader.read(200), 5)
        assert close[0] == 0x88 and close[2:4] == struct.pack("!H", 1002) and close[4:] == b"mask bit missing"
        writer.close()


async def test_varz_websocket_fields() -> None:
    ws = WebSocketOptions(host="127.0.0.1", port=-1, no_tls=True, compression=True, same_origin=True)
    async with ws_server(ws, http_port=-1) as s:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{s.http_port}/varz") as r,
        ):
            varz = await r.json()
        assert s.websocket is not None
        nc = await nats.connect(ws_url(s))
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{s.http_port}/connz") as r,
        ):
            connz = await r.json()
        await nc.close()
        assert [c["type"] for c in connz["connections"]] == ["websocket"]
        assert varz["websocket"] == {
            "host": "127.0.0.1",
            "port": s.websocket.port,
            "no_tls": True,
            "same_origin": True,
            "compression": True,
        }


async def test_request_head_byte_by_byte_and_too_large() -> None:
    async with ws_server(WebSocketOptions(host="127.0.0.1", port=-1, no_tls=True)) as s:
        assert s.websocket is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", s.websocket.port)
        for i in range(len(request := upgrade_request())):
            writer.write(request[i : i + 1])
            await writer.drain()
        assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).startswith(b"HTTP/1.1 101 ")
        writer.close()
        huge = upgrade_request("X-Filler: " + "x" * 20_000 + "\r\n")
        assert (await http_exchange(s.websocket.port, huge)).startswith(b"HTTP/1.1 431 ")


def test_a_websocket_block_reads_the_auth_callout_grants_across_reloads() -> None:
    """A listener with credentials of its own (here a cookie) builds its own authenticator, again after a
    reload: what the auth callout granted a client stays looked up there, never an empty table that
    would leave the client unrestricted."""
    options = Options(users=[{"user": "auth", "password": "pwd"}])
    server = SimpleNamespace(options=options, auth=Authenticator(options))
    listener = WebSocketListener(cast(Broker, server), WebSocketOptions(port=-1, user_cookie="user"))
    grants = server.auth.callout_grants  # the auth callout's (pynatsd.broker.callout)
    grants["UKEY"] = UserGrant(Permissions({"publish": ["granted"]}), -1, -1, 0.0)
    for _reload in range(2):
        perms = listener.authenticator().permissions("UKEY")
        assert perms is not None and perms.can_publish(b"granted") and not perms.can_publish(b"other")
        before, server.auth = server.auth, Authenticator(options)  # as lifecycle.reload does
        server.auth.callout_grants = before.callout_grants
