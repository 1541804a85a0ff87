"""Tool search on real databases: concurrent finds, and the PostgreSQL full-text index.

Every test runs on PostgreSQL (marked ``postgres``) and on a SQLite file in WAL mode (see
conftest.py). ``PostgresToolIndex`` searches with PostgreSQL's full-text search; on SQLite it
refuses to index, saying what to use instead.
"""

from __future__ import annotations

import threading
import traceback

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.test import override_settings

from tests.django._tools import registered, tool_calling_settings
from tests.postgres.conftest import SETUP_TIMEOUT
from tool_calling import models, tool
from tool_calling.core.chat.advisors.tool_search import SEARCH_TOOL_NAME
from tool_calling.governance import governed_chat_client
from tool_calling.registry import registry
from tool_calling.search import DatabaseDiscoveryStore, PostgresToolIndex, discovered_tools
from tool_calling.testing import ScriptedChatModel, text, tool_call

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("backend")]

ONLY_POSTGRESQL = pytest.mark.parametrize(
    "backend",
    [
        pytest.param(
            "postgresql",
            id="postgresql",
            marks=[pytest.mark.postgres, pytest.mark.timeout(SETUP_TIMEOUT + 120)],
        )
    ],
    indirect=True,
    scope="module",
)
"""A test of the PostgreSQL backend alone (the module's other tests run on both)."""


@tool
def pg_weather_forecast(city: str) -> str:
    """Return the weather forecast for the next days in a city."""
    return f"Rain in {city}"


@tool
def pg_send_email(recipient: str, subject: str) -> str:
    """Send an email message to someone."""
    return "sent"


@tool
def pg_createCalendarEvent(title: str) -> str:  # noqa: N802 - a camelCase name on purpose
    """Put a meeting in the calendar."""
    return "created"


@tool
def pg_list_invoices(customer: str) -> str:
    """List the invoices of a customer, newest first."""
    return "INV-1"


@tool
def pg_refund(order: str) -> str:
    """Give the money of an order back."""
    return "refunded"


TOOLS = (pg_weather_forecast, pg_send_email, pg_createCalendarEvent, pg_list_invoices, pg_refund)
NAMES = [t.__name__ for t in TOOLS]


@pytest.fixture(autouse=True)
def search_tools():
    with registered(*TOOLS):
        yield


def _definitions(names=NAMES):
    return [registry.get(name).definition for name in names]


def _run_threads(target, count):
    errors = {}

    def run(index):
        try:
            target(index)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors[index] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(t.is_alive() for t in threads), "a thread is still running (deadlock?)"
    return errors


# --- the store under concurrent searches -------------------------------------------------------


def test_two_threads_adding_the_same_finds_at_once_never_conflict():
    conversation = models.Conversation.objects.create()
    store = DatabaseDiscoveryStore()
    rounds = 20
    barrier = threading.Barrier(2, timeout=30)

    def add(index):
        barrier.wait()
        for n in range(rounds):
            # Overlapping names: both threads insert "shared-n" at the same moment.
            store.add(str(conversation.pk), [f"shared-{n}", f"own-{index}-{n}"])

    errors = _run_threads(add, 2)
    assert not errors, "\n".join("".join(traceback.format_exception(e)) for e in errors.values())
    names = store.get(str(conversation.pk))
    assert len(names) == len(set(names)) == rounds * 3
    assert set(names) == {
        *(f"shared-{n}" for n in range(rounds)),
        *(f"own-{i}-{n}" for i in range(2) for n in range(rounds)),
    }


# --- PostgresToolIndex -----------------------------------------------------------------------


def test_the_postgres_index_ranks_with_full_text_search(backend):
    index = PostgresToolIndex()
    if backend != "postgresql":
        with pytest.raises(ImproperlyConfigured) as raised:
            index.index(_definitions())
        assert str(raised.value) == (
            "PostgresToolIndex searches with PostgreSQL's full-text search, but the database "
            "'default' is sqlite. Set TOOL_CALLING['TOOL_SEARCH']['INDEX'] to another index, "
            "e.g. the default 'tool_calling.core.search.lexical.LexicalToolIndex'."
        )
        return
    index.index(_definitions(), tags={"pg_refund": ["chargeback"], "unknown": ["x"]})
    assert index.search("weather forecasts", 5)[0] == "pg_weather_forecast"  # stemmed
    assert index.search("send an email", 1) == ["pg_send_email"]
    assert index.search("calendar event", 5)[0] == "pg_createCalendarEvent"  # camelCase split
    assert index.search("chargeback", 5) == ["pg_refund"]  # a tag
    assert index.search("customer", 5) == ["pg_list_invoices"]  # a parameter and description
    assert index.search("pg_refund", 5)[0] == "pg_refund"  # an exact name first
    assert index.search("the of and", 5) == []  # stop words only
    assert index.search("!!!", 5) == []
    assert index.search("zebra", 5) == []
    assert len(index.search("pg", 2)) == 2
    with pytest.raises(ValueError, match="max_results must be a positive integer, got 0"):
        index.search("weather", 0)
    index.clear()
    assert index.search("weather", 5) == []


@ONLY_POSTGRESQL  # the SQLite refusal is tested above
def test_the_postgres_index_only_finds_the_tools_it_was_given(backend):
    index = PostgresToolIndex()
    index.index(_definitions(["pg_send_email", "pg_refund"]))
    # pg_weather_forecast has a Tool row, but this turn does not offer it.
    assert index.search("weather forecast", 5) == []
    assert index.search("email", 5) == ["pg_send_email"]


@ONLY_POSTGRESQL  # checks.E014 refuses the index on other databases
def test_a_governed_turn_searches_with_postgres(backend):
    user = User.objects.create_user("pg-alice")
    conversation = models.Conversation.objects.create(owner=user)
    model = ScriptedChatModel(
        [
            tool_call(SEARCH_TOOL_NAME, query="invoices of a customer"),
            tool_call("pg_list_invoices", customer="acme"),
            text("INV-1"),
        ]
    )
    settings = tool_calling_settings(
        TOOL_SEARCH={
            "ENABLED": True,
            "THRESHOLD": 0,
            "INDEX": "tool_calling.search.PostgresToolIndex",
        }
    )
    with override_settings(TOOL_CALLING=settings):
        client = governed_chat_client(
            user=user, conversation=conversation, model=model, tool_names=NAMES
        )
        assert client.prompt("Acme's invoices?").call().content() == "INV-1"
    found = model.requests[1].messages[-1].responses[0].response_data
    assert found.startswith("Found ") and "pg_list_invoices" in found
    assert "pg_list_invoices" in discovered_tools(conversation)
