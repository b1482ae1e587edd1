"""The interop suite's drivers (tests/interop: nats.go and nats-py) run their scenarios over ws://, against
pynatsd and nats-server with the same websocket block (libnats has no WebSocket transport)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import need_tool
from tests.interop.drivers import Driver, build_go, go_available, python_driver
from tests.interop.spec import payload, wildcard_expectation
from tests.servers import ServerProcess, nats_server_binary
from tests.websocket.servers import start_ws_server


@pytest.fixture(scope="module", params=["go", "python"])
def driver(request: pytest.FixtureRequest) -> Driver:
    if request.param == "go":
        need_tool(go_available(), "Go toolchain with nats.go (golang-go, golang-github-nats-io-go-nats-dev)")
        return Driver("go", (str(build_go()),))
    return python_driver()


@pytest.fixture(scope="module")
def ws_urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """ws:// URLs of pynatsd and nats-server, each with `websocket { no_tls, compression }`."""
    need_tool(nats_server_binary() is not None, "nats-server")
    tmp: Path = tmp_path_factory.mktemp("wsinterop")
    servers: list[ServerProcess] = []
    urls = {}
    try:
        for kind in ("pynatsd", "nats-server"):
            server, port = start_ws_server(kind, tmp, "no_tls: true, compression: true")
            servers.append(server)
            urls[kind] = f"ws://127.0.0.1:{port}"
        yield urls
    finally:
        for server in servers:
            server.stop()


@pytest.fixture(params=["pynatsd", "nats-server"])
def url(request: pytest.FixtureRequest, ws_urls: dict[str, str]) -> str:
    return ws_urls[str(request.param)]


@pytest.fixture
def subject() -> str:
    return f"ws.{uuid.uuid4().hex[:8]}"


def test_pubsub_payloads(driver: Driver, url: str, subject: str) -> None:
    events = driver.run("pubsub", url, subject, 20)
    assert [bytes.fromhex(e["data"]) for e in events] == [payload(i) for i in range(20)]


def test_wildcards(driver: Driver, url: str, subject: str) -> None:
    events = driver.run("wildcards", url, subject)
    assert {e["pattern"]: e["subjects"] for e in events} == wildcard_expectation(subject)


def test_queue_group(driver: Driver, url: str, subject: str) -> None:
    events = {e["member"]: [int(s) for s in e["seqs"]] for e in driver.run("queue", url, subject, 90)}
    assert events["plain"] == list(range(90))
    assert sorted(seq for i in range(3) for seq in events[f"q{i}"]) == list(range(90))


def test_request_reply(driver: Driver, url: str, subject: str) -> None:
    responder = driver.start("respond", url, subject, 12)
    try:
        responder.expect("ready")
        replies = driver.run("request", url, subject, 12, "new")
        responder.finish()
    finally:
        responder.kill()
    assert [bytes.fromhex(r["data"]) for r in replies] == [b"re:" + payload(i) for i in range(12)]


def test_no_responders(driver: Driver, url: str, subject: str) -> None:
    events = driver.run("noresp", url, subject)
    assert {e["style"]: e["result"] for e in events} == {"new": "no_responders", "old": "no_responders"}


def test_drain(driver: Driver, url: str, subject: str) -> None:
    (event,) = driver.run("drain", url, subject, 200)
    assert (event["processed"], event["closed"]) == (200, True)
