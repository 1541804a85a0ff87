"""manage.py tools list / tools call, and manage.py chat against a ReplayServer."""

import contextlib
import json
import re
from io import StringIO

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.test import override_settings

from tool_calling import ToolContext, models, tool
from tool_calling.calls.failures import generic_text
from tool_calling.core.chat.messages import ToolResponse, ToolResponseMessage, UserMessage
from tool_calling.registry import registry
from tool_calling.repositories import DjangoChatMemoryRepository
from tool_calling.testing import ReplayServer, text, tool_call

pytestmark = pytest.mark.django_db

DEMO_TOOLS = (
    "get_current_time, get_weather, add_numbers, cancel_booking, refund_order"  # registry order
)


def run(*args):
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@tool
def whoami(context: ToolContext) -> str:
    """Say who is asking."""
    return json.dumps(dict(context))


@pytest.fixture
def extra_tool():
    """whoami in the project registry (not yet synced) for the length of a test."""
    registry.register(whoami, source="tests")
    yield whoami
    registry.unregister("whoami")


def weather(city):
    from project.demo.tools import get_weather

    return json.dumps(get_weather(city), separators=(",", ":"))


# --- tools list ------------------------------------------------------------------------------


def test_tools_list_shows_state_source_who_decides_and_limit(extra_tool):
    models.Tool.objects.filter(name="get_weather").update(enabled=False, requires_approval=True)
    models.Tool.objects.filter(name="cancel_booking").update(requires_confirmation=True)
    models.Tool.objects.filter(name="refund_order").update(requires_confirmation=True)
    models.ToolLimitOverride.objects.create(
        tool=models.Tool.objects.get(name="add_numbers"), max_calls_per_turn=5
    )
    models.ToolLimitOverride.objects.create(
        tool=models.Tool.objects.get(name="get_current_time"), excluded=True
    )
    models.Tool.objects.create(name="retired", source="old", missing=True)

    out, _ = run("tools", "list")

    assert [line.rstrip() for line in out.splitlines()] == [
        "NAME                             STATE      SOURCE           DECIDED BY      LIMIT",
        "add_numbers                      enabled    demo             -               5",
        "cancel_booking                   enabled    demo             user            default",
        "get_current_time                 enabled    demo             -               excluded",
        "get_weather                      disabled   demo             approver        default",
        "refund_order                     enabled    demo             user, approver  default",
        "retired                          missing    old              -               default",
        "whoami                           not synced",
    ]


# --- tools enable / disable / limit -------------------------------------------------------------


def limits():
    return {
        o.tool.name: (o.max_calls_per_turn, o.excluded)
        for o in models.ToolLimitOverride.objects.select_related("tool")
    }


def test_tools_enable_and_disable_change_only_what_differs_and_say_so():
    models.Tool.objects.filter(name="get_weather").update(enabled=False)

    out, _ = run("tools", "disable", "get_weather", "add_numbers")
    assert out == "add_numbers: disabled\nget_weather: unchanged\n"
    assert not models.Tool.objects.filter(name__in=["get_weather", "add_numbers"], enabled=True)

    out, _ = run("tools", "enable", "get_weather")
    assert out == "get_weather: enabled\n"
    assert models.Tool.objects.get(name="get_weather").enabled is True
    assert LogEntry.objects.count() == 0  # no --user: nobody to record it as


def test_tools_limit_sets_a_number_the_default_or_none_and_records_the_user():
    admin = User.objects.create_user("ops")

    assert run("tools", "limit", "add_numbers", "get_weather", "3", "--user", "ops")[0] == (
        "add_numbers: limit: 3 calls per turn\nget_weather: limit: 3 calls per turn\n"
    )
    assert limits() == {"add_numbers": (3, False), "get_weather": (3, False)}
    assert run("tools", "limit", "add_numbers", "none")[0] == (
        "add_numbers: excluded from per-tool limits\n"
    )
    assert run("tools", "limit", "get_weather", "default")[0] == "get_weather: limit: the default\n"
    assert limits() == {"add_numbers": (3, True)}
    entries = LogEntry.objects.filter(user=admin).order_by("object_repr")
    assert [(e.object_repr, e.change_message) for e in entries] == [
        ("add_numbers", "Limit: 3 calls per turn (manage.py tools)."),
        ("get_weather", "Limit: 3 calls per turn (manage.py tools)."),
    ]


