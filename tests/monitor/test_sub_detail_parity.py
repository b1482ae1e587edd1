"""/connz?subs=detail and /subsz?subs=1 show a subscription's sid as the client spelled it, its messages and
its auto-unsubscribe limit, as nats-server does (pynatsd keeps decimal sids as ints and limits in the
client: see pynatsd.broker.sids and delivery.Subscription)."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest

from tests.servers import free_port, require, start_server
from tests.wire import WireClient

SUBS = (
    b'CONNECT {"verbose":false}\r\n'
    b"SUB foo 7\r\nSUB bar 01\r\nSUB baz 1000000\r\nSUB q.a grp x1\r\nUNSUB 7 5\r\n"
    b"PUB foo 1\r\na\r\nPUB foo 1\r\nb\r\nPUB baz 1\r\nc\r\nPUB q.a 1\r\nd\r\nPING\r\n"
)


def _get(port: int, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/{path}", timeout=5) as resp:
        return json.load(resp)


def _shape(detail: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((d["subject"], d.get("qgroup"), d["sid"], d["msgs"], d.get("max")) for d in detail)


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_sub_detail_fields(kind: str) -> None:
    require(kind)
    server = start_server(kind, http_port=free_port())
    try:
        with WireClient(server.port) as client:
            client.send(SUBS)
            client.read_until(b"PONG\r\n")
            time.sleep(0.1)
            conns = _get(server.http_port, "connz?subs=detail")["connections"]
            subsz = _get(server.http_port, "subsz?subs=1&limit=1000")["subscriptions_list"]
    finally:
        server.stop()
    expected = [
        ("bar", None, "01", 0, None),
        ("baz", None, "1000000", 1, None),
        ("foo", None, "7", 2, 5),
        ("q.a", "grp", "x1", 1, None),
    ]
    assert _shape(conns[0]["subscriptions_list_detail"]) == expected
    cid = conns[0]["cid"]
    assert _shape([d for d in subsz if d["cid"] == cid]) == expected  # (nats-server lists its own too)
