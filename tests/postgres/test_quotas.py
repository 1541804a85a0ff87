"""S8: atomic quotas. 50 concurrent requests against a quota of 10 run the tool at most 10 times.

Every test runs on PostgreSQL (marked ``postgres``) and on a SQLite file in WAL mode (see
conftest.py). Each request is a governed turn on a thread of its own, with its own database
connection, released together by a barrier; the tool counts its runs in this process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connections

from tool_calling import models, tool
from tool_calling.governance import governed_chat_client
from tool_calling.registry import ToolRegistry
from tool_calling.sync import sync_tools
from tool_calling.testing import ScriptedChatModel, text, tool_call

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("backend")]

REQUESTS = 50
QUOTA = 10
JOIN_SECONDS = 120.0

_runs = 0
_runs_lock = threading.Lock()


@tool
def charge(key: str) -> str:
    """Charge a card (counts its runs)."""
    global _runs
    with _runs_lock:
        _runs += 1
    return f"charged {key}"


def _registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(charge, source="tests")
    return registry


def _concurrently(target: Callable[[int], Any], count: int) -> dict[int, BaseException]:
    """Run ``target(index)`` on ``count`` threads released together; their exceptions."""
    errors: dict[int, BaseException] = {}
    barrier = threading.Barrier(count)

    def run(index: int) -> None:
        try:
            barrier.wait(JOIN_SECONDS)
            target(index)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors[index] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,), name=f"s8-{i}") for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_SECONDS)
    stuck = [t.name for t in threads if t.is_alive()]
    assert not stuck, f"threads did not finish: {stuck}"
    return errors


@pytest.mark.parametrize("scope", ["quota_total", "quota_per_user"])
def test_s8_fifty_concurrent_requests_with_a_quota_of_ten_run_the_tool_at_most_ten_times(scope):
    global _runs
    _runs = 0
    registry = _registry()
    sync_tools(registry)
    models.Tool.objects.filter(name="charge").update(**{scope: QUOTA, "quota_window": 3600})
    # One user for the per-user quota (every request is theirs), one each for the total.
    shared = User.objects.create_user("payer")
    users = (
        [shared] * REQUESTS
        if scope == "quota_per_user"
        else [User.objects.create_user(f"payer{i}") for i in range(REQUESTS)]
    )
    answers: dict[int, str] = {}

    def request(index: int) -> None:
        model = ScriptedChatModel([tool_call("charge", key=str(index)), text("ok")])
        client = governed_chat_client(user=users[index], model=model, tool_registry=registry)
        client.prompt("Pay").call()
        answers[index] = model.requests[-1].messages[-1].responses[0].response_data

    errors = _concurrently(request, REQUESTS)

    assert errors == {}
    assert _runs == QUOTA  # never more, and the quota's worth ran
    ran = [i for i, answer in answers.items() if answer == f"charged {i}"]
    refused = [i for i, answer in answers.items() if "has reached its quota of 10" in answer]
    assert (len(ran), len(refused)) == (QUOTA, REQUESTS - QUOTA)
    statuses = models.ToolExecution.objects.filter(tool_name="charge").values_list(
        "status", flat=True
    )
    assert sorted(statuses) == ["refused"] * (REQUESTS - QUOTA) + ["succeeded"] * QUOTA
    assert list(models.QuotaCounter.objects.values_list("count", flat=True)) == [QUOTA]
