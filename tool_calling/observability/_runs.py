"""Durable runs: a step joins (or, the first, opens) its run's turn (:class:`run_step`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tool_calling.observability import _otel
from tool_calling.observability import semconv as sc
from tool_calling.observability._scope import _Restore, _scope, _text
from tool_calling.observability._turns import _Turn


class run_step:
    """One step of a durable run: ``with run_step(run_id, step):`` around its work.

    Log records carry the run's id. The step joins the run's turn when it reads the run
    (:func:`resume_turn`); a turn span the first step opened ends with that step.
    """

    __slots__ = ("_restore", "_turn", "run_id", "step")

    def __init__(self, run_id: Any, step: int) -> None:
        self.run_id = _text(run_id)
        self.step = step
        self._turn: _Turn | None = None
        self._restore: list[_Restore] = []

    def __enter__(self) -> run_step:
        self._restore.append(_Restore(None, _scope.get().but(run_id=self.run_id, step=self)))
        return self

    def resume(self, stored: str, conversation_id: Any, store: Callable[[str], Any]) -> None:
        """Join the stored turn, or open it (the first step): see :func:`resume_turn`."""
        scope = _scope.get().but(conversation_id=_text(conversation_id))
        if _otel.tracer() is None:
            self._restore.append(_Restore(None, scope))
            return
        parent = _otel.extract({"traceparent": stored}) if stored else None
        if parent is not None:
            self._restore.append(_Restore(None, scope, parent))
            return
        # No turn to join yet (the first step): open it here, under whoever sent the step.
        turn = _Turn(
            provider="",
            model="",
            conversation_id=_text(conversation_id),
            run_id=self.run_id,
            announce=False,
        )
        turn.span.set_attribute(sc.TOOL_CALLING_RUN_STEP, self.step)
        self._turn = turn
        self._restore.append(_Restore(turn.span, scope.but(turn=turn)))
        text = _otel.span_context_text(turn.span)
        if text:
            store(text)

    def __exit__(self, exc_type: Any, exc: BaseException | None, traceback: Any) -> None:
        while self._restore:
            self._restore.pop()()
        if self._turn is not None:
            self._turn.end(error=exc)


def resume_turn(stored: str, conversation_id: Any, store: Callable[[str], Any]) -> None:
    """Join the run's turn in the current :class:`run_step` (call it once the run was read).

    Args:
        stored: The run's stored trace context (``Run.trace_context``; blank: none yet).
        conversation_id: The run's conversation.
        store: Saves the context of the turn span this step opens when none was stored.
    """
    step = _scope.get().step
    if step is not None:
        step.resume(stored, conversation_id, store)
