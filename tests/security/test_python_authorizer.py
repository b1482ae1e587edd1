"""`authorization { python: ... }`: a callable decides who connects, into which account, with which rights.

The authorizer below is a module written to a temporary directory put on the server's PYTHONPATH. Where
an outcome has a nats-server equivalent (a config user with the same permissions), both servers are asked.
"""

from __future__ import annotations

import base64
import os
import signal
import ssl
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import nkeys
import pytest
from nats.aio.client import Client as NATS

from tests.security.certs import make_certs
from tests.servers import ServerProcess, pynatsd_command, start_server
from tests.wire import WireClient

SECRET = "S3cr3t-never-logged"

AUTHORIZER = textwrap.dedent(
    """
    import time

    from pynatsd.auth.python import Allow, Refuse, SubjectRule, UserPermissions

    ASKED = []

    def check(request):
        user = request.user
        cert = request.tls_certificate_info
        if cert is not None and request.tls_certificate.startswith(b"0"):  # DER: a SEQUENCE
            subject = dict(pair for rdn in cert["subject"] for pair in rdn)
            if subject.get("commonName") == "client":
                return Allow("B", user="client-cert")
        if request.nkey:
            return Allow("B", user=request.nkey)
        if user == "alice" and request.password == "pw":
            rule = SubjectRule(allow=["a.>"])
            return Allow("A", UserPermissions(publish=rule, subscribe=rule))
        if user in ("carol", "bob") and request.password == "pw":
            return Allow("A" if user == "carol" else "B")
        if user == "boom":
            raise ValueError(f"cannot check {request.password}")
        if user == "slow":
            time.sleep(1.0)
        if user == "none":
            return None
        if user == "nowhere":
            return Allow("NOWHERE")
        if user == "badsubject":
            return Allow("A", UserPermissions(publish=SubjectRule(deny=["a..b"])))
        return Refuse(f"unknown user {user}")
    """
)

# The same module after an edit: a reload imports it again (check_async did not exist before).
AUTHORIZER_EDITED = AUTHORIZER + textwrap.dedent(
    """
    async def check_async(request):
        if request.user in ("alice", "dave") and request.password == "pw":
            return Allow("A", UserPermissions(publish=SubjectRule(allow="z.>")))
        return Refuse()
    """
)


def _module_dir(tmp: Path, source: str) -> Path:
    """A directory holding the authorizer module and an entry point for its async callable."""
    (tmp / "pyauth_case.py").write_text(source)
    dist = tmp / "pyauth_case-1.0.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pyauth-case\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[pynatsd.authorizers]\npyauth-case = pyauth_case:check_async\n")
    return tmp


def _env(modules: Path) -> dict[str, str]:
    # No .pyc: an edited module is read again even when its size and mtime second did not change.
    return {"PYTHONPATH": str(modules), "PYTHONDONTWRITEBYTECODE": "1"}


CONFIG = 'accounts { A: {}, B: {} }\nauthorization { python { callable: "%s", timeout: "300ms" } }\n'
# nats-server's equivalent of what the authorizer grants alice (the differential part).
REFERENCE = (
    'accounts { A: { users: [ {user: alice, password: pw, permissions: {publish: "a.>", subscribe: "a.>"}}'
    ",\n {user: carol, password: pw} ] }, B: { users: [ {user: bob, password: pw} ] } }\n"
)


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _module_dir(tmp_path_factory.mktemp("authorizer"), AUTHORIZER)


@pytest.fixture(scope="module")
def authorized(modules: Path) -> Iterator[ServerProcess]:
    conf = modules / "server.conf"
    conf.write_text(CONFIG % "pyauth_case:check")
    server = start_server("pynatsd", ["-c", str(conf)], env=_env(modules))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    conf = tmp_path_factory.mktemp("reference") / "server.conf"
    conf.write_text(REFERENCE)
    server = start_server("nats-server", ["-c", str(conf)])
    yield server
    server.stop()


@pytest.fixture(params=["pynatsd", "nats-server"])
def server(request: pytest.FixtureRequest) -> ServerProcess:
    name = "authorized" if request.param == "pynatsd" else "reference"
    found: ServerProcess = request.getfixturevalue(name)
    return found


