"""Durable turns on real workers: every step a Celery task, the model called from a worker."""

from __future__ import annotations

import signal
import time

import pytest
from django.conf import settings

from tool_calling import models, runs
from tool_calling.admin import usage
from tool_calling.sync import sync_tools
from tool_calling.testing import ReplayServer

from .conftest import start_worker, stop_worker, wait_ready

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("workers"),
]


def finished(run: models.Run, timeout: float = 60.0) -> models.Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status in ("succeeded", "failed", "cancelled"):
            return run
        time.sleep(0.1)
    pytest.fail(f"run {run.pk} still {run.status} after {timeout} s")


def transcript(conversation: models.Conversation) -> list[tuple[int, str]]:
    return list(conversation.messages.order_by("sequence").values_list("sequence", "role"))


def test_a_run_completes_on_workers_with_every_message_once():
    sync_tools()
    steps = [
        {"tool_calls": [{"name": "sleepy", "arguments": {"key": "r1", "seconds": 0.1}}]},
        {"text": "All done"},
    ]
    with ReplayServer(steps, port=settings.MODEL_PORT) as server:
        conversation = models.Conversation.objects.create(title="durable")
        run = finished(runs.start_turn(conversation, "Go"))
        requests = len(server.requests)

    assert (run.status, run.answer) == ("succeeded", "All done")
    assert requests == 2  # one model call per round, made by the workers
    assert [role for _, role in transcript(conversation)] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert [seq for seq, _ in transcript(conversation)] == [1, 2, 3, 4]
    execution = models.ToolExecution.objects.get(run=run)
    assert (execution.status, execution.attempt) == ("succeeded", 1)
    assert execution.worker  # ran on a worker
    kinds = list(run.events.order_by("sequence").values_list("kind", flat=True))
    assert kinds[0] == "queued" and kinds[-1] == "succeeded"
    assert kinds.index("model_call") < kinds.index("tool_calls") < kinds.index("tool_call_ended")
    conversation.refresh_from_db()
    assert conversation.turn_token == ""  # the run released the conversation


def test_a_run_on_workers_adds_the_tokens_the_model_reported_to_the_overview():
    """The admin overview's tokens per day come from what the model reported.

    The workers call the model through the real openai SDK; the replay server reports 52 + 56
    prompt and 2 + 9 completion tokens for the turn's two calls.
    """
    sync_tools()
    steps = [
        {
            "tool_calls": [{"name": "sleepy", "arguments": {"key": "tokens", "seconds": 0.05}}],
            "usage": {"prompt_tokens": 52, "completion_tokens": 2},
        },
        {"text": "Counted", "usage": {"prompt_tokens": 56, "completion_tokens": 9}},
    ]
    before = usage.overview().tokens[-1]  # today's figures (read live), from earlier tests too
    with ReplayServer(steps, port=settings.MODEL_PORT):
        conversation = models.Conversation.objects.create(title="tokens")
        run = finished(runs.start_turn(conversation, "Go"))
    after = usage.overview().tokens[-1]

    assert (run.status, run.answer) == ("succeeded", "Counted")
    stored = conversation.messages.filter(role="assistant").order_by("sequence")
    assert [m.usage for m in stored] == [
        {"prompt_tokens": 52, "completion_tokens": 2, "total_tokens": 54},
        {"prompt_tokens": 56, "completion_tokens": 9, "total_tokens": 65},
    ]
    assert (
        after.messages - before.messages,
        after.prompt - before.prompt,
        after.completion - before.completion,
    ) == (2, 108, 11)


def test_a_run_whose_worker_restarts_between_steps_completes_with_every_message_once(workers):
    """Stop every worker while the run waits on its tool, start new ones: it still completes."""
    sync_tools()
    steps = [
        {"tool_calls": [{"name": "sleepy", "arguments": {"key": "r2", "seconds": 1.5}}]},
        {"text": "Recovered"},
    ]
    with ReplayServer(steps, port=settings.MODEL_PORT) as server:
        conversation = models.Conversation.objects.create(title="restart")
        run = runs.start_turn(conversation, "Go")
        deadline = time.monotonic() + 30
        while not models.ToolExecution.objects.filter(run=run, status="running").exists():
            assert time.monotonic() < deadline, "the tool call never started"
            time.sleep(0.05)
        # A warm shutdown lets the running tool finish, then the worker exits between steps.
        for worker in list(workers):
            worker.process.send_signal(signal.SIGTERM)
        for worker in list(workers):
            stop_worker(worker)
        replacements = [start_worker(index) for index in (7, 8)]
        # The session stops every worker in this list; later tests use the live ones first.
        workers[:] = replacements + workers
        wait_ready(*replacements)
        run = finished(run)
        requests = len(server.requests)

    assert (run.status, run.answer) == ("succeeded", "Recovered")
    assert requests == 2
    assert [role for _, role in transcript(conversation)] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert models.ToolExecution.objects.filter(run=run).count() == 1
    log = (settings.STATE_DIR / "runs-sleepy.log").read_text().split()
    assert log.count("r2") == 1  # the tool ran once


