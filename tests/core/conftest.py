"""Fixtures of the core tests: plain pytest, no database, no Django settings needed.

The Django layer installs a core settings provider when the app is ready; every core test runs
with the core's own defaults instead, so the suite means the same with and without Django.
"""

from __future__ import annotations

import pytest

from tool_calling.core import _settings


@pytest.fixture(autouse=True)
def _core_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    # Through monkeypatch, so that a test patching the provider too is undone in order.
    monkeypatch.setattr(_settings, "_provider", None)