def _connect_line(user: str, password: str) -> bytes:
    return f'CONNECT {{"user":"{user}","pass":"{password}","verbose":false}}\r\n'.encode()


async def _refused(url: str, user: str, password: str) -> None:
    client = NATS()
    try:
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await client.connect(url, user=user, password=password, allow_reconnect=False)
    finally:
        await client.close()  # nats-py leaves the failed connection's transport open otherwise


def _log_lines(server: ServerProcess, *needles: str, deadline: float = 10.0) -> list[str]:
    """The log lines holding every needle, once there is at least one (the log is written by a thread)."""
    end = time.monotonic() + deadline
    while True:
        lines = [line for line in server.log().splitlines() if all(n in line for n in needles)]
        if lines or time.monotonic() > end:
            return lines
        time.sleep(0.02)


def test_allowed_user_gets_its_permissions(server: ServerProcess) -> None:
    with WireClient(server.port) as client:
        publishes = b"PUB a.1 1\r\nx\r\nPUB b.1 1\r\nx\r\n"
        reply, closed = client.exchange(_connect_line("alice", "pw") + publishes)
        assert not closed
        assert reply == b"-ERR 'Permissions Violation for Publish to \"b.1\"'\r\n"
        reply, _ = client.exchange(b"SUB b.> 1\r\n")
        assert reply == b"-ERR 'Permissions Violation for Subscription to \"b.>\"'\r\n"


@pytest.mark.parametrize("user", ["nobody", "alice-wrong-password"])
def test_refused_client_gets_authorization_violation(server: ServerProcess, user: str) -> None:
    name, _, password = user.partition("-")
    with WireClient(server.port) as client:
        reply, closed = client.exchange(_connect_line(name, password or "pw"))
        assert closed
        assert reply == b"-ERR 'Authorization Violation'\r\n"


async def test_accounts_keep_authorized_users_apart(server: ServerProcess) -> None:
    alice, carol, bob = [
        await nats.connect(server.url, user=u, password="pw", allow_reconnect=False)
        for u in ("alice", "carol", "bob")
    ]
    try:
        same_account, other_account = await carol.subscribe("a.x"), await bob.subscribe("a.x")
        marker = await bob.subscribe("done")
        await carol.flush()
        await bob.flush()
        await alice.publish("a.x", b"for A")
        assert (await same_account.next_msg(timeout=5)).data == b"for A"
        # alice's message reached carol: it was matched everywhere it could be; bob's own marker comes after.
        await bob.publish("done", b"")
        await marker.next_msg(timeout=5)
        assert other_account.pending_msgs == 0
    finally:
        for nc in (alice, carol, bob):
            await nc.close()


async def test_nkey_is_verified_then_given_to_the_authorizer(authorized: ServerProcess) -> None:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(seed).public_key.decode()
    # Admitted only because the authorizer was given the nkey (it refuses a CONNECT without a user).
    nc = await nats.connect(authorized.url, nkeys_seed_str=seed.decode(), allow_reconnect=False)
    await nc.close()
    with WireClient(authorized.port) as client:  # a signature of something else: refused before asking
        forged = base64.urlsafe_b64encode(nkeys.from_seed(seed).sign(b"not the nonce")).decode().rstrip("=")
        connect = f'CONNECT {{"nkey":"{public}","sig":"{forged}","verbose":false}}\r\n'.encode()
        reply, closed = client.exchange(connect)
        assert closed and reply == b"-ERR 'Authorization Violation'\r\n"
    assert len(_log_lines(authorized, "authentication error - nkey signature not verified")) == 1


async def test_exception_refuses_and_is_logged_once_without_secrets(authorized: ServerProcess) -> None:
    await _refused(authorized.url, "boom", SECRET)
    lines = _log_lines(authorized, "raised ValueError")
    assert len(lines) == 1, lines
    assert " - cid:" in lines[0] and "pyauth_case:check" in lines[0] and "pyauth_case.py:" in lines[0]
    assert SECRET not in authorized.log()


