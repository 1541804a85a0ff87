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
    "McpServerError",
    "McpServerRequestError",
    "McpServerTimeoutError",
    "McpServerUnavailableError",
    "RemoteToolError",
    "ToolArgumentsError",
    "ToolCallingError",
    "ToolDefinitionError",
    "ToolFailure",
    "ToolResolutionError",
    "ToolSearchQueryError",
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


class McpServerError(ToolFailure):
    """An MCP server could not answer a request (``tools/list`` or a tool call).

    A :class:`ToolFailure`: the model gets the message as an error response and the turn goes
    on. The message names the server and the operation and never carries the server's command
    line, URL or headers; operators find the cause in the log and in the attributes.
    """

    def __init__(self, message: str, *, server: str, operation: str) -> None:
        super().__init__(message)
        self.server = server
        """The name (alias) of the MCP server."""
        self.operation = operation
        """What was asked: ``"tools/list"`` or ``"tool 'NAME'"``."""


class McpServerUnavailableError(McpServerError):
    """The server is not connected, or the connection was lost during the request."""

    def __init__(self, message: str, *, server: str, operation: str, reason: str) -> None:
        super().__init__(message, server=server, operation=operation)
        self.reason = reason
        """Why (the last connection error), for operators only."""


class McpServerTimeoutError(McpServerError):
    """The server did not answer within the request timeout."""

    def __init__(self, message: str, *, server: str, operation: str, timeout: float) -> None:
        super().__init__(message, server=server, operation=operation)
        self.timeout = timeout
        """The timeout that elapsed, in seconds."""


class McpServerRequestError(McpServerError):
    """The server answered the request with a JSON-RPC error, or with an invalid result."""

    def __init__(self, message: str, *, server: str, operation: str, code: int | None) -> None:
        super().__init__(message, server=server, operation=operation)
        self.code = code
        """The JSON-RPC error code, or ``None`` for a result that failed validation."""


class ToolSearchQueryError(ToolCallingError, ValueError):
    """A tool index cannot use a search query (an invalid or too costly pattern).

    The message is written for the model: the search tool answers it as an ``is_error`` text.
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
