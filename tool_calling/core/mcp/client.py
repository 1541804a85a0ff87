"""McpToolCallbackProvider: the tools of one MCP server as ToolCallbacks."""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Literal

from tool_calling.core.errors import McpServerError, ToolDefinitionError, ToolFailure
from tool_calling.core.mcp._convert import (
    check_arguments,
    compile_validator,
    context_meta,
    result_text,
)
from tool_calling.core.mcp._sdk import types
from tool_calling.core.mcp.connection import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    McpConnection,
    McpTransport,
    StdioTransport,
    StreamableHttpTransport,
)
from tool_calling.core.mcp.spec import McpToolSpec, mcp_tool_name, validate_prefix
from tool_calling.core.tools.callback import ToolCallback, ToolCallbackProvider
from tool_calling.core.tools.context import ToolContext
from tool_calling.core.tools.definition import ToolDefinition, ToolMetadata
from tool_calling.core.tools.schema import parse_arguments_object

__all__ = ["McpToolCallback", "McpToolCallbackProvider", "spec_from_tool"]

logger = logging.getLogger("tool_calling.mcp")

_UNSET: Any = object()


def spec_from_tool(tool: types.Tool, name: str) -> McpToolSpec:
    """Return the :class:`McpToolSpec` of an SDK ``Tool``, offered to the model as ``name``.

    A schema without ``type`` is read as an object schema (``{"type": "object", ...}``).

    Raises:
        ToolDefinitionError: the input schema is not an object schema.
    """
    schema = copy.deepcopy(dict(tool.input_schema or {}))
    schema.setdefault("type", "object")
    if schema.get("type") != "object":
        raise ToolDefinitionError(
            f"MCP tool {tool.name!r}: its input schema has type {schema.get('type')!r}; "
            "a tool's arguments must be a JSON object."
        )
    annotations = (
        tool.annotations.model_dump(by_alias=True, mode="json", exclude_none=True)
        if tool.annotations is not None
        else {}
    )
    return McpToolSpec(
        server_name=tool.name,
        name=name,
        title=tool.title,
        description=tool.description or "",
        input_schema=schema,
        output_schema=copy.deepcopy(tool.output_schema) if tool.output_schema else None,
        annotations=annotations,
    )