async def test_timeout_refuses(authorized: ServerProcess) -> None:
    await _refused(authorized.url, "slow", SECRET)
    lines = _log_lines(authorized, "did not answer within 0.3s")
    assert len(lines) == 1, lines
    assert SECRET not in authorized.log()


@pytest.mark.parametrize(
    ("user", "why"),
    [
        ("none", "returned NoneType, not Allow or Refuse"),
        ("nowhere", "chose an unknown account 'NOWHERE'"),
        ("badsubject", 'returned invalid permissions: subject "a..b" is not a valid subject'),
    ],
)
def test_a_bad_answer_refuses(authorized: ServerProcess, user: str, why: str) -> None:
    with WireClient(authorized.port) as client:
        reply, closed = client.exchange(_connect_line(user, SECRET))
        assert closed and reply == b"-ERR 'Authorization Violation'\r\n"
    refusal = "authentication error - python authorizer pyauth_case:check "
    assert len(_log_lines(authorized, refusal + why)) == 1


async def test_client_certificate_is_given_to_the_authorizer(tmp_path: Path, modules: Path) -> None:
    certs = make_certs(tmp_path)
    conf = tmp_path / "tls.conf"
    files = f'cert_file: "{certs["server"]}", key_file: "{certs["server_key"]}", ca_file: "{certs["ca"]}"'
    conf.write_text(CONFIG % "pyauth_case:check" + f"tls {{ {files}, verify: true }}\n")
    server = start_server("pynatsd", ["-c", str(conf)], env=_env(modules))
    try:
        ctx = ssl.create_default_context(cafile=certs["ca"])
        ctx.load_cert_chain(certs["client"], certs["client_key"])
        # No user, no password: admitted because of the certificate only.
        nc = await nats.connect(f"tls://127.0.0.1:{server.port}", tls=ctx, allow_reconnect=False)
        await nc.close()
    finally:
        server.stop()


def test_unimportable_callable_stops_the_server(tmp_path: Path, modules: Path) -> None:
    for path, why in [("pyauth_missing:check", "No module named"), ("pyauth_case:nothing", "has no nothing")]:
        conf = tmp_path / "bad.conf"
        conf.write_text(CONFIG % path)
        done = subprocess.run(
            [*pynatsd_command(), "-c", str(conf)],
            env={**os.environ, **_env(modules)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1
        assert f'python authorizer "{path}"' in done.stderr and why in done.stderr


async def test_reload_imports_the_module_again_and_asks_the_new_callable(tmp_path: Path) -> None:
    modules = _module_dir(tmp_path, AUTHORIZER)
    conf = tmp_path / "server.conf"
    conf.write_text(CONFIG % "pyauth_case:check")
    server = start_server("pynatsd", ["-c", str(conf)], env=_env(modules))
    try:
        with WireClient(server.port) as client:
            reply, _ = client.exchange(_connect_line("alice", "pw") + b"PUB a.1 1\r\nx\r\n")
            assert reply == b""
            # A path that does not import fails the reload: the running authorizer stays.
            conf.write_text(CONFIG % "pyauth_case:missing")
            server.proc.send_signal(signal.SIGHUP)
            missing = 'python authorizer "pyauth_case:missing"'
            assert _log_lines(server, "Failed to reload configuration", missing)
            reply, _ = client.exchange(b"PUB a.1 1\r\nx\r\n")
            assert reply == b""
            # The edited module's coroutine function, named by its entry point.
            _module_dir(tmp_path, AUTHORIZER_EDITED)
            conf.write_text(CONFIG % "pyauth-case")
            server.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while True:  # the connected client is asked about again: its new permissions apply
                reply, closed = client.exchange(b"PUB a.1 1\r\nx\r\n")
                assert not closed
                if reply or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            assert reply == b"-ERR 'Permissions Violation for Publish to \"a.1\"'\r\n"
            reply, _ = client.exchange(b"PUB z.1 1\r\nx\r\n")
            assert reply == b""
        dave = await nats.connect(server.url, user="dave", password="pw", allow_reconnect=False)
        await dave.close()
        await _refused(server.url, "carol", "pw")
    finally:
        server.stop()
