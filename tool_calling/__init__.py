"""tool_calling: LLM tool calling with governance for Django projects.

The names below are the public contract. They are all pure Python: importing
``tool_calling`` never imports Django, so it works without configured settings. Django-backed
classes (models, the database resolver, the memory repository) live in their own modules.
``OpenAIChatModel`` and ``McpToolCallbackProvider`` are loaded on first use: their SDKs
(``openai``, ``mcp``) take about a second to import and ``mcp`` is optional, so
``import tool_calling`` works without it (the name then raises ``ModuleNotFoundError`` with the
install command).
"""

import importlib as _importlib
from typing import Any as _Any

from tool_calling.core._version import VERSION as _VERSION
from tool_calling.core.augment import (
    AugmentedArguments,
    AugmentedToolCallback,
    AugmentedToolCallbackProvider,
)
from tool_calling.core.chat.advisors.base import HIGHEST_PRECEDENCE, LOWEST_PRECEDENCE, Advisor
from tool_calling.core.chat.advisors.memory import MessageChatMemoryAdvisor
from tool_calling.core.chat.advisors.tool_calling import ToolCallingAdvisor
from tool_calling.core.chat.advisors.tool_search import ToolSearchToolCallingAdvisor
from tool_calling.core.chat.client import ChatClient
from tool_calling.core.chat.memory import (
    ChatMemory,
    ChatMemoryRepository,
    InMemoryChatMemoryRepository,
    MessageWindowChatMemory,
)
from tool_calling.core.chat.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolResponse,
    ToolResponseMessage,
    UserMessage,
)
from tool_calling.core.chat.model import ChatModel
from tool_calling.core.chat.prompt import ChatOptions, Prompt, ToolCallingChatOptions
from tool_calling.core.chat.response import ChatResponse, Generation
from tool_calling.core.execution.confirmation import (
    DefaultToolCallConfirmationPolicy,
    PendingToolCall,
    ToolCallConfirmationPolicy,
    ToolCallConfirmationRequiredError,
    ToolCallDecision,
    ToolNameConfirmationPolicy,
)
from tool_calling.core.execution.eligibility import ToolExecutionEligibilityPredicate
from tool_calling.core.execution.exception_processor import (
    DefaultToolExecutionExceptionProcessor,
    ToolExecutionExceptionProcessor,
)
from tool_calling.core.execution.limits import ToolCallLimitBehavior, ToolCallLimits
from tool_calling.core.execution.manager import DefaultToolCallingManager, ToolCallingManager
from tool_calling.core.execution.resolvers import (
    DelegatingToolCallbackResolver,
    StaticToolCallbackResolver,
    ToolCallbackResolver,
)
from tool_calling.core.execution.result import ToolExecutionResult
from tool_calling.core.search.base import ToolIndex
from tool_calling.core.search.discoveries import DiscoveryStore, InMemoryDiscoveryStore
from tool_calling.core.search.lexical import LexicalToolIndex
from tool_calling.core.search.regex import RegexToolIndex
from tool_calling.core.tools.callback import (
    FunctionToolCallback,
    ToolCallback,
    ToolCallbackProvider,
    tool_callbacks,
)
from tool_calling.core.tools.context import ToolContext
from tool_calling.core.tools.converter import ToolCallResultConverter
from tool_calling.core.tools.decorator import tool
from tool_calling.core.tools.definition import (
    ToolAnnotations,
    ToolDefinition,
    ToolIcon,
    ToolMetadata,
)
from tool_calling.core.tools.result import (
    AudioBlock,
    ImageBlock,
    InputRequired,
    ResourceBlock,
    TextBlock,
    ToolResult,
)
from tool_calling.core.tools.schema import ToolParam
from tool_calling.exceptions import (
    ToolCallingError,
    ToolCallLimitExceededException,
    ToolDefinitionError,
    ToolExecutionException,
    ToolResolutionError,
)

__version__ = _VERSION

_LAZY = {
    "McpToolCallbackProvider": "tool_calling.core.mcp",
    "OpenAIChatModel": "tool_calling.core.providers.openai",
}


def __getattr__(name: str) -> _Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tool_calling' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "AudioBlock",
    "ImageBlock",
    "InputRequired",
    "ResourceBlock",
    "TextBlock",
    "ToolResult",
    "ToolAnnotations",
    "ToolIcon",
    "HIGHEST_PRECEDENCE",
    "LOWEST_PRECEDENCE",
    "Advisor",
    "AssistantMessage",
    "AugmentedArguments",
    "AugmentedToolCallback",
    "AugmentedToolCallbackProvider",
    "ChatClient",
    "ChatMemory",
    "ChatMemoryRepository",
    "ChatModel",
    "ChatOptions",
    "ChatResponse",
    "DefaultToolCallConfirmationPolicy",
    "DefaultToolCallingManager",
    "DefaultToolExecutionExceptionProcessor",
    "DelegatingToolCallbackResolver",
    "DiscoveryStore",
    "FunctionToolCallback",
    "Generation",
    "InMemoryChatMemoryRepository",
    "McpToolCallbackProvider",
    "InMemoryDiscoveryStore",
    "LexicalToolIndex",
    "Message",
    "MessageChatMemoryAdvisor",
    "MessageWindowChatMemory",
    "OpenAIChatModel",
    "PendingToolCall",
    "Prompt",
    "RegexToolIndex",
    "StaticToolCallbackResolver",
    "SystemMessage",
    "ToolCall",
    "ToolCallConfirmationPolicy",
    "ToolCallConfirmationRequiredError",
    "ToolCallDecision",
    "ToolCallLimitBehavior",
    "ToolCallLimitExceededException",
    "ToolCallLimits",
    "ToolCallResultConverter",
    "ToolCallback",
    "ToolCallbackProvider",
    "ToolCallbackResolver",
    "ToolNameConfirmationPolicy",
    "ToolCallingAdvisor",
    "ToolCallingChatOptions",
    "ToolCallingError",
    "ToolCallingManager",
    "ToolContext",
    "ToolDefinition",
    "ToolDefinitionError",
    "ToolExecutionEligibilityPredicate",
    "ToolExecutionException",
    "ToolExecutionExceptionProcessor",
    "ToolExecutionResult",
    "ToolIndex",
    "ToolMetadata",
    "ToolParam",
    "ToolResolutionError",
    "ToolResponse",
    "ToolResponseMessage",
    "ToolSearchToolCallingAdvisor",
    "UserMessage",
    "tool",
    "tool_callbacks",
]