def test_a_run_whose_workers_die_mid_model_call_is_recovered_within_its_short_lease(workers):
    """The step's lease is renewed by a heartbeat while the model answers, so it can be short
    (EXECUTION["LEASE_SECONDS"], 3 s here): a step whose worker died is taken over by the
    sweeper seconds later, not after a whole model call's worth of time (minutes)."""
    import os

    from tool_calling import tasks

    sync_tools()
    steps = [{"delay": 6, "text": "lost with the worker"}, {"text": "Recovered"}]
    with ReplayServer(steps, port=settings.MODEL_PORT) as server:
        conversation = models.Conversation.objects.create(title="crash mid step")
        run = runs.start_turn(conversation, "Go")
        deadline = time.monotonic() + 30
        while not server.requests:
            assert time.monotonic() < deadline, "the model was never called"
            time.sleep(0.05)
        first = models.Run.objects.get(pk=run.pk).step_lease_expires_at
        time.sleep(2.5)  # the model is still answering: the heartbeat renewed the lease
        renewed = models.Run.objects.get(pk=run.pk).step_lease_expires_at
        assert first is not None and renewed is not None and renewed > first
        for worker in list(workers):
            if worker.process.poll() is None:
                os.killpg(worker.process.pid, signal.SIGKILL)
                worker.process.wait(10)
        replacements = [start_worker(index) for index in (11, 12)]
        workers[:] = replacements + workers
        wait_ready(*replacements)
        deadline = time.monotonic() + 60
        while models.Run.objects.get(pk=run.pk).status not in ("succeeded", "failed"):
            assert time.monotonic() < deadline, "the run was not taken over"
            tasks.sweep_tool_executions()
            time.sleep(0.5)
        run = finished(run)
        requests = len(server.requests)

    assert (run.status, run.answer) == ("succeeded", "Recovered")
    assert requests == 2  # the lost model call, and the one after the takeover
    assert [role for _, role in transcript(conversation)] == ["user", "assistant"]


def test_a_rethrown_exception_raised_on_a_worker_ends_the_run_step_as_inline():
    """A ``rethrown`` type raised by a tool on a real worker is raised in the run's step.

    The run's step (itself on a worker) completes the batch from the call's outcome, a value
    naming the exception's types; the exception processor re-raises ``PaymentDeclined`` there,
    as it does in-process, so the step fails and the run with it.
    """
    from django.test import override_settings

    from tests.celery.toolsapp.tools import PaymentDeclined
    from tool_calling.governance import governed_chat_client
    from tool_calling.testing import ScriptedChatModel, text, tool_call

    sync_tools()
    steps = [
        {"tool_calls": [{"name": "declining_charge", "arguments": {"amount": 7}}]},
        {"text": "Charged"},
    ]
    with ReplayServer(steps, port=settings.MODEL_PORT):
        conversation = models.Conversation.objects.create(title="rethrown")
        run = finished(runs.start_turn(conversation, "Charge 7"))
    assert run.status == "failed"
    assert run.error.startswith("Step 2 failed (PaymentDeclined); see the server log")
    execution = models.ToolExecution.objects.get(run=run)
    assert execution.worker and execution.error_type == (
        "tests.celery.toolsapp.tools.PaymentDeclined"
    )

    # The same call waited for in this process, and the same call run inline: raised alike.
    for mode in ("celery", "inline"):
        model = ScriptedChatModel([tool_call("declining_charge", amount=8), text("Charged")])
        execution_settings = {**settings.TOOL_CALLING["EXECUTION"], "MODE": mode}
        with override_settings(
            TOOL_CALLING={**settings.TOOL_CALLING, "EXECUTION": execution_settings}
        ):
            with pytest.raises(PaymentDeclined, match="^card declined for 8"):
                governed_chat_client(model=model).prompt("Charge 8").call()
