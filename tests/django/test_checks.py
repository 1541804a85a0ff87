"""tool_calling.checks: each system check by id, with its exact message and hint."""

import pytest
from django.core.checks import Error, Warning, run_checks
from django.core.management import call_command
from django.test import override_settings

from tests.django._tools import current_celery_app
from tool_calling import _celery, checks
from tool_calling.cache import JSONSerializer
from tool_calling.conf import DEFAULTS

ACCEPTED_KEYS = (
    "API, APPROVALS, ARGUMENT_AUGMENTATION, AUDIT_MAX_CHARS, AUDIT_REDACTOR, CHAT_MODEL, "
    "CONVERSATION_TURN_TIMEOUT, EXCEPTION_PROCESSOR, EXECUTION, LIMITS, MAX_RESULT_CHARS, MCP, "
    "MEMORY_MAX_MESSAGES, NEW_TOOLS_ENABLED, OBSERVATIONS_INCLUDE_CONTENT, "
    "RESOLUTION_FALLBACK_ENABLED, RETENTION, STRICT_TOOL_CALLS, THROW_EXCEPTION_ON_ERROR, "
    "TOOL_CALLING_ADVISOR_AUTO_REGISTER, TOOL_SEARCH"
)
REDACTOR = """TOOL_CALLING["AUDIT_REDACTOR"]"""


def run(tool_calling):
    """Run the registered tool_calling checks against TOOL_CALLING = tool_calling."""
    with override_settings(TOOL_CALLING=tool_calling):
        return run_checks(tags=[checks.TAG])


def test_clean_settings_pass_every_check():
    assert run_checks(tags=[checks.TAG]) == []
    assert run({}) == []
    assert run_checks() == []
    call_command("check", "--fail-level", "WARNING")


def test_a_full_valid_configuration_passes():
    assert (
        run(
            {
                "CHAT_MODEL": {"MODEL": "m", "OPTIONS": {"temperature": 0}},
                "EXECUTION": {"MODE": "celery", "MAX_CONCURRENT_CALLS": 1},
                "LIMITS": {
                    "MAX_CALLS_PER_TOOL_DEFAULT": None,
                    "MAX_CALLS_PER_TOOL": {"search": 1, "free": None},
                    "EXCLUDED_TOOLS": ("clock",),
                    "MAX_TOTAL_TOOL_CALLS": None,
                    "ON_LIMIT_EXCEEDED": "RETURN_ERROR_RESPONSE",
                },
                "MAX_RESULT_CHARS": None,
                "NEW_TOOLS_ENABLED": False,
                "AUDIT_MAX_CHARS": None,
                "AUDIT_REDACTOR": "tests.fixtures.redactors.redact",
                "MEMORY_MAX_MESSAGES": 1,
                "STRICT_TOOL_CALLS": True,
            }
        )
        == []
    )


def test_the_checks_are_registered_under_their_tag():
    with override_settings(TOOL_CALLING={"NOPE": 1}):
        ids = [message.id for message in run_checks()]
    assert ids == ["tool_calling.E001"]


# --- E001 / E002: unknown keys -------------------------------------------------------------


def test_e001_unknown_key_with_a_close_match():
    assert run({"LIMIT": {}}) == [
        Error(
            "Unknown key 'LIMIT' in TOOL_CALLING.",
            hint="Did you mean 'LIMITS'?",
            id="tool_calling.E001",
        )
    ]


def test_e001_unknown_key_without_a_close_match_lists_the_accepted_keys():
    assert run({"QQQ": 1}) == [
        Error(
            "Unknown key 'QQQ' in TOOL_CALLING.",
            hint=f"The accepted keys are: {ACCEPTED_KEYS}.",
            id="tool_calling.E001",
        )
    ]


def test_e002_unknown_nested_key_with_a_close_match():
    assert run({"LIMITS": {"MAX_TOTAL_TOOL_CALL": 5}}) == [
        Error(
            """Unknown key 'MAX_TOTAL_TOOL_CALL' in TOOL_CALLING["LIMITS"].""",
            hint="Did you mean 'MAX_TOTAL_TOOL_CALLS'?",
            id="tool_calling.E002",
        )
    ]


def test_e002_unknown_nested_key_without_a_close_match_lists_the_accepted_keys():
    assert run({"EXECUTION": {"BACKEND": "x"}}) == [
        Error(
            """Unknown key 'BACKEND' in TOOL_CALLING["EXECUTION"].""",
            hint="The accepted keys are: BROKER_TIMEOUT, LEASE_SECONDS, MAX_ATTEMPTS, "
            "MAX_CONCURRENT_CALLS, MODE, PROCESS_QUEUE, QUEUE, REDISPATCH_AFTER, "
            "RETRY_BACKOFF_MAX, TIMEOUT, TIMEOUT_GRACE, WAIT_MARGIN.",
            id="tool_calling.E002",
        )
    ]


def test_keys_two_levels_down_are_free_form():
    """Tool names, model options and the chat model's arguments are the project's own keys."""
    assert (
        run(
            {
                "LIMITS": {"MAX_CALLS_PER_TOOL": {"anything": 1}},
                "CHAT_MODEL": {"OPTIONS": {"top_p": 0.5}, "ARGUMENTS": {"model": "x"}},
            }
        )
        == []
    )


# --- E003: limits --------------------------------------------------------------------------


def e003(msg):
    return Error(msg, id="tool_calling.E003")


@pytest.mark.parametrize("value", [0, -1, True, False, 1.5, "10"])
def test_e003_total_limit_must_be_a_positive_integer_or_none(value):
    assert run({"LIMITS": {"MAX_TOTAL_TOOL_CALLS": value}}) == [
        e003(
            """The value of 'TOOL_CALLING["LIMITS"]["MAX_TOTAL_TOOL_CALLS"]' must be a """
            "positive integer or None."
        )
    ]


def test_e003_default_per_tool_limit():
    assert run({"LIMITS": {"MAX_CALLS_PER_TOOL_DEFAULT": 0}}) == [
        e003(
            """The value of 'TOOL_CALLING["LIMITS"]["MAX_CALLS_PER_TOOL_DEFAULT"]' must be a """
            "positive integer or None."
        )
    ]


