"""The package root is the contract: names, signatures, constants."""

from __future__ import annotations

import dataclasses
import inspect
import types

import pytest

import tool_calling
from tool_calling import exceptions

# Defining tools.
DEFINING_TOOLS = [
    "tool",
    "ToolParam",
    "ToolContext",
    "ToolDefinition",
    "ToolMetadata",
    "ToolCallback",
    "FunctionToolCallback",
    "tool_callbacks",
    "ToolCallbackProvider",
    "ToolCallResultConverter",
]

# Executing tools.
EXECUTING_TOOLS = [
    "Message",
    "SystemMessage",
    "UserMessage",
    "AssistantMessage",
    "ToolCall",
    "ToolResponseMessage",
    "ToolResponse",
    "Prompt",
    "ChatOptions",
    "ChatResponse",
    "Generation",
    "ToolCallingChatOptions",
    "ToolCallingManager",
    "DefaultToolCallingManager",
    "ToolExecutionResult",
    "ToolCallLimits",
    "ToolCallLimitBehavior",
    "ToolCallLimitExceededException",
    "ToolCallingError",
    "ToolDefinitionError",
    "ToolResolutionError",
    "ToolExecutionException",
    "ToolExecutionExceptionProcessor",
    "DefaultToolExecutionExceptionProcessor",
    "ToolExecutionEligibilityPredicate",
    "ToolCallbackResolver",
    "StaticToolCallbackResolver",
    "DelegatingToolCallbackResolver",
]


def test_all_is_the_public_surface() -> None:
    """__all__ lists exactly the public non-module names of the package root.

    Over ``dir()`` so that names the package loads lazily (through a
    module ``__getattr__``) count too; submodules become attributes once loaded, so they are
    skipped.
    """
    names = {
        n
        for n in dir(tool_calling)
        if not n.startswith("_") and not isinstance(getattr(tool_calling, n), types.ModuleType)
    }
    assert sorted(tool_calling.__all__) == sorted(names)


def test_eager_names_are_all_in_all() -> None:
    """Every public name already bound in the package namespace is listed in __all__."""
    eager = {
        n
        for n, v in vars(tool_calling).items()
        if not n.startswith("_") and not isinstance(v, types.ModuleType)
    }
    assert eager <= set(tool_calling.__all__)


def test_all_has_no_duplicates() -> None:
    assert len(tool_calling.__all__) == len(set(tool_calling.__all__))


@pytest.mark.parametrize("name", DEFINING_TOOLS + EXECUTING_TOOLS)
def test_contract_name_is_exported(name: str) -> None:
    """Every contract name is importable from ``tool_calling`` and listed in ``__all__``."""
    assert name in tool_calling.__all__
    namespace: dict[str, object] = {}
    exec(f"from tool_calling import {name}", namespace)
    assert namespace[name] is getattr(tool_calling, name)


def test_tool_execution_result_constants() -> None:
    assert tool_calling.ToolExecutionResult.FINISH_REASON == "returnDirect"
    assert tool_calling.ToolExecutionResult.METADATA_TOOL_ID == "toolId"
    assert tool_calling.ToolExecutionResult.METADATA_TOOL_NAME == "toolName"


def test_limit_exception_constants() -> None:
    exc = tool_calling.ToolCallLimitExceededException
    assert exc.FINISH_REASON == "toolCallLimitExceeded"
    assert exc.METADATA_PARTIAL_TOOL_RESPONSES == "partialToolResponses"


def test_limit_behaviour_members() -> None:
    assert [b.name for b in tool_calling.ToolCallLimitBehavior] == [
        "THROW",
        "RETURN_ERROR_RESPONSE",
    ]


def test_exception_tree() -> None:
    """All library exceptions derive from ToolCallingError, with the contract's stdlib bases."""
    assert issubclass(tool_calling.ToolCallingError, Exception)
    assert issubclass(tool_calling.ToolDefinitionError, ValueError)
    assert issubclass(tool_calling.ToolResolutionError, LookupError)
    for name in (
        "ToolDefinitionError",
        "ToolResolutionError",
        "ToolExecutionException",
        "ToolCallLimitExceededException",
    ):
        assert issubclass(getattr(tool_calling, name), tool_calling.ToolCallingError), name
    assert issubclass(exceptions.ToolArgumentsError, tool_calling.ToolCallingError)
    assert issubclass(exceptions.ToolArgumentsError, ValueError)


def test_every_exception_of_the_exceptions_module_is_under_the_base() -> None:
    for name in exceptions.__all__:
        assert issubclass(getattr(exceptions, name), tool_calling.ToolCallingError), name


