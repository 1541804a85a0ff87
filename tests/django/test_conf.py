"""tool_calling.conf: defaults, one-level merge, caching and its reset, the core settings seam."""

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from tool_calling.conf import (
    DEFAULTS,
    IMPORT_STRINGS,
    ToolCallingSettings,
    django_core_settings,
    settings,
)
from tool_calling.core import _settings as core_settings_module
from tool_calling.core._settings import CoreSettings
from tool_calling.core.execution.limits import ToolCallLimitBehavior, ToolCallLimits

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_tool_calling_setting(settings):
    del settings.TOOL_CALLING
    return settings


def test_every_default_is_returned_when_the_project_sets_nothing():
    """With no TOOL_CALLING at all, every key reads as its documented default."""
    fresh = ToolCallingSettings(user_settings={})
    for key, default in DEFAULTS.items():
        assert getattr(fresh, key) == default


def test_missing_setting_reads_as_empty(no_tool_calling_setting):
    """A project without a TOOL_CALLING setting gets the defaults."""
    fresh = ToolCallingSettings()
    assert fresh.user_settings == {}
    assert fresh.LIMITS == DEFAULTS["LIMITS"]


def test_documented_defaults():
    """The defaults the settings table (docs/settings.md) promises."""
    assert DEFAULTS["EXECUTION"] == {
        "MODE": "inline",
        "MAX_CONCURRENT_CALLS": 8,
        "QUEUE": "tool_calling",
        "PROCESS_QUEUE": "tool_calling_processes",
        "TIMEOUT": 30,
        "TIMEOUT_GRACE": 5,
        "LEASE_SECONDS": 15,
        "MAX_ATTEMPTS": 3,
        "WAIT_MARGIN": 30,
        "REDISPATCH_AFTER": 300,
        "BROKER_TIMEOUT": 2,
        "RETRY_BACKOFF_MAX": 60,
    }
    assert DEFAULTS["APPROVALS"] == {
        "EXPIRE_AFTER": 86400,
        "ALLOW_SELF_APPROVAL": False,
        "NOTIFY_BY_EMAIL": False,
    }
    assert DEFAULTS["LIMITS"] == {
        "MAX_CALLS_PER_TOOL_DEFAULT": 40,
        "MAX_CALLS_PER_TOOL": {},
        "EXCLUDED_TOOLS": [],
        "MAX_TOTAL_TOOL_CALLS": 150,
        "MAX_TOOL_ROUNDS": 100,
        "ON_LIMIT_EXCEEDED": "THROW",
    }
    assert DEFAULTS["CHAT_MODEL"]["CLASS"] == "tool_calling.core.providers.openai.OpenAIChatModel"
    assert DEFAULTS["CHAT_MODEL"]["ARGUMENTS"] == {}
    assert DEFAULTS["API"]["PERMISSION_CLASSES"] == ["rest_framework.permissions.IsAuthenticated"]
    assert DEFAULTS["CHAT_MODEL"]["TIMEOUT"] == 60
    assert DEFAULTS["CHAT_MODEL"]["MAX_RETRIES"] == 2
    assert DEFAULTS["CHAT_MODEL"]["OPTIONS"] == {}
    assert DEFAULTS["THROW_EXCEPTION_ON_ERROR"] is False
    assert DEFAULTS["RESOLUTION_FALLBACK_ENABLED"] is False
    assert DEFAULTS["TOOL_CALLING_ADVISOR_AUTO_REGISTER"] is True
    assert DEFAULTS["STRICT_TOOL_CALLS"] is False
    assert DEFAULTS["MCP"] == {
        "ALLOWED_HOSTS": ["127.0.0.1", "localhost", "[::1]"],
        "ALLOWED_ORIGINS": None,
        "LIST_TTL_MS": 0,
        "RESOURCE": None,
        "AUTHORIZATION_SERVERS": [],
        "SCOPE": "mcp",
        "TOOL_SCOPES": {},
    }
    # spring.ai.tools.observations.include-content: content stays off spans by default (S12).
    assert DEFAULTS["OBSERVATIONS_INCLUDE_CONTENT"] is False
    assert DEFAULTS["TOOL_SEARCH"] == {
        "ENABLED": False,
        "INDEX": "tool_calling.core.search.lexical.LexicalToolIndex",
        "MAX_RESULTS": 5,
        "THRESHOLD": 20,
    }
    assert DEFAULTS["ARGUMENT_AUGMENTATION"] == {
        "ENABLED": False,
        "TYPE": "tool_calling.augmentation.CallReason",
    }
    assert DEFAULTS["MAX_RESULT_CHARS"] == 65536
    assert DEFAULTS["MEMORY_MAX_MESSAGES"] == 100
    assert DEFAULTS["NEW_TOOLS_ENABLED"] is True
    assert DEFAULTS["AUDIT_MAX_CHARS"] == 10000
    assert DEFAULTS["AUDIT_REDACTOR"] is None


