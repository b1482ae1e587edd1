"""The system account's requests: answered as nats-server answers them (the same JSON keys; values
differ by nature), to system account users only."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nats.errors
import pytest

from tests.system.common import KINDS, SERVER_ONLY_THEIRS, ask, assert_same_shape, client, system_server

# (subject, request body): `{id}` is the server's id.
REQUESTS: list[tuple[str, dict[str, Any] | None]] = [
    ("$SYS.REQ.SERVER.PING", None),
    ("$SYS.REQ.SERVER.PING.STATSZ", None),
    ("$SYS.REQ.SERVER.{id}.STATSZ", None),
    ("$SYS.REQ.SERVER.PING.CONNZ", {"auth": True, "subscriptions": True}),
    ("$SYS.REQ.SERVER.PING.CONNZ", {"subscriptions_detail": True, "acc": "A"}),
    ("$SYS.REQ.SERVER.{id}.CONNZ", {"state": 1}),
    ("$SYS.REQ.SERVER.PING.SUBSZ", None),
    ("$SYS.REQ.SERVER.PING.SUBSZ", {"subscriptions": True, "test": "work.x", "account": "A"}),
    ("$SYS.REQ.SERVER.PING.ACCOUNTZ", None),
    ("$SYS.REQ.SERVER.PING.ACCOUNTZ", {"account": "A"}),
    ("$SYS.REQ.SERVER.PING.HEALTHZ", None),
    ("$SYS.REQ.SERVER.PING.ROUTEZ", None),
    ("$SYS.REQ.SERVER.PING.GATEWAYZ", None),
    ("$SYS.REQ.SERVER.PING.LEAFZ", None),
    ("$SYS.REQ.SERVER.PING.CONNZ", {"server_name": "{name}", "exact_match": True}),
    ("$SYS.REQ.ACCOUNT.A.CONNZ", None),
    ("$SYS.REQ.ACCOUNT.A.SUBSZ", None),
    ("$SYS.REQ.ACCOUNT.A.STATZ", None),
    ("$SYS.REQ.ACCOUNT.PING.STATZ", None),
    ("$SYS.REQ.ACCOUNT.A.CONNS", None),
    ("$SYS.REQ.ACCOUNT.NOPE.INFO", None),
]
# Asked by a user of account A, answered in A about A (nats-server's system imports).
SCOPED = ["$SYS.REQ.USER.INFO", "$SYS.REQ.SERVER.PING.CONNZ", "$SYS.REQ.ACCOUNT.PING.CONNZ",
          "$SYS.REQ.ACCOUNT.PING.STATZ"]  # fmt: skip
# What nats-server shows that pynatsd has no such thing for: the service imports behind the scoped
# requests above (pynatsd answers them in each account directly).
ONLY_THEIRS = {
    "$SYS.REQ.SERVER.PING.ACCOUNTZ {'account': 'A'}": {"data.account_detail.imports"},
}


def _key(subject: str, body: dict[str, Any] | None) -> str:
    return f"{subject} {body}" if body is not None else subject


async def _collect(kind: str, tmp_path: Path) -> dict[str, Any]:
    """Every request's reply on `kind`, with a client of A connected and subscribed."""
    with system_server(kind, tmp_path) as server:
        async with client(server.url, "a", name="in-a") as a, client(server.url, "sys") as sys:
            await a.subscribe("work.>")
            await a.publish("work.x", b"hello")
            await a.flush()
            ident = await ask(sys, "$SYS.REQ.SERVER.PING.IDZ")
            replies: dict[str, Any] = {"IDZ": ident}
            for subject, body in REQUESTS:
                subj = subject.format(id=ident["id"])
                filled = {k: (v.format(name=ident["name"]) if isinstance(v, str) else v)
                          for k, v in (body or {}).items()}  # fmt: skip
                replies[_key(subject, body)] = await ask(sys, subj, filled if body is not None else None)
            replies["VARZ"] = await ask(sys, f"$SYS.REQ.SERVER.{ident['id']}.VARZ")
            bad = await sys.request("$SYS.REQ.SERVER.PING.CONNZ", b"{x", timeout=5)
            replies["bad body"] = json.loads(bad.data)
            # A filter that leaves this server out: no answer at all.
            with pytest.raises(nats.errors.TimeoutError):
                await sys.request("$SYS.REQ.SERVER.PING.VARZ", b'{"server_name": "elsewhere"}', timeout=0.5)
            # In its own account a user asks who it is, and about its account's connections only.
            for subject in SCOPED:
                replies[f"A {subject}"] = await ask(a, subject)
            # Nothing else of it reaches a user of another account.
            for subject in ("$SYS.REQ.SERVER.PING", "$SYS.REQ.SERVER.PING.VARZ", "$SYS.REQ.ACCOUNT.A.CONNZ",
                            "$SYS.REQ.ACCOUNT.A.INFO", "$SYS.REQ.SERVER.PING.ACCOUNTZ"):  # fmt: skip
                with pytest.raises(nats.errors.NoRespondersError):
                    await a.request(subject, b"", timeout=2)
            return replies


