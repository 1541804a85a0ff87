"""R10: a turn ends in the same state in-process and as a durable run (eager Celery here).

The scenarios and their expected states are in tests/fixtures/run_scenarios.py; the Celery tier
runs the same table on real workers (tests/celery/test_run_modes_on_workers.py).
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from tests.django._tools import chat_model, registered, tool_calling_settings
from tests.fixtures.run_scenarios import SCENARIOS, TOOLS, Scenario, state
from tool_calling import models, runs
from tool_calling.governance import governed_chat_client
from tool_calling.testing import ScriptedChatModel

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def tools():
    with registered(*TOOLS):
        yield


def in_process(scenario: Scenario, user: User) -> dict:
    conversation = models.Conversation.objects.create(owner=user)
    model = ScriptedChatModel(list(scenario.steps))
    # One call at a time: the test database is SQLite in memory with a shared cache, where two
    # threads writing at once get "database table is locked" at once (no busy timeout applies).
    execution = {"MODE": "inline", "MAX_CONCURRENT_CALLS": 1}
    with override_settings(TOOL_CALLING=tool_calling_settings(EXECUTION=execution)):
        client = governed_chat_client(user=user, conversation=conversation, model=model)
        response = client.prompt("Go").call().chat_response()
    generation = response.result
    return state(conversation, generation.output.text, generation.finish_reason or "")


def durable(scenario: Scenario, user: User) -> dict:
    conversation = models.Conversation.objects.create(owner=user)
    with chat_model(ScriptedChatModel(list(scenario.steps))):
        run = runs.start_turn(conversation, "Go", user=user)
    run.refresh_from_db()
    assert run.status == "succeeded", run.error
    return state(conversation, run.answer, run.finish_reason)


@pytest.mark.parametrize("mode", ["inline", "eager"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_r10_a_turn_ends_in_the_same_state_in_every_mode(scenario, mode):
    user = User.objects.create_user("alice")
    scenario.prepare()
    ended = in_process(scenario, user) if mode == "inline" else durable(scenario, user)
    assert ended == scenario.expected
