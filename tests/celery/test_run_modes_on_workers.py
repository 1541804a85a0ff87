"""R10: a durable run on real workers ends in the state the in-process loop reaches.

The scenarios and their expected states are tests/fixtures/run_scenarios.py, which the unit
tier runs in-process and with eager Celery (tests/django/test_run_modes.py); here every step and
every tool call is a task on the tier's workers, and the model is the replay server.
"""

from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.contrib.auth.models import User

from tests.fixtures.run_scenarios import SCENARIOS, state
from tool_calling import models, runs
from tool_calling.sync import sync_tools
from tool_calling.testing import ReplayServer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("workers"),
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_r10_a_run_on_real_workers_ends_in_the_same_state(scenario):
    sync_tools()
    scenario.prepare()
    user = User.objects.create_user("alice")
    conversation = models.Conversation.objects.create(owner=user)
    with ReplayServer(list(scenario.steps), port=settings.MODEL_PORT):
        run = runs.start_turn(conversation, "Go", user=user)
        deadline = time.monotonic() + 60
        while run.status not in models.RUN_TERMINAL_STATUSES:
            assert time.monotonic() < deadline, f"run {run.pk} still {run.status}"
            time.sleep(0.1)
            run.refresh_from_db()
    assert run.status == "succeeded", run.error
    assert state(conversation, run.answer, run.finish_reason) == scenario.expected
