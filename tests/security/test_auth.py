"""Users, bcrypt, permissions and accounts from a config file: pynatsd and nats-server side by side."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from tests.servers import ServerProcess, server_with_config
from tests.wire import WireClient

CONF = """
authorization {
  users = [
    {user: alice, password: "alice-pw"}
    {user: hashed, password: "$2b$04$oAOzBhWnQ5Ib3pFjV8/a.eSiLaDZU6bh1hz9PnhhtrPFxRS2fXFfu"}
    {user: limited, password: "lim", permissions: {
        publish: {allow: ["ok.>"], deny: ["ok.secret"]}
        subscribe: ["in.*", "work worker"]
    }}
    {user: wild, password: "wild", permissions: {
        subscribe: {allow: ["in.*", "all.>", "no.>"], deny: ["no.*"]}
    }}
  ]
}
"""

ACCOUNTS = """
accounts {
  A: { users: [ {user: a, password: a} ] }
  B: { users: [ {user: b, password: b} ] }
}
"""


@pytest.fixture(params=["pynatsd", "nats-server"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    with server_with_config(request.param, tmp_path / "auth.conf", CONF) as proc:
        yield proc


@pytest.mark.parametrize(("user", "password"), [("alice", "alice-pw"), ("hashed", "hashed-pw")])
async def test_good_credentials_connect(server: ServerProcess, user: str, password: str) -> None:
    nc = await nats.connect(server.url, user=user, password=password, allow_reconnect=False)
    try:
        sub = await nc.subscribe("x")
        await nc.publish("x", b"hi")
        msg = await sub.next_msg(timeout=5)
        assert msg.data == b"hi"
    finally:
        await nc.close()


@pytest.mark.parametrize(("user", "password"), [("alice", "nope"), ("hashed", "alice-pw"), ("ghost", "x")])
def test_bad_credentials_are_rejected(server: ServerProcess, user: str, password: str) -> None:
    with WireClient(server.port) as client:
        assert client.info["auth_required"] is True
        connect = f'CONNECT {{"user":"{user}","pass":"{password}","verbose":false}}\r\nPING\r\n'
        reply, closed = client.exchange(connect.encode())
        assert reply == b"-ERR 'Authorization Violation'\r\n"
        assert closed


def _session(port: int, user: str, password: str) -> WireClient:
    client = WireClient(port)
    reply, _ = client.exchange(
        f'CONNECT {{"user":"{user}","pass":"{password}","verbose":false}}\r\nPING\r\n'.encode()
    )
    assert reply.startswith(b"PONG"), reply
    return client


def test_permissions_allow_and_deny(server: ServerProcess) -> None:
    with _session(server.port, "limited", "lim") as c:
        reply, _ = c.exchange(b"SUB in.x 1\r\nPUB ok.a 2\r\nhi\r\nPING\r\n")
        assert reply == b"PONG\r\n"
        reply, _ = c.exchange(b"PUB ok.secret 2\r\nhi\r\nPING\r\n")
        assert reply == b"-ERR 'Permissions Violation for Publish to \"ok.secret\"'\r\nPONG\r\n"
        reply, _ = c.exchange(b"PUB other 2\r\nhi\r\nPING\r\n")
        assert reply == b"-ERR 'Permissions Violation for Publish to \"other\"'\r\nPONG\r\n"
        reply, _ = c.exchange(b"SUB in.a.b 3\r\nPING\r\n")
        assert reply == b"-ERR 'Permissions Violation for Subscription to \"in.a.b\"'\r\nPONG\r\n"
        reply, _ = c.exchange(b"SUB work worker 4\r\nPING\r\n")
        assert reply == b"PONG\r\n"
        reply, _ = c.exchange(b"SUB work other 5\r\nPING\r\n")
        assert (
            reply
            == b'-ERR \'Permissions Violation for Subscription to "work" using queue "other"\'\r\nPONG\r\n'
        )


def test_a_subscriptions_wildcards_are_literal_tokens_to_permissions(server: ServerProcess) -> None:
    """A SUB's own `*` and `>` are looked up as literal tokens (subjects.matches_wildcards_literally):
    allow `in.*` permits `in.>`, which is no subset of it, and deny `no.*` refuses `no.>`."""
    with _session(server.port, "wild", "wild") as c:
        reply, _ = c.exchange(b"SUB in.> 1\r\nSUB all.* 2\r\nSUB no.a.b 3\r\nPING\r\n")
        assert reply == b"PONG\r\n"
        for sid, subject in enumerate((b"in.*.x", b"no.>", b"no.a", b"all"), start=4):
            reply, _ = c.exchange(b"SUB %s %d\r\nPING\r\n" % (subject, sid))
            assert reply == b"-ERR 'Permissions Violation for Subscription to \"%s\"'\r\nPONG\r\n" % subject


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_accounts_are_isolated(kind: str, tmp_path: Path) -> None:
    with (
        server_with_config(kind, tmp_path / "acc.conf", ACCOUNTS) as proc,
        _session(proc.port, "a", "a") as a,
        _session(proc.port, "b", "b") as b,
    ):
        a.exchange(b"SUB t 1\r\nPING\r\n")
        b.exchange(b"SUB t 1\r\nPING\r\n")
        b.exchange(b"PUB t 5\r\nfromb\r\nPING\r\n")
        reply, _ = a.exchange(b"PING\r\n")
        assert reply == b"PONG\r\n"  # nothing from account B
        reply, _ = a.exchange(b"PUB t 5\r\nfroma\r\nPING\r\n")
        assert reply == b"MSG t 1 5\r\nfroma\r\nPONG\r\n"
