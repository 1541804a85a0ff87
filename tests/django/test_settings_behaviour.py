"""Settings that the governed paths read: changing each one changes what happens.

CHAT_MODEL chooses the model of every governed path (no patching), API PERMISSION_CLASSES the
permissions of every API view, LIMITS MAX_TOOL_ROUNDS the round guard of in-process turns and
durable runs alike, and RESOLUTION_FALLBACK_ENABLED whether a call of a tool the turn did not
offer may still run (only enabled tools the user may use).
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import override_settings

from tests.django._api import client_for, url
from tests.django._tools import chat_model, registered, tool_calling_settings
from tool_calling import ToolResponseMessage, models, runs, tool
from tool_calling.core.chat.advisors.tool_calling import TOOL_ROUNDS_EXCEEDED
from tool_calling.governance import chat_model as governed_model
from tool_calling.governance import governed_chat_client
from tool_calling.testing import ScriptedChatModel, text, tool_call

pytestmark = pytest.mark.django_db(transaction=True)

RAN: list[str] = []


@tool
def setting_lookup(key: str) -> str:
    """Look a key up."""
    RAN.append(f"lookup {key}")
    return f"value of {key}"


@tool
def setting_other(key: str) -> str:
    """Another tool of the user's."""
    RAN.append(f"other {key}")
    return f"other {key}"


@pytest.fixture(autouse=True)
def setting_tools():
    RAN.clear()
    with registered(setting_lookup, setting_other):
        yield


@pytest.fixture
def alice():
    return User.objects.create_user("alice")


def answer_with(answer: str, *, calls: int = 0) -> ScriptedChatModel:
    """A ``CHAT_MODEL["CLASS"]`` factory: ``calls`` tool rounds, then ``answer``.

    A run builds its model anew at every step, so the answer depends on the prompt only.
    """

    def step(prompt):
        done = sum(isinstance(m, ToolResponseMessage) for m in prompt.messages)
        return tool_call("setting_lookup", key=str(done)) if done < calls else text(answer)

    return ScriptedChatModel([step] * 10)


def looping() -> ScriptedChatModel:
    """A model that never stops calling tools."""
    return ScriptedChatModel([lambda prompt: tool_call("setting_lookup", key="again")] * 10)


def _model_settings(cls: str, **arguments):
    return tool_calling_settings(CHAT_MODEL={"CLASS": cls, "ARGUMENTS": arguments})


# --- CHAT_MODEL -----------------------------------------------------------------------------------

FACTORY = f"{__name__}.answer_with"


def test_chat_model_chooses_the_model_of_in_process_turns(alice):
    with override_settings(TOOL_CALLING=_model_settings(FACTORY, answer="from settings")):
        client = governed_chat_client(user=alice)
        assert client.prompt("Hi").call().content() == "from settings"
    with override_settings(TOOL_CALLING=_model_settings(FACTORY, answer="changed")):
        assert governed_chat_client(user=alice).prompt("Hi").call().content() == "changed"


def test_chat_model_chooses_the_model_of_background_runs(alice):
    conversation = models.Conversation.objects.create(owner=alice)
    arguments = {"answer": "run answer", "calls": 1}
    with override_settings(TOOL_CALLING=_model_settings(FACTORY, **arguments)):
        run = runs.start_turn(conversation, "Go", user=alice)
    run.refresh_from_db()
    assert (run.status, run.answer) == ("succeeded", "run answer")
    assert RAN == ["lookup 0"]


def test_chat_model_chooses_the_model_of_the_chat_command(alice, capsys):
    with override_settings(TOOL_CALLING=_model_settings(FACTORY, answer="from the command")):
        call_command("chat", "Hi", "--user", "alice")
    assert "from the command" in capsys.readouterr().out


