"""Imports and exports in operator mode (account JWT claims), side by side with nats-server: public and
token-protected exports, activation tokens verified against the exporting account (subject, type, signer,
expiry, revocations), `local_subject` and the older `to` forms, and exports withdrawn by an account update
pushed to the `full` resolver."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.accounts.harness import KINDS, Peer, by_sid, frames, hmsg, msg, request_info, serve
from tests.jwt.issuer import Key, account_jwt, b64, creds, user_jwt
from tests.wire import WireClient


class Operator:
    """An operator, its system account, and accounts issued with exports/imports."""

    def __init__(self) -> None:
        self.key, self.system = Key("O"), Key("A")
        self.exp, self.imp, self.other, self.rev = Key("A"), Key("A"), Key("A"), Key("A")
        self.exp_signer = Key("A")
        self.users: dict[str, tuple[str, Key]] = {}

    def activation(
        self, importer: Key, subject: str, kind: str, signer: Key | None = None, **claims: Any
    ) -> str:
        """An activation JWT the exporter (or its signing key `signer`) grants `importer`."""
        nats_claims: dict[str, Any] = {"subject": subject, "kind": kind}
        if signer is not None:
            nats_claims["issuer_account"] = self.exp.public
        return (signer or self.exp).issue(importer.public, "activation", nats_claims, **claims)

    def exports(self, revoked: dict[str, int] | None = None) -> list[dict[str, Any]]:
        return [
            {"name": "feed", "subject": "feed.>", "type": "stream"},
            {"name": "priv", "subject": "priv.>", "type": "stream", "token_req": True,
             "revocations": revoked or {}},
            {"name": "svc", "subject": "svc.>", "type": "service"},
            {"name": "psvc", "subject": "psvc", "type": "service", "token_req": True,
             "response_type": "Stream", "response_threshold": 2_000_000_000},
        ]  # fmt: skip

    def accounts(self, revoked: dict[str, int] | None = None) -> dict[str, str]:
        exp = self.exp.public
        good = {
            "priv": self.activation(self.imp, "priv.>", "stream"),
            "psvc": self.activation(self.imp, "psvc", "service", signer=self.exp_signer),
        }
        expired = self.activation(self.other, "priv.>", "stream", exp=int(time.time()) - 10)
        imports = [
            {"account": exp, "subject": "feed.>", "type": "stream", "local_subject": "in.>"},
            {"account": exp, "subject": "priv.one", "type": "stream", "token": good["priv"]},
            {"account": exp, "subject": "svc.a", "type": "service", "local_subject": "req"},
            {
                "account": exp,
                "subject": "old",
                "type": "service",
                "to": "svc.old",
            },  # older form: local, remote
            {"account": exp, "subject": "psvc", "type": "service", "token": good["psvc"]},
        ]
        other_imports = [
            {"account": exp, "subject": "feed.x", "type": "stream", "to": "pre"},  # `to`: a prefix
            {"account": exp, "subject": "priv.three", "type": "stream", "token": expired},
            {"account": exp, "subject": "priv.one", "type": "stream"},  # no token
            {"account": exp, "subject": "psvc", "type": "service"},  # no token
        ]
        rev_imports = [{"account": exp, "subject": "priv.one", "type": "stream",
                        "token": self.activation(self.rev, "priv.>", "stream")}]  # fmt: skip
        return {
            self.system.public: account_jwt(self.key, self.system),
            exp: account_jwt(self.key, self.exp, exports=self.exports(revoked),
                             signing_keys=[self.exp_signer.public]),
            self.imp.public: account_jwt(self.key, self.imp, imports=imports),
            self.other.public: account_jwt(self.key, self.other, imports=other_imports),
            self.rev.public: account_jwt(self.key, self.rev, imports=rev_imports),
        }  # fmt: skip

    def config(self, directory: Path, resolver: str = "MEMORY") -> str:
        (directory / "op.jwt").write_text(
            self.key.issue(self.key.public, "operator", {"system_account": self.system.public})
        )
        if resolver == "MEMORY":
            preload = "\n".join(f"  {name}: {token}" for name, token in self.accounts().items())
            where = f"resolver: MEMORY\nresolver_preload: {{\n{preload}\n}}\n"
        else:
            jwt_dir = directory / "jwt"
            jwt_dir.mkdir(exist_ok=True)
            for name, token in self.accounts().items():
                (jwt_dir / f"{name}.jwt").write_text(token)
            where = f'resolver: {{ type: full, dir: "{jwt_dir}" }}\n'
        return f'operator: "{directory / "op.jwt"}"\nsystem_account: {self.system.public}\n{where}'

    def login(self, account: Key, nonce: str) -> dict[str, object]:
        user = Key("U")
        token = user_jwt(account, user)
        return {"jwt": token, "sig": b64(user.sign(nonce.encode()))}


def _peer(port: int, op: Operator, account: Key, **kw: Any) -> Peer:
    return Peer(port, login_with=lambda nonce: op.login(account, nonce), **kw)


@pytest.mark.parametrize("kind", KINDS)
def test_streams_from_jwt_claims(kind: str, tmp_path: Path) -> None:
    op = Operator()
    with serve(kind, tmp_path, op.config(tmp_path)) as server:
        exp = _peer(server.port, op, op.exp)
        imp, other, rev = (_peer(server.port, op, acc) for acc in (op.imp, op.other, op.rev))
        for peer in (imp, other, rev):
            peer.do(b"SUB > 1\r\n")
        exp.do(
            b"PUB feed.x 1\r\n1\r\nPUB priv.one 1\r\n2\r\nPUB priv.two 1\r\n3\r\nPUB priv.three 1\r\n4\r\n"
        )
        got_imp, got_other, got_rev = imp.received(), other.received(), rev.received()
    assert got_imp == [msg("in.x", "1", "1"), msg("priv.one", "1", "2")]
    assert got_other == [msg("pre.feed.x", "1", "1")]  # its token-protected imports were refused
    assert got_rev == [msg("priv.one", "1", "2")]


BROKEN_TOKENS = {
    "made for another account": lambda op: op.activation(op.imp, "priv.>", "stream"),
    "of another kind": lambda op: op.activation(op.other, "priv.>", "service"),
    "for another subject": lambda op: op.activation(op.other, "priv.two", "stream"),
    "signed by a stranger": lambda op: Key("A").issue(op.other.public, "activation",
                                                      {"subject": "priv.>", "kind": "stream"}),
    "not a JWT": lambda op: "not.a.jwt",
}  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(BROKEN_TOKENS))
def test_account_with_a_broken_activation_is_not_valid(kind: str, case: str, tmp_path: Path) -> None:
    """The jwt library's validation of an account's imports: a token that does not fit its import makes
    the whole account JWT invalid, so its users cannot connect."""
    op = Operator()
    token = BROKEN_TOKENS[case](op)
    broken = account_jwt(op.key, op.other, imports=[
        {"account": op.exp.public, "subject": "priv.one", "type": "stream", "token": token}])  # fmt: skip
    text = op.config(tmp_path)
    text = text.replace(text.split(op.other.public + ": ")[1].split("\n")[0], broken)
    with serve(kind, tmp_path, text) as server, WireClient(server.port) as client:
        login = op.login(op.other, client.info["nonce"])
        answer = client.exchange(f"CONNECT {json.dumps(login)}\r\n".encode())
    assert answer == (b"-ERR 'Authorization Violation'\r\n", True)


@pytest.mark.parametrize("kind", KINDS)
def test_revoked_activation(kind: str, tmp_path: Path) -> None:
    op = Operator()
    text = op.config(tmp_path)
    accounts = op.accounts(revoked={op.rev.public: int(time.time()) + 5})
    text = text.replace(text.split(op.exp.public + ": ")[1].split("\n")[0], accounts[op.exp.public])
    with serve(kind, tmp_path, text) as server:
        exp, rev = _peer(server.port, op, op.exp), _peer(server.port, op, op.rev)
        rev.do(b"SUB > 1\r\n")
        exp.do(b"PUB priv.one 1\r\n2\r\n")
        got = rev.received()
    assert got == []


@pytest.mark.parametrize("kind", KINDS)
def test_services_from_jwt_claims(kind: str, tmp_path: Path) -> None:
    op = Operator()
    with serve(kind, tmp_path, op.config(tmp_path)) as server:
        exp = _peer(server.port, op, op.exp)
        imp = _peer(server.port, op, op.imp)
        other = _peer(server.port, op, op.other, no_responders=True)
        exp.do(b"SUB svc.> 1\r\nSUB psvc 2\r\n")
        imp.do(b"SUB _INBOX.> 9\r\nPUB req _INBOX.1 1\r\na\r\n")
        imp.do(b"PUB old _INBOX.2 1\r\nb\r\nPUB psvc _INBOX.3 1\r\nc\r\n")
        refused = other.do(b"SUB _INBOX.> 9\r\nPUB psvc _INBOX.4 1\r\nd\r\n")
        out, _ = exp.exchange(b"")
        replies = re.findall(rb"_R_\.\S+", out)
        exp.do(b"PUB %s 2\r\nr1\r\nPUB %s 2\r\nr2\r\nPUB %s 2\r\ns1\r\nPUB %s 2\r\ns2\r\n" % (
            replies[0], replies[0], replies[2], replies[2]))  # fmt: skip
        got = by_sid(imp.received())
    info = request_info(op.imp.public)
    assert by_sid(frames(out)) == {
        b"1": [hmsg("svc.a", "1", "a", info, "_R_"), hmsg("svc.old", "1", "b", info, "_R_")],
        b"2": [hmsg("psvc", "2", "c", info, "_R_")],
    }
    assert refused == [(b"HMSG", b"_INBOX.4", b"9", b"", b"NATS/1.0 503\r\nNats-Subject: psvc\r\n\r\n", b"")]
    # svc is a singleton, psvc streams its responses.
    assert got == {b"9": [msg("_INBOX.1", "9", "r1"), msg("_INBOX.3", "9", "s1"), msg("_INBOX.3", "9", "s2")]}


@pytest.mark.parametrize("kind", KINDS)
async def test_export_withdrawn_by_an_update(kind: str, tmp_path: Path) -> None:
    """An account update pushed to the `full` resolver that drops an export ends the import at once."""
    op = Operator()
    sys_user = Key("U")
    sys_creds = creds(tmp_path / "sys.creds", user_jwt(op.system, sys_user), sys_user)
    with serve(kind, tmp_path, op.config(tmp_path, resolver="full")) as server:
        exp, imp = _peer(server.port, op, op.exp), _peer(server.port, op, op.imp)
        imp.do(b"SUB > 1\r\n")
        exp.do(b"PUB feed.x 1\r\n1\r\n")
        before = imp.received()
        withdrawn = account_jwt(op.key, op.exp, exports=op.exports()[1:], signing_keys=[op.exp_signer.public])
        sys = await nats.connect(server.url, user_credentials=str(sys_creds))
        answer = json.loads((await sys.request("$SYS.REQ.CLAIMS.UPDATE", withdrawn.encode(), timeout=5)).data)
        await sys.close()
        exp.do(b"PUB feed.x 1\r\n2\r\nPUB priv.one 1\r\n3\r\n")
        after = imp.received()
    assert answer["data"]["code"] == 200
    assert before == [msg("in.x", "1", "1")]
    assert after == [msg("priv.one", "1", "3")]


@pytest.mark.parametrize("kind", KINDS)
def test_activation_expiring_ends_the_import(kind: str, tmp_path: Path) -> None:
    """At its activation's expiry an import ends. (nats-server finds the import to end by the activation's
    subject, so it misses imports narrower than their activation and keeps them; pynatsd ends those too.)"""
    op = Operator()
    token = op.activation(op.other, "priv.one", "stream", exp=int(time.time()) + 2)
    short = account_jwt(op.key, op.other, imports=[
        {"account": op.exp.public, "subject": "priv.one", "type": "stream", "token": token}])  # fmt: skip
    text = op.config(tmp_path)
    text = text.replace(text.split(op.other.public + ": ")[1].split("\n")[0], short)
    with serve(kind, tmp_path, text) as server:
        exp, other = _peer(server.port, op, op.exp), _peer(server.port, op, op.other)
        other.do(b"SUB > 1\r\n")
        exp.do(b"PUB priv.one 1\r\n1\r\n")
        before = other.received()
        time.sleep(3.5)
        exp.do(b"PUB priv.one 1\r\n2\r\n")
        after = other.received()
    assert before == [msg("priv.one", "1", "1")]
    assert after == []


@pytest.mark.parametrize("kind", KINDS)
def test_import_cycle_does_not_loop(kind: str, tmp_path: Path) -> None:
    """Two accounts importing each other's `svc`: the import that would close the cycle is skipped (which
    one depends on the order the accounts are loaded in), so a request reaches each responder once at most."""
    op = Operator()
    x, y = op.exp, op.imp
    svc = [{"name": "svc", "subject": "svc", "type": "service"}]
    text = op.config(tmp_path)
    for me, other in ((x, y), (y, x)):
        imports = [{"account": other.public, "subject": "svc", "type": "service"}]
        token = account_jwt(op.key, me, exports=svc, imports=imports)
        text = text.replace(text.split(me.public + ": ")[1].split("\n")[0], token)
    with serve(kind, tmp_path, text) as server:
        px, py = _peer(server.port, op, x), _peer(server.port, op, y)
        px.do(b"SUB svc 1\r\n")
        py.do(b"SUB svc 1\r\n")
        own = px.do(b"PUB svc 1\r\nq\r\n")  # X's responder is X's own subscriber: echoed to it
        got_y = py.received()
        again = px.do(b"PUB svc 1\r\nq\r\n")
    assert [f[5] for f in own] == [b"q"]
    assert [f[5] for f in got_y] in ([], [b"q"])
    assert [f[5] for f in again] == [b"q"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "export",
    [{"subject": "lat", "type": "service", "service_latency": {"sampling": 100, "results": "lat.r"}}],
    ids=["service latency"],
)
def test_unimplemented_export_features_fail_closed(kind: str, export: dict[str, Any], tmp_path: Path) -> None:
    """pynatsd does not implement these: an account JWT that uses them admits nobody (nats-server admits)."""
    op = Operator()
    text = op.config(tmp_path)
    token = account_jwt(op.key, op.exp, exports=[export])
    text = text.replace(text.split(op.exp.public + ": ")[1].split("\n")[0], token)
    with serve(kind, tmp_path, text) as server, WireClient(server.port) as client:
        login = {**op.login(op.exp, client.info["nonce"]), "verbose": False}
        answer = client.exchange(f"CONNECT {json.dumps(login)}\r\n".encode())
    refused = (b"-ERR 'Authorization Violation'\r\n", True)
    assert answer == (refused if kind == "pynatsd" else (b"", False))


@pytest.mark.parametrize("kind", KINDS)
def test_account_token_position_in_jwt(kind: str, tmp_path: Path) -> None:
    """`account_token_position`: an account imports the branch of the export named by its public key."""
    op = Operator()
    feed = [{"name": "feed", "subject": "acc.*.feed", "type": "stream", "account_token_position": 2}]
    own = f"acc.{op.imp.public}.feed"
    text = op.config(tmp_path)
    for account, exports, imports in (
        (op.exp, feed, []),
        (op.imp, [], [{"account": op.exp.public, "subject": own, "type": "stream", "local_subject": "feed"}]),
        (
            op.other,
            [],
            [{"account": op.exp.public, "subject": own, "type": "stream", "local_subject": "feed"}],
        ),
    ):
        token = account_jwt(op.key, account, exports=exports, imports=imports)
        text = text.replace(text.split(account.public + ": ")[1].split("\n")[0], token)
    with serve(kind, tmp_path, text) as server:
        exp, imp, other = (_peer(server.port, op, acc) for acc in (op.exp, op.imp, op.other))
        imp.do(b"SUB feed 1\r\n")
        other.do(b"SUB feed 1\r\n")
        exp.do(b"PUB %s 1\r\nx\r\nPUB acc.%s.feed 1\r\ny\r\n" % (own.encode(), op.other.public.encode()))
        got_imp, got_other = imp.received(), other.received()
    assert got_imp == [msg("feed", "1", "x")]
    assert got_other == []  # it asked for IMP's branch: not authorized, skipped
