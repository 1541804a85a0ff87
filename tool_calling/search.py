"""Tool search in governed turns: the advisor from settings, finds kept per conversation.

``TOOL_SEARCH`` turns it on. A governed turn with more than ``TOOL_SEARCH["THRESHOLD"]``
tools then offers the model a ``tool_search`` tool and the tools marked "always include" in
the admin; what the searches find is stored per conversation (:class:`DatabaseDiscoveryStore`,
table ``DiscoveredTool``), so the next turn, a durable run's next step on another worker and
the API see it. Search words: each tool's name, description and parameters, its
``ToolMetadata.tags`` and the operators' "search tags" (``Tool.search_tags``).

:class:`PostgresToolIndex` searches with PostgreSQL's full-text search instead of in process.
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import re
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from tool_calling import models
from tool_calling.conf import settings as app_settings
from tool_calling.core.chat.advisors.tool_search import SEARCH_TOOL, ToolSearchToolCallingAdvisor
from tool_calling.core.execution.manager import ToolCallingManager
from tool_calling.core.search.base import Tags, ToolIndex, check_max_results, check_unique
from tool_calling.core.search.discoveries import DiscoveryStore
from tool_calling.core.tools.callback import ToolCallback
from tool_calling.core.tools.definition import ToolDefinition
from tool_calling.repositories import conversation_pk

__all__ = [
    "DatabaseDiscoveryStore",
    "PostgresToolIndex",
    "discovered_tools",
    "is_search_call",
    "search_advisor",
    "tool_index",
]

logger = logging.getLogger("tool_calling.tool_search")


def is_search_call(callback: ToolCallback) -> bool:
    """Whether ``callback`` is the ``tool_search`` tool of a turn (it has no ``Tool`` row)."""
    return callback.definition is SEARCH_TOOL


# -- finds per conversation ---------------------------------------------------------------------


class DatabaseDiscoveryStore(DiscoveryStore):
    """The tools each conversation's searches found, one ``DiscoveredTool`` row per tool.

    One statement per read and per search: a search's finds are written with one
    ``INSERT ... ON CONFLICT (conversation, name) DO UPDATE``, so two searches of the same
    conversation at once (two threads, two workers) never conflict and a tool found again
    moves to the end. A conversation holds at most one row per tool.

    Args:
        remember: Read each conversation once, then serve it from what this store read and
            added. For a store that lives one turn, which holds its conversation (nobody else
            adds to its finds meanwhile): governed turns and each step of a durable run.
    """

    def __init__(self, *, remember: bool = False) -> None:
        self.remember = remember
        """Whether each conversation is read once, then kept."""
        self._known: dict[uuid.UUID, dict[str, None]] = {}
        self._lock = threading.Lock()

    def get(self, conversation_id: str) -> list[str]:
        """The names ``conversation_id`` found, oldest first.

        Raises:
            ValueError: ``conversation_id`` is not a stored conversation's UUID.
        """
        pk = conversation_pk(conversation_id)
        if self.remember:
            with self._lock:
                known = self._known.get(pk)
                if known is not None:
                    return list(known)
        names = list(
            models.DiscoveredTool.objects.filter(conversation_id=pk)
            .order_by("found_at", "pk")
            .values_list("name", flat=True)
        )
        if self.remember:
            with self._lock:
                self._known.setdefault(pk, dict.fromkeys(names))
        return names

    def add(self, conversation_id: str, names: Sequence[str]) -> None:
        """Record ``names`` as the newest finds; a name found again moves to the end."""
        pk = conversation_pk(conversation_id)
        unique = list(dict.fromkeys(names))
        if not unique:
            return
        now = timezone.now()
        # In the given order, as InMemoryDiscoveryStore keeps them.
        rows = [
            models.DiscoveredTool(
                conversation_id=pk,
                name=name[:200],
                found_at=now + datetime.timedelta(microseconds=position),
            )
            for position, name in enumerate(unique)
        ]
        in_transaction = transaction.get_connection().in_atomic_block
        try:
            # A failed INSERT must not break the caller's transaction (PostgreSQL).
            with transaction.atomic() if in_transaction else nullcontext():
                models.DiscoveredTool.objects.bulk_create(
                    rows,
                    update_conflicts=True,
                    unique_fields=["conversation", "name"],
                    update_fields=["found_at"],
                )
        except IntegrityError:
            logger.warning(
                "Conversation %s is gone; the tools its search found are not kept: %s",
                pk,
                ", ".join(unique),
            )
            return
        if self.remember:
            with self._lock:
                known = self._known.get(pk)
                if known is not None:
                    for name in unique:
                        known.pop(name, None)
                        known[name] = None

    def clear(self, conversation_id: str) -> None:
        """Forget what ``conversation_id`` found."""
        pk = conversation_pk(conversation_id)
        models.DiscoveredTool.objects.filter(conversation_id=pk).delete()
        with self._lock:
            self._known.pop(pk, None)


def discovered_tools(conversation: models.Conversation) -> list[str]:
    """The tools ``conversation``'s searches found, oldest first (for the admin and the API)."""
    return DatabaseDiscoveryStore().get(str(conversation.pk))


