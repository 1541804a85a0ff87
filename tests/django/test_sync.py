"""tool_calling.sync and manage.py sync_tools: the registry mirrored into the Tool table."""

import hashlib
import json
from io import StringIO

import pytest
from django.apps import apps
from django.apps.registry import Apps
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.test import override_settings

from tool_calling import models, tool
from tool_calling.registry import ToolRegistry, registry
from tool_calling.resolvers import GovernedTools
from tool_calling.sync import SyncReport, post_migrate_sync, schema_hash, sync_tools

pytestmark = pytest.mark.django_db


@tool
def get_weather(city: str) -> str:
    """Return the weather for a city."""
    return f"Sunny in {city}"


@tool(name="get_weather")
def get_weather_v2(city: str, unit: str = "celsius") -> str:
    """Return the weather for a city, in a unit."""
    return f"Sunny in {city} ({unit})"


@tool(return_direct=True)
def get_time() -> str:
    """Return the time."""
    return "12:00"


def registry_of(*tools, source="weather"):
    own = ToolRegistry()
    own.register(*tools, source=source)
    return own


@pytest.fixture
def empty_table():
    """Start without the demo tools that migrate mirrored into the test database."""
    models.Tool.objects.all().delete()


def tool_row(name):
    return models.Tool.objects.get(name=name)


def expected_hash(description, input_schema):
    payload = json.dumps(
        {"description": description, "input_schema": input_schema},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode()).hexdigest()


# --- sync_tools ----------------------------------------------------------------------------


def test_new_tools_are_created_with_their_schema_and_hash(empty_table):
    report = sync_tools(registry_of(get_weather, get_time))

    assert report == SyncReport(created=["get_weather", "get_time"])
    assert report.has_changes
    row = tool_row("get_weather")
    definition = registry_of(get_weather).get("get_weather").definition
    assert row.description == "Return the weather for a city."
    assert row.input_schema == definition.input_schema
    assert row.schema_hash == expected_hash(row.description, row.input_schema)
    assert row.schema_hash == schema_hash(definition.description, definition.input_schema)
    assert (row.source, row.enabled, row.missing, row.return_direct) == (
        "weather",
        True,
        False,
        False,
    )
    assert row.synced_at is not None
    assert tool_row("get_time").return_direct is True


def test_a_second_sync_changes_nothing(empty_table):
    own = registry_of(get_weather, get_time)
    sync_tools(own)
    report = sync_tools(own)
    assert report == SyncReport(unchanged=["get_weather", "get_time"])
    assert not report.has_changes


@override_settings(TOOL_CALLING={"NEW_TOOLS_ENABLED": False})
def test_new_tools_start_disabled_when_the_setting_says_so(empty_table):
    sync_tools(registry_of(get_weather))
    assert tool_row("get_weather").enabled is False


@override_settings(TOOL_CALLING={"NEW_TOOLS_ENABLED": False})
def test_new_tools_enabled_false_leaves_existing_tools_as_they_are(empty_table):
    models.Tool.objects.create(name="get_weather", enabled=True)
    sync_tools(registry_of(get_weather, get_time))
    assert tool_row("get_weather").enabled is True
    assert tool_row("get_time").enabled is False


def test_a_changed_schema_is_updated_and_rehashed(empty_table):
    sync_tools(registry_of(get_weather))
    old_hash = tool_row("get_weather").schema_hash

    report = sync_tools(registry_of(get_weather_v2))

    assert report == SyncReport(changed=["get_weather"])
    row = tool_row("get_weather")
    assert row.description == "Return the weather for a city, in a unit."
    assert list(row.input_schema["properties"]) == ["city", "unit"]
    assert row.schema_hash == expected_hash(row.description, row.input_schema)
    assert row.schema_hash != old_hash


def test_a_tool_gone_from_code_is_kept_marked_missing_and_never_offered(empty_table):
    sync_tools(registry_of(get_weather, get_time))

    report = sync_tools(registry_of(get_time))

    assert report == SyncReport(missing=["get_weather"], unchanged=["get_time"])
    row = tool_row("get_weather")
    assert row.missing is True
    assert row.enabled is True  # the operator's choice is kept
    assert row.is_available is False
    # Even a registry that still has it (a stale process) does not offer or resolve it.
    stale = GovernedTools(None, registry_of(get_weather, get_time))
    assert list(stale.available) == ["get_time"]
    # Already missing: a later sync reports nothing new.
    assert sync_tools(registry_of(get_time)) == SyncReport(unchanged=["get_time"])


def test_a_missing_tool_back_in_code_is_restored(empty_table):
    sync_tools(registry_of(get_weather))
    sync_tools(ToolRegistry())
    assert tool_row("get_weather").missing is True

    report = sync_tools(registry_of(get_weather))

    assert report == SyncReport(restored=["get_weather"])
    assert tool_row("get_weather").missing is False


def test_a_restored_tool_with_a_changed_schema_is_both(empty_table):
    sync_tools(registry_of(get_weather))
    sync_tools(ToolRegistry())
    report = sync_tools(registry_of(get_weather_v2))
    assert report == SyncReport(changed=["get_weather"], restored=["get_weather"])


