"""ToolSearchToolCallingAdvisor: the tool loop, offering tools only once a search found them."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Annotated

import pydantic

from tool_calling.core.chat.advisors.base import (
    HIGHEST_PRECEDENCE,
    AdvisorChain,
    ChatClientRequest,
)
from tool_calling.core.chat.advisors.tool_calling import DEFAULT_MAX_TOOL_ROUNDS, ToolCallingAdvisor
from tool_calling.core.chat.memory import ChatMemory
from tool_calling.core.chat.prompt import ToolCallingChatOptions
from tool_calling.core.errors import (
    ToolArgumentsError,
    ToolDefinitionError,
    ToolFailure,
    ToolSearchQueryError,
)
from tool_calling.core.execution.eligibility import ToolExecutionEligibilityPredicate
from tool_calling.core.execution.manager import ToolCallingManager
from tool_calling.core.search.base import ToolIndex
from tool_calling.core.search.discoveries import DiscoveryStore, InMemoryDiscoveryStore
from tool_calling.core.search.lexical import LexicalToolIndex
from tool_calling.core.tools.callback import ToolCallback
from tool_calling.core.tools.context import ToolContext
from tool_calling.core.tools.definition import ToolDefinition
from tool_calling.core.tools.schema import describe_validation_error

__all__ = [
    "INDEX_CACHE_SIZE",
    "MAX_QUERY_CHARS",
    "MAX_SEARCH_RESULTS",
    "SEARCH_TOOL",
    "SEARCH_TOOL_NAME",
    "ToolSearchToolCallingAdvisor",
    "tool_set_fingerprint",
]

logger = logging.getLogger("tool_calling.tool_search")

SEARCH_TOOL_NAME = "tool_search"
"""Name of the search tool the advisor offers the model."""
MAX_SEARCH_RESULTS = 10
"""Most tools one search may return."""
MAX_QUERY_CHARS = 500
"""Longest query accepted, in characters."""
INDEX_CACHE_SIZE = 32
"""Tool sets whose index is kept at once (per index factory); the least recently used goes."""

SEARCH_TOOL = ToolDefinition(
    SEARCH_TOOL_NAME,
    "Find tools by what they do. Only some of your tools are listed; call this with a few words "
    "describing the capability you need (an action and its object, e.g. 'create calendar "
    "event' or 'list github pull requests'). The tools it finds become callable in your next "
    "step. Search again with other words if none fits.",
    {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "What the tool should do, in a few keywords.",
            },
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_SEARCH_RESULTS,
                "description": f"How many tools to return (1-{MAX_SEARCH_RESULTS}).",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)
"""The definition of the search tool (the same for every request, so it caches well)."""

_TURN = "tool_calling.tool_search.turn"
"""Request-context key of the turn's search state (private to this module)."""


class _SearchArguments(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)

    query: str
    max_results: Annotated[int, pydantic.Field(ge=1, le=MAX_SEARCH_RESULTS)] | None = None


# -- fingerprints and the index cache -------------------------------------------------------

_digests: dict[ToolDefinition, str] = {}
_DIGESTS_SIZE = 8192


def _digest(definition: ToolDefinition) -> str:
    found = _digests.get(definition)
    if found is None:
        text = json.dumps(
            [definition.name, definition.description, definition.input_schema],
            sort_keys=True,
            default=str,
        )
        found = hashlib.sha256(text.encode()).hexdigest()
        if len(_digests) >= _DIGESTS_SIZE:
            _digests.clear()
        _digests[definition] = found
    return found


def tool_set_fingerprint(
    definitions: Iterable[ToolDefinition], tags: dict[str, tuple[str, ...]] | None = None
) -> str:
    """Return a digest of a tool set (names, descriptions, schemas, tags), whatever its order.

    Two requests with the same fingerprint search the same index; a changed description, schema
    or tag gives another fingerprint, so the tool set is indexed again.
    """
    tags = tags or {}
    parts = sorted(f"{_digest(d)}:{json.dumps(sorted(tags.get(d.name, ())))}" for d in definitions)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


IndexSource = ToolIndex | Callable[[], ToolIndex]


