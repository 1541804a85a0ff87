"""Governed turns: what is offered and run, refusals, limits, step-by-step storage, the audit.

Each test runs ScriptedChatModel turns through governed_chat_client with a ToolRegistry of its
own, mirrored into the Tool table by sync_tools, as migrate does for the project registry.
"""

import json

import pytest
from django.contrib.auth.models import AnonymousUser, Group, User
from django.test import override_settings

from tool_calling import ToolContext, models, tool
from tool_calling.audit import audit_text
from tool_calling.calls.failures import generic_text
from tool_calling.core.chat.messages import (
    AssistantMessage,
    ToolCall,
    ToolResponse,
    ToolResponseMessage,
    UserMessage,
)
from tool_calling.core.execution.limits import ToolCallLimits
from tool_calling.governance import governed_chat_client
from tool_calling.registry import ToolRegistry
from tool_calling.repositories import DjangoChatMemoryRepository
from tool_calling.resolvers import (
    DatabaseToolCallbackResolver,
    GovernedTools,
    effective_limits,
    is_available_to,
)
from tool_calling.sync import sync_tools
from tool_calling.testing import ScriptedChatModel, text, tool_call, tool_calls

pytestmark = pytest.mark.django_db

SENTINEL = "sk-SENTINEL-7f3a9c"
NOT_AVAILABLE = (
    "Tool {!r} is not available: an operator disabled, removed or restricted it. "
    "Do not call it again in this conversation."
)

RAN: list[tuple[str, object]] = []
"""Side effects of the tools below: (tool, argument) per call that actually ran."""
SEEN: list[dict[str, list]] = []
"""What the snapshot tool found in the database while it ran."""
REDACTED: list[tuple[str, str]] = []
"""(tool_name, field) per call of the redactor."""


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    RAN.append(("lookup", city))
    return f"Found {city}"


@tool
def group_tool(x: int) -> int:
    """Only for the staff group."""
    RAN.append(("group_tool", x))
    return x * 2


@tool
def disabled_tool() -> str:
    """Disabled by the operator."""
    RAN.append(("disabled_tool", None))
    return "ran"


@tool
def gone() -> str:
    """Marked missing from code."""
    RAN.append(("gone", None))
    return "ran"


@tool
def unsynced() -> str:
    """In code but never synced into the database."""
    RAN.append(("unsynced", None))
    return "ran"


@tool
def whoami(context: ToolContext) -> str:
    """Say who is asking."""
    RAN.append(("whoami", dict(context)))
    return json.dumps({key: context.get(key) for key in ("user_id", "conversation_id")})


@tool
def snapshot(context: ToolContext) -> str:
    """Record the stored messages and audit rows at the moment the tool runs."""
    rows = models.Message.objects.filter(conversation_id=context["conversation_id"])
    SEEN.append(
        {
            "messages": [
                (row.sequence, row.role, [call["name"] for call in row.tool_calls])
                for row in rows.order_by("sequence")
            ],
            "executions": list(
                models.ToolExecution.objects.order_by("pk").values_list(
                    "tool_name", "status", "assistant_message__sequence"
                )
            ),
        }
    )
    return "snap"


@tool
def echo_secret(token: str) -> str:
    """Use a token."""
    RAN.append(("echo_secret", token))
    return f"used {token}"


@tool
def fail_with_secret(token: str) -> str:
    """Fail, mentioning the token."""
    raise RuntimeError(f"backend rejected {token}")


@tool
def disable_myself() -> str:
    """Run once: the tool disables itself in the database."""
    RAN.append(("disable_myself", None))
    models.Tool.objects.filter(name="disable_myself").update(enabled=False)
    return "disabled"


def mask_secrets(text, *, tool_name, field):
    """The AUDIT_REDACTOR of these tests."""
    REDACTED.append((tool_name, field))
    return text.replace(SENTINEL, "[REDACTED]")


@pytest.fixture(autouse=True)
def _reset_logs():
    RAN.clear()
    SEEN.clear()
    REDACTED.clear()


