"""Auth callout with the Go ecosystem: a callout service and clients written with nats.go and nkeys
(go/callout) against pynatsd and nats-server, plain and xkey-encrypted, on the servers (and their config)
of test_auth_callout; both servers must give the Go programs the same outcomes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import need_tool
from tests.interop.drivers import build_go, go_available
from tests.security.test_auth_callout import Setup
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


@pytest.fixture(scope="module")
def callout_go() -> Path:
    """The Go service-and-clients program, built once per module, offline."""
    need_tool(go_available(), "Go toolchain with nats.go (golang-go, golang-github-nats-io-go-nats-dev)")
    return build_go(Path(__file__).resolve().parent / "go" / "callout", "callout-go")


def test_go_service_and_clients(served: Setup, callout_go: Path) -> None:
    """The Go service admits alice/secret into APP with its permissions (the nats.go client's error handler
    then reports a publish and a subscription outside them, in the server's words) and refuses bob (the
    server's words in nats.go's connect error); it sees both requests, sealed for its xkey when it has one,
    with the fields nats-server writes."""
    service = served.service
    args = [str(callout_go), served.server.url, service.issuer.seed.decode()]
    if service.xkey is not None:
        args.append(service.xkey.seed)
    done = subprocess.run(args, capture_output=True, text=True, timeout=GO_TIMEOUT, check=False)
    assert done.returncode == 0, (done.stdout, done.stderr)
    result = json.loads(done.stdout)
    encrypted = service.xkey is not None
    shape = sorted(REQUEST_SHAPE + [".nats.server_id.xkey:string"] * encrypted)
    assert result == {
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
            {
                "user": user,
                "client_user": user,
                "kind": "Client",
                "sealed": encrypted,
                "server_xkey": encrypted,
                "shape": shape,
            }
            for user in ("alice", "bob")
        ],
        "service_errors": None,
    }
