"""Auth callout with the Go ecosystem: a callout service and clients written with nats.go and nkeys
(go/callout) against pynatsd and nats-server, plain and xkey-encrypted, on the servers (and their config)
of test_auth_callout; both servers must give the Go programs the same outcomes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pynatsd.auth.nkeys import XKey
from tests.conftest import need_tool
from tests.interop.drivers import build_go, go_available
from tests.jwt.issuer import Key
from tests.jwt.world import running
from tests.security.test_auth_callout import KINDS, SENTINEL_TAGS, OperatorCallout, Setup
from tests.security.test_auth_callout import served as served  # the servers, one per kind and encryption

GO_TIMEOUT = 40  # seconds; the program's own watchdog is 30 s
# The key paths (and JSON types) of the authorization request for a nats.go client logging in with user and
# password, as nats-server 2.15.1 writes them (server_id.xkey only when the callout has an xkey).
REQUEST_SHAPE = [
    ".aud:string", ".exp:number", ".iat:number", ".iss:string", ".jti:string",
    ".nats.client_info.host:string", ".nats.client_info.id:number", ".nats.client_info.kind:string",
    ".nats.client_info.type:string", ".nats.client_info.user:string",
    ".nats.connect_opts.lang:string", ".nats.connect_opts.pass:string", ".nats.connect_opts.protocol:number",
    ".nats.connect_opts.user:string", ".nats.connect_opts.version:string",
    ".nats.server_id.host:string", ".nats.server_id.id:string", ".nats.server_id.name:string",
    ".nats.server_id.version:string", ".nats.type:string", ".nats.user_nkey:string", ".nats.version:number",
    ".sub:string",
]  # fmt: skip
# What the request has more for a client that also came with a user JWT (the name and tags are the JWT's).
JWT_CLIENT_SHAPE = [
    ".nats.client_info.name_tag:string", ".nats.client_info.nonce:string", ".nats.client_info.tags:array",
    ".nats.connect_opts.jwt:string", ".nats.connect_opts.sig:string",
]  # fmt: skip


@pytest.fixture(scope="module")
def callout_go() -> Path:
    """The Go service-and-clients program, built once per module, offline."""
    need_tool(go_available(), "Go toolchain with nats.go (golang-go, golang-github-nats-io-go-nats-dev)")
    return build_go(Path(__file__).resolve().parent / "go" / "callout", "callout-go")


def _run(program: Path, url: str, issuer: Key, xkey: XKey | None, *more: str) -> dict[str, Any]:
    """What the Go service and clients saw on the server at `url` (`more`: operator mode's flags)."""
    args = [str(program), "-url", url, "-issuer", issuer.seed.decode(), *more]
    if xkey is not None:
        args += ["-xkey", xkey.seed]
    done = subprocess.run(args, capture_output=True, text=True, timeout=GO_TIMEOUT, check=False)
    assert done.returncode == 0, (done.stdout, done.stderr)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _expected(encrypted: bool, shape: list[str], **jwt_client: Any) -> dict[str, Any]:
    """alice gets in and her permissions, bob is refused; the service saw both (`jwt_client`: what the
    requests say of a client that came with a user JWT)."""
    shape = sorted([*shape, *[".nats.server_id.xkey:string"] * encrypted])
    return {
        "alice": {
            "connect": "",
            "echo": "in",
            "request": "served",
            "errors": [
                'nats: Permissions Violation for Publish to "elsewhere"',
                'nats: Permissions Violation for Subscription to "elsewhere.>"',
            ],
        },
        "bob": {"connect": "nats: Authorization Violation", "echo": "", "request": "", "errors": None},
        "seen": [
            {"user": user, "client_user": user, "kind": "Client", "sealed": encrypted,
             "server_xkey": encrypted, **jwt_client, "shape": shape}
            for user in ("alice", "bob")
        ],
        "service_errors": None,
    }  # fmt: skip


def test_go_service_and_clients(served: Setup, callout_go: Path) -> None:
    """The Go service admits alice/secret into APP with its permissions (the nats.go client's error handler
    then reports a publish and a subscription outside them, in the server's words) and refuses bob (the
    server's words in nats.go's connect error); it sees both requests, sealed for its xkey when it has one,
    with the fields nats-server writes."""
    xkey = served.service.xkey
    result = _run(callout_go, served.server.url, served.service.issuer, xkey)
    assert result == _expected(xkey is not None, REQUEST_SHAPE)


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "xkey"])
@pytest.mark.parametrize("kind", KINDS)
def test_go_service_and_clients_in_operator_mode(
    kind: str, encrypted: bool, tmp_path: Path, callout_go: Path
) -> None:
    """Operator mode: the Go service logs in with its credentials and places alice in APP with a user JWT
    APP signs; the nats.go clients come with the sentinel's credentials and their user and password (nats.go
    sends both), so the request also carries the sentinel JWT, the signed nonce, and the sentinel's name and
    tags."""
    ops = OperatorCallout(tmp_path, encrypted)
    with running(kind, ops.world.config(tmp_path)) as server:
        result = _run(callout_go, server.url, ops.call, ops.xkey, "-signer", ops.app.seed.decode(),
                      "-placement", ops.app.public, "-service-creds", str(ops.service_creds),
                      "-client-creds", str(ops.sentinel_creds))  # fmt: skip
    shape = [*REQUEST_SHAPE, *JWT_CLIENT_SHAPE]
    assert result == _expected(encrypted, shape, name_tag="sentinel", tags=SENTINEL_TAGS)
