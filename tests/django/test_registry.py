"""tool_calling.registry: ToolRegistry, autodiscovery of apps' tools.py, and the app configs."""

import re

import pytest
from django.apps import apps
from django.test import override_settings

from tool_calling import tool
from tool_calling.exceptions import ToolDefinitionError
from tool_calling.registry import ToolRegistry, autodiscover, registry
from tool_calling.sync import post_migrate_sync

WEATHER = "tests.fixtures.apps.weather"
CLONE = "tests.fixtures.apps.weather_clone"
PLAIN = "tests.fixtures.apps.plain"
BROKEN = "tests.fixtures.apps.broken"
BASE_APPS = ["django.contrib.auth", "django.contrib.contenttypes"]


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two numbers."""
    return a * b


@tool(name="Add")
def add_capitalised(a: int, b: int) -> int:
    """Add, under a name that differs only in case."""
    return a + b


@pytest.fixture
def global_registry():
    """The project registry, emptied for the test and restored afterwards."""
    saved = dict(registry._registry)
    registry.clear()
    yield registry
    registry.clear()
    registry._registry.update(saved)


def weather_tools():
    from tests.fixtures.apps.weather import tools

    return tools


def clone_tools():
    from tests.fixtures.apps.weather_clone import tools

    return tools


# --- ToolRegistry ----------------------------------------------------------------------------


def test_register_get_iterate_and_unregister():
    own = ToolRegistry()
    callbacks = own.register(add, multiply, source="maths")

    assert [cb.definition.name for cb in callbacks] == ["add", "multiply"]
    assert list(own) == ["add", "multiply"]
    assert len(own) == 2
    assert "add" in own and "divide" not in own
    assert own.get("add") is callbacks[0]
    assert own.get("divide") is None
    assert own.callbacks() == callbacks
    entry = own.entry("multiply")
    assert (entry.source, entry.origin) == ("maths", f"{__name__}.multiply")
    assert own.get("add").call('{"a": 2, "b": 3}') == "5"

    own.unregister("add")
    assert list(own) == ["multiply"]
    assert own.get("add") is None
    with pytest.raises(KeyError):
        own.unregister("add")
    own.clear()
    assert list(own) == [] and len(own) == 0


def test_a_registry_of_its_own_leaves_the_project_registry_alone():
    before = list(registry)
    ToolRegistry().register(add, multiply)
    assert list(registry) == before


def test_iteration_is_a_snapshot():
    """Unregistering while iterating does not break the loop (admin-style bulk removal)."""
    own = ToolRegistry()
    own.register(add, multiply)
    for name in own:
        own.unregister(name)
    assert len(own) == 0


def test_a_duplicate_name_raises_naming_both_origins():
    own = ToolRegistry()
    own.register(weather_tools(), source="weather")
    message = (
        "Tool 'get_weather' is already registered by app 'weather' "
        f"({WEATHER}.tools.get_weather); cannot register {CLONE}.tools.get_weather from app "
        "'weather_clone'. Rename one with @tool(name=...)."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        own.register(clone_tools(), source="weather_clone")
    assert own.entry("get_weather").origin == f"{WEATHER}.tools.get_weather"


def test_the_duplicate_error_is_a_value_error_and_names_origins_without_sources():
    own = ToolRegistry()
    own.register(weather_tools().get_weather)
    message = (
        f"Tool 'get_weather' is already registered by ({WEATHER}.tools.get_weather); "
        f"cannot register {CLONE}.tools.get_weather. Rename one with @tool(name=...)."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        own.register(clone_tools().get_weather)


def test_names_that_differ_only_in_case_are_duplicates():
    """S19: 'Add' next to 'add' is refused at registration, not at the first chat turn."""
    own = ToolRegistry()
    own.register(add, source="maths")
    message = (
        "Tool 'Add' differs only in case from tool 'add', registered by app 'maths' "
        f"({__name__}.add); cannot register {__name__}.add_capitalised from app 'other'. "
        "Rename one with @tool(name=...)."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        own.register(add_capitalised, source="other")
    assert list(own) == ["add"]


def test_registration_is_all_or_nothing():
    own = ToolRegistry()
    own.register(weather_tools().get_weather, source="weather")
    with pytest.raises(ToolDefinitionError):
        own.register(multiply, clone_tools().get_weather, source="weather_clone")
    assert list(own) == ["get_weather"]


def test_registering_the_same_module_twice_is_a_no_op():
    own = ToolRegistry()
    first = own.register(weather_tools(), source="weather")
    own.register(weather_tools(), source="weather")
    assert list(own) == ["get_weather", "get_forecast"]
    assert own.callbacks() == first


def test_the_same_tool_from_another_source_is_a_duplicate():
    own = ToolRegistry()
    own.register(add, source="maths")
    with pytest.raises(ToolDefinitionError, match=r"^Tool 'add' is already registered by app"):
        own.register(add, source="copy")


# --- autodiscover ------------------------------------------------------------------------------


def test_autodiscover_registers_each_apps_tools_with_its_label():
    own = ToolRegistry()
    with override_settings(INSTALLED_APPS=[*BASE_APPS, PLAIN, WEATHER]):
        autodiscover(own)
    assert list(own) == ["get_weather", "get_forecast"]  # not_a_tool is not a @tool
    assert [(e.source, e.origin) for e in own.entries()] == [
        ("weather", f"{WEATHER}.tools.get_weather"),
        ("weather", f"{WEATHER}.tools.get_forecast"),
    ]
    assert own.get("get_weather").call('{"city": "Oslo"}') == "Sunny in Oslo"


def test_autodiscover_into_a_registry_of_its_own_leaves_the_project_registry_alone():
    before = registry.entries()
    with override_settings(INSTALLED_APPS=[*BASE_APPS, WEATHER]):
        autodiscover(ToolRegistry())
    assert registry.entries() == before


def test_autodiscover_raises_on_a_duplicate_naming_both_apps():
    own = ToolRegistry()
    message = (
        "Tool 'get_weather' is already registered by app 'weather' "
        f"({WEATHER}.tools.get_weather); cannot register {CLONE}.tools.get_weather from app "
        "'weather_clone'. Rename one with @tool(name=...)."
    )
    with override_settings(INSTALLED_APPS=[*BASE_APPS, WEATHER, CLONE]):
        with pytest.raises(ToolDefinitionError, match=re.escape(message)):
            autodiscover(own)
    assert list(own) == ["get_weather", "get_forecast"]


def test_a_tools_module_that_fails_to_import_raises_and_registers_nothing():
    own = ToolRegistry()
    with override_settings(INSTALLED_APPS=[*BASE_APPS, BROKEN]):
        with pytest.raises(ModuleNotFoundError, match=re.escape(f"{BROKEN}.missing_dependency")):
            autodiscover(own)
    assert list(own) == []


def test_the_project_registry_was_filled_at_startup():
    """ToolCallingConfig.ready() discovered project/demo/tools.py with the app label."""
    entry = registry.entry("get_weather")
    assert entry is not None
    assert (entry.source, entry.origin) == ("demo", "project.demo.tools.get_weather")
    assert {"get_current_time", "get_weather", "add_numbers"} <= set(registry)


# --- the app configs ---------------------------------------------------------------------------


def test_tool_calling_config_autodiscovers_in_ready(global_registry):
    with override_settings(INSTALLED_APPS=[*BASE_APPS, "tool_calling", WEATHER]):
        assert type(apps.get_app_config("tool_calling")).__name__ == "ToolCallingConfig"
        assert list(global_registry) == ["get_weather", "get_forecast"]
        assert global_registry.entry("get_weather").source == "weather"


def test_simple_tool_calling_config_does_not_autodiscover(global_registry):
    with override_settings(
        INSTALLED_APPS=[*BASE_APPS, "tool_calling.apps.SimpleToolCallingConfig", WEATHER]
    ):
        config = apps.get_app_config("tool_calling")
        assert type(config).__name__ == "SimpleToolCallingConfig"
        assert list(global_registry) == []
        # It still connects the sync: tools registered by hand reach the database on migrate.
        from django.db.models.signals import post_migrate

        live = post_migrate._live_receivers(config)
        # Django 5.0+ answers (sync receivers, async receivers); 4.2 a list of receivers.
        sync_receivers = live[0] if isinstance(live, tuple) else live
        assert post_migrate_sync in sync_receivers


def test_the_app_configs_pin_label_and_auto_field():
    from tool_calling.apps import SimpleToolCallingConfig, ToolCallingConfig

    for config in (SimpleToolCallingConfig, ToolCallingConfig):
        assert config.label == "tool_calling"
        assert config.default_auto_field == "django.db.models.BigAutoField"
    assert ToolCallingConfig.default is True
    assert "default" not in vars(SimpleToolCallingConfig)