def test_a_tool_moved_to_another_app_gets_the_new_source(empty_table):
    sync_tools(registry_of(get_weather, source="weather"))
    report = sync_tools(registry_of(get_weather, source="forecast"))
    assert report == SyncReport(changed=["get_weather"])
    assert tool_row("get_weather").source == "forecast"


def test_every_operator_setting_survives_change_missing_and_restore(empty_table):
    sync_tools(registry_of(get_weather))
    group = Group.objects.create(name="forecasters")
    models.Tool.objects.filter(name="get_weather").update(
        enabled=False,
        requires_approval=True,
        return_direct=True,
        execution_mode=models.ExecutionMode.CELERY,
        queue="slow",
        timeout=99,
    )
    row = tool_row("get_weather")
    row.allowed_groups.set([group])
    models.ToolLimitOverride.objects.create(tool=row, max_calls_per_turn=3, excluded=True)

    sync_tools(registry_of(get_weather_v2))  # changed
    sync_tools(ToolRegistry())  # missing
    sync_tools(registry_of(get_weather_v2))  # restored

    row = tool_row("get_weather")
    assert (
        row.enabled,
        row.requires_approval,
        row.return_direct,
        row.execution_mode,
        row.queue,
        row.timeout,
        row.missing,
    ) == (False, True, True, "celery", "slow", 99, False)
    assert list(row.allowed_groups.all()) == [group]
    override = models.ToolLimitOverride.objects.get(tool=row)
    assert (override.max_calls_per_turn, override.excluded) == (3, True)
    assert row.description == "Return the weather for a city, in a unit."


def test_a_dry_run_reports_but_changes_nothing(empty_table):
    sync_tools(registry_of(get_weather, get_time))
    models.Tool.objects.create(name="retired")
    before = list(models.Tool.objects.order_by("name").values())

    report = sync_tools(registry_of(get_weather_v2), dry_run=True)

    assert report == SyncReport(changed=["get_weather"], missing=["get_time", "retired"])
    assert list(models.Tool.objects.order_by("name").values()) == before


def test_the_default_target_is_the_project_registry(empty_table):
    report = sync_tools()
    assert report.created == list(registry)
    assert sorted(models.Tool.objects.values_list("name", flat=True)) == sorted(registry)


# --- manage.py sync_tools ----------------------------------------------------------------------


def stale_database():
    """The demo tools in the database, one deleted, one stale, plus one gone from code."""
    models.Tool.objects.filter(name="add_numbers").delete()
    models.Tool.objects.filter(name="get_weather").update(schema_hash="stale")
    models.Tool.objects.create(name="retired")


def run_sync_tools(*args):
    out = StringIO()
    call_command("sync_tools", *args, stdout=out)
    return out.getvalue()


def test_sync_tools_dry_run_prints_the_summary_and_changes_nothing():
    stale_database()
    before = list(models.Tool.objects.order_by("name").values())

    output = run_sync_tools("--dry-run")

    assert output == (
        "Would create: add_numbers\n"
        "Would update: get_weather\n"
        "Would mark missing: retired\n"
        "Dry run: 1 new, 1 changed, 1 missing, 0 restored, 3 unchanged.\n"
    )
    assert list(models.Tool.objects.order_by("name").values()) == before


def test_sync_tools_applies_the_changes_and_prints_them():
    stale_database()
    models.Tool.objects.filter(name="get_current_time").update(missing=True)

    output = run_sync_tools()

    assert output == (
        "Create: add_numbers\n"
        "Update: get_weather\n"
        "Mark missing: retired\n"
        "Restore: get_current_time\n"
        "1 new, 1 changed, 1 missing, 1 restored, 2 unchanged.\n"
    )
    assert tool_row("add_numbers").source == "demo"
    assert tool_row("get_weather").schema_hash != "stale"
    assert tool_row("retired").missing is True
    assert tool_row("get_current_time").missing is False
    assert run_sync_tools() == "0 new, 0 changed, 0 missing, 0 restored, 5 unchanged.\n"


# --- post_migrate --------------------------------------------------------------------------


def test_migrate_mirrors_the_registry_through_post_migrate():
    models.Tool.objects.all().delete()
    call_command("migrate", verbosity=0)
    assert sorted(models.Tool.objects.values_list("name", flat=True)) == [
        "add_numbers",
        "cancel_booking",
        "get_current_time",
        "get_weather",
        "refund_order",
    ]


def test_post_migrate_ignores_other_databases(django_assert_num_queries):
    config = apps.get_app_config("tool_calling")
    with django_assert_num_queries(0):
        post_migrate_sync(config, using="other", apps=apps)


def test_post_migrate_does_nothing_when_the_tool_table_is_gone(django_assert_num_queries):
    """`migrate tool_calling zero` emits post_migrate with a state that has no Tool model."""
    config = apps.get_app_config("tool_calling")
    with django_assert_num_queries(0):
        post_migrate_sync(config, using="default", apps=Apps(installed_apps=[]))