def governed_registry(*tools, synced=True):
    """A registry of ``tools`` with their Tool rows (the demo tools' rows are marked missing)."""
    own = ToolRegistry()
    own.register(*tools, source="tests")
    if synced:
        sync_tools(own)
    return own


@pytest.fixture
def staff():
    return Group.objects.create(name="staff")


@pytest.fixture
def alice():
    return User.objects.create_user("alice")


@pytest.fixture
def bob(staff):
    bob = User.objects.create_user("bob")
    bob.groups.add(staff)
    return bob


@pytest.fixture
def root():
    return User.objects.create_superuser("root")


@pytest.fixture
def conversation():
    return models.Conversation.objects.create(title="test")


@pytest.fixture
def governed(staff):
    """lookup (everyone), group_tool (staff), disabled_tool, gone (missing), unsynced (no row)."""
    own = governed_registry(lookup, group_tool, disabled_tool, gone)
    own.register(unsynced, source="tests")
    models.Tool.objects.get(name="group_tool").allowed_groups.add(staff)
    models.Tool.objects.filter(name="disabled_tool").update(enabled=False)
    models.Tool.objects.filter(name="gone").update(missing=True)
    models.Tool.objects.create(name="ghost")  # a row without code is never offered either
    return own


def turn(model, registry, *, user=None, conversation=None, message="Go", **kwargs):
    client = governed_chat_client(
        user=user, conversation=conversation, model=model, tool_registry=registry, **kwargs
    )
    return client.prompt(message).call().content()


def last_responses(model, request=-1):
    """The tool responses sent back to the model in ``request``."""
    message = model.requests[request].messages[-1]
    assert isinstance(message, ToolResponseMessage)
    return message.responses


def stored(conversation):
    return DjangoChatMemoryRepository().find_by_conversation_id(str(conversation.pk))


# --- what is offered -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "offered"),
    [
        (None, ["lookup"]),
        ("anonymous", ["lookup"]),
        ("alice", ["lookup"]),
        ("bob", ["lookup", "group_tool"]),
        ("root", ["lookup", "group_tool"]),
    ],
)
def test_only_enabled_present_allowed_tools_are_offered(governed, request, user, offered):
    """Allowed groups empty = everyone; superusers pass every group; anonymous users none."""
    if user == "anonymous":
        user = AnonymousUser()
    elif user is not None:
        user = request.getfixturevalue(user)
    model = ScriptedChatModel([text("Hi")])
    assert turn(model, governed, user=user) == "Hi"
    assert model.tool_names_seen == [offered]
    resolver = DatabaseToolCallbackResolver(user, governed)
    names = ["lookup", "group_tool", "disabled_tool", "gone", "unsynced", "ghost"]
    assert [name for name in names if resolver.resolve(name) is not None] == offered


def test_tool_names_narrow_the_offer_but_never_widen_it(governed, alice):
    model = ScriptedChatModel([text("Hi")])
    turn(model, governed, user=alice, tool_names=["group_tool", "lookup", "disabled_tool"])
    assert model.tool_names_seen == [["lookup"]]


# --- refusals (S1) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "disabled_tool",
        "group_tool",  # alice is not in staff
        "gone",
        "unsynced",
        "ghost",
        "delete_all",
        "Lookup",
        "lookup ",
        "l\u043eokup",  # Cyrillic o
    ],
)
def test_a_tool_the_request_does_not_offer_is_refused_and_audited(
    governed, alice, conversation, name
):
    model = ScriptedChatModel([tool_call(name), text("Sorry")])
    assert turn(model, governed, user=alice, conversation=conversation) == "Sorry"

    expected = (
        f"Unknown or disabled tool {name!r}. Available tools: lookup. "
        "Call one of these by its exact name."
    )
    assert last_responses(model) == [ToolResponse("call_1", name, expected, is_error=True)]
    assert RAN == []
    execution = models.ToolExecution.objects.get()
    assert (
        execution.tool_name,
        execution.tool_call_id,
        execution.status,
        execution.is_error,
        execution.result,
        execution.arguments,
        execution.user,
        execution.conversation,
        execution.assistant_message.sequence,
        execution.duration_ms,
    ) == (name, "call_1", "refused", True, expected, "{}", alice, conversation, 2, 0)
    assert execution.tool == models.Tool.objects.filter(name=name).first()


