"""Events of the run's own lifecycle that a call or a decision proposes: checked, judged, refused.

One way each, for the Runner and the SDK adapters alike:

- **checked** (`check`) where it is proposed, before anything is written: the type must be
  one of the table's own (never a built-in one: the runtime appends those itself), declared
  by the tool that proposes it, and its fields must make a valid event of that type. What
  passes is recorded with the step that proposed it, a `ProposedEvent` on `tool.completed`
  or `model.completed` (decision `emit`); what does not is a `Refusal`.
- **judged** (`judge_one`) against the table where the run stands, by folding the very event
  that would be appended (`emitted_by` naming the call or the turn): a call's once its batch
  is resolved (`judge`: every call's in the batch's order, whatever order they ended in, so
  a batch run concurrently is judged the same as one run in turn), a decision's right after
  it. The table's conditions see the event's fields, as for any event.
- **refused** as a `Refusal` the model reads on its next turn, with the lifecycle's events
  the table allowed instead: a call's as `emit.refused` (`Action.refusal`), a decision's as
  the decision `refused` (`ModelContext.refusal`).

A guard that refuses the event itself (a deadline on its edge, say) stops the run as for any
event: that is a limit saying no, not the table.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import ValidationError

from agentfsm.errors import IllegalTransitionError, quote_list
from agentfsm.events._bounds import unstorable
from agentfsm.events.models import EmittedBy, Proposal, ProposedEvent, Refusal
from agentfsm.events.vocabulary import EventTypes
from agentfsm.fsm.table import TransitionTable
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.runtime._writer import Spec, built, emit_refused
from agentfsm.runtime.tools import Emit, Tool

__all__ = ["beside", "check", "declared_problems", "judge", "judge_one", "undeclared"]

#: A stand-in envelope to validate a proposal's fields before the event's place is known.
_PLACE = {"run_id": "r", "sequence": 1, "occurred_at": "2026-01-01T00:00:00+00:00"}
#: Problems of an event's fields named in a refusal (each in a sentence; the rest counted).
_PROBLEMS = 8


def check(
    emit: Any, types: EventTypes, declared: Sequence[str] | None, decision: str | None = None
) -> ProposedEvent | Refusal:
    """`emit` as the proposal to record, or why it cannot be one.

    Args:
        emit: what was proposed (an `Emit`, or anything a tool handed over as one).
        types: the event types of the run's table.
        declared: the types the proposing tool declares (`Tool.emits`); None for a model's
            decision, which may propose any of the table's own.
        decision: `emit` for a decision's proposal (summed up so in a refusal).
    """
    if not isinstance(emit, Emit):
        return _refusal(
            "invalid_fields", f"an event is proposed as an Emit, got {type(emit).__name__}",
            None, decision,
        )  # fmt: skip
    name = emit.type
    if name not in types.custom:
        return _unknown(name, types, decision)
    if declared is not None and name not in declared:
        return undeclared(name, declared)
    fields = dict(emit.fields)
    problem = unstorable(fields)
    if problem is not None:
        return _refusal(
            "invalid_fields", f"the fields of '{name}' cannot be stored: {problem}", name, decision
        )
    try:
        proposal = ProposedEvent(type=name, fields=fields)
        _validated(types.classes[name], proposal, _PLACE, None)
    except ValidationError as exc:
        return _refusal("invalid_fields", _invalid(name, exc), name, decision)
    return proposal


def declared_problems(tools: Iterable[tuple[str, Tool]], table: TransitionTable) -> list[str]:
    """Each event type a tool declares (`Tool.emits`) that `table` does not have as its own,
    in a sentence: `(agent name, tool)` pairs, checked where a Runner is built."""
    types = table.event_types
    problems = []
    for agent, tool in tools:
        for name in tool.emits:
            if name in types.custom:
                continue
            why = (
                "a built-in event the runtime appends itself"
                if name in types
                else f"not an event type of table '{table.name}' (its own: "
                f"{quote_list(types.custom)})"
            )
            problems.append(f"tool '{tool.name}' of agent '{agent}' declares '{name}': {why}")
    return problems


def beside(result: Any, proposal: ProposedEvent) -> ProposedEvent | Refusal:
    """`proposal`, if the outcome carrying it can hold it beside the call's `result` (each
    fits an event alone; together they may not)."""
    problem = unstorable({"result": result, "emit": proposal.fields})
    if problem is None:
        return proposal
    size = problem.removeprefix("the value is ")
    return _refusal(
        "invalid_fields",
        f"the fields of '{proposal.type}' cannot be stored beside the call's result: "
        f"together they are {size}",
        proposal.type,
        None,
    )


def undeclared(name: str, declared: Sequence[str]) -> Refusal:
    """The refusal of an event type a tool proposed without declaring it (`Tool.emits`)."""
    return _refusal(
        "undeclared",
        f"'{name}' is not among the events this tool declares it may propose: "
        f"{quote_list(sorted(declared))}",
        name, None, declared,
    )  # fmt: skip


def judge_one(
    reducer: Reducer, record: RunRecord, proposal: ProposedEvent, by: EmittedBy, at: str
) -> tuple[Spec, RunRecord] | Refusal:
    """The event `proposal` makes, built as the next of `record` at `at` and folded (the
    spec to append, and the record after it), or why the table refuses it there.

    Raises:
        GuardRejectedError: a guard refused the event (the run stops, as for any event).
    """
    decision = "emit" if by.turn is not None else None
    types = reducer.event_types_for(record)
    cls = types.classes.get(proposal.type)
    if cls is None or proposal.type not in types.custom:  # a migration took the type away
        return _unknown(proposal.type, types, decision)
    place = {"run_id": record.run_id, "sequence": record.version + 1, "occurred_at": at}
    try:
        event = _validated(cls, proposal, place, by)
    except ValidationError as exc:
        return _refusal("invalid_fields", _invalid(proposal.type, exc), proposal.type, decision)
    try:
        after = reducer.reduce(record, event)
    except IllegalTransitionError as exc:
        allowed = [t for t in exc.allowed if t in types.custom]
        failed = exc.failed_conditions
        why = (
            ""
            if not failed
            else f" (condition {quote_list(failed)} does not hold)"
            if len(failed) == 1
            else f" (none of the conditions {quote_list(failed)} holds)"
        )
        message = (
            f"'{proposal.type}' is not allowed where the run stands ('{record.status}'){why}; "
            f"events of its lifecycle allowed there: {quote_list(allowed)}"
        )
        return _refusal("not_allowed", message, proposal.type, decision, allowed)
    except (TypeError, ValueError) as exc:  # the type's own `fold` refused it
        return _refusal("invalid_fields", f"'{proposal.type}': {exc}", proposal.type, decision)
    return Spec(cls, {**proposal.fields, "emitted_by": by}, event), after


def judge(reducer: Reducer, record: RunRecord, at: str) -> tuple[tuple[Spec, ...], RunRecord]:
    """Every proposal of the resolved batch still to judge, in the batch's order: each the
    event it makes or its `emit.refused`, and the record after them all.

    Each is judged where the one before it left the run, so a call's event can open the way
    for the next one's, or close it. An event that ends the run ends the judging: the
    reducer settles what is left as refused (`run_ended`).

    Raises:
        GuardRejectedError: a guard refused an event (the run stops, as for any event).
    """
    specs: list[Spec] = []
    terminal = reducer.table.terminal_states
    while record.status not in terminal:
        pending = record.pending_emits
        if not pending:
            break
        action = pending[0]
        assert action.emit is not None
        by = EmittedBy(action_id=action.action_id)
        judged = judge_one(reducer, record, action.emit, by, at)
        if isinstance(judged, Refusal):
            refused = emit_refused(action.action_id, judged)
            record = reducer.reduce(record, built(refused, record, at))
            specs.append(refused)
        else:
            spec, record = judged
            specs.append(spec)
    return tuple(specs), record


def _unknown(name: str, types: EventTypes, decision: str | None) -> Refusal:
    own = types.custom
    why = (
        f"'{name}' is built in: the runtime appends it itself"
        if name in types
        else f"'{name}' is not an event type of the run's table"
    )
    return _refusal(
        "unknown_event", f"{why}; its own event types: {quote_list(own)}", name, decision, own
    )


def _validated(
    cls: type[Any], proposal: ProposedEvent, place: dict[str, Any], by: EmittedBy | None
) -> Any:
    """The event `proposal` makes at `place`, validated as it will be read back: from JSON
    (a list is a valid tuple there, as in any stored log)."""
    data: dict[str, Any] = {**proposal.fields, **place, "type": proposal.type}
    if by is not None:
        data["emitted_by"] = by.model_dump(exclude_none=True)
    return cls.model_validate_json(json.dumps(data, ensure_ascii=False))


def _invalid(name: str, exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    problems = [
        f"at {'/'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
        for e in errors[:_PROBLEMS]
    ]
    more = len(errors) - _PROBLEMS
    if more > 0:
        problems.append(f"and {more} more")
    return f"the fields of '{name}' are invalid: {'; '.join(problems)}"


def _refusal(
    kind: str,
    message: str,
    event: str | None,
    decision: str | None,
    allowed: Sequence[str] | None = None,
) -> Refusal:
    return Refusal.of(kind, message, Proposal.of(decision, (), event), allowed)
