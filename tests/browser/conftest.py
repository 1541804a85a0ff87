"""The browser tier fails, never skips, without its browser: scripts/test.sh installs it."""

import os

import pytest

from tests.browser._browser import CHROMIUM, SETUP_HINT, sync_api


@pytest.fixture(autouse=True)
def _browser_installed() -> None:
    """Fail with the setup hint when playwright or chromium is missing."""
    if sync_api is None:
        pytest.fail(f"playwright is not installed: {SETUP_HINT}", pytrace=False)
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: {SETUP_HINT}", pytrace=False)
