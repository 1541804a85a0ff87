"""The browser tier fails, never skips, without its browser: scripts/test.sh installs it."""

import pytest

from tests.browser._browser import require_browser


@pytest.fixture(autouse=True)
def _browser_installed() -> None:
    """Fail with the setup hint when playwright or chromium is missing."""
    require_browser()
