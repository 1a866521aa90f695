"""What performing a step came to, as the events that record it.

A tool's return value or exception, a call that timed out or no longer validates, a model
answer no log can hold, a guard's refusal of what an answer led to, a subagent run's end, a
table with no move for what the Runner does next: each becomes a spec here, so the drive
core only performs effects and hands back what happened.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import JsonValue, TypeAdapter, ValidationError

from agentfsm.errors import (
    GuardRejectedError,
    IllegalTransitionError,
    OutcomeUnknownError,
    OverrunError,
    ToolError,
    quote_list,
)
from agentfsm.events import models as m
from agentfsm.events._bounds import unstorable
from agentfsm.events.models import ProposedEvent, Refusal
from agentfsm.fsm.table import TransitionTable
from agentfsm.guards.limits import cap_timeout
from agentfsm.names import DecisionKind, EventType, RunStatus
from agentfsm.record import Action, RunRecord, default_key
from agentfsm.runtime import _emits
from agentfsm.runtime._writer import Spec, emit_refused, terminated
from agentfsm.runtime.model import Decision as ModelDecision
from agentfsm.runtime.tools import Emit, InvalidCall, Tool, ToolContext, ToolResult

__all__ = [
    "EmitCheck",
    "child_outcome",
    "error",
    "failure",
    "invalid_now",
    "late_answer",
    "model_failed",
    "outcome",
    "stopped_after",
    "storable",
    "stranded",
    "timed_out",
    "tool_context",
    "unrecordable",
]

S = RunStatus


def error(kind: str, message: str, *, retryable: bool = False) -> dict[str, Any]:
    """An `ErrorInfo` as event fields."""
    return {"kind": kind, "message": message, "retryable": retryable}


_JSON: TypeAdapter[JsonValue] = TypeAdapter(JsonValue)


def storable(value: Any) -> Any:
    """`value`, if an event can carry it and every reader read it back; else `ValueError`.

    Checked before anything is appended, so a model's answer or a tool's result that no log
    can hold is recorded as such (a failed call, a failed run) instead of raising out of the
    runner after the side effect.
    """
    if value is None:
        return None
    reason = unstorable(value)  # one walk: types, limits and size
    if reason is not None:
        _JSON.validate_python(value, strict=True)  # not JSON at all: say so (a ValidationError)
        raise ValueError(reason)
    return value


# -- calling a tool ---------------------------------------------------------------------------


def tool_context(record: RunRecord, action: Action, tool: Tool, remaining: float | None) -> Any:
    """The `ToolContext` for the action's current attempt, or an `InvalidCall`."""
    args = tool.validate(action.arguments)
    if isinstance(args, InvalidCall):
        return args
    return ToolContext(
        run_id=record.run_id,
        action_id=action.action_id,
        tool=tool.name,
        arguments=action.arguments,
        args=args,
        idempotency_key=action.idempotency_key or default_key(record.run_id, action.action_id),
        attempt=max(1, action.attempts),
        remaining=remaining,
        timeout=cap_timeout(tool.timeout, remaining),
    )


#: Checks a call's proposed event where its outcome is recorded (`_emits.check`, bound to
#: the run's event types and the tool's declared ones).
EmitCheck = Callable[[Emit], ProposedEvent | Refusal]


def outcome(action_id: str, value: Any, emits: EmitCheck | None = None) -> tuple[Spec, ...]:
    """The events recording a tool's return value (and the event it proposes, if any).

    `tool.completed`, carrying the proposal (`emit`) once `emits` passed it, or followed by
    its `emit.refused` when it did not: in one append, so the model reads either. A call
    whose result cannot be recorded failed, and proposes nothing.
    """
    cost = None
    emit: Emit | None = None
    if isinstance(value, Emit):
        emit, value = value, None
    elif isinstance(value, ToolResult):
        cost, emit, value = value.cost, value.emit, value.value
    try:
        storable(value)
    except ValidationError:
        return (
            Spec(
                m.ToolFailed,
                {
                    "action_id": action_id,
                    "error": error(
                        "invalid_result",
                        f"the tool returned a value that is not JSON: {type(value).__name__}",
                    ),
                },
            ),
        )
    except ValueError as exc:
        # The call ran; what it returned cannot be stored. Not retryable: a retry would act
        # again for the same reason.
        message = f"the tool ran, but its result cannot be stored: {exc}"
        return (
            Spec(
                m.ToolFailed, {"action_id": action_id, "error": error("unstorable_result", message)}
            ),
        )
    completed = {"action_id": action_id, "result": value, "cost": cost}
    if emit is None:
        return (Spec(m.ToolCompleted, completed),)
    assert emits is not None, "a call's proposed event is checked by its caller"
    checked = emits(emit)
    if isinstance(checked, ProposedEvent):
        checked = _emits.beside(value, checked)
    if isinstance(checked, Refusal):
        return (Spec(m.ToolCompleted, completed), emit_refused(action_id, checked))
    return (Spec(m.ToolCompleted, {**completed, "emit": checked}),)