def test_e003_per_tool_limit_names_the_tool():
    assert run({"LIMITS": {"MAX_CALLS_PER_TOOL": {"search": True, "ok": 3}}}) == [
        e003(
            """The value of 'TOOL_CALLING["LIMITS"]["MAX_CALLS_PER_TOOL"]["search"]' must be a """
            "positive integer or None."
        )
    ]


def test_e003_per_tool_limits_must_be_a_dict():
    assert run({"LIMITS": {"MAX_CALLS_PER_TOOL": [("search", 1)]}}) == [
        e003(
            """The value of 'TOOL_CALLING["LIMITS"]["MAX_CALLS_PER_TOOL"]' must be a dict """
            "mapping tool names to a positive integer or None."
        )
    ]


@pytest.mark.parametrize("value", ["search", None, [1], {"search": 1}])
def test_e003_excluded_tools_must_be_a_list_of_names(value):
    assert run({"LIMITS": {"EXCLUDED_TOOLS": value}}) == [
        e003(
            """The value of 'TOOL_CALLING["LIMITS"]["EXCLUDED_TOOLS"]' must be a list of """
            "tool names."
        )
    ]


def test_e003_on_limit_exceeded_with_a_close_match():
    assert run({"LIMITS": {"ON_LIMIT_EXCEEDED": "throw"}}) == [
        Error(
            """The value of 'TOOL_CALLING["LIMITS"]["ON_LIMIT_EXCEEDED"]' must be 'THROW' or """
            "'RETURN_ERROR_RESPONSE'.",
            hint="Did you mean 'THROW'?",
            id="tool_calling.E003",
        )
    ]


def test_e003_on_limit_exceeded_without_a_close_match():
    assert run({"LIMITS": {"ON_LIMIT_EXCEEDED": "IGNORE"}}) == [
        e003(
            """The value of 'TOOL_CALLING["LIMITS"]["ON_LIMIT_EXCEEDED"]' must be 'THROW' or """
            "'RETURN_ERROR_RESPONSE'."
        )
    ]


def test_e003_max_result_chars_and_max_concurrent_calls():
    assert run({"MAX_RESULT_CHARS": 0, "EXECUTION": {"MAX_CONCURRENT_CALLS": None}}) == [
        e003(
            """The value of 'TOOL_CALLING["MAX_RESULT_CHARS"]' must be a positive integer """
            "or None."
        ),
        e003(
            """The value of 'TOOL_CALLING["EXECUTION"]["MAX_CONCURRENT_CALLS"]' must be a """
            "positive integer."
        ),
    ]


@pytest.mark.parametrize("value", [0, -5, True, "100", 2.5])
def test_e003_audit_max_chars_must_be_a_positive_integer_or_none(value):
    assert run({"AUDIT_MAX_CHARS": value}) == [
        e003(
            """The value of 'TOOL_CALLING["AUDIT_MAX_CHARS"]' must be a positive integer """
            "or None."
        )
    ]


@pytest.mark.parametrize("value", [None, 0, False, "20"])
def test_e003_memory_max_messages_must_be_a_positive_integer(value):
    assert run({"MEMORY_MAX_MESSAGES": value}) == [
        e003("""The value of 'TOOL_CALLING["MEMORY_MAX_MESSAGES"]' must be a positive integer.""")
    ]


@pytest.mark.parametrize("key", ["MAX_MESSAGE_CHARS", "MAX_WAIT_SECONDS"])
@pytest.mark.parametrize("value", [None, 0, True, "60"])
def test_e003_api_sizes_must_be_positive_integers(key, value):
    assert run({"API": {key: value}}) == [
        e003(f"""The value of 'TOOL_CALLING["API"]["{key}"]' must be a positive integer.""")
    ]


def test_e003_reports_every_bad_limit_at_once():
    ids = [
        error.id
        for error in run({"LIMITS": {"MAX_CALLS_PER_TOOL_DEFAULT": -1, "MAX_TOTAL_TOOL_CALLS": 0}})
    ]
    assert ids == ["tool_calling.E003", "tool_calling.E003"]


@pytest.mark.parametrize(
    "key",
    [
        "TIMEOUT",
        "TIMEOUT_GRACE",
        "LEASE_SECONDS",
        "MAX_ATTEMPTS",
        "WAIT_MARGIN",
        "REDISPATCH_AFTER",
    ],
)
@pytest.mark.parametrize("value", [0, -1, None, True, "30", 1.5])
def test_e003_execution_timings_must_be_positive_integers(key, value):
    assert run({"EXECUTION": {key: value}}) == [
        e003(f"""The value of 'TOOL_CALLING["EXECUTION"]["{key}"]' must be a positive integer.""")
    ]


# --- E010: the broker's visibility timeout (R7) ----------------------------------------------

REDIS = "redis://127.0.0.1:6379/0"
BOUNDED = {"socket_timeout": 5, "socket_connect_timeout": 5}
# A model client that gives up within 30 s: the 60 s task limits of these tests are not W004's.
QUICK_MODEL = {"TIMEOUT": 10, "MAX_RETRIES": 2}


def test_e010_a_visibility_timeout_shorter_than_a_tool_calls_hard_limit(settings):
    settings.CELERY_BROKER_URL = REDIS
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 600, **BOUNDED}
    settings.CELERY_TASK_TIME_LIMIT = 60
    execution = {"TIMEOUT": 580, "TIMEOUT_GRACE": 10, "RETRY_BACKOFF_MAX": 10}
    assert run({"EXECUTION": execution, "CHAT_MODEL": QUICK_MODEL}) == [
        Error(
            "The broker's visibility timeout "
            """(CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] = 600 s) must be longer """
            "than the longest a task's message may wait unacknowledged: a retry's pause, then "
            """the time the task may run (TOOL_CALLING["EXECUTION"]["TIMEOUT"] + """
            """TOOL_CALLING["EXECUTION"]["TIMEOUT_GRACE"] + """
            """TOOL_CALLING["EXECUTION"]["RETRY_BACKOFF_MAX"] = 600 s). Else the broker would """
            "deliver the task again while it waits or runs.",
            hint="Set CELERY_BROKER_TRANSPORT_OPTIONS = {'visibility_timeout': 1800} (and the "
            "same value in CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS and "
            "CELERY_VISIBILITY_TIMEOUT), or lower the time limit.",
            id="tool_calling.E010",
        )
    ]
    assert run({"EXECUTION": {**execution, "TIMEOUT": 579}, "CHAT_MODEL": QUICK_MODEL}) == []


