"""This process's sessions with the configured MCP servers, and their approved tools' callbacks.

One :class:`~tool_calling.core.mcp.McpToolCallbackProvider` (one long-lived session, reconnected
with backoff, every request bounded) per server and process, keyed by the server's alias and
configuration: a changed configuration closes the old session and opens a new one on first use.
A forked worker opens its own sessions (the core starts afresh after a fork).

A tool's callback is built from the definition stored in its ``Tool`` row (the approved, pinned
one), never from what the server lists now: the model sees the approved text and the arguments
are checked against the approved schema. Only the tool context keys the server lists in
``context_keys`` travel to it.

The ``mcp`` SDK takes seconds to import and is optional, so it is imported on first use
(:func:`sdk`), never when ``resolvers`` imports this module.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO

from tool_calling import models
from tool_calling.core.errors import McpServerError, McpServerUnavailableError, ToolFailure
from tool_calling.core.tools.callback import DelegatingToolCallback, ToolCallback
from tool_calling.core.tools.context import ToolContext
from tool_calling.core.tools.definition import ToolAnnotations, ToolDefinition, ToolMetadata

if TYPE_CHECKING:
    from tool_calling.core.mcp import McpToolCallback, McpToolCallbackProvider, McpToolSpec

__all__ = [
    "McpServerToolCallback",
    "UnusableMcpToolCallback",
    "close_all",
    "connection_config",
    "pinned_spec",
    "provider",
    "sdk",
    "server_tool_callback",
]

logger = logging.getLogger("tool_calling.mcp")

_CALLBACK_CACHE_SIZE = 1024


def sdk() -> ModuleType:
    """Return ``tool_calling.core.mcp``, imported on first use.

    Raises:
        ModuleNotFoundError: the optional ``mcp`` SDK is missing (the message has the install
            command).
    """
    # A lazy heavy SDK import: resolvers import this module in every process.
    from tool_calling.core import mcp

    return mcp


def connection_config(server: models.McpServer) -> dict[str, Any]:
    """How to reach ``server`` (transport, command or URL, timeout), secrets resolved.

    ``env`` and ``headers`` name environment variables of this process; their values are read
    now and never stored.

    Raises:
        McpServerUnavailableError: a named environment variable is not set.
    """
    config: dict[str, Any] = {
        "transport": server.transport,
        "request_timeout": float(server.timeout),
    }
    if server.transport == models.McpTransport.STDIO:
        config.update(
            command=server.command,
            args=[str(arg) for arg in server.args or ()],
            env=_resolve(server, "env", "variable"),
        )
    else:
        config.update(url=server.url, headers=_resolve(server, "headers", "header"))
    return config


def _resolve(server: models.McpServer, field: str, what: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for key, variable in dict(getattr(server, field) or {}).items():
        value = os.environ.get(str(variable))
        if value is None:
            reason = (
                f"environment variable {variable!r} (for its {what} {key!r}) is not set in this "
                "process"
            )
            raise McpServerUnavailableError(
                f"MCP server {server.alias!r} cannot be reached: {reason}. Set it in the "
                "environment of the web and worker processes; the call was not sent.",
                server=server.alias,
                operation="connect",
                reason=reason,
            )
        values[str(key)] = value
    return values


def _config_key(alias: str, config: Mapping[str, Any]) -> str:
    # Secrets are part of the key (a rotated token reconnects) but only as a digest.
    text = json.dumps([alias, config], sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class _Pool:
    """One provider (one session) per server alias in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[str, McpToolCallbackProvider]] = {}

    def get(self, server: models.McpServer) -> McpToolCallbackProvider:
        config = connection_config(server)
        key = _config_key(server.alias, {**config, "prefix": server.prefix})
        with self._lock:
            entry = self._entries.get(server.alias)
            if entry is not None and entry[0] == key:
                return entry[1]
            made = _make_provider(server, config)
            self._entries[server.alias] = (key, made)
        if entry is not None:
            logger.info("MCP server %r: configuration changed; reconnecting", server.alias)
            _close_in_background(entry[1])
        return made

    def close(self, alias: str | None = None) -> None:
        with self._lock:
            if alias is None:
                closing = list(self._entries.values())
                self._entries.clear()
            else:
                found = self._entries.pop(alias, None)
                closing = [found] if found is not None else []
        for _, old in closing:
            old.close()


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: this process's stderr, if it is a real file.

    A Celery worker replaces ``sys.stderr`` with a logging proxy that has no file descriptor,
    which a subprocess cannot inherit; the process's original stderr (the worker's log) is
    used then.
    """
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None and stream.fileno() >= 0:
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    return open(os.devnull, "w")  # kept open as long as the process (a fallback of last resort)


def _make_provider(server: models.McpServer, config: dict[str, Any]) -> McpToolCallbackProvider:
    core = sdk()
    transport: Any
    if config["transport"] == models.McpTransport.STDIO:
        if not config["command"]:
            raise McpServerUnavailableError(
                f"MCP server {server.alias!r} has no command to start it; set one in the admin.",
                server=server.alias,
                operation="connect",
                reason="no command",
            )
        transport = core.StdioTransport(config["command"], config["args"], env=config["env"])
    else:
        if not config["url"]:
            raise McpServerUnavailableError(
                f"MCP server {server.alias!r} has no URL; set one in the admin.",
                server=server.alias,
                operation="connect",
                reason="no URL",
            )
        transport = core.StreamableHttpTransport(config["url"], headers=config["headers"])
    connection = core.McpConnection(
        transport,
        name=server.alias,
        request_timeout=config["request_timeout"],
        # Starting a server (npx may fetch a package first) is bounded by the same timeout.
        connect_timeout=float(config["request_timeout"]),
        errlog=_errlog(),
    )
    return core.McpToolCallbackProvider(connection, prefix=server.prefix)  # type: ignore[no-any-return]


def _close_in_background(old: McpToolCallbackProvider) -> None:
    # Stopping a stdio server can take seconds; the turn that noticed the change goes on.
    threading.Thread(target=old.close, name="mcp-close", daemon=True).start()


_pool = _Pool()
_callbacks: dict[tuple[Any, ...], McpServerToolCallback] = {}
_callbacks_lock = threading.Lock()


def provider(server: models.McpServer) -> McpToolCallbackProvider:
    """This process's provider (session) for ``server``, made on first use.

    Raises:
        McpServerUnavailableError: an environment variable the server names is not set.
        ModuleNotFoundError: the ``mcp`` SDK is missing.
    """
    return _pool.get(server)


def close_all(alias: str | None = None) -> None:
    """Close this process's session with server ``alias`` (every server when ``None``)."""
    _pool.close(alias)
    with _callbacks_lock:
        _callbacks.clear()


