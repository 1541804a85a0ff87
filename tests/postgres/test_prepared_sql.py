"""The worker's compiled read and plain UPDATEs on PostgreSQL and SQLite (WAL), as the ORM's."""

from __future__ import annotations

import pytest

from tests.django.test_prepared_query import (  # noqa: F401 - the fixture is used by name
    calls,
    test_the_compiled_read_finds_what_the_orm_finds,
    test_update_rows_writes_what_the_orms_update_writes,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("backend")]
