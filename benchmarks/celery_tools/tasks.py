"""The raw-Celery baseline: plain tasks, no database, results through the Redis backend."""

import time

from celery import shared_task


@shared_task(name="bench.noop")
def noop() -> str:
    return "ok"


@shared_task(name="bench.sleep")
def sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"
