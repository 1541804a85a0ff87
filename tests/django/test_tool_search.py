"""Tool search in governed turns (Django): settings, admin fields, finds per conversation.

The model is a ``ScriptedChatModel``; each test reads what each model call was offered from
the prompts it received (``offered``). Turns are narrowed with ``tool_names`` to the tools of
this module, so the demo project's tools do not change the counts.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from tests.django._api import client_for, url
from tests.django._tools import chat_model, registered, tool_calling_settings
from tool_calling import FunctionToolCallback, ToolResponseMessage, models, runs, tool
from tool_calling.core.chat.advisors.tool_search import SEARCH_TOOL_NAME
from tool_calling.governance import governed_chat_client
from tool_calling.search import DatabaseDiscoveryStore, discovered_tools
from tool_calling.testing import ScriptedChatModel, text, tool_call, tool_calls

pytestmark = pytest.mark.django_db(transaction=True)

RAN: list[str] = []


@tool
def ts_weather(city: str) -> str:
    """Return the current weather forecast for a city."""
    RAN.append(f"weather {city}")
    return f"Sunny in {city}"


@tool
def ts_send_email(to: str, subject: str) -> str:
    """Send an email message to a recipient."""
    RAN.append(f"email {to}")
    return "sent"


@tool
def ts_create_event(title: str, day: str) -> str:
    """Create a calendar event on a day."""
    RAN.append(f"event {title}")
    return "created"


@tool
def ts_list_invoices(customer: str) -> str:
    """List the invoices of a customer."""
    RAN.append(f"invoices {customer}")
    return "INV-1, INV-2"


@tool
def ts_whoami() -> str:
    """Return the name of the signed-in user."""
    RAN.append("whoami")
    return "alice"


@tool
def ts_refund(order: str) -> str:
    """Give the money of an order back."""
    RAN.append(f"refund {order}")
    return f"refunded {order}"


TOOLS = (ts_weather, ts_send_email, ts_create_event, ts_list_invoices, ts_whoami, ts_refund)
NAMES = [t.__name__ for t in TOOLS]

SEARCH = {"ENABLED": True, "THRESHOLD": 0}


def searching(**keys):
    """The test settings with tool search on (``keys`` change its other keys)."""
    return tool_calling_settings(TOOL_SEARCH={**SEARCH, **keys})


@pytest.fixture(autouse=True)
def search_tools():
    RAN.clear()
    with registered(*TOOLS):
        yield


@pytest.fixture
def alice():
    return User.objects.create_user("alice")


def offered(prompt) -> list[str]:
    """The names of the tools a model call was offered, in order."""
    return [cb.definition.name for cb in prompt.options.tool_callbacks]


def turn(user, conversation, model, message="Go"):
    client = governed_chat_client(
        user=user, conversation=conversation, model=model, tool_names=NAMES
    )
    return client.prompt(message).call().content()


def search_then_call(query, name, **arguments):
    return [tool_call(SEARCH_TOOL_NAME, query=query), tool_call(name, **arguments)]


# --- TOOL_SEARCH["ENABLED"] ------------------------------------------------------------------


def test_without_tool_search_every_tool_is_offered(alice):
    conversation = models.Conversation.objects.create(owner=alice)
    model = ScriptedChatModel([tool_call("ts_weather", city="Oslo"), text("Sunny")])
    assert turn(alice, conversation, model) == "Sunny"
    assert offered(model.requests[0]) == NAMES
    assert not models.DiscoveredTool.objects.exists()


def test_with_tool_search_the_model_finds_a_tool_then_calls_it(alice):
    conversation = models.Conversation.objects.create(owner=alice)
    model = ScriptedChatModel(
        [*search_then_call("weather forecast", "ts_weather", city="Oslo"), text("Sunny in Oslo")]
    )
    with override_settings(TOOL_CALLING=searching()):
        assert turn(alice, conversation, model) == "Sunny in Oslo"
    assert offered(model.requests[0]) == [SEARCH_TOOL_NAME]
    assert "ts_weather" in offered(model.requests[1])
    assert offered(model.requests[1])[0] == SEARCH_TOOL_NAME
    assert RAN == ["weather Oslo"]
    answer = model.requests[1].messages[-1]
    assert isinstance(answer, ToolResponseMessage)
    assert answer.responses[0].response_data.startswith("Found ")
    assert "ts_weather" in discovered_tools(conversation)


def test_without_a_conversation_finds_last_the_turn_and_nothing_is_stored(alice):
    model = ScriptedChatModel([*search_then_call("weather", "ts_weather", city="Oslo"), text("A")])
    with override_settings(TOOL_CALLING=searching()):
        client = governed_chat_client(user=alice, model=model, tool_names=NAMES)
        assert client.prompt("Weather?").call().content() == "A"
    assert RAN == ["weather Oslo"]
    assert not models.DiscoveredTool.objects.exists()
    # History is on without a stored conversation: the second call saw the whole turn.
    assert len(model.requests[1].messages) == 3


def test_the_search_call_is_audited_and_runs_in_process(alice):
    conversation = models.Conversation.objects.create(owner=alice)
    model = ScriptedChatModel([*search_then_call("weather", "ts_weather", city="Oslo"), text("ok")])
    with override_settings(TOOL_CALLING=searching()):
        turn(alice, conversation, model)
    search, weather = models.ToolExecution.objects.filter(conversation=conversation).order_by(
        "created_at", "pk"
    )
    assert (search.tool_name, search.tool, search.status, search.mode) == (
        SEARCH_TOOL_NAME,
        None,
        "succeeded",
        "inline",
    )
    assert search.arguments == '{"query":"weather"}'
    assert "ts_weather" in search.result
    assert search.assistant_message_id is not None
    assert (weather.tool_name, weather.status) == ("ts_weather", "succeeded")


def test_a_tool_not_found_yet_cannot_run(alice):
    """Only the offered tools run: a call of a tool no search found is refused and audited."""
    conversation = models.Conversation.objects.create(owner=alice)
    model = ScriptedChatModel([tool_call("ts_refund", order="A1"), text("Could not")])
    with override_settings(TOOL_CALLING=searching()):
        assert turn(alice, conversation, model) == "Could not"
    assert RAN == []
    (refused,) = models.ToolExecution.objects.filter(conversation=conversation)
    assert (refused.tool_name, refused.status) == ("ts_refund", "refused")
    assert refused.result.startswith("Unknown or disabled tool 'ts_refund'. Available tools: ")


def test_a_bad_query_is_answered_with_an_error_the_model_can_act_on(alice):
    conversation = models.Conversation.objects.create(owner=alice)
    model = ScriptedChatModel([tool_call(SEARCH_TOOL_NAME, query="   "), text("Sorry")])
    with override_settings(TOOL_CALLING=searching()):
        turn(alice, conversation, model)
    response = model.requests[1].messages[-1].responses[0]
    assert response.is_error
    assert response.response_data.startswith("The search query is empty.")
    (row,) = models.ToolExecution.objects.filter(conversation=conversation)
    assert (row.tool_name, row.status, row.error_type) == (
        SEARCH_TOOL_NAME,
        "failed",
        "tool_calling.core.errors.ToolFailure",
    )


# --- accumulation across turns ----------------------------------------------------------------


def test_what_a_conversation_found_is_offered_in_its_next_turns(alice):
    """Memory sits inside the loop of governed turns (history off): the finds come from the
    database, not from the history (spring-ai #7034)."""
    conversation = models.Conversation.objects.create(owner=alice)
    first = ScriptedChatModel([*search_then_call("weather", "ts_weather", city="Oslo"), text("A")])
    second = ScriptedChatModel([tool_call("ts_weather", city="Rome"), text("B")])
    third = ScriptedChatModel(
        [*search_then_call("send email", "ts_send_email", to="bo", subject="hi"), text("C")]
    )
    fourth = ScriptedChatModel([text("D")])
    with override_settings(TOOL_CALLING=searching()):
        turn(alice, conversation, first)
        turn(alice, conversation, second)
        turn(alice, conversation, third)
        turn(alice, conversation, fourth)
    assert offered(second.requests[0]) == [SEARCH_TOOL_NAME, "ts_weather"]
    assert RAN == ["weather Oslo", "weather Rome", "email bo"]
    assert set(offered(fourth.requests[0])) >= {SEARCH_TOOL_NAME, "ts_weather", "ts_send_email"}
    # A turn of another conversation starts with nothing found.
    other = models.Conversation.objects.create(owner=alice)
    fifth = ScriptedChatModel([text("E")])
    with override_settings(TOOL_CALLING=searching()):
        turn(alice, other, fifth)
    assert offered(fifth.requests[0]) == [SEARCH_TOOL_NAME]


def test_finds_survive_when_history_is_on_or_off(alice):
    """The store works whatever the loop sends the model: the core advisor over the database."""
    from tool_calling import ChatClient, ToolSearchToolCallingAdvisor

    for history in (True, False):
        conversation = models.Conversation.objects.create(owner=alice)
        for step, model in enumerate(
            [
                ScriptedChatModel(
                    [*search_then_call("invoices", "ts_list_invoices", customer="c1"), text("1")]
                ),
                ScriptedChatModel([tool_call("ts_list_invoices", customer="c2"), text("2")]),
            ]
        ):
            # A new client and advisor per turn, as two processes would build them.
            advisor = ToolSearchToolCallingAdvisor(
                conversation_history_enabled=history, discoveries=DatabaseDiscoveryStore()
            )
            client = ChatClient.builder(model).default_tools(*TOOLS).default_advisors(advisor)
            client.build().prompt("Go").conversation_id(str(conversation.pk)).call()
            if step == 1:
                assert offered(model.requests[0]) == [SEARCH_TOOL_NAME, "ts_list_invoices"]
    assert RAN == ["invoices c1", "invoices c2", "invoices c1", "invoices c2"]


# --- admin fields: always include, search tags ------------------------------------------------


def test_tools_marked_always_include_are_offered_without_a_search(alice):
    models.Tool.objects.filter(name="ts_whoami").update(always_include=True)
    conversation = models.Conversation.objects.create(owner=alice)
    model = ScriptedChatModel([tool_call("ts_whoami"), text("You are alice")])
    with override_settings(TOOL_CALLING=searching()):
        assert turn(alice, conversation, model) == "You are alice"
    assert offered(model.requests[0]) == [SEARCH_TOOL_NAME, "ts_whoami"]
    assert RAN == ["whoami"]


def test_search_tags_let_the_search_find_a_tool_by_words_not_in_its_description(alice):
    conversation = models.Conversation.objects.create(owner=alice)

    def found(prompt):
        return prompt.messages[-1].responses[0].response_data

    model = ScriptedChatModel([tool_call(SEARCH_TOOL_NAME, query="chargeback"), text("no")])
    with override_settings(TOOL_CALLING=searching()):
        turn(alice, conversation, model)
    assert found(model.requests[1]).startswith("No tools match 'chargeback'.")
    models.Tool.objects.filter(name="ts_refund").update(search_tags="chargeback, money back")
    model = ScriptedChatModel([tool_call(SEARCH_TOOL_NAME, query="chargeback"), text("yes")])
    with override_settings(TOOL_CALLING=searching()):
        turn(alice, conversation, model)
    assert found(model.requests[1]) == "Found 1 tool, now available to call: ts_refund."


# --- TOOL_SEARCH["MAX_RESULTS"], ["THRESHOLD"], ["INDEX"] ------------------------------------


def _found(query, settings):
    conversation = models.Conversation.objects.create(
        owner=User.objects.get_or_create(username="bob")[0]
    )
    model = ScriptedChatModel([tool_call(SEARCH_TOOL_NAME, query=query), text("ok")])
    with override_settings(TOOL_CALLING=settings):
        turn(conversation.owner, conversation, model)
    return model.requests[1].messages[-1].responses[0].response_data


def test_max_results_is_how_many_tools_a_search_returns():
    query = "weather email calendar invoices"
    assert _found(query, searching(MAX_RESULTS=1)).startswith("Found 1 tool, ")
    assert _found(query, searching(MAX_RESULTS=3)).startswith("Found 3 tools, ")


def test_the_threshold_offers_every_tool_directly_to_small_tool_sets(alice):
    conversation = models.Conversation.objects.create(owner=alice)
    model = ScriptedChatModel([text("ok")])
    with override_settings(TOOL_CALLING=searching(THRESHOLD=len(NAMES))):
        turn(alice, conversation, model)
    assert offered(model.requests[0]) == NAMES
    model = ScriptedChatModel([text("ok")])
    with override_settings(TOOL_CALLING=searching(THRESHOLD=len(NAMES) - 1)):
        turn(alice, conversation, model)
    assert offered(model.requests[0]) == [SEARCH_TOOL_NAME]


def test_the_index_setting_chooses_how_queries_are_read():
    pattern = "^ts_(weather|refund)$"
    # The lexical index reads words ("ts" is in every name): it ranks, it does not match.
    assert _found(pattern, searching()).startswith("Found 5 tools, ")
    regex = searching(INDEX="tool_calling.core.search.regex.RegexToolIndex")
    assert _found(pattern, regex) == "Found 2 tools, now available to call: ts_weather, ts_refund."


# --- EXECUTION["MODE"] = "celery": the search never goes to a worker -------------------------


def test_with_every_tool_on_workers_the_search_still_runs_in_process(alice):
    """Celery runs eagerly here: the tool's call is a task, the search is not."""
    conversation = models.Conversation.objects.create(owner=alice)
    model = ScriptedChatModel(
        [
            tool_call(SEARCH_TOOL_NAME, query="weather"),
            tool_calls(
                tool_call(SEARCH_TOOL_NAME, query="invoices"),
                tool_call("ts_weather", city="Oslo"),
            ),
            text("done"),
        ]
    )
    celery = tool_calling_settings(TOOL_SEARCH=SEARCH, EXECUTION={"MODE": "celery"})
    with override_settings(TOOL_CALLING=celery):
        assert turn(alice, conversation, model) == "done"
    rows = models.ToolExecution.objects.filter(conversation=conversation).order_by("created_at")
    assert [(r.tool_name, r.mode, r.status) for r in rows] == [
        (SEARCH_TOOL_NAME, "inline", "succeeded"),
        (SEARCH_TOOL_NAME, "inline", "succeeded"),
        ("ts_weather", "celery", "succeeded"),
    ]
    assert RAN == ["weather Oslo"]


# --- durable runs and the API ------------------------------------------------------------------


def test_a_durable_run_finds_tools_and_the_next_turn_sees_them(alice):
    conversation = models.Conversation.objects.create(owner=alice)
    script = ScriptedChatModel(
        [
            *search_then_call("calendar event", "ts_create_event", title="Standup", day="Mon"),
            text("Booked"),
        ]
    )
    celery = tool_calling_settings(TOOL_SEARCH=SEARCH, EXECUTION={"MODE": "celery"})
    with chat_model(script), override_settings(TOOL_CALLING=celery):
        run = runs.start_turn(conversation, "Book standup", user=alice, tool_names=NAMES)
    run.refresh_from_db()
    assert (run.status, run.answer) == ("succeeded", "Booked")
    assert offered(script.requests[0]) == [SEARCH_TOOL_NAME]
    assert "ts_create_event" in offered(script.requests[1])
    assert RAN == ["event Standup"]
    rows = models.ToolExecution.objects.filter(run=run).order_by("created_at")
    assert [(r.tool_name, r.mode, r.status, r.payload) for r in rows] == [
        (SEARCH_TOOL_NAME, "inline", "succeeded", {}),
        ("ts_create_event", "celery", "succeeded", {}),
    ]
    kinds = list(run.events.order_by("sequence").values_list("kind", flat=True))
    assert kinds.count("tool_call_ended") == 2
    assert "ts_create_event" in discovered_tools(conversation)
    # The next turn, in process, is offered what the run found.
    model = ScriptedChatModel([tool_call("ts_create_event", title="Retro", day="Fri"), text("ok")])
    with override_settings(TOOL_CALLING=searching()):
        turn(alice, conversation, model)
    assert "ts_create_event" in offered(model.requests[0])
    assert RAN == ["event Standup", "event Retro"]


def test_the_api_shows_what_a_conversation_found(alice):
    conversation = models.Conversation.objects.create(owner=alice)
    model = ScriptedChatModel([*search_then_call("weather", "ts_weather", city="Oslo"), text("A")])
    with override_settings(TOOL_CALLING=searching()):
        turn(alice, conversation, model)
    response = client_for(alice).get(url("conversation-detail", conversation.pk))
    assert response.status_code == 200
    assert "ts_weather" in response.json()["discovered_tools"]
    other = models.Conversation.objects.create(owner=alice)
    response = client_for(alice).get(url("conversation-detail", other.pk))
    assert response.json()["discovered_tools"] == []


# --- the store ---------------------------------------------------------------------------------


def test_the_database_store_keeps_finds_per_conversation_in_order(alice):
    store = DatabaseDiscoveryStore()
    one = str(models.Conversation.objects.create(owner=alice).pk)
    two = str(models.Conversation.objects.create(owner=alice).pk)
    assert store.get(one) == []
    store.add(one, ["a", "b"])
    store.add(two, ["z"])
    store.add(one, ["c", "a"])  # "a" found again: it moves to the end
    assert store.get(one) == ["b", "c", "a"]
    assert store.get(two) == ["z"]
    store.add(one, [])
    store.clear(one)
    assert store.get(one) == []
    assert store.get(two) == ["z"]
    assert models.DiscoveredTool.objects.filter(conversation_id=two).count() == 1


def test_the_database_store_refuses_an_id_that_is_not_a_conversation():
    with pytest.raises(ValueError, match="Conversation id 'c-42' is not a UUID"):
        DatabaseDiscoveryStore().add("c-42", ["a"])


def test_finds_of_a_deleted_conversation_are_dropped_with_a_warning(alice, caplog):
    conversation = models.Conversation.objects.create(owner=alice)
    pk = str(conversation.pk)
    conversation.delete()
    DatabaseDiscoveryStore().add(pk, ["a"])
    assert not models.DiscoveredTool.objects.exists()
    assert f"Conversation {pk} is gone" in caplog.text


def test_an_operators_return_direct_keeps_the_tools_own_tags_and_approval():
    """OperatorSettingsToolCallback changes only return-direct: tags from code still search."""
    from tool_calling import ToolMetadata
    from tool_calling.resolvers import OperatorSettingsToolCallback

    class Tagged(FunctionToolCallback):
        @property
        def metadata(self):
            return ToolMetadata(requires_approval=True, tags=("invoice", "billing"))

    wrapped = OperatorSettingsToolCallback(Tagged(lambda: "x", name="tagged"), return_direct=True)
    assert wrapped.metadata == ToolMetadata(
        return_direct=True, requires_approval=True, tags=("invoice", "billing")
    )