@pytest.fixture(scope="module")
def replies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Both servers' replies to the same requests (collected once for the module)."""
    out = {}
    for kind in KINDS:
        out[kind] = asyncio.run(_collect(kind, tmp_path_factory.mktemp(kind)))
    return out


@pytest.mark.parametrize(
    "key", ["IDZ", "bad body"] + [_key(s, b) for s, b in REQUESTS] + [f"A {s}" for s in SCOPED]
)
def test_same_shape_as_nats_server(replies: dict[str, dict[str, Any]], key: str) -> None:
    ours, theirs = replies["pynatsd"][key], replies["nats-server"][key]
    assert_same_shape(ours, theirs, only_theirs=SERVER_ONLY_THEIRS | ONLY_THEIRS.get(key, set()))


def test_values(replies: dict[str, dict[str, Any]]) -> None:
    """What the replies say, where both servers must agree."""
    for kind, got in replies.items():
        ident = got["IDZ"]
        ping = got["$SYS.REQ.SERVER.PING"]
        assert ping["server"]["id"] == ident["id"] and ping["statsz"]["connections"] == 2, kind
        # ... and the start-up probe of tests/servers.py, which has come and gone
        assert got["$SYS.REQ.SERVER.{id}.STATSZ"]["statsz"]["total_connections"] == 3, kind
        conns = got["$SYS.REQ.ACCOUNT.A.CONNZ"]["data"]
        assert [c["name"] for c in conns["connections"]] == ["in-a"], kind
        subs = got["$SYS.REQ.ACCOUNT.A.SUBSZ"]["data"]
        assert "work.>" in [s["subject"] for s in subs["subscriptions_list"]], kind
        assert {s["account"] for s in subs["subscriptions_list"]} == {"A"}, kind
        tested = got["$SYS.REQ.SERVER.PING.SUBSZ {'subscriptions': True, 'test': 'work.x', 'account': 'A'}"]
        assert [s["subject"] for s in tested["data"]["subscriptions_list"]] == ["work.>"], kind
        statz = got["$SYS.REQ.ACCOUNT.A.STATZ"]["data"]["account_statz"]
        assert [(s["acc"], s["conns"], s["received"]["msgs"]) for s in statz] == [("A", 1, 1)], kind
        accounts = got["$SYS.REQ.SERVER.PING.ACCOUNTZ"]["data"]
        assert accounts["system_account"] == "SYS" and {"A", "SYS", "$G"} <= set(accounts["accounts"]), kind
        detail = got["$SYS.REQ.SERVER.PING.ACCOUNTZ {'account': 'A'}"]["data"]["account_detail"]
        assert (detail["account_name"], detail["client_connections"]) == ("A", 1), kind
        assert got["$SYS.REQ.SERVER.PING.HEALTHZ"]["data"] == {"status": "ok", "status_code": 200}, kind
        assert got["$SYS.REQ.ACCOUNT.A.CONNS"]["conns"] == 1, kind
        assert got["$SYS.REQ.ACCOUNT.A.CONNS"]["type"] == "io.nats.server.advisory.v1.account_connections"
        missing = got["$SYS.REQ.ACCOUNT.NOPE.INFO"]
        assert missing["error"] == {"code": 500, "description": "Account NOPE does not exist"}, kind
        assert got["bad body"]["error"]["code"] == 400, kind
        assert got["VARZ"]["data"]["server_id"] == ident["id"], kind
        assert got["VARZ"]["data"]["system_account"] == "SYS", kind
        assert got["A $SYS.REQ.USER.INFO"]["data"] == {"user": "a", "account": "A", "account_name": "A"}, kind
        for subject in ("$SYS.REQ.SERVER.PING.CONNZ", "$SYS.REQ.ACCOUNT.PING.CONNZ"):
            assert [c["name"] for c in got[f"A {subject}"]["data"]["connections"]] == ["in-a"], kind
        scoped_statz = got["A $SYS.REQ.ACCOUNT.PING.STATZ"]["data"]["account_statz"]
        assert [s["acc"] for s in scoped_statz] == ["A"], kind
        # In A: the four scoped services and the client's subscription, as nats-server counts them.
        assert statz[0]["num_subscriptions"] == 5, kind