@pytest.mark.parametrize("change", ["disable", "mark missing", "restrict"])
def test_a_tool_withdrawn_after_the_model_asked_is_refused_and_does_not_run(
    governed, alice, conversation, change
):
    """S2: the Tool row is read again when the call is about to run."""

    def operator_acts_then_model_calls(prompt):
        tool = models.Tool.objects.get(name="lookup")
        if change == "disable":
            tool.enabled = False
            tool.save()
        elif change == "mark missing":
            tool.missing = True
            tool.save()
        else:
            tool.allowed_groups.add(Group.objects.create(name="others"))
        return tool_call("lookup", city="Oslo")

    model = ScriptedChatModel([operator_acts_then_model_calls, text("Understood")])
    assert turn(model, governed, user=alice, conversation=conversation) == "Understood"

    assert model.tool_names_seen[0] == ["lookup"]  # offered when the turn started
    assert RAN == []
    refusal = NOT_AVAILABLE.format("lookup")
    assert last_responses(model) == [ToolResponse("call_1", "lookup", refusal, is_error=True)]
    execution = models.ToolExecution.objects.get()
    assert (execution.status, execution.is_error, execution.result, execution.started_at) == (
        "refused",
        True,
        refusal,
        execution.finished_at,
    )


def test_a_tool_disabled_by_its_own_first_call_is_refused_on_the_next(governed, conversation):
    own = governed_registry(disable_myself, lookup)
    model = ScriptedChatModel(
        [tool_call("disable_myself"), tool_call("disable_myself"), text("Done")]
    )
    assert turn(model, own, conversation=conversation) == "Done"
    assert RAN == [("disable_myself", None)]
    assert last_responses(model, 1) == [ToolResponse("call_1", "disable_myself", "disabled")]
    assert last_responses(model, 2) == [
        ToolResponse("call_2", "disable_myself", NOT_AVAILABLE.format("disable_myself"), True)
    ]
    assert list(models.ToolExecution.objects.order_by("pk").values_list("status", flat=True)) == [
        "succeeded",
        "refused",
    ]


@pytest.mark.parametrize("user", ["bob", "root"])
def test_group_members_and_superusers_run_a_restricted_tool(governed, request, user):
    user = request.getfixturevalue(user)
    model = ScriptedChatModel([tool_call("group_tool", x=21), text("42")])
    assert turn(model, governed, user=user) == "42"
    assert RAN == [("group_tool", 21)]
    assert last_responses(model) == [ToolResponse("call_1", "group_tool", "42")]
    assert models.ToolExecution.objects.get().status == "succeeded"


def test_is_available_to_reads_the_database_each_time(governed, alice, bob):
    assert is_available_to("lookup", alice)
    assert not is_available_to("group_tool", alice)
    assert is_available_to("group_tool", bob)
    assert not is_available_to("disabled_tool", bob)
    assert not is_available_to("gone", bob)
    assert not is_available_to("unsynced", bob)
    models.Tool.objects.filter(name="lookup").update(enabled=False)
    assert not is_available_to("lookup", alice)


# --- limits from the database (S7) -----------------------------------------------------------


def three_lookups():
    return [
        tool_call("lookup", city="Oslo"),
        tool_call("lookup", city="Bergen"),
        tool_call("lookup", city="Tromsø"),
        text("Done"),
    ]


def breach(limit):
    return (
        f"Tool call limit ({limit}) exceeded for tool 'lookup'. "
        "No further calls to this tool are allowed in this turn."
    )


