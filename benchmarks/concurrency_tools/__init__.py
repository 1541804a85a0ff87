"""Helper app of benchmarks/concurrency.py: a tool that sleeps, and the settings that install it.

``DJANGO_SETTINGS_MODULE=benchmarks.concurrency_tools.settings`` is the example project's
settings plus this app, so the main job started by scripts/devserver.py (whose children read
the variable) runs the sleeping tool on its worker.
"""
