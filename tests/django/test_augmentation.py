"""Argument augmentation in governed turns (Django): why the model called a tool.

Per tool (the admin's "ask why it is called") or for every tool (``ARGUMENT_AUGMENTATION``),
the model fills in extra fields on each call; the values are stored on the call's
``ToolExecution``, shown in the admin and the API, and the tool runs with its own arguments
only: in process, on a (eager) Celery worker, and in durable runs.
"""

from __future__ import annotations

import json

import pydantic
import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from django.urls import reverse

from tests.django._api import client_for, url
from tests.django._tools import chat_model, registered, tool_calling_settings
from tool_calling import models, runs, tool
from tool_calling.governance import governed_chat_client
from tool_calling.testing import ScriptedChatModel, text, tool_call

pytestmark = pytest.mark.django_db(transaction=True)

RAN: list[tuple[str, dict]] = []


@tool
def aug_weather(city: str) -> str:
    """Return the weather for a city."""
    RAN.append(("aug_weather", {"city": city}))
    return f"Sunny in {city}"


@tool
def aug_time() -> str:
    """Return the time."""
    RAN.append(("aug_time", {}))
    return "noon"


NAMES = ["aug_weather", "aug_time"]
REASON = {"inner_thought": "The user asked for Oslo's weather.", "confidence": "high"}


class Urgency(pydantic.BaseModel):
    """A project's own augmentation."""

    urgency: int = pydantic.Field(description="How urgent the call is, 1-5.")


@pytest.fixture(autouse=True)
def augmented_tools():
    RAN.clear()
    with registered(aug_weather, aug_time):
        yield


@pytest.fixture
def alice():
    return User.objects.create_user("alice", is_staff=True, is_superuser=True, password="pw")


def ask_why(name: str, value: bool | None = True) -> None:
    models.Tool.objects.filter(name=name).update(augment_arguments=value)


def schema(prompt, name):
    (callback,) = [cb for cb in prompt.options.tool_callbacks if cb.definition.name == name]
    return callback.definition.input_schema


def turn(user, conversation, *steps):
    model = ScriptedChatModel(list(steps))
    client = governed_chat_client(
        user=user, conversation=conversation, model=model, tool_names=NAMES
    )
    client.prompt("Weather in Oslo?").call()
    return model


def executions(conversation):
    return list(
        models.ToolExecution.objects.filter(conversation=conversation).order_by("created_at", "pk")
    )


# --- per tool, and ARGUMENT_AUGMENTATION["ENABLED"] ---------------------------------------------


def test_without_augmentation_the_tools_schema_is_their_own(alice):
    conversation = models.Conversation.objects.create(owner=alice)
    model = turn(alice, conversation, text("ok"))
    assert list(schema(model.requests[0], "aug_weather")["properties"]) == ["city"]


def test_a_tool_that_asks_why_gets_the_reason_stored_and_runs_with_its_own_arguments(alice):
    ask_why("aug_weather")
    conversation = models.Conversation.objects.create(owner=alice)
    model = turn(alice, conversation, tool_call("aug_weather", city="Oslo", **REASON), text("ok"))
    offered = schema(model.requests[0], "aug_weather")
    assert list(offered["properties"]) == ["inner_thought", "confidence", "city"]
    assert offered["required"] == ["inner_thought", "confidence", "city"]
    assert list(schema(model.requests[0], "aug_time")["properties"]) == []
    assert RAN == [("aug_weather", {"city": "Oslo"})]
    (row,) = executions(conversation)
    assert (row.status, row.augmented_arguments) == ("succeeded", REASON)
    assert json.loads(row.arguments) == {"city": "Oslo"}
    assert model.requests[1].messages[-1].responses[0].response_data == "Sunny in Oslo"