# -- a PostgreSQL full-text index ---------------------------------------------------------------

_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_WORD = re.compile(r"[^\W_]+")

_DOCUMENTS_SQL = r"""
SELECT t.name, (
    setweight(to_tsvector(%(config)s::regconfig, regexp_replace(
        regexp_replace(t.name, '([a-z0-9])([A-Z])', '\1 \2', 'g'),
        '[^[:alnum:]]+', ' ', 'g')), 'A')
    || setweight(to_tsvector(%(config)s::regconfig,
        coalesce(%(tags)s::jsonb ->> t.name, '')), 'B')
    || setweight(to_tsvector(%(config)s::regconfig, t.description), 'C')
    || setweight(jsonb_to_tsvector(%(config)s::regconfig, t.input_schema, '["string"]'), 'D')
)::text
FROM {table} t
WHERE t.name = ANY(%(names)s)
"""
"""Each indexed tool's document, built once per tool set from its ``Tool`` row."""

_SEARCH_SQL = r"""
SELECT d.name
FROM unnest(%(names)s::text[], %(documents)s::tsvector[])
    WITH ORDINALITY AS d(name, document, position)
CROSS JOIN to_tsquery(%(config)s::regconfig, %(query)s) q
WHERE d.document @@ q OR d.name = %(exact)s
ORDER BY d.name = %(exact)s DESC, ts_rank(d.document, q) DESC, d.position
LIMIT %(limit)s
"""
"""One search: the query ranked against the documents (sent with it, nothing is written)."""