@override_settings(
    TOOL_CALLING={
        "LIMITS": {"MAX_CALLS_PER_TOOL_DEFAULT": 1, "ON_LIMIT_EXCEEDED": "RETURN_ERROR_RESPONSE"}
    }
)
def test_limit_overrides_and_exclusions_apply_on_the_next_turn(governed, conversation):
    # Turn 1: the settings' default of one call per tool.
    model = ScriptedChatModel(three_lookups())
    assert turn(model, governed, conversation=conversation) == "Done"
    assert RAN == [("lookup", "Oslo")]
    assert last_responses(model, 2) == [ToolResponse("call_2", "lookup", breach(1), True)]
    # The refused calls are in the audit, with the text the model got.
    refused = models.ToolExecution.objects.filter(status="refused").order_by("pk")
    assert [(e.tool_call_id, e.result) for e in refused] == [
        ("call_2", breach(1)),
        ("call_3", breach(1)),
    ]

    # The operator raises the limit to two: the next turn sees it, nothing restarts.
    override = models.ToolLimitOverride.objects.create(
        tool=models.Tool.objects.get(name="lookup"), max_calls_per_turn=2
    )
    RAN.clear()
    model = ScriptedChatModel(three_lookups())
    assert turn(model, governed, conversation=conversation) == "Done"
    assert RAN == [("lookup", "Oslo"), ("lookup", "Bergen")]
    assert last_responses(model, 3) == [ToolResponse("call_3", "lookup", breach(2), True)]

    # The operator excludes the tool from per-tool limits.
    override.excluded = True
    override.save()
    RAN.clear()
    model = ScriptedChatModel(three_lookups())
    assert turn(model, governed, conversation=conversation) == "Done"
    assert [city for _, city in RAN] == ["Oslo", "Bergen", "Tromsø"]

    # And removes the override: back to the settings.
    override.delete()
    RAN.clear()
    model = ScriptedChatModel(three_lookups())
    turn(model, governed, conversation=conversation)
    assert RAN == [("lookup", "Oslo")]


@override_settings(TOOL_CALLING={"LIMITS": {"MAX_TOTAL_TOOL_CALLS": 2}})
def test_an_excluded_tool_still_counts_toward_the_total_and_throw_ends_the_turn(
    governed, conversation
):
    models.ToolLimitOverride.objects.create(
        tool=models.Tool.objects.get(name="lookup"), excluded=True
    )
    model = ScriptedChatModel(three_lookups())
    answer = turn(model, governed, conversation=conversation)
    total = "Total tool call limit (2) exceeded for this turn. No further tool calls are allowed."
    assert answer == total
    assert [city for _, city in RAN] == ["Oslo", "Bergen"]
    assert model.remaining_steps == 1  # the model was not called again
    # Every step is stored: the breaching call is answered with the breach text, and the
    # answer the user got closes the turn. The breaching call is audited as refused (it never
    # ran), with the breach text.
    roles = [m.role for m in stored(conversation)]
    assert roles == ["user"] + ["assistant", "tool"] * 3 + ["assistant"]
    assert stored(conversation)[-2].responses[-1].response_data == total
    assert stored(conversation)[-1] == AssistantMessage(total)
    audit = models.ToolExecution.objects.order_by("pk")
    assert [(e.status, e.is_error) for e in audit] == [
        ("succeeded", False),
        ("succeeded", False),
        ("refused", True),
    ]
    assert audit.last().result == total and audit.last().started_at is not None


@override_settings(TOOL_CALLING={"LIMITS": {"MAX_TOTAL_TOOL_CALLS": 1}})
def test_the_answer_of_a_turn_ended_by_a_limit_is_stored(governed, conversation):
    model = ScriptedChatModel(three_lookups())
    answer = turn(model, governed, conversation=conversation)
    assert stored(conversation)[-1] == AssistantMessage(answer)


