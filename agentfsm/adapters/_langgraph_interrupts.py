"""How a LangGraph stream's end enters our lifecycle, and what a resume answers it with.

A stream ends in one of four ways: interrupted for approval (`approval_request`), paused by
any other `interrupt()`, waiting on a `delegate`d subagent's interrupt (recorded in the
subagent's run), or done. It may also raise: a guard's or a cancel's stop, a recursion
limit, a failure. Each is recorded here and returned as an `ObservedRun`; a resume answers
each interrupt with the decisions stored in the run that asked for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.errors import GraphInterrupt, GraphRecursionError
from langgraph.types import Command

from agentfsm.adapters._langgraph_signals import APPROVAL, SDK, _Handler
from agentfsm.adapters._observed import ObservedRun, observed
from agentfsm.adapters._recorder import Recorder
from agentfsm.adapters._sdk_stops import CancelStop, GuardStop, WaitStop
from agentfsm.adapters._storable import jsonable
from agentfsm.adapters._subagents import (
    approved_call,
    pending_in,
    subagent_records,
    waiting_on,
    waits_for_person,
)
from agentfsm.errors import LifecycleError
from agentfsm.events import models as m
from agentfsm.events._canonical import canonical_json
from agentfsm.names import ActionStatus, RunStatus
from agentfsm.record import RunRecord
from agentfsm.runtime._writer import Spec, approval_asked

__all__ = ["CHECKPOINTED", "approval_calls", "ended", "finish", "resume_command", "settle"]

#: What `Recorder.keep_wait` keeps of a graph an event of the run's lifecycle made wait: its
#: state is in its checkpointer already, so only when it stopped.
CHECKPOINTED = "checkpointer"


def resume_command(
    recorder: Recorder, record: RunRecord, interrupts: Sequence[Any], value: Any
) -> Command[Any] | ObservedRun | None:
    """What to resume the graph with, or the run as it is if a decision is missing; None to
    stream the graph on from its checkpoint (a wait in a state of the run's lifecycle is
    over: a person's event made the run runnable again).

    An approval interrupt gets the decisions of its calls, from the ledger of the run
    that asked (this one, or a `delegate`d subagent); any other interrupt gets `value`.
    Several interrupts (parallel subagents, parallel branches) are answered by id.
    """
    if not interrupts and recorder.kept_wait() is not None:
        if recorder.store.reducer.table.stops_driving(record.status):
            return observed(recorder.store, record)  # still waiting: nothing runs
        recorder.forget_wait()  # the graph goes on from it now
        return None
    owners = subagent_records(recorder.store, record)
    answers: list[tuple[Any, Any]] = []
    for it in interrupts:
        calls = approval_calls([it])
        if not calls:
            answers.append((it, value))
            continue
        decisions: dict[str, dict[str, Any]] = {}
        for call in calls:
            action = approved_call(owners, call["id"], call["name"], jsonable(call["args"]))
            approved = action.status != ActionStatus.REJECTED
            decisions[action.action_id] = {"approved": approved, "reason": action.reason}
        answers.append((it, decisions))
    waiting = pending_in(owners)
    if waiting:  # resumed only once every decision is made, in this run and below
        return observed(recorder.store, record, pending_approvals=waiting)
    for run in owners:  # a run whose interrupt() paused the graph goes on
        if run.status == RunStatus.PAUSED:
            resumed = recorder if run is record else recorder.like(run.run_id, SDK)
            if resumed is not recorder:
                resumed.load()
            resumed.append("resume", [Spec(m.RunResumed, {})])
    if len(answers) <= 1:
        return Command(resume=answers[0][1] if answers else value)
    return Command(resume={it.id: answer for it, answer in answers})


def ended(recorder: Recorder, handler: _Handler, exc: Exception) -> ObservedRun:
    """The run after the graph raised `exc`: a stop, a recursion limit, or a failure."""
    if isinstance(exc, GraphInterrupt):
        # Raised only out of a graph streamed inside another graph's node (`delegate`):
        # it pauses here, and the exception carries the interrupt on to the caller.
        settle(recorder, list(exc.args[0]) if exc.args else [])
        raise exc
    if isinstance(exc, GuardStop | CancelStop):
        record = recorder.stopped(exc)
        if isinstance(exc, WaitStop):
            # The graph's checkpointer keeps where it stood; ours, when it stopped.
            recorder.keep_wait(CHECKPOINTED)
    elif isinstance(exc, GraphRecursionError):
        detail = str(exc).split(".")[0]
        record = recorder.append(
            "GraphRecursionError",
            [Spec(m.RunTerminated, {"stop_reason": "max_turns", "detail": detail})],
        )
    else:
        recorder.failed(exc)
        raise exc
    return observed(recorder.store, record, partial_output=handler.last_output)


def finish(recorder: Recorder, handler: _Handler, interrupts: list[Any]) -> ObservedRun:
    """The run after the stream ended: waiting on its interrupts, or completed."""
    try:
        return settle(recorder, interrupts)
    except (GuardStop, CancelStop) as stop:  # e.g. a cancel asked while the graph ended
        record = recorder.stopped(stop)
        return observed(recorder.store, record, partial_output=handler.last_output)


def settle(recorder: Recorder, interrupts: list[Any]) -> ObservedRun:
    """The run after the stream ended with `interrupts` (none: it completed)."""
    # Not this run's own pause (it records those): a subagent's, below it.
    if interrupts and waits_for_person(recorder.store, recorder.record):
        # The interrupts are a subagent's (`delegate`), recorded in its own run.
        record = recorder.waiting()
        return observed(
            recorder.store,
            record,
            state=[i.value for i in interrupts],
            pending_approvals=waiting_on(recorder.store, record),
        )
    if interrupts:
        calls = approval_calls(interrupts)
        if calls:
            actions = recorder.record.actions
            specs: list[Any] = [
                approval_asked(c["id"], c["name"], jsonable(c["args"]))
                for c in calls
                # Asked before: the graph paused again before all were decided.
                if actions[c["id"]].status != ActionStatus.APPROVAL_PENDING
            ]
        else:
            value = interrupts[0].value
            reason = value if isinstance(value, str) else canonical_json(jsonable(value))
            specs = [Spec(m.RunPaused, {"reason": reason})]
        try:
            record = recorder.append("__interrupt__", specs) if specs else recorder.waiting()
        except LifecycleError as exc:
            # The table refuses the pause: the run fails, as in every adapter.
            recorder.failed(exc)
            raise
        return observed(recorder.store, record, state=[i.value for i in interrupts])
    try:
        record = recorder.append("stream ended", [Spec(m.RunCompleted, {})])
    except LifecycleError as exc:
        recorder.failed(exc)
        raise
    return observed(recorder.store, record, final_output=record.final_output)


def approval_calls(interrupts: Sequence[Any]) -> list[dict[str, Any]]:
    """The tool calls of the approval interrupts among `interrupts`."""
    calls: list[dict[str, Any]] = []
    for it in interrupts:
        value = getattr(it, "value", None)
        if isinstance(value, dict) and value.get("type") == APPROVAL:
            calls.extend(value["tool_calls"])
    return calls