def test_a_chat_model_class_that_makes_no_chat_model_is_refused():
    with override_settings(TOOL_CALLING=_model_settings("builtins.dict")):
        with pytest.raises(ImproperlyConfigured) as raised:
            governed_model()
    assert str(raised.value) == (
        "TOOL_CALLING['CHAT_MODEL']['CLASS'] made a dict, not a ChatModel: name a ChatModel "
        "subclass or a function that returns one."
    )
    with override_settings(TOOL_CALLING=_model_settings("no.such.factory")):
        with pytest.raises(ImproperlyConfigured, match="Could not import 'no.such.factory'"):
            governed_model()


# --- API PERMISSION_CLASSES -------------------------------------------------------------------


def test_api_permission_classes_apply_to_every_view(alice):
    staff = User.objects.create_user("staff", is_staff=True)
    conversation = models.Conversation.objects.create(owner=alice)
    run = models.Run.objects.create(conversation=conversation, user=alice, text="x")
    urls = [
        url("tool-list"),
        url("conversation-list"),
        url("run-list"),
        url("tool-execution-list"),
        url("run-events", run.pk),
    ]
    assert [client_for(alice).get(u).status_code for u in urls] == [200] * 5
    admins_only = tool_calling_settings(
        API={"PERMISSION_CLASSES": ["rest_framework.permissions.IsAdminUser"]}
    )
    with override_settings(TOOL_CALLING=admins_only):
        assert [client_for(alice).get(u).status_code for u in urls] == [403] * 5
        assert [client_for(staff).get(u).status_code for u in urls[:4]] == [200] * 4


# --- LIMITS MAX_TOOL_ROUNDS --------------------------------------------------------------------

LOOPING = f"{__name__}.looping"


def test_max_tool_rounds_stops_an_in_process_turn(alice):
    limits = {"MAX_TOOL_ROUNDS": 3}
    with override_settings(TOOL_CALLING={**_model_settings(LOOPING), "LIMITS": limits}):
        response = governed_chat_client(user=alice).prompt("Go").call().chat_response()
    assert response.result.finish_reason == TOOL_ROUNDS_EXCEEDED
    assert RAN == ["lookup again"] * 2  # the third round's calls never run


def test_max_tool_rounds_stops_a_background_run(alice):
    conversation = models.Conversation.objects.create(owner=alice)
    limits = {"MAX_TOOL_ROUNDS": 3}
    with override_settings(TOOL_CALLING={**_model_settings(LOOPING), "LIMITS": limits}):
        run = runs.start_turn(conversation, "Go", user=alice)
    run.refresh_from_db()
    assert (run.status, run.finish_reason, run.rounds) == ("succeeded", TOOL_ROUNDS_EXCEEDED, 3)
    assert RAN == ["lookup again"] * 2


# --- RESOLUTION_FALLBACK_ENABLED ---------------------------------------------------------------


def _narrowed_turn(user):
    """A turn offered only setting_lookup; the model calls setting_other."""
    model = ScriptedChatModel([tool_call("setting_other", key="k"), text("Done")])
    client = governed_chat_client(user=user, model=model, tool_names=["setting_lookup"])
    assert client.prompt("Go").call().content() == "Done"
    assert model.tool_names_seen[0] == ["setting_lookup"]
    return model.requests[-1].messages[-1].responses[0]


def test_without_resolution_fallback_only_the_offered_tools_run(alice):
    response = _narrowed_turn(alice)
    assert response.is_error and response.response_data.startswith(
        "Unknown or disabled tool 'setting_other'."
    )
    assert RAN == []


def test_resolution_fallback_runs_a_tool_the_user_may_use_but_was_not_offered(alice):
    with override_settings(TOOL_CALLING=tool_calling_settings(RESOLUTION_FALLBACK_ENABLED=True)):
        response = _narrowed_turn(alice)
        assert (response.is_error, response.response_data) == (False, "other k")
        assert RAN == ["other k"]
        # Never a tool an operator disabled, fallback or not.
        models.Tool.objects.filter(name="setting_other").update(enabled=False)
        RAN.clear()
        response = _narrowed_turn(alice)
    assert response.is_error and RAN == []
    assert models.ToolExecution.objects.filter(tool_name="setting_other").latest("pk").status == (
        "refused"
    )


