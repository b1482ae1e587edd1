"""Auth callout (`authorization { auth_callout {...} }`): a callout service written with nats-py answers the
server's signed authorization requests on `$SYS.REQ.USER.AUTH` with user JWTs (or errors), plain and
xkey-encrypted; pynatsd and nats-server must give clients the same outcomes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import nats
import nkeys
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from pynatsd.auth.jwt import decode_generic
from pynatsd.auth.nkeys import XKey
from pynatsd.auth.users import Authenticator
from pynatsd.base.options import Options
from pynatsd.broker.callout import AuthCallout
from pynatsd.broker.connection import Connection
from pynatsd.broker.core import Broker
from pynatsd.cli import main
from pynatsd.config.parser import parse
from pynatsd.config.schema import apply_config
from tests.config.test_differential import _run
from tests.jwt.issuer import Key, account_jwt, creds, user_jwt
from tests.jwt.world import World, running
from tests.security.certs import make_certs
from tests.servers import ServerProcess, start_server
from tests.wire import WireClient

KINDS = ["pynatsd", "nats-server"]
CALLOUT_SUBJECT = "$SYS.REQ.USER.AUTH"
XKEY_HEADER = "Nats-Server-Xkey"
VIOLATION = "-ERR 'Authorization Violation'\r\n"
AUTH_TIMEOUT = 1  # seconds: how long the server waits for the service (its auth timeout)


class CalloutService:
    """The service: alice/secret gets into APP publishing on `allowed.>` only; `mute` is never answered;
    the users of BAD_ANSWERS get a flawed answer; anyone else is refused with a reason."""

    def __init__(
        self, issuer: Key, xkey: XKey | None, user_signer: Key | None = None, placement: str = "APP"
    ) -> None:
        self.issuer = issuer
        self.xkey = xkey
        self.user_signer = user_signer or issuer  # who issues the user JWTs (operator mode: the account)
        self.placement = placement  # their audience (config mode: the account)
        self.requests: list[dict[str, Any]] = []

    def _user_jwt(self, user_key: str, user: str) -> str:
        allowed = ["allowed.>", "_INBOX.>"]
        claims: dict[str, Any] = {"aud": "NOPE" if user == "stranger" else self.placement, "name": user}
        if user == "expired":
            claims["exp"] = int(time.time()) - 10
        signer = Key("A") if user == "forger" else self.user_signer
        subject = Key("U").public if user == "impostor" else user_key
        nats: dict[str, Any] = {"pub": {"allow": allowed}, "sub": {"allow": allowed}, "subs": -1, "data": -1,
                                "payload": -1}  # fmt: skip
        if user == "malformed":
            nats["times"] = "always"  # not a list of ranges: the jwt library cannot decode it
        return signer.issue(subject, "user", nats, **claims)

    def response(self, request: dict[str, Any], server_id: str) -> bytes | None:
        """The signed answer to a decoded request (None: stay silent)."""
        opts = request["nats"]["connect_opts"]
        user, password = opts.get("user", ""), opts.get("pass", "")
        if not user and ":" in opts.get("auth_token", ""):  # nats-py sends a token only with a JWT
            user, password = opts["auth_token"].split(":", 1)
        user_key = request["nats"]["user_nkey"]
        if user == "mute":
            return None
        if user == "empty":
            return b""
        if user in BAD_ANSWERS or (user, password) in (("alice", "secret"), ("plainspoken", "secret")):
            answer = {"jwt": self._user_jwt(user_key, user)}
        else:
            answer = {"error": f"no entry for {user}"}
        audience = Key("U").public if user == "misdirected" else server_id
        return self.issuer.issue(user_key, "authorization_response", answer, aud=audience).encode()

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
        body = self.response(request, claims.issuer)
        if body is None:
            return
        user = request["nats"]["connect_opts"].get("user")
        if user == "garbled":
            body = b"xkv1" + os.urandom(64)  # sealed, but not for this server
        elif self.xkey is not None and server_xkey and body and user != "plainspoken":
            body = self.xkey.seal(body, server_xkey)
        await msg.respond(body)


# Users whose answer is flawed, each refused by the server: a user JWT signed by another account, placed in
# an account that does not exist, expired, or for another user; a response addressed to another server; an
# empty response; a response sealed, but not for this server; a user JWT with a malformed field.
BAD_ANSWERS = ["forger", "stranger", "expired", "impostor", "misdirected", "empty", "garbled", "malformed"]


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
  LOCAL {{ users: [ {{user: local, password: lpw}} ] }}
}}
authorization {{
  timeout: {AUTH_TIMEOUT}
  auth_callout {{
    issuer: {issuer.public}
    account: AUTH
    auth_users: [ auth ]
    allowed_accounts: [ APP, AUTH ]
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
    """What a client logging in with `credentials` (user, password) reads before the server closes it, past
    any PING."""
    port = int(url.rsplit(":", 1)[1])

    def attempt() -> bytes:
        with WireClient(port) as client:
            connect = json.dumps({"verbose": False, "pedantic": False, **credentials})
            reply, closed = client.exchange(f"CONNECT {connect}\r\n".encode(), timeout=10)
            assert closed, reply
            # the server's first PING may go out while a slow callout is still deciding (a loaded machine)
            while reply.startswith(b"PING\r\n"):
                reply = reply[len(b"PING\r\n") :]
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


async def _forged_request_refused(nc: Client, errors: list[Exception]) -> None:
    """`nc`, a client of the callout account, publishes an authorization request: a permissions violation
    (`errors` is what its error callback heard), as nobody but the server may send one."""
    await nc.publish(CALLOUT_SUBJECT, b"forged")
    await nc.flush()
    for _ in range(50):
        if errors:
            break
        await asyncio.sleep(0.05)
    violation = f'nats: permissions violation for publish to "{CALLOUT_SUBJECT.lower()}"'
    assert [str(e) for e in errors] == [violation]


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
        await _forged_request_refused(nc, errors)
    finally:
        await nc.close()
    assert len(setup.service.requests) == before


async def test_a_token_client_is_named_redacted(setup: Setup) -> None:
    """A client with a token only: the request's client_info names it "[REDACTED]" (nats-server's raw auth
    user), the token is in connect_opts only; a token spelling an auth user's name bypasses nothing."""
    nc = await nats.connect(setup.server.url, token="alice:secret", allow_reconnect=False)
    await nc.close()
    request = setup.service.requests[-1]["nats"]
    assert request["client_info"]["user"] == "[REDACTED]"
    assert request["connect_opts"]["auth_token"] == "alice:secret"
    assert await _refused(setup.server.url, auth_token="auth") == VIOLATION
    assert setup.service.requests[-1]["nats"]["connect_opts"]["auth_token"] == "auth"


