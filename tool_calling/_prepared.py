"""Queries whose SQL is built once: a read compiled per thread and database, plain UPDATEs.

Django builds and compiles a queryset's SQL on every evaluation. For most queries that is
noise; for the worker's read of a call (the call, its user, and the re-check of its tool's rules
as a nested subquery with group conditions) it cost about 10 ms of CPU per call against 0.2 ms
in the database, most of a Celery call's time on the worker. :class:`PreparedQuery` compiles the
queryset once, with a marker in place of the one value that changes, and builds the model
instances from each run's rows as Django's own iterable does (``select_related`` objects and
annotations included, the fields' converters applied). :func:`update_rows` does the same for
the conditional UPDATEs of a call's claim and result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from django.db import connections, router, transaction
from django.db.models import Model, QuerySet
from django.db.models.query import get_related_populators

__all__ = ["PreparedQuery", "update_rows"]

_MARKER = -7_212_340_001_977
"""Stands for the value while the SQL is compiled (an id no table of ours holds)."""


class _Compiled:
    __slots__ = ("compiler", "index", "init_list", "params", "populators", "sql", "span")

    def __init__(self, queryset: QuerySet[Any], using: str) -> None:
        compiler = queryset.query.get_compiler(using=using)
        sql, params = compiler.as_sql()
        params = list(params)
        if params.count(_MARKER) != 1:
            raise ValueError("A prepared query takes its value exactly once")
        self.sql = sql
        self.params = params
        self.index = params.index(_MARKER)
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
    """``build(value)`` compiled once per thread and database; :meth:`first` runs it for a value.

    ``build`` must use ``value`` exactly once, as a parameter (``filter(pk=value)``), and nothing
    else that changes between calls (no ``now()`` computed in Python).
    """

    def __init__(self, build: Callable[[Any], QuerySet[Any]]) -> None:
        self._build = build
        # A compiler holds its thread's connection: each thread compiles its own.
        self._local = threading.local()

    def _compiled(self, using: str) -> _Compiled:
        cache: dict[str, _Compiled] | None = getattr(self._local, "cache", None)
        if cache is None:
            cache = self._local.cache = {}
        compiled = cache.get(using)
        # Compiled for this thread's connection of ``using``, which may since have been
        # replaced by one to another database (tests swap them).
        if compiled is None or compiled.compiler.connection is not connections[using]:
            compiled = cache[using] = _Compiled(self._build(_MARKER)[:1], using)
        return compiled

    def first(self, value: Any) -> Model | None:
        """The first object the query finds for ``value``, as ``build(value).first()`` would."""
        model = self._model()
        using = router.db_for_read(model)
        compiled = self._compiled(using)
        params = list(compiled.params)
        params[compiled.index] = value
        with connections[using].cursor() as cursor:
            cursor.execute(compiled.sql, params)
            rows = cursor.fetchmany(1)
        if not rows:
            return None
        compiler = compiled.compiler
        (row,) = compiler.results_iter(results=[rows])
        start, end = compiled.span
        found = model.from_db(using, compiled.init_list, row[start:end])
        for populator in compiled.populators:
            populator.populate(row, found)
        for name, position in (compiler.annotation_col_map or {}).items():
            setattr(found, name, row[position])
        return found

    def _model(self) -> type[Model]:
        model: type[Model] | None = getattr(self, "_model_class", None)
        if model is None:
            model = self._model_class = self._build(_MARKER).model
        return model


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
