"""The exception hierarchy of tool_calling.

Everything the library raises on purpose derives from :class:`ToolCallingError`::

    ToolCallingError
     ├── ToolDefinitionError (ValueError)   bad @tool signature, bad or duplicate name
     ├── ToolResolutionError (LookupError)  a tool name that nothing resolves
     ├── ToolArgumentsError (ValueError)    the model's arguments are not JSON or fail the
     │                                      schema (raised only with STRICT_TOOL_CALLS)
     ├── ToolFailure                        raised by a tool on purpose: its message goes to the
     │    │                                 model as an error response, never re-raised
     │    └── McpServerError                an MCP server could not answer a request; .server
     │         ├── McpServerUnavailableError  not connected, or connection lost (.reason)
     │         ├── McpServerTimeoutError      no answer within the timeout (.timeout)
     │         └── McpServerRequestError      the server answered with an error (.code)
     ├── ToolSearchQueryError (ValueError)  a tool search query an index cannot use (a bad
     │                                      pattern); the message is written for the model
     ├── ToolExecutionException             a tool raised; .tool_definition, .cause
     ├── RemoteToolError                    a tool raised on a worker and its class could not
     │                                      be rebuilt here; .error_type
     ├── ToolCallLimitExceededException     .tool_name, .limit, .partial_result
     ├── ToolCallConfirmationRequiredError  calls of a reply wait for the user's decision;
     │                                      .pending, .assistant (none of the reply's calls ran)
     └── ChatModelError                     the model API failed after the SDK's retries;
          │                                 .status_code, .request_id, .retry_after
          ├── ChatModelAuthenticationError  401/403: bad or missing API key
          ├── ChatModelNotFoundError        404: unknown model or endpoint
          ├── ChatModelRateLimitError       429: rate limited (.retry_after, if sent)
          ├── ChatModelTimeoutError         timed out, or could not connect
          └── ChatModelResponseError        5xx, or a body that is not a valid completion

This module is part of the pure-Python core: it never imports Django. The classes are defined
next to the code that raises them (``core/errors.py``, ``ToolExecutionException`` in
``core/tools/callback.py``, ``ToolCallLimitExceededException`` in ``core/execution/limits.py``,
the one place limits are enforced, ``ToolCallConfirmationRequiredError`` in
``core/execution/confirmation.py``), so the core never imports this module and no import runs in
a circle; every name is re-exported here.
"""

from __future__ import annotations

from tool_calling.core.errors import (
    ChatModelAuthenticationError,
    ChatModelError,
    ChatModelNotFoundError,
    ChatModelRateLimitError,
    ChatModelResponseError,
    ChatModelTimeoutError,
    McpServerError,
    McpServerRequestError,
    McpServerTimeoutError,
    McpServerUnavailableError,
    RemoteToolError,
    ToolArgumentsError,
    ToolCallingError,
    ToolDefinitionError,
    ToolFailure,
    ToolResolutionError,
    ToolSearchQueryError,
)
from tool_calling.core.execution.confirmation import ToolCallConfirmationRequiredError
from tool_calling.core.execution.limits import ToolCallLimitExceededException
from tool_calling.core.tools.callback import ToolExecutionException

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
    "ToolCallConfirmationRequiredError",
    "ToolCallLimitExceededException",
    "ToolCallingError",
    "ToolDefinitionError",
    "ToolExecutionException",
    "ToolFailure",
    "ToolResolutionError",
    "ToolSearchQueryError",
]
