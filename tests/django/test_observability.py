"""tool_calling.observability with the OpenTelemetry SDK's in-memory exporters.

Spans (names, kinds, parents, attributes, errors), the GenAI metrics, the trace of a durable run
across its steps, the trace context in Celery headers, log fields, ``turn_finished``, the
content setting and the sentinel secret (S12). The cases without OpenTelemetry (not installed;
the API without an SDK) run in subprocesses at the end.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from tests._otel import dump, recording
from tests.django._tools import registered, tool_calling_settings
from tests.mcp import served_tools
from tests.mcp._servers import UvicornThread, running, sdk_server
from tool_calling import (
    ChatClient,
    OpenAIChatModel,
    ToolContext,
    models,
    observability,
    runs,
    signals,
    tasks,
    tool,
)
from tool_calling.calls import approvals
from tool_calling.core.mcp import (
    McpConnection,
    McpToolCallback,
    McpToolCallbackProvider,
    McpToolSpec,
    StreamableHttpTransport,
)
from tool_calling.governance import governed_chat_client
from tool_calling.observability import _content, semconv
from tool_calling.registry import registry
from tool_calling.runs import lifecycle
from tool_calling.sync import sync_tools
from tool_calling.testing import ReplayServer, ScriptedChatModel, text, tool_call, tool_calls

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
REVISION = ROOT / "tests" / "fixtures" / "semconv" / "gen_ai_v1.41.0.json"

SECRET = "S3NTINEL-7f3c9a"
"""S12: put in tool arguments and results; never on a span, a metric or a log record."""
CONTEXT_SECRET = "CTX-S3NTINEL-41be"
"""S12: put in the tool context; never anywhere, not even with content on."""

RAN: list[str] = []


class Declined(Exception):
    """What obs_fail raises (its message is content: it stays off spans)."""


@tool
def obs_add(a: int, b: int) -> int:
    """Add two numbers."""
    RAN.append("obs_add")
    return a + b


@tool
def obs_fail(reason: str) -> str:
    """Always fails."""
    raise Declined(f"declined: {reason}")


@tool
def obs_vault(token: str, ctx: ToolContext) -> str:
    """Store a token; answers with the stored value."""
    logging.getLogger("tests.vault").info("storing a token for %s", ctx.get("tenant"))
    return f"stored {token}"


@tool(requires_approval=True)
def obs_wire(amount: int) -> str:
    """Send money (a person approves)."""
    RAN.append("obs_wire")
    return f"sent {amount}"


TOOLS = (obs_add, obs_fail, obs_vault, obs_wire)


@pytest.fixture(autouse=True)
def observed_tools():
    RAN.clear()
    with registered(*TOOLS):
        yield


@pytest.fixture
def otel():
    with recording() as recorded:
        yield recorded


@pytest.fixture
def alice():
    return User.objects.create_user("alice")


def traceparent(context):
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def parent_of(span):
    return span.parent.span_id if span.parent is not None else None


def conversation_for(user=None):
    return models.Conversation.objects.create(owner=user, title="observed")


# --- the names: pinned to one revision of the conventions -------------------------------------


def test_our_genai_names_are_those_of_the_pinned_conventions_revision():
    revision = json.loads(REVISION.read_text())
    assert revision["revision"] == "v1.41.0"
    assert revision["commit"] in Path(semconv.__file__).read_text()  # named beside the tag
    assert semconv.SEMCONV_REVISION == "open-telemetry/semantic-conventions v1.41.0"
    assert semconv.SCHEMA_URL == revision["schema_url"]
    registry = revision["attributes"]
    constants = {
        name: value
        for name, value in vars(semconv).items()
        if name.isupper() and isinstance(value, str) and name not in ("SEMCONV_REVISION",)
    }
    attribute_names = {
        name: value
        for name, value in constants.items()
        if value.startswith(("gen_ai.", "error.")) and not name.startswith("GEN_AI_CLIENT_")
    }
    assert set(attribute_names) >= {
        "GEN_AI_OPERATION_NAME",
        "GEN_AI_PROVIDER_NAME",
        "GEN_AI_CONVERSATION_ID",
        "GEN_AI_TOOL_CALL_ID",
        "ERROR_TYPE",
    }
    unknown = {name: value for name, value in attribute_names.items() if value not in registry}
    assert unknown == {}
    # Each name's Python spelling is its dotted name, upper-cased.
    for name, value in attribute_names.items():
        assert name == value.upper().replace(".", "_"), name

    def values(attribute):
        return registry[attribute]["values"]

    operations = values(semconv.GEN_AI_OPERATION_NAME)
    assert {
        semconv.OPERATION_CHAT,
        semconv.OPERATION_EXECUTE_TOOL,
        semconv.OPERATION_INVOKE_AGENT,
    } <= set(operations)
    assert {semconv.TOKEN_TYPE_INPUT, semconv.TOKEN_TYPE_OUTPUT} <= set(
        values(semconv.GEN_AI_TOKEN_TYPE)
    )
    assert semconv.PROVIDER_OPENAI in values(semconv.GEN_AI_PROVIDER_NAME)
    assert semconv.ERROR_TYPE_OTHER in values(semconv.ERROR_TYPE)
    assert registry[semconv.GEN_AI_TOOL_TYPE]["type"] == "string"  # "function" is an example
    # The two GenAI metrics: names, instruments, units, advised buckets.
    assert revision["metrics"][semconv.GEN_AI_CLIENT_OPERATION_DURATION] == {
        "instrument": "histogram",
        "unit": "s",
    }
    assert revision["metrics"][semconv.GEN_AI_CLIENT_TOKEN_USAGE] == {
        "instrument": "histogram",
        "unit": "{token}",
    }
    buckets = revision["bucket_boundaries"]
    assert list(semconv.DURATION_BUCKETS) == buckets[semconv.GEN_AI_CLIENT_OPERATION_DURATION]
    assert list(semconv.TOKEN_BUCKETS) == buckets[semconv.GEN_AI_CLIENT_TOKEN_USAGE]
    # Everything else is ours, in our own namespace, and shadows no convention name.
    ours = {
        name: value
        for name, value in constants.items()
        if name.startswith(("TOOL_CALLING_", "TOOL_CALL", "LIMIT_", "APPROVAL"))
    }
    assert ours and all(value.startswith("tool_calling.") for value in ours.values())
    assert not set(ours.values()) & set(registry)


def test_a_name_missing_from_the_revision_would_be_caught():
    """The comparison can fail: a misspelt constant is not in the pinned registry."""
    registry = json.loads(REVISION.read_text())["attributes"]
    assert "gen_ai.usage.prompt_tokens" not in registry  # the pre-1.27 spelling
    assert semconv.GEN_AI_USAGE_INPUT_TOKENS in registry


# --- an in-process governed turn ---------------------------------------------------------------


def test_a_governed_turn_is_one_trace_of_turn_chat_and_tool_spans(alice, otel):
    conversation = conversation_for(alice)
    model = ScriptedChatModel([tool_call("obs_add", a=2, b=3), text("5")], name="scripted-1")
    client = governed_chat_client(user=alice, conversation=conversation, model=model)
    assert client.prompt("add 2 and 3").call().content() == "5"

    turn = otel.one("invoke_agent")
    chats = otel.named("chat")
    tool_span = otel.one("execute_tool obs_add")
    assert len(chats) == 2 and len(otel.spans()) == 4
    assert turn.kind is SpanKind.INTERNAL and turn.parent is None
    assert {span.context.trace_id for span in otel.spans()} == {turn.context.trace_id}
    assert [parent_of(s) for s in (*chats, tool_span)] == [turn.context.span_id] * 3
    assert all(chat.kind is SpanKind.CLIENT for chat in chats)
    assert tool_span.kind is SpanKind.INTERNAL
    conversation_id = str(conversation.pk)
    usage = ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")
    # The turn's usage is the sum of its model calls' (the scripted model counts words).
    for key in usage:
        assert turn.attributes[key] == sum(chat.attributes[key] for chat in chats) > 0
    assert chats[0].attributes["gen_ai.usage.output_tokens"] == 2  # the call's name and args

    def without_usage(span):
        return {k: v for k, v in span.attributes.items() if k not in usage}

    assert without_usage(turn) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "ScriptedChatModel",
        "gen_ai.conversation.id": conversation_id,
        "gen_ai.response.finish_reasons": ("stop",),
    }
    assert without_usage(chats[0]) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "ScriptedChatModel",
        "gen_ai.request.stream": False,
        "gen_ai.conversation.id": conversation_id,
        "gen_ai.response.model": "scripted-1",
        "gen_ai.response.id": "chatcmpl-scripted-1",
        "gen_ai.response.finish_reasons": ("tool_calls",),
    }
    assert chats[1].attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert dict(tool_span.attributes) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "obs_add",
        "gen_ai.tool.call.id": "call_1",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.description": "Add two numbers.",
        "gen_ai.conversation.id": conversation_id,
        "tool_calling.tool_call.execution_mode": "inline",
        "tool_calling.tool_call.attempt": 1,
        "tool_calling.tool_call.outcome": "succeeded",
    }
    assert all(span.status.status_code is StatusCode.UNSET for span in otel.spans())
    # The spans nest in time as they do in the trace.
    assert turn.start_time <= chats[0].start_time < chats[0].end_time <= tool_span.start_time
    assert tool_span.end_time <= chats[1].start_time and chats[1].end_time <= turn.end_time


def test_a_governed_turn_records_the_genai_metrics_once_per_operation(alice, otel):
    model = ScriptedChatModel([tool_call("obs_add", a=2, b=3), text("5")], name="scripted-1")
    governed_chat_client(user=alice, conversation=conversation_for(alice), model=model).prompt(
        "add"
    ).call()

    points = otel.metrics()
    units = otel.metric_units()
    assert units[semconv.GEN_AI_CLIENT_OPERATION_DURATION] == "s"
    assert units[semconv.GEN_AI_CLIENT_TOKEN_USAGE] == "{token}"
    (duration,) = points[semconv.GEN_AI_CLIENT_OPERATION_DURATION]
    assert duration.count == 2  # one per model call, none for the turn
    assert dict(duration.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "ScriptedChatModel",
        "gen_ai.response.model": "scripted-1",
    }
    assert list(duration.explicit_bounds) == list(semconv.DURATION_BUCKETS)
    tokens = {
        p.attributes["gen_ai.token.type"]: (p.count, p.sum)
        for p in points[semconv.GEN_AI_CLIENT_TOKEN_USAGE]
    }
    turn = otel.one("invoke_agent")
    assert tokens == {
        "input": (2, turn.attributes["gen_ai.usage.input_tokens"]),
        "output": (2, turn.attributes["gen_ai.usage.output_tokens"]),
    }
    (calls,) = points[semconv.TOOL_CALLS]
    assert (calls.value, dict(calls.attributes)) == (
        1,
        {
            "gen_ai.tool.name": "obs_add",
            "tool_calling.tool_call.outcome": "succeeded",
            "tool_calling.tool_call.execution_mode": "inline",
        },
    )
    (tool_duration,) = points[semconv.TOOL_CALL_DURATION]
    assert tool_duration.count == 1 and units[semconv.TOOL_CALL_DURATION] == "s"
    assert semconv.LIMIT_REFUSALS not in points


def test_a_streamed_turn_takes_usage_and_finish_reasons_from_the_aggregated_answer(alice, otel):
    """The real openai SDK streaming from the replay server: usage arrives in the last chunk."""
    steps = [{"tool_calls": [{"name": "obs_add", "arguments": {"a": 1, "b": 1}}]}, {"text": "2"}]
    with ReplayServer(steps) as server:
        model = OpenAIChatModel(
            "replay-model", base_url=server.base_url + "/v1", api_key="test", max_retries=0
        )
        client = governed_chat_client(user=alice, conversation=conversation_for(alice), model=model)
        stream = client.prompt("add 1 and 1").stream().content()
        first = next(stream)
        # While the stream is open, the turn has not ended.
        assert otel.named("invoke_agent") == []
        assert first + "".join(stream) == "2"

    turn = otel.one("invoke_agent")
    chats = otel.named("chat replay-model")
    assert len(chats) == 2 and all(parent_of(c) == turn.context.span_id for c in chats)
    assert parent_of(otel.one("execute_tool obs_add")) == turn.context.span_id
    for chat, reason in zip(chats, ("tool_calls", "stop"), strict=True):
        assert chat.attributes["gen_ai.provider.name"] == "openai"
        assert chat.attributes["gen_ai.request.model"] == "replay-model"
        assert chat.attributes["gen_ai.response.model"] == "replay-model"
        assert chat.attributes["gen_ai.request.stream"] is True
        assert chat.attributes["gen_ai.response.finish_reasons"] == (reason,)
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
    assert turn.attributes["gen_ai.request.model"] == "replay-model"
    assert turn.attributes["gen_ai.usage.input_tokens"] == sum(
        c.attributes["gen_ai.usage.input_tokens"] for c in chats
    )
    assert turn.attributes["gen_ai.response.finish_reasons"] == ("stop",)


def test_an_abandoned_stream_still_ends_its_spans(alice, otel):
    model = ScriptedChatModel([text("one two three")])
    client = governed_chat_client(user=alice, conversation=conversation_for(alice), model=model)
    stream = client.prompt("count").stream().content()
    next(stream)
    stream.close()
    assert [s.name for s in otel.spans()] == ["chat", "invoke_agent"]
    assert trace.get_current_span().get_span_context().is_valid is False  # nothing left current


# --- errors -------------------------------------------------------------------------------------


def test_a_failing_tool_marks_its_span_with_the_exception_type_and_no_message(alice, otel):
    model = ScriptedChatModel([tool_call("obs_fail", reason=SECRET), text("sorry")])
    governed_chat_client(user=alice, conversation=conversation_for(alice), model=model).prompt(
        "go"
    ).call()

    span = otel.one("execute_tool obs_fail")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "Declined"
    assert span.attributes["error.type"] == f"{__name__}.Declined"
    assert span.attributes["tool_calling.tool_call.outcome"] == "failed"
    assert span.events == ()  # the exception's message is content
    assert SECRET not in dump(otel.spans(), otel.metrics())
    (calls,) = otel.metrics()[semconv.TOOL_CALLS]
    assert calls.attributes["tool_calling.tool_call.outcome"] == "failed"
    # The turn itself went on and answered.
    assert otel.one("invoke_agent").status.status_code is StatusCode.UNSET


def test_a_failing_model_call_marks_the_chat_and_the_turn_spans(alice, otel):
    with ReplayServer([{"status": 500}]) as server:
        model = OpenAIChatModel(
            "replay-model", base_url=server.base_url + "/v1", api_key="test", max_retries=0
        )
        client = governed_chat_client(user=alice, conversation=conversation_for(alice), model=model)
        with pytest.raises(Exception) as raised:
            client.prompt("hello").call()

    error_type = f"{type(raised.value).__module__}.{type(raised.value).__qualname__}"
    chat = otel.one("chat replay-model")
    turn = otel.one("invoke_agent")
    for span in (chat, turn):
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes["error.type"] == error_type
    (duration,) = otel.metrics()[semconv.GEN_AI_CLIENT_OPERATION_DURATION]
    assert duration.attributes["error.type"] == error_type


# --- refusals -----------------------------------------------------------------------------------


def test_a_limit_refusal_is_a_refused_execute_tool_span_and_counted(alice, otel):
    limits = {"MAX_CALLS_PER_TOOL": {"obs_add": 1}, "ON_LIMIT_EXCEEDED": "RETURN_ERROR_RESPONSE"}
    model = ScriptedChatModel(
        [tool_calls(tool_call("obs_add", a=1, b=1), tool_call("obs_add", a=2, b=2)), text("ok")]
    )
    with override_settings(TOOL_CALLING=tool_calling_settings(LIMITS=limits)):
        governed_chat_client(user=alice, conversation=conversation_for(alice), model=model).prompt(
            "add twice"
        ).call()

    spans = otel.named("execute_tool obs_add")
    refused = [s for s in spans if s.attributes["tool_calling.tool_call.outcome"] == "refused"]
    ran = [s for s in spans if s.attributes["tool_calling.tool_call.outcome"] == "succeeded"]
    assert len(refused) == 1 and len(ran) == 1 and RAN == ["obs_add"]
    assert refused[0].attributes["tool_calling.tool_call.refusal"] == "limit"
    assert refused[0].attributes["tool_calling.limit"] == "per_tool"
    assert refused[0].attributes["gen_ai.tool.call.id"] == "call_2"
    assert refused[0].status.status_code is StatusCode.ERROR
    assert parent_of(refused[0]) == otel.one("invoke_agent").context.span_id
    points = otel.metrics()
    (refusals,) = points[semconv.LIMIT_REFUSALS]
    assert (refusals.value, dict(refusals.attributes)) == (
        1,
        {"gen_ai.tool.name": "obs_add", "tool_calling.limit": "per_tool"},
    )


def test_a_call_governance_refuses_at_run_time_is_a_refused_span(alice, otel):
    """S2: the tool is disabled after the model asked; the span says refused (governance)."""

    def disable_then_call(prompt):
        models.Tool.objects.filter(name="obs_add").update(enabled=False)
        return tool_call("obs_add", a=1, b=1)

    model = ScriptedChatModel([disable_then_call, text("ok")])
    governed_chat_client(user=alice, conversation=conversation_for(alice), model=model).prompt(
        "add"
    ).call()
    span = otel.one("execute_tool obs_add")
    assert span.attributes["tool_calling.tool_call.outcome"] == "refused"
    assert span.attributes["tool_calling.tool_call.refusal"] == "governance"
    assert RAN == []


# --- durable runs -------------------------------------------------------------------------------


def test_a_durable_run_is_one_turn_span_from_its_first_step_to_its_end(alice, script, otel):
    """Eager Celery: the first step reserves the turn; the turn span covers every step.

    The step after an approval (another request's trace) joins it; the span is recorded when
    the run ends, with the usage of both model calls.
    """
    script(
        tool_calls(tool_call("obs_wire", amount=10), tool_call("obs_add", a=1, b=2)), text("Done")
    )
    reviewer = User.objects.create_user("rita", is_staff=True)
    conversation = conversation_for(alice)
    run = runs.start_turn(conversation, "Pay 10", user=alice)
    run.refresh_from_db()
    assert run.status == "awaiting_approval"
    assert otel.named("invoke_agent") == []  # the turn goes on: not recorded yet
    # The reserved span: a traceparent, then its parent (none: no span sent the first step).
    reserved, parent = run.trace_context.split(";")
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-0[13]", reserved)
    assert parent == "0" * 16

    # The approver's request is another trace; the step it wakes joins the run's.
    with trace.get_tracer("approver").start_as_current_span("POST /approve") as request_span:
        approvals.approve(
            models.ToolExecution.objects.get(run=run, tool_name="obs_wire"), user=reviewer
        )
    run.refresh_from_db()
    assert run.status == "succeeded"

    turn = otel.one("invoke_agent")  # one turn span however many steps
    assert traceparent(turn.context).split("-")[:3] == reserved.split("-")[:3]
    assert turn.parent is None
    assert turn.attributes["tool_calling.run.id"] == str(run.pk)
    assert turn.attributes["gen_ai.conversation.id"] == str(conversation.pk)
    assert turn.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert "tool_calling.run.step" not in turn.attributes
    spans = [s for s in otel.spans() if s.name != "POST /approve"]
    assert {s.context.trace_id for s in spans} == {turn.context.trace_id}
    assert request_span.get_span_context().trace_id != turn.context.trace_id
    chats = otel.named("chat")
    tools = {s.name: s for s in otel.spans() if s.name.startswith("execute_tool")}
    assert len(chats) == 2 and set(tools) == {"execute_tool obs_wire", "execute_tool obs_add"}
    children = (*chats, *tools.values())
    assert all(parent_of(s) == turn.context.span_id for s in children)
    assert all(s.attributes["tool_calling.run.id"] == str(run.pk) for s in children)
    assert [c.attributes["tool_calling.run.step"] for c in chats] == [1, 2]
    # From the first step's start to the run's end: every step and call inside it.
    assert turn.start_time == int(run.started_at.timestamp() * 1_000_000_000)
    assert turn.end_time == int(run.finished_at.timestamp() * 1_000_000_000)
    assert turn.start_time <= min(s.start_time for s in children)
    assert turn.end_time >= max(s.end_time for s in children)
    for usage in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"):
        assert turn.attributes[usage] == sum(c.attributes[usage] for c in chats) > 0
    wire = tools["execute_tool obs_wire"]
    assert wire.attributes["tool_calling.approval"] == "approved"
    assert wire.attributes["tool_calling.tool_call.execution_mode"] == "celery"
    assert "tool_calling.approval" not in tools["execute_tool obs_add"].attributes
    # The tool_calling.approval.* namespace: who decided, when, how long it waited; no argument.
    gated = models.ToolExecution.objects.get(run=run, tool_name="obs_wire")
    approval = {k: v for k, v in wire.attributes.items() if k.startswith("tool_calling.approval.")}
    assert approval == {
        "tool_calling.approval.deciders": "approver",
        "tool_calling.approval.requested_at": gated.created_at.isoformat(),
        "tool_calling.approval.decided_at": gated.decided_at.isoformat(),
        "tool_calling.approval.decided_by": "approver",
        "tool_calling.approval.decider.id": str(reviewer.pk),
        "tool_calling.approval.wait": (gated.decided_at - gated.created_at).total_seconds(),
    }
    assert not any(
        k.startswith("tool_calling.approval.") for k in tools["execute_tool obs_add"].attributes
    )
    points = otel.metrics()
    (decisions,) = points[semconv.APPROVAL_DECISIONS]
    assert (decisions.value, dict(decisions.attributes)) == (
        1,
        {"gen_ai.tool.name": "obs_wire", "tool_calling.approval": "approved"},
    )
    (waited,) = points[semconv.APPROVAL_WAIT_DURATION]
    assert waited.count == 1


def test_a_retried_run_is_a_turn_of_its_own(alice, script, otel):
    """The failed attempt's turn was recorded when it failed; the retry reserves another."""
    script(lambda prompt: (_ for _ in ()).throw(RuntimeError("model down")), text("Back"))
    run = runs.start_turn(conversation_for(alice), "hello", user=alice)
    run.refresh_from_db()
    first = run.trace_context
    assert run.status == "failed"

    run = lifecycle.retry_run(run)
    run.refresh_from_db()

    assert run.status == "succeeded"
    assert run.trace_context and run.trace_context != first
    failed, succeeded = otel.named("invoke_agent")
    assert failed.status.status_code is StatusCode.ERROR
    assert succeeded.status.status_code is StatusCode.UNSET
    assert failed.context.span_id != succeeded.context.span_id
    assert traceparent(succeeded.context).split("-")[:3] == run.trace_context.split("-")[:3]


def test_the_approval_gauges_count_the_waiting_calls_and_their_age(alice, script, otel):
    script(tool_call("obs_wire", amount=10), text("Done"))
    runs.start_turn(conversation_for(alice), "Pay 10", user=alice)
    points = otel.metrics()
    (waiting,) = points[semconv.APPROVALS_WAITING]
    (oldest,) = points[semconv.APPROVALS_OLDEST_AGE]
    assert waiting.value == 1 and oldest.value >= 0
    assert approvals.waiting()[0] == 1


def test_a_failed_step_ends_the_turn_span_with_its_error(alice, script, otel):
    script(lambda prompt: (_ for _ in ()).throw(RuntimeError("model down")))
    run = runs.start_turn(conversation_for(alice), "hello", user=alice)
    run.refresh_from_db()
    assert run.status == "failed"
    turn = otel.one("invoke_agent")
    assert turn.status.status_code is StatusCode.ERROR
    assert turn.attributes["error.type"] == "builtins.RuntimeError"
    assert otel.one("chat").attributes["error.type"] == "builtins.RuntimeError"


# --- Celery headers ----------------------------------------------------------------------------


def test_task_headers_carry_the_current_trace_and_nothing_without_one(otel):
    assert observability.task_headers() is None
    with trace.get_tracer("t").start_as_current_span("sender") as span:
        headers = observability.task_headers()
    assert headers == {"traceparent": traceparent(span.get_span_context())}


def test_a_task_continues_the_trace_its_headers_carry(alice, script, otel):
    """What a worker does with a step sent by a traced request (here eagerly, no span current)."""
    script(text("hi"))
    conversation = conversation_for(alice)
    with trace.get_tracer("web").start_as_current_span("POST /messages") as request_span:
        headers = observability.task_headers()
    # The run without its step sent; then the step delivered with the request's headers.
    with mock.patch.object(lifecycle, "publish", return_value=True):
        run = runs.start_turn(conversation, "hello", user=alice)
    tasks.run_step.apply(args=[str(run.pk)], headers=headers)
    run.refresh_from_db()
    assert run.status == "succeeded"
    turn = otel.one("invoke_agent")
    assert turn.context.trace_id == request_span.get_span_context().trace_id
    assert parent_of(turn) == request_span.get_span_context().span_id
    assert trace.get_current_span().get_span_context().is_valid is False  # detached after


# --- log fields ---------------------------------------------------------------------------------


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.addFilter(observability.LogContextFilter())
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def captured():
    """Every record at DEBUG: the root's, and tool_calling's (which does not propagate)."""
    handler = Capture()
    loggers = [logging.getLogger(), logging.getLogger("tool_calling")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)


def _fields(record):
    return tuple(
        getattr(record, name) for name in ("run_id", "conversation_id", "tool_call_id", "tool_name")
    )


def test_log_records_of_a_turn_carry_its_ids_without_opentelemetry_configured(alice, captured):
    assert observability.tracing_enabled() is False  # the API alone: no provider
    conversation = conversation_for(alice)
    model = ScriptedChatModel([tool_call("obs_vault", token="t"), text("ok")])
    client = governed_chat_client(user=alice, conversation=conversation, model=model)
    client.prompt("store").tool_context({"tenant": "acme"}).call()
    (record,) = [r for r in captured.records if r.name == "tests.vault"]
    assert _fields(record) == ("", str(conversation.pk), "call_1", "obs_vault")
    assert (record.trace_id, record.span_id) == ("", "")
    logging.getLogger("tests.outside").info("after the turn")
    assert _fields(captured.records[-1]) == ("", "", "", "")


def test_log_records_of_a_run_step_carry_the_run_and_the_span(alice, script, captured, otel):
    script(tool_call("obs_vault", token="t"), text("ok"))
    conversation = conversation_for(alice)
    run = runs.start_turn(conversation, "store", user=alice)
    (record,) = [r for r in captured.records if r.name == "tests.vault"]
    assert _fields(record) == (str(run.pk), str(conversation.pk), "call_1", "obs_vault")
    span = otel.one("execute_tool obs_vault")
    assert (record.trace_id, record.span_id) == (
        f"{span.context.trace_id:032x}",
        f"{span.context.span_id:016x}",
    )


def test_a_field_given_with_extra_is_kept():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", (), None)
    record.tool_name = "mine"
    observability.LogContextFilter().filter(record)
    assert (record.tool_name, record.run_id) == ("mine", "")


# --- turn_finished ------------------------------------------------------------------------------


@pytest.fixture
def finished_turns():
    heard: list[dict] = []

    def receiver(sender, **kwargs):
        heard.append({"sender": sender, **{k: v for k, v in kwargs.items() if k != "signal"}})

    signals.turn_finished.connect(receiver)
    try:
        yield heard
    finally:
        signals.turn_finished.disconnect(receiver)


def test_turn_finished_is_sent_when_an_in_process_turn_ends(alice, finished_turns):
    conversation = conversation_for(alice)
    model = ScriptedChatModel([text("hi")])
    governed_chat_client(user=alice, conversation=conversation, model=model).prompt("hi").call()
    assert finished_turns == [
        {
            "sender": ChatClient,
            "conversation_id": str(conversation.pk),
            "run_id": None,
            "status": "succeeded",
            "finish_reason": "stop",
            "error": "",
        }
    ]


def test_turn_finished_is_sent_once_when_a_durable_run_ends(alice, script, finished_turns):
    script(tool_call("obs_add", a=1, b=1), text("2"))
    conversation = conversation_for(alice)
    run = runs.start_turn(conversation, "add", user=alice)
    assert finished_turns == [
        {
            "sender": models.Run,
            "conversation_id": conversation.pk,
            "run_id": run.pk,
            "status": "succeeded",
            "finish_reason": "",
            "error": "",
        }
    ]


def test_turn_finished_says_how_a_run_failed(alice, script, finished_turns):
    script(lambda prompt: (_ for _ in ()).throw(RuntimeError("model down")))
    run = runs.start_turn(conversation_for(alice), "hello", user=alice)
    run.refresh_from_db()
    (heard,) = finished_turns
    assert (heard["status"], heard["error"]) == ("failed", run.error)
    assert heard["error"].startswith("Step 1 failed (RuntimeError)")


def test_turn_finished_is_sent_on_commit_only(alice, finished_turns):
    from django.db import transaction

    model = ScriptedChatModel([text("hi")])
    client = governed_chat_client(user=alice, model=model)
    with transaction.atomic():
        client.prompt("hi").call()
        assert finished_turns == []
    assert [t["status"] for t in finished_turns] == ["succeeded"]


# --- S12: the sentinel secret -------------------------------------------------------------------


def _secret_turn(user, conversation):
    """A turn through the real openai SDK whose tool arguments, result and context hold secrets."""
    steps = [
        {"tool_calls": [{"name": "obs_vault", "arguments": {"token": SECRET}}]},
        {"text": "Stored."},
    ]
    with ReplayServer(steps) as server:
        model = OpenAIChatModel(
            "replay-model", base_url=server.base_url + "/v1", api_key="test", max_retries=0
        )
        client = governed_chat_client(user=user, conversation=conversation, model=model)
        return client.prompt("keep this").tool_context({"tenant": CONTEXT_SECRET}).call()


@pytest.fixture
def openai_logger_at_info():
    """The openai SDK logs whole request bodies at DEBUG (its own choice): keep it at INFO."""
    logger = logging.getLogger("openai")
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.setLevel(level)


def _logged(records):
    return json.dumps([{**vars(r), "message": r.getMessage()} for r in records], default=str)


def test_s12_the_sentinel_is_on_no_span_metric_or_log_record_by_default(
    alice, otel, captured, openai_logger_at_info
):
    _secret_turn(alice, conversation_for(alice))
    exported = dump(otel.spans(), otel.metrics())
    assert len(otel.spans()) == 4  # the turn was observed
    assert SECRET not in exported and CONTEXT_SECRET not in exported
    logged = _logged(captured.records)
    assert "tests.vault" in logged  # the tool logged (its context's tenant: never logged here)
    assert SECRET not in logged
    # The tool itself logged the tenant from its context: the only place it appears.
    assert [r.getMessage() for r in captured.records if CONTEXT_SECRET in r.getMessage()] == [
        f"storing a token for {CONTEXT_SECRET}"
    ]


def test_s12_with_content_on_the_sentinel_appears_only_where_documented(
    alice, otel, captured, openai_logger_at_info
):
    with override_settings(TOOL_CALLING=tool_calling_settings(OBSERVATIONS_INCLUDE_CONTENT=True)):
        _content._warned[0] = False
        _secret_turn(alice, conversation_for(alice))

    holding = sorted(
        (span.name, key)
        for span in otel.spans()
        for key, value in span.attributes.items()
        if SECRET in str(value)
    )
    assert holding == [
        ("chat replay-model", "gen_ai.input.messages"),  # the second call: the call and result
        ("chat replay-model", "gen_ai.output.messages"),  # the first call's answer: the call
        ("execute_tool obs_vault", "gen_ai.tool.call.arguments"),
        ("execute_tool obs_vault", "gen_ai.tool.call.result"),
    ]
    tool_span = otel.one("execute_tool obs_vault")
    assert json.loads(tool_span.attributes["gen_ai.tool.call.arguments"]) == {"token": SECRET}
    assert tool_span.attributes["gen_ai.tool.call.result"] == f"stored {SECRET}"
    second = otel.named("chat replay-model")[1]
    messages = json.loads(second.attributes["gen_ai.input.messages"])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[1]["parts"] == [
        {"type": "tool_call", "id": "call_1", "name": "obs_vault", "arguments": {"token": SECRET}}
    ]
    assert messages[2]["parts"] == [
        {"type": "tool_call_response", "id": "call_1", "response": f"stored {SECRET}"}
    ]
    output = json.loads(second.attributes["gen_ai.output.messages"])
    assert output == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "Stored."}],
            "finish_reason": "stop",
        }
    ]
    exported = dump(otel.spans(), otel.metrics())
    assert CONTEXT_SECRET not in exported  # a tool's context never goes on a span
    assert SECRET not in json.dumps({k: v for k, v in otel.metrics().items()}, default=str)
    logged = _logged(captured.records)
    assert SECRET not in logged  # content goes on spans, never into log records
    (warning,) = [r for r in captured.records if r.name == "tool_calling.observability"]
    assert warning.levelno == logging.WARNING
    assert "OBSERVATIONS_INCLUDE_CONTENT" in warning.getMessage()


