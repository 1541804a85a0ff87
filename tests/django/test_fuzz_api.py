"""Hypothesis over the API's request bodies: never a 5xx, a crash or a hang.

Every operation that takes a body gets bytes a client could send: JSON of every shape (bare
values included), nesting far deeper than Python's parser goes, strings up to past
``DATA_UPLOAD_MAX_MEMORY_SIZE``, ``NaN`` and ``Infinity``, duplicate keys, unpaired surrogates and
NUL characters, invalid UTF-8, truncated documents, and every content type the parsers know or
do not know. Whatever arrives, the answer is JSON with a ``detail`` and a status below 500 (the
valid bodies among them are accepted: 2xx). The user is staff and owns what they post to, so
the bodies reach validation rather than a 404. A hang shows as pytest-timeout's failure; time
bounds are not asserted here (benchmarks measure).
"""

import json

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.test import Client, override_settings
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from tests.django._api import url
from tests.django._tools import chat_model, registered, tool_calling_settings
from tool_calling import models, runs, tool
from tool_calling.testing import ScriptedChatModel, text, tool_call, tool_calls

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLES = 60


@tool(requires_approval=True)
def fuzz_body_refund(order: str, amount: int) -> str:
    """Refund an order (a person approves each refund)."""
    return f"refunded {amount} on {order}"


# -- bodies ---------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["text", "tools", "title", "note", "reason", "arguments", "x"])
            | st.text(max_size=8),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)
"""JSON documents of every shape, with the API's own field names among the keys."""

FIELDS = ["text", "tools", "title", "note", "reason", "arguments"]


def _deep(depth, kind):
    if kind == "array":
        return "[" * depth + "]" * depth
    if kind == "object":
        return '{"a": ' * depth + "1" + "}" * depth
    return json.dumps({"text": "hi", "arguments": {"order": "A1", "amount": 1}})[:-1] + (
        ', "x": ' + "[" * depth + "]" * depth + "}"
    )


raw_bodies = st.one_of(
    json_values.map(json.dumps),
    st.builds(_deep, st.integers(500, 200_000), st.sampled_from(["array", "object", "inside"])),
    st.builds(
        lambda field, size: json.dumps({field: "x" * size}),
        st.sampled_from(FIELDS),
        st.sampled_from([10_000, 32_001, 1_000_000, settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1]),
    ),
    st.builds(
        lambda field, constant: f'{{"{field}": {constant}}}',
        st.sampled_from(FIELDS),
        st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-0", "1" * 5000]),
    ),
    st.sampled_from(["NaN", "Infinity", "[NaN]"]),
    st.builds(
        lambda field, first, second: (
            f'{{"{field}": {json.dumps(first)}, "{field}": {json.dumps(second)}}}'
        ),
        st.sampled_from(FIELDS),
        json_values,
        json_values,
    ),
    st.builds(
        lambda field, escape: f'{{"{field}": "a{escape}b"}}',
        st.sampled_from(FIELDS),
        st.sampled_from(["\\ud800", "\\udfff", "\\u0000", "\\ud83d", "\\ufffe"]),
    ),
    json_values.map(json.dumps).map(lambda document: document[: max(1, len(document) // 2)]),
    st.binary(max_size=200),
)
"""What arrives as the body: text, or bytes (encoded below when it is text)."""

encodings = st.sampled_from(["utf-8", "utf-8", "utf-16", "latin-1", "invalid"])
content_types = st.sampled_from(
    [
        "application/json",
        "application/json",
        "application/json; charset=utf-16",
        "application/json; charset=latin-1",
        "application/json; charset=no-such-codec",
        "application/vnd.api+json",
        "text/plain",
        "application/xml",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=xyz",
        "multipart/form-data",
        "",
    ]
)


def encode(body, encoding):
    if isinstance(body, bytes):
        return body
    if encoding == "invalid":  # bytes that are not UTF-8 inside an otherwise fine document
        return body.encode("utf-8", "surrogatepass")[:-1] + b"\xff\xfe" + body[-1:].encode()
    return body.encode(encoding, "surrogatepass")


# -- the operations --------------------------------------------------------------------------------


@pytest.fixture
def world(script):
    """A staff user's client and the URLs of every operation that takes a body."""
    with registered(fuzz_body_refund):
        model = ScriptedChatModel(
            [tool_calls(tool_call("fuzz_body_refund", order="A1", amount=5))] + [text("ok")] * 5000
        )
        rates = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"tool_calling_turns": None}}
        with (
            chat_model(model),
            override_settings(
                REST_FRAMEWORK=rates,
                TOOL_CALLING=tool_calling_settings(APPROVALS={"ALLOW_SELF_APPROVAL": True}),
            ),
        ):
            user = User.objects.create_user("fuzzer", is_staff=True)
            # An approver of the calls of their own turns: every decision path stays reachable.
            user.user_permissions.add(Permission.objects.get(codename="approve_toolexecution"))
            waiting = models.Conversation.objects.create(owner=user)
            paused = runs.start_turn(waiting, "Refund A1", user=user)
            paused.refresh_from_db()
            gated = models.ToolExecution.objects.get(run=paused)
            idle = models.Conversation.objects.create(owner=user)
            client = Client()
            client.force_login(user)
            yield (
                client,
                {
                    "conversations": url("conversation-list"),
                    "messages": url("conversation-messages", idle.pk),
                    "messages-busy": url("conversation-messages", waiting.pk),
                    "approve": url("tool-execution-approve", gated.pk),
                    "deny": url("tool-execution-deny", gated.pk),
                    "cancel": url("run-cancel", paused.pk),
                    "retry": url("run-retry", paused.pk),
                },
            )


OPERATIONS = ["conversations", "messages", "messages-busy", "approve", "deny", "cancel", "retry"]


@pytest.mark.parametrize("operation", OPERATIONS)
def test_no_body_makes_the_api_fail(world, operation):
    client, paths = world
    path = paths[operation]
    statuses = []

    @hypothesis_settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(body=raw_bodies, encoding=encodings, content_type=content_types)
    # The classic bad inputs, whatever Hypothesis draws besides.
    @example(body="5", encoding="utf-8", content_type="application/json")
    @example(body="null", encoding="utf-8", content_type="application/json")
    @example(body="[" * 100_000 + "]" * 100_000, encoding="utf-8", content_type="application/json")
    @example(body='{"text": NaN}', encoding="utf-8", content_type="application/json")
    @example(body='{"text": "a", "text": 7}', encoding="utf-8", content_type="application/json")
    @example(body='{"title": "\\ud800"}', encoding="utf-8", content_type="application/json")
    @example(body='{"text": "hi"}', encoding="invalid", content_type="application/json")
    @example(
        body=json.dumps({"text": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)}),
        encoding="utf-8",
        content_type="application/json",
    )
    @example(body="text=hi&tools=x", encoding="utf-8", content_type="application/xml")
    def post(body, encoding, content_type):
        data = encode(body, encoding)
        response = client.generic("POST", path, data, content_type=content_type)
        statuses.append(response.status_code)
        assert response.status_code < 500, (response.status_code, data[:200], content_type)
        if response.status_code >= 400:
            assert response["Content-Type"] == "application/json", response["Content-Type"]
            detail = json.loads(response.content)["detail"]
            assert isinstance(detail, str) and detail

    post()
    print(f"{operation}: {len(statuses)} bodies, statuses {sorted(set(statuses))}")
    assert any(400 <= status < 500 for status in statuses)