class _IndexCache:
    """Indexes built by factories, one per ``(factory, fingerprint)``, least recently used out."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[int, str], tuple[object, ToolIndex]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(
        self,
        factory: Callable[[], ToolIndex],
        fingerprint: str,
        definitions: Sequence[ToolDefinition],
        tags: dict[str, tuple[str, ...]],
    ) -> ToolIndex:
        key = (id(factory), fingerprint)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                return hit[1]
        index = factory()
        if not isinstance(index, ToolIndex):
            raise TypeError(
                f"The tool_index factory {factory!r} returned {type(index).__name__}, "
                "not a ToolIndex."
            )
        # Built outside the lock: indexing a large tool set must not stall other searches.
        index.index(definitions, tags=tags)
        with self._lock:
            # The entry holds the factory, so its id cannot be reused while the entry lives.
            self._entries[key] = (factory, index)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return index


_indexes = _IndexCache(INDEX_CACHE_SIZE)


class _SharedIndex:
    """The state of one ``ToolIndex`` instance that serves every tool set it is given."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fingerprint: str | None = None


_shared: dict[int, _SharedIndex] = {}
_shared_lock = threading.Lock()


def _shared_state(index: ToolIndex) -> _SharedIndex:
    key = id(index)
    with _shared_lock:
        state = _shared.get(key)
        if state is None:
            state = _shared[key] = _SharedIndex()
            weakref.finalize(index, _shared.pop, key, None)
        return state


def _search(
    source: IndexSource,
    definitions: Sequence[ToolDefinition],
    tags: dict[str, tuple[str, ...]],
    fingerprint: str,
    query: str,
    max_results: int,
) -> list[str]:
    if isinstance(source, ToolIndex):
        state = _shared_state(source)
        with state.lock:
            if state.fingerprint != fingerprint:
                source.index(definitions, tags=tags)
                state.fingerprint = fingerprint
            return source.search(query, max_results)
    return _indexes.get(source, fingerprint, definitions, tags).search(query, max_results)


# -- one turn ---------------------------------------------------------------------------------


class _SearchTurn:
    """What one turn searches and what it found (lives in the request context, not on self)."""

    def __init__(
        self,
        advisor: ToolSearchToolCallingAdvisor,
        definitions: list[ToolDefinition],
        tags: dict[str, tuple[str, ...]],
        conversation_id: str | None,
    ) -> None:
        self.source = advisor._index_source
        self.max_results = advisor.max_results
        self.max_discovered = advisor.max_discovered
        self.store = advisor.discoveries
        self.definitions = definitions
        self.tags = tags
        self.names = [d.name for d in definitions]
        self.known = frozenset(self.names)
        self.pinned = [n for n in self.names if n in advisor.always_include]
        self.conversation_id = conversation_id
        self._found: dict[str, None] = {}  # this turn's finds when there is no conversation
        self._lock = threading.Lock()  # two searches of one batch run in two threads
        self._fingerprint: str | None = None
        self.callback = _SearchToolCallback(self)

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = tool_set_fingerprint(self.definitions, self.tags)
        return self._fingerprint

    def discovered(self) -> list[str]:
        if self.conversation_id is None:
            with self._lock:
                found = list(self._found)
        else:
            found = self.store.get(self.conversation_id)
        pinned = set(self.pinned)
        kept = [n for n in found if n in self.known and n not in pinned]
        return kept[-self.max_discovered :] if self.max_discovered else []

    def record(self, names: Sequence[str]) -> None:
        if self.conversation_id is None:
            with self._lock:
                for name in names:
                    self._found.pop(name, None)
                    self._found[name] = None
        else:
            self.store.add(self.conversation_id, names)

    def search(self, query: str, max_results: int) -> list[str]:
        found = _search(
            self.source, self.definitions, self.tags, self.fingerprint, query, max_results
        )
        # An index must never widen the tool set: only the request's tools can be offered.
        unique = [n for n in dict.fromkeys(found) if n in self.known]
        return unique[:max_results]


def _search_arguments(tool_input: str | None) -> _SearchArguments:
    text = tool_input if tool_input and tool_input.strip() else "{}"
    try:
        return _SearchArguments.model_validate_json(text)
    except pydantic.ValidationError as exc:
        raise ToolArgumentsError(
            SEARCH_TOOL_NAME, describe_validation_error(SEARCH_TOOL_NAME, exc)
        ) from exc


