"""pynatsd and the real nats-server started on the same config files (written here): both start or both
refuse, `-t` agrees, and auth is enforced alike: a raw client is refused where nats-server refuses it.

The files pynatsd refuses on purpose (keys it does not implement) are checked apart: nats-server runs
them, pynatsd exits naming the key, and never runs open.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import bcrypt
import nkeys
import pytest

from tests.conftest import need_tool
from tests.servers import (
    REPO_ROOT,
    ServerProcess,
    nats_server_binary,
    pynatsd_command,
    server_with_config,
    start_server,
)
from tests.wire import WireClient

KINDS = ["pynatsd", "nats-server"]
OK = b""  # an admitted client: nothing before the PONG of its PING
DENIED = b"-ERR 'Authorization Violation'"


def _hash(secret: str) -> str:
    # nats-server takes unquoted hashes only with the 2a prefix; a low cost keeps the test fast.
    return bcrypt.hashpw(secret.encode(), bcrypt.gensalt(rounds=4, prefix=b"2a")).decode()


def _command(kind: str) -> list[str]:
    if kind == "pynatsd":
        return pynatsd_command()
    binary = nats_server_binary()
    need_tool(binary is not None, "nats-server")
    return [str(binary)]


def _run(kind: str, args: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [*_command(kind), *args], capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT, env=env
    )


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[str, str], ServerProcess]]:
    with contextlib.ExitStack() as started:

        def start(kind: str, text: str) -> ServerProcess:
            _command(kind)  # skips (outside CI) without nats-server
            return started.enter_context(server_with_config(kind, tmp_path / f"{kind}.conf", text))

        yield start


def _connect(port: int, fields: Mapping[str, object], then: bytes = b"") -> bytes:
    with WireClient(port) as client:
        line = b"CONNECT " + json.dumps({"verbose": False, **fields}).encode() + b"\r\n"
        reply, _ = client.exchange(line + then)
    return reply


# -- auth enforced alike -------------------------------------------------------------------------------
TOKEN_HASH = _hash("tok-secret")
PASS_HASH = _hash("pw-secret")
# An account's own public nkey (nats-server checks it and keeps it; config mode uses it for nothing).
ACCOUNT_SEED = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_ACCOUNT)
ACCOUNT_NKEY = nkeys.from_seed(ACCOUNT_SEED).public_key.decode()
AUTH_CASES = {
    # finding: `Users`/`User`/`Password` (any case) were ignored or made a user "" with no password
    "capitalized users": (
        "Authorization { Users = [ {User: u, Password: p} ] }",
        [({}, DENIED), ({"user": "u", "pass": "p"}, OK), ({"user": "u", "pass": "x"}, DENIED),
         ({"user": "", "pass": ""}, DENIED)],
    ),
    "upper-case USERS and pass": (
        "authorization { USERS = [ {user: u, pass: p} ] }",
        [({}, DENIED), ({"user": "u", "pass": "p"}, OK)],
    ),
    "TOKEN": ("authorization { TOKEN: t0k }", [({}, DENIED), ({"auth_token": "t0k"}, OK)]),
    # finding: a bcrypt token / single password was compared as plain text
    "bcrypt token": (
        f'authorization {{ token: "{TOKEN_HASH}" }}',
        [({"auth_token": "tok-secret"}, OK), ({"auth_token": TOKEN_HASH}, DENIED)],
    ),
    "bcrypt single user, unquoted hash": (
        f"authorization {{ user: u, password: {PASS_HASH} }}",
        [({"user": "u", "pass": "pw-secret"}, OK), ({"user": "u", "pass": PASS_HASH}, DENIED)],
    ),
    "allowed_connection_types": (
        'authorization { users = [ {user: w, password: w, allowed_connection_types: ["WEBSOCKET"]}, '
        '{user: s, password: s, clients: ["STANDARD", "WEBSOCKET"]} ] }',
        [({"user": "w", "pass": "w"}, DENIED), ({"user": "s", "pass": "s"}, OK)],
    ),
    "account users with default_permissions": (
        'accounts { A { users = [ {user: a, password: a} ], default_permissions: { publish: "ok" } } }',
        [({}, DENIED), ({"user": "a", "pass": "a"}, OK)],
    ),
}  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(AUTH_CASES))
def test_auth_is_enforced_as_by_nats_server(
    kind: str, case: str, serve: Callable[[str, str], ServerProcess]
) -> None:
    text, attempts = AUTH_CASES[case]
    server = serve(kind, text)
    for fields, expected in attempts:
        reply = _connect(server.port, fields)
        assert reply == expected if expected == OK else reply.startswith(expected), (fields, reply)


PERMISSION_CASES = {
    "pub/sub aliases": '{pub: "a.>", sub: "a.>"}',
    "import/export aliases": '{import: "a.>", export: "a.>"}',
    "Publish/Subscribe with DENY": '{Publish: {DENY: "b.>"}, Subscribe: {Deny: "b.>"}}',
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(PERMISSION_CASES))
def test_permission_aliases_are_enforced(
    kind: str, case: str, serve: Callable[[str, str], ServerProcess]
) -> None:
    perms = PERMISSION_CASES[case]
    server = serve(kind, f"authorization {{ users = [ {{user: u, password: p, permissions: {perms}}} ] }}")
    login = {"user": "u", "pass": "p"}
    assert _connect(server.port, login, b"PUB a.1 1\r\nx\r\nSUB a.1 1\r\n") == b""
    reply = _connect(server.port, login, b"PUB b.1 1\r\nx\r\n")
    assert reply == b"-ERR 'Permissions Violation for Publish to \"b.1\"'\r\n"
    reply = _connect(server.port, login, b"SUB b.1 1\r\n")
    assert reply == b"-ERR 'Permissions Violation for Subscription to \"b.1\"'\r\n"


@pytest.mark.parametrize("kind", KINDS)
def test_account_default_permissions_are_enforced(
    kind: str, serve: Callable[[str, str], ServerProcess]
) -> None:
    server = serve(
        kind,
        'accounts { A { default_permissions: { publish: "ok" }, users = [ {user: a, password: a}, '
        '{user: b, password: b, permissions: { publish: "other" }} ] } }',
    )
    assert _connect(server.port, {"user": "a", "pass": "a"}, b"PUB ok 0\r\n\r\n") == b""
    reply = _connect(server.port, {"user": "a", "pass": "a"}, b"PUB no 0\r\n\r\n")
    assert reply == b"-ERR 'Permissions Violation for Publish to \"no\"'\r\n"
    assert _connect(server.port, {"user": "b", "pass": "b"}, b"PUB other 0\r\n\r\n") == b""


@pytest.mark.parametrize("kind", KINDS)
def test_account_nkey_users(kind: str, serve: Callable[[str, str], ServerProcess]) -> None:
    """finding: an nkey user inside an account registered a user "" with no password (anyone got in)."""
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    kp = nkeys.from_seed(seed)
    public = kp.public_key.decode()
    server = serve(kind, f"accounts {{ A {{ users = [ {{nkey: {public}}} ] }} }}")
    assert _connect(server.port, {}).startswith(DENIED)
    assert _connect(server.port, {"user": "", "pass": ""}).startswith(DENIED)
    with WireClient(server.port) as client:
        sig = base64.urlsafe_b64encode(kp.sign(client.info["nonce"].encode())).decode().rstrip("=")
        line = json.dumps({"nkey": public, "sig": sig, "verbose": False})
        reply, _ = client.exchange(f"CONNECT {line}\r\n".encode())
    assert reply == b""


@pytest.mark.parametrize("kind", KINDS)
def test_max_connections_zero_refuses_everyone(kind: str, serve: Callable[[str, str], ServerProcess]) -> None:
    """finding: `max_connections: 0` (nats-server: refuse every client) ran without any limit."""
    server = serve(kind, "max_connections: 0")
    with WireClient(server.port, read_info=False) as client:
        data, _ = client.read_until(b"maximum connections exceeded'\r\n")
    assert b"-ERR 'maximum connections exceeded'" in data


# -- starts or refuses, and -t, alike ---------------------------------------------------------------
BOTH_REFUSE = {
    "unknown key": ("bogus: 1", "bogus"),
    "typo in a permission block": (
        'authorization { users = [ {user: a, password: b, permissions: { publish: { denny: "x" } }} ] }',
        "denny",
    ),
    "token with users": ("authorization { token: t, users = [ {user: a, password: b} ] }", "token"),
    "duplicate users": (
        "authorization { users = [ {user: a, password: b}, {user: a, password: c} ] }",
        'Duplicate user "a"',
    ),
    "short lame duck": ('lame_duck_duration: "5s"', "lame_duck_duration"),
    "insecure cipher": (
        'tls { cipher_suites: ["TLS_RSA_WITH_AES_128_CBC_SHA"] }',
        "allow_insecure_cipher_suites",
    ),
    "unknown curve": ('tls { curve_preferences: ["P999"] }', "P999"),
    "bad include": ('include "does-not-exist.conf"', "does-not-exist.conf"),
    "missing certificate": ('tls { cert_file: "no-such.pem", key_file: "no-such.key" }', "no-such.pem"),
    "operator": ('operator: "no-such-operator.jwt"', "operator"),
    "trusted keys": ('trusted_keys: ["OBADKEY"]', "trusted"),
    "malformed cluster address": ('cluster { listen: "foo:bar" }', 'could not parse port "bar"'),
    # finding: pynatsd read `a password: b` as one bare value where nats-server wants a separator
    "map values without a separator": (
        "authorization { user: a password: b }",
        'Expected a map value terminator "," or a map terminator "}"',
    ),
    "top-level values on one line": (
        "port: 4222 debug: true",
        "Expected a top-level value to end with a new line, comment or EOF",
    ),
    "array values without a separator": (
        "cluster { routes: [nats-route://a:1 nats-route://b:2] }",
        'Expected an array value terminator "," or an array terminator "]"',
    ),
    "account nkey of a user": (
        f"accounts {{ A {{ nkey: {ACCOUNT_NKEY.replace('A', 'U', 1)} }} }}",
        "Not a valid public nkey for an account",
    ),
    "gateway token": (
        "gateway { name: A, listen: 127.0.0.1:-1, authorization { token: t } }",
        "Gateway authorization does not support tokens",
    ),
    "gateway users": (
        "gateway { name: A, listen: 127.0.0.1:-1, authorization { users: [{user: a, password: b}] } }",
        "Gateway authorization does not allow multiple users",
    ),
}
BOTH_START = {
    "gateway": (
        "gateway { name: A, listen: 127.0.0.1:-1, reject_unknown_cluster: true, connect_retries: 2,"
        " authorization { user: u, password: p, timeout: 1 },"
        ' gateways: [{name: B, urls: ["nats://127.0.0.1:1"]}, {name: C, url: "nats://u:p@127.0.0.1:2"}] }'
    ),
    "random ports": 'listen: 127.0.0.1:-1\nhttp: "127.0.0.1:-1"',
    "separators: newline, comma, semicolon, comments": (
        "authorization {\n user: a # who\n password: b; timeout: 2 // s\n}\nmax_payload: 1000, debug: false"
    ),
    "aliases": "net: 127.0.0.1\nmax_conn: 100\nmax_subs: 10\nno_sublist_cache: true\nmonitor_port: -1",
    "file aliases": "logfile: LOG\npidfile: PID",
    "long lame duck": 'lame_duck_duration: "45s"\nlame_duck_grace_period: "1s"',
    "bcrypt unquoted": f"authorization {{ user: u, password: {PASS_HASH} }}",
    "variables": "SECRET: pw\nauthorization { user: u, password: $SECRET }",
    "memory resolver": "resolver: MEMORY",
    "account nkey": f"accounts {{ A {{ nkey: {ACCOUNT_NKEY}, users = [{{user: a, password: a}}] }} }}",
    "leafnodes": 'leafnodes { port: -1, reconnect: "2s", authorization { user: a, password: b } }',
}
# nats-server runs these; pynatsd does not implement them and refuses to start rather than run open.
PYNATSD_REFUSES = {
    "URL resolver": ("resolver: URL(http://127.0.0.1:1/jwt/v1/accounts/)", "resolver"),
    "service latency": (
        'accounts { A { users = [{user: a, password: a}], exports = [{service: "x", latency: "l"}] } }',
        "latency",
    ),
    "leafnode compression": ("leafnodes { listen: 127.0.0.1:-1, compression: s2_fast }", "compression"),
}  # fmt: skip


def _write(tmp_path: Path, text: str, kind: str) -> Path:
    directory = tmp_path / kind
    directory.mkdir(exist_ok=True)
    conf = directory / "c.conf"
    conf.write_text(text.replace("LOG", str(directory / "s.log")).replace("PID", str(directory / "s.pid")))
    return conf


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(BOTH_REFUSE))
def test_both_refuse(kind: str, case: str, tmp_path: Path) -> None:
    text, named = BOTH_REFUSE[case]
    conf = _write(tmp_path, text, kind)
    for args in (["-t", "-c", str(conf)], ["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"]):
        result = _run(kind, args)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert named in result.stdout + result.stderr
        if kind == "pynatsd":
            assert (result.stdout + result.stderr).startswith("pynatsd: ")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(BOTH_START))
def test_both_start(kind: str, case: str, tmp_path: Path) -> None:
    conf = _write(tmp_path, BOTH_START[case], kind)
    result = _run(kind, ["-t", "-c", str(conf)])
    assert result.returncode == 0, result.stdout + result.stderr
    server = start_server(kind, ["-c", str(conf)])
    server.stop()


@pytest.mark.parametrize("case", list(PYNATSD_REFUSES))
def test_pynatsd_refuses_what_it_does_not_implement(case: str, tmp_path: Path) -> None:
    text, key = PYNATSD_REFUSES[case]
    conf = _write(tmp_path, text, "nats-server")
    assert _run("nats-server", ["-t", "-c", str(conf)]).returncode == 0  # a valid nats-server file
    for args in (["-t", "-c", str(conf)], ["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"]):
        result = _run("pynatsd", args)
        assert result.returncode == 1
        assert f'"{key}": pynatsd does not support' in result.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_check_fails_on_nats_server_warnings_but_the_server_starts(kind: str, tmp_path: Path) -> None:
    """nats-server's warnings (a duration given as a number) fail `-t`, while the server still starts."""
    conf = _write(tmp_path, "ping_interval: 30", kind)
    result = _run(kind, ["-t", "-c", str(conf)])
    assert result.returncode == 1
    assert "ping_interval should be converted to a duration" in result.stderr
    start_server(kind, ["-c", str(conf)]).stop()


@pytest.mark.parametrize("kind", KINDS)
def test_check_passes_keys_pynatsd_ignores(kind: str, tmp_path: Path) -> None:
    conf = _write(tmp_path, "trace_verbose: false\nmax_traced_msg_len: 10\nserver_tags: [a]", kind)
    result = _run(kind, ["-t", "-c", str(conf)])
    assert result.returncode == 0, result.stderr
    if kind == "pynatsd":
        assert '"trace_verbose" is not supported by pynatsd and is ignored' in result.stderr