def test_every_key_is_documented_by_a_comment_beside_its_default():
    """conf.py has a comment right above each scalar key and each key of a dict-valued one."""
    source = (ROOT / "tool_calling" / "conf.py").read_text()
    lines = source[source.index("DEFAULTS: dict") : source.index("IMPORT_STRINGS:")].splitlines()

    def documented(index):
        above = lines[index - 1].strip()
        return above.startswith("#") and not above.startswith("# ---")

    for key, default in DEFAULTS.items():
        (start,) = [n for n, line in enumerate(lines) if line.startswith(f'    "{key}":')]
        if not isinstance(default, dict):
            assert documented(start), key
            continue
        end = lines.index("    },", start)
        for sub_key in default:
            (index,) = [
                n for n in range(start, end) if lines[n].startswith(f'        "{sub_key}":')
            ]
            assert documented(index), f"{key}[{sub_key}]"


def test_the_defaults_agree_with_the_core_defaults():
    """Django and the core without Django start from the same limits and caps."""
    core = CoreSettings()
    limits = DEFAULTS["LIMITS"]
    assert limits["MAX_CALLS_PER_TOOL_DEFAULT"] == core.limits.max_calls_per_tool
    assert limits["MAX_TOTAL_TOOL_CALLS"] == core.limits.max_total_tool_calls
    assert limits["ON_LIMIT_EXCEEDED"] == core.limits.on_limit_exceeded.value
    assert DEFAULTS["MAX_RESULT_CHARS"] == core.max_result_chars
    assert DEFAULTS["EXECUTION"]["MAX_CONCURRENT_CALLS"] == core.max_concurrent_calls


def test_scalar_settings_are_taken_as_given():
    with override_settings(TOOL_CALLING={"STRICT_TOOL_CALLS": True, "MAX_RESULT_CHARS": None}):
        assert settings.STRICT_TOOL_CALLS is True
        assert settings.MAX_RESULT_CHARS is None
        assert settings.THROW_EXCEPTION_ON_ERROR is False


def test_dict_settings_merge_one_level_deep():
    """Overriding one limit keeps the other limits at their defaults (DRF would drop them)."""
    with override_settings(TOOL_CALLING={"LIMITS": {"MAX_TOTAL_TOOL_CALLS": 10}}):
        assert settings.LIMITS == {**DEFAULTS["LIMITS"], "MAX_TOTAL_TOOL_CALLS": 10}


def test_values_two_levels_down_replace_the_default_whole():
    new = {"LIMITS": {"MAX_CALLS_PER_TOOL": {"search": 2}}, "CHAT_MODEL": {"OPTIONS": {"seed": 1}}}
    with override_settings(TOOL_CALLING=new):
        assert settings.LIMITS["MAX_CALLS_PER_TOOL"] == {"search": 2}
        assert settings.LIMITS["MAX_CALLS_PER_TOOL_DEFAULT"] == 40
        assert settings.CHAT_MODEL["OPTIONS"] == {"seed": 1}
        assert settings.CHAT_MODEL["TIMEOUT"] == 60


