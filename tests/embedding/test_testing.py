"""pynatsd.testing: an in-process server for tests (on the caller's event loop, or on a thread of its own),
and its pytest plugin, run here in a pytest of its own (its entry point is not installed in this checkout,
so the run names it with `-p`): fixtures per test and per session, JetStream by marker, config text by
indirect parametrisation, and nothing left running, listening or on disk when a test fails."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import nats
import pytest

from pynatsd import testing
from pynatsd.config.parser import ConfigError
from tests.servers import REPO_ROOT
from tests.wire import WireClient


def refuses_connections(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def server_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "pynatsd-testing"]


async def test_a_server_on_this_loop_with_jetstream_in_a_store_removed_afterwards() -> None:
    async with testing.server(jetstream=True) as srv:
        assert srv.url == f"nats://127.0.0.1:{srv.port}"
        client = await nats.connect(srv.url)
        kv = await client.jetstream().create_key_value(bucket="b")
        await kv.put("k", b"v")
        assert (await kv.get("k")).value == b"v"
        await client.close()
        assert Path(srv.store_dir).is_dir()
    assert refuses_connections(srv.port)
    assert not Path(srv.store_dir).parent.exists()


def test_config_text_is_applied_on_a_free_port() -> None:
    config = "port: 4222\nauthorization { user: app, password: s3cret }\n"
    with testing.server_thread(config=config) as srv:
        assert srv.port != 4222  # the free port wins over the file's
        with WireClient(srv.port) as anonymous:
            assert anonymous.info["auth_required"] is True
            out, closed = anonymous.exchange(b'CONNECT {"verbose":false}\r\n')
            assert b"-ERR 'Authorization Violation'" in out and closed
        with WireClient(srv.port) as app:
            out, closed = app.exchange(b'CONNECT {"verbose":false,"user":"app","pass":"s3cret"}\r\n')
            assert out == b"" and not closed


async def test_config_as_a_path_is_read_from_there(tmp_path: Path) -> None:
    conf = tmp_path / "server.conf"
    conf.write_text("max_payload: 4096\n")
    async with testing.server(config=conf) as srv:
        assert srv.server.options.config_file == str(conf)
        client = await nats.connect(srv.url)
        assert client.max_payload == 4096
        await client.close()


def test_a_thread_that_cannot_start_raises_in_the_caller_and_ends() -> None:
    with pytest.raises(ConfigError), testing.server_thread(config="listen {\n"):
        pass
    assert server_threads() == []


INNER_INI = """\
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
addopts = --strict-markers -p no:cacheprovider
filterwarnings = error
"""

INNER_CONFTEST = """\
import threading

import pytest


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):  # after the session fixtures' teardown
    left = [t for t in threading.enumerate() if t.name == "pynatsd-testing"]
    print(f"\\npynatsd-testing threads left: {len(left)}")
"""

INNER_TESTS = """\
import os
import socket
import threading

import nats
import pytest

seen = {}


async def test_request_reply(nats_url):
    client = await nats.connect(nats_url)

    async def shout(msg):
        await msg.respond(msg.data.upper())

    await client.subscribe("shout", cb=shout)
    assert (await client.request("shout", b"hi", timeout=5)).data == b"HI"
    await client.close()


async def test_jetstream_is_off_by_default(nats_url):
    client = await nats.connect(nats_url)
    assert not client._server_info.get("jetstream")
    await client.close()


@pytest.mark.nats_server(jetstream=True)
async def test_the_marker_turns_jetstream_on(nats_server):
    client = await nats.connect(nats_server.url)
    kv = await client.jetstream().create_key_value(bucket="b")
    await kv.put("k", b"v")
    assert (await kv.get("k")).value == b"v"
    await client.close()


@pytest.mark.parametrize("nats_server", [{"config": "authorization { token: s3cret }"}], indirect=True)
async def test_config_text_by_parametrisation(nats_url):
    client = await nats.connect(nats_url, token="s3cret")
    assert client._server_info["auth_required"]
    await client.close()


def test_a_failing_test(nats_server):
    seen["port"], seen["store"] = nats_server.port, nats_server.store_dir
    with socket.create_connection(("127.0.0.1", nats_server.port)) as sock:
        assert sock.recv(5) == b"INFO "  # a sync test reaches it too
    raise AssertionError("failing on purpose, with the server running")


def test_after_the_failure_nothing_is_left():
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", seen["port"])) != 0
    assert not os.path.exists(os.path.dirname(seen["store"]))
    assert [t for t in threading.enumerate() if t.name == "pynatsd-testing"] == []


async def test_the_session_server_has_jetstream(nats_url_session, nats_server_session):
    seen["session"] = nats_server_session.port
    client = await nats.connect(nats_url_session)
    assert (await client.jetstream().account_info()).streams == 0
    await client.close()


def test_the_session_server_is_shared(nats_server_session):
    assert nats_server_session.port == seen["session"]
"""


def run_pytest(directory: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """pytest over `directory` with the plugin named by -p; returns the run and each test's outcome."""
    report = directory / "report.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(directory)])}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "pynatsd.testing.plugin", f"--junitxml={report}", "-q", *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    outcomes = {}
    for case in ET.parse(report).iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[case.attrib["name"]] = ",".join(kinds) or "passed"
    return run, outcomes


def test_the_plugin_fixtures_clean_up_after_passing_and_failing_tests(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text(INNER_INI)
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST)
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    run, outcomes = run_pytest(tmp_path, "-s")
    assert outcomes == {
        "test_request_reply": "passed",
        "test_jetstream_is_off_by_default": "passed",
        "test_the_marker_turns_jetstream_on": "passed",
        "test_config_text_by_parametrisation[nats_server0]": "passed",
        "test_a_failing_test": "failure",
        "test_after_the_failure_nothing_is_left": "passed",
        "test_the_session_server_has_jetstream": "passed",
        "test_the_session_server_is_shared": "passed",
    }, run.stdout + run.stderr
    assert "pynatsd-testing threads left: 0" in run.stdout
