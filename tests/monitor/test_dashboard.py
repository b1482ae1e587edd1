"""The live dashboard in real headless Chromium: it loads, shows live numbers and logs no console errors."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import nats
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from tests.conftest import need_tool
from tests.servers import REPO_ROOT, ServerProcess, free_port, start_server

ARTIFACTS = REPO_ROOT / "test-artifacts"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
)
N_MSGS = 120
PAYLOAD = b"dashboard"


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    chromium = shutil.which("chromium")
    driver_path = shutil.which("chromedriver")
    need_tool(chromium is not None and driver_path is not None, "chromium and chromium-driver")
    assert chromium is not None and driver_path is not None
    profile = tempfile.mkdtemp(prefix="chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={profile}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver path keeps Selenium Manager from trying to download one.
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def text_of(driver: webdriver.Chrome, element_id: str) -> str:
    return str(driver.find_element(By.ID, element_id).text)


async def eventually(check: Callable[[], bool], timeout: float = 20.0) -> bool:
    """Bounded poll: the page refreshes once a second."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if check():
                return True
        except StaleElementReferenceException:  # the table was re-rendered while it was read
            pass
        await asyncio.sleep(0.2)
    return check()


async def test_dashboard_live_numbers(monitored: ServerProcess, browser: webdriver.Chrome) -> None:
    browser.get(f"http://127.0.0.1:{monitored.http_port}/")
    assert await eventually(lambda: text_of(browser, "status") == "live")
    assert text_of(browser, "connections") == "0"
    assert text_of(browser, "totals") == "0 / 0"
    # Every JSON endpoint is linked from the page.
    hrefs = {a.get_attribute("href") or "" for a in browser.find_elements(By.TAG_NAME, "a")}
    for path in ("varz", "connz", "subsz", "routez", "gatewayz", "leafz", "accountz", "jsz", "healthz"):
        assert any(path in h for h in hrefs), (path, hrefs)

    sub = await nats.connect(monitored.url, name="dash-sub")
    pub = await nats.connect(monitored.url, name="dash-pub")
    try:
        await sub.subscribe("dash.>")
        await sub.subscribe("dash.x")
        await sub.flush()
        for _ in range(N_MSGS):
            await pub.publish("dash.x", PAYLOAD)
        await pub.flush()
        await sub.flush()
        want_totals = f"{N_MSGS} / {2 * N_MSGS}"
        assert await eventually(lambda: text_of(browser, "totals") == want_totals), text_of(browser, "totals")
        assert await eventually(lambda: text_of(browser, "connections") == "2")
        assert text_of(browser, "subscriptions") == "2"
        rows = browser.find_elements(By.CSS_SELECTOR, "#conns tr")
        names = sorted(r.find_elements(By.TAG_NAME, "td")[1].text for r in rows)
        assert names == ["dash-pub", "dash-sub"]
        ARTIFACTS.mkdir(exist_ok=True)
        assert browser.save_screenshot(str(ARTIFACTS / "dashboard.png"))
    finally:
        await sub.close()
        await pub.close()
    assert await eventually(lambda: text_of(browser, "connections") == "0")
    errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert errors == []
    assert Path(ARTIFACTS / "dashboard.png").stat().st_size > 0


@pytest.fixture
def jetstream_monitored(tmp_path: Path) -> Iterator[ServerProcess]:
    """pynatsd with JetStream, its HTTP monitor, and a small max_pending (a stuck reader is soon slow)."""
    conf = tmp_path / "dashboard.conf"
    conf.write_text(f'max_pending: 65536\njetstream {{ store_dir: "{tmp_path / "js"}" }}\n')
    server = start_server("pynatsd", ["-c", str(conf)], http_port=free_port())
    yield server
    server.stop()


def closed_reasons(server: ServerProcess) -> list[str]:
    url = f"http://127.0.0.1:{server.http_port}/connz?state=closed"
    with urllib.request.urlopen(url, timeout=5) as resp:
        return [str(c.get("reason", "")) for c in json.load(resp)["connections"]]


def column(driver: webdriver.Chrome, body_id: str, index: int) -> list[str]:
    rows = driver.find_elements(By.CSS_SELECTOR, f"#{body_id} tr")
    return [r.find_elements(By.TAG_NAME, "td")[index].text for r in rows]


async def test_dashboard_consumer_lag_slow_consumers_and_sortable_rates(
    jetstream_monitored: ServerProcess, browser: webdriver.Chrome
) -> None:
    """A JetStream consumer's lag (its pending messages) in a card and a table, the slow consumer the
    server closed, and the connections table sorted by the column clicked (per-second rates among them);
    the screenshot is kept with the test artifacts."""
    server = jetstream_monitored
    browser.get(f"http://127.0.0.1:{server.http_port}/")
    assert await eventually(lambda: text_of(browser, "status") == "live")
    nc = await nats.connect(server.url, name="dash-js")
    busy = await nats.connect(server.url, name="dash-busy")
    stuck = socket.socket()
    try:
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        await js.add_consumer("ORDERS", durable_name="behind")
        for i in range(7):
            await js.publish("orders.new", b"order %d" % i)
        await busy.subscribe("busy")
        await busy.flush()
        for _ in range(N_MSGS):
            await nc.publish("busy", PAYLOAD)
        # a subscriber that never reads: the server closes it as a slow consumer
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.connect(("127.0.0.1", server.port))
        stuck.sendall(b'CONNECT {"verbose":false,"name":"stuck"}\r\nSUB flood 1\r\nPING\r\n')
        await nc.flush()
        for _ in range(200):
            if any(r.startswith("Slow Consumer") for r in closed_reasons(server)):
                break
            for _ in range(50):
                await nc.publish("flood", b"x" * 32768)
            await nc.flush()
        assert any(r.startswith("Slow Consumer") for r in closed_reasons(server))

        assert await eventually(lambda: text_of(browser, "consumer_lag") == "7")
        assert await eventually(lambda: column(browser, "consumers", 2) == ["behind"])
        assert await eventually(lambda: column(browser, "consumers", 3) == ["7"])
        assert await eventually(lambda: "stuck" in column(browser, "slow-rows", 1))
        assert browser.find_element(By.ID, "slow").is_displayed()

        browser.find_element(By.CSS_SELECTOR, '#conns-table th[data-key="out_msgs"]').click()
        assert await eventually(lambda: column(browser, "conns", 1)[:1] == ["dash-busy"])
        browser.find_element(By.CSS_SELECTOR, '#conns-table th[data-key="cid"]').click()
        assert await eventually(lambda: column(browser, "conns", 1) == ["dash-js", "dash-busy"])
        sorted_th = browser.find_element(By.CSS_SELECTOR, "#conns-table th.sorted")
        assert sorted_th.get_attribute("data-key") == "cid"
        ARTIFACTS.mkdir(exist_ok=True)
        assert browser.save_screenshot(str(ARTIFACTS / "dashboard-jetstream.png"))
    finally:
        stuck.close()
        await busy.close()
        await nc.close()
    errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert errors == []
