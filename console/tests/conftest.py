"""The browser tests' Chromium and pages (test_browser*.py): Debian's /usr/bin/chromium driven by Playwright.

Never `playwright install` (it downloads browsers from the internet); the
package only drives /usr/bin/chromium (apt-get install chromium; .ci/run does).
If Chromium cannot start, these tests fail rather than skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

# Playwright's sync API keeps an asyncio loop in this thread; Django's ORM sees
# it and refuses synchronous queries unless told the test knows what it does.
# (Set when the browser tests are collected, as it was from their module before.)
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser():
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: apt-get install -y chromium"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1440, "height": 900}, device_scale_factor=1)
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()


@pytest.fixture(autouse=True)
def dashboard_figures_fresh(monkeypatch):
    """Each dashboard view computes its figures anew: tests change the data between views within FIGURES_FOR.

    console/tests/test_dashboard.py sets it back where it tests the sharing itself.
    """
    monkeypatch.setattr("console.dashboard.FIGURES_FOR", 0)
