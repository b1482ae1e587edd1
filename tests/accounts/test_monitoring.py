"""/accountz?acc=NAME shows an account's exports, imports and pending response routes as nats-server does
(nats-server's own $SYS service imports aside: pynatsd has no system account in config mode)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.accounts.harness import KINDS, Peer, serve
from tests.servers import free_port

CONFIG = """
http: "127.0.0.1:%d"
accounts {
  A { users: [{user: a, password: a}]
      exports: [{stream: "foo.>"}, {service: "svc.*", accounts: [B]}, {service: st, response_type: stream}] }
  B { users: [{user: b, password: b}]
      imports: [{stream: {account: A, subject: "foo.>"}, prefix: p},
                {service: {account: A, subject: "svc.x"}, to: req}, {service: {account: A, subject: st}}] }
}
"""


def _detail(port: int, account: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/accountz?acc={account}", timeout=5) as answer:
        detail: dict[str, Any] = json.loads(answer.read())["account_detail"]
    imports = [i for i in detail.get("imports", []) if i["account"] != "$SYS"]
    responses = detail.get("responses", {})
    return {
        "exports": sorted(detail.get("exports", []), key=lambda e: e["subject"]),
        "imports": sorted(imports, key=lambda i: (i["type"], i["subject"])),
        "responses": sorted(
            (bool(re.fullmatch(r"_R_\.[0-9A-Za-z]{6}\.[0-9A-Za-z]+", k)), v["subject"], v["account"])
            for k, v in responses.items()
        ),
    }


@pytest.mark.parametrize("kind", KINDS)
def test_accountz_links(kind: str, tmp_path: Path) -> None:
    http = free_port()
    with serve(kind, tmp_path, CONFIG % http) as server:
        a, b = Peer(server.port, "a"), Peer(server.port, "b")
        a.do(b"SUB st 1\r\n")
        b.do(b"SUB _INBOX.> 1\r\nPUB st _INBOX.1 1\r\nq\r\n")
        a.received()
        got_a, got_b = _detail(http, "A"), _detail(http, "B")
    service = {"type": "service", "invalid": False, "share": False, "tracking": False}
    assert got_a["exports"] == [
        {"subject": "foo.>", "type": "stream"},
        {"subject": "st", "type": "service", "response_type": "Streamed"},
        {"subject": "svc.*", "type": "service", "response_type": "Singleton", "approved_accounts": ["B"]},
    ]
    assert got_b["imports"] == [
        {**service, "subject": "st", "account": "A", "to": "st", "local_subject": "st"},
        {**service, "subject": "svc.x", "account": "A", "to": "req", "local_subject": "req"},
        {"subject": "foo.>", "account": "A", "local_subject": "p.foo.>", "type": "stream", "invalid": False,
         "share": False, "tracking": False},
    ]  # fmt: skip
    assert got_a["responses"] == [(True, "_INBOX.1", "B")]  # the pending route of the stream request
