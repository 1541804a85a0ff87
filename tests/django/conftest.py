"""Fixtures shared by the Django-level tests."""

from contextlib import ExitStack

import pytest

from tests.django._tools import chat_model
from tool_calling.testing import ScriptedChatModel


@pytest.fixture
def script():
    """``script(*steps)`` makes the model of governed paths a ``ScriptedChatModel`` (returned).

    Set through ``TOOL_CALLING["CHAT_MODEL"]["CLASS"]`` until the test ends.
    """
    with ExitStack() as stack:

        def make(*steps):
            return stack.enter_context(chat_model(ScriptedChatModel(list(steps))))

        yield make


@pytest.fixture(autouse=True)
def _fresh_decision_policies():
    """Each test reads the decision policies anew: a flushed table sends no post_delete."""
    from tool_calling.calls import policies

    policies.forget_policies()
    yield
    policies.forget_policies()