def test_exported_exceptions_are_the_exceptions_module_classes() -> None:
    for name in (
        "ToolCallingError",
        "ToolDefinitionError",
        "ToolResolutionError",
        "ToolExecutionException",
        "ToolCallLimitExceededException",
    ):
        assert getattr(tool_calling, name) is getattr(exceptions, name)


def _params(obj: object) -> list[tuple[str, object, object]]:
    return [
        (p.name, p.kind, p.default)
        for p in inspect.signature(obj).parameters.values()  # type: ignore[arg-type]
    ]


P = inspect.Parameter
POS = P.POSITIONAL_OR_KEYWORD
KW = P.KEYWORD_ONLY
EMPTY = P.empty


def test_tool_decorator_signature() -> None:
    """Bare ``@tool`` or ``@tool(name=None, description=None, return_direct=False, ...)``."""
    params = _params(tool_calling.tool)
    assert params[0][0] == "func"
    assert params[1:] == [
        ("name", KW, None),
        ("description", KW, None),
        ("return_direct", KW, False),
        ("result_converter", KW, None),
        # The approval gate's @tool option, after the contract's keywords.
        ("requires_approval", KW, False),
        # What MCP clients are shown (never sent to the model), after them.
        ("title", KW, None),
        ("annotations", KW, None),
        ("icons", KW, ()),
        # The user's confirmation of a call (a bool or a callable of the arguments).
        ("requires_confirmation", KW, False),
    ]


def test_function_tool_callback_signature() -> None:
    params = _params(tool_calling.FunctionToolCallback)
    assert params == [
        ("function", POS, EMPTY),
        ("name", KW, None),
        ("description", KW, None),
        ("input_type", KW, None),
        ("return_direct", KW, False),
        ("result_converter", KW, None),
    ]


def test_default_tool_calling_manager_signature() -> None:
    """The contract's keyword-only arguments come first, with the contract's defaults."""
    params = _params(tool_calling.DefaultToolCallingManager)
    assert params[:5] == [
        ("resolver", KW, None),
        ("exception_processor", KW, None),
        ("limits", KW, None),
        ("resolution_fallback_enabled", KW, False),
        ("executor", KW, None),
    ]
    assert all(kind is KW for _, kind, _ in params)


def test_exception_processor_signature() -> None:
    params = _params(tool_calling.DefaultToolExecutionExceptionProcessor)
    assert [(n, d) for n, _, d in params] == [("always_throw", False), ("rethrown", ())]


def test_tool_param_fields() -> None:
    param = tool_calling.ToolParam()
    assert (param.description, param.required) == ("", None)
    assert tool_calling.ToolParam("City name").description == "City name"


def test_tool_call_limits_defaults() -> None:
    limits = tool_calling.ToolCallLimits()
    assert limits.max_calls_per_tool == 40
    assert dict(limits.per_tool) == {}
    assert tuple(limits.excluded_tools) == ()
    assert limits.max_total_tool_calls == 150
    assert limits.on_limit_exceeded is tool_calling.ToolCallLimitBehavior.THROW


def test_options_objects_are_keyword_only() -> None:
    """Options objects take keywords only."""
    with pytest.raises(TypeError):
        tool_calling.ToolCallLimits(40)  # type: ignore[misc]
    with pytest.raises(TypeError):
        tool_calling.ToolMetadata(True)  # type: ignore[misc]
    assert tool_calling.ToolMetadata().return_direct is False


def test_value_objects_are_frozen_dataclasses_with_positional_leading_fields() -> None:
    call = tool_calling.ToolCall("call_1", "add", "{}")
    response = tool_calling.ToolResponse("call_1", "add", "3")
    definition = tool_calling.ToolDefinition("add", "Add.", {"type": "object"})
    generation = tool_calling.Generation(tool_calling.AssistantMessage("hi"), "stop")
    assert (call.id, call.name, call.arguments) == ("call_1", "add", "{}")
    assert (response.response_data, response.is_error) == ("3", False)
    assert generation.finish_reason == "stop"
    for value in (
        call,
        response,
        definition,
        generation,
        tool_calling.ToolMetadata(),
        tool_calling.ToolCallLimits(),
        tool_calling.UserMessage("hi"),
        tool_calling.ToolResponseMessage([response]),
    ):
        assert dataclasses.is_dataclass(value)
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.__setattr__(dataclasses.fields(value)[0].name, None)


