"""The live dashboard in real headless Chromium: it loads, shows live numbers and logs no console errors."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import nats
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from tests.conftest import need_tool
from tests.servers import REPO_ROOT, ServerProcess

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
        if check():
            return True
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