@pytest.mark.parametrize("value", ["0", "-2", "many", "1.5"])
def test_tools_limit_refuses_a_value_that_is_not_a_limit(value):
    with pytest.raises(CommandError, match="must be a number of calls per turn"):
        run("tools", "limit", "add_numbers", value)
    assert limits() == {}


def test_tools_changes_nothing_when_a_name_is_unknown():
    with pytest.raises(CommandError, match="No tool named 'get_wether'"):
        run("tools", "disable", "add_numbers", "get_wether")
    assert models.Tool.objects.get(name="add_numbers").enabled is True


def test_tools_list_without_tools():
    models.Tool.objects.all().delete()
    saved = dict(registry._registry)
    registry.clear()
    try:
        out, _ = run("tools", "list")
    finally:
        registry._registry.update(saved)
    assert out == "No tools. Define @tool functions in an app's tools.py.\n"


# --- tools call ------------------------------------------------------------------------------


def test_tools_call_runs_the_tool_and_audits_it():
    out, _ = run("tools", "call", "add_numbers", '{"a": 1, "b": 2}')
    assert out == "3.0\n"
    execution = models.ToolExecution.objects.get()
    assert (
        execution.tool_name,
        execution.arguments,
        execution.result,
        execution.status,
        execution.conversation,
        execution.user,
    ) == ("add_numbers", '{"a": 1, "b": 2}', "3.0", "succeeded", None, None)
    assert re.fullmatch(r"cli_[0-9a-f]{12}", execution.tool_call_id)


def test_tools_call_arguments_default_to_an_empty_object():
    out, _ = run("tools", "call", "get_current_time")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00\n", out)


def test_tools_call_of_a_disabled_tool_is_refused_and_audited():
    models.Tool.objects.filter(name="get_weather").update(enabled=False)
    message = (
        "Unknown or disabled tool 'get_weather'. Available tools: get_current_time, "
        "add_numbers, cancel_booking, refund_order. Call one of these by its exact name."
    )
    with pytest.raises(CommandError, match=f"^{re.escape(message)}$"):
        run("tools", "call", "get_weather", '{"city": "Oslo"}')
    assert models.ToolExecution.objects.get().status == "refused"


def test_tools_call_of_an_unknown_tool():
    message = (
        f"Unknown or disabled tool 'nope'. Available tools: {DEMO_TOOLS}. "
        "Call one of these by its exact name."
    )
    with pytest.raises(CommandError, match=f"^{re.escape(message)}$"):
        run("tools", "call", "nope")


def test_tools_call_with_bad_arguments():
    message = "Invalid arguments for tool 'add_numbers':\n- b: Field required"
    with pytest.raises(CommandError, match=f"^{re.escape(message)}$"):
        run("tools", "call", "add_numbers", '{"a": 1}')
    assert models.ToolExecution.objects.get().status == "failed"


def test_tools_call_with_arguments_that_are_not_json():
    message = (
        "Invalid arguments for tool 'add_numbers': not valid JSON (expected value at line 1 "
        "column 1). Send the arguments as a JSON object."
    )
    with pytest.raises(CommandError, match=f"^{re.escape(message)}$"):
        run("tools", "call", "add_numbers", "a=1")


@tool
def broken_lookup(key: str) -> str:
    """Look a key up (its code has a bug)."""
    return {"known": "value"}[key]


@pytest.fixture
def broken_tool():
    """broken_lookup in the project registry and synced, for the length of a test."""
    registry.register(broken_lookup, source="tests")
    call_command("sync_tools", stdout=StringIO())
    yield broken_lookup
    registry.unregister("broken_lookup")


