"""App configs of tool_calling: ``ToolCallingConfig`` (default) and ``SimpleToolCallingConfig``."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class SimpleToolCallingConfig(AppConfig):
    """tool_calling without autodiscovery of the installed apps' ``tools.py`` modules.

    Use ``"tool_calling.apps.SimpleToolCallingConfig"`` in ``INSTALLED_APPS`` to register tools
    yourself, as ``SimpleAdminConfig`` does for the admin.
    """

    name = "tool_calling"
    label = "tool_calling"
    verbose_name = _("Tool calling")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register checks, hand the core its settings, connect receivers; no database access."""
        import importlib.util

        from django.core import checks
        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_migrate

        from tool_calling import checks as tool_calling_checks
        from tool_calling import observability
        from tool_calling.calls import approvals, notify, policies
        from tool_calling.conf import django_core_settings
        from tool_calling.core._settings import set_core_settings_provider
        from tool_calling.db import sqlite_connection_created
        from tool_calling.runs import receivers
        from tool_calling.sync import post_migrate_sync

        checks.register(tool_calling_checks.check_settings, tool_calling_checks.TAG)
        set_core_settings_provider(django_core_settings)
        # Mirror the registry into the Tool table after migrate (never here: no DB in ready()).
        post_migrate.connect(post_migrate_sync, sender=self, dispatch_uid="tool_calling_sync")
        # SQLite's JSON support asked outside a transaction (a busy database made it "no").
        connection_created.connect(sqlite_connection_created, dispatch_uid="tool_calling_sqlite")
        # Durable runs advance when their calls end (the calls only send signals).
        receivers.connect()
        # Operators' decision policies take effect here at once (other processes within seconds).
        policies.connect()
        # E-mail to approvers when a call waits for them (APPROVALS["NOTIFY_BY_EMAIL"]).
        notify.connect()
        # Approval metrics (decisions, the gauges of waiting calls) when a meter is configured.
        observability.connect(approvals_waiting=approvals.waiting)
        if importlib.util.find_spec("celery") is not None:
            from celery.signals import task_postrun, task_prerun, worker_init

            # Registers the tasks with every Celery app, so calls.dispatch finds them by name.
            from tool_calling import tasks

            # A task continues the trace its sender put in its headers (one trace per turn).
            task_prerun.connect(observability.task_prerun, dispatch_uid="tool_calling_trace_in")
            task_postrun.connect(observability.task_postrun, dispatch_uid="tool_calling_trace_out")
            # Which pool runs the tasks: tool calls keep their time limits on every pool.
            worker_init.connect(tasks.worker_init, dispatch_uid="tool_calling_worker_pool")


class ToolCallingConfig(SimpleToolCallingConfig):
    """The default app config of tool_calling (``"tool_calling"`` in ``INSTALLED_APPS``).

    On top of what ``SimpleToolCallingConfig`` does, it imports every installed app's ``tools``
    module and registers its ``@tool`` functions in ``tool_calling.registry.registry``.
    """

    default = True

    def ready(self) -> None:
        """Do what SimpleToolCallingConfig does, then autodiscover the apps' tools."""
        super().ready()
        from tool_calling.registry import autodiscover

        autodiscover()
