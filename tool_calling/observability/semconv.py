"""The attribute and metric names of tool_calling's telemetry, pinned to one conventions revision.

The GenAI names are those of the OpenTelemetry semantic conventions at ``SEMCONV_REVISION``
(``open-telemetry/semantic-conventions``, tag ``v1.41.0``: its ``model/gen-ai/registry.yaml``,
``model/gen-ai/metrics.yaml`` and ``model/error/registry.yaml``), the last release of that
repository to carry them before they moved to ``open-telemetry/semantic-conventions-genai``.
The constants of ``opentelemetry-semantic-conventions`` are deprecated and move between
releases, so these are spelled out here; a test compares them with that revision's registry
(``tests/fixtures/semconv/gen_ai_v1.41.0.json``).

Names in the ``tool_calling.`` namespace are this app's own (execution mode, attempt, outcome,
limit refusals, approvals).
"""

from __future__ import annotations

__all__ = [
    "APPROVAL_DECISIONS",
    "APPROVAL_WAIT_DURATION",
    "APPROVALS_OLDEST_AGE",
    "APPROVALS_WAITING",
    "DURATION_BUCKETS",
    "ERROR_TYPE",
    "ERROR_TYPE_OTHER",
    "GEN_AI_CLIENT_OPERATION_DURATION",
    "GEN_AI_CLIENT_TOKEN_USAGE",
    "GEN_AI_CONVERSATION_ID",
    "GEN_AI_INPUT_MESSAGES",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_OUTPUT_MESSAGES",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_REQUEST_STREAM",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_RESPONSE_ID",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_SYSTEM_INSTRUCTIONS",
    "GEN_AI_TOKEN_TYPE",
    "GEN_AI_TOOL_CALL_ARGUMENTS",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_CALL_RESULT",
    "GEN_AI_TOOL_DESCRIPTION",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_TOOL_TYPE",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "LIMIT_REFUSALS",
    "OPERATION_CHAT",
    "OPERATION_EXECUTE_TOOL",
    "OPERATION_INVOKE_AGENT",
    "PROVIDER_OPENAI",
    "SCHEMA_URL",
    "SEMCONV_REVISION",
    "TOKEN_BUCKETS",
    "TOKEN_TYPE_INPUT",
    "TOKEN_TYPE_OUTPUT",
    "TOOL_CALLING_APPROVAL",
    "TOOL_CALLING_APPROVAL_CONFIRMED_AT",
    "TOOL_CALLING_APPROVAL_DECIDED_AT",
    "TOOL_CALLING_APPROVAL_DECIDED_BY",
    "TOOL_CALLING_APPROVAL_DECIDER_ID",
    "TOOL_CALLING_APPROVAL_DECIDERS",
    "TOOL_CALLING_APPROVAL_REQUESTED_AT",
    "TOOL_CALLING_APPROVAL_WAIT",
    "TOOL_CALLING_ATTEMPT",
    "TOOL_CALLING_EXECUTION_MODE",
    "TOOL_CALLING_LIMIT",
    "TOOL_CALLING_OUTCOME",
    "TOOL_CALLING_REFUSAL",
    "TOOL_CALLING_RUN_ID",
    "TOOL_CALLING_RUN_STEP",
    "TOOL_CALLS",
    "TOOL_CALL_DURATION",
    "TOOL_TYPE_FUNCTION",
]

SEMCONV_REVISION = "open-telemetry/semantic-conventions v1.41.0"
"""Where the GenAI names below come from (commit e018fe6f91862f5ed63c082f87697cddac596784)."""
SCHEMA_URL = "https://opentelemetry.io/schemas/1.41.0"
"""The schema URL of that revision, given to the tracer and the meter."""

# -- GenAI attributes (registry.gen_ai) ---------------------------------------------------------

GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
"""``chat``, ``execute_tool`` or ``invoke_agent`` on tool_calling's spans."""
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
"""The model's provider (``openai`` for the OpenAI-compatible adapter)."""
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
"""The model name asked for."""
GEN_AI_REQUEST_STREAM = "gen_ai.request.stream"
"""Whether the model was asked to stream its answer."""
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
"""The model name the response reports."""
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
"""The response's id, as the provider reports it."""
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
"""Why the model stopped, one reason per generation."""
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
"""Prompt tokens the provider reported."""
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
"""Completion tokens the provider reported."""
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
"""The stored conversation of the turn."""
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
"""The tool the model called."""
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
"""The model's id of the call."""
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
"""``function``: tool_calling runs every tool itself, as a function the model filled in."""
GEN_AI_TOOL_DESCRIPTION = "gen_ai.tool.description"
"""The tool's description, as the model was shown it."""
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
"""Content (``OBSERVATIONS_INCLUDE_CONTENT`` only): the call's arguments, redacted."""
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
"""Content (``OBSERVATIONS_INCLUDE_CONTENT`` only): the call's result, redacted."""
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
"""Content (``OBSERVATIONS_INCLUDE_CONTENT`` only): the messages sent to the model."""
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
"""Content (``OBSERVATIONS_INCLUDE_CONTENT`` only): the model's answer."""
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
"""Content (``OBSERVATIONS_INCLUDE_CONTENT`` only): the system message."""
GEN_AI_TOKEN_TYPE = "gen_ai.token.type"
"""``input`` or ``output`` on ``gen_ai.client.token.usage``."""

ERROR_TYPE = "error.type"
"""The class of error an operation ended with (registry.error)."""
ERROR_TYPE_OTHER = "_OTHER"
"""``error.type`` when nothing more specific is known."""

# -- well-known values ---------------------------------------------------------------------------