def test_tools_call_of_a_tool_that_reports_a_failure():
    """A ToolFailure's text is written for the model: the answer is that text, no error id."""
    message = "Unknown time zone 'Nowhere/Land'; use an IANA name like 'Europe/Oslo'."
    with pytest.raises(CommandError) as raised:
        run("tools", "call", "get_current_time", '{"timezone": "Nowhere/Land"}')
    assert str(raised.value) == message
    execution = models.ToolExecution.objects.get()
    assert (execution.status, execution.result, execution.error_id) == ("failed", message, "")


def test_tools_call_of_a_tool_that_raises(broken_tool):
    """S13: a KeyError is unexpected: the answer names its error id, the audit the detail."""
    with pytest.raises(CommandError) as raised:
        run("tools", "call", "broken_lookup", '{"key": "secret-key-name"}')
    execution = models.ToolExecution.objects.get()
    assert len(execution.error_id) == 12
    assert str(raised.value) == generic_text("broken_lookup", execution.error_id)
    assert "secret-key-name" not in str(raised.value)
    assert execution.status == "failed"
    assert "KeyError" in execution.error


def test_tools_call_runs_as_a_user_with_its_groups_and_context(extra_tool):
    call_command("sync_tools", stdout=StringIO())
    group = Group.objects.create(name="ops")
    models.Tool.objects.get(name="whoami").allowed_groups.add(group)
    user = User.objects.create_user("alice")

    with pytest.raises(CommandError, match=r"^Unknown or disabled tool 'whoami'\. "):
        run("tools", "call", "whoami")
    with pytest.raises(CommandError, match=r"^Unknown or disabled tool 'whoami'\. "):
        run("tools", "call", "whoami", "--user", "alice")

    user.groups.add(group)
    out, _ = run("tools", "call", "whoami", "--user", "alice")
    assert json.loads(out) == {"user_id": user.pk}
    assert models.ToolExecution.objects.get(status="succeeded").user == user


def test_tools_call_with_an_unknown_user():
    with pytest.raises(CommandError, match=r"^No user named 'ghost'\.$"):
        run("tools", "call", "add_numbers", "{}", "--user", "ghost")


# --- chat ------------------------------------------------------------------------------------


@contextlib.contextmanager
def replay(*steps):
    """A ReplayServer the configured OpenAIChatModel talks to."""
    with ReplayServer(steps) as server:
        chat_model = {
            "MODEL": "test-model",
            "BASE_URL": server.base_url + "/v1",
            "API_KEY": "test-key",
            "MAX_RETRIES": 0,
        }
        with override_settings(TOOL_CALLING={"CHAT_MODEL": chat_model}):
            yield server


def tool_names(body):
    return [entry["function"]["name"] for entry in body.get("tools", [])]


def stored(conversation):
    return DjangoChatMemoryRepository().find_by_conversation_id(str(conversation.pk))


def test_chat_stores_the_conversation_and_continues_it():
    with replay(
        tool_call("get_weather", city="Oslo"), text("It is sunny."), text("Still sunny.")
    ) as server:
        out, err = run("chat", "Weather in Oslo?")
        conversation = models.Conversation.objects.get()
        assert (out, err) == ("It is sunny.\n", f"Conversation: {conversation.pk}\n")
        assert conversation.title == "Weather in Oslo?"
        assert conversation.owner is None
        messages = stored(conversation)
        assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
        assert messages[2] == ToolResponseMessage(
            [ToolResponse("call_1", "get_weather", weather("Oslo"))]
        )
        assert tool_names(server.requests[0]) == [
            "get_current_time",
            "get_weather",
            "add_numbers",
            "cancel_booking",
            "refund_order",
        ]
        assert server.requests[0]["model"] == "test-model"

        out, err = run("chat", "And tomorrow?", "--conversation", str(conversation.pk))

        assert (out, err) == ("Still sunny.\n", f"Conversation: {conversation.pk}\n")
        assert models.Conversation.objects.count() == 1
        sent = server.requests[2]["messages"]
        assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user"]
        assert sent[0]["content"] == "Weather in Oslo?"
        assert sent[1]["tool_calls"][0]["function"] == {
            "name": "get_weather",
            "arguments": '{"city":"Oslo"}',
        }
        assert (sent[2]["tool_call_id"], sent[2]["content"]) == ("call_1", weather("Oslo"))
        assert sent[3]["content"] == "It is sunny."
        assert sent[4]["content"] == "And tomorrow?"
        assert [m.role for m in stored(conversation)] == [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
        ]
    assert models.ToolExecution.objects.get().conversation == conversation