def redact_sentinel(text, *, tool_name, field):
    return text.replace(SECRET, "[redacted]")


def test_s12_the_audit_redactor_applies_to_content_on_spans(alice, otel, openai_logger_at_info):
    keys = {"OBSERVATIONS_INCLUDE_CONTENT": True, "AUDIT_REDACTOR": redact_sentinel}
    with override_settings(TOOL_CALLING=tool_calling_settings(**keys)):
        _secret_turn(alice, conversation_for(alice))
    exported = dump(otel.spans(), otel.metrics())
    assert SECRET not in exported
    tool_span = otel.one("execute_tool obs_vault")
    assert tool_span.attributes["gen_ai.tool.call.result"] == "stored [redacted]"
    assert "[redacted]" in otel.named("chat replay-model")[1].attributes["gen_ai.input.messages"]


# --- MCP: nested under the MCP SDK's own spans --------------------------------------------------


@pytest.mark.integration
def test_an_mcp_call_nests_the_mcp_sdks_spans_inside_execute_tool(alice, otel):
    app = served_tools.build_server().streamable_http_app(authenticate=served_tools.authenticate)
    with UvicornThread(app) as server:
        headers = {"Authorization": "Bearer alice-token"}
        transport = StreamableHttpTransport(server.url, headers=headers)
        with McpConnection(transport, name="served", request_timeout=10) as connection:
            (add,) = [
                cb
                for cb in McpToolCallbackProvider(connection, prefix="srv").refresh()
                if cb.definition.name == "srv_add"
            ]
            registry.register(add, source="tests")
            sync_tools()
            try:
                model = ScriptedChatModel([tool_call("srv_add", a=20, b=22), text("42")])
                client = governed_chat_client(
                    user=alice,
                    conversation=conversation_for(alice),
                    model=model,
                    tool_names=["srv_add"],
                )
                assert client.prompt("add").call().content() == "42"
            finally:
                registry.unregister("srv_add")

    ours = otel.one("execute_tool srv_add")
    sent = otel.one("MCP send tools/call add")
    served = otel.one("tools/call add")
    assert sent.kind is SpanKind.CLIENT and parent_of(sent) == ours.context.span_id
    assert served.kind is SpanKind.SERVER and parent_of(served) == sent.context.span_id
    assert {ours.context.trace_id, sent.context.trace_id, served.context.trace_id} == {
        otel.one("invoke_agent").context.trace_id
    }
    # One GenAI tool execution on the client side: the SDK's client span is not a second one.
    client_side = [
        s
        for s in otel.spans()
        if s.attributes.get("gen_ai.operation.name") == "execute_tool"
        and s.kind is not SpanKind.SERVER
    ]
    assert client_side == [ours]


