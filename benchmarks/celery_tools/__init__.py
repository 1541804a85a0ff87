"""Helper app of benchmarks/celery_calls.py: a no-op and a sleeping tool, the raw-Celery baseline's
tasks, and the settings the benchmark process and its workers share."""