def test_effective_limits_merge_the_database_into_the_settings(governed):
    lookup_row = models.Tool.objects.get(name="lookup")
    group_row = models.Tool.objects.get(name="group_tool")
    models.ToolLimitOverride.objects.create(tool=lookup_row, max_calls_per_turn=2)
    models.ToolLimitOverride.objects.create(tool=group_row, excluded=True)
    models.ToolLimitOverride.objects.create(
        tool=models.Tool.objects.get(name="gone"), max_calls_per_turn=None
    )
    base = ToolCallLimits(
        max_calls_per_tool=5,
        per_tool={"lookup": 9, "other": 1},
        excluded_tools=["lookup", "clock"],
        max_total_tool_calls=7,
        on_limit_exceeded="RETURN_ERROR_RESPONSE",
    )

    merged = effective_limits(base)

    assert merged == ToolCallLimits(
        max_calls_per_tool=5,
        per_tool={"lookup": 2, "other": 1},  # the operator's 2 replaces the settings' 9 ...
        excluded_tools=["clock", "group_tool"],  # ... and the settings' exclusion of lookup
        max_total_tool_calls=7,
        on_limit_exceeded="RETURN_ERROR_RESPONSE",
    )
    assert (merged.limit_for("lookup"), merged.limit_for("group_tool")) == (2, None)
    assert GovernedTools(None, governed).limits(base) == merged


# --- step-by-step persistence ----------------------------------------------------------------


def test_each_step_is_stored_before_the_next_one_runs(conversation):
    own = governed_registry(snapshot)
    model = ScriptedChatModel([tool_call("snapshot"), tool_call("snapshot"), text("Done")])
    assert turn(model, own, conversation=conversation, message="Snap twice") == "Done"

    # While the first call ran: the user message and the assistant's call were stored, and its
    # audit row pointed at that assistant message.
    assert SEEN[0] == {
        "messages": [(1, "user", []), (2, "assistant", ["snapshot"])],
        "executions": [("snapshot", "running", 2)],
    }
    assert SEEN[1] == {
        "messages": [
            (1, "user", []),
            (2, "assistant", ["snapshot"]),
            (3, "tool", []),
            (4, "assistant", ["snapshot"]),
        ],
        "executions": [("snapshot", "succeeded", 2), ("snapshot", "running", 4)],
    }
    rows = list(conversation.messages.order_by("sequence").values_list("sequence", "role"))
    assert rows == [
        (1, "user"),
        (2, "assistant"),
        (3, "tool"),
        (4, "assistant"),
        (5, "tool"),
        (6, "assistant"),
    ]
    messages = stored(conversation)
    assert messages[0] == UserMessage("Snap twice")
    assert messages[1].tool_calls == [ToolCall("call_1", "snapshot", "{}")]
    assert messages[2] == ToolResponseMessage([ToolResponse("call_1", "snapshot", "snap")])
    assert messages[5].text == "Done"
    # What the model saw on its last call is exactly what the database loads back.
    assert model.requests[2].messages == messages[:5]


def test_a_crash_after_a_tool_ran_keeps_every_finished_step(conversation):
    own = governed_registry(lookup)

    def model_goes_down(prompt):
        raise ConnectionError("model down")

    model = ScriptedChatModel([tool_call("lookup", city="Oslo"), model_goes_down])
    with pytest.raises(ConnectionError, match="model down"):
        turn(model, own, conversation=conversation, message="Find Oslo")

    messages = stored(conversation)
    assert len(messages) == 3
    assert messages[0] == UserMessage("Find Oslo")
    assert messages[1].tool_calls == [ToolCall("call_1", "lookup", '{"city":"Oslo"}')]
    assert messages[2] == ToolResponseMessage([ToolResponse("call_1", "lookup", "Found Oslo")])
    assert models.ToolExecution.objects.get().status == "succeeded"


def test_a_second_turn_sends_the_stored_conversation(conversation):
    own = governed_registry(lookup)
    turn(
        ScriptedChatModel([tool_call("lookup", city="Oslo"), text("Found it")]),
        own,
        conversation=conversation,
        message="Find Oslo",
    )
    model = ScriptedChatModel([text("You asked about Oslo")])
    assert turn(model, own, conversation=conversation, message="What did I ask?") == (
        "You asked about Oslo"
    )
    assert model.requests[0].messages == [*stored(conversation)[:4], UserMessage("What did I ask?")]
    assert len(stored(conversation)) == 6


