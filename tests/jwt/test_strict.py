"""An operator with strict_signing_key_usage: accounts must come from its signing keys, users from their
account's signing keys, on pynatsd and nats-server alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.jwt.world import KINDS, VIOLATION, World, attempt, running


@pytest.mark.parametrize("kind", KINDS)
def test_strict_signing_keys(kind: str, tmp_path: Path) -> None:
    world = World(strict=True)
    cases = {
        "account issued by the operator key": (world.user("in a"), VIOLATION, True),
        "user issued by the account key": (world.user("b by key", issuer=world.b), VIOLATION, True),
        "user issued by a signing key": (
            world.user("b by signer", issuer=world.b_signer, issuer_account=world.b.public),
            b"",
            False,
        ),
    }
    with running(kind, world.config(tmp_path)) as server:
        outcomes = {name: attempt(server.port, *creds) for name, (creds, _, _) in cases.items()}
    assert outcomes == {name: (reply, closed) for name, (_, reply, closed) in cases.items()}
