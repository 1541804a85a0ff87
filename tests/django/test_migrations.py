"""The migrations of tool_calling match its models, whatever the project's DEFAULT_AUTO_FIELD."""

import re
from collections import Counter
from io import StringIO
from pathlib import Path

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import models as db_models
from django.db.migrations.loader import MigrationLoader
from django.test import override_settings

import tool_calling.migrations

MIGRATIONS = Path(tool_calling.migrations.__file__).parent


def makemigrations_check():
    out = StringIO()
    call_command(
        "makemigrations", "tool_calling", "--check", "--dry-run", stdout=out, stderr=StringIO()
    )
    return out.getvalue()


@pytest.mark.django_db
def test_makemigrations_finds_no_changes():
    assert makemigrations_check() == "No changes detected in app 'tool_calling'\n"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "auto_field", ["django.db.models.BigAutoField", "django.db.models.AutoField"]
)
def test_makemigrations_finds_no_changes_under_any_default_auto_field(auto_field):
    """The app pins default_auto_field, so the project's choice does not create a migration."""
    with override_settings(DEFAULT_AUTO_FIELD=auto_field):
        assert makemigrations_check() == "No changes detected in app 'tool_calling'\n"


def test_every_integer_primary_key_is_the_pinned_big_auto_field():
    for model in apps.get_app_config("tool_calling").get_models():
        pk = model._meta.pk
        assert isinstance(pk, db_models.BigAutoField | db_models.UUIDField), model


def test_no_two_migrations_share_a_number():
    names = [p.stem for p in MIGRATIONS.glob("[0-9]*.py")]
    assert names, "tool_calling has no migrations"
    numbers = Counter(re.match(r"\d+", name).group() for name in names)
    assert [number for number, count in numbers.items() if count > 1] == []


def test_the_migration_graph_has_a_single_leaf():
    loader = MigrationLoader(None, ignore_no_migrations=True)
    assert loader.detect_conflicts() == {}
    assert [key for key in loader.graph.leaf_nodes() if key[0] == "tool_calling"] == [
        ("tool_calling", sorted(p.stem for p in MIGRATIONS.glob("[0-9]*.py"))[-1])
    ]