@override_settings(TOOL_CALLING={"MEMORY_MAX_MESSAGES": 3})
def test_memory_max_messages_bounds_what_the_model_sees(conversation):
    own = governed_registry(lookup)
    for n in range(3):
        turn(ScriptedChatModel([text(f"Answer {n}")]), own, conversation=conversation)
    model = ScriptedChatModel([text("Last")])
    turn(model, own, conversation=conversation, message="Now")
    # The last three stored messages, then the new one (the window is read before it is added).
    history = stored(conversation)
    assert [m.text for m in history] == ["Go", "Answer 0", "Go", "Answer 1", "Go", "Answer 2"] + [
        "Now",
        "Last",
    ]
    assert model.requests[0].messages == [*history[3:6], UserMessage("Now")]


# --- the audit (S12) -------------------------------------------------------------------------


@override_settings(
    TOOL_CALLING={
        "AUDIT_MAX_CHARS": 40,
        "AUDIT_REDACTOR": "tests.django.test_governance.mask_secrets",
    }
)
def test_audit_rows_are_redacted_then_truncated_and_never_hold_the_secret(alice, conversation):
    own = governed_registry(echo_secret, fail_with_secret)
    token = SENTINEL + "x" * 60
    model = ScriptedChatModel(
        [
            tool_call("echo_secret", token=token),
            tool_call("fail_with_secret", token=SENTINEL),
            text("Done"),
        ]
    )
    assert turn(model, own, user=alice, conversation=conversation) == "Done"

    # The model still gets the real result: the redactor is for the audit only. An unexpected
    # error reaches it as a generic text with its error id (S13): the secret does not.
    success, failure = models.ToolExecution.objects.order_by("pk")
    assert last_responses(model, 1) == [ToolResponse("call_1", "echo_secret", f"used {token}")]
    assert last_responses(model, 2) == [
        ToolResponse(
            "call_2", "fail_with_secret", generic_text("fail_with_secret", failure.error_id), True
        )
    ]

    arguments = json.dumps({"token": "[REDACTED]" + "x" * 60}, separators=(",", ":"))
    assert success.arguments == (
        arguments[:40] + f"\n[Truncated: {len(arguments)} characters; first 40 kept.]"
    )
    result = "used [REDACTED]" + "x" * 60
    assert (
        success.result == result[:40] + f"\n[Truncated: {len(result)} characters; first 40 kept.]"
    )
    assert (success.status, success.is_error, success.error, success.user) == (
        "succeeded",
        False,
        "",
        alice,
    )
    assert failure.arguments == '{"token":"[REDACTED]"}'
    assert failure.result == "backend rejected [REDACTED]"
    assert (failure.status, failure.is_error) == ("failed", True)
    assert failure.error.startswith("Traceback (most recent call last):\n")
    assert failure.error.endswith("\n[Truncated: " + failure.error.split("[Truncated: ")[1])
    for row in models.ToolExecution.objects.values():
        assert SENTINEL not in json.dumps(row, default=str)
    assert REDACTED == [
        ("echo_secret", "arguments"),
        ("echo_secret", "result"),
        ("fail_with_secret", "arguments"),
        ("fail_with_secret", "result"),
        ("fail_with_secret", "error"),
    ]


@override_settings(TOOL_CALLING={"AUDIT_MAX_CHARS": None})
def test_audit_text_without_a_cap_or_redactor_keeps_everything():
    assert audit_text("x" * 100_000, tool_name="t", field="result") == "x" * 100_000
    assert audit_text(None, tool_name="t", field="result") == ""


def test_audit_text_takes_a_callable_redactor():
    with override_settings(TOOL_CALLING={"AUDIT_REDACTOR": mask_secrets, "AUDIT_MAX_CHARS": 5}):
        assert audit_text(SENTINEL, tool_name="t", field="error") == (
            "[REDA\n[Truncated: 10 characters; first 5 kept.]"
        )


def test_every_execution_writes_one_row_with_timing(conversation, alice):
    own = governed_registry(lookup)
    model = ScriptedChatModel([tool_call("lookup", city="Oslo"), text("Done")])
    turn(model, own, user=alice, conversation=conversation)
    execution = models.ToolExecution.objects.get()
    assert (
        execution.tool.name,
        execution.tool_name,
        execution.tool_call_id,
        execution.arguments,
        execution.result,
        execution.status,
        execution.conversation,
        execution.assistant_message.sequence,
        execution.user,
    ) == (
        "lookup",
        "lookup",
        "call_1",
        '{"city":"Oslo"}',
        "Found Oslo",
        "succeeded",
        conversation,
        2,
        alice,
    )
    assert execution.started_at <= execution.finished_at
    assert execution.duration_ms is not None


