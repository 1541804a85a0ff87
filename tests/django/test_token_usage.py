"""The admin overview's tokens per day, from what the model reported.

The real openai SDK talks over HTTP to the replay server, which reports each answer's token
counts; nothing here writes ``Message.usage``. A turn of two model calls reports 52 + 56 = 108
prompt tokens and 2 + 9 = 11 completion tokens, whichever path ran it: in-process (called or
streamed) or as a durable run (eager Celery here; tests/celery/test_observability_on_workers.py
runs one on real workers).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import override_settings
from django.urls import reverse

from tests.django._tools import registered, tool_calling_settings
from tool_calling import models, runs, tool
from tool_calling.admin import usage
from tool_calling.core.providers.openai import OpenAIChatModel
from tool_calling.governance import governed_chat_client
from tool_calling.testing import ReplayServer

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@tool
def usage_lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: 12 degrees"


STEPS = [
    {
        "tool_calls": [{"name": "usage_lookup", "arguments": {"city": "Oslo"}}],
        "usage": {"prompt_tokens": 52, "completion_tokens": 2},
    },
    {"text": "Oslo has 12 degrees today.", "usage": {"prompt_tokens": 56, "completion_tokens": 9}},
]
STORED_USAGE = [
    {"prompt_tokens": 52, "completion_tokens": 2, "total_tokens": 54},
    {"prompt_tokens": 56, "completion_tokens": 9, "total_tokens": 65},
]
"""What the model's two messages of the turn store: each call's own counts."""


@pytest.fixture
def alice() -> Any:
    return User.objects.create_user("alice")


@pytest.fixture(autouse=True)
def lookup_tool() -> Any:
    with registered(usage_lookup):
        yield


def today() -> usage.TokenDay:
    return usage.overview().tokens[-1]


def stored_usage(conversation: models.Conversation) -> list[dict[str, int]]:
    rows = conversation.messages.filter(role=models.MessageRole.ASSISTANT).order_by("sequence")
    return [row.usage for row in rows]


@pytest.mark.parametrize("streamed", [False, True], ids=["called", "streamed"])
def test_an_in_process_turn_adds_the_tokens_the_model_reported(alice: Any, streamed: bool) -> None:
    conversation = models.Conversation.objects.create(owner=alice)
    with ReplayServer(STEPS) as server:
        model = OpenAIChatModel(
            "replay-model", base_url=server.base_url + "/v1", api_key="test", max_retries=0
        )
        request = governed_chat_client(user=alice, conversation=conversation, model=model).prompt(
            "Weather in Oslo?"
        )
        answer = "".join(request.stream().content()) if streamed else request.call().content()

    assert answer == "Oslo has 12 degrees today."
    assert stored_usage(conversation) == STORED_USAGE
    figures = today()
    assert (figures.messages, figures.prompt, figures.completion, figures.total) == (
        2,
        108,
        11,
        119,
    )


def test_a_durable_run_adds_the_tokens_the_model_reported(alice: Any) -> None:
    conversation = models.Conversation.objects.create(owner=alice)
    with ReplayServer(STEPS) as server:
        chat_model = {
            **settings.TOOL_CALLING["CHAT_MODEL"],
            "MODEL": "replay-model",
            "BASE_URL": server.base_url + "/v1",
            "MAX_RETRIES": 0,
        }
        with override_settings(TOOL_CALLING=tool_calling_settings(CHAT_MODEL=chat_model)):
            run = runs.start_turn(conversation, "Weather in Oslo?", user=alice)
    run.refresh_from_db()

    assert (run.status, run.answer) == ("succeeded", "Oslo has 12 degrees today.")
    assert stored_usage(conversation) == STORED_USAGE
    figures = today()
    assert (figures.messages, figures.prompt, figures.completion, figures.total) == (
        2,
        108,
        11,
        119,
    )


def test_the_overview_page_shows_the_tokens_of_a_turn(admin_client: Any, alice: Any) -> None:
    conversation = models.Conversation.objects.create(owner=alice)
    with ReplayServer(STEPS) as server:
        model = OpenAIChatModel(
            "replay-model", base_url=server.base_url + "/v1", api_key="test", max_retries=0
        )
        governed_chat_client(user=alice, conversation=conversation, model=model).prompt(
            "Weather in Oslo?"
        ).call()

    page = admin_client.get(reverse("admin:tool_calling_overview"))

    assert page.status_code == 200
    assert page.context["tokens_summary"].startswith("119 tokens in 14 days. ")
    (row,) = [r for r in page.context["token_rows"] if r["messages"] != "0"]
    assert (row["messages"], row["prompt"], row["completion"], row["total"]) == (
        "2",
        "108",
        "11",
        "119",
    )
