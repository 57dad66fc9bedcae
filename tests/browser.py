"""Headless Chromium for the console's browser tests and benchmark (Selenium + chromedriver).

Both binaries come from Debian's ``chromium`` and ``chromium-driver`` packages (``make browser``
installs them), so the driver always matches the browser and nothing is downloaded at run time:
the driver path is given explicitly, which keeps Selenium Manager from looking for one.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = Path(
    os.environ.get("ODF_CONSOLE_SCREENSHOTS", ROOT / "build" / "console-screenshots")
)
"""Where browser tests leave a screenshot of every page (``build/`` is git-ignored)."""


def chromium_paths() -> tuple[str, str]:
    """``(chromium, chromedriver)``; fails the test with the fix when either is missing."""
    browser = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.fail(
            "chromium / chromedriver missing: run `make browser` (apt: chromium chromium-driver)"
        )
    return browser, driver


def start_chromium(profile: Path, *, width: int = 1400, height: int = 1000) -> Any:
    """A headless Chromium session with its own profile directory (no sync, no updates)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = chromium_paths()
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in (
        "--headless=new",
        # The tests run as root inside a user namespace, where Chromium's sandbox cannot start.
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        f"--window-size={width},{height}",
        f"--user-data-dir={profile}",
    ):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=opts)