def test_bad_arguments_are_audited_as_failed_and_do_not_run(conversation):
    own = governed_registry(lookup)
    model = ScriptedChatModel([tool_call("lookup", town="Oslo"), text("Oops")])
    turn(model, own, conversation=conversation)
    expected = (
        "Invalid arguments for tool 'lookup':\n"
        "- city: Field required\n"
        "- town: Unknown parameter; remove it"
    )
    assert last_responses(model) == [ToolResponse("call_1", "lookup", expected, is_error=True)]
    assert RAN == []
    execution = models.ToolExecution.objects.get()
    assert (execution.status, execution.is_error, execution.result) == ("failed", True, expected)


# --- server-side tool context (S5) -----------------------------------------------------------


def test_tool_context_carries_user_and_conversation_and_the_model_never_sees_them(
    alice, conversation
):
    own = governed_registry(whoami)
    model = ScriptedChatModel([tool_call("whoami"), tool_call("whoami", user_id=999), text("Done")])
    turn(model, own, user=alice, conversation=conversation)

    assert RAN == [("whoami", {"user_id": alice.pk, "conversation_id": str(conversation.pk)})]
    assert last_responses(model, 1) == [
        ToolResponse(
            "call_1",
            "whoami",
            json.dumps({"user_id": alice.pk, "conversation_id": str(conversation.pk)}),
        )
    ]
    # A model that tries to pass the user itself is refused: the schema has no such field.
    assert last_responses(model, 2) == [
        ToolResponse(
            "call_2",
            "whoami",
            "Invalid arguments for tool 'whoami':\n- user_id: Unknown parameter; remove it",
            is_error=True,
        )
    ]
    schema = model.requests[0].options.tool_callbacks[0].definition.input_schema
    assert schema == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }
    first_request = repr(model.requests[0].messages) + repr(
        [cb.definition for cb in model.requests[0].options.tool_callbacks]
    )
    assert str(conversation.pk) not in first_request


def test_without_a_user_or_conversation_the_context_is_empty():
    own = governed_registry(whoami)
    model = ScriptedChatModel([tool_call("whoami"), text("Done")])
    turn(model, own)
    assert RAN == [("whoami", {})]
    assert models.ToolExecution.objects.get().conversation is None


# --- calls on pool threads -------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@override_settings(TOOL_CALLING={"EXECUTION": {"MAX_CONCURRENT_CALLS": 1}})
def test_parallel_calls_on_pool_threads_are_governed_audited_and_kept_in_order():
    """R8 under governance: one response per call id, in call order, refusals included.

    The calls run on the per-batch thread pool (one worker: the in-memory test database does not
    take concurrent writers), each with its own database connection.
    """
    own = governed_registry(lookup, disabled_tool)
    models.Tool.objects.filter(name="disabled_tool").update(enabled=False)
    conversation = models.Conversation.objects.create()
    model = ScriptedChatModel(
        [
            tool_calls(
                tool_call("lookup", city="Oslo"),
                tool_call("disabled_tool"),
                tool_call("lookup", city="Bergen"),
            ),
            text("Done"),
        ]
    )
    assert turn(model, own, conversation=conversation) == "Done"
    refused = (
        "Unknown or disabled tool 'disabled_tool'. Available tools: lookup. "
        "Call one of these by its exact name."
    )
    assert last_responses(model) == [
        ToolResponse("call_1", "lookup", "Found Oslo"),
        ToolResponse("call_2", "disabled_tool", refused, is_error=True),
        ToolResponse("call_3", "lookup", "Found Bergen"),
    ]
    assert sorted(
        models.ToolExecution.objects.values_list("tool_call_id", "status", "assistant_message")
    ) == [
        ("call_1", "succeeded", conversation.messages.get(sequence=2).pk),
        ("call_2", "refused", conversation.messages.get(sequence=2).pk),
        ("call_3", "succeeded", conversation.messages.get(sequence=2).pk),
    ]


