"""The API's OpenAPI schema (drf-spectacular): error shapes, and hooks for what it cannot see.

``views.py`` annotates its operations with the error responses below. Two postprocessing hooks
finish the document; a project lists them in ``SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]``
after drf-spectacular's default enum hook::

    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "tool_calling.api.schema.add_run_events",
        "tool_calling.api.schema.add_input_limits",
    ],

- ``add_run_events`` documents ``GET runs/{id}/events/``, a plain async Django view
  (``tool_calling.api.events``) that drf-spectacular does not introspect.
- ``add_input_limits`` writes the limits of ``TOOL_CALLING["API"]`` into the schema when it is
  generated, so that it matches the project's settings (they are not read at import).
"""

from __future__ import annotations

import copy
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers

from tool_calling.api._digits import MAX_WHOLE_NUMBER
from tool_calling.conf import settings as app_settings

__all__ = [
    "ErrorSerializer",
    "ValidationErrorSerializer",
    "add_input_limits",
    "add_run_events",
    "errors",
]


class ErrorSerializer(serializers.Serializer):
    """What a refused request answers: why, in ``detail``."""

    detail = serializers.CharField(help_text="Why the request was refused.")


class ValidationErrorSerializer(serializers.Serializer):
    """What an invalid request answers (400): ``detail``, and the messages by field.

    Documentation only; its schema comes from ``_ValidationErrorExtension``.
    """


class _ValidationErrorExtension(OpenApiSerializerExtension):
    """Maps ``ValidationErrorSerializer``: ``detail``, and ``errors`` keyed by field name."""

    target_class = ValidationErrorSerializer

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        """``{"detail": "...", "errors": {"<field>": ["<message>", ...]}}``; ``errors`` optional."""
        return {
            "type": "object",
            "description": (
                "Why the request is invalid: `detail` says it in one sentence (each message "
                "prefixed with its field), `errors` lists the messages by field name (e.g. "
                '`{"detail": "text: The message is empty.", "errors": {"text": ["The message '
                'is empty."]}}`). A body that cannot be parsed answers `detail` only.'
            ),
            "properties": {
                "detail": {"type": "string", "description": "Why, in one sentence."},
                "errors": {
                    "type": "object",
                    "description": "The messages by field name (list items by their index).",
                    "additionalProperties": {},
                },
            },
            "required": ["detail"],
        }


_DESCRIPTIONS = {
    400: "The request is invalid.",
    401: (
        "Not authenticated: send `Authorization: Token <key>`, or log in for a session. The "
        "answer carries `WWW-Authenticate: Token`."
    ),
    403: "Refused: a session-authenticated request without its CSRF token.",
    404: "Not found, or not visible to this user: other users' objects answer 404.",
    413: "The body is larger than the server accepts (Django's `DATA_UPLOAD_MAX_MEMORY_SIZE`).",
    429: "Too many requests: `Retry-After` says in how many seconds to send again.",
}


def errors(*codes: int | tuple[int, str]) -> dict[int, OpenApiResponse]:
    """Error responses for ``@extend_schema(responses=...)``: codes, or (code, description).

    400 answers a ``ValidationError`` object, every other code an ``Error`` (``detail``).
    """
    responses: dict[int, OpenApiResponse] = {}
    for entry in codes:
        code, description = entry if isinstance(entry, tuple) else (entry, _DESCRIPTIONS[entry])
        body = ValidationErrorSerializer if code == 400 else ErrorSerializer
        responses[code] = OpenApiResponse(body, description=description)
    return responses


# -- postprocessing hooks ------------------------------------------------------------------------


