"""Auth callout (`authorization { auth_callout {...} }`): a callout service written with nats-py answers the
server's signed authorization requests on `$SYS.REQ.USER.AUTH` with user JWTs (or errors), plain and
xkey-encrypted; pynatsd and nats-server must give clients the same outcomes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import nats
import pytest
from nats.aio.msg import Msg

from pynatsd.auth.jwt import decode_generic
from pynatsd.auth.nkeys import XKey
from tests.jwt.issuer import Key
from tests.servers import ServerProcess, start_server
from tests.wire import WireClient

KINDS = ["pynatsd", "nats-server"]
CALLOUT_SUBJECT = "$SYS.REQ.USER.AUTH"
XKEY_HEADER = "Nats-Server-Xkey"
VIOLATION = "-ERR 'Authorization Violation'\r\n"
AUTH_TIMEOUT = 1  # seconds: how long the server waits for the service (its auth timeout)


class CalloutService:
    """The service: alice/secret gets into APP publishing on `allowed.>` only; bob is refused with a reason;
    `mute` is never answered; anyone else is refused."""

    def __init__(self, issuer: Key, xkey: XKey | None) -> None:
        self.issuer = issuer
        self.xkey = xkey
        self.requests: list[dict[str, Any]] = []

    def answer(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """The response's `nats` part for a decoded request, or None to stay silent."""
        opts = request["nats"]["connect_opts"]
        user, password = opts.get("user", ""), opts.get("pass", "")
        if user == "mute":
            return None
        if (user, password) != ("alice", "secret"):
            return {"error": f"no entry for {user}"}
        allowed = ["allowed.>", "_INBOX.>"]
        user_claims = {
            "pub": {"allow": allowed},
            "sub": {"allow": allowed},
            "subs": -1,
            "data": -1,
            "payload": -1,
        }
        token = self.issuer.issue(request["nats"]["user_nkey"], "user", user_claims, aud="APP", name="alice")
        return {"jwt": token}

    async def handle(self, msg: Msg) -> None:
        data = msg.data
        server_xkey = (msg.headers or {}).get(XKEY_HEADER)
        if self.xkey is not None:
            assert server_xkey, "an encrypted request names the server's xkey"
            data = self.xkey.open(data, server_xkey)
        else:
            assert server_xkey is None
        token = data.decode()
        claims = decode_generic(token)  # checks the server's signature (its id is its public nkey)
        request = json.loads(_payload(token))
        assert request["nats"]["type"] == "authorization_request"
        assert claims.issuer == request["nats"]["server_id"]["id"]
        self.requests.append(request)
        answer = self.answer(request)
        if answer is None:
            return
        response = self.issuer.issue(request["nats"]["user_nkey"], "authorization_response", answer,
                                     aud=claims.issuer)  # fmt: skip
        body = response.encode()
        if self.xkey is not None and server_xkey:
            body = self.xkey.seal(body, server_xkey)
        await msg.respond(body)


def _payload(token: str) -> bytes:
    import base64

    part = token.split(".")[1]
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _config(issuer: Key, xkey: XKey | None) -> str:
    xkey_line = f"xkey: {xkey.public}" if xkey is not None else ""
    return f"""
accounts {{
  AUTH {{ users: [ {{user: auth, password: pwd}} ] }}
  APP {{}}
}}
authorization {{
  timeout: {AUTH_TIMEOUT}
  auth_callout {{
    issuer: {issuer.public}
    account: AUTH
    auth_users: [ auth ]
    {xkey_line}
  }}
}}
"""


class Setup:
    def __init__(self, server: ServerProcess, service: CalloutService) -> None:
        self.server = server
        self.service = service


@pytest.fixture(scope="module", params=[(kind, enc) for kind in KINDS for enc in ("plain", "xkey")],
                ids=lambda p: f"{p[0]}-{p[1]}")  # fmt: skip
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    kind, enc = request.param
    issuer = Key("A")
    xkey = XKey() if enc == "xkey" else None
    conf = tmp_path_factory.mktemp("callout") / "callout.conf"
    conf.write_text(_config(issuer, xkey))
    server = start_server(kind, ["-c", str(conf)])
    try:
        yield Setup(server, CalloutService(issuer, xkey))
    finally:
        server.stop()


