"""Every scenario with the Go (nats.go) and C (libnats) clients, against pynatsd and nats-server."""

from __future__ import annotations

import json
import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.interop.conftest import ServerFactory
from tests.interop.drivers import Driver
from tests.interop.spec import payload, reply_pairs, wildcard_expectation
from tests.servers import ServerProcess

# What each client reports as `lang` in CONNECT (shown by /connz).
CLIENT_LANG = {"go": "go", "c": "C", "python": "python3"}


def connz(server: ServerProcess) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/connz", timeout=5) as resp:
        conns: list[dict[str, Any]] = json.load(resp)["connections"]
    return conns


def test_connect_options(driver: Driver, server: ServerProcess, subject: str) -> None:
    run = driver.start("connect", server.url, subject)
    try:
        info = run.expect("connect")
        run.expect("ready")
        run.send()
        run.finish()
    finally:
        run.kill()
    assert info["headers"] is True
    assert info["max_payload"] == 1048576
    assert info["client_id"] > 0
    # echo off: the connection never gets its own message; echo on: it does.
    assert info["noecho_seen"] == ["from-echo", "sentinel"]
    assert info["echo_seen"] == ["from-noecho", "from-echo", "sentinel"]


def test_connect_name_in_connz(driver: Driver, server: ServerProcess, subject: str) -> None:
    run = driver.start("connect", server.url, subject)
    try:
        run.expect("ready")
        try:
            names = {c.get("name"): c for c in connz(server)}
        finally:
            run.send()
        run.finish()
    finally:
        run.kill()
    for name in (f"interop-{driver.lang}-noecho", f"interop-{driver.lang}-echo"):
        assert name in names, names
        assert names[name]["lang"] == CLIENT_LANG[driver.lang]


def test_server_without_headers(
    native_driver: Driver,
    server_kind: str,
    server_factory: ServerFactory,
    subject: str,
    tmp_path: Path,
) -> None:
    """With no_header_support, Go and C see headers off, refuse header messages, and still work."""
    config = tmp_path / "no-headers.conf"
    config.write_text("no_header_support: true\n")
    srv = server_factory(["-c", str(config)])
    (event,) = native_driver.run("noheaders", srv.url, subject)
    assert event["headers"] is False
    assert "not supported" in event["publish_with_headers"].lower()
    assert event["round_trip"] == "ok"


def test_pubsub_payloads(driver: Driver, server: ServerProcess, subject: str) -> None:
    count = 20
    events = driver.run("pubsub", server.url, subject, count)
    assert [bytes.fromhex(e["data"]) for e in events] == [payload(i) for i in range(count)]
    assert {(e["subject"], e["reply"]) for e in events} == {(subject, "")}
    assert all(e["hdr"] == [] for e in events)


def test_wildcards(driver: Driver, server: ServerProcess, subject: str) -> None:
    events = driver.run("wildcards", server.url, subject)
    got = {e["pattern"]: e["subjects"] for e in events}
    assert got == wildcard_expectation(subject)


def test_queue_group(driver: Driver, server: ServerProcess, subject: str) -> None:
    count = 90
    events = {
        e["member"]: [int(s) for s in e["seqs"]] for e in driver.run("queue", server.url, subject, count)
    }
    assert events["plain"] == list(range(count))
    members = [events[f"q{i}"] for i in range(3)]
    # exactly one queue member gets each message, each member in publish order
    assert sorted(seq for m in members for seq in m) == list(range(count))
    assert all(m == sorted(m) for m in members)
    # random spread: a member left empty by 90 messages would have odds of 3 * (2/3)**90
    assert all(members), members


def test_auto_unsubscribe(driver: Driver, server: ServerProcess, subject: str) -> None:
    (event,) = driver.run("autounsub", server.url, subject, 3, 10)
    assert event["received"] == ["0", "1", "2"]
    # in_msgs counts what the server sent, including anything the client would drop itself
    assert event["in_msgs"] == 3
    assert event["valid"] is False
    if driver.lang != "python":  # nats-py has no "max messages" error for a finished subscription
        assert "max" in event["extra_err"].lower()


def test_flush_and_rtt(driver: Driver, server: ServerProcess) -> None:
    (event,) = driver.run("flush", server.url)
    assert event["rtt_ns"] > 0
    assert event["buffered"] == 0
    assert event["out_msgs"] == 100


@pytest.mark.parametrize("style", ["old", "new"])
def test_request_reply(driver: Driver, server: ServerProcess, subject: str, style: str) -> None:
    count = 12
    responder = driver.start("respond", server.url, subject, count)
    try:
        responder.expect("ready")
        replies = driver.run("request", server.url, subject, count, style)
        responder.finish()
    finally:
        responder.kill()
    assert len(replies) == count
    inboxes = []
    for i, reply in enumerate(replies):
        assert bytes.fromhex(reply["data"]) == b"re:" + payload(i)
        inbox = dict((k, v) for k, v in reply["hdr"] if k == "X-Reply-To")["X-Reply-To"]
        assert reply["subject"] == inbox
        assert reply["hdr"] == reply_pairs(i, driver.lang, driver.lang, style, inbox)
        inboxes.append(inbox.split("."))
    assert all(tokens[0] == "_INBOX" for tokens in inboxes)
    if style == "old":  # a fresh inbox subscription per request
        assert all(len(t) == 2 for t in inboxes)
        assert len({t[1] for t in inboxes}) == count
    else:  # one muxed wildcard subscription: a shared prefix and a token per request
        assert all(len(t) == 3 for t in inboxes)
        assert len({t[1] for t in inboxes}) == 1
        assert len({t[2] for t in inboxes}) == count


def test_no_responders(driver: Driver, server: ServerProcess, subject: str) -> None:
    events = driver.run("noresp", server.url, subject)
    assert {e["style"]: e["result"] for e in events} == {"new": "no_responders", "old": "no_responders"}


def test_drain(driver: Driver, server: ServerProcess, subject: str) -> None:
    (event,) = driver.run("drain", server.url, subject, 200)
    assert event["processed"] == 200
    assert event["closed"] is True
    assert "closed" in event["publish_after"].lower()


def test_slow_consumer_reported(driver: Driver, server: ServerProcess, subject: str) -> None:
    (event,) = driver.run("slow", server.url, subject)
    assert event["reported"] is True
    # the handler holds one message and at most 5 wait: the rest are dropped by the client
    assert event["published"] - 6 <= event["dropped"] < event["published"]


def test_reconnect_delivers_buffered(driver: Driver, server_factory: ServerFactory, subject: str) -> None:
    count = 25
    first = server_factory()
    run = driver.start("reconnect", first.url, subject, count)
    try:
        run.expect("ready")
        first.stop()
        run.expect("disconnected")
        run.expect("buffered")  # libnats reports 0 buffered bytes while reconnecting; delivery is the proof
        server_factory(port=first.port)
        assert run.expect("reconnected")["reconnects"] >= 1
        delivered = run.expect("delivered")
        run.finish()
    finally:
        run.kill()
    assert delivered["seqs"] == [str(i) for i in range(count)]


def test_lame_duck_notice(driver: Driver, server_factory: ServerFactory) -> None:
    """SIGUSR2 puts the server in lame duck mode: every client's lame-duck callback fires."""
    srv = server_factory()
    run = driver.start("ldm", srv.url)
    try:
        run.expect("ready")
        srv.proc.send_signal(signal.SIGUSR2)
        run.expect("lame_duck")
        run.finish()
    finally:
        run.kill()
        srv.stop(signal.SIGKILL)  # in lame duck mode nats-server would hold on for its grace period