class McpToolCallback(ToolCallback):
    """One MCP tool as a ToolCallback: arguments checked, then ``tools/call`` on the connection.

    The arguments are validated against the spec's input schema before anything is sent, with
    the field-by-field texts of local tools. The ToolContext travels as ``_meta``, less its
    internal keys (those starting with ``_`` and those in ``internal_context_keys``) and values
    with no JSON form. The result becomes text (see ``result_text``); a result the server marks
    ``isError``, and a server that is down, slow or refuses, raise :class:`ToolFailure`, which
    the manager turns into an ``is_error`` response.

    Build it from a pinned (approved) spec to call the server with exactly that definition.
    """

    def __init__(
        self,
        spec: McpToolSpec,
        connection: McpConnection,
        *,
        timeout: float | None = None,
        internal_context_keys: Iterable[str] = (),
        requires_approval: bool = False,
    ) -> None:
        self._spec = spec
        self._definition: ToolDefinition = spec.to_definition()
        self._connection = connection
        self._timeout = timeout
        self._internal = frozenset(internal_context_keys)
        self._metadata = ToolMetadata(requires_approval=requires_approval)
        self._validator: Any = _UNSET
        self._validator_lock = threading.Lock()

    @property
    def definition(self) -> ToolDefinition:
        """The definition sent to the model (the spec's model name, description and schema)."""
        return self._definition

    @property
    def metadata(self) -> ToolMetadata:
        """Never return-direct; approval as configured (annotations never lift it)."""
        return self._metadata

    @property
    def spec(self) -> McpToolSpec:
        """What the server said about the tool (as pinned, when built from a stored spec)."""
        return self._spec

    @property
    def connection(self) -> McpConnection:
        """The connection the calls go through."""
        return self._connection

    def _compiled(self) -> Any:
        if self._validator is _UNSET:
            with self._validator_lock:
                if self._validator is _UNSET:
                    self._validator = compile_validator(self.name, self._spec.input_schema)
        return self._validator

    def validate_arguments(self, tool_input: str | None) -> None:
        """Check ``tool_input`` against the tool's JSON Schema, without calling the server.

        Raises:
            ToolArgumentsError: not a JSON object, or it fails the tool's input schema.
        """
        self._arguments(tool_input)

    def _arguments(self, tool_input: str | None) -> dict[str, Any]:
        """The call's arguments, parsed and checked against the tool's JSON Schema."""
        arguments = parse_arguments_object(self.name, tool_input)
        check_arguments(self.name, self._compiled(), arguments)
        return arguments

    def _text(self, result: types.CallToolResult) -> str:
        text = result_text(result.model_dump(by_alias=True, mode="json", exclude_none=True))
        if result.is_error:
            raise ToolFailure(
                text or f"MCP tool {self.name!r} reported an error without a message."
            )
        return text

    def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        """Validate the arguments, call the tool on the server and return its result as text.

        Raises:
            ToolArgumentsError: the arguments are not valid for the tool's schema.
            ToolFailure: the server reported an error, or could not answer (McpServerError).
        """
        arguments = self._arguments(tool_input)
        result = self._connection.call_tool(
            self._spec.server_name,
            arguments,
            meta=context_meta(tool_context, self._internal),
            timeout=self._timeout,
            label=self.name,
        )
        return self._text(result)

    async def acall(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        """Async twin of :meth:`call` (the request runs on the connection's loop)."""
        arguments = self._arguments(tool_input)
        result = await self._connection.acall_tool(
            self._spec.server_name,
            arguments,
            meta=context_meta(tool_context, self._internal),
            timeout=self._timeout,
            label=self.name,
        )
        return self._text(result)


class McpToolCallbackProvider(ToolCallbackProvider):
    """The tools of one MCP server session as ToolCallbacks (Spring AI's McpToolCallbackProvider).

    Tools come from ``tools/list`` (every page), listed on first use and again after the server
    says its list changed (``notifications/tools/list_changed``), once the list's ``ttlMs``
    has passed (a server of revision 2026-07-28, which has no such notification), or on
    :meth:`refresh`. Each
    tool is offered as :func:`~tool_calling.core.mcp.spec.mcp_tool_name` of its server name and
    ``prefix``: deterministic, always a valid tool name, the mapping kept in :attr:`tool_names`.
    A tool whose definition cannot be offered (an invisible character in its description, a
    schema that is not an object schema) is left out and listed in :attr:`rejected`.

    Args:
        connection: the server session (an :class:`McpConnection`).
        prefix: put before every tool name (``"github"`` -> ``github_search``); namespaces two
            servers that expose one name.
        tool_filter: keep only the tools for which it returns True.
        timeout: seconds per call (default: the connection's request timeout).
        internal_context_keys: ToolContext keys never sent as ``_meta`` (besides those
            starting with ``_``).
        requires_approval: every tool of this server needs approval before each call.
    """

    def __init__(
        self,
        connection: McpConnection,
        *,
        prefix: str | None = None,
        tool_filter: Callable[[McpToolSpec], bool] | None = None,
        timeout: float | None = None,
        internal_context_keys: Iterable[str] = (),
        requires_approval: bool = False,
    ) -> None:
        self._connection = connection
        self.prefix = validate_prefix(prefix)
        """What every tool name starts with (followed by ``_``), or ``None``."""
        self._filter = tool_filter
        self._timeout = timeout
        self._internal = frozenset(internal_context_keys)
        self._requires_approval = requires_approval
        self._lock = threading.Lock()
        self._callbacks: list[McpToolCallback] | None = None
        self._stale = False
        self._tool_names: Mapping[str, str] = MappingProxyType({})
        self._rejected: Mapping[str, str] = MappingProxyType({})
        connection.add_listener(self._on_notification)

    @classmethod
    def from_config(
        cls,
        name: str,
        *,
        transport: Literal["stdio", "streamable_http"],
        command: str | None = None,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        **options: Any,
    ) -> McpToolCallbackProvider:
        """Build a provider (and its connection) from plain configuration values.

        ``transport`` is ``"stdio"`` (needs ``command``; ``args``, ``env``, ``cwd`` optional)
        or ``"streamable_http"`` (needs ``url``; ``headers`` optional). Other keywords go to
        the constructor (``prefix``, ``tool_filter``, ...).

        Raises:
            ValueError: a required value is missing or the transport is unknown.
        """
        built: McpTransport
        if transport == "stdio":
            if not command:
                raise ValueError(f"MCP server {name!r}: the stdio transport needs a 'command'.")
            built = StdioTransport(command, tuple(args), env=env, cwd=cwd)
        elif transport == "streamable_http":
            if not url:
                raise ValueError(
                    f"MCP server {name!r}: the streamable_http transport needs a 'url'."
                )
            built = StreamableHttpTransport(url, headers=dict(headers or {}))
        else:
            raise ValueError(
                f"MCP server {name!r}: unknown transport {transport!r}; "
                "use 'stdio' or 'streamable_http'."
            )
        connection = McpConnection(
            built, name=name, request_timeout=request_timeout, connect_timeout=connect_timeout
        )
        return cls(connection, **options)

    def __repr__(self) -> str:
        return f"<McpToolCallbackProvider {self._connection.name!r} prefix={self.prefix!r}>"

    @property
    def connection(self) -> McpConnection:
        """The server session."""
        return self._connection

    @property
    def tool_names(self) -> Mapping[str, str]:
        """Model name -> server name of every offered tool, as of the last listing."""
        return self._tool_names

    @property
    def rejected(self) -> Mapping[str, str]:
        """Server name -> why the tool is not offered, as of the last listing."""
        return self._rejected

    def _on_notification(self, method: str) -> None:
        if method == "notifications/tools/list_changed":
            self._stale = True

    def tool_callbacks(self) -> list[ToolCallback]:
        """Return the server's tools, listing them when needed.

        A server that cannot be listed gives the last list (logged), or no tools if it was
        never listed: an unreachable server never fails the turn that asks for its tools.
        """
        with self._lock:
            callbacks, stale = self._callbacks, self._stale
        fresh_until = self._connection.tools_fresh_until
        if fresh_until is not None and time.monotonic() >= fresh_until:
            stale = True  # the server's cache hint ran out
        if callbacks is not None and not stale:
            return list(callbacks)
        try:
            return list(self.refresh())
        except McpServerError as exc:
            logger.warning(
                "MCP server %r: tools not listed (%s); offering %s",
                self._connection.name,
                exc,
                "the last list" if callbacks is not None else "no tools",
            )
            return list(callbacks or [])

    def refresh(self) -> list[McpToolCallback]:
        """List the server's tools now (all pages) and return their callbacks.

        Raises:
            McpServerError: the server is unavailable, too slow or answered with an error.
        """
        self._stale = False
        tools = self._connection.list_tools()
        callbacks, names, rejected = self._build(tools)
        with self._lock:
            self._callbacks = callbacks
            self._tool_names = MappingProxyType(names)
            self._rejected = MappingProxyType(rejected)
        return list(callbacks)

    async def arefresh(self) -> list[McpToolCallback]:
        """Async twin of :meth:`refresh`."""
        self._stale = False
        tools = await self._connection.alist_tools()
        callbacks, names, rejected = await asyncio.to_thread(self._build, tools)
        with self._lock:
            self._callbacks = callbacks
            self._tool_names = MappingProxyType(names)
            self._rejected = MappingProxyType(rejected)
        return list(callbacks)

    def specs(self) -> list[McpToolSpec]:
        """The specs of the offered tools (listing them first if never listed)."""
        return [cb.spec for cb in self.tool_callbacks() if isinstance(cb, McpToolCallback)]

    def callback_for(self, spec: McpToolSpec) -> McpToolCallback:
        """Return a callback that calls ``spec``'s tool with exactly ``spec``'s definition.

        For definitions pinned elsewhere (approved and stored): the model sees the pinned
        description and schema, and arguments are validated against the pinned schema.
        """
        return McpToolCallback(
            spec,
            self._connection,
            timeout=self._timeout,
            internal_context_keys=self._internal,
            requires_approval=self._requires_approval,
        )

    def _build(
        self, tools: Sequence[types.Tool]
    ) -> tuple[list[McpToolCallback], dict[str, str], dict[str, str]]:
        callbacks: list[McpToolCallback] = []
        names: dict[str, str] = {}
        rejected: dict[str, str] = {}
        taken: set[str] = set()
        for tool in tools:
            if tool.name in rejected or tool.name in names.values():
                rejected.setdefault(tool.name, "listed twice by the server; the first is kept")
                continue
            name = mcp_tool_name(tool.name, self.prefix)
            if name.casefold() in taken:
                # Two server names that differ only in case (or map alike): the later one gets
                # the hashed form, so the model can tell them apart.
                name = mcp_tool_name(tool.name + "\0", self.prefix)
            try:
                spec = spec_from_tool(tool, name)
                if self._filter is not None and not self._filter(spec):
                    continue
                callback = self.callback_for(spec)
            except ToolDefinitionError as exc:
                rejected[tool.name] = str(exc)
                logger.warning(
                    "MCP server %r: tool %r is not offered: %s",
                    self._connection.name,
                    tool.name,
                    exc,
                )
                continue
            taken.add(name.casefold())
            names[name] = tool.name
            callbacks.append(callback)
        return callbacks, names, rejected

    def close(self) -> None:
        """Close the connection (a stdio server is stopped)."""
        self._connection.close()
