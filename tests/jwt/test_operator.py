"""Operator mode (operator JWT, MEMORY resolver with preloaded accounts, user JWTs): every admission and
rejection, limits, permissions, expiry and account isolation, against pynatsd and nats-server alike."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NATS

from tests.jwt.issuer import Key, account_jwt, b64, creds
from tests.jwt.world import KINDS, VIOLATION, WINDOW_LATER, WINDOW_NOW, World, attempt, connect_as, running
from tests.servers import ServerProcess
from tests.wire import WireClient

W = World()
NOW = int(time.time())
ACCEPTED: dict[str, tuple[str, Key]] = {
    "account key": W.user("plain"),
    "account signing key": W.user("signed", issuer=W.a_signer, issuer_account=W.a.public),
    "account issued by an operator signing key": W.user("in b", issuer=W.b),
    "src allows loopback": W.user("src ok", src=["127.0.0.0/8"]),
    "inside its time window": W.user("times ok", times=[WINDOW_NOW], times_location="UTC"),
    "standard connections": W.user("types ok", allowed_connection_types=["STANDARD"]),
    "scoped signing key": W.user(
        "scoped", issuer=W.a_scoped, issuer_account=W.a.public, subs=0, data=0, payload=0
    ),
    "reissued after its revocation": W.user("reissued", key=W.revoked, claims={"iat": W.revoked_at + 10}),
}
REJECTED: dict[str, tuple[str, Key]] = {
    "unknown account": W.user("unknown", issuer=Key("A")),
    "expired account": W.user("in expired", issuer=W.expired),
    "account of an untrusted operator": W.user("untrusted", issuer=W.untrusted),
    "signing key without issuer_account": W.user("no issuer account", issuer=W.a_signer),
    "issuer_account not its signer": W.user("bad signer", issuer=Key("A"), issuer_account=W.a.public),
    "expired": W.user("expired", claims={"exp": NOW - 10}),
    "not yet valid": W.user("early", claims={"nbf": NOW + 3600}),
    "revoked": W.user("revoked", key=W.revoked),
    "src elsewhere": W.user("src no", src=["10.0.0.0/8"]),
    "outside its time window": W.user("times no", times=[WINDOW_LATER], times_location="UTC"),
    "websocket only": W.user("types no", allowed_connection_types=["WEBSOCKET"]),
    "scoped user with its own limits": W.user("scoped limits", issuer=W.a_scoped, issuer_account=W.a.public),
    "scoped user with its own permissions": W.user(
        "scoped perms",
        issuer=W.a_scoped,
        issuer_account=W.a.public,
        subs=0,
        data=0,
        payload=0,
        pub={"deny": ["x"]},
    ),
    "proxy required": W.user("proxied", proxy_required=True),
    "issued by the operator": W.user("by operator", issuer=W.operator),
}


@pytest.fixture(scope="module", params=KINDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp(request.param)
    with running(request.param, W.config(directory)) as srv:
        yield srv


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_accepted(server: ServerProcess, case: str) -> None:
    token, key = ACCEPTED[case]
    assert attempt(server.port, token, key) == (b"", False)


@pytest.mark.parametrize("case", list(REJECTED))
def test_rejected(server: ServerProcess, case: str) -> None:
    token, key = REJECTED[case]
    assert attempt(server.port, token, key) == (VIOLATION, True)


def _tampered() -> str:
    head, body, sig = W.users["plain"][0].split(".")
    return f"{head}.{b64(body.encode()[:-2] + b'xx')}.{sig}"


@pytest.mark.parametrize(
    ("case", "token", "signer"),
    [
        ("nonce signed by another key", W.users["plain"][0], Key("U")),
        ("no nonce signature", W.users["plain"][0], None),
        ("tampered claims", "tampered", W.users["plain"][1]),
        ("not a JWT", "not-a-jwt", W.users["plain"][1]),
        (
            "bearer refused by its account",
            W.user("no bearer", issuer=W.no_bearer, bearer_token=True)[0],
            None,
        ),
    ],
)
def test_rejected_connect(server: ServerProcess, case: str, token: str, signer: Key | None) -> None:
    token = _tampered() if token == "tampered" else token
    assert attempt(server.port, token, signer) == (VIOLATION, True)


def test_bearer_token_needs_no_signature(server: ServerProcess) -> None:
    token, _ = W.user("bearer", bearer_token=True)
    assert attempt(server.port, token, None) == (b"", False)


def test_permissions(server: ServerProcess) -> None:
    token, key = W.user("perms", pub={"allow": ["ok.>"]}, sub={"deny": ["secret"]})
    reply, closed = attempt(server.port, token, key, b"PUB ok.x 1\r\na\r\nPUB no 1\r\na\r\nSUB secret 1\r\n")
    assert not closed
    assert reply == (
        b"-ERR 'Permissions Violation for Publish to \"no\"'\r\n"
        b"-ERR 'Permissions Violation for Subscription to \"secret\"'\r\n"
    )


def test_subscription_limit(server: ServerProcess) -> None:
    token, key = W.user("one sub", subs=1)
    reply, closed = attempt(server.port, token, key, b"SUB a 1\r\nSUB b 2\r\n")
    assert (reply, closed) == (b"-ERR 'maximum subscriptions exceeded'\r\n", False)


def test_payload_limit(server: ServerProcess) -> None:
    token, key = W.user("small payload", payload=4)
    reply, closed = attempt(server.port, token, key, b"PUB a 4\r\nfour\r\nPUB a 5\r\nfive!\r\n")
    assert (reply, closed) == (b"-ERR 'Maximum Payload Violation'\r\n", True)


def test_expiry_while_connected(server: ServerProcess) -> None:
    token, key = W.user("short lived", claims={"exp": int(time.time()) + 2})
    with WireClient(server.port) as client:
        assert connect_as(client, token, key) == (b"", False)
        rest, _ = client.read_until(b"Expired'\r\n", timeout=15)
    assert rest.endswith(b"-ERR 'User Authentication Expired'\r\n")


def test_jwt_without_limits_allows_nothing(server: ServerProcess) -> None:
    """Absent limits are zero, as the jwt library decodes them: no connection for an account without
    limits, no subscription and no payload for a user without limits."""
    token, key = W.user("in bare", issuer=W.bare)
    reply, closed = attempt(server.port, token, key)
    # nats-server may also get the subscription limit's error (0 here) out before it closes: its own race.
    assert reply.startswith(b"-ERR 'maximum account active connections exceeded'\r\n") and closed
    bare_user = Key("U")
    reply, closed = attempt(
        server.port,
        W.a.issue(bare_user.public, "user", {}),
        bare_user,
        b"SUB a 1\r\nPUB a 0\r\n\r\nPUB a 2\r\nhi\r\n",
    )
    # Both close such a client right after its CONNECT (its subscription limit is reached at 0); what
    # nats-server answers to the ops already sent first varies.
    assert reply.startswith(b"-ERR 'maximum subscriptions exceeded'\r\n") and closed


def test_account_connection_limit(server: ServerProcess) -> None:
    first_token, first = W.user("capped 1", issuer=W.capped)
    second_token, second = W.user("capped 2", issuer=W.capped)
    with WireClient(server.port) as holder:
        assert connect_as(holder, first_token, first) == (b"", False)
        refused = attempt(server.port, second_token, second)
    assert refused == (b"-ERR 'maximum account active connections exceeded'\r\n", True)


@pytest.mark.parametrize("kind", KINDS)
def test_account_expiry_while_connected(kind: str, tmp_path: Path) -> None:
    world = World()
    short = Key("A")
    world.accounts[short.public] = account_jwt(world.operator, short, claims={"exp": int(time.time()) + 3})
    token, key = world.user("in short", issuer=short)
    with running(kind, world.config(tmp_path)) as srv, WireClient(srv.port) as client:
        assert connect_as(client, token, key) == (b"", False)
        rest, _ = client.read_until(b"Expired'\r\n", timeout=15)
    assert rest.endswith(b"-ERR 'Account Authentication Expired'\r\n")


async def test_creds_and_account_isolation(server: ServerProcess, tmp_path: Path) -> None:
    a_token, a_key = W.users["plain"]
    b_token, b_key = W.users["in b"]
    in_a = await nats.connect(server.url, user_credentials=str(creds(tmp_path / "a.creds", a_token, a_key)))
    in_b = await nats.connect(server.url, user_credentials=str(creds(tmp_path / "b.creds", b_token, b_key)))
    try:
        sub_a, sub_b = await in_a.subscribe("shared"), await in_b.subscribe("shared")
        await in_b.flush()
        await in_a.publish("shared", b"from a")
        await in_a.flush()
        await in_b.publish("shared", b"from b")
        assert (await sub_a.next_msg(timeout=5)).data == b"from a"
        # B's own message is the first B sees: A's never crossed into account B.
        assert (await sub_b.next_msg(timeout=5)).data == b"from b"
    finally:
        await in_a.close()
        await in_b.close()


async def test_bad_creds_refused(server: ServerProcess, tmp_path: Path) -> None:
    token, key = REJECTED["expired"]
    path = creds(tmp_path / "expired.creds", token, key)
    client = NATS()
    try:
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await client.connect(server.url, user_credentials=str(path), allow_reconnect=False)
    finally:
        await client.close()  # nats-py leaves the failed connection's transport open otherwise


def test_scoped_signing_key_template_applies(server: ServerProcess) -> None:
    token, key = W.users["scoped"]
    extra = b"PUB scoped.a 1\r\na\r\nPUB other 1\r\na\r\nPUB scoped.b 9\r\nnine char\r\n"
    assert attempt(server.port, token, key, extra) == (
        b"-ERR 'Permissions Violation for Publish to \"other\"'\r\n-ERR 'Maximum Payload Violation'\r\n",
        True,
    )


def test_scoped_template_functions(server: ServerProcess) -> None:
    token, key = W.user(
        "templated", issuer=W.a_templated, issuer_account=W.a.public, subs=0, data=0, payload=0,
        tags=["team:blue", "team:red"], claims={"name": "alice"},
    )  # fmt: skip
    allowed = [b"user.alice.x", b"acct.account", b"blue.in", b"red.in"]
    denied = [b"user.bob.x", b"green.in", b"missing.x"]
    extra = b"".join(b"PUB %s 1\r\na\r\n" % s for s in allowed + denied)
    reply, closed = attempt(server.port, token, key, extra)
    assert not closed
    assert reply == b"".join(b"-ERR 'Permissions Violation for Publish to \"%s\"'\r\n" % s for s in denied)