def test_the_setting_asks_for_every_tool_and_a_tool_may_opt_out(alice):
    conversation = models.Conversation.objects.create(owner=alice)
    everywhere = tool_calling_settings(ARGUMENT_AUGMENTATION={"ENABLED": True})
    with override_settings(TOOL_CALLING=everywhere):
        model = turn(alice, conversation, text("ok"))
        assert "inner_thought" in schema(model.requests[0], "aug_weather")["properties"]
        assert "inner_thought" in schema(model.requests[0], "aug_time")["properties"]
        ask_why("aug_time", False)
        model = turn(alice, conversation, text("ok"))
        assert "inner_thought" in schema(model.requests[0], "aug_weather")["properties"]
        assert list(schema(model.requests[0], "aug_time")["properties"]) == []


def test_the_type_setting_chooses_the_fields(alice):
    ask_why("aug_weather")
    conversation = models.Conversation.objects.create(owner=alice)
    urgency = tool_calling_settings(
        ARGUMENT_AUGMENTATION={"TYPE": "tests.django.test_augmentation.Urgency"}
    )
    with override_settings(TOOL_CALLING=urgency):
        model = turn(
            alice, conversation, tool_call("aug_weather", city="Oslo", urgency=4), text("ok")
        )
    assert list(schema(model.requests[0], "aug_weather")["properties"]) == ["urgency", "city"]
    (row,) = executions(conversation)
    assert row.augmented_arguments == {"urgency": 4}
    assert RAN == [("aug_weather", {"city": "Oslo"})]


def test_bad_augmented_values_fail_the_call_and_the_model_is_told(alice):
    ask_why("aug_weather")
    conversation = models.Conversation.objects.create(owner=alice)
    model = turn(
        alice,
        conversation,
        tool_call("aug_weather", city="Oslo", inner_thought="Why not", confidence="sure"),
        text("ok"),
    )
    assert RAN == []
    response = model.requests[1].messages[-1].responses[0]
    assert response.is_error
    assert "confidence" in response.response_data
    assert response.response_data.startswith("Invalid arguments for tool 'aug_weather'")
    (row,) = executions(conversation)
    assert (row.status, row.error_type, row.augmented_arguments) == (
        "failed",
        "tool_calling.core.errors.ToolArgumentsError",
        {},
    )


def test_augmented_texts_are_redacted_like_arguments(alice):
    ask_why("aug_weather")
    conversation = models.Conversation.objects.create(owner=alice)
    redacting = tool_calling_settings(AUDIT_REDACTOR="tests.django.test_augmentation.mask_oslo")
    with override_settings(TOOL_CALLING=redacting):
        turn(alice, conversation, tool_call("aug_weather", city="Oslo", **REASON), text("ok"))
    (row,) = executions(conversation)
    assert row.augmented_arguments == {
        "inner_thought": "arguments: The user asked for ****'s weather.",
        "confidence": "arguments: high",
    }


def mask_oslo(text, *, tool_name, field):
    return f"{field}: {text.replace('Oslo', '****')}"


# --- on workers (Celery eager here; tests/celery runs real ones) --------------------------------


def test_a_call_on_a_worker_is_sent_with_the_tools_own_arguments(alice):
    ask_why("aug_weather")
    conversation = models.Conversation.objects.create(owner=alice)
    celery = tool_calling_settings(EXECUTION={"MODE": "celery"})
    with override_settings(TOOL_CALLING=celery):
        turn(alice, conversation, tool_call("aug_weather", city="Oslo", **REASON), text("ok"))
    (row,) = executions(conversation)
    assert (row.mode, row.status, row.augmented_arguments) == ("celery", "succeeded", REASON)
    assert json.loads(row.arguments) == {"city": "Oslo"}
    assert RAN == [("aug_weather", {"city": "Oslo"})]


def test_bad_augmented_values_of_a_worker_call_fail_it_without_sending_it(alice):
    ask_why("aug_weather")
    conversation = models.Conversation.objects.create(owner=alice)
    celery = tool_calling_settings(EXECUTION={"MODE": "celery"})
    with override_settings(TOOL_CALLING=celery):
        model = turn(alice, conversation, tool_call("aug_weather", city="Oslo"), text("ok"))
    assert RAN == []
    (row,) = executions(conversation)
    assert (row.mode, row.status, row.task_id) == ("inline", "failed", "")
    response = model.requests[1].messages[-1].responses[0]
    assert response.is_error and "inner_thought" in response.response_data