OPERATION_CHAT = "chat"
"""``gen_ai.operation.name`` of a model call."""
OPERATION_EXECUTE_TOOL = "execute_tool"
"""``gen_ai.operation.name`` of a tool call."""
OPERATION_INVOKE_AGENT = "invoke_agent"
"""``gen_ai.operation.name`` of a turn (the agent loop)."""
PROVIDER_OPENAI = "openai"
"""``gen_ai.provider.name`` of ``OpenAIChatModel`` (any OpenAI-compatible server)."""
TOKEN_TYPE_INPUT = "input"
"""``gen_ai.token.type`` of prompt tokens."""
TOKEN_TYPE_OUTPUT = "output"
"""``gen_ai.token.type`` of completion tokens."""
TOOL_TYPE_FUNCTION = "function"
"""``gen_ai.tool.type`` of every tool tool_calling runs."""

# -- GenAI metrics (metric.gen_ai.client.*) ------------------------------------------------------

GEN_AI_CLIENT_OPERATION_DURATION = "gen_ai.client.operation.duration"
"""Histogram, seconds: one model call (``chat``)."""
GEN_AI_CLIENT_TOKEN_USAGE = "gen_ai.client.token.usage"
"""Histogram, ``{token}``: the tokens of one model call, by ``gen_ai.token.type``."""
DURATION_BUCKETS = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)
"""The bucket boundaries the conventions advise for ``gen_ai.client.operation.duration``."""
TOKEN_BUCKETS = (
    1,
    4,
    16,
    64,
    256,
    1024,
    4096,
    16384,
    65536,
    262144,
    1048576,
    4194304,
    16777216,
    67108864,
)
"""The bucket boundaries the conventions advise for ``gen_ai.client.token.usage``."""

# -- tool_calling's own attributes ---------------------------------------------------------------

TOOL_CALLING_RUN_ID = "tool_calling.run.id"
"""The durable run (``Run``) the span or record belongs to."""
TOOL_CALLING_RUN_STEP = "tool_calling.run.step"
"""The step of the durable run that made the span (a model call of the run)."""
TOOL_CALLING_EXECUTION_MODE = "tool_calling.tool_call.execution_mode"
"""Where the call ran: ``inline`` (in the turn's process) or ``celery`` (on a worker)."""
TOOL_CALLING_ATTEMPT = "tool_calling.tool_call.attempt"
"""The attempt of the call (above 1: a worker took over an idempotent call)."""
TOOL_CALLING_OUTCOME = "tool_calling.tool_call.outcome"
"""How the call ended, as the audit records it: ``succeeded``, ``failed``, ``refused``,
``timed_out``."""
TOOL_CALLING_REFUSAL = "tool_calling.tool_call.refusal"
"""Why a call was refused without running: ``limit`` (a call limit of the turn) or
``governance`` (re-checked when it was to run: the tool was disabled, removed or restricted
since the model asked, or it needs an approval the turn cannot wait for)."""
TOOL_CALLING_LIMIT = "tool_calling.limit"
"""Which limit refused a call: ``per_tool`` or ``total``."""
TOOL_CALLING_APPROVAL = "tool_calling.approval"
"""The approval decision of a call of a tool that requires one: ``approved``, ``denied``,
``expired``."""

# The ``tool_calling.approval.*`` namespace: on the ``execute_tool`` span of a call that waited
# for a person (its user's confirmation, an approver's approval, or both). Never an argument.
TOOL_CALLING_APPROVAL_DECIDERS = "tool_calling.approval.deciders"
"""Whose decision the call waited for: ``user``, ``approver`` or ``user+approver``."""
TOOL_CALLING_APPROVAL_REQUESTED_AT = "tool_calling.approval.requested_at"
"""When the call started waiting (ISO 8601)."""
TOOL_CALLING_APPROVAL_CONFIRMED_AT = "tool_calling.approval.confirmed_at"
"""When the user confirmed a call an approver then decided (ISO 8601)."""
TOOL_CALLING_APPROVAL_DECIDED_AT = "tool_calling.approval.decided_at"
"""When the last decision let the call run (ISO 8601)."""
TOOL_CALLING_APPROVAL_DECIDED_BY = "tool_calling.approval.decided_by"
"""Who took that decision, as a role: ``user`` (the person whose turn it was) or ``approver``."""
TOOL_CALLING_APPROVAL_DECIDER_ID = "tool_calling.approval.decider.id"
"""The primary key of the user who took that decision (no name, no e-mail)."""
TOOL_CALLING_APPROVAL_WAIT = "tool_calling.approval.wait"
"""Seconds the call waited from its request to that decision."""

# -- tool_calling's own metrics ------------------------------------------------------------------

TOOL_CALL_DURATION = "tool_calling.tool_call.duration"
"""Histogram, seconds: one tool call, by tool, outcome and execution mode."""
TOOL_CALLS = "tool_calling.tool_calls"
"""Counter, ``{call}``: tool calls that ended, by tool, outcome and execution mode."""
LIMIT_REFUSALS = "tool_calling.limit_refusals"
"""Counter, ``{call}``: calls a call limit refused, by tool and limit."""
APPROVAL_DECISIONS = "tool_calling.approval.decisions"
"""Counter, ``{call}``: approval decisions, by tool and decision."""
APPROVAL_WAIT_DURATION = "tool_calling.approval.wait.duration"
"""Histogram, seconds: how long a call waited for its decision, by tool and decision."""
APPROVALS_WAITING = "tool_calling.approvals.waiting"
"""Gauge, ``{call}``: calls waiting for a person's approval now."""
APPROVALS_OLDEST_AGE = "tool_calling.approvals.oldest_age"
"""Gauge, seconds: how long the oldest waiting call has waited (0 when none waits)."""
