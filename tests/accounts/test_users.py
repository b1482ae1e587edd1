"""Account users in config mode, side by side with nats-server: nkey users (signing the nonce) bound to
their account with their permissions, and `no_auth_user` (a user or an nkey user; it must exist)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import nkeys
import pytest

from tests.accounts.harness import KINDS, Peer, msg, refusal, serve
from tests.wire import WireClient

VIOLATION = b"-ERR 'Authorization Violation'\r\n"


class UserKey:
    def __init__(self) -> None:
        self.pair = nkeys.from_seed(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER))
        self.public = self.pair.public_key.decode()

    def login(self, nonce: str) -> dict[str, object]:
        sig = base64.urlsafe_b64encode(self.pair.sign(nonce.encode())).decode().rstrip("=")
        return {"nkey": self.public, "sig": sig}


SIGNER, LIMITED, STRANGER = UserKey(), UserKey(), UserKey()


def _config(no_auth_user: str = "") -> str:
    head = f"no_auth_user: {no_auth_user}\n" if no_auth_user else ""
    return (
        head
        + f"""
accounts {{
  A {{ users: [{{nkey: {SIGNER.public}}},
               {{nkey: {LIMITED.public}, permissions: {{publish: "ok.>", subscribe: {{deny: "secret"}}}}}}]
      exports: [{{stream: "feed.>"}}] }}
  B {{ users: [{{user: b, password: b}}], imports: [{{stream: {{account: A, subject: "feed.>"}}}}] }}
}}
"""
    )


def _nkey_peer(port: int, key: UserKey) -> Peer:
    return Peer(port, login_with=key.login)  # signs this connection's nonce


@pytest.mark.parametrize("kind", KINDS)
def test_nkey_users_live_in_their_account(kind: str, tmp_path: Path) -> None:
    with serve(kind, tmp_path, _config()) as server:
        signer, limited = _nkey_peer(server.port, SIGNER), _nkey_peer(server.port, LIMITED)
        b = Peer(server.port, "b")
        signer.do(b"SUB > 1\r\n")
        b.do(b"SUB > 1\r\n")
        refused = limited.do(b"PUB other 1\r\nx\r\nSUB secret 2\r\n")
        limited.do(b"PUB ok.x 1\r\ny\r\nPUB feed.z 1\r\nz\r\n")
        got_signer, got_b = signer.received(), b.received()
    assert refused == [
        (b"-ERR 'Permissions Violation for Publish to \"other\"'",),
        (b"-ERR 'Permissions Violation for Subscription to \"secret\"'",),
    ]
    assert got_signer == [msg("ok.x", "1", "y")]  # feed.z was not allowed to LIMITED
    assert got_b == []


@pytest.mark.parametrize("kind", KINDS)
def test_nkey_signature_must_match(kind: str, tmp_path: Path) -> None:
    with serve(kind, tmp_path, _config()) as server:
        with WireClient(server.port) as client:
            forged = {**SIGNER.login(client.info["nonce"]), "nkey": LIMITED.public}
            out, closed = client.exchange(f"CONNECT {json.dumps(forged)}\r\n".encode())
        with WireClient(server.port) as client:
            unknown = STRANGER.login(client.info["nonce"])
            out2, closed2 = client.exchange(f"CONNECT {json.dumps(unknown)}\r\n".encode())
    assert (out, closed) == (VIOLATION, True)
    assert (out2, closed2) == (VIOLATION, True)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("who", ["nkey", "user"])
def test_no_auth_user(kind: str, who: str, tmp_path: Path) -> None:
    """A client without credentials is the no_auth_user: in its account, with its permissions."""
    name = LIMITED.public if who == "nkey" else "b"
    with serve(kind, tmp_path, _config(name)) as server:
        signer = _nkey_peer(server.port, SIGNER)
        anonymous = Peer(server.port)
        signer.do(b"SUB > 1\r\n")
        anonymous.do(b"SUB feed.> 5\r\n")
        answer = anonymous.do(b"PUB ok.1 1\r\n1\r\nPUB nope 1\r\n2\r\n")
        got_signer = signer.do(b"PUB feed.x 1\r\nf\r\n")  # with its own, echoed
        got_anonymous = anonymous.received()
        wrong = WireClient(server.port)
        bad_login = wrong.exchange(b'CONNECT {"user": "b", "pass": "wrong"}\r\n')
        wrong.close()
    if who == "nkey":  # LIMITED in A: publish ok.> only
        assert answer == [(b"-ERR 'Permissions Violation for Publish to \"nope\"'",)]
        assert got_signer == [msg("ok.1", "1", "1"), msg("feed.x", "1", "f")]
        assert got_anonymous == [msg("feed.x", "5", "f")]
    else:  # b in B: its own subject space, and A's feed through the import
        assert answer == []
        assert got_signer == [msg("feed.x", "1", "f")]
        assert got_anonymous == [msg("feed.x", "5", "f")]
    assert bad_login == (VIOLATION, True)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        (_config("ghost"), 'no_auth_user: "ghost" not present as user or nkey in authorization block'),
        ("no_auth_user: a\n", 'no_auth_user: "a" present, but users/nkeys are not defined'),
        ("no_auth_user: a\nauthorization { token: abc }\n", "present, but users/nkeys are not defined"),
        ("accounts { A { users: [{nkey: UBAD}] } }\n", "Not a valid public nkey for a user"),
        (f"accounts {{ A {{ users: [{{nkey: {SIGNER.public}, password: x}}] }} }}\n",
         "Nkey users do not take usernames or passwords"),
        (f"accounts {{ A {{ users: [{{nkey: {SIGNER.public}}}] }}\n"
         f" B {{ users: [{{nkey: {SIGNER.public}}}] }} }}\n",
         f'Duplicate nkey "{SIGNER.public}" detected'),
    ],
    # Fixed ids: the generated keys differ in every process (pytest-xdist's workers must collect alike).
    ids=["unknown no_auth_user", "no_auth_user without users", "no_auth_user with a token", "bad nkey",
         "nkey with a password", "duplicate nkey"],
)  # fmt: skip
def test_refused_alike(kind: str, text: str, phrase: str, tmp_path: Path) -> None:
    assert phrase in refusal(kind, tmp_path, text)