class _SearchToolCallback(ToolCallback):
    """The ``tool_search`` tool of one turn."""

    def __init__(self, turn: _SearchTurn) -> None:
        self._turn = turn

    @property
    def definition(self) -> ToolDefinition:
        """The search tool's definition (``SEARCH_TOOL``)."""
        return SEARCH_TOOL

    def validate_arguments(self, tool_input: str | None) -> None:
        """Check ``tool_input`` against the search tool's schema, without searching.

        Raises:
            ToolArgumentsError: the arguments do not fit the search tool's schema.
        """
        _search_arguments(tool_input)

    def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        """Search the turn's tools and make what was found callable from the next model call.

        Raises:
            ToolArgumentsError: the arguments do not fit the search tool's schema.
            ToolFailure: the query is empty, too long, has no words or is an invalid pattern.
        """
        arguments = _search_arguments(tool_input)
        query = arguments.query.strip()
        requested = arguments.max_results
        max_results = requested if requested is not None else self._turn.max_results
        if not query:
            raise ToolFailure(
                "The search query is empty. Describe the tool you need in a few words, "
                "for example 'send an email' or 'create calendar event'."
            )
        if len(query) > MAX_QUERY_CHARS:
            raise ToolFailure(
                f"The search query is too long ({len(query)} characters). "
                f"Send a few keywords, at most {MAX_QUERY_CHARS} characters."
            )
        if not any(c.isalnum() for c in query):
            raise ToolFailure(
                f"The search query {query!r} has no words to search for. Describe the "
                "capability you need in words, for example 'list invoices'."
            )
        try:
            names = self._turn.search(query, max_results)
        except ToolSearchQueryError as exc:
            raise ToolFailure(str(exc)) from exc
        if not names:
            return (
                f"No tools match {query!r}. Try other words: what the tool does and on what, "
                "for example 'list invoices' or 'github pull request'."
            )
        self._turn.record(names)
        logger.debug("tool_search %r found %s", query, names)
        count = f"{len(names)} tool" + ("s" if len(names) > 1 else "")
        return f"Found {count}, now available to call: {', '.join(names)}."


# -- the advisor -----------------------------------------------------------------------------


