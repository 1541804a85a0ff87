"""The exception hierarchy of tool_calling.

Everything the library raises on purpose derives from :class:`ToolCallingError`::

    ToolCallingError
     ├── ToolDefinitionError (ValueError)   bad @tool signature, bad or duplicate name
     ├── ToolResolutionError (LookupError)  a tool name that nothing resolves
     ├── ToolArgumentsError (ValueError)    the model's arguments are not JSON or fail the
     │                                      schema (raised only with STRICT_TOOL_CALLS)
     ├── ToolFailure                        raised by a tool on purpose: its message goes to the
     │                                      model as an error response, never re-raised
     ├── ToolSearchQueryError (ValueError)  a tool search query an index cannot use (a bad
     │                                      pattern); the message is written for the model
     ├── ToolExecutionException             a tool raised; .tool_definition, .cause
     ├── ToolCallLimitExceededException     .tool_name, .limit, .partial_result
     └── ChatModelError                     the model API failed after the SDK's retries;
          │                                 .status_code, .request_id, .retry_after
          ├── ChatModelAuthenticationError  401/403: bad or missing API key
          ├── ChatModelNotFoundError        404: unknown model or endpoint
          ├── ChatModelRateLimitError       429: rate limited (.retry_after, if sent)
          ├── ChatModelTimeoutError         timed out, or could not connect
          └── ChatModelResponseError        5xx, or a body that is not a valid completion

This module is part of the pure-Python core: it never imports Django.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from tool_calling.core.chat.response import Generation
    from tool_calling.core.execution.result import ToolExecutionResult
    from tool_calling.core.tools.definition import ToolDefinition

__all__ = [
    "ChatModelAuthenticationError",
    "ChatModelError",
    "ChatModelNotFoundError",
    "ChatModelRateLimitError",
    "ChatModelResponseError",
    "ChatModelTimeoutError",
    "ToolArgumentsError",
    "ToolCallLimitExceededException",
    "ToolCallingError",
    "ToolDefinitionError",
    "ToolExecutionException",
    "ToolFailure",
    "ToolResolutionError",
    "ToolSearchQueryError",
]


class ToolCallingError(Exception):
    """Base class of every exception tool_calling raises on purpose."""


class ToolDefinitionError(ToolCallingError, ValueError):
    """A tool cannot be defined: bad signature, unsupported type, bad or duplicate name."""


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


class ToolSearchQueryError(ToolCallingError, ValueError):
    """A tool index cannot use a search query (an invalid or too costly pattern).

    The message is written for the model: the search tool answers it as an ``is_error`` text.
    """


class ToolExecutionException(ToolCallingError):
    """A tool raised while it ran.

    The message is the cause's message; the cause is kept as ``cause`` and ``__cause__``.
    """

    def __init__(self, tool_definition: ToolDefinition, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.tool_definition = tool_definition
        """The definition of the tool that failed."""
        self.cause = cause
        """The exception the tool raised."""
        self.__cause__ = cause


class ToolCallLimitExceededException(ToolCallingError):
    """A tool call limit of the current turn was exceeded.

    ``tool_name`` is ``None`` when the total limit was exceeded. ``partial_result`` holds the
    conversation history with the calls that already ran plus the breach response.
    """

    FINISH_REASON: ClassVar[str] = "toolCallLimitExceeded"
    """Finish reason of the generation built by :meth:`build_generation`."""
    METADATA_PARTIAL_TOOL_RESPONSES: ClassVar[str] = "partialToolResponses"
    """Metadata key under which the batch's earlier successful responses are kept."""

    def __init__(
        self,
        tool_name: str | None,
        limit: int,
        partial_result: ToolExecutionResult | None = None,
        message: str | None = None,
    ) -> None:
        if message is None:
            message = (
                f"Tool call limit ({limit}) exceeded for tool '{tool_name}'"
                if tool_name is not None
                else f"Total tool call limit ({limit}) exceeded for this turn"
            )
        super().__init__(message)
        self.tool_name = tool_name
        """The tool whose limit was exceeded, or ``None`` for the total limit."""
        self.limit = limit
        """The limit that was exceeded."""
        self.partial_result = partial_result
        """History with what already ran plus the breach response."""

    @property
    def breach_text(self) -> str:
        """The text the model would see for this breach."""
        from tool_calling.core.execution.limits import breach_text

        return breach_text(self.tool_name, self.limit)

    def build_generation(self) -> Generation:
        """Return one generation carrying the breach text and the batch's successful responses."""
        from tool_calling.core.chat.messages import AssistantMessage
        from tool_calling.core.chat.response import Generation

        partial: list[Any] = []
        if self.partial_result is not None:
            last = self.partial_result.conversation_history[-1]
            responses = getattr(last, "responses", [])
            partial = [r for r in responses if not r.is_error]
        return Generation(
            AssistantMessage(self.breach_text),
            finish_reason=self.FINISH_REASON,
            metadata={self.METADATA_PARTIAL_TOOL_RESPONSES: partial},
        )


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
