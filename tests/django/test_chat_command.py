"""``manage.py chat``: one turn with the configured model and the registered tools, printed."""

import os
import re
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from tool_calling import models
from tool_calling.testing import ReplayServer, text, tool_call

pytestmark = pytest.mark.django_db

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_TOOLS = ["get_current_time", "get_weather", "add_numbers", "cancel_booking", "refund_order"]


def chat_model_settings(server):
    return {
        "CHAT_MODEL": {
            "MODEL": "replay-model",
            "BASE_URL": server.base_url + "/v1",
            "API_KEY": "test-key",
            "MAX_RETRIES": 0,
        }
    }


def run_chat(server, *args, **options):
    stdout, stderr = StringIO(), StringIO()
    with override_settings(TOOL_CALLING=chat_model_settings(server)):
        call_command("chat", *args, stdout=stdout, stderr=stderr, **options)
    return stdout.getvalue(), stderr.getvalue()


def offered(body):
    return [entry["function"]["name"] for entry in body.get("tools", [])]


def conversation_id(stderr):
    match = re.fullmatch(r"Conversation: ([0-9a-f-]{36})\n", stderr)
    assert match is not None, stderr
    return match.group(1)


def test_chat_runs_one_turn_with_the_registered_tools_and_prints_the_answer():
    steps = [tool_call("add_numbers", a=2, b=3), text("2 + 3 = 5.")]
    with ReplayServer(steps) as server:
        stdout, stderr = run_chat(server, "What is 2 + 3?")
        requests = server.requests

    assert stdout == "2 + 3 = 5.\n"
    assert [offered(body) for body in requests] == [DEMO_TOOLS, DEMO_TOOLS]
    assert requests[0]["model"] == "replay-model"
    assert requests[0]["messages"] == [{"role": "user", "content": "What is 2 + 3?"}]
    assert requests[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "5.0",
    }
    conversation = models.Conversation.objects.get(pk=conversation_id(stderr))
    assert [m.role for m in conversation.messages.order_by("sequence")] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


def test_tool_offers_only_the_named_tools_in_the_given_order():
    with ReplayServer([text("Noted.")]) as server:
        stdout, _ = run_chat(server, "Hi", "--tool", "add_numbers", "--tool", "get_weather")
        requests = server.requests

    assert stdout == "Noted.\n"
    assert offered(requests[0]) == ["add_numbers", "get_weather"]


def test_an_unknown_tool_is_a_command_error_and_the_model_is_not_called():
    with ReplayServer([text("never")]) as server:
        with pytest.raises(CommandError) as caught:
            run_chat(server, "Hi", "--tool", "get_wether")
        assert server.requests == []

    assert str(caught.value) == (
        "Unknown tool(s): get_wether. Registered tools: get_current_time, get_weather, "
        "add_numbers, cancel_booking, refund_order."
    )


def test_a_named_tool_an_operator_disabled_is_a_command_error():
    models.Tool.objects.filter(name="get_weather").update(enabled=False)
    with ReplayServer([text("never")]) as server:
        with pytest.raises(CommandError) as caught:
            run_chat(server, "Hi", "--tool", "add_numbers", "--tool", "get_weather")
        assert server.requests == []

    assert str(caught.value) == (
        "Tool(s) not available: get_weather. An operator disabled them, they are missing from "
        "the code, or they are restricted to other groups."
    )


def test_a_disabled_tool_is_not_offered_by_default():
    models.Tool.objects.filter(name="get_weather").update(enabled=False)
    with ReplayServer([text("Hi.")]) as server:
        run_chat(server, "Hi")
        requests = server.requests

    assert offered(requests[0]) == [
        "get_current_time",
        "add_numbers",
        "cancel_booking",
        "refund_order",
    ]


def test_stream_prints_the_answer_as_it_streams():
    steps = [tool_call("get_weather", city="Oslo"), text("It is sunny in Oslo today.")]
    with ReplayServer(steps) as server:
        stdout, _ = run_chat(server, "Weather in Oslo?", "--stream")
        requests = server.requests

    assert stdout == "It is sunny in Oslo today.\n"
    assert [body["stream"] for body in requests] == [True, True]
    assert requests[1]["messages"][-1]["tool_call_id"] == "call_1"


def test_system_goes_first():
    with ReplayServer([text("Hi.")]) as server:
        run_chat(server, "Hello", "--system", "Answer in one word.")
        messages = server.requests[0]["messages"]

    assert messages == [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Hello"},
    ]