class ToolSearchToolCallingAdvisor(ToolCallingAdvisor):
    """A ``ToolCallingAdvisor`` that offers the model a search tool instead of every tool.

    The first model call of a turn gets only ``tool_search`` and the pinned tools
    (``always_include``); each search makes the tools it found callable from the next call on.
    What a conversation found is kept in ``discoveries`` under its conversation id
    (``.conversation_id(...)``), so it survives the next turn, conversation history being off
    and a memory advisor inside the loop; without a conversation id it lasts one turn. Only the
    tools offered to the model can run: a call of a tool not found yet is answered like an
    unknown tool, with the names that are available.

    Each tool set is indexed once: indexes are kept by the fingerprint of the definitions and
    tags (``tool_set_fingerprint``), up to ``INDEX_CACHE_SIZE`` tool sets per index factory,
    least recently used out. Return-direct tools, call limits (``tool_search`` counts like any
    tool), the round limit and streaming behave as in ``ToolCallingAdvisor``.

    Args:
        tool_index: A ``ToolIndex`` class or a function returning a new index (one index per
            tool set), or a ``ToolIndex`` instance (it serves one tool set at a time and is
            indexed again when the tool set changes). Default: ``LexicalToolIndex``.
        max_results: Tools a search returns when the model does not say (1-10).
        always_include: Names of tools offered on every call without a search (pinned), if the
            request has them.
        tool_calling_manager: Executes the calls; a ``DefaultToolCallingManager`` by default.
        order: Position in the chain.
        conversation_history_enabled: As in ``ToolCallingAdvisor``.
        discoveries: Where each conversation's finds are kept; a process-local
            ``InMemoryDiscoveryStore`` of this advisor by default.
        max_discovered: Found tools offered at most (the most recently found), pinned tools
            aside.
        search_threshold: Offer every tool directly, without search, when the request has at
            most this many tools.
        tags: Extra search words per tool name, added to the ``tags`` of each tool's
            ``ToolMetadata``.
        eligibility: As in ``ToolCallingAdvisor``.
        max_tool_rounds: As in ``ToolCallingAdvisor``.

    Raises:
        ValueError: a bad ``max_results``, ``max_discovered`` or ``search_threshold``.
        TypeError: ``tool_index`` is neither an index nor a way to make one.
    """

    def __init__(
        self,
        tool_index: IndexSource | None = None,
        max_results: int = 5,
        always_include: Iterable[str] = (),
        *,
        tool_calling_manager: ToolCallingManager | None = None,
        order: int = HIGHEST_PRECEDENCE + 300,
        conversation_history_enabled: bool = True,
        discoveries: DiscoveryStore | None = None,
        max_discovered: int = 20,
        search_threshold: int = 0,
        tags: Mapping[str, Sequence[str]] | None = None,
        eligibility: ToolExecutionEligibilityPredicate | None = None,
        max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS,
    ) -> None:
        super().__init__(
            tool_calling_manager,
            order,
            conversation_history_enabled,
            eligibility=eligibility,
            max_tool_rounds=max_tool_rounds,
        )
        if tool_index is None:
            tool_index = LexicalToolIndex
        elif isinstance(tool_index, type) and not issubclass(tool_index, ToolIndex):
            raise TypeError(
                f"tool_index must be a ToolIndex, a ToolIndex class or a function returning "
                f"one, got the class {tool_index.__qualname__}."
            )
        elif not isinstance(tool_index, ToolIndex) and not callable(tool_index):
            raise TypeError(
                f"tool_index must be a ToolIndex, a ToolIndex class or a function returning "
                f"one, got {type(tool_index).__name__}."
            )
        self._index_source: IndexSource = tool_index
        if (
            isinstance(max_results, bool)
            or not isinstance(max_results, int)
            or not 1 <= max_results <= MAX_SEARCH_RESULTS
        ):
            raise ValueError(
                f"max_results must be an integer from 1 to {MAX_SEARCH_RESULTS}, "
                f"got {max_results!r}"
            )
        self.max_results = max_results
        """Tools a search returns when the model does not say."""
        if isinstance(always_include, str):
            always_include = [always_include]
        self.always_include: frozenset[str] = frozenset(always_include)
        """Tools offered on every call without a search."""
        self.discoveries: DiscoveryStore = (
            discoveries if discoveries is not None else InMemoryDiscoveryStore()
        )
        """Where each conversation's finds are kept."""
        for label, value in (
            ("max_discovered", max_discovered),
            ("search_threshold", search_threshold),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{label} must be an integer >= 0, got {value!r}")
        self.max_discovered = max_discovered
        """Found tools offered at most."""
        self.search_threshold = search_threshold
        """Tool count up to which every tool is offered directly."""
        self.tags: dict[str, tuple[str, ...]] = {
            name: tuple(words) for name, words in (tags or {}).items()
        }
        """Extra search words per tool name."""

    @property
    def tool_index(self) -> IndexSource:
        """The index, index class or index factory searches use."""
        return self._index_source

    def _tags(self, callbacks: Sequence[ToolCallback]) -> dict[str, tuple[str, ...]]:
        tags: dict[str, tuple[str, ...]] = {}
        for callback in callbacks:
            declared = callback.metadata.tags
            if declared:
                tags[callback.definition.name] = tuple(declared)
        for name, extra in self.tags.items():
            tags[name] = (*tags.get(name, ()), *extra)
        return tags

    def initialize_loop(self, request: ChatClientRequest, chain: AdvisorChain) -> ChatClientRequest:
        """Set up the turn's search unless the request has no tools or only a few."""
        options = request.prompt.options
        if not isinstance(options, ToolCallingChatOptions):
            return request
        if options.internal_tool_execution_enabled is False:
            return request  # the caller runs the calls and could not run tool_search
        if not options.tool_callbacks and not options.tool_names:
            return request
        definitions = self.tool_calling_manager.resolve_tool_definitions(options)
        if len(definitions) <= self.search_threshold:
            return request
        if any(d.name == SEARCH_TOOL_NAME for d in definitions):
            raise ToolDefinitionError(
                f"A tool of the request is named {SEARCH_TOOL_NAME!r}, the name of the search "
                "tool of ToolSearchToolCallingAdvisor; rename it with @tool(name=...)."
            )
        conversation_id = request.context.get(ChatMemory.CONVERSATION_ID)
        turn = _SearchTurn(
            self,
            definitions,
            self._tags(options.tool_callbacks),
            str(conversation_id) if conversation_id else None,
        )
        return ChatClientRequest(request.prompt, {**request.context, _TURN: turn})

    def before_call(self, request: ChatClientRequest, chain: AdvisorChain) -> ChatClientRequest:
        """Offer the search tool, the pinned tools and the tools found so far."""
        turn = request.context.get(_TURN)
        options = request.prompt.options
        if not isinstance(turn, _SearchTurn) or not isinstance(options, ToolCallingChatOptions):
            return request
        visible = [*turn.pinned, *turn.discovered()]
        by_name = {cb.definition.name: cb for cb in options.tool_callbacks}
        callbacks: list[ToolCallback] = [turn.callback]
        callbacks += [by_name[n] for n in visible if n in by_name]
        named = [n for n in visible if n not in by_name and n in options.tool_names]
        narrowed = options.copy(tool_callbacks=callbacks, tool_names=named)
        return request.with_prompt(request.prompt.copy(options=narrowed))