USER_INFO_CONFIG = """
accounts {
  SYS { users = [{user: sys, password: sys}] }
  B { users = [{user: b, password: b, permissions: {
        publish: {allow: ["x.>", "_INBOX.>", "$SYS.REQ.USER.INFO"], deny: ["x.secret"]},
        subscribe: {deny: ["y"]}, allow_responses: {max: 3, expires: "1m"}}}] }
}
system_account: SYS
"""


@pytest.mark.parametrize("kind", KINDS)
async def test_user_info_shows_permissions(kind: str, tmp_path: Path) -> None:
    """`$SYS.REQ.USER.INFO` tells a user its account and permissions in nats-server's words."""
    from tests.servers import server_with_config
    from tests.system.common import require

    require(kind)
    with server_with_config(kind, tmp_path / "b.conf", USER_INFO_CONFIG) as server:
        async with client(server.url, "b") as b:
            info = await ask(b, "$SYS.REQ.USER.INFO")
    for side in info["data"].get("permissions", {}).values():
        for key in ("allow", "deny"):  # nats-server's order varies from run to run
            if isinstance(side, dict) and key in side:
                side[key] = sorted(
                    side[key], key=["x.>", "_INBOX.>", "$SYS.REQ.USER.INFO", "x.secret", "y"].index
                )
    assert info["data"] == {
        "user": "b",
        "account": "B",
        "account_name": "B",
        "permissions": {
            "publish": {"allow": ["x.>", "_INBOX.>", "$SYS.REQ.USER.INFO"], "deny": ["x.secret"]},
            "subscribe": {"deny": ["y"]},
            "responses": {"max": 3, "ttl": 60_000_000_000},
        },
    }


PING_ACCOUNT_CONFIG = """
accounts {
  SYS { users = [{user: sys, password: sys}] }
  A { users = [{user: a, password: a}] }
  PING { users = [{user: ping, password: ping}] }
}
system_account: SYS
"""


async def test_scoped_requests_stay_in_their_account(tmp_path: Path) -> None:
    """A user's scoped requests tell about its own account only, whatever the body asks, even from an
    account named like the broadcast token. Stricter than nats-server 2.15.1, which answers a user of an
    account named `PING` with the statistics of every account its body lists."""
    from tests.servers import server_with_config

    kind = "pynatsd"
    with server_with_config(kind, tmp_path / "ping.conf", PING_ACCOUNT_CONFIG) as server:
        async with client(server.url, "a"), client(server.url, "ping") as ping:
            body = json.dumps({"accounts": ["A", "SYS"], "include_unused": True, "acc": "A"}).encode()
            for subject in ("$SYS.REQ.ACCOUNT.PING.STATZ", "$SYS.REQ.SERVER.PING.CONNZ"):
                reply = json.loads((await ping.request(subject, body, timeout=5)).data)
                data = reply["data"]
                if "account_statz" in data:
                    assert [s["acc"] for s in data["account_statz"]] == ["PING"], kind
                else:
                    assert [c.get("account", "PING") for c in data["connections"]] in ([], ["PING"]), kind
                    assert data["num_connections"] == 1, kind