def test_message_defaults() -> None:
    message = tool_calling.AssistantMessage()
    assert (message.text, message.tool_calls, message.metadata) == (None, [], {})
    assert tool_calling.ToolResponseMessage().responses == []


def test_tool_calling_chat_options_defaults() -> None:
    options = tool_calling.ToolCallingChatOptions()
    assert options.model is None
    assert options.tool_callbacks == []
    assert options.tool_names == []
    assert options.tool_context == {}
    assert options.internal_tool_execution_enabled is None
    assert tool_calling.ToolCallingChatOptions(temperature=0.2).model_options == {
        "temperature": 0.2
    }


def test_prompt_and_response_accessors() -> None:
    prompt = tool_calling.Prompt("hi")
    assert prompt.messages == [tool_calling.UserMessage("hi")]
    assert prompt.options is None
    first = tool_calling.Generation(tool_calling.AssistantMessage("a"))
    second = tool_calling.Generation(
        tool_calling.AssistantMessage(tool_calls=[tool_calling.ToolCall("1", "t", "{}")])
    )
    response = tool_calling.ChatResponse([first, second])
    assert response.result is first
    assert response.has_tool_calls() is True
    assert tool_calling.ChatResponse([first]).has_tool_calls() is False
    assert response.metadata == {}


# -- McpToolCallbackProvider, loaded lazily ------------------------------------------------------


def test_mcp_provider_is_exported_from_the_root() -> None:
    from tool_calling.core.mcp import McpToolCallbackProvider

    assert "McpToolCallbackProvider" in tool_calling.__all__
    assert tool_calling.McpToolCallbackProvider is McpToolCallbackProvider


def test_the_root_imports_without_the_mcp_sdk_and_names_the_install_command() -> None:
    """``import tool_calling`` never needs ``mcp``; only the MCP name does, with a clear error."""
    import subprocess
    import sys

    script = (
        "import sys; sys.modules['mcp'] = None\n"  # as if the SDK were not installed
        "import tool_calling\n"
        "assert 'McpToolCallbackProvider' in tool_calling.__all__\n"
        "try:\n"
        "    tool_calling.McpToolCallbackProvider\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc.name, exc)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == (
        "mcp tool_calling.core.mcp needs the 'mcp' package (version 2): pip install "
        "'django-tool-calling[mcp]' (or: pip install 'mcp>=2.3,<3' jsonschema)"
    )


# Tool search and argument augmentation.
SECOND_WAVE = [
    "ToolIndex",
    "LexicalToolIndex",
    "RegexToolIndex",
    "ToolSearchToolCallingAdvisor",
    "AugmentedToolCallbackProvider",
    "AugmentedToolCallback",
]


@pytest.mark.parametrize("name", SECOND_WAVE)
def test_second_wave_name_is_exported(name: str) -> None:
    assert name in tool_calling.__all__
    namespace: dict[str, object] = {}
    exec(f"from tool_calling import {name}", namespace)
    assert namespace[name] is getattr(tool_calling, name)


def test_tool_index_contract() -> None:
    index = tool_calling.ToolIndex
    assert inspect.isabstract(index)
    assert index.__abstractmethods__ == frozenset({"index", "search", "clear"})
    assert _params(index.search) == [
        ("self", POS, EMPTY),
        ("query", POS, EMPTY),
        ("max_results", POS, 5),
    ]
    assert [p[0] for p in _params(index.index)][:2] == ["self", "definitions"]
    assert issubclass(tool_calling.LexicalToolIndex, index)
    assert issubclass(tool_calling.RegexToolIndex, index)


def test_tool_search_advisor_signature() -> None:
    params = _params(tool_calling.ToolSearchToolCallingAdvisor)
    assert params[:3] == [
        ("tool_index", POS, None),
        ("max_results", POS, 5),
        ("always_include", POS, ()),
    ]
    assert issubclass(tool_calling.ToolSearchToolCallingAdvisor, tool_calling.ToolCallingAdvisor)


def test_augmentation_signatures() -> None:
    expected = [
        ("delegate", POS, EMPTY),
        ("augment_type", POS, EMPTY),
        ("consumer", POS, EMPTY),
        ("remove_extra_arguments", POS, True),
    ]
    assert _params(tool_calling.AugmentedToolCallbackProvider) == expected
    assert _params(tool_calling.AugmentedToolCallback) == expected
    assert issubclass(tool_calling.AugmentedToolCallbackProvider, tool_calling.ToolCallbackProvider)
    assert issubclass(tool_calling.AugmentedToolCallback, tool_calling.ToolCallback)