@pytest.fixture
async def setup(served: Setup) -> AsyncIterator[Setup]:
    """The service connected as the auth user (which bypasses the callout) for one test."""
    nc = await nats.connect(served.server.url, user="auth", password="pwd", allow_reconnect=False)
    await nc.subscribe(CALLOUT_SUBJECT, cb=served.service.handle)
    await nc.flush()
    try:
        yield served
    finally:
        await nc.close()


async def _refused(url: str, **credentials: Any) -> str:
    """What a client logging in with `credentials` (user, password) reads before the server closes it."""
    port = int(url.rsplit(":", 1)[1])

    def attempt() -> bytes:
        with WireClient(port) as client:
            connect = json.dumps({"verbose": False, "pedantic": False, **credentials})
            reply, closed = client.exchange(f"CONNECT {connect}\r\n".encode(), timeout=10)
            assert closed, reply
            return reply

    return (await asyncio.to_thread(attempt)).decode()


async def test_allowed_user_gets_the_jwt_permissions(setup: Setup) -> None:
    errors: list[Exception] = []

    async def on_error(err: Exception) -> None:
        errors.append(err)

    nc = await nats.connect(setup.server.url, user="alice", password="secret", allow_reconnect=False,
                            error_cb=on_error)  # fmt: skip
    try:
        sub = await nc.subscribe("allowed.>")
        await nc.publish("allowed.one", b"in")
        assert (await sub.next_msg(timeout=5)).data == b"in"
        await nc.publish("elsewhere", b"out")
        await nc.flush()
        for _ in range(50):
            if errors:
                break
            await asyncio.sleep(0.05)
        assert [str(e) for e in errors] == ['nats: permissions violation for publish to "elsewhere"']
    finally:
        await nc.close()
    request = setup.service.requests[-1]["nats"]
    assert request["connect_opts"]["user"] == "alice"
    assert request["user_nkey"].startswith("U")
    assert request["client_info"]["user"] == "alice"
    assert request["client_info"]["kind"] == "Client"
    assert request["client_info"]["type"] == "nats"
    assert bool(request["server_id"].get("xkey")) == (setup.service.xkey is not None)


async def test_refused_user_gets_an_authorization_violation(setup: Setup) -> None:
    text = await _refused(setup.server.url, user="bob", **{"pass": "whatever"})
    assert text == VIOLATION
    assert setup.service.requests[-1]["nats"]["connect_opts"]["user"] == "bob"


async def test_unanswered_request_times_out_as_a_violation(setup: Setup) -> None:
    text = await _refused(setup.server.url, user="mute", **{"pass": "x"})
    assert text == VIOLATION
    assert setup.service.requests[-1]["nats"]["connect_opts"]["user"] == "mute"


async def test_auth_users_bypass_the_callout(setup: Setup) -> None:
    before = len(setup.service.requests)
    text = await _refused(setup.server.url, user="auth", **{"pass": "wrong"})
    assert text == VIOLATION
    errors: list[Exception] = []

    async def on_error(err: Exception) -> None:
        errors.append(err)

    nc = await nats.connect(setup.server.url, user="auth", password="pwd", allow_reconnect=False,
                            error_cb=on_error)  # fmt: skip
    try:
        # In the callout account, nobody may send authorization requests but the server.
        await nc.publish(CALLOUT_SUBJECT, b"forged")
        await nc.flush()
        for _ in range(50):
            if errors:
                break
            await asyncio.sleep(0.05)
        assert [str(e) for e in errors] == [
            f'nats: permissions violation for publish to "{CALLOUT_SUBJECT.lower()}"'
        ]
    finally:
        await nc.close()
    assert len(setup.service.requests) == before
