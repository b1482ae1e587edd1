"""v1 JWTs (older nsc, nats-py's own test files): operator, account and user chains accepted and refused
as nats-server does, against both servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.jwt.issuer import Key, issue_v1
from tests.jwt.world import KINDS, VIOLATION, attempt, require
from tests.servers import start_server


@pytest.mark.parametrize("kind", KINDS)
def test_v1_chain(kind: str, tmp_path: Path) -> None:
    require(kind)
    operator, account, other = Key("O"), Key("A"), Key("A")
    limits = {
        "subs": -1,
        "conn": -1,
        "imports": -1,
        "exports": -1,
        "data": -1,
        "payload": -1,
        "wildcards": True,
    }
    (tmp_path / "op.jwt").write_text(issue_v1(operator, operator.public, "operator", {}))
    preload = issue_v1(operator, account.public, "account", {"limits": limits})
    conf = tmp_path / "v1.conf"
    conf.write_text(
        f'operator: "{tmp_path / "op.jwt"}"\nresolver: MEMORY\n'
        f'resolver_preload: {{ {account.public}: "{preload}" }}\n'
    )
    good, limited, stray = Key("U"), Key("U"), Key("U")
    cases = [
        (issue_v1(account, good.public, "user", {}), good, b"", False),
        (issue_v1(account, limited.public, "user", {"pub": {"allow": ["ok"]}, "src": "10.0.0.0/8"}), limited,
         VIOLATION, True),
        (issue_v1(other, stray.public, "user", {}), stray, VIOLATION, True),
    ]  # fmt: skip
    server = start_server(kind, ["-c", str(conf)])
    try:
        outcomes = [attempt(server.port, token, key, b"SUB a 1\r\n") for token, key, _, _ in cases]
    finally:
        server.stop()
    assert outcomes == [(reply, closed) for _, _, reply, closed in cases]
