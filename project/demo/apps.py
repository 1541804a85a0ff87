"""App config of the demo app."""

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "project.demo"
    label = "demo"
    verbose_name = "Demo tools"
    default_auto_field = "django.db.models.BigAutoField"