def _operations(result: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """The schema's operations by ``operationId``, with their paths."""
    found = {}
    for path, item in result.get("paths", {}).items():
        for operation in item.values():
            if isinstance(operation, dict) and "operationId" in operation:
                found[operation["operationId"]] = (path, operation)
    return found


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


_EVENTS_DESCRIPTION = """\
A run's events, as Server-Sent Events or as JSON for polling.

With `Accept: text/event-stream` the answer is an SSE stream: every stored event after \
`Last-Event-ID` (header) or `?after=N`, each as `id: <sequence>`, `event: <kind>` and \
`data: <json>` (the event as in the JSON answer), then new events as they are stored, until \
the run ends (its `succeeded`, `failed` or `cancelled` event is the last one sent) or \
`TOOL_CALLING["API"]["SSE_MAX_SECONDS"]` passed. A client that reconnects with \
`Last-Event-ID` misses nothing and sees nothing twice. Quiet streams get a `: keep-alive` \
comment every `TOOL_CALLING["API"]["SSE_KEEPALIVE_SECONDS"]`. A stream asked for after the last \
event of a run that ended answers 204 No Content, which tells a browser's `EventSource` not to \
reconnect.

Otherwise the answer is JSON: the events after `N`, the run's status, and `last_event_id` to \
send as `?after=` on the next poll."""

_SSE_EXAMPLE = (
    "retry: 2000\n\n"
    'id: 1\nevent: queued\ndata: {"sequence":1,"kind":"queued","data":{},'
    '"created_at":"2026-01-01T12:00:00+00:00"}\n\n'
    ": keep-alive\n\n"
)


def add_run_events(
    result: dict[str, Any], generator: Any, request: Any, public: bool, **kwargs: Any
) -> dict[str, Any]:
    """Add ``GET runs/{id}/events/`` next to ``GET runs/{id}/``, wherever the API is mounted."""
    found = _operations(result).get("runs_retrieve")
    if found is None:  # the API's runs are not in this schema (e.g. filtered out)
        return result
    run_path, run_operation = found
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components["RunEvents"] = {
        "type": "object",
        "description": "A poll of a run's events (`GET runs/{id}/events/` without SSE).",
        "properties": {
            "events": {
                "type": "array",
                "items": _ref("RunEvent"),
                "description": "The events after `?after=` (or `Last-Event-ID`), in order.",
            },
            "last_event_id": {
                "type": "integer",
                "minimum": 0,
                "description": "The last event's sequence number (`after` when there was none "
                "new): the next poll's `?after=`.",
            },
            "status": {
                "allOf": [_ref("RunStatusEnum")],
                "description": "The run's status when the events were read.",
            },
            "finished": {
                "type": "boolean",
                "description": "Whether the run ended: no event will follow.",
            },
        },
        "required": ["events", "last_event_id", "status", "finished"],
    }
    error = _ref("Error")
    operation = {
        "operationId": "runs_events_retrieve",
        "description": _EVENTS_DESCRIPTION,
        "parameters": [
            copy.deepcopy(p) for p in run_operation.get("parameters", []) if p.get("in") == "path"
        ]
        + [
            {
                "in": "query",
                "name": "after",
                "schema": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": MAX_WHOLE_NUMBER,
                    "default": 0,
                },
                "description": "The sequence number of the last event the client has, in "
                "ASCII digits; events after it are answered.",
            },
            {
                "in": "header",
                "name": "Last-Event-ID",
                "schema": {"type": "integer", "minimum": 0, "maximum": MAX_WHOLE_NUMBER},
                "description": "As `?after=`, and preferred to it: what an SSE client sends "
                "when it reconnects (empty: none).",
            },
        ],
        "tags": copy.deepcopy(run_operation.get("tags", [])),
        "security": copy.deepcopy(run_operation.get("security", [])),
        "responses": {
            "200": {
                "description": "The events: JSON for polling, or an SSE stream when the "
                "request accepts `text/event-stream`.",
                "content": {
                    "application/json": {"schema": _ref("RunEvents")},
                    "text/event-stream": {
                        "schema": {
                            "type": "string",
                            "description": "Server-Sent Events: `id: <sequence>`, "
                            "`event: <kind>`, `data: <the event as JSON>` per event.",
                        },
                        "example": _SSE_EXAMPLE,
                    },
                },
            },
            "204": {
                "description": "An SSE request after the last event of a run that ended: "
                "nothing more will come (an `EventSource` stops reconnecting).",
            },
            "400": {
                "description": "`Last-Event-ID` or `?after=` is not a sequence number "
                "(ASCII digits).",
                "content": {"application/json": {"schema": error}},
            },
            "401": {
                "description": _DESCRIPTIONS[401],
                "content": {"application/json": {"schema": error}},
            },
            "404": {
                "description": _DESCRIPTIONS[404],
                "content": {"application/json": {"schema": error}},
            },
        },
    }
    result["paths"][f"{run_path}events/"] = {"get": operation}
    result["paths"] = dict(sorted(result["paths"].items()))
    result["components"]["schemas"] = dict(sorted(components.items()))
    return result


def add_input_limits(
    result: dict[str, Any], generator: Any, request: Any, public: bool, **kwargs: Any
) -> dict[str, Any]:
    """Write ``API["MAX_WAIT_SECONDS"]`` and ``API["MAX_MESSAGE_CHARS"]`` into the schema.

    Also says what the serializers check by hand: a message is not blank, and an approval's
    ``arguments`` are a JSON object.
    """
    limits = app_settings.API
    found = _operations(result).get("conversations_messages_create")
    if found is not None:
        for parameter in found[1].get("parameters", []):
            if parameter.get("in") == "query" and parameter.get("name") == "wait":
                parameter["schema"]["maximum"] = int(limits["MAX_WAIT_SECONDS"])
    schemas = result.get("components", {}).get("schemas", {})
    text = schemas.get("TurnRequest", {}).get("properties", {}).get("text")
    if text is not None:
        text.update({"maxLength": int(limits["MAX_MESSAGE_CHARS"]), "pattern": r"\S"})
    arguments = schemas.get("ApproveRequest", {}).get("properties", {}).get("arguments")
    if arguments is not None:
        arguments.update({"type": "object", "additionalProperties": {}})
    return result