@pytest.mark.parametrize("user", BAD_ANSWERS)
async def test_flawed_answers_are_refused(setup: Setup, user: str) -> None:
    assert await _refused(setup.server.url, user=user, **{"pass": "x"}) == VIOLATION
    assert setup.service.requests[-1]["nats"]["connect_opts"]["user"] == user


async def test_users_of_accounts_not_delegated_keep_their_password_check(setup: Setup) -> None:
    """`allowed_accounts: [APP, AUTH]`: the configured users of LOCAL are not the callout's to decide; a
    client they refuse is in the global account, which is always delegated."""
    assert await _refused(setup.server.url, user="local", **{"pass": "wrong"}) == VIOLATION
    assert setup.service.requests[-1]["nats"]["connect_opts"]["user"] == "local"
    before = len(setup.service.requests)
    nc = await nats.connect(setup.server.url, user="local", password="lpw", allow_reconnect=False)
    try:
        sub = await nc.subscribe("anything")
        await nc.publish("anything", b"free")
        assert (await sub.next_msg(timeout=5)).data == b"free"
    finally:
        await nc.close()
    assert len(setup.service.requests) == before


async def test_admitted_user_lands_in_the_account_its_jwt_names(setup: Setup) -> None:
    """alice's user JWT has audience APP: the service's own account (AUTH) does not see her messages."""
    url = setup.server.url
    watcher = await nats.connect(url, user="auth", password="pwd", allow_reconnect=False)
    alice = await nats.connect(url, user="alice", password="secret", allow_reconnect=False)
    other = await nats.connect(url, user="alice", password="secret", allow_reconnect=False)
    try:
        in_auth = await watcher.subscribe("allowed.>")
        in_app = await other.subscribe("allowed.>")
        await watcher.flush()
        await other.flush()
        await alice.publish("allowed.hello", b"app only")
        assert (await in_app.next_msg(timeout=5)).data == b"app only"
        await watcher.flush()  # had the message reached AUTH, it would be here by now
        assert in_auth.pending_msgs == 0
    finally:
        for nc in (watcher, alice, other):
            await nc.close()


_ISSUER = Key("A").public