def pinned_spec(link: models.McpServerTool) -> McpToolSpec:
    """The approved definition of ``link``'s tool, as stored (its hash is ``Tool.schema_hash``)."""
    tool = link.tool
    return sdk().McpToolSpec(  # type: ignore[no-any-return]
        server_name=link.server_name,
        name=tool.name,
        title=link.title or None,
        description=tool.description,
        input_schema=tool.input_schema,
        output_schema=link.output_schema,
        annotations=dict(link.annotations or {}),
    )


class McpServerToolCallback(DelegatingToolCallback):
    """A tool of an MCP server as an operator approved it.

    The delegate holds the pinned definition and the server's session (its JSON Schema checks
    the arguments). Only ``context_keys`` of the tool context travel to the server (as
    ``_meta``): by default the server learns neither the user nor the conversation. Never
    return-direct; approval is the ``Tool`` row's, and the server's annotations never lift it.
    """

    def __init__(
        self,
        delegate: McpToolCallback,
        *,
        server: str,
        context_keys: Sequence[str] = (),
        trusted: bool = False,
    ) -> None:
        super().__init__(delegate)
        self.remote = delegate
        """The core callback (pinned spec, the server's connection)."""
        self.server = server
        """The server's alias."""
        self.context_keys = tuple(context_keys)
        """The tool context keys sent to the server."""
        spec = delegate.spec
        # The server's title and hints, as pinned, are passed on to our own MCP clients only
        # when an operator trusts the server (McpServer.trust_annotations).
        self._metadata = (
            ToolMetadata(
                title=spec.title, annotations=ToolAnnotations.from_mcp(dict(spec.annotations))
            )
            if trusted
            else ToolMetadata()
        )

    @property
    def metadata(self) -> ToolMetadata:
        """Never return-direct (approval is the row's); title and hints from a trusted server."""
        return self._metadata

    @property
    def spec(self) -> McpToolSpec:
        """The pinned spec the calls are made with."""
        return self.remote.spec

    def _context(self, tool_context: ToolContext | None) -> ToolContext | None:
        if not tool_context or not self.context_keys:
            return None
        return ToolContext({k: tool_context[k] for k in self.context_keys if k in tool_context})

    def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        """Call the tool on the server (arguments checked first against the approved schema).

        Raises:
            ToolArgumentsError: the arguments fail the approved schema (nothing was sent).
            ToolFailure: the server reported an error, or is down or too slow.
        """
        return self.remote.call(tool_input, self._context(tool_context))

    async def acall(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        """Async twin of :meth:`call`."""
        return await self.remote.acall(tool_input, self._context(tool_context))


class UnusableMcpToolCallback(ToolCallback):
    """A tool of an MCP server that cannot be called here: every call fails with ``reason``.

    Offered like the working tools, so the model gets an ``is_error`` answer and the audit a
    clear error instead of a tool that silently vanished (a missing environment variable, no
    SDK, a stored definition that no longer matches its pin).
    """

    def __init__(self, definition: ToolDefinition, reason: str, *, server: str) -> None:
        self._definition = definition
        self.reason = reason
        """What the model and the audit are told."""
        self.server = server
        """The server's alias."""

    @property
    def definition(self) -> ToolDefinition:
        """The stored definition."""
        return self._definition

    def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        """Fail with the reason.

        Raises:
            ToolFailure: always.
        """
        raise ToolFailure(self.reason)


def _stored_definition(tool: models.Tool) -> ToolDefinition:
    try:
        return ToolDefinition(tool.name, tool.description, tool.input_schema)
    except Exception:
        return ToolDefinition(tool.name, "", {"type": "object", "properties": {}})


def server_tool_callback(link: models.McpServerTool) -> ToolCallback:
    """The callback of ``link``'s tool in this process, built from its approved definition.

    ``link`` comes with its ``tool`` and ``server`` loaded. Callbacks are cached per pinned
    definition, session and settings, so a turn's snapshot builds none in the common case. A
    tool that cannot be called here (see :class:`UnusableMcpToolCallback`) gets a callback that
    says why at each call.
    """
    tool, server = link.tool, link.server
    try:
        spec = pinned_spec(link)
    except ModuleNotFoundError as exc:
        return UnusableMcpToolCallback(
            _stored_definition(tool),
            f"MCP server {server.alias!r} cannot be used: {exc}",
            server=server.alias,
        )
    if spec.definition_hash != tool.schema_hash:
        logger.error(
            "MCP tool %r: its stored definition does not match its pinned hash %s",
            tool.name,
            tool.schema_hash,
        )
        return UnusableMcpToolCallback(
            _stored_definition(tool),
            f"Tool {tool.name!r} cannot run: its stored definition no longer matches the "
            "approved one. An operator must sync its MCP server and approve it again.",
            server=server.alias,
        )
    try:
        session = provider(server)
    except McpServerError as exc:
        return UnusableMcpToolCallback(_stored_definition(tool), str(exc), server=server.alias)
    timeout = float(tool.timeout or server.timeout)
    keys = tuple(str(key) for key in server.context_keys or ())
    trusted = bool(server.trust_annotations)
    cache_key = (link.pk, tool.schema_hash, id(session), timeout, keys, trusted)
    with _callbacks_lock:
        cached = _callbacks.get(cache_key)
    if cached is not None and cached.remote.connection is session.connection:
        return cached
    try:
        delegate = sdk().McpToolCallback(spec, session.connection, timeout=timeout)
    except Exception as exc:  # a definition the core refuses (checked at sync, so rare)
        return UnusableMcpToolCallback(
            _stored_definition(tool),
            f"Tool {tool.name!r} cannot be offered: {exc}",
            server=server.alias,
        )
    made = McpServerToolCallback(delegate, server=server.alias, context_keys=keys, trusted=trusted)
    with _callbacks_lock:
        if len(_callbacks) >= _CALLBACK_CACHE_SIZE:
            _callbacks.clear()
        _callbacks[cache_key] = made
    return made
