"""Queries whose SQL is built once: a read compiled per process and database, plain UPDATEs.

Django builds and compiles a queryset's SQL on every evaluation. For most queries that is
noise; for the worker's read of a call (the call, its user, and the re-check of its tool's rules
as a nested subquery with group conditions) it cost about 10 ms of CPU per call against 0.2 ms
in the database, most of a Celery call's time on the worker. :class:`PreparedQuery` compiles the
queryset once, with markers in place of the values that change, and builds the model
instances from each run's rows as Django's own iterable does (``select_related`` objects and
annotations included, the fields' converters applied). :func:`update_rows` does the same for
the conditional UPDATEs of a call's claim and result.

Brittle on purpose, and kept in this one module: it relies on Django internals that are not a
public API (``Query.get_compiler``, ``SQLCompiler.as_sql``, ``select``, ``klass_info`` and
``results_iter``, ``get_related_populators``, ``Model.from_db``). A query it cannot compile falls
back to the ORM, logged, and is counted (:attr:`PreparedQuery.fallbacks`); the test suite fails
when one of the app's queries falls back, and ``pyproject.toml`` keeps Django below the next
major version until these internals are checked against it.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connections, router, transaction
from django.db.models import Model, QuerySet
from django.db.models.query import get_related_populators

__all__ = ["PREPARED", "PreparedQuery", "update_rows"]

logger = logging.getLogger("tool_calling.db")

_MARKER = -7_212_340_001_977
"""Stands for the first value while the SQL is compiled (an id no table of ours holds); the
next values get the next lower numbers."""


_MAX_SHAPES = 64
"""Compiled queries a process keeps per prepared query."""


PREPARED: weakref.WeakSet[PreparedQuery] = weakref.WeakSet()
"""Every :class:`PreparedQuery` made in this process (the tests check the app's)."""


def _markers(count: int) -> tuple[int, ...]:
    return tuple(_MARKER - number for number in range(count))


class _NotPreparable(Exception):
    pass


class _Compiled:
    __slots__ = ("compiler", "init_list", "params", "populators", "positions", "sql", "span")

    def __init__(self, queryset: QuerySet[Any], using: str, count: int) -> None:
        compiler = queryset.query.get_compiler(using=using)
        sql, params = compiler.as_sql()
        params = list(params)
        positions = []
        for marker in _markers(count):
            # A text field's lookup turns the marker into its text.
            found = [i for i, param in enumerate(params) if param in (marker, str(marker))]
            if not found:
                raise _NotPreparable("a value is not among the compiled query's parameters")
            positions.append(tuple(found))
        self.sql = sql
        self.params = params
        self.positions = tuple(positions)
        self.compiler = compiler
        # What ModelIterable does with a compiled query (django/db/models/query.py).
        select, klass_info = compiler.select, compiler.klass_info
        assert klass_info is not None
        fields = klass_info["select_fields"]
        self.span = (fields[0], fields[-1] + 1)
        self.init_list = [field[0].target.attname for field in select[self.span[0] : self.span[1]]]
        # django-stubs describes Django 6 here, whose version takes a fetch mode too.
        self.populators = get_related_populators(klass_info, select, using)  # type: ignore[call-arg]


class PreparedQuery:
    """``build(*values)`` compiled once per process, database and shape; run for new values.

    ``build`` must use each value as a parameter (``filter(pk=value)``; more than once is
    fine), and nothing else that changes between calls (no ``now()`` computed in Python).
    Queries whose structure varies take a hashable ``shape`` first, ``build(shape, *values)``:
    one compiled query per shape (keep the number of shapes small: each is kept).

    Every thread of the process runs the one compiled query on its own connection: compiled
    per thread, a worker's hundreds of threads each paid the compilation (20 ms of CPU) again.
    The compiler kept with it only converts rows (its connection's operations, which hold no
    state of a thread); it never runs a query.
    """

    def __init__(
        self, model: type[Model], build: Callable[..., QuerySet[Any]], *, shaped: bool = False
    ) -> None:
        self._model = model
        self._build = build
        self._shaped = shaped
        self._cache: dict[tuple[Any, ...], _Compiled | None] = {}
        self._lock = threading.Lock()
        self.compiled = 0
        """Queries compiled once so far (per database and shape)."""
        self.fallbacks = 0
        """Times a query could not be compiled and was left to the ORM."""
        PREPARED.add(self)

    @property
    def module(self) -> str:
        """The module whose ``build`` this is (where the query is written)."""
        return str(getattr(self._build, "__module__", ""))

    def forget(self) -> None:
        """Drop the compiled queries: the next run compiles them again."""
        with self._lock:
            self._cache = {}

    def _queryset(self, shape: Any, values: tuple[Any, ...]) -> QuerySet[Any]:
        return self._build(shape, *values) if self._shaped else self._build(*values)

    def _compiled(self, using: str, shape: Any, count: int, limit: int | None) -> _Compiled | None:
        """The compiled query; ``None`` when it cannot be (the ORM then builds it each time)."""
        connection = connections[using]
        # The database behind ``using`` may change (tests swap databases): part of the key.
        database = (connection.vendor, id(connection.settings_dict))
        key = (using, database, shape, count, limit)
        cache = self._cache
        if key in cache:
            return cache[key]
        with self._lock:
            if key in cache:
                return cache[key]
            if len(cache) >= _MAX_SHAPES:
                cache.clear()  # shapes that came and went (tool sets of tests, mostly)
            try:
                queryset = self._queryset(shape, _markers(count))
                if limit is not None:
                    queryset = queryset[:limit]
                compiled = _Compiled(queryset, using, count)
                self.compiled += 1
            except (TypeError, ValueError, ValidationError, _NotPreparable) as exc:
                self.fallbacks += 1
                # A value a field converts (a UUID primary key) cannot stand in as a marker:
                # the ORM builds this shape each time, as it would without this class.
                logger.warning(
                    "%s: cannot compile %s once (%s); Django builds it on every call",
                    __name__,
                    self._model.__name__,
                    exc,
                )
                compiled = None
            cache[key] = compiled
            return compiled

    def first(self, *values: Any, shape: Any = None) -> Model | None:
        """The first object the query finds, as ``build(*values)[:1]`` would."""
        found = self._run(values, shape, limit=1)
        return found[0] if found else None

    def all(self, *values: Any, shape: Any = None) -> list[Model]:
        """Every object the query finds, as ``list(build(*values))`` would."""
        return self._run(values, shape, limit=None)

    def _run(self, values: tuple[Any, ...], shape: Any, limit: int | None) -> list[Model]:
        model = self._model
        using = router.db_for_read(model)
        compiled = self._compiled(using, shape, len(values), limit)
        if compiled is None:
            queryset = self._queryset(shape, values)
            return list(queryset[:limit] if limit is not None else queryset)
        params = list(compiled.params)
        for positions, value in zip(compiled.positions, values, strict=True):
            for position in positions:
                params[position] = value
        with connections[using].cursor() as cursor:
            cursor.execute(compiled.sql, params)
            rows = cursor.fetchall()
        if not rows:
            return []
        compiler = compiled.compiler
        start, end = compiled.span
        annotations = list((compiler.annotation_col_map or {}).items())
        found = []
        for row in compiler.results_iter(results=[rows]):
            instance = model.from_db(using, compiled.init_list, row[start:end])
            for populator in compiled.populators:
                populator.populate(row, instance)
            for name, position in annotations:
                setattr(instance, name, row[position])
            found.append(instance)
        return found


_UPDATES: dict[tuple[Any, ...], str] = {}


def update_rows(model: type[Model], where: Mapping[str, Any], values: Mapping[str, Any]) -> int:
    """``model.objects.filter(**where).update(**values)``, its SQL written once; rows updated.

    For the hottest conditional UPDATEs (a worker's claim and result): the ORM builds and
    compiles an UPDATE in about as much CPU as SQLite takes to run it. ``where`` holds plain
    equalities on fields (a tuple or list: ``IN``), ``values`` plain values (no expressions);
    each is prepared by its field, as the ORM prepares it.
    """
    using = router.db_for_write(model)
    connection = connections[using]
    meta = model._meta

    def field(name: str) -> Any:
        return meta.pk if name == "pk" else meta.get_field(name)

    shape = tuple(
        (name, len(value) if isinstance(value, tuple | list) else -1)
        for name, value in where.items()
    )
    key = (using, connection.vendor, model, shape, tuple(values))
    sql = _UPDATES.get(key)
    if sql is None:
        quote = connection.ops.quote_name
        assignments = ", ".join(f"{quote(field(name).column)} = %s" for name in values)
        conditions = []
        for name, count in shape:
            column = quote(field(name).column)
            if count < 0:
                conditions.append(f"{column} = %s")
            else:
                conditions.append(f"{column} IN ({', '.join(['%s'] * count)})" if count else "0=1")
        sql = f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {' AND '.join(conditions)}"
        _UPDATES[key] = sql
    params: list[Any] = []
    for name, value in values.items():
        if hasattr(value, "resolve_expression"):
            raise TypeError(f"update_rows takes plain values, not {value!r} for {name!r}")
        params.append(field(name).get_db_prep_save(value, connection))
    for name, value in where.items():
        target = field(name)
        if isinstance(value, tuple | list):
            params.extend(target.get_db_prep_value(item, connection) for item in value)
        else:
            params.append(target.get_db_prep_value(value, connection))
    with transaction.mark_for_rollback_on_error(using), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)
