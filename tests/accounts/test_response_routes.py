"""Response routes do not pile up (in-process, fake sockets): a singleton route ends with its response, a
request nobody received leaves none, and unanswered routes expire after the export's threshold."""

from __future__ import annotations

import asyncio
import re

from pynatsd.base.blocks import AccountConfig
from pynatsd.base.options import Options
from pynatsd.broker.connection import Connection
from pynatsd.server import Server
from tests.unit.test_read_slices import FakeTransport


def _server() -> Server:
    options = Options()
    options.accounts = {
        "A": AccountConfig(users=[{"user": "a", "password": "a"}],
                           exports=[{"service": "one"},
                                    {"service": "many", "response_type": "Stream", "threshold": 0.2}]),
        "B": AccountConfig(users=[{"user": "b", "password": "b"}],
                           imports=[{"service": {"account": "A", "subject": "one"}},
                                    {"service": {"account": "A", "subject": "many"}}]),
    }  # fmt: skip
    return Server(options)


def _client(server: Server, user: str, ops: bytes) -> tuple[Connection, FakeTransport]:
    conn, sink = Connection(server), FakeTransport()
    conn.connection_made(sink)  # type: ignore[arg-type]
    conn.data_received(
        b'CONNECT {"verbose":false,"user":"%s","pass":"%s"}\r\n%s' % (user.encode(), user.encode(), ops)
    )
    return conn, sink


async def _turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_routes_end_or_expire() -> None:
    async def run() -> None:
        server = _server()
        server.loop = asyncio.get_running_loop()
        server.scheduler.stall.loop = server.loop
        server.configure_links()
        links = server.links
        assert links is not None
        responder, inbox = _client(server, "a", b"SUB one 1\r\nSUB many 2\r\n")
        requester, answers = _client(server, "b", b"SUB _INBOX.> 9\r\n")
        await _turns()
        requester.data_received(b"".join(b"PUB one _INBOX.%d 1\r\nq\r\n" % i for i in range(100)))
        await _turns()
        replies = re.findall(rb"_R_\.\S+", inbox.data)
        assert len(replies) == 100 and len(links.routes) == 100
        responder.data_received(b"".join(b"PUB %s 1\r\nr\r\n" % r for r in replies))
        await _turns()
        assert answers.data.count(b"MSG _INBOX.") == 100
        assert links.routes == {}  # singletons end with their response

        responder.data_received(b"UNSUB 1\r\n")
        requester.data_received(b"".join(b"PUB one _INBOX.x%d 1\r\nq\r\n" % i for i in range(50)))
        await _turns()
        assert links.routes == {}  # nobody received them: no route kept

        requester.data_received(b"".join(b"PUB many _INBOX.m%d 1\r\nq\r\n" % i for i in range(50)))
        await _turns()
        assert len(links.routes) == 50
        await asyncio.sleep(0.5)
        assert links.routes == {}  # unanswered stream routes expire after the threshold
        requester.close("test")
        responder.close("test")

    asyncio.run(run())