def test_values_are_cached_until_the_setting_changes():
    with override_settings(TOOL_CALLING={"EXECUTION": {"MODE": "celery"}}):
        first = settings.EXECUTION
        assert first["MODE"] == "celery"
        assert settings.EXECUTION is first
        with override_settings(TOOL_CALLING={"EXECUTION": {"QUEUE": "slow"}}):
            assert settings.EXECUTION["MODE"] == "inline"
            assert settings.EXECUTION["QUEUE"] == "slow"
        assert settings.EXECUTION["MODE"] == "celery"
        assert settings.EXECUTION["QUEUE"] == "tool_calling"


def test_other_setting_changes_keep_the_cache():
    cached = settings.LIMITS
    with override_settings(USE_TZ=False):
        assert settings.LIMITS is cached


def test_changing_a_returned_value_does_not_change_the_defaults():
    before = copy.deepcopy(DEFAULTS)
    with override_settings(TOOL_CALLING={}):
        settings.LIMITS["EXCLUDED_TOOLS"].append("search")
        settings.CHAT_MODEL["ARGUMENTS"]["x"] = 1
    assert DEFAULTS == before


def test_unknown_attribute_raises_attribute_error_naming_it():
    with pytest.raises(AttributeError, match=re.escape("Invalid TOOL_CALLING setting: 'LIMIT'")):
        settings.LIMIT  # noqa: B018


def test_tool_calling_that_is_not_a_dict_is_improperly_configured():
    with override_settings(TOOL_CALLING=["LIMITS"]):
        with pytest.raises(
            ImproperlyConfigured, match=re.escape("The value of 'TOOL_CALLING' must be a dict.")
        ):
            settings.LIMITS  # noqa: B018


def test_dict_setting_that_is_not_a_dict_is_improperly_configured():
    msg = """The value of 'TOOL_CALLING["LIMITS"]' must be a dict."""
    with override_settings(TOOL_CALLING={"LIMITS": 5}):
        with pytest.raises(ImproperlyConfigured, match=re.escape(msg)):
            settings.LIMITS  # noqa: B018


# --- Import strings ------------------------------------------------------------------------


def test_audit_redactor_is_imported_on_first_access_and_cached():
    from tests.fixtures.redactors import redact

    with override_settings(TOOL_CALLING={"AUDIT_REDACTOR": "tests.fixtures.redactors.redact"}):
        assert settings.AUDIT_REDACTOR is redact
        assert "AUDIT_REDACTOR" in settings._cached_attrs
    assert settings.AUDIT_REDACTOR is None


def test_audit_redactor_takes_a_callable_as_given():
    def mine(text, *, tool_name, field):
        return text

    with override_settings(TOOL_CALLING={"AUDIT_REDACTOR": mine}):
        assert settings.AUDIT_REDACTOR is mine


def test_an_audit_redactor_that_does_not_import_names_the_setting():
    msg = (
        "Could not import 'tests.fixtures.redactors.nope' for "
        """'TOOL_CALLING["AUDIT_REDACTOR"]': Module "tests.fixtures.redactors" does not """
        'define a "nope" attribute/class'
    )
    with override_settings(TOOL_CALLING={"AUDIT_REDACTOR": "tests.fixtures.redactors.nope"}):
        with pytest.raises(ImportError, match=re.escape(msg)):
            settings.AUDIT_REDACTOR  # noqa: B018


def test_import_strings_are_the_documented_ones():
    assert IMPORT_STRINGS == {"AUDIT_REDACTOR", "EXCEPTION_PROCESSOR"}
    assert set(IMPORT_STRINGS) <= set(DEFAULTS)


