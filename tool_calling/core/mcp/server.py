"""McpToolServer: tools offered to MCP clients, listed and called through caller-supplied rules.

Transport-agnostic: the same server runs over stdio (one principal for the process) and over
streamable HTTP (:meth:`McpToolServer.streamable_http_app`: an ASGI app that checks ``Host``
and ``Origin``, authenticates every request and owns the lifespan the SDK's session manager
needs). Which tools a principal sees, and what a call does, are the ``list_tools`` and
``call_tool`` callables, so governance, audit and authentication plug in from outside; this
module never imports Django.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import json
import logging
import re
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    MutableMapping,
    Sequence,
)
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

from tool_calling.core._version import VERSION
from tool_calling.core.errors import ToolArgumentsError, ToolFailure, ToolResolutionError
from tool_calling.core.mcp._convert import _reserved_meta_key
from tool_calling.core.mcp._sdk import (
    HANDSHAKE_PROTOCOL_VERSIONS,
    AccessToken,
    AuthenticatedUser,
    MCPError,
    RequestStateBoundary,
    RequestStateSecurity,
    Server,
    ServerMessageMetadata,
    ServerRequestContext,
    StreamableHTTPSessionManager,
    TransportSecuritySettings,
    anyio,
    jsonschema,
    stdio_server,
    types,
)
from tool_calling.core.tools.callback import (
    ToolCallback,
    ToolExecutionException,
    check_unique_names,
)
from tool_calling.core.tools.context import (
    CLIENT_CAPABILITIES_KEY,
    INPUT_RESPONSES_KEY,
    PROGRESS_KEY,
    REQUEST_STATE_KEY,
    ToolContext,
)
from tool_calling.core.tools.definition import JsonSchema, ToolDefinition, ToolMetadata
from tool_calling.core.tools.result import (
    AudioBlock,
    ContentBlock,
    ImageBlock,
    InputRequired,
    TextBlock,
    ToolResult,
)

__all__ = [
    "DEFAULT_ALLOWED_HOSTS",
    "McpHttpApp",
    "McpToolServer",
    "ProtectedResource",
]

logger = logging.getLogger("tool_calling.mcp")

P = TypeVar("P")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

Listed = ToolDefinition | ToolCallback
ListTools = Callable[[P], "Iterable[Listed] | Awaitable[Iterable[Listed]]"]
"""``list_tools(principal)``: the tools this principal may see and call, as definitions or as
callbacks (a callback also gives its output schema)."""
CallTool = Callable[[P, str, dict[str, Any], Mapping[str, Any]], "str | Awaitable[str]"]
"""``call_tool(principal, name, arguments, meta)``: run one call and return the text (a
:class:`~tool_calling.core.tools.result.ToolResult` also gives its content blocks and
structured value; an :class:`~tool_calling.core.tools.result.InputRequired` asks the client
for input). The keys of :data:`SERVER_CONTEXT_KEYS` in ``meta`` are set by the server, never by
the client (the progress reporter, the client's input responses, the checked request state,
the client's capabilities): put them into the call's ToolContext.

Raise :class:`ToolFailure` or ``ToolArgumentsError`` for an ``isError`` result with that text,
``ToolResolutionError`` for an unknown tool; any other exception gives a generic error text
(its message is logged, never sent to the client)."""
Authenticate = Callable[[Mapping[str, str]], "P | None | Awaitable[P | None]"]
"""``authenticate(headers)``: the principal of an HTTP request (header names lower-case), or
``None`` for 401."""

InsufficientScope = Callable[[P, Mapping[str, Any]], Sequence[str]]
"""``insufficient_scope(principal, message)``: the scopes the principal's token lacks for this
JSON-RPC ``message`` (``{}`` for a request without a body); none to let it through."""

SERVER_CONTEXT_KEYS = (
    PROGRESS_KEY,
    INPUT_RESPONSES_KEY,
    REQUEST_STATE_KEY,
    CLIENT_CAPABILITIES_KEY,
)
"""The keys of ``meta`` the server sets for a call's ToolContext (a client's are dropped)."""

DEFAULT_ALLOWED_HOSTS = ("127.0.0.1", "localhost", "[::1]")
"""The ``Host`` values accepted by default (any port): loopback only."""

_PRINCIPAL = "tool_calling.mcp.principal"  # key of the principal in the ASGI scope
_stdio_principal: contextvars.ContextVar[Any] = contextvars.ContextVar("mcp_stdio_principal")
_PORT_RE = re.compile(r".*:\d+")


async def _maybe_await(function: Callable[..., Any], *args: Any) -> Any:
    """Await an async callable; run a sync one in a worker thread (it may block on a database)."""
    if inspect.iscoroutinefunction(function):
        return await function(*args)
    result = await anyio.to_thread.run_sync(lambda: function(*args))
    if inspect.isawaitable(result):
        result = await result
    return result


def _error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _block(block: ContentBlock) -> Any:
    if isinstance(block, TextBlock):
        return types.TextContent(type="text", text=block.text)
    if isinstance(block, ImageBlock):
        return types.ImageContent(type="image", data=block.data, mime_type=block.mime_type)
    if isinstance(block, AudioBlock):
        return types.AudioContent(type="audio", data=block.data, mime_type=block.mime_type)
    if block.text is not None:
        contents: Any = types.TextResourceContents(
            uri=block.uri, mime_type=block.mime_type, text=block.text
        )
    else:
        contents = types.BlobResourceContents(
            uri=block.uri, mime_type=block.mime_type, blob=block.blob or ""
        )
    return types.EmbeddedResource(type="resource", resource=contents)


def _structured(text: str, schema: JsonSchema | None) -> dict[str, Any] | None:
    """``text`` as the structured value its tool's output schema describes, else ``None``.

    A result cut to the size limit, or one a converter changed, is no longer that JSON object:
    it then goes as text only.
    """
    if schema is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        logger.warning("A structured tool result does not match its output schema; sent as text")
        return None
    return value


def _call_result(text: str, schema: JsonSchema | None) -> types.CallToolResult:
    """The MCP result of a call that answered ``text`` (a ToolResult gives blocks too)."""
    if isinstance(text, ToolResult):
        structured = text.structured
        if text.content:
            content = [_block(block) for block in text.content]
        else:
            content = [types.TextContent(type="text", text=str(text))]
        return types.CallToolResult(
            content=content,
            structured_content=structured if isinstance(structured, dict) else None,
        )
    # The text is also the copy of a structured value for clients that read only content.
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=str(text))],
        structured_content=_structured(text, schema),
    )


def _json(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return value


def _input_required(
    answer: InputRequired, capabilities: Mapping[str, Any]
) -> types.InputRequiredResult:
    """``answer`` for the client, asking only for what the client said it can give.

    Raises:
        MCPError: the client can give none of it (-32021, naming the capabilities needed).
    """
    kept = {
        key: request
        for key, request in answer.input_requests.items()
        if InputRequired.capability(request) in capabilities
    }
    if not kept:
        wanted = sorted({InputRequired.capability(r) for r in answer.input_requests.values()})
        raise MCPError(
            types.MISSING_REQUIRED_CLIENT_CAPABILITY,
            f"The tool needs input this client cannot give: declare {' or '.join(wanted)}",
            {"requiredCapabilities": {capability: {} for capability in wanted}},
        )
    wire: dict[str, Any] = {"inputRequests": kept}
    if answer.request_state is not None:
        wire["requestState"] = answer.request_state
    return types.InputRequiredResult.model_validate(wire)


_MAX_INPUT_ROUNDS = 10  # rounds of questions one call may ask over a session

_ASKED: dict[str, tuple[Any, Any]] = {
    "elicitation/create": (types.ElicitRequest, types.ElicitResult),
    "sampling/createMessage": (types.CreateMessageRequest, types.CreateMessageResult),
    "roots/list": (types.ListRootsRequest, types.ListRootsResult),
}


async def _ask_over_session(
    ctx: ServerRequestContext[Any, Any], requests: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """Ask the client each request on the call's own stream (the 2025-11-25 way); the answers."""
    answers: dict[str, Any] = {}
    related = ServerMessageMetadata(related_request_id=ctx.request_id)
    for key, request in requests.items():
        request_type, result_type = _ASKED[request["method"]]
        answer: Any = await ctx.session.send_request(
            request_type.model_validate(dict(request)), result_type, metadata=related
        )
        answers[key] = _json(answer)
    return answers


