"""The browser tests' Chromium: the console's fixture (Debian's /usr/bin/chromium through Playwright)."""

from console.tests.conftest import browser  # noqa: F401  (a fixture, found by name)