def test_chat_tool_option_offers_only_that_tool():
    with replay(text("Hi")) as server:
        run("chat", "Hello", "--tool", "get_weather")
    assert tool_names(server.requests[0]) == ["get_weather"]


def test_chat_offers_no_disabled_tool():
    models.Tool.objects.filter(name="get_weather").update(enabled=False)
    with replay(text("Hi")) as server:
        run("chat", "Hello")
    assert tool_names(server.requests[0]) == [
        "get_current_time",
        "add_numbers",
        "cancel_booking",
        "refund_order",
    ]


def test_chat_with_an_unknown_tool_fails_before_anything_happens():
    message = f"Unknown tool(s): nope, nada. Registered tools: {DEMO_TOOLS}."
    with replay(text("Hi")) as server:
        with pytest.raises(CommandError, match=f"^{re.escape(message)}$"):
            run("chat", "Hello", "--tool", "nope", "--tool", "get_weather", "--tool", "nada")
    assert server.requests == []
    assert models.Conversation.objects.count() == 0


@pytest.mark.parametrize("bad", ["abc", "8b7f0a44-9c5e-4b7e-a0a4-2f0e5d1c9b11"])
def test_chat_with_an_unknown_conversation(bad):
    with replay(text("Hi")) as server:
        with pytest.raises(
            CommandError, match=f"^{re.escape(f'No conversation with id {bad!r}.')}$"
        ):
            run("chat", "Hello", "--conversation", bad)
    assert server.requests == []


def test_chat_system_message_is_sent_but_not_stored():
    with replay(text("Hi")) as server:
        run("chat", "Hello", "--system", "Be brief.")
    assert server.requests[0]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello"},
    ]
    assert [m.role for m in stored(models.Conversation.objects.get())] == ["user", "assistant"]


def test_chat_as_a_user_owns_the_conversation():
    alice = User.objects.create_user("alice")
    with replay(text("Hi")):
        run("chat", "Hello", "--user", "alice")
    assert models.Conversation.objects.get().owner == alice


def test_chat_with_an_unknown_user():
    with pytest.raises(CommandError, match=r"^No user named 'ghost'\.$"):
        run("chat", "Hello", "--user", "ghost")


def test_chat_stream_prints_and_stores_the_answer():
    with replay(tool_call("add_numbers", a=2, b=3), text("The sum is five.")) as server:
        out, _ = run("chat", "Add 2 and 3", "--stream")
    assert out == "The sum is five.\n"
    assert server.requests[0]["stream"] is True
    messages = stored(models.Conversation.objects.get())
    assert messages[0] == UserMessage("Add 2 and 3")
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[2].responses == [ToolResponse("call_1", "add_numbers", "5.0")]
    assert messages[3].text == "The sum is five."


def test_chat_model_failure_is_a_command_error_and_the_question_is_kept():
    with replay({"status": 500}):
        with pytest.raises(CommandError) as raised:
            run("chat", "Hello")
    assert str(raised.value) == (
        "OpenAI-compatible API returned 500 Internal Server Error for model 'test-model' "
        "(request id req_replay_1): Scripted 500 Internal Server Error"
    )
    conversation = models.Conversation.objects.get()
    assert stored(conversation) == [UserMessage("Hello")]


@pytest.mark.django_db
def test_chat_refuses_to_continue_another_users_conversation():
    from django.contrib.auth.models import User
    from django.core.management import CommandError, call_command

    from tool_calling import models

    User.objects.create_user("alice")
    bob = User.objects.create_user("bob")
    conversation = models.Conversation.objects.create(owner=bob, title="bob's")
    with pytest.raises(CommandError) as caught:
        call_command("chat", "hi", "--user", "alice", "--conversation", str(conversation.pk))
    assert str(caught.value) == (
        f"Conversation {conversation.pk} belongs to another user; 'alice' cannot continue it."
    )