def _client_capabilities(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
    declared = (ctx.meta or {}).get(types.CLIENT_CAPABILITIES_META_KEY)
    if declared is None:
        declared = ctx.session.client_capabilities
    declared = _json(declared) if declared is not None else {}
    return declared if isinstance(declared, dict) else {}


def _state_principal(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """Whom a sealed request state belongs to: the principal key of the HTTP request."""
    scope = getattr(ctx.request, "scope", None)
    user = scope.get("user") if isinstance(scope, Mapping) else None
    if isinstance(user, _PrincipalUser):
        return user.access_token.client_id
    return None  # stdio: one principal per process


def _listed(entry: Listed) -> tuple[ToolDefinition, JsonSchema | None, ToolMetadata | None]:
    if isinstance(entry, ToolCallback):
        return entry.definition, entry.output_schema, entry.metadata
    return entry, None, None


def _tool(
    definition: ToolDefinition, output_schema: JsonSchema | None, metadata: ToolMetadata | None
) -> Any:
    """The ``tools/list`` entry of one tool: its definition, output schema and metadata."""
    wire: dict[str, Any] = {
        "name": definition.name,
        "description": definition.description,
        "inputSchema": definition.input_schema,
    }
    if output_schema is not None:
        wire["outputSchema"] = output_schema
    if metadata is not None:
        if metadata.title:
            wire["title"] = metadata.title
        hints = metadata.annotations.as_mcp()
        if hints:
            wire["annotations"] = hints
        if metadata.icons:
            wire["icons"] = [icon.as_mcp() for icon in metadata.icons]
    return types.Tool.model_validate(wire)


def _progress_reporter(ctx: ServerRequestContext[Any, Any]) -> Callable[..., None] | None:
    """Send the client's progress notifications from the thread a tool runs on, if it asked."""
    if (ctx.meta or {}).get("progress_token") is None:
        return None
    loop = anyio.lowlevel.current_token()
    session = ctx.session

    def report(progress: float, total: float | None = None, message: str | None = None) -> None:
        try:
            anyio.from_thread.run(session.report_progress, progress, total, message, token=loop)
        except Exception:  # the client left, or the call outlived its request
            logger.debug("A progress notification could not be sent", exc_info=True)

    return report


class McpToolServer(Generic[P]):
    """Serve tools over MCP; what each principal lists and calls is decided by two callables.

    ``list_tools(principal)`` returns the ``ToolDefinition`` objects offered to that principal
    (``tools/list``, paginated by ``page_size``); ``call_tool(principal, name, arguments, meta)``
    runs a call (``meta`` is the request's ``_meta``, client-controlled, without the keys MCP
    reserves). A call to a name the principal's list does not hold is refused before
    ``call_tool`` runs, as "Unknown tool". Both callables may be sync (run in a worker thread)
    or async.

    Args:
        list_tools: the definitions a principal may see.
        call_tool: runs one call for a principal.
        name: the server name announced to clients.
        version: the server version announced to clients.
        instructions: text for the client's model about how to use the server.
        page_size: tools per ``tools/list`` page (``None``: one page).
        list_ttl_ms: how long, in milliseconds, a client may reuse a ``tools/list`` answer
            (``ttlMs``; the answer's ``cacheScope`` is always ``"private"``: each principal
            has its own list). A call is checked when it runs whatever the client cached.
        request_state_keys: secrets (32 bytes or more each; the first seals, all unseal) that
            seal the ``request_state`` of an ``InputRequired`` answer, bound to the principal
            and checked when it comes back (tampered or foreign: an error, and the tool does not
            run). ``None``: a key of this process only (one process; state does not survive a
            restart).
    """

    def __init__(
        self,
        *,
        list_tools: ListTools[P],
        call_tool: CallTool[P],
        name: str = "tool_calling",
        version: str | None = None,
        instructions: str | None = None,
        page_size: int | None = None,
        list_ttl_ms: int = 0,
        request_state_keys: Sequence[str | bytes] | None = None,
    ) -> None:
        if isinstance(list_ttl_ms, bool) or not isinstance(list_ttl_ms, int) or list_ttl_ms < 0:
            raise ValueError(
                f"McpToolServer: list_ttl_ms must be a non-negative integer, got {list_ttl_ms!r}."
            )
        if page_size is not None and (isinstance(page_size, bool) or page_size < 1):
            raise ValueError(
                f"McpToolServer: page_size must be a positive integer, got {page_size!r}."
            )
        if version is None:
            version = VERSION
        self._list_tools = list_tools
        self._call_tool = call_tool
        self.page_size = page_size
        """Tools per ``tools/list`` page, or ``None`` for one page."""
        self.list_ttl_ms = list_ttl_ms
        """How long a client may reuse a ``tools/list`` answer (``ttlMs``, milliseconds)."""
        self.server: Server[Any] = Server(
            name,
            version=version,
            instructions=instructions,
            on_list_tools=self._on_list_tools,
            on_call_tool=self._on_call_tool,
        )
        """The SDK's low-level server (for transports this class does not wrap)."""
        security = (
            RequestStateSecurity.ephemeral()
            if request_state_keys is None
            else RequestStateSecurity(keys=list(request_state_keys))
        )
        security.bind_principal = _state_principal
        self.server.middleware.append(RequestStateBoundary(security, default_audience=name))

    @classmethod
    def from_callbacks(
        cls,
        callbacks: Sequence[ToolCallback],
        *,
        tool_context: Callable[[Any, Mapping[str, Any]], ToolContext] | None = None,
        **options: Any,
    ) -> McpToolServer[Any]:
        """Serve a fixed set of callbacks to every authenticated principal.

        ``tool_context(principal, meta)`` builds each call's ToolContext (default: empty). The
        request's ``_meta`` is client-controlled: never let it decide who the user is.

        Raises:
            ToolDefinitionError: two callbacks share a name.
        """
        callbacks = list(callbacks)
        check_unique_names(callbacks)
        by_name = {callback.name: callback for callback in callbacks}

        def list_tools(principal: Any) -> list[ToolCallback]:
            return callbacks

        async def call_tool(
            principal: Any, name: str, arguments: dict[str, Any], meta: Mapping[str, Any]
        ) -> str:
            callback = by_name.get(name)
            if callback is None:
                raise ToolResolutionError(f"Unknown tool: {name}")
            context = tool_context(principal, meta) if tool_context else ToolContext()
            given = {key: meta[key] for key in SERVER_CONTEXT_KEYS if key in meta}
            if given:
                context = ToolContext(context, **given)
            return await callback.acall(json.dumps(arguments), context)

        return cls(list_tools=list_tools, call_tool=call_tool, **options)

    # -- handlers ---------------------------------------------------------------------------------

    def _principal(self, ctx: ServerRequestContext[Any, Any]) -> P:
        request = ctx.request
        scope = getattr(request, "scope", None)
        if isinstance(scope, Mapping) and _PRINCIPAL in scope:
            return scope[_PRINCIPAL]  # type: ignore[no-any-return]
        try:
            return _stdio_principal.get()  # type: ignore[no-any-return]
        except LookupError:
            # Only reachable through a transport this module did not set up.
            raise MCPError(types.INVALID_REQUEST, "Unauthenticated request") from None

    async def _definitions(
        self, principal: P
    ) -> list[tuple[ToolDefinition, JsonSchema | None, ToolMetadata | None]]:
        return [_listed(entry) for entry in await _maybe_await(self._list_tools, principal)]

    def _list_result(self, tools: list[Any], next_cursor: str | None = None) -> Any:
        return types.ListToolsResult(
            tools=tools,
            next_cursor=next_cursor,
            ttl_ms=self.list_ttl_ms,
            cache_scope="private",
        )

    async def _on_list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        principal = self._principal(ctx)
        tools = [_tool(*entry) for entry in await self._definitions(principal)]
        if self.page_size is None:
            return self._list_result(tools)  # type: ignore[no-any-return]
        cursor = params.cursor if params is not None else None
        start = 0
        if cursor is not None:
            if not cursor.isdigit() or int(cursor) > len(tools):
                raise MCPError(types.INVALID_PARAMS, f"Invalid cursor: {cursor[:40]!r}")
            start = int(cursor)
        end = start + self.page_size
        return self._list_result(  # type: ignore[no-any-return]
            tools[start:end], str(end) if end < len(tools) else None
        )

    async def _on_call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        principal = self._principal(ctx)
        name = params.name
        schemas = {d.name: schema for d, schema, _ in await self._definitions(principal)}
        if name not in schemas:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {name}")
        arguments = dict(params.arguments or {})
        meta: dict[str, Any] = {
            key: value
            for key, value in dict(params.meta or {}).items()
            if key not in ("progress_token", "progressToken", *SERVER_CONTEXT_KEYS)
            and not _reserved_meta_key(key)
        }
        reporter = _progress_reporter(ctx)
        if reporter is not None:
            meta[PROGRESS_KEY] = reporter
        capabilities = _client_capabilities(ctx)
        meta[CLIENT_CAPABILITIES_KEY] = capabilities
        if params.input_responses:
            meta[INPUT_RESPONSES_KEY] = {
                key: _json(value) for key, value in params.input_responses.items()
            }
        if params.request_state is not None:  # unsealed and checked by RequestStateBoundary
            meta[REQUEST_STATE_KEY] = params.request_state
        try:
            text = await _maybe_await(self._call_tool, principal, name, arguments, meta)
        except ToolResolutionError:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {name}") from None
        except Exception as exc:
            return self._failure(name, exc)
        rounds = 0
        while (
            isinstance(text, InputRequired) and ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
        ):
            # A session of the older revision: ask the client here and now, then call again
            # with its answers (the state never leaves the server, so it needs no seal).
            rounds += 1
            asked = _input_required(text, capabilities).input_requests or {}
            if rounds > _MAX_INPUT_ROUNDS:
                return _error_result(f"Tool {name!r} asked for input more than 10 times.")
            requests = {key: _json(request) for key, request in asked.items()}
            try:
                meta[INPUT_RESPONSES_KEY] = await _ask_over_session(ctx, requests)
            except MCPError as exc:
                return _error_result(f"The client did not answer the tool's question: {exc}")
            if text.request_state is None:
                meta.pop(REQUEST_STATE_KEY, None)
            else:
                meta[REQUEST_STATE_KEY] = text.request_state
            try:
                text = await _maybe_await(self._call_tool, principal, name, arguments, meta)
            except Exception as exc:
                return self._failure(name, exc)
        if isinstance(text, InputRequired):
            return _input_required(text, capabilities)  # type: ignore[return-value]
        return _call_result(text if isinstance(text, str) else str(text), schemas[name])

    def _failure(self, name: str, exc: Exception) -> types.CallToolResult:
        cause: BaseException = exc.cause if isinstance(exc, ToolExecutionException) else exc
        if isinstance(cause, (ToolFailure, ToolArgumentsError)):
            # Its text is for the client: it may quote the call's arguments, so the log has
            # only its type.
            logger.info("MCP call of %r answered with an error (%s)", name, type(cause).__name__)
            return _error_result(str(cause))
        logger.error(
            "MCP call of %r raised %s",
            name,
            type(cause).__name__,
            exc_info=(type(cause), cause, cause.__traceback__),
        )
        # The client is a remote party: it gets the type, never the message.
        return _error_result(f"Exception occurred in tool: {name} ({type(cause).__name__})")

    # -- transports -------------------------------------------------------------------------------

    async def run_stdio(self, principal: P) -> None:
        """Serve this process's stdin/stdout as ``principal`` until the client disconnects."""
        token = _stdio_principal.set(principal)
        try:
            async with stdio_server() as (read, write):
                await self.server.run(read, write, self.server.create_initialization_options())
        finally:
            _stdio_principal.reset(token)

    def serve_stdio(self, principal: P) -> None:
        """Sync entry point of :meth:`run_stdio` (a management command calls this)."""
        anyio.run(self.run_stdio, principal)

    def streamable_http_app(
        self,
        *,
        authenticate: Authenticate[P],
        allowed_hosts: Iterable[str] = DEFAULT_ALLOWED_HOSTS,
        allowed_origins: Iterable[str] | None = None,
        path: str = "/mcp",
        principal_key: Callable[[P], str] = str,
        json_response: bool = False,
        stateless: bool = False,
        session_idle_timeout: float | None = 30 * 60,
        max_sessions: int | None = 10_000,
        fallback: ASGIApp | None = None,
        protected_resource: ProtectedResource | None = None,
        insufficient_scope: InsufficientScope[P] | None = None,
    ) -> McpHttpApp:
        """Return the ASGI app serving this server over streamable HTTP at ``path``.

        Every request to ``path`` is checked in this order: ``Host`` in ``allowed_hosts``
        (else 421), ``Origin`` allowed (else 403; a request without ``Origin`` passes, as
        non-browser clients send none), ``authenticate(headers)`` gives a principal (else 401).
        A session belongs to the principal that opened it: another principal using its id gets
        404. Lifespan events start and stop the SDK's session manager; other paths go to
        ``fallback`` (a Django ASGI app, say) or get 404, and lifespan events are never
        forwarded to it.

        With ``protected_resource`` the endpoint is an OAuth 2.0 resource server: it serves the
        resource's metadata document (RFC 9728), its 401 names the document and the scope to
        ask for, and a request whose token lacks a scope that ``insufficient_scope`` names gets
        403 ``insufficient_scope`` naming the scopes to ask for (the MCP authorization spec's
        step-up), before the SDK sees it.

        Args:
            authenticate: request headers (lower-case names) -> principal, or ``None``.
            allowed_hosts: accepted ``Host`` values: ``name`` (any port), ``name:port``, or
                ``"*"`` (any; only behind a proxy that checks it).
            allowed_origins: accepted ``Origin`` values (``scheme://host[:port]``, or
                ``scheme://host:*`` for any port); default: http(s) origins whose host passes
                ``allowed_hosts``.
            path: the endpoint path.
            principal_key: a stable string per principal (binds sessions to principals).
            json_response: answer with JSON bodies instead of SSE streams.
            stateless: no sessions (each request stands alone).
            session_idle_timeout: seconds before an idle session is closed (``None``: never).
            max_sessions: open sessions at most (503 beyond).
            fallback: the ASGI app for every other path.
            protected_resource: the endpoint as an OAuth protected resource, or ``None``.
            insufficient_scope: the scopes a principal's token lacks for a JSON-RPC message.
        """
        manager = StreamableHTTPSessionManager(
            app=self.server,
            json_response=json_response,
            stateless=stateless,
            # Host and Origin are checked by McpHttpApp before the SDK sees the request.
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            session_idle_timeout=session_idle_timeout,
            max_sessions=max_sessions,
        )
        return McpHttpApp(
            manager,
            authenticate=authenticate,
            allowed_hosts=tuple(allowed_hosts),
            allowed_origins=None if allowed_origins is None else tuple(allowed_origins),
            path=path,
            principal_key=principal_key,
            fallback=fallback,
            protected_resource=protected_resource,
            insufficient_scope=insufficient_scope,
        )


_WELL_KNOWN = "/.well-known/oauth-protected-resource"


@dataclass(frozen=True, kw_only=True)
class ProtectedResource:
    """The MCP endpoint as an OAuth 2.0 protected resource (RFC 9728).

    Its metadata document is served at ``/.well-known/oauth-protected-resource`` and at that
    path followed by the resource's own path (``/.well-known/oauth-protected-resource/mcp/``);
    a 401 points clients at it (``WWW-Authenticate: Bearer resource_metadata="..."``).
    """

    resource: str
    """The endpoint's URL as clients reach it (``https://example.com/mcp/``): the ``resource``
    (RFC 8707) a token must be issued for."""
    authorization_servers: tuple[str, ...]
    """The issuer URLs of the authorization servers whose tokens the endpoint accepts."""
    scopes_supported: tuple[str, ...] = field(default=())
    """Every scope the endpoint understands (published in the metadata)."""
    scope: str = ""
    """The scopes, space-separated, a client asks for first (in the 401 challenge); blank: none
    named."""

    def __post_init__(self) -> None:
        parts = urlsplit(self.resource)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.fragment:
            raise ValueError(
                f"ProtectedResource: resource must be an http(s) URL without a fragment, "
                f"got {self.resource!r}."
            )

    @property
    def metadata_url(self) -> str:
        """Where the metadata document is: the well-known path followed by the resource's."""
        parts = urlsplit(self.resource)
        return f"{parts.scheme}://{parts.netloc}{_WELL_KNOWN}{parts.path}"

    def metadata_paths(self) -> tuple[str, ...]:
        """The request paths that serve the metadata document."""
        path = urlsplit(self.resource).path.rstrip("/")
        return (_WELL_KNOWN, f"{_WELL_KNOWN}{path}")

    def document(self) -> dict[str, Any]:
        """The metadata document (RFC 9728 section 2)."""
        return {
            "resource": self.resource,
            "authorization_servers": list(self.authorization_servers),
            "scopes_supported": list(self.scopes_supported),
            "bearer_methods_supported": ["header"],
        }

    def challenge(self, error: str = "", scope: str | None = None) -> str:
        """The ``WWW-Authenticate`` value of a 401 (``error`` blank) or a 403."""
        parts = [f'error="{error}"'] if error else []
        parts.append(f'resource_metadata="{self.metadata_url}"')
        scope = self.scope if scope is None else scope
        if scope:
            parts.append(f'scope="{scope}"')
        return "Bearer " + ", ".join(parts)


class _PrincipalUser(AuthenticatedUser):
    """The principal as the SDK's session manager sees it (``scope["user"]``).

    The manager binds each session to the ``client_id`` of the user that opened it.
    """

    def __init__(self, principal: Any, key: str) -> None:
        super().__init__(AccessToken(token="", client_id=key, scopes=[]))
        self.principal = principal


def _host_allowed(host: str | None, allowed: Sequence[str]) -> bool:
    if not host:
        return False
    host = host.strip().lower()
    for entry in allowed:
        entry = entry.strip().lower()
        if entry == "*" or host == entry:
            return True
        has_port = _PORT_RE.fullmatch(entry) is not None and not entry.endswith("]")
        if not has_port and host.startswith(entry + ":") and host[len(entry) + 1 :].isdigit():
            return True
    return False


def _origin_allowed(
    origin: str, allowed_hosts: Sequence[str], allowed_origins: Sequence[str] | None
) -> bool:
    origin = origin.strip().lower()
    if allowed_origins is None:
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and _host_allowed(parts.netloc, allowed_hosts)
    for entry in allowed_origins:
        entry = entry.strip().lower().rstrip("/")
        if origin == entry:
            return True
        if entry.endswith(":*"):
            rest = origin[len(entry) - 1 :] if origin.startswith(entry[:-1]) else ""
            if rest.isdigit():
                return True
    return False


class McpHttpApp:
    """The ASGI app of :meth:`McpToolServer.streamable_http_app` (see there)."""

    def __init__(
        self,
        manager: StreamableHTTPSessionManager,
        *,
        authenticate: Authenticate[Any],
        allowed_hosts: Sequence[str],
        allowed_origins: Sequence[str] | None,
        path: str,
        principal_key: Callable[[Any], str],
        fallback: ASGIApp | None,
        protected_resource: ProtectedResource | None = None,
        insufficient_scope: InsufficientScope[Any] | None = None,
    ) -> None:
        self._manager = manager
        self._authenticate = authenticate
        self.allowed_hosts = allowed_hosts
        """Accepted ``Host`` values."""
        self.allowed_origins = allowed_origins
        """Accepted ``Origin`` values (``None``: those whose host is allowed)."""
        self.path = path.rstrip("/") or "/"
        """The MCP endpoint's path."""
        self._principal_key = principal_key
        self._fallback = fallback
        self._running = False
        self.protected_resource = protected_resource
        """The endpoint as an OAuth protected resource (``None``: bearer tokens of its own)."""
        self._insufficient_scope = insufficient_scope

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the SDK's session manager, for a host app that handles lifespan itself.

        Enter and leave it in one task (the host's lifespan task).
        """
        async with self._manager.run():
            self._running = True
            try:
                yield
            finally:
                self._running = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection (lifespan, the MCP path, or the fallback)."""
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind == "http" and (scope["path"].rstrip("/") or "/") == self.path:
            await self._serve(scope, receive, send)
            return
        resource = self.protected_resource
        if (
            kind == "http"
            and resource is not None
            and scope["path"].rstrip("/") in resource.metadata_paths()
        ):
            await _json_response(send, 200, resource.document(), cors=True)
            return
        if self._fallback is not None:
            await self._fallback(scope, receive, send)
            return
        if kind == "http":
            await _plain(send, 404, "Not Found")

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        # One task enters and leaves the session manager, as anyio's cancel scopes require.
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        started = False
        try:
            async with self.running():
                started = True
                await send({"type": "lifespan.startup.complete"})
                while (await receive())["type"] != "lifespan.shutdown":
                    pass
        except Exception as exc:
            if not started:
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                return
            raise
        await send({"type": "lifespan.shutdown.complete"})

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {
            key.decode("latin-1").lower(): value.decode("latin-1")
            for key, value in scope.get("headers", [])
        }
        if not _host_allowed(headers.get("host"), self.allowed_hosts):
            logger.warning("MCP request refused: Host %r is not allowed", headers.get("host"))
            await _plain(send, 421, "Invalid Host header")
            return
        origin = headers.get("origin")
        if origin is not None and not _origin_allowed(
            origin, self.allowed_hosts, self.allowed_origins
        ):
            logger.warning("MCP request refused: Origin %r is not allowed", origin)
            await _plain(send, 403, "Invalid Origin header")
            return
        try:
            principal = await _maybe_await(self._authenticate, headers)
        except Exception:
            logger.exception("MCP request refused: the authentication hook raised")
            await _plain(send, 500, "Authentication failed")
            return
        if principal is None:
            await _unauthorized(send, self.protected_resource, "authorization" in headers)
            return
        if self._insufficient_scope is not None:
            body, receive = await _buffered(receive)
            missing = await _maybe_await(self._insufficient_scope, principal, _message(body))
            if missing:
                await _forbidden(send, self.protected_resource, " ".join(missing))
                return
        if not self._running:
            await _plain(
                send,
                503,
                "The MCP endpoint is not started: the ASGI server must send lifespan events "
                "(uvicorn: --lifespan on), or the host app must enter McpHttpApp.running().",
            )
            return
        scope = dict(scope)
        # RFC 9110 5.5: leading and trailing whitespace is not part of a field value (an
        # "Mcp-Name:  add " names the tool add, which the SDK compares with the body).
        scope["headers"] = [(key, value.strip(b" \t")) for key, value in scope.get("headers", [])]
        scope[_PRINCIPAL] = principal
        scope["user"] = _PrincipalUser(principal, self._principal_key(principal))
        await self._manager.handle_request(scope, receive, send)


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _json_response(
    send: Send,
    status: int,
    value: Any,
    *,
    challenge: str | None = None,
    cors: bool = False,
) -> None:
    body = json.dumps(value).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if challenge is not None:
        headers.append((b"www-authenticate", challenge.encode("latin-1")))
    if cors:  # a public document, read by browser-based clients too
        headers.append((b"access-control-allow-origin", b"*"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _unauthorized(send: Send, resource: ProtectedResource | None, presented: bool) -> None:
    # Without OAuth, the endpoint's own tokens: no metadata to point at. With it, a request
    # that sent no credentials gets no error code (RFC 6750 section 3.1).
    if resource is None:
        challenge = 'Bearer error="invalid_token"'
    else:
        challenge = resource.challenge("invalid_token" if presented else "")
    error = {"error": "invalid_token", "error_description": "Authentication required"}
    await _json_response(send, 401, error, challenge=challenge)


async def _forbidden(send: Send, resource: ProtectedResource | None, scope: str) -> None:
    if resource is None:
        challenge = f'Bearer error="insufficient_scope", scope="{scope}"'
    else:
        challenge = resource.challenge("insufficient_scope", scope)
    error = {
        "error": "insufficient_scope",
        "error_description": f"The access token lacks the scope: {scope}",
    }
    await _json_response(send, 403, error, challenge=challenge)


async def _buffered(receive: Receive) -> tuple[bytes, Receive]:
    """The request body, read whole, and a ``receive`` that replays it to the next app."""
    chunks: list[bytes] = []
    messages: list[MutableMapping[str, Any]] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break

    async def replay() -> MutableMapping[str, Any]:
        if messages:
            return messages.pop(0)
        return await receive()

    return b"".join(chunks), replay


def _message(body: bytes) -> Mapping[str, Any]:
    """The JSON-RPC message of a request body; ``{}`` when there is none (or it is not one)."""
    if not body:
        return {}
    try:
        message = json.loads(body)
    except ValueError:
        return {}  # the SDK answers it with a parse error
    return message if isinstance(message, dict) else {}