class PostgresToolIndex(ToolIndex):
    """PostgreSQL full-text search over the ``Tool`` rows of the tools it indexed.

    :meth:`index` builds each tool's ``tsvector`` from its ``Tool`` row in one query: the name
    (split at ``_``, ``.``, ``-`` and camelCase) weighs most, then the tags given to it, the
    description, then the parameters' texts. Each search is one query that ranks those
    documents with ``ts_rank`` (the query's words OR-ed and stemmed by the text search
    configuration); a query that is exactly a tool name finds that tool first. Only the indexed
    tools can be found (a search never finds a tool the turn does not offer), and tools without
    a ``Tool`` row (not synced) are never found.

    Args:
        config: The text search configuration (``english``, ``simple``, ``german``...).
        using: The database alias; it must be PostgreSQL.
    """

    def __init__(self, *, config: str = "english", using: str = DEFAULT_DB_ALIAS) -> None:
        self.config = config
        """The text search configuration."""
        self.using = using
        """The database alias."""
        self._names: list[str] = []
        self._documents: list[str] = []

    def index(self, definitions: Sequence[ToolDefinition], *, tags: Tags | None = None) -> None:
        """Build the documents of ``definitions`` from their ``Tool`` rows (one query).

        Raises:
            ValueError: two definitions share a name.
            ImproperlyConfigured: the database is not PostgreSQL.
        """
        check_unique(definitions)
        connection = connections[self.using]
        if connection.vendor != "postgresql":
            raise ImproperlyConfigured(
                f"PostgresToolIndex searches with PostgreSQL's full-text search, but the "
                f"database {self.using!r} is {connection.vendor}. Set "
                "TOOL_CALLING['TOOL_SEARCH']['INDEX'] to another index, e.g. the default "
                "'tool_calling.core.search.lexical.LexicalToolIndex'."
            )
        names = [d.name for d in definitions]
        known = set(names)
        words = {name: " ".join(w) for name, w in (tags or {}).items() if name in known}
        table = connection.ops.quote_name(models.Tool._meta.db_table)
        parameters: dict[str, Any] = {
            "config": self.config,
            "tags": json.dumps(words),
            "names": names,
        }
        with connection.cursor() as cursor:
            cursor.execute(_DOCUMENTS_SQL.format(table=table), parameters)
            documents = dict(cursor.fetchall())
        # In the order given: ties rank in that order.
        self._names = [name for name in names if name in documents]
        self._documents = [documents[name] for name in self._names]

    def search(self, query: str, max_results: int = 5) -> list[str]:
        """The best-ranked tool names for ``query``; see :class:`ToolIndex`."""
        check_max_results(max_results)
        words = _WORD.findall(_CAMEL.sub(r"\1 \2", query))
        if not self._names or not words:
            return []
        parameters: dict[str, Any] = {
            "config": self.config,
            # Letters and digits only: nothing in it is tsquery syntax.
            "query": " | ".join(words),
            "names": self._names,
            "documents": self._documents,
            "exact": query.strip(),
            "limit": max_results,
        }
        with connections[self.using].cursor() as cursor:
            cursor.execute(_SEARCH_SQL, parameters)
            return [row[0] for row in cursor.fetchall()]

    def clear(self) -> None:
        """Forget the indexed tools."""
        self._names = []
        self._documents = []

    def __repr__(self) -> str:
        return f"<PostgresToolIndex: {len(self._names)} tools, {self.config!r}>"


# -- the advisor of governed turns --------------------------------------------------------------


@functools.cache
def _imported(path: str) -> Any:
    try:
        return import_string(path)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f'Could not import {path!r} for \'TOOL_CALLING["TOOL_SEARCH"]["INDEX"]\': {exc}'
        ) from exc


def tool_index() -> type[ToolIndex] | Callable[[], ToolIndex] | ToolIndex:
    """The index of governed turns' searches (``TOOL_SEARCH["INDEX"]``), imported once.

    Raises:
        ImproperlyConfigured: the dotted path does not import.
    """
    configured = app_settings.TOOL_SEARCH["INDEX"]
    found = _imported(configured) if isinstance(configured, str) else configured
    return found  # type: ignore[no-any-return]


def search_advisor(
    manager: ToolCallingManager,
    rows: Mapping[str, models.Tool],
    *,
    conversation_history_enabled: bool,
) -> ToolSearchToolCallingAdvisor | None:
    """The tool loop of a governed turn with search, or ``None`` when ``TOOL_SEARCH`` is off.

    Args:
        manager: The turn's manager (it runs and audits the calls).
        rows: The ``Tool`` rows of the turn's tools (their search tags and "always include").
        conversation_history_enabled: Off when the memory advisor is inside the loop.

    Raises:
        ImproperlyConfigured: ``TOOL_SEARCH["INDEX"]`` does not import.
        ValueError: ``MAX_RESULTS`` or ``THRESHOLD`` is out of range.
    """
    config = app_settings.TOOL_SEARCH
    if not config["ENABLED"]:
        return None
    return ToolSearchToolCallingAdvisor(
        tool_index(),
        max_results=config["MAX_RESULTS"],
        always_include=[name for name, row in rows.items() if row.always_include],
        tool_calling_manager=manager,
        conversation_history_enabled=conversation_history_enabled,
        # One store per turn, which holds its conversation: read once, then kept.
        discoveries=DatabaseDiscoveryStore(remember=True),
        search_threshold=config["THRESHOLD"],
        tags={name: row.search_tag_list for name, row in rows.items() if row.search_tags},
    )
