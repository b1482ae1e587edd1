"""`allow_responses`: a user who may not publish freely may answer the requests delivered to it.

Exact bytes on pynatsd and nats-server side by side (same config, same answers), plus nats-py end to end.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.msg import Msg

from tests.conftest import need_tool
from tests.servers import ServerProcess, nats_server_binary, pynatsd_command, server_with_config
from tests.wire import WireClient

CONF = """
authorization {
  users = [
    {user: req, password: req}
    {user: svc, password: svc, permissions: {subscribe: "svc.>", allow_responses: true}}
    {user: svc2, password: svc2, permissions: {
        publish: {deny: "forbidden"}, subscribe: "svc.>", allow_responses: {max: 2}
    }}
    {user: pub, password: pub, permissions: {publish: "status.>", subscribe: "svc.>", allow_responses: true}}
  ]
}
"""


def violation(subject: str) -> bytes:
    return b"-ERR 'Permissions Violation for Publish to \"%s\"'\r\n" % subject.encode()


@pytest.fixture(params=["pynatsd", "nats-server"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    with server_with_config(request.param, tmp_path / "responses.conf", CONF) as proc:
        yield proc


def _session(port: int, user: str) -> WireClient:
    client = WireClient(port)
    reply, _ = client.exchange(f'CONNECT {{"user":"{user}","pass":"{user}","verbose":false}}\r\n'.encode())
    assert reply == b"", reply
    return client


def _request(requester: WireClient, responder: WireClient, subject: str, reply: str) -> None:
    """`requester` publishes a request; `responder` must have received it."""
    out, _ = requester.exchange(f"PUB {subject} {reply} 1\r\nq\r\n".encode())
    assert out == b"", out
    got, _ = responder.read_until(b"\r\nq\r\n")
    assert got.endswith(f" {reply} 1\r\nq\r\n".encode()), got


def test_default_allows_one_response_per_request(server: ServerProcess) -> None:
    with _session(server.port, "req") as req, _session(server.port, "svc") as svc:
        assert svc.exchange(b"SUB svc.echo 1\r\n")[0] == b""
        assert req.exchange(b"SUB _INBOX.r1 9\r\n")[0] == b""
        # Nothing may be published before a request arrives, a reply subject included.
        assert svc.exchange(b"PUB _INBOX.r1 2\r\nno\r\n")[0] == violation("_INBOX.r1")
        assert svc.exchange(b"PUB anything 2\r\nno\r\n")[0] == violation("anything")
        _request(req, svc, "svc.echo", "_INBOX.r1")
        assert svc.exchange(b"PUB _INBOX.r1 3\r\nyes\r\n")[0] == b""
        assert req.read_until(b"yes\r\n")[0] == b"MSG _INBOX.r1 9 3\r\nyes\r\n"
        # max 1: the second response is refused, and never reaches the requester
        assert svc.exchange(b"PUB _INBOX.r1 5\r\nagain\r\n")[0] == violation("_INBOX.r1")
        assert req.exchange(b"")[0] == b""
        # a request delivered again opens its reply subject again
        _request(req, svc, "svc.echo", "_INBOX.r1")
        assert svc.exchange(b"PUB _INBOX.r1 3\r\nyes\r\n")[0] == b""


def test_max_responses_and_explicit_publish_rules(server: ServerProcess) -> None:
    with _session(server.port, "req") as req, _session(server.port, "svc2") as svc:
        assert svc.exchange(b"SUB svc.echo 1\r\n")[0] == b""
        # A deny-only publish rule loses its blanket allow once allow_responses is set.
        assert svc.exchange(b"PUB free 2\r\nno\r\n")[0] == violation("free")
        _request(req, svc, "svc.echo", "_INBOX.r2")
        for _ in range(2):
            assert svc.exchange(b"PUB _INBOX.r2 2\r\nok\r\n")[0] == b""
        assert svc.exchange(b"PUB _INBOX.r2 2\r\nok\r\n")[0] == violation("_INBOX.r2")


def test_publish_allow_list_is_kept(server: ServerProcess) -> None:
    with _session(server.port, "req") as req, _session(server.port, "pub") as svc:
        assert svc.exchange(b"SUB svc.echo 1\r\nPUB status.up 2\r\nok\r\n")[0] == b""
        _request(req, svc, "svc.echo", "_INBOX.r3")
        assert svc.exchange(b"PUB _INBOX.r3 2\r\nok\r\n")[0] == b""
        # a reply subject the user may publish to anyway is not counted: it stays open
        _request(req, svc, "svc.echo", "status.reply")
        for _ in range(3):
            assert svc.exchange(b"PUB status.reply 2\r\nok\r\n")[0] == b""


def test_request_delivered_twice_uses_up_the_allowance(server: ServerProcess) -> None:
    """nats-server checks a reply subject like a publish when delivering it: a second delivery of the
    same request (two matching subscriptions) counts as the one allowed response."""
    with _session(server.port, "req") as req, _session(server.port, "svc") as svc:
        assert svc.exchange(b"SUB svc.echo 1\r\nSUB svc.* 2\r\n")[0] == b""
        _request(req, svc, "svc.echo", "_INBOX.r4")
        svc.read_until(b"\r\nq\r\n")  # the second copy
        assert svc.exchange(b"PUB _INBOX.r4 2\r\nok\r\n")[0] == violation("_INBOX.r4")


async def test_nats_py_request_reply(server: ServerProcess) -> None:
    errors: list[Exception] = []
    four_errors = asyncio.Event()

    async def on_error(exc: Exception) -> None:
        errors.append(exc)
        if len(errors) >= 4:
            four_errors.set()

    svc = await nats.connect(server.url, user="svc", password="svc", error_cb=on_error, allow_reconnect=False)
    req = await nats.connect(server.url, user="req", password="req", allow_reconnect=False)
    try:
        answered = asyncio.Event()

        async def handle(msg: Msg) -> None:
            await msg.respond(b"pong:" + msg.data)
            await msg.respond(b"second")  # refused: one response per request
            answered.set()

        await svc.subscribe("svc.ping", cb=handle)
        await svc.flush()
        for i in range(3):
            reply = await req.request("svc.ping", b"%d" % i, timeout=5)
            assert reply.data == b"pong:%d" % i
        await asyncio.wait_for(answered.wait(), 5)
        await svc.publish("elsewhere", b"x")
        await svc.flush()
        # nats-py hands -ERRs to error_cb in tasks of their own: wait for them, not just for the PONG.
        await asyncio.wait_for(four_errors.wait(), 5)
        await svc.flush()
        texts = [str(e).lower() for e in errors]
        assert sum("permissions violation for publish" in t for t in texts) == 4, texts
        assert any('"elsewhere"' in t for t in texts), texts
    finally:
        await req.close()
        await svc.close()


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_bad_allow_responses_is_a_config_error(kind: str, tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    perms = '{allow_responses: "yes"}'
    conf.write_text(f"authorization {{ users = [ {{user: s, password: s, permissions: {perms}}} ] }}\n")
    binary = nats_server_binary()
    if kind == "nats-server":
        need_tool(binary is not None, "nats-server")
    cmd = pynatsd_command() if kind == "pynatsd" else [str(binary)]
    proc = subprocess.run([*cmd, "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert "error parsing response permissions, expected a boolean or a map" in proc.stdout + proc.stderr


def test_a_run_of_identical_requests_is_tracked_per_message(server: ServerProcess) -> None:
    """Back-to-back identical PUBs take pynatsd's run fast path, except towards allow_responses
    receivers: each delivery is tracked, so the answers allowed are exactly nats-server's."""
    clients = []
    for user, sub in (("svc", b"SUB svc.> 1\r\n"), ("req", b"SUB inbox.> 9\r\n")):
        client = WireClient(server.port)  # pedantic off (the default is on), as client libraries send
        connect = f'CONNECT {{"user":"{user}","pass":"{user}","verbose":false,"pedantic":false}}\r\n'
        assert client.exchange(connect.encode() + sub + b"PING\r\n")[0] == b"PONG\r\n"
        clients.append(client)
    svc, req = clients
    req.send(b"PUB svc.a inbox.1 1\r\nq\r\n" * 3)
    got, _ = svc.read_until(b"MSG svc.a 1 inbox.1 1\r\nq\r\n" * 3)
    assert got == b"MSG svc.a 1 inbox.1 1\r\nq\r\n" * 3
    out, _ = svc.exchange(b"PUB inbox.1 1\r\na\r\n" * 4 + b"PING\r\n")
    assert out == violation("inbox.1") * 3 + b"PONG\r\n"
    assert req.exchange(b"PING\r\n")[0] == b"MSG inbox.1 9 1\r\na\r\nPONG\r\n"
    svc.close()
    req.close()