def test_e010_r7_the_longest_retry_backoff_counts_too(settings):
    """R7: visibility_timeout <= time limit + retry backoff max is an error."""
    settings.CELERY_BROKER_URL = REDIS
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 600, **BOUNDED}
    settings.CELERY_TASK_TIME_LIMIT = 60
    execution = {"TIMEOUT": 100, "TIMEOUT_GRACE": 5}
    assert (
        run({"EXECUTION": {**execution, "RETRY_BACKOFF_MAX": 494}, "CHAT_MODEL": QUICK_MODEL}) == []
    )
    [error] = run({"EXECUTION": {**execution, "RETRY_BACKOFF_MAX": 495}, "CHAT_MODEL": QUICK_MODEL})
    assert error.id == "tool_calling.E010"
    assert 'RETRY_BACKOFF_MAX"] = 600 s)' in error.msg


def test_e010_the_celery_task_time_limit_counts_too_and_the_default_applies(settings):
    settings.CELERY_BROKER_URL = "rediss://cache.example:6380/1"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = BOUNDED
    settings.CELERY_TASK_TIME_LIMIT = 4000
    assert run({}) == [
        Error(
            "The broker's visibility timeout (the transport's default = 3600 s) must be longer "
            "than the longest a task's message may wait unacknowledged: a retry's pause, then "
            "the time the task may run (CELERY_TASK_TIME_LIMIT + "
            """TOOL_CALLING["EXECUTION"]["RETRY_BACKOFF_MAX"] = 4060 s). Else the broker would """
            "deliver the task again while it waits or runs.",
            hint="Set CELERY_BROKER_TRANSPORT_OPTIONS = {'visibility_timeout': 8120} (and the "
            "same value in CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS and "
            "CELERY_VISIBILITY_TIMEOUT), or lower the time limit.",
            id="tool_calling.E010",
        )
    ]


@pytest.mark.parametrize("value", [0, -5, "1800", True])
def test_e010_a_visibility_timeout_that_is_not_a_number(settings, value):
    settings.CELERY_BROKER_URL = REDIS
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": value, **BOUNDED}
    assert run({}) == [
        Error(
            """The value of 'CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]' must be a """
            "positive number of seconds.",
            id="tool_calling.E010",
        )
    ]


@pytest.mark.parametrize("url", ["memory://", "amqp://guest@localhost//", "", None])
def test_e010_brokers_without_a_visibility_timeout_are_not_checked(settings, url):
    settings.CELERY_BROKER_URL = url
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 1}
    settings.CELERY_TASK_TIME_LIMIT = 60
    assert run({"CHAT_MODEL": QUICK_MODEL}) == []


def test_the_example_projects_celery_settings_pass_e010(settings):
    from project import settings as project_settings

    settings.CELERY_BROKER_URL = project_settings.CELERY_BROKER_URL
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = project_settings.CELERY_BROKER_TRANSPORT_OPTIONS
    messages = run({"EXECUTION": {"MODE": "celery"}})
    assert [m for m in messages if m.id != "tool_calling.W001"] == []


# --- W001: a worker's connection to a stalled Redis (S9) ------------------------------------


@pytest.mark.parametrize("options", [{}, {"visibility_timeout": 1800}, {"socket_timeout": None}])
def test_w001_a_redis_broker_without_a_socket_timeout(settings, options):
    settings.CELERY_BROKER_URL = REDIS
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = options
    assert run({}) == [
        Warning(
            "CELERY_BROKER_TRANSPORT_OPTIONS has no 'socket_timeout' for the Redis broker: a "
            "worker's connection, and any publish not made by tool_calling, would wait forever "
            "on a Redis that stopped answering.",
            hint="Add 'socket_timeout': 5 and 'socket_connect_timeout': 5 (seconds, more than "
            "kombu's 1 s BRPOP timeout) to CELERY_BROKER_TRANSPORT_OPTIONS, and set "
            "CELERY_REDIS_SOCKET_TIMEOUT and CELERY_REDIS_SOCKET_CONNECT_TIMEOUT for a Redis "
            "result backend.",
            id="tool_calling.W001",
        )
    ]
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {**options, "socket_timeout": 5}
    assert run({}) == []


# --- W003: a pickling cache in the broker's Redis database (S21) -------------------------------

PICKLING_CACHE = {
    "BACKEND": "django.core.cache.backends.redis.RedisCache",
    "LOCATION": "redis://127.0.0.1:6379/0",
}
W003 = Warning(
    "The cache 'default' shares the Redis database of CELERY_BROKER_URL and unpickles what it "
    "reads: whoever can write a key there (any client of the broker) could run code in every "
    "process that reads the cache.",
    hint="Give it OPTIONS = {'serializer': 'tool_calling.cache.JSONSerializer'} (JSON, never "
    "pickle), or a Redis database and credentials of its own.",
    id="tool_calling.W003",
)


@pytest.mark.parametrize(
    "location",
    [
        "redis://127.0.0.1:6379/0",
        "redis://127.0.0.1:6379",  # database 0 by default
        "redis://:secret@127.0.0.1/0",  # port 6379 by default
        ["redis://127.0.0.1:6379/0", "redis://replica:6379/0"],
    ],
)
def test_w003_a_pickling_redis_cache_in_the_brokers_database(settings, location):
    settings.CELERY_BROKER_URL = REDIS
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = BOUNDED
    settings.CACHES = {"default": {**PICKLING_CACHE, "LOCATION": location}}
    assert run({}) == [W003]


