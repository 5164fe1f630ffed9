"""A real headless Chromium for the report's tests: the system's chromium and chromedriver
(Debian's packages; `make test` installs them), driven by selenium. No browser is downloaded:
selenium is told where the driver is, so its manager never runs."""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

CHROMIUM_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1400,1000",
)  # fmt: skip


def executables() -> tuple[str | None, str | None]:
    """The system's chromium and chromedriver, or None where one is missing."""
    return shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")


@contextmanager
def chromium():
    """A selenium driver of a fresh headless chromium (its own profile folder), quit at the end."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = executables()
    profile = tempfile.mkdtemp(prefix="speccat-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def open_page(driver, path: Path, timeout: float = 20.0) -> None:
    """Open a page from disk and wait until every plot div holds a drawn plot (Plotly's SVG)."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(path.resolve().as_uri())
    WebDriverWait(driver, timeout).until(
        lambda d: d.execute_script(
            "return document.readyState === 'complete' && Array.from(document.querySelectorAll('div.plot'))"
            ".every(p => p.querySelector('svg.main-svg') !== null && p.data !== undefined)"
        )
    )


def console_errors(driver) -> list[dict]:
    """The console's messages at level SEVERE since the last call (an uncaught error, a failed load)."""
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
