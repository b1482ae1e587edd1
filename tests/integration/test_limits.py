"""Limits and timers with nats-server's exact behaviour (in-process server, raw sockets)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from pynatsd.server import Server
from tests.integration.conftest import MakeServer
from tests.wire import WireClient

T = TypeVar("T")


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking WireClient call off the loop that serves it."""
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


async def test_max_connections(make_server: MakeServer) -> None:
    server = await make_server(max_connections=1)
    first = await in_thread(WireClient, server.port)
    try:
        second = await in_thread(WireClient, server.port)  # INFO first, as nats-server
        out = await in_thread(second.read_until, b"never", 5)
        assert out == (b"-ERR 'maximum connections exceeded'\r\n", True)
        second.close()
        assert len(server.clients) == 1
    finally:
        first.close()


async def test_max_subscriptions_keeps_connection_open(make_server: MakeServer) -> None:
    server = await make_server(max_subscriptions=2)
    client = await in_thread(WireClient, server.port)
    try:
        out = await in_thread(
            client.exchange,
            b'CONNECT {"verbose":false}\r\nSUB a 1\r\nSUB b 2\r\nSUB c 3\r\nPUB a 1\r\nx\r\n',
        )
        assert out == (b"-ERR 'maximum subscriptions exceeded'\r\nMSG a 1 1\r\nx\r\n", False)
    finally:
        client.close()


async def test_stale_connection_after_unanswered_pings(make_server: MakeServer) -> None:
    server = await make_server(ping_interval=0.1, ping_max=2)
    client = await in_thread(WireClient, server.port)
    try:
        client.send(b'CONNECT {"verbose":false}\r\n')
        out = await in_thread(client.read_until, b"never", 10)
        assert out == (b"PING\r\nPING\r\n-ERR 'Stale Connection'\r\n", True)
        assert server.stats.stale_connections == 1
        assert server.closed_clients[-1].close_reason == "Stale Connection"
    finally:
        client.close()


async def test_answered_pings_keep_connection_and_measure_rtt(make_server: MakeServer) -> None:
    server = await make_server(ping_interval=0.1, ping_max=2)
    client = await in_thread(WireClient, server.port)
    try:
        client.send(b'CONNECT {"verbose":false}\r\n')
        for _ in range(4):
            line = await in_thread(client.read_line)
            assert line == b"PING\r\n"
            client.send(b"PONG\r\n")
        assert len(server.clients) == 1
        conn = next(iter(server.clients.values()))
        assert conn.rtt is not None and conn.rtt >= 0
    finally:
        client.close()


async def test_auth_required_first_op_must_be_connect(make_server: MakeServer) -> None:
    server = await make_server(authorization="s3cret")
    client = await in_thread(WireClient, server.port)
    try:
        assert client.info["auth_required"] is True
        out = await in_thread(client.exchange, b"SUB foo 1\r\n")
        assert out == (b"-ERR 'Authorization Violation'\r\n", True)
    finally:
        client.close()
    client = await in_thread(WireClient, server.port)
    try:
        out = await in_thread(client.exchange, b'CONNECT {"auth_token":"s3cret"}\r\n')
        assert out == (b"+OK\r\n", False)
    finally:
        client.close()
    assert server.stats.auth_failures == 1


async def test_auth_timeout(make_server: MakeServer) -> None:
    server: Server = await make_server(authorization="t", auth_timeout=0.2)
    client = await in_thread(WireClient, server.port)
    try:
        out = await in_thread(client.read_until, b"never", 5)
        assert out == (b"-ERR 'Authentication Timeout'\r\n", True)
    finally:
        client.close()


async def test_garbage_client_does_not_disturb_others(make_server: MakeServer) -> None:
    server = await make_server()
    good = await in_thread(WireClient, server.port)
    bad = await in_thread(WireClient, server.port)
    try:
        await in_thread(good.exchange, b'CONNECT {"verbose":false}\r\nSUB s 1\r\n')
        out = await in_thread(bad.exchange, b"PUB s 1\r\nx\r\n\x00\xff garbage\r\n")
        assert out == (b"+OK\r\n-ERR 'Unknown Protocol Operation'\r\n", True)
        line = await in_thread(good.read_line)
        assert line == b"MSG s 1 1\r\n"
        assert len(server.clients) == 1
    finally:
        good.close()
        bad.close()