def test_importing_the_django_glue_reads_no_settings():
    """conf, checks and apps import without DJANGO_SETTINGS_MODULE: nothing is read at import."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    code = (
        "import tool_calling.conf, tool_calling.checks, tool_calling.apps\n"
        "from django.conf import settings\n"
        "assert not settings.configured\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


# --- The core settings provider ------------------------------------------------------------


def test_ready_installs_the_provider():
    """The core's core_settings() answers from TOOL_CALLING once the app is ready."""
    with override_settings(TOOL_CALLING={"STRICT_TOOL_CALLS": True}):
        assert core_settings_module.core_settings().strict_tool_calls is True
    assert core_settings_module.core_settings().strict_tool_calls is False


def test_provider_maps_every_setting_into_core_settings():
    new = {
        "STRICT_TOOL_CALLS": True,
        "THROW_EXCEPTION_ON_ERROR": True,
        "MAX_RESULT_CHARS": 1000,
        "EXECUTION": {"MAX_CONCURRENT_CALLS": 3},
        "LIMITS": {
            "MAX_CALLS_PER_TOOL_DEFAULT": 5,
            "MAX_CALLS_PER_TOOL": {"search": 2, "free": None},
            "EXCLUDED_TOOLS": ["clock"],
            "MAX_TOTAL_TOOL_CALLS": None,
            "ON_LIMIT_EXCEEDED": "RETURN_ERROR_RESPONSE",
            "MAX_TOOL_ROUNDS": 7,
        },
        "TOOL_CALLING_ADVISOR_AUTO_REGISTER": False,
        "CHAT_MODEL": {"MODEL": "llama3.1", "BASE_URL": "http://localhost:11434/v1"},
    }
    with override_settings(TOOL_CALLING=new):
        result = django_core_settings()
    assert result == CoreSettings(
        strict_tool_calls=True,
        throw_exception_on_error=True,
        max_result_chars=1000,
        max_concurrent_calls=3,
        limits=ToolCallLimits(
            max_calls_per_tool=5,
            per_tool={"search": 2, "free": None},
            excluded_tools=("clock",),
            max_total_tool_calls=None,
            on_limit_exceeded=ToolCallLimitBehavior.RETURN_ERROR_RESPONSE,
        ),
        tool_calling_advisor_auto_register=False,
        max_tool_rounds=7,
        chat_model={
            "CLASS": "tool_calling.core.providers.openai.OpenAIChatModel",
            "ARGUMENTS": {},
            "MODEL": "llama3.1",
            "BASE_URL": "http://localhost:11434/v1",
            "API_KEY": None,
            "TIMEOUT": 60,
            "MAX_RETRIES": 2,
            "OPTIONS": {},
        },
    )


def test_provider_defaults_match_the_core_defaults():
    with override_settings(TOOL_CALLING={}):
        assert django_core_settings() == CoreSettings(chat_model=DEFAULTS["CHAT_MODEL"])


def test_provider_is_cached_until_tool_calling_changes():
    first = django_core_settings()
    assert django_core_settings() is first
    with override_settings(TOOL_CALLING={"MAX_RESULT_CHARS": 10}):
        assert django_core_settings().max_result_chars == 10
    assert django_core_settings() is not first
    assert django_core_settings() == first


def test_provider_chat_model_is_read_only():
    with pytest.raises(TypeError):
        django_core_settings().chat_model["MODEL"] = "other"  # type: ignore[index]


def test_provider_reports_invalid_limits_as_improperly_configured():
    msg = (
        """Invalid TOOL_CALLING["LIMITS"]: max_total_tool_calls must be a positive integer """
        "or None (unlimited), got 0"
    )
    with override_settings(TOOL_CALLING={"LIMITS": {"MAX_TOTAL_TOOL_CALLS": 0}}):
        with pytest.raises(ImproperlyConfigured, match=re.escape(msg)):
            django_core_settings()