@pytest.mark.integration
def test_mcp_connection_set_up_is_a_child_of_the_call_that_caused_it(alice, otel, tmp_path):
    """Connecting, and reconnecting after the server restarted, make no trace of their own.

    Over the older revision, whose sessions a restarted server forgets (the current one has no
    session to reopen).
    """
    spec = McpToolSpec(
        server_name="echo",
        name="sdk_echo",
        description="Echo the message.",
        input_schema={
            "type": "object",
            "properties": {"message": {"type": "string"}},
            "required": ["message"],
        },
    )
    with running(sdk_server(tmp_path)) as process:
        transport = StreamableHttpTransport(process.url)
        with McpConnection(
            transport, name="sdk", request_timeout=10, protocol="2025-11-25"
        ) as connection:
            registry.register(McpToolCallback(spec, connection), source="tests")
            sync_tools()
            try:
                for message in ("first", "second"):
                    model = ScriptedChatModel([tool_call("sdk_echo", message=message), text("ok")])
                    governed_chat_client(
                        user=alice, conversation=conversation_for(alice), model=model
                    ).prompt("echo").call()
                    if message == "first":
                        process.restart()
            finally:
                registry.unregister("sdk_echo")
            assert connection.connects == 2

    turns = otel.named("invoke_agent")
    calls = otel.named("execute_tool sdk_echo")
    set_ups = otel.named("MCP send initialize")
    assert len(turns) == len(calls) == len(set_ups) == 2
    for turn, call, set_up in zip(turns, calls, set_ups, strict=True):
        assert parent_of(set_up) == call.context.span_id
        assert set_up.context.trace_id == call.context.trace_id == turn.context.trace_id
    # Every span the process made belongs to one of the two turns: no one-span traces.
    assert {span.context.trace_id for span in otel.spans()} == {
        turn.context.trace_id for turn in turns
    }