@pytest.mark.parametrize("kind", KINDS)
async def test_kick_and_lame_duck_a_client(kind: str, tmp_path: Path) -> None:
    """`$SYS.REQ.SERVER.<id>.LDM` sends one client an INFO with `ldm`; `.KICK` closes it (`Kicked`)."""
    from tests.wire import WireClient

    with system_server(kind, tmp_path) as server:
        async with client(server.url, "sys") as sys:
            ident = await ask(sys, "$SYS.REQ.SERVER.PING.IDZ")
            with WireClient(server.port) as wire:
                wire.exchange(b'CONNECT {"user":"a","pass":"a","protocol":1,"verbose":false}\r\n')
                cid = wire.info["client_id"]
                ldm = await ask(sys, f"$SYS.REQ.SERVER.{ident['id']}.LDM", {"cid": cid})
                assert set(ldm) == {"server"}, kind
                infos = []  # (nats-server 2.12+ confirms the account in an INFO after the first PONG)
                while not any(i.get("ldm") for i in infos):
                    line, _ = wire.read_until(b"\r\n", timeout=5)
                    assert line.startswith(b"INFO "), (kind, line)
                    infos.append(json.loads(line[5:]))
                kicked = await ask(sys, f"$SYS.REQ.SERVER.{ident['id']}.KICK", {"cid": cid})
                assert set(kicked) == {"server"}, kind
                closed = await ask(sys, f"$SYS.REQ.SERVER.{ident['id']}.CONNZ", {"cid": cid, "state": 1})
                assert closed["data"]["connections"][0]["reason"] == "Kicked", kind
            for verb, problem in (("KICK", "no such client or leafnode id"), ("LDM", "no such client id")):
                missing = await ask(sys, f"$SYS.REQ.SERVER.{ident['id']}.{verb}", {"cid": 99999})
                assert missing["error"] == {"code": 500, "description": problem}, kind
                assert "data" not in missing, kind


NO_SYSTEM_CONFIG = """
accounts {
  SYS { users = [{user: sys, password: sys}] }
  A { users = [{user: a, password: a}] }
}
no_system_account: true
http_port: %d
"""


@pytest.mark.parametrize("kind", KINDS)
async def test_no_system_account(kind: str, tmp_path: Path) -> None:
    """`no_system_account`: no system account, no services, none named in /varz or /accountz."""
    import aiohttp

    from tests.servers import free_port, server_with_config
    from tests.system.common import require

    require(kind)
    http_port = free_port()
    with server_with_config(kind, tmp_path / "nosys.conf", NO_SYSTEM_CONFIG % http_port) as server:
        async with client(server.url, "sys") as sys, client(server.url, "a") as a:
            for nc in (sys, a):
                for subject in ("$SYS.REQ.SERVER.PING", "$SYS.REQ.USER.INFO", "$SYS.REQ.SERVER.PING.CONNZ"):
                    with pytest.raises(nats.errors.NoRespondersError):
                        await nc.request(subject, b"", timeout=2)
        async with aiohttp.ClientSession() as session:
            for path in ("/varz", "/accountz"):
                async with session.get(f"http://127.0.0.1:{http_port}{path}") as resp:
                    assert "system_account" not in json.loads(await resp.text()), (kind, path)


# Bodies an ordinary user can send to an imported `$SYS` request: nats-server's error for each.
DEEP = b"[" * 1100 + b"]" * 1100
MALFORMED = [b"{", b"{x", DEEP, b"[" * 20000 + b"]" * 20000, b'{"x":' + DEEP + b"}", b'{"server_name": 5}',
             b"[]", b'{"tags": "x"}', b"{} {}"]  # fmt: skip


async def _malformed_answers(kind: str, tmp_path: Path) -> tuple[list[Any], str]:
    with system_server(kind, tmp_path) as server:
        async with client(server.url, "a") as a:
            answers = []
            for body in MALFORMED:
                reply = json.loads((await a.request("$SYS.REQ.SERVER.PING.CONNZ", body, timeout=5)).data)
                answers.append(reply.get("error") or sorted(reply.get("data", {})))
        return answers, server.log()


async def test_malformed_bodies_answered_as_nats_server(tmp_path: Path) -> None:
    """A deep or mistyped body gets nats-server's error (a 1,100-deep one logged a RecursionError
    traceback per request), and nothing goes to the log."""
    want, _ = await _malformed_answers("nats-server", tmp_path)
    got, log = await _malformed_answers("pynatsd", tmp_path)
    assert got == want
    assert "Traceback" not in log and "RecursionError" not in log
