"""Fixtures shared by the Django-level tests."""

from unittest import mock

import pytest

from tool_calling.testing import ScriptedChatModel


@pytest.fixture
def script():
    """``script(*steps)`` makes the model of durable runs a ``ScriptedChatModel`` (returned).

    Patched where the runs get their model (``runs.default_chat_model``), until the test ends.
    """
    patchers = []

    def make(*steps):
        model = ScriptedChatModel(list(steps))
        patcher = mock.patch("tool_calling.runs.default_chat_model", return_value=model)
        patcher.start()
        patchers.append(patcher)
        return model

    yield make
    for patcher in patchers:
        patcher.stop()
