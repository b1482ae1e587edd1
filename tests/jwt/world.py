"""One operator-mode setup shared by the JWT tests: an operator with a signing key, a system account,
accounts A (with signing keys, revocations) and B, and accounts the server must not trust."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.jwt.issuer import Key, account_jwt, b64, user_jwt
from tests.servers import ServerProcess, require, start_server
from tests.wire import WireClient

KINDS = ["pynatsd", "nats-server"]
VIOLATION = b"-ERR 'Authorization Violation'\r\n"


def connect_as(client: WireClient, token: str, signer: Key | None, extra: bytes = b"") -> tuple[bytes, bool]:
    """CONNECT `client` with `token`, the nonce signed by `signer` (none: no signature), then `extra`:
    what came back before the closing PONG, and whether the server closed."""
    connect: dict[str, object] = {"jwt": token, "verbose": False, "pedantic": False, "protocol": 1}
    if signer is not None:
        connect["sig"] = b64(signer.sign(client.info["nonce"].encode()))
    return client.exchange(f"CONNECT {json.dumps(connect)}\r\n".encode() + extra)


def attempt(port: int, token: str, signer: Key | None, extra: bytes = b"") -> tuple[bytes, bool]:
    """`connect_as` on a fresh connection."""
    with WireClient(port) as client:
        return connect_as(client, token, signer, extra)


def _window(hours_from: float, hours_to: float) -> dict[str, str]:
    now = datetime.now(UTC)
    start, end = now + timedelta(hours=hours_from), now + timedelta(hours=hours_to)
    return {"start": start.strftime("%H:%M:%S"), "end": end.strftime("%H:%M:%S")}


@dataclass
class World:
    operator: Key = field(default_factory=lambda: Key("O"))
    op_signer: Key = field(default_factory=lambda: Key("O"))
    system: Key = field(default_factory=lambda: Key("A"))
    a: Key = field(default_factory=lambda: Key("A"))
    a_signer: Key = field(default_factory=lambda: Key("A"))
    a_scoped: Key = field(default_factory=lambda: Key("A"))
    a_templated: Key = field(default_factory=lambda: Key("A"))
    b: Key = field(default_factory=lambda: Key("A"))
    stranger: Key = field(default_factory=lambda: Key("O"))
    untrusted: Key = field(default_factory=lambda: Key("A"))
    no_bearer: Key = field(default_factory=lambda: Key("A"))
    expired: Key = field(default_factory=lambda: Key("A"))
    capped: Key = field(default_factory=lambda: Key("A"))
    bare: Key = field(default_factory=lambda: Key("A"))  # an account JWT without limits
    revoked: Key = field(default_factory=lambda: Key("U"))
    b_signer: Key = field(default_factory=lambda: Key("A"))
    users: dict[str, tuple[str, Key]] = field(default_factory=dict)
    strict: bool = False  # the operator's strict_signing_key_usage

    def __post_init__(self) -> None:
        self.scope = {
            "kind": "user_scope", "key": self.a_scoped.public, "role": "scoped",
            "template": {"pub": {"allow": ["scoped.>"]}, "subs": -1, "data": -1, "payload": 8},
        }  # fmt: skip
        self.templated = {
            "kind": "user_scope", "key": self.a_templated.public, "role": "templated",
            "template": {"pub": {"allow": ["user.{{name()}}.>", "acct.{{account-name()}}", "{{tag(team)}}.in",
                                           "{{tag(missing)}}.x"]},
                         "subs": -1, "data": -1, "payload": -1},
        }  # fmt: skip
        past = int(time.time()) - 10
        self.revoked_at = int(time.time()) + 5  # revokes every JWT issued before then
        self.accounts = {
            self.system.public: account_jwt(self.op_signer, self.system),
            self.a.public: self.account_a(revocations={self.revoked.public: self.revoked_at}),
            # B is issued by the operator's signing key.
            self.b.public: account_jwt(self.op_signer, self.b, signing_keys=[self.b_signer.public]),
            self.untrusted.public: account_jwt(self.stranger, self.untrusted),
            self.expired.public: account_jwt(self.operator, self.expired, claims={"exp": past}),
            self.capped.public: account_jwt(self.operator, self.capped, limits={"conn": 1, "leaf": 0}),
            self.bare.public: self.operator.issue(self.bare.public, "account", {}),
            self.no_bearer.public: account_jwt(
                self.operator, self.no_bearer, limits={"disallow_bearer": True}
            ),
        }  # fmt: skip
        self.operator_jwt = self.operator.issue(
            self.operator.public, "operator",
            {"signing_keys": [self.op_signer.public], "system_account": self.system.public,
             "strict_signing_key_usage": self.strict},
        )  # fmt: skip

    def account_a(self, revocations: dict[str, int]) -> str:
        """Account A's JWT (its signing keys) with `revocations`."""
        keys = [self.a_signer.public, self.scope, self.templated]
        return account_jwt(self.operator, self.a, signing_keys=keys, revocations=revocations)

    def revoke(self, user: Key) -> str:
        """Account A's JWT revoking every JWT of `user` issued until a few seconds from now."""
        return self.account_a({user.public: int(time.time()) + 5})

    def user(
        self, name: str, issuer: Key | None = None, key: Key | None = None, **nats: object
    ) -> tuple[str, Key]:
        """A user JWT (issued by account A unless `issuer`), remembered under `name`."""
        key = key or Key("U")
        token = user_jwt(issuer or self.a, key, **nats)
        self.users[name] = (token, key)
        return token, key

    def config(self, directory: Path) -> Path:
        (directory / "op.jwt").write_text(self.operator_jwt)
        preload = "\n".join(f"  {name}: {token}" for name, token in self.accounts.items())
        conf = directory / "operator.conf"
        conf.write_text(
            f'operator: "{directory / "op.jwt"}"\nsystem_account: {self.system.public}\n'
            f"resolver: MEMORY\nresolver_preload: {{\n{preload}\n}}\n"
        )
        return conf


@contextmanager
def running(kind: str, conf: Path) -> Iterator[ServerProcess]:
    require(kind)
    server = start_server(kind, ["-c", str(conf)])
    try:
        yield server
    finally:
        server.stop()


WINDOW_NOW = _window(-1, 1)
WINDOW_LATER = _window(2, 3)
