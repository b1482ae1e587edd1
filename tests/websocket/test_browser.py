"""A real browser (Debian chromium + chromedriver) through pynatsd's WebSocket listener: a page using the npm
package nats.ws publishes, subscribes, requests and answers; the dashboard's live tail shows messages.

`make test` installs nats.ws (mk/websocket.mk); the test installs it too when run alone and npm is there.
"""

from __future__ import annotations

import asyncio
import functools
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import nats
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.conftest import need_tool
from tests.monitor.test_dashboard import ARTIFACTS, eventually, text_of
from tests.monitor.test_dashboard import browser as browser  # the shared Chromium fixture
from tests.servers import ServerProcess, free_port
from tests.websocket.servers import start_ws_server

PAGE_DIR = Path(__file__).parent / "browser"
NATS_WS = PAGE_DIR / "node_modules" / "nats.ws" / "esm" / "nats.js"
TOKEN = "s3cret"


@pytest.fixture(scope="module")
def nats_ws() -> Path:
    """The nats.ws ES module, installed from package-lock.json if `make` has not done it yet."""
    if not NATS_WS.exists():
        npm = shutil.which("npm")
        need_tool(npm is not None, "npm (to install nats.ws)")
        assert npm is not None
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=PAGE_DIR, check=True, timeout=600)
    return NATS_WS


@pytest.fixture(scope="module")
def ws_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, int]]:
    """pynatsd with monitoring and a WebSocket listener (compression on, a token of its own)."""
    block = f'no_tls: true, compression: true, authorization {{ token: "{TOKEN}" }}'
    server, ws_port = start_ws_server(
        "pynatsd", tmp_path_factory.mktemp("wsbrowser"), block, http_port=free_port()
    )
    yield server, ws_port
    server.stop()


@pytest.fixture(scope="module")
def page_server(nats_ws: Path) -> Iterator[str]:
    """The test page and node_modules over HTTP (ES modules do not load from file://)."""
    handler = functools.partial(_QuietHandler, directory=str(PAGE_DIR))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def severe_errors(driver: webdriver.Chrome) -> list[Any]:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


async def test_nats_ws_in_chromium(
    ws_server: tuple[ServerProcess, int], page_server: str, browser: webdriver.Chrome
) -> None:
    server, ws_port = ws_server
    nc = await nats.connect(server.url)
    try:
        from_browser = await nc.subscribe("from.browser")
        await nc.flush()
        browser.get(f"{page_server}/nats_ws.html?ws=ws://127.0.0.1:{ws_port}&token={TOKEN}")
        status: Callable[[], str] = lambda: text_of(browser, "status")  # noqa: E731
        assert await eventually(lambda: status() != "loading"), status()
        assert status() == "ready", status()
        assert text_of(browser, "echo") == "ping from the browser"
        assert text_of(browser, "large") == "true"  # 300 kB there and back: many frames, compressed
        got = [(await from_browser.next_msg(timeout=5)).data for _ in range(5)]
        assert got == [f"browser message {i}".encode() for i in range(5)]
        reply = await nc.request("browser.svc", b"hello", timeout=5)
        assert reply.data == b"browser says hello"
        for i in range(3):
            await nc.publish("to.browser", f"to the browser {i}".encode())
        await nc.flush()
        items: Callable[[], list[str]] = lambda: [  # noqa: E731
            li.text for li in browser.find_elements(By.CSS_SELECTOR, "#received li")
        ]
        assert await eventually(lambda: len(items()) == 3), items()
        assert items() == [f"to the browser {i}" for i in range(3)]
        ARTIFACTS.mkdir(exist_ok=True)
        assert browser.save_screenshot(str(ARTIFACTS / "websocket-nats-ws.png"))
        assert severe_errors(browser) == []
    finally:
        await nc.close()


async def test_dashboard_live_tail(ws_server: tuple[ServerProcess, int], browser: webdriver.Chrome) -> None:
    server, _ = ws_server
    browser.get(f"http://127.0.0.1:{server.http_port}/")
    tail_status: Callable[[], str] = lambda: text_of(browser, "tail-status")  # noqa: E731

    def start(subject: str, token: str) -> None:
        field = browser.find_element(By.ID, "tail-subject")
        field.clear()
        field.send_keys(subject)
        token_field = browser.find_element(By.ID, "tail-token")
        token_field.clear()
        token_field.send_keys(token)
        browser.find_element(By.ID, "tail-start").click()

    # Wrong credentials: the server's refusal is shown, nothing is tailed.
    start("tail.>", "wrong")
    assert await eventually(lambda: "Authorization Violation" in tail_status()), tail_status()
    start("tail.>", TOKEN)
    assert await eventually(lambda: tail_status() == "tailing tail.>"), tail_status()

    nc = await nats.connect(server.url)
    try:
        for i in range(250):  # more than the panel keeps: it shows the newest rows only
            await nc.publish(f"tail.{i % 3}", f"payload {i}".encode(), reply="r.1" if i == 249 else "")
        await nc.publish("elsewhere", b"not tailed")
        await nc.flush()
        rows: Callable[[], list[list[str]]] = lambda: browser.execute_script(  # noqa: E731
            # one snapshot in the page: the panel may redraw between two WebDriver calls
            "return [...document.querySelectorAll('#tail-rows tr.tail-msg')]"
            ".map(tr => [...tr.cells].map(td => td.textContent))"
        )
        assert await eventually(lambda: bool(rows()) and rows()[0][4] == "payload 249"), rows()[:2]
        shown = rows()
        assert len(shown) == 100
        assert shown[0][1:] == ["tail.0", "r.1", "11", "payload 249"]
        assert [r[4] for r in shown] == [f"payload {i}" for i in range(249, 149, -1)]
        assert all(r[1].startswith("tail.") for r in shown)
        assert await eventually(lambda: "250 seen" in text_of(browser, "tail-rate"))
        await nc.publish("tail.big", b"B" * 300_000)  # many frames on the way to the browser
        await nc.flush()
        assert await eventually(lambda: rows()[0][1] == "tail.big"), rows()[:1]
        assert rows()[0][3] == "300000" and rows()[0][4] == "B" * 200 + "…"
        await asyncio.sleep(0)  # let nats-py's reader run before the screenshot
        ARTIFACTS.mkdir(exist_ok=True)
        assert browser.save_screenshot(str(ARTIFACTS / "websocket-dashboard-tail.png"))
    finally:
        await nc.close()
    errors = [e for e in severe_errors(browser) if "tail" not in str(e)]
    assert errors == []
