"""The app of benchmarks/concurrency.py's tools."""

from django.apps import AppConfig


class ConcurrencyToolsConfig(AppConfig):
    name = "benchmarks.concurrency_tools"
    label = "bench_concurrency_tools"