def test_conversation_continues_a_stored_conversation():
    steps = [text("Nice to meet you, Ann."), text("Your name is Ann.")]
    with ReplayServer(steps) as server:
        _, stderr = run_chat(server, "My name is Ann.")
        first = conversation_id(stderr)
        stdout, stderr = run_chat(server, "What is my name?", "--conversation", first)
        requests = server.requests

    assert stdout == "Your name is Ann.\n"
    assert conversation_id(stderr) == first
    assert requests[1]["messages"] == [
        {"role": "user", "content": "My name is Ann."},
        {"role": "assistant", "content": "Nice to meet you, Ann."},
        {"role": "user", "content": "What is my name?"},
    ]


def test_an_unknown_conversation_is_a_command_error():
    with ReplayServer([]) as server:
        with pytest.raises(CommandError, match=re.escape("No conversation with id 'nope'.")):
            run_chat(server, "Hi", "--conversation", "nope")


def test_a_model_failure_is_a_command_error():
    with ReplayServer([{"status": 500, "headers": {"x-should-retry": "false"}}]) as server:
        with pytest.raises(CommandError) as caught:
            run_chat(server, "Hi")

    assert str(caught.value) == (
        "OpenAI-compatible API returned 500 Internal Server Error for model 'replay-model' "
        "(request id req_replay_1): Scripted 500 Internal Server Error"
    )


EMPTY = "The message is empty: give the text to send as an argument, or on stdin with '-'."


@pytest.mark.parametrize("message", ["", "   ", "\n\t"])
def test_a_blank_message_is_a_command_error_as_in_the_api(message):
    with ReplayServer([]) as server:
        with pytest.raises(CommandError, match=re.escape(EMPTY)):
            run_chat(server, message)
        assert server.requests == []
    assert not models.Conversation.objects.exists()


def test_a_message_longer_than_the_api_takes_is_a_command_error():
    with ReplayServer([]) as server:
        with pytest.raises(CommandError) as caught:
            run_chat(server, "x" * 32001)
        assert server.requests == []
    assert str(caught.value) == (
        "The message is 32001 characters long; at most 32000 are accepted "
        "(TOOL_CALLING['API']['MAX_MESSAGE_CHARS'])."
    )
    assert not models.Conversation.objects.exists()


@pytest.mark.parametrize("args", [("-",), ()])
def test_the_message_can_come_from_stdin(args):
    with ReplayServer([text("Hello!")]) as server:
        stdout, _ = run_chat(server, *args, stdin=StringIO("Hi there,\nhow are you?\n"))
        requests = server.requests

    assert stdout == "Hello!\n"
    # The text as read, less the newline that ends the input.
    assert requests[0]["messages"] == [{"role": "user", "content": "Hi there,\nhow are you?"}]


def test_a_blank_stdin_is_a_command_error():
    with ReplayServer([]) as server:
        with pytest.raises(CommandError, match=re.escape(EMPTY)):
            run_chat(server, "-", stdin=StringIO("\n"))


class Terminal(StringIO):
    def isatty(self):
        return True


def test_without_a_message_a_terminal_is_not_read():
    with ReplayServer([]) as server:
        with pytest.raises(CommandError) as caught:
            run_chat(server, stdin=Terminal())
    assert str(caught.value) == (
        'Give the message as an argument (manage.py chat "What\'s the weather?"), or pipe it in '
        "with '-' (echo \"What's the weather?\" | manage.py chat -)."
    )


@pytest.mark.integration
def test_manage_py_chat_runs_as_a_process(tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "OPENAI_API_KEY": "test-key",
        "OPENAI_MODEL": "replay-model",
    }
    env.pop("OPENAI_BASE_URL", None)
    manage = [sys.executable, str(REPO_ROOT / "manage.py")]
    migrate = subprocess.run(
        [*manage, "migrate", "--no-input", "-v", "0"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrate.returncode == 0, migrate.stderr

    steps = [tool_call("get_weather", city="Oslo"), text("It is sunny in Oslo.")]
    with ReplayServer(steps) as server:
        env["OPENAI_BASE_URL"] = server.base_url + "/v1"
        chat = subprocess.run(
            [*manage, "chat", "-", "--tool", "get_weather"],
            cwd=REPO_ROOT,
            env=env,
            input="Weather in Oslo?\n",  # a pipe, as in: echo "Weather in Oslo?" | ... chat -
            capture_output=True,
            text=True,
            timeout=120,
        )
        requests = server.requests

    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == "It is sunny in Oslo.\n"
    assert requests[0]["messages"] == [{"role": "user", "content": "Weather in Oslo?"}]
    assert [offered(body) for body in requests] == [["get_weather"], ["get_weather"]]
    assert requests[1]["messages"][-1]["tool_call_id"] == "call_1"
    assert all(authorized for authorized in server.authorization)
