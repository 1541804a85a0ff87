"""The OpenAPI schema of the API: checked in, served, browsable, and fuzzed.

``docs/openapi.yaml`` is the schema drf-spectacular generates; the first test fails when it is
out of date. The last one is a property-based run of schemathesis against the WSGI app: every
operation of the schema, with generated valid and invalid input, as a staff user who owns a
conversation whose run waits for an approval and one whose run failed (so that approve, deny,
cancel, retry and the conflicts answer for real), must never answer a server error. Operations
that take a body are also sent bare JSON values (``5``, ``null``, ``"x"``, ``[1]``), which
schemathesis's negative mode does not generate (it found no 500 there; hand-written cases did).
"""

import difflib
import time
from pathlib import Path
from unittest import mock

import pytest
import schemathesis
import yaml
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.core.management import call_command
from django.core.wsgi import get_wsgi_application
from django.templatetags.static import static
from django.test import override_settings
from django.urls import reverse
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from kombu.exceptions import OperationalError
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient
from schemathesis.checks import not_a_server_error

from tests.django._tools import chat_model, tool_calling_settings
from tool_calling import models, runs, tasks, tool
from tool_calling.registry import registry
from tool_calling.sync import sync_tools
from tool_calling.testing import ScriptedChatModel, text, tool_call, tool_calls

SCHEMA_FILE = Path(settings.BASE_DIR) / "docs" / "openapi.yaml"
REGENERATE = (
    ".venv/bin/python manage.py spectacular --file docs/openapi.yaml --validate --fail-on-warn"
)
EXAMPLES_PER_OPERATION = 25

# The operations of the checked-in schema, as schemathesis labels them ("GET /api/runs/").
OPERATIONS = [
    f"{method.upper()} {path}"
    for path, item in yaml.safe_load(SCHEMA_FILE.read_text())["paths"].items()
    for method in item
    if method in ("get", "post", "put", "patch", "delete")
]


# -- the schema ---------------------------------------------------------------------------------


def test_the_checked_in_schema_is_current(tmp_path):
    generated = tmp_path / "openapi.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(generated))
    expected, actual = SCHEMA_FILE.read_text(), generated.read_text()
    if actual != expected:
        diff = "".join(
            list(
                difflib.unified_diff(
                    expected.splitlines(keepends=True),
                    actual.splitlines(keepends=True),
                    "docs/openapi.yaml",
                    "generated",
                )
            )[:60]
        )
        pytest.fail(
            f"docs/openapi.yaml is out of date: regenerate it with\n    {REGENERATE}\n"
            f"and commit it.\n{diff}"
        )


def test_every_operation_is_in_the_schema():
    assert sorted(OPERATIONS) == [
        "DELETE /api/conversations/{id}/",
        "GET /api/conversations/",
        "GET /api/conversations/{id}/",
        "GET /api/runs/",
        "GET /api/runs/{id}/",
        "GET /api/runs/{id}/events/",
        "GET /api/tool-executions/",
        "GET /api/tool-executions/{id}/",
        "GET /api/tools/",
        "POST /api/conversations/",
        "POST /api/conversations/{id}/messages/",
        "POST /api/runs/{id}/cancel/",
        "POST /api/runs/{id}/retry/",
        "POST /api/tool-executions/{id}/approve/",
        "POST /api/tool-executions/{id}/deny/",
    ]


def test_the_schema_is_served_as_checked_in():
    response = APIClient().get(reverse("schema"))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/vnd.oai.openapi")
    served = yaml.safe_load(response.content)
    assert served["openapi"].startswith("3.")
    assert served["info"]["title"] == "tool_calling API"
    assert served == yaml.safe_load(SCHEMA_FILE.read_text())
    as_json = APIClient().get(reverse("schema"), {"format": "json"})
    assert as_json.status_code == 200 and as_json.json()["openapi"] == served["openapi"]


def test_swagger_ui_needs_no_cdn():
    response = APIClient().get(reverse("swagger-ui"))
    assert response.status_code == 200
    page = response.content.decode()
    assert reverse("schema") in page
    assert static("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js") in page
    for external in ("http://", "https://", "//cdn", "jsdelivr", "unpkg"):
        assert external not in page, f"the Swagger UI page references {external!r}"


# -- schemathesis -------------------------------------------------------------------------------


@tool(requires_approval=True)
def fuzz_refund(order: str, amount: int) -> str:
    """Refund an order (a person approves each refund)."""
    return f"refunded {amount} on {order}"


@pytest.fixture(scope="module")
def api_schema(django_db_blocker):
    """The schema as the app serves it, its operations called through the WSGI app."""
    # A WSGI request starts with close_old_connections(), which looks at the connection.
    with django_db_blocker.unblock():
        return schemathesis.openapi.from_wsgi(
            reverse("schema") + "?format=json",
            get_wsgi_application(),
            config=schemathesis.Config(),
        )