def failure(action_id: str, exc: Exception) -> Spec:
    """The event recording an exception a tool raised."""
    if isinstance(exc, OutcomeUnknownError):
        return Spec(m.ToolOutcomeUnknown, {"action_id": action_id, "reason": exc.reason})
    if isinstance(exc, ToolError):
        info = error(exc.kind, exc.message, retryable=exc.retryable)
    else:
        info = error("exception", f"{type(exc).__name__}: {exc}")
    return Spec(m.ToolFailed, {"action_id": action_id, "error": info})


def invalid_now(action_id: str, why: InvalidCall) -> Spec:
    """A call whose arguments no longer validate when it is about to run."""
    return Spec(m.ToolFailed, {"action_id": action_id, "error": error(why.kind, why.message)})


def timed_out(action_id: str, tool: Tool, seconds: float) -> Spec:
    """A call that did not return in time: unknown if it acts on the world, else retryable."""
    if tool.side_effects:
        return Spec(
            m.ToolOutcomeUnknown,
            {"action_id": action_id, "reason": f"no answer within {seconds:g} s"},
        )
    return Spec(
        m.ToolFailed,
        {
            "action_id": action_id,
            "error": error("timeout", f"no answer within {seconds:g} s", retryable=True),
        },
    )


def unrecordable(decision: ModelDecision) -> Spec:
    """`model.completed` for a decision that is not JSON, keeping what the call used.

    The call happened, so its usage counts; its output (and calls, whose arguments cannot be
    recorded either, or the event it proposed) are left out: a `tool_calls` or `emit`
    decision is recorded as `final` with no output, and the `run.failed` that follows says
    what was wrong.
    """
    kind = DecisionKind.FINAL if decision.kind in ("tool_calls", "emit") else decision.kind
    usage = decision.usage.model_dump() if decision.usage is not None else None
    return Spec(m.ModelCompleted, {"decision": kind, "usage": usage})


def late_answer(decided: Sequence[Spec], record: RunRecord) -> tuple[Spec, ...] | None:
    """The model's answer alone, when the run changed under the call (a cancel was asked)
    and still has the call open: it happened, so it is recorded, without what it led to."""
    first = decided[0] if decided else None
    if first is None or first.cls is not m.ModelCompleted:
        return None
    return (first,) if record.model_call_open else None


def stopped_after(decided: Sequence[Spec], error: GuardRejectedError) -> tuple[Spec, ...] | None:
    """The model's answer and the stop, when a guard refused what the answer led to.

    A guard may refuse an event the decision brings with it (a call the loop detector
    stops); the call itself happened, so `model.completed` (the batch's first spec) is kept
    with its usage, followed by `run.terminated`. None when the refusal is of something
    else (then the usual stop records it).
    """
    first = decided[0] if decided else None
    if first is None or first.cls is not m.ModelCompleted:
        return None
    if error.event == EventType.MODEL_COMPLETED or isinstance(error, OverrunError):
        return None
    return (first, terminated(error))


def stranded(refused: IllegalTransitionError, table: TransitionTable) -> Spec:
    """`run.failed` for a run whose table has no edge for the Runner's next move where the
    run stands: every drive would be refused the same way, so the run fails, once."""
    failed = refused.failed_conditions
    whose = f" whose condition holds (tried {quote_list(failed)})" if failed else ""
    message = (
        f"state '{refused.state}' ('{table.kind(refused.state)}') of table '{table.name}' "
        f"has no '{refused.event}'{whose}, which the Runner appends next: the run cannot go "
        "on under this table"
    )
    return Spec(m.RunFailed, {"error": error("stranded", message)})


def model_failed(message: str, *, kind: str = "model_error") -> Spec:
    """`run.failed` for a model call that could not be made to answer."""
    return Spec(m.RunFailed, {"error": error(kind, message)})


def child_outcome(
    action_id: str, result: Any, waiting: Callable[[Any], Exception], table: TransitionTable
) -> tuple[Spec, ...]:
    """The parent's record of a subagent's run: its answer, or why it has none.

    A child that waits (for approval, a pause, its own child) leaves the parent's call in
    flight: `waiting(result)` is raised, and driving the parent on drives the child.
    """
    record = result.record
    # By what the child's log says, not by the default table's names: a table of your own
    # may end runs in states of its own.
    if result.superseded or not table.is_terminal(record.status):
        raise waiting(result)
    if record.stop_reason is not None:
        why = f"stopped by '{record.stop_reason}': {record.stop_detail}"
    elif record.error is not None:
        why = f"failed ({record.error.kind}): {record.error.message}"
    elif record.cancel_reason is not None or record.status == S.CANCELLED:
        why = "was cancelled"
    else:
        return outcome(action_id, record.final_output)
    return (
        Spec(
            m.ToolFailed,
            {
                "action_id": action_id,
                "error": error(
                    f"subagent_{record.status}", f"subagent run '{record.run_id}' {why}"
                ),
            },
        ),
    )