# --- EXCEPTION_PROCESSOR -------------------------------------------------------------------------


class PaymentDeclined(Exception):
    """A project's exception that must stop the turn, wherever the tool ran."""


@tool
def setting_charge(amount: int) -> str:
    """Charge a card."""
    RAN.append(f"charge {amount}")
    raise PaymentDeclined(f"card declined for {amount}")


def rethrowing_processor():
    """``EXCEPTION_PROCESSOR``: a factory, as a project writes one."""
    from tool_calling import DefaultToolExecutionExceptionProcessor

    return DefaultToolExecutionExceptionProcessor(rethrown=[PaymentDeclined])


RETHROWING = tool_calling_settings(EXCEPTION_PROCESSOR=f"{__name__}.rethrowing_processor")


@pytest.mark.parametrize("mode", ["inline", "celery"])
def test_the_exception_processor_setting_rethrows_where_the_call_ran(alice, mode):
    model = ScriptedChatModel([tool_call("setting_charge", amount=5), text("Charged")])
    with registered(setting_charge):
        with override_settings(TOOL_CALLING={**RETHROWING, "EXECUTION": {"MODE": mode}}):
            # (A call on a worker adds a note: the worker's traceback.)
            with pytest.raises(PaymentDeclined, match="^card declined for 5"):
                governed_chat_client(user=alice, model=model).prompt("Pay").call()
        # Without it, the model is told and the turn goes on.
        model = ScriptedChatModel([tool_call("setting_charge", amount=5), text("Sorry")])
        assert governed_chat_client(user=alice, model=model).prompt("Pay").call().content() == (
            "Sorry"
        )


def test_the_exception_processor_setting_ends_a_durable_run_as_the_in_process_turn(alice):
    conversation = models.Conversation.objects.create(owner=alice)
    model = ScriptedChatModel([tool_call("setting_charge", amount=5), text("Charged")])
    celery = {**RETHROWING, "EXECUTION": {"MODE": "celery"}}
    with registered(setting_charge), chat_model(model), override_settings(TOOL_CALLING=celery):
        run = runs.start_turn(conversation, "Pay", user=alice)
    run.refresh_from_db()
    # The step that completes the batch raises it, as the in-process loop does, and fails.
    assert run.status == "failed"
    assert re.match(r"Step \d+ failed \(PaymentDeclined\); see the server log", run.error)
    assert RAN == ["charge 5"]


# --- EXECUTION["BROKER_TIMEOUT"] ------------------------------------------------------------------


@pytest.mark.parametrize("seconds", [0.5, 3])
def test_broker_timeout_bounds_the_socket_of_every_publish(seconds):
    """S9: the connection a publish uses times its socket operations out after BROKER_TIMEOUT."""
    from unittest import mock

    from tool_calling.calls import dispatch

    step = dispatch.task(dispatch.RUN_STEP)
    seen = []

    def apply_async(**options):
        seen.append(options)

    conf = step.app.conf
    eager = conf.task_always_eager
    conf.task_always_eager = False  # as on a real broker: the bounded path
    try:
        with (
            override_settings(
                TOOL_CALLING=tool_calling_settings(EXECUTION={"BROKER_TIMEOUT": seconds})
            ),
            mock.patch.object(step, "apply_async", side_effect=apply_async),
        ):
            dispatch.send_run_step("7b0b8b36-3b1e-4f36-9d89-2f6d6c1b9c41")
    finally:
        conf.task_always_eager = eager
    [options] = seen
    transport = options["connection"].transport_options
    assert (transport["socket_timeout"], transport["socket_connect_timeout"]) == (seconds, seconds)
    assert options["retry_policy"] == dispatch.PUBLISH_RETRY_POLICY
    assert options["args"] == ["7b0b8b36-3b1e-4f36-9d89-2f6d6c1b9c41"]
