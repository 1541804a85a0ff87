"""The exceptions of the core that need no other core type (the leaf of every import).

``tool_calling.exceptions`` documents the whole tree and re-exports every class; import from
there. This module imports nothing of tool_calling, so every core module can use it.
"""

from __future__ import annotations

__all__ = [
    "ChatModelAuthenticationError",
    "ChatModelError",
    "ChatModelNotFoundError",
    "ChatModelRateLimitError",
    "ChatModelResponseError",
    "ChatModelTimeoutError",
    "RemoteToolError",
    "ToolArgumentsError",
    "ToolCallingError",
    "ToolDefinitionError",
    "ToolFailure",
    "ToolResolutionError",
]


class ToolCallingError(Exception):
    """Base class of every exception tool_calling raises on purpose."""


class ToolDefinitionError(ToolCallingError, ValueError):
    """A tool cannot be defined: bad signature, unsupported type, bad or duplicate name."""


class RemoteToolError(ToolCallingError):
    """A tool raised in another process (a Celery worker) and its type cannot be rebuilt here.

    The message is the original exception's; ``error_type`` names its class.
    """

    def __init__(self, message: str, *, error_type: str = "") -> None:
        super().__init__(message)
        self.error_type = error_type
        """``module.QualifiedName`` of the exception the tool raised."""


class ToolResolutionError(ToolCallingError, LookupError):
    """A tool name could not be resolved to a tool callback."""


class ToolArgumentsError(ToolCallingError, ValueError):
    """The arguments the model sent for a tool are not valid JSON or fail the tool's schema.

    Raised only when strict tool calls are turned on; otherwise the same text goes back to the
    model as an error tool response.
    """

    def __init__(self, tool_name: str, message: str) -> None:
        super().__init__(message)
        self.tool_name = tool_name
        """The tool whose arguments were rejected."""


class ToolFailure(ToolCallingError):
    """Raise from a tool to tell the model the call failed, with a message meant for it.

    ``raise ToolFailure("Order A1 is already shipped; it cannot be cancelled.")`` becomes an
    ``is_error`` tool response with exactly that text. Unlike other exceptions it is expected:
    it is logged without a traceback and never re-raised by the exception processor.
    """


class ChatModelError(ToolCallingError):
    """The chat model API failed (after the SDK's own retries).

    The message names the failure, the HTTP status and the provider's request id; it never
    contains the API key or the prompt.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        """HTTP status of the failed response, if there was one."""
        self.request_id = request_id
        """The provider's request id (``x-request-id``), for support tickets."""
        self.retry_after = retry_after
        """Seconds the provider asked to wait before retrying, if it said."""


class ChatModelAuthenticationError(ChatModelError):
    """The API key is missing, wrong or not allowed to use this model (401/403)."""


class ChatModelNotFoundError(ChatModelError):
    """The model or endpoint does not exist (404)."""


class ChatModelRateLimitError(ChatModelError):
    """The provider rate-limited the request (429)."""


class ChatModelTimeoutError(ChatModelError):
    """The request timed out or the server could not be reached."""


class ChatModelResponseError(ChatModelError):
    """The server failed (5xx) or answered with something that is not a valid completion."""