def test_a_durable_run_stores_the_reasons_and_runs_the_plain_tool(alice):
    ask_why("aug_weather")
    conversation = models.Conversation.objects.create(owner=alice)
    script = ScriptedChatModel(
        [
            tool_call("aug_weather", city="Oslo", **REASON),
            tool_call("aug_weather", city="Rome"),  # no reason: fails, the run goes on
            text("Sunny"),
        ]
    )
    celery = tool_calling_settings(EXECUTION={"MODE": "celery"})
    with chat_model(script), override_settings(TOOL_CALLING=celery):
        run = runs.start_turn(conversation, "Weather?", user=alice, tool_names=NAMES)
    run.refresh_from_db()
    assert (run.status, run.answer) == ("succeeded", "Sunny")
    assert RAN == [("aug_weather", {"city": "Oslo"})]
    first, second = executions(conversation)
    assert (first.mode, first.status, first.augmented_arguments) == ("celery", "succeeded", REASON)
    assert json.loads(first.arguments) == {"city": "Oslo"}
    assert (second.status, second.error_type) == (
        "failed",
        "tool_calling.core.errors.ToolArgumentsError",
    )
    assert script.requests[2].messages[-1].responses[0].is_error
    # The API shows why, in the run's summary of its calls and in the call itself.
    client = client_for(alice)
    detail = client.get(url("run-detail", run.pk)).json()
    assert detail["tool_executions"][0]["augmented_arguments"] == REASON
    call = client.get(url("tool-execution-detail", first.pk)).json()
    assert call["augmented_arguments"] == REASON
    assert client.get(url("tool-execution-detail", second.pk)).json()["augmented_arguments"] == {}


# --- the admin ---------------------------------------------------------------------------------


def test_the_admin_shows_why_in_the_transcript_and_the_audit(alice, client):
    ask_why("aug_weather")
    conversation = models.Conversation.objects.create(owner=alice)
    turn(alice, conversation, tool_call("aug_weather", city="Oslo", **REASON), text("ok"))
    (row,) = executions(conversation)
    client.force_login(alice)
    page = client.get(
        reverse("admin:tool_calling_conversation_change", args=[conversation.pk])
    ).content.decode()
    assert "Why the model called it" in page
    assert "The user asked for Oslo&#x27;s weather." in page
    page = client.get(reverse("admin:tool_calling_toolexecution_change", args=[row.pk]))
    assert "why the model called it" in page.content.decode().lower()
    assert "The user asked for Oslo&#x27;s weather." in page.content.decode()


def test_the_tool_admin_edits_the_search_and_reason_fields(alice, client):
    client.force_login(alice)
    tool_row = models.Tool.objects.get(name="aug_weather")
    change = reverse("admin:tool_calling_tool_change", args=[tool_row.pk])
    page = client.get(change).content.decode()
    for field in ("search_tags", "always_include", "augment_arguments"):
        assert f'name="{field}"' in page
    form = {
        "enabled": "on",
        "return_direct": "",
        "execution_mode": "",
        "queue": "",
        "timeout": "",
        "search_tags": "forecast, rain",
        "always_include": "on",
        "augment_arguments": "True",
        "quota_window": "60",
        "retries": "0",
        "retry_backoff": "1.0",
        "limit_override-TOTAL_FORMS": "0",
        "limit_override-INITIAL_FORMS": "0",
        "limit_override-MIN_NUM_FORMS": "0",
        "limit_override-MAX_NUM_FORMS": "1",
    }
    response = client.post(change, form)
    assert response.status_code == 302, response.content.decode()[:3000]
    tool_row.refresh_from_db()
    assert (tool_row.search_tag_list, tool_row.always_include, tool_row.augment_arguments) == (
        ("forecast", "rain"),
        True,
        True,
    )
    form["augment_arguments"] = ""
    form["always_include"] = ""
    assert client.post(change, form).status_code == 302
    tool_row.refresh_from_db()
    assert (tool_row.always_include, tool_row.augment_arguments) == (False, None)