@pytest.mark.parametrize(
    "cache",
    [
        {**PICKLING_CACHE, "OPTIONS": {"serializer": "tool_calling.cache.JSONSerializer"}},
        {**PICKLING_CACHE, "OPTIONS": {"serializer": JSONSerializer}},
        {**PICKLING_CACHE, "LOCATION": "redis://127.0.0.1:6379/1"},  # a database of its own
        {**PICKLING_CACHE, "LOCATION": "redis://cache.internal:6379/0"},
        {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    ],
)
def test_w003_a_json_cache_or_one_apart_from_the_broker_passes(settings, cache):
    settings.CELERY_BROKER_URL = REDIS
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = BOUNDED
    settings.CACHES = {"default": cache}
    assert run({}) == []


def test_the_example_projects_cache_passes_w003(settings):
    from project import settings as project_settings

    settings.CELERY_BROKER_URL = project_settings.CELERY_BROKER_URL
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = project_settings.CELERY_BROKER_TRANSPORT_OPTIONS
    settings.CACHES = project_settings.CACHES
    assert project_settings.CACHES["default"]["LOCATION"] == project_settings.CELERY_BROKER_URL
    assert run({}) == []


@pytest.mark.parametrize("url", ["memory://", "amqp://guest@localhost//", None])
def test_w001_other_brokers_are_not_checked(settings, url):
    settings.CELERY_BROKER_URL = url
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {}
    assert run({}) == []


@pytest.mark.parametrize("value", ["", "  ", None, 3])
def test_e011_the_default_queue_must_be_a_name(value):
    assert run({"EXECUTION": {"QUEUE": value}}) == [
        Error(
            """The value of 'TOOL_CALLING["EXECUTION"]["QUEUE"]' must be a non-empty string.""",
            hint="Name the Celery queue your tool workers consume, e.g. 'tool_calling'.",
            id="tool_calling.E011",
        )
    ]


def test_e012_celery_mode_with_workers_that_accept_pickle(settings):
    settings.CELERY_ACCEPT_CONTENT = ["json", "pickle", "application/x-yaml"]
    assert run({"EXECUTION": {"MODE": "celery"}}) == [
        Error(
            "CELERY_ACCEPT_CONTENT must not accept 'application/x-yaml', 'pickle' when "
            """TOOL_CALLING["EXECUTION"]["MODE"] is 'celery': a message pushed into a tool """
            "queue would be deserialized, and could run code, on the workers.",
            hint="Set CELERY_ACCEPT_CONTENT = ['json'] (and CELERY_TASK_SERIALIZER = 'json').",
            id="tool_calling.E012",
        )
    ]
    assert run({"EXECUTION": {"MODE": "inline"}}) == []
    settings.CELERY_ACCEPT_CONTENT = ["json", "msgpack"]
    assert run({"EXECUTION": {"MODE": "celery"}}) == []
    del settings.CELERY_ACCEPT_CONTENT  # Celery's default: JSON only
    assert run({"EXECUTION": {"MODE": "celery"}}) == []


# --- E004 / E005 / E007: execution mode ----------------------------------------------------


def test_e004_unknown_execution_mode_with_a_close_match():
    assert run({"EXECUTION": {"MODE": "Celery"}}) == [
        Error(
            """The value of 'TOOL_CALLING["EXECUTION"]["MODE"]' must be 'inline' or 'celery'.""",
            hint="Did you mean 'celery'?",
            id="tool_calling.E004",
        )
    ]


def test_e004_unknown_execution_mode_without_a_close_match():
    assert run({"EXECUTION": {"MODE": "threads"}}) == [
        Error(
            """The value of 'TOOL_CALLING["EXECUTION"]["MODE"]' must be 'inline' or 'celery'.""",
            id="tool_calling.E004",
        )
    ]


def test_e005_celery_mode_without_a_broker_url(settings):
    del settings.CELERY_BROKER_URL
    assert run({"EXECUTION": {"MODE": "celery"}}) == [
        Error(
            "The CELERY_BROKER_URL setting must be set when "
            """TOOL_CALLING["EXECUTION"]["MODE"] is 'celery'.""",
            hint="Point it at the broker, e.g. CELERY_BROKER_URL = 'redis://127.0.0.1:6379/0', "
            "and load it in the Celery app with config_from_object('django.conf:settings', "
            "namespace='CELERY'); or use the MODE 'inline'.",
            id="tool_calling.E005",
        )
    ]


def test_e005_empty_broker_url(settings):
    settings.CELERY_BROKER_URL = ""
    assert [e.id for e in run({"EXECUTION": {"MODE": "celery"}})] == ["tool_calling.E005"]


def test_inline_mode_needs_no_broker(settings):
    del settings.CELERY_BROKER_URL
    assert run({"EXECUTION": {"MODE": "inline"}}) == []


def test_e007_celery_mode_without_celery_installed(monkeypatch):
    monkeypatch.setattr(checks, "_celery_installed", lambda: False)
    assert run({"EXECUTION": {"MODE": "celery"}}) == [
        Error(
            """Celery must be installed when TOOL_CALLING["EXECUTION"]["MODE"] is 'celery'.""",
            hint="Install it with: pip install 'celery[redis]'",
            id="tool_calling.E007",
        )
    ]


# --- E017 / E018 / E019: what the mounted API needs ------------------------------------------

CELERY_SET_UP = (
    "define the project's Celery app as Celery's Django guide does "
    "(app.config_from_object('django.conf:settings', namespace='CELERY') in <project>/celery.py, "
    "imported by <project>/__init__.py), set CELERY_BROKER_URL (e.g. "
    "'redis://127.0.0.1:6379/0') and start a worker: celery -A <project> worker -Q "
    "tool_calling,celery. In development, CELERY_TASK_ALWAYS_EAGER = True runs each turn inside "
    "the request that starts it instead (no broker, no worker)."
)


def test_e017_the_mounted_api_without_celery_installed_in_the_inline_mode(monkeypatch):
    """The API's turns are Celery tasks whatever EXECUTION["MODE"] says about tool calls."""
    monkeypatch.setattr(_celery, "installed", lambda: False)
    assert run({"EXECUTION": {"MODE": "inline"}}) == [
        Error(
            "tool_calling's API is mounted, and the turns it starts run as Celery tasks, but "
            "Celery is not installed.",
            hint="Install it (pip install 'celery[redis]'), then " + CELERY_SET_UP,
            id="tool_calling.E017",
        )
    ]


def test_e018_the_mounted_api_with_a_celery_app_that_has_no_broker():
    """Celery installed, no <project>/celery.py: the default app knows no CELERY_BROKER_URL."""
    with current_celery_app("default"):
        assert run({}) == [
            Error(
                "tool_calling's API is mounted, and the turns it starts run as Celery tasks, "
                "but the current Celery app ('default') has no broker URL.",
                hint="Celery's default app does not read the Django settings: " + CELERY_SET_UP,
                id="tool_calling.E018",
            )
        ]
    assert run({}) == []  # the project's app, which loads CELERY_BROKER_URL


def test_e018_not_when_the_celery_app_runs_tasks_eagerly():
    with current_celery_app(task_always_eager=True):
        assert run({}) == []


@override_settings(ROOT_URLCONF="tests.django.urls_without_api")
def test_e017_e018_not_where_the_api_is_not_mounted(monkeypatch):
    """manage.py chat and in-process turns need no Celery."""
    with current_celery_app():
        assert run({}) == []
    monkeypatch.setattr(_celery, "installed", lambda: False)
    assert run({}) == []


@pytest.mark.parametrize("rate", ["thirty/min", "30", "30/fortnight", "", "30/", 30, ["30/min"]])
def test_e019_a_turn_rate_the_throttle_cannot_read(settings, rate):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"tool_calling_turns": rate},
    }
    assert run({}) == [
        Error(
            """The value of 'REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["tool_calling_turns"]' """
            f"must be a rate such as '30/min', or None; got {rate!r}.",
            hint="A number of turns, '/', then 's', 'm', 'h' or 'd' (per second, minute, hour "
            "or day), as Django REST framework's throttles read it; None turns the limit off. "
            "Without the key the rate is 30/min.",
            id="tool_calling.E019",
        )
    ]