@pytest.mark.parametrize(
    ("block", "error"),
    [
        ("issuer: bad, auth_users: [a]", "Expected callout user to be a valid public account nkey"),
        ("auth_users: [a]", "Authorization callouts require an issuer to be specified"),
        (f"issuer: {_ISSUER}", "Authorization callouts require authorized users to be specified"),
        (f"issuer: {_ISSUER}, auth_users: [a], xkey: XBAD", "Expected callout xkey to be a valid public"),
        (f"issuer: {_ISSUER}, auth_users: [a], foo: 1", 'Unknown field "foo" parsing authorization callout'),
        (f"issuer: {_ISSUER}, auth_users: [a], allowed_accounts: [NOPE]",
         'auth_callout allowed account "NOPE" not found in configured accounts'),
    ],
    # Fixed ids: the issuer key differs in every process (pytest-xdist's workers must collect alike).
    ids=["bad issuer", "no issuer", "no auth_users", "bad xkey", "unknown field", "unknown account"],
)  # fmt: skip
def test_bad_blocks_are_refused_alike(
    block: str, error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`-t` on both servers: the same error, at the same place."""
    conf = tmp_path / "bad.conf"
    conf.write_text(
        f"authorization {{\n  users: [{{user: a, password: b}}]\n  auth_callout {{ {block} }}\n}}\n"
    )
    reference = _run("nats-server", ["-t", "-c", str(conf)])
    assert reference.returncode != 0
    assert error in reference.stderr
    with pytest.raises(SystemExit) as exit_status:
        main(["-t", "-c", str(conf)])
    assert exit_status.value.code not in (0, None)
    expected = reference.stderr.strip().splitlines()[-1].removeprefix("nats-server: ")
    assert expected in capsys.readouterr().err


SENTINEL_TAGS = ["team:ops"]


class OperatorCallout:
    """Operator mode: account CALL's JWT delegates its users (`authorization`) but the service's, to a
    service that may place them in APP (whose JWT allows one connection); the service's credentials and a
    sentinel's (a bearer user JWT of CALL, named "sentinel", allowed nothing) are files in `folder`."""

    def __init__(self, folder: Path, encrypted: bool) -> None:
        self.world = World()
        self.call, self.app, service_key, self.sentinel = Key("A"), Key("A"), Key("U"), Key("U")
        self.xkey = XKey() if encrypted else None
        external: dict[str, object] = {
            "auth_users": [service_key.public],
            "allowed_accounts": [self.app.public],
        }
        if self.xkey is not None:
            external["xkey"] = self.xkey.public
        operator = self.world.operator
        self.world.accounts[self.call.public] = account_jwt(operator, self.call, authorization=external)
        self.world.accounts[self.app.public] = account_jwt(operator, self.app, limits={"conn": 1})
        self.service_creds = creds(folder / "service.creds", user_jwt(self.call, service_key), service_key)
        deny_all = {"pub": {"deny": [">"]}, "sub": {"deny": [">"]}, "bearer_token": True}
        sentinel = {"tags": SENTINEL_TAGS, "claims": {"name": "sentinel"}}
        self.sentinel_jwt = user_jwt(self.call, self.sentinel, **deny_all, **sentinel)
        self.sentinel_creds = creds(folder / "sentinel.creds", self.sentinel_jwt, self.sentinel)


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "xkey"])
@pytest.mark.parametrize("kind", KINDS)
async def test_operator_mode_account_delegating_its_users(kind: str, encrypted: bool, tmp_path: Path) -> None:
    """Operator mode: account CALL's JWT delegates its users (`authorization`) but the service's; a client
    comes with a bearer sentinel JWT of CALL and its credentials (a token: nats-py sends no user/password
    with a JWT); the service answers with a user JWT issued by APP (one of CALL's `allowed_accounts`),
    where the client then is, with those permissions and its connection limit. A user JWT from an account
    not allowed is refused."""
    ops = OperatorCallout(tmp_path, encrypted)
    world, call, app, sentinel, xkey = ops.world, ops.call, ops.app, ops.sentinel, ops.xkey
    service = CalloutService(call, xkey, user_signer=app, placement=app.public)
    service_creds, sentinel_creds = ops.service_creds, ops.sentinel_creds
    errors: list[Exception] = []

    async def on_error(err: Exception) -> None:
        errors.append(err)

    with running(kind, world.config(tmp_path)) as server:
        url = server.url
        nc = await nats.connect(
            url, user_credentials=str(service_creds), allow_reconnect=False, error_cb=on_error
        )
        try:
            await nc.subscribe(CALLOUT_SUBJECT, cb=service.handle)
            await nc.flush()
            alice = await nats.connect(url, user_credentials=str(sentinel_creds), token="alice:secret",
                                       allow_reconnect=False)  # fmt: skip
            try:
                sub = await alice.subscribe("allowed.>")
                await alice.publish("allowed.one", b"in")
                assert (await sub.next_msg(timeout=5)).data == b"in"
                sentinel_jwt = ops.sentinel_jwt
                # APP takes one connection: admitted by the service, refused by the account
                full = await _refused(url, jwt=sentinel_jwt, auth_token="alice:secret")
                assert full == "-ERR 'maximum account active connections exceeded'\r\n"
            finally:
                await alice.close()
            request = service.requests[-1]["nats"]
            assert request["connect_opts"]["auth_token"] == "alice:secret" and request["connect_opts"]["jwt"]
            assert request["client_info"]["user"] == sentinel.public  # a JWT client is its user key
            await _forged_request_refused(nc, errors)
        finally:
            await nc.close()
        assert await _refused(url, jwt=sentinel_jwt) == VIOLATION  # no credentials: the service refuses
        assert await _refused(url, jwt=sentinel_jwt, auth_token="forger:secret") == VIOLATION