# --- without OpenTelemetry ----------------------------------------------------------------------

_HIDDEN = """
import sys

class Hide:
    def find_spec(self, name, path=None, target=None):
        if any(name == hidden or name.startswith(hidden + ".") for hidden in HIDDEN):
            raise ImportError(f"{name} is hidden in this test")
        return None

sys.meta_path.insert(0, Hide())
"""

_TURN = """
import logging, os
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0, run_syncdb=True)
import tool_calling.observability as observability
assert not [m for m in sys.modules if m.startswith(HIDDEN_PREFIX)], "imported"
from tool_calling import models, signals, tool
from tool_calling.governance import governed_chat_client
from tool_calling.registry import registry
from tool_calling.sync import sync_tools
from tool_calling.testing import ScriptedChatModel, text, tool_call

@tool
def noted(x: int) -> int:
    "Log and add one."
    logging.getLogger("noted").warning("noting %s", x)
    return x + 1

registry.register(noted, source="tests")
sync_tools()
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append(record)
handler = Keep()
handler.addFilter(observability.LogContextFilter())
logging.getLogger("noted").addHandler(handler)
heard = []
signals.turn_finished.connect(lambda sender, **kw: heard.append(kw["status"]), weak=False)
conversation = models.Conversation.objects.create(title="x")
model = ScriptedChatModel([tool_call("noted", x=1), text("2")])
client = governed_chat_client(conversation=conversation, model=model)
assert "".join(client.prompt("go").stream().content()) == "2"
(record,) = records[:1]
fields = (record.conversation_id, record.tool_name, record.trace_id)
assert fields == (str(conversation.pk), "noted", ""), vars(record)
assert heard[:1] == ["succeeded"], heard
assert observability.tracing_enabled() is False and observability.task_headers() is None
assert not [m for m in sys.modules if m.startswith(HIDDEN_PREFIX)], "imported later"
print("OK", sorted({m.split(".")[1] for m in sys.modules if m.startswith("opentelemetry.")}))
"""


def _run_hidden(hidden, prefix):
    code = f"HIDDEN = {hidden!r}\nHIDDEN_PREFIX = {prefix!r}\n" + _HIDDEN + _TURN
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "OTEL_"))}
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_without_opentelemetry_installed_nothing_of_it_is_imported_and_turns_work():
    out = _run_hidden(["opentelemetry"], "opentelemetry")
    assert out.strip() == "OK []"


def test_with_the_api_but_no_sdk_turns_work_and_nothing_is_recorded():
    out = _run_hidden(["opentelemetry.sdk"], "opentelemetry.sdk")
    assert out.startswith("OK [") and "'trace'" in out  # the API is imported, the SDK is not