@pytest.mark.parametrize(
    "rates", [{"tool_calling_turns": "5/hour"}, {"tool_calling_turns": None}, {}]
)
def test_e019_not_for_a_rate_none_or_no_key(settings, rates):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    assert run({}) == []


# --- E006: not a dict ----------------------------------------------------------------------


def test_e006_tool_calling_is_not_a_dict():
    assert run(["LIMITS"]) == [
        Error("The value of 'TOOL_CALLING' must be a dict.", id="tool_calling.E006")
    ]


def test_e006_dict_setting_is_not_a_dict_and_the_rest_is_still_checked():
    assert run({"LIMITS": 10, "EXECUTION": {"MODE": "x"}}) == [
        Error("""The value of 'TOOL_CALLING["LIMITS"]' must be a dict.""", id="tool_calling.E006"),
        Error(
            """The value of 'TOOL_CALLING["EXECUTION"]["MODE"]' must be 'inline' or 'celery'.""",
            id="tool_calling.E004",
        ),
    ]


# --- E008: flags ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["False", 0, 1, None])
def test_e008_new_tools_enabled_must_be_a_bool(value):
    """A string "False" is truthy: it would enable every new tool."""
    assert run({"NEW_TOOLS_ENABLED": value}) == [
        Error(
            """The value of 'TOOL_CALLING["NEW_TOOLS_ENABLED"]' must be True or False.""",
            id="tool_calling.E008",
        )
    ]


def test_e008_applies_to_every_flag():
    flags = [
        "THROW_EXCEPTION_ON_ERROR",
        "STRICT_TOOL_CALLS",
        "RESOLUTION_FALLBACK_ENABLED",
        "TOOL_CALLING_ADVISOR_AUTO_REGISTER",
        "NEW_TOOLS_ENABLED",
        "OBSERVATIONS_INCLUDE_CONTENT",
    ]
    errors = run(dict.fromkeys(flags, "yes"))
    assert [(error.id, error.msg) for error in errors] == [
        ("tool_calling.E008", f"""The value of 'TOOL_CALLING["{flag}"]' must be True or False.""")
        for flag in sorted(flags, key=list(DEFAULTS).index)
    ]


# --- W002: content on spans ----------------------------------------------------------------


def test_w002_warns_when_content_goes_on_spans():
    """S12: arguments, results and messages on spans is a choice the operator sees at startup."""
    assert run({"OBSERVATIONS_INCLUDE_CONTENT": False}) == []
    assert run({"OBSERVATIONS_INCLUDE_CONTENT": True}) == [
        Warning(
            """'TOOL_CALLING["OBSERVATIONS_INCLUDE_CONTENT"]' is on: tool arguments and results """
            "and the messages of model calls are recorded on OpenTelemetry spans.",
            hint="Spans then hold what users and tools send, redacted only by AUDIT_REDACTOR; "
            "turn it off in production unless your traces are as protected as your database.",
            id="tool_calling.W002",
        )
    ]


# --- E009: import strings ------------------------------------------------------------------


def test_e009_passes_a_path_a_callable_and_none():
    assert run({"AUDIT_REDACTOR": "tests.fixtures.redactors.redact"}) == []
    assert run({"AUDIT_REDACTOR": lambda text, **kwargs: text}) == []
    assert run({"AUDIT_REDACTOR": None}) == []


def test_e009_missing_attribute_with_a_close_match():
    assert run({"AUDIT_REDACTOR": "tests.fixtures.redactors.redcat"}) == [
        Error(
            f"The value of '{REDACTOR}' must be an importable dotted path; "
            "'tests.fixtures.redactors.redcat' could not be imported (ImportError: Module "
            '"tests.fixtures.redactors" does not define a "redcat" attribute/class).',
            hint="Did you mean 'tests.fixtures.redactors.redact'?",
            id="tool_calling.E009",
        )
    ]