@pytest.mark.parametrize("kind", KINDS)
async def test_request_describes_a_verified_tls_client(kind: str, tmp_path: Path) -> None:
    """Under `tls { verify: true }` the request carries the TLS version and the client's certificate first in
    `client_tls.verified_chains`."""
    certs = make_certs(tmp_path)
    issuer = Key("A")
    files = f'cert_file: "{certs["server"]}", key_file: "{certs["server_key"]}", ca_file: "{certs["ca"]}"'
    tls = f"tls {{ {files}, verify: true }}\n"
    conf = tmp_path / "tls.conf"
    conf.write_text(tls + _config(issuer, None))
    server = start_server(kind, ["-c", str(conf)])
    ctx = ssl.create_default_context(cafile=certs["ca"])
    ctx.load_cert_chain(certs["client"], certs["client_key"])
    url = f"tls://127.0.0.1:{server.port}"
    service = CalloutService(issuer, None)
    try:
        nc = await nats.connect(url, tls=ctx, user="auth", password="pwd", allow_reconnect=False)
        await nc.subscribe(CALLOUT_SUBJECT, cb=service.handle)
        await nc.flush()
        alice = await nats.connect(url, tls=ctx, user="alice", password="secret", allow_reconnect=False)
        await alice.close()
        await nc.close()
    finally:
        server.stop()
    client_tls = service.requests[-1]["nats"]["client_tls"]
    assert client_tls["version"] == "1.3"
    assert client_tls["cipher"].startswith("TLS_")
    assert client_tls["verified_chains"][0][0] == Path(certs["client"]).read_text()
    assert "certs" not in client_tls


async def test_a_reload_closes_the_users_the_callout_admitted(setup: Setup) -> None:
    """nats-server asks nobody again on a reload: a user the callout admitted is not among the configured
    ones, so it goes (the service, a configured user, stays)."""
    closed = asyncio.get_running_loop().create_future()

    async def on_closed() -> None:
        closed.set_result(True)

    alice = await nats.connect(setup.server.url, user="alice", password="secret", allow_reconnect=False,
                               closed_cb=on_closed)  # fmt: skip
    try:
        setup.server.proc.send_signal(signal.SIGHUP)
        assert await asyncio.wait_for(closed, 10)
    finally:
        await alice.close()
    service = await nats.connect(setup.server.url, user="auth", password="pwd", allow_reconnect=False)
    await service.close()


async def test_an_encrypted_request_may_get_a_plain_answer(setup: Setup) -> None:
    """The server opens an answer only when it is not a JWT already (nats-server's `eyJ` test)."""
    nc = await nats.connect(setup.server.url, user="plainspoken", password="secret", allow_reconnect=False)
    await nc.close()
    assert setup.service.requests[-1]["nats"]["connect_opts"]["user"] == "plainspoken"


def test_a_connect_again_replaces_the_grant_it_had() -> None:
    """A connected client the callout admits again (a second CONNECT) keeps one grant, not one per CONNECT."""
    issuer = Key("A")
    server_seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_SERVER)
    server_id = nkeys.from_seed(server_seed).public_key.decode()
    options = Options()
    apply_config(options, parse(_config(issuer, None), "t.conf"))
    server = SimpleNamespace(options=options, auth=Authenticator(options), server_id=server_id,
                             server_name="n")  # fmt: skip
    callout = AuthCallout(cast(Broker, server), options.auth_callout)
    service = CalloutService(issuer, None)
    conn = SimpleNamespace(connection_type="STANDARD", closed=False, user="")
    for _connect in range(3):
        user_key = Key("U").public
        request = {"nats": {"connect_opts": {"user": "alice", "pass": "secret"}, "user_nkey": user_key}}
        answer = service.response(request, server_id)
        assert answer is not None
        identity = callout._admit(cast(Connection, conn), answer, user_key, ("AUTH", issuer.public, ""), None)
        assert identity == (user_key, "APP")
        conn.user = user_key
    assert list(callout.grants) == [conn.user]
    callout.forget(cast(Connection, conn))
    assert not callout.grants