@pytest.fixture
def owned():
    """A staff user's token, and the ids of what they own, by the path prefix that takes them.

    A conversation whose run waits for the approval of a ``fuzz_refund`` call (messages and
    deletes conflict there; approve, deny and cancel work), and one whose run failed because
    the broker was down (retry works; messages start turns that answer "Done").
    """
    registry.register(fuzz_refund, source="tests")
    sync_tools()
    model = ScriptedChatModel(
        [tool_calls(tool_call("fuzz_refund", order="A1", amount=5))] + [text("Done")] * 1000
    )
    rates = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"tool_calling_turns": None}}
    with (
        chat_model(model),
        override_settings(
            REST_FRAMEWORK=rates,
            TOOL_CALLING=tool_calling_settings(APPROVALS={"ALLOW_SELF_APPROVAL": True}),
        ),
    ):
        user = User.objects.create_user("operator", is_staff=True)
        # An approver of the calls of their own turns: every decision path stays reachable.
        user.user_permissions.add(Permission.objects.get(codename="approve_toolexecution"))
        waiting = models.Conversation.objects.create(owner=user, title="waiting")
        paused = runs.start_turn(waiting, "Refund A1", user=user)
        paused.refresh_from_db()
        assert paused.status == models.RunStatus.AWAITING_APPROVAL
        gated = models.ToolExecution.objects.get(run=paused)
        assert gated.status == models.ExecutionStatus.AWAITING_APPROVAL

        idle = models.Conversation.objects.create(owner=user, title="idle")
        with (
            mock.patch.object(
                tasks.run_step, "apply_async", side_effect=OperationalError("Connection refused")
            ),
            pytest.raises(runs.RunQueueError) as queue_error,
        ):
            runs.start_turn(idle, "Hello", user=user)
        failed = queue_error.value.run
        failed.refresh_from_db()
        assert failed.status == models.RunStatus.FAILED

        try:
            yield {
                "token": Token.objects.create(user=user).key,
                "/api/conversations/{id}/": [str(waiting.pk), str(idle.pk)],
                "/api/runs/{id}/": [str(paused.pk), str(failed.pk)],
                "/api/tool-executions/{id}/": [gated.pk],
            }
        finally:
            registry.unregister("fuzz_refund")
            cache.clear()


BARE_JSON = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.lists(st.one_of(st.integers(), st.text(max_size=5)), max_size=3),
)
"""JSON values that are not objects: every body of the API is an object."""


def with_bare_body(pair):
    """The case, with a bare JSON value as its body instead of the generated object."""
    case, value = pair
    case.body = value
    case.media_type = "application/json"
    return case, True


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("label", OPERATIONS)
def test_no_input_makes_the_api_answer_a_server_error(label, api_schema, owned, caplog):
    operation = api_schema.find_operation_by_label(label)
    assert operation is not None, label
    known = next((ids for prefix, ids in owned.items() if operation.path.startswith(prefix)), [])
    # Generated ids find nothing (404): most cases use the ids of what the user owns instead.
    strategies = [
        operation.as_strategy(generation_mode=mode, path_parameters=path_parameters).map(
            lambda case: (case, False)
        )
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
        for path_parameters in [None, *({"id": value} for value in known)]
    ]
    takes_body = "requestBody" in operation.definition.raw
    if takes_body:
        strategies += [
            st.tuples(
                operation.as_strategy(path_parameters={"id": value} if value else None),
                BARE_JSON,
            ).map(with_bare_body)
            for value in [None, *known]
        ]
    # JSON for every operation: an SSE stream under WSGI would be read to its end.
    headers = {"Authorization": f"Token {owned['token']}", "Accept": "application/json"}
    statuses: list[int] = []
    bare_bodies: list[object] = []

    @hypothesis_settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(drawn=st.one_of(strategies))
    def call(drawn):
        case, bare = drawn
        caplog.clear()
        if bare:
            bare_bodies.append(case.body)
        response = case.call(headers=headers)
        statuses.append(response.status_code)
        try:
            case.validate_response(response, checks=[not_a_server_error], headers=headers)
        except Exception as exc:
            exc.add_note(f"The server logged:\n{caplog.text}")
            raise

    started = time.monotonic()
    call()
    elapsed = time.monotonic() - started
    print(f"{label}: {len(statuses)} cases in {elapsed:.1f}s, statuses {sorted(set(statuses))}")
    assert statuses and max(statuses) < 500
    assert bare_bodies or not takes_body, "no bare JSON value was sent"