# --- operator settings that change how a call ends -------------------------------------------


def test_return_direct_set_by_an_operator_applies_on_the_next_turn(governed, conversation):
    """The admin's return_direct wins over the code's: the result goes straight to the user."""
    models.Tool.objects.filter(name="lookup").update(return_direct=True)
    model = ScriptedChatModel([tool_call("lookup", city="Oslo")])
    assert turn(model, governed, conversation=conversation) == "Found Oslo"
    assert model.remaining_steps == 0  # no second model call

    models.Tool.objects.filter(name="lookup").update(return_direct=False)
    model = ScriptedChatModel([tool_call("lookup", city="Oslo"), text("It is Oslo")])
    assert turn(model, governed, conversation=conversation) == "It is Oslo"


@override_settings(TOOL_CALLING={"THROW_EXCEPTION_ON_ERROR": True})
def test_a_refusal_is_told_to_the_model_even_when_exceptions_are_rethrown(governed, conversation):
    """A refusal is governance: THROW_EXCEPTION_ON_ERROR does not end the turn."""

    def disable_then_call(prompt):
        models.Tool.objects.filter(name="lookup").update(enabled=False)
        return tool_call("lookup", city="Oslo")

    model = ScriptedChatModel([disable_then_call, text("Understood")])
    assert turn(model, governed, conversation=conversation) == "Understood"
    assert last_responses(model) == [
        ToolResponse("call_1", "lookup", NOT_AVAILABLE.format("lookup"), True)
    ]


# --- one turn at a time per conversation (R9) -------------------------------------------------


def test_a_second_turn_on_a_busy_conversation_is_refused_cleanly(governed, conversation):
    from tool_calling.conversations import ConversationBusyError, conversation_turn

    with conversation_turn(conversation.pk):
        model = ScriptedChatModel([text("never")])
        with pytest.raises(ConversationBusyError) as caught:
            turn(model, governed, conversation=conversation)
    assert str(caught.value) == (
        f"Conversation {conversation.pk} is already answering another message; "
        "send this one when that turn has ended."
    )
    assert model.requests == []  # refused before the model was called
    assert stored(conversation) == []  # nothing of the refused turn was stored
    # Released: the next turn runs.
    assert turn(ScriptedChatModel([text("ok")]), governed, conversation=conversation) == "ok"


def test_the_turn_releases_the_conversation_even_when_it_fails(governed, conversation):
    def boom(prompt):
        raise RuntimeError("model down")

    with pytest.raises(RuntimeError):
        turn(ScriptedChatModel([boom]), governed, conversation=conversation)
    conversation.refresh_from_db()
    assert (conversation.turn_token, conversation.turn_started_at) == ("", None)


@override_settings(TOOL_CALLING={"CONVERSATION_TURN_TIMEOUT": 60})
def test_a_stale_claim_of_a_crashed_turn_is_taken_over(governed, conversation):
    import datetime

    from django.utils import timezone

    models.Conversation.objects.filter(pk=conversation.pk).update(
        turn_token="crashed", turn_started_at=timezone.now() - datetime.timedelta(seconds=61)
    )
    assert turn(ScriptedChatModel([text("ok")]), governed, conversation=conversation) == "ok"


def test_a_streamed_turn_holds_the_conversation_until_the_stream_ends(governed, conversation):
    from tool_calling.conversations import ConversationBusyError

    client = governed_chat_client(
        conversation=conversation,
        model=ScriptedChatModel([text("one two three")]),
        tool_registry=governed,
    )
    stream = client.prompt("Go").stream().content()
    first = next(stream)
    with pytest.raises(ConversationBusyError):
        turn(ScriptedChatModel([text("x")]), governed, conversation=conversation)
    rest = "".join(stream)
    assert first + rest == "one two three"
    conversation.refresh_from_db()
    assert conversation.turn_token == ""