def test_e009_missing_module_with_a_close_match_keeps_the_rest_of_the_path():
    assert run({"AUDIT_REDACTOR": "tests.fixtures.redactor.redact"}) == [
        Error(
            f"The value of '{REDACTOR}' must be an importable dotted path; "
            "'tests.fixtures.redactor.redact' could not be imported (ModuleNotFoundError: No "
            "module named 'tests.fixtures.redactor').",
            hint="Did you mean 'tests.fixtures.redactors.redact'?",
            id="tool_calling.E009",
        )
    ]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("nosuchpackage.redact", "ModuleNotFoundError: No module named 'nosuchpackage'"),
        ("redact", "ImportError: redact doesn't look like a module path"),
    ],
)
def test_e009_without_a_close_match_says_what_to_give(value, reason):
    assert run({"AUDIT_REDACTOR": value}) == [
        Error(
            f"The value of '{REDACTOR}' must be an importable dotted path; {value!r} could not "
            f"be imported ({reason}).",
            hint="Use the dotted path of a callable, e.g. 'myproject.audit.redact', or None.",
            id="tool_calling.E009",
        )
    ]


def test_e009_the_path_must_name_a_callable():
    assert run({"AUDIT_REDACTOR": "tests.fixtures.redactors.NOT_CALLABLE"}) == [
        Error(
            f"The value of '{REDACTOR}' must name a callable; "
            "'tests.fixtures.redactors.NOT_CALLABLE' is a str.",
            id="tool_calling.E009",
        )
    ]


def test_e009_a_value_that_is_neither_a_path_nor_a_callable():
    assert run({"AUDIT_REDACTOR": 42}) == [
        Error(
            f"The value of '{REDACTOR}' must be a dotted import path, a callable or None.",
            id="tool_calling.E009",
        )
    ]


def test_e009_does_not_crash_the_other_checks():
    """Reading the settings for the other checks never imports the bad path."""
    ids = [e.id for e in run({"AUDIT_REDACTOR": "nope.nope", "AUDIT_MAX_CHARS": 0})]
    assert ids == ["tool_calling.E003", "tool_calling.E009"]


def test_e008_applies_to_flags_inside_dict_settings():
    assert run({"APPROVALS": {"ALLOW_SELF_APPROVAL": "no"}}) == [
        Error(
            """The value of 'TOOL_CALLING["APPROVALS"]["ALLOW_SELF_APPROVAL"]' must be True or """
            "False.",
            id="tool_calling.E008",
        )
    ]


def test_e009_a_missing_dependency_names_the_package_never_the_refused_value():
    value = "tests.fixtures.needs_a_missing_package.FakeChatModel"
    (error,) = run({"CHAT_MODEL": {"CLASS": value}})
    assert error.id == "tool_calling.E009"
    assert error.hint == (
        f"{value!r} exists but needs the 'tool_calling_no_such_package' package, which is not "
        "installed: pip install tool_calling_no_such_package"
    )


def test_e009_checks_the_exception_processor_and_accepts_an_instance():
    from tool_calling import DefaultToolExecutionExceptionProcessor

    assert run({"EXCEPTION_PROCESSOR": DefaultToolExecutionExceptionProcessor()}) == []
    assert run({"EXCEPTION_PROCESSOR": "tool_calling.DefaultToolExecutionExceptionProcessor"}) == []
    (error,) = run({"EXCEPTION_PROCESSOR": "tool_calling.NoSuchProcessor"})
    assert error.id == "tool_calling.E009"
    assert error.msg.startswith(
        """The value of 'TOOL_CALLING["EXCEPTION_PROCESSOR"]' must be an importable dotted path;"""
    )


def test_e009_checks_the_chat_model_class_and_the_permission_classes():
    (error,) = run({"CHAT_MODEL": {"CLASS": "tool_calling.NoSuchModel"}})
    assert (error.id, error.hint) == ("tool_calling.E009", "Did you mean 'tool_calling.ChatModel'?")
    (error,) = run({"API": {"PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticatd"]}})
    assert error.msg.startswith(
        """The value of 'TOOL_CALLING["API"]["PERMISSION_CLASSES"][0]' must be an importable"""
    )
    assert error.hint == "Did you mean 'rest_framework.permissions.IsAuthenticated'?"
    (error,) = run({"CHAT_MODEL": {"ARGUMENTS": ["not", "a", "dict"]}})
    assert error.msg == (
        """The value of 'TOOL_CALLING["CHAT_MODEL"]["ARGUMENTS"]' must be a dict of keyword """
        "arguments for CHAT_MODEL['CLASS']."
    )


# --- E013-E015: tool search and argument augmentation ----------------------------------------

SEARCH_PATH = 'TOOL_CALLING["TOOL_SEARCH"]'


@pytest.mark.parametrize("value", [0, 11, True, "5", None])
def test_e013_max_results_must_be_an_integer_from_1_to_10(value):
    assert run({"TOOL_SEARCH": {"MAX_RESULTS": value}}) == [
        Error(
            f"""The value of '{SEARCH_PATH}["MAX_RESULTS"]' must be an integer from 1 to 10.""",
            id="tool_calling.E013",
        )
    ]


@pytest.mark.parametrize("value", [-1, False, "20", None, 2.5])
def test_e013_threshold_must_be_an_integer_of_zero_or_more(value):
    assert run({"TOOL_SEARCH": {"THRESHOLD": value}}) == [
        Error(
            f"""The value of '{SEARCH_PATH}["THRESHOLD"]' must be an integer >= 0 (the number """
            "of tools up to which every tool is offered without search).",
            id="tool_calling.E013",
        )
    ]


def test_e013_index_must_make_a_tool_index():
    assert run({"TOOL_SEARCH": {"INDEX": "tool_calling.models.Tool"}}) == [
        Error(
            f"""The value of '{SEARCH_PATH}["INDEX"]' must name a ToolIndex class or a """
            "function returning a ToolIndex; Tool is not a ToolIndex.",
            hint="Use 'tool_calling.core.search.lexical.LexicalToolIndex' (the default), "
            "'tool_calling.core.search.regex.RegexToolIndex' or "
            "'tool_calling.search.PostgresToolIndex'.",
            id="tool_calling.E013",
        )
    ]


def test_index_and_type_accept_classes_instances_and_dotted_paths():
    from tool_calling.augmentation import CallReason
    from tool_calling.core.search.regex import RegexToolIndex

    assert run({"TOOL_SEARCH": {"INDEX": RegexToolIndex}}) == []
    assert run({"TOOL_SEARCH": {"INDEX": RegexToolIndex()}}) == []
    assert run({"TOOL_SEARCH": {"INDEX": "tool_calling.core.search.regex.RegexToolIndex"}}) == []
    assert run({"ARGUMENT_AUGMENTATION": {"TYPE": CallReason}}) == []


def test_e009_index_and_type_must_import():
    errors = run(
        {
            "TOOL_SEARCH": {"INDEX": "tool_calling.core.search.lexical.LexicalIndex"},
            "ARGUMENT_AUGMENTATION": {"TYPE": 5},
        }
    )
    assert [(e.id, e.msg.split(";")[0]) for e in errors] == [
        (
            "tool_calling.E009",
            f"""The value of '{SEARCH_PATH}["INDEX"]' must be an importable dotted path""",
        ),
        (
            "tool_calling.E009",
            """The value of 'TOOL_CALLING["ARGUMENT_AUGMENTATION"]["TYPE"]' must be a dotted """
            "import path or a callable.",
        ),
    ]
    assert errors[0].hint == "Did you mean 'tool_calling.core.search.lexical.LexicalToolIndex'?"


def test_e014_the_postgres_index_needs_postgresql():
    assert run({"TOOL_SEARCH": {"INDEX": "tool_calling.search.PostgresToolIndex"}}) == [
        Error(
            f"""The value of '{SEARCH_PATH}["INDEX"]' is a PostgresToolIndex, which needs """
            "PostgreSQL, but the default database is sqlite.",
            hint="Use PostgreSQL, or the default index "
            "'tool_calling.core.search.lexical.LexicalToolIndex', which works on any database.",
            id="tool_calling.E014",
        )
    ]


def test_e015_the_augmentation_type_must_be_an_object_type_with_fields():
    assert run({"ARGUMENT_AUGMENTATION": {"TYPE": "builtins.int"}}) == [
        Error(
            """The value of 'TOOL_CALLING["ARGUMENT_AUGMENTATION"]["TYPE"]' cannot be an """
            "augmentation: Augment type 'int' must be an object type with fields (a pydantic "
            "model, dataclass or TypedDict).",
            hint="Name a pydantic model, a dataclass or a TypedDict, e.g. "
            "'tool_calling.augmentation.CallReason' (the default).",
            id="tool_calling.E015",
        )
    ]


@pytest.mark.parametrize("key", ["TOOL_SEARCH", "ARGUMENT_AUGMENTATION"])
def test_e008_the_enabled_flags_must_be_booleans(key):
    assert run({key: {"ENABLED": "yes"}}) == [
        Error(
            f"""The value of 'TOOL_CALLING["{key}"]["ENABLED"]' must be True or False.""",
            id="tool_calling.E008",
        )
    ]


def test_e020_mcp_hosts_and_origins_must_be_lists():
    hosts = """TOOL_CALLING["MCP"]["ALLOWED_HOSTS"]"""
    origins = """TOOL_CALLING["MCP"]["ALLOWED_ORIGINS"]"""
    host_error = Error(
        f"The value of '{hosts}' must be a list of host names.",
        hint="E.g. ['127.0.0.1', 'localhost', 'mcp.example.com'] ('name' allows any port, "
        "'name:port' one port, '*' any host: only behind a proxy that checks it).",
        id="tool_calling.E016",
    )
    origin_error = Error(
        f"The value of '{origins}' must be None or a list of origins.",
        hint="E.g. ['https://ide.example.com', 'http://localhost:*'], or None to accept the "
        "http(s) origins of ALLOWED_HOSTS.",
        id="tool_calling.E016",
    )
    assert run({"MCP": {"ALLOWED_HOSTS": "localhost"}}) == [host_error]
    assert run({"MCP": {"ALLOWED_HOSTS": ["localhost", ""]}}) == [host_error]
    assert run({"MCP": {"ALLOWED_ORIGINS": "https://ide.example.com"}}) == [origin_error]
    assert run({"MCP": {"ALLOWED_ORIGINS": ["ide.example.com"]}}) == [origin_error]
    assert run({"MCP": {"ALLOWED_HOSTS": ["mcp.example.com"], "ALLOWED_ORIGINS": None}}) == []
    assert run({"MCP": {"ALLOWED_ORIGINS": ["https://ide.example.com"]}}) == []


@pytest.mark.parametrize("value", [-1, 1.5, True, "60000"])
def test_e016_the_mcp_list_ttl_must_be_a_non_negative_integer(value):
    assert run({"MCP": {"LIST_TTL_MS": value}}) == [
        Error(
            """The value of 'TOOL_CALLING["MCP"]["LIST_TTL_MS"]' must be a non-negative """
            "integer.",
            hint="Milliseconds an MCP client may reuse a tools/list answer, e.g. 60000; 0 asks "
            "again each time.",
            id="tool_calling.E016",
        )
    ]
    assert run({"MCP": {"LIST_TTL_MS": 60_000}}) == []


# --- the JSON serializer of the cache (S21) ------------------------------------------------------


def test_the_cache_serializer_stores_json_and_refuses_anything_else():
    serializer = JSONSerializer()
    assert serializer.dumps(41) == 41  # Redis increments integers itself
    assert serializer.dumps(True) == b"true"
    assert serializer.dumps({"days": (1, 2), "on": "x"}) == b'{"days":[1,2],"on":"x"}'
    assert serializer.loads(b'{"days":[1,2],"on":"x"}') == {"days": [1, 2], "on": "x"}
    assert serializer.loads(b"42") == 42
    with pytest.raises(ValueError, match="^The cache holds a value that is not JSON; it was not"):
        serializer.loads(b"\x80\x05\x95 a pickle")


# --- W004: a task time limit shorter than the model client's patience (R13) --------------------


def test_w004_a_task_time_limit_a_stalled_model_reaches_before_the_clients_timeout(settings):
    settings.CELERY_TASK_SOFT_TIME_LIMIT = 55
    settings.CELERY_TASK_TIME_LIMIT = 60
    assert run({"CHAT_MODEL": {"TIMEOUT": 60, "MAX_RETRIES": 2}}) == [
        Warning(
            "CELERY_TASK_SOFT_TIME_LIMIT (55 s) is not longer than the model client waits for "
            "one model call (TOOL_CALLING['CHAT_MODEL']['TIMEOUT'] x (MAX_RETRIES + 1) = 180 s): "
            "a run step on a prefork worker would be stopped by Celery while the model stalls, "
            "before the client's own timeout and retries acted.",
            hint="Set CELERY_TASK_SOFT_TIME_LIMIT above 180 (tool calls keep their own limits, "
            "from each tool's timeout), or lower CHAT_MODEL's TIMEOUT or MAX_RETRIES. On a thread "
            "pool Celery enforces no task time limits at all.",
            id="tool_calling.W004",
        ),
        Warning(
            "CELERY_TASK_TIME_LIMIT (60 s) is not longer than the model client waits for one "
            "model call (TOOL_CALLING['CHAT_MODEL']['TIMEOUT'] x (MAX_RETRIES + 1) = 180 s): a "
            "run step on a prefork worker would be stopped by Celery while the model stalls, "
            "before the client's own timeout and retries acted.",
            hint="Set CELERY_TASK_TIME_LIMIT above 180 (tool calls keep their own limits, from "
            "each tool's timeout), or lower CHAT_MODEL's TIMEOUT or MAX_RETRIES. On a thread "
            "pool Celery enforces no task time limits at all.",
            id="tool_calling.W004",
        ),
    ]
    # The client gives up sooner (10 s x 3): the limits are long enough.
    assert run({"CHAT_MODEL": {"TIMEOUT": 10, "MAX_RETRIES": 2}}) == []
    settings.CELERY_TASK_SOFT_TIME_LIMIT = 181
    settings.CELERY_TASK_TIME_LIMIT = 200
    assert run({"CHAT_MODEL": {"TIMEOUT": 60, "MAX_RETRIES": 2}}) == []


def test_w004_the_example_project_gives_run_steps_longer_than_the_client_waits():
    from project import settings as project

    assert project.CELERY_TASK_SOFT_TIME_LIMIT > 60 * 3
    assert project.CELERY_TASK_TIME_LIMIT > project.CELERY_TASK_SOFT_TIME_LIMIT
    # A Redis blip leaves running calls running: their leases, not the broker, decide (R13).
    assert project.CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS is False


# --- OAuth on /mcp/ ------------------------------------------------------------------------------


def _oauth_error(key, message, hint):
    return Error(
        f"""The value of 'TOOL_CALLING["MCP"]["{key}"]' must be {message}.""",
        hint=hint,
        id="tool_calling.E020",
    )


def test_e020_the_mcp_oauth_settings_must_have_their_types():
    resource = _oauth_error(
        "RESOURCE",
        "None or an http(s) URL",
        "The URL clients reach /mcp/ at, e.g. 'https://example.com/mcp/'; None turns OAuth off "
        "(DRF tokens only).",
    )
    servers = _oauth_error(
        "AUTHORIZATION_SERVERS",
        "a list of http(s) URLs, not empty while 'RESOURCE' is set",
        "The issuers clients get tokens from, e.g. ['https://example.com'].",
    )
    scope = _oauth_error(
        "SCOPE",
        "a string",
        "The scope every OAuth access token needs for /mcp/, e.g. 'mcp'; '' for none.",
    )
    tool_scopes = _oauth_error(
        "TOOL_SCOPES",
        "a dict of tool names to scopes",
        "E.g. {'refund_order': 'mcp:payments'}: an OAuth access token needs that scope to list "
        "and call it.",
    )
    good = {
        "RESOURCE": "https://example.com/mcp/",
        "AUTHORIZATION_SERVERS": ["https://example.com"],
    }
    assert run({"MCP": good}) == []
    assert run({"MCP": {**good, "RESOURCE": "example.com/mcp/"}}) == [resource]
    assert run({"MCP": {**good, "AUTHORIZATION_SERVERS": []}}) == [servers]
    assert run({"MCP": {**good, "AUTHORIZATION_SERVERS": "https://example.com"}}) == [servers]
    assert run({"MCP": {"AUTHORIZATION_SERVERS": ["example.com"]}}) == [servers]
    assert run({"MCP": {"SCOPE": None}}) == [scope]
    assert run({"MCP": {"TOOL_SCOPES": {"refund_order": ""}}}) == [tool_scopes]
    assert run({"MCP": {"TOOL_SCOPES": ["refund_order"]}}) == [tool_scopes]
    assert run({"MCP": {"TOOL_SCOPES": {"refund_order": "mcp:payments"}}}) == []


def test_e020_a_resource_needs_django_oauth_toolkit_installed():
    from django.conf import settings

    apps = [app for app in settings.INSTALLED_APPS if app != "oauth2_provider"]
    good = {
        "RESOURCE": "https://example.com/mcp/",
        "AUTHORIZATION_SERVERS": ["https://example.com"],
    }
    with override_settings(INSTALLED_APPS=apps):
        assert run({"MCP": good}) == [
            Error(
                """'TOOL_CALLING["MCP"]["RESOURCE"]' is set but django-oauth-toolkit is not """
                "installed.",
                hint="pip install 'django-tool-calling[oauth]' and add 'oauth2_provider' to "
                "INSTALLED_APPS (and migrate): /mcp/ accepts its access tokens.",
                id="tool_calling.E020",
            )
        ]
        assert run({"MCP": {}}) == []
