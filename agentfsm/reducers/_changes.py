"""The changes the reducer makes to a record, one typed function per shape of change.

Each is declared as a stub whose keyword-only parameters name the fields it replaces, with
the fields' own types; `evolves`/`makes` (see `_evolve.py`) compile the fast copy behind it.
So mypy checks every call the reducer makes (a misspelt or missing field, a value of the
wrong type), and the order of the arguments does not matter at all. Every change to a
`RunRecord` sets `status`, `version` and `updated_at`: each event moves the run.
"""

# The stubs' bodies are never run (the decorators replace them), so they have none.
# mypy: disable-error-code="empty-body"

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfsm.events.models import ErrorInfo, Limits, ProposedEvent, Refusal, TableRef
from agentfsm.fsm._timeouts import due_at
from agentfsm.fsm.table import Transition
from agentfsm.record import Action, RunRecord, Timeout, UsageTotals
from agentfsm.reducers._evolve import evolves, makes

# -- run records ------------------------------------------------------------------------------


@evolves(RunRecord)
def set_fresh(
    r: RunRecord, /, *, run_id: str, actions: Mapping[str, Action], facts: Mapping[str, Any],
    custom: Mapping[str, Any],
) -> RunRecord: ...  # fmt: skip


#: The fields of a `RunRecord` whose default is made anew for each record (`set_fresh`
#: gives each new run its own): held to the class by tests/test_fold_speed_paths.py.
FRESH_FIELDS = ("actions", "facts", "custom")


@evolves(RunRecord)
def set_started(
    r: RunRecord, /, *, status: str, version: int, updated_at: str | None,
    objective: str | None, current_agent: str | None, limits: Limits | None,
    started_at: str | None, table: TableRef | None,
) -> RunRecord: ...  # fmt: skip


@evolves(RunRecord)
def set_model_started(
    r: RunRecord, /, *, status: str, version: int, updated_at: str | None, turn: int,
    model_call_open: bool, reserved_tokens: int, reserved_cost: float,
) -> RunRecord: ...  # fmt: skip


@evolves(RunRecord)
def set_model_completed(
    r: RunRecord, /, *, status: str, version: int, updated_at: str | None,
    model_call_open: bool, reserved_tokens: int, reserved_cost: float, usage: UsageTotals,
    last_decision: str | None, last_refusal: Refusal | None,
    decided_emit: ProposedEvent | None, final_output: Any, actions: Mapping[str, Action],
    batch: tuple[str, ...],
) -> RunRecord: ...  # fmt: skip


@evolves(RunRecord)
def set_model_failed(
    r: RunRecord, /, *, status: str, version: int, updated_at: str | None,
    model_call_open: bool, reserved_tokens: int, reserved_cost: float, usage: UsageTotals,
) -> RunRecord: ...  # fmt: skip


@evolves(RunRecord)
def set_agent(
    r: RunRecord, /, *, status: str, version: int, updated_at: str | None,
    current_agent: str | None,
) -> RunRecord: ...  # fmt: skip


@evolves(RunRecord)
def set_custom(
    r: RunRecord, /, *, status: str, version: int, updated_at: str | None,
    custom: Mapping[str, Any],
) -> RunRecord: ...  # fmt: skip


@evolves(RunRecord)
def set_emitted(
    r: RunRecord, /, *, status: str, version: int, updated_at: str | None,
    custom: Mapping[str, Any], actions: Mapping[str, Action],
    decided_emit: ProposedEvent | None,
) -> RunRecord: ...  # fmt: skip


@evolves(RunRecord)
def set_actions(
    r: RunRecord, /, *, status: str, version: int, updated_at: str | None,
    actions: Mapping[str, Action],
) -> RunRecord: ...  # fmt: skip


@evolves(RunRecord)
def set_actions_batch(
    r: RunRecord, /, *, status: str, version: int, updated_at: str | None,
    actions: Mapping[str, Action], batch: tuple[str, ...],
) -> RunRecord: ...  # fmt: skip


@evolves(RunRecord)
def set_completed(
    r: RunRecord, /, *, status: str, version: int, updated_at: str | None,
    actions: Mapping[str, Action], usage: UsageTotals, facts: Mapping[str, Any],
) -> RunRecord: ...  # fmt: skip


@evolves(RunRecord)
def set_forked(
    r: RunRecord, /, *, status: str, version: int, updated_at: str | None,
    forked_from: str | None, forked_at: int | None,
) -> RunRecord: ...  # fmt: skip


@evolves(RunRecord)
def set_usage(
    r: RunRecord, /, *, status: str, version: int, updated_at: str | None, usage: UsageTotals,
) -> RunRecord: ...  # fmt: skip


@evolves(RunRecord)
def set_pause(
    r: RunRecord, /, *, status: str, version: int, updated_at: str | None,
    pause_reason: str | None,
) -> RunRecord: ...  # fmt: skip


@evolves(RunRecord)
def set_cancel(
    r: RunRecord, /, *, status: str, version: int, updated_at: str | None,
    cancel_reason: str | None, cancel_requested_by: str | None, pause_reason: str | None,
) -> RunRecord: ...  # fmt: skip


@evolves(RunRecord)
def set_ended(
    r: RunRecord, /, *, status: str, version: int, updated_at: str | None,
    actions: Mapping[str, Action], model_call_open: bool, reserved_tokens: int,
    reserved_cost: float, pause_reason: str | None, error: ErrorInfo | None,
    stop_reason: str | None, stop_detail: str | None, decided_emit: ProposedEvent | None,
) -> RunRecord: ...  # fmt: skip


# A handler's new record is the reducer's alone until `reduce` returns it, so entering a
# state fills its two slots in place (through the slots' own descriptors, as the makers do)
# rather than copying all 32 fields again: a second copy per change of state cost the
# reducer a tenth of its throughput.
_SLOTS = RunRecord.__mro__[1].__dict__
#: Fills `entered_at` of a record nobody else holds yet (see `entered`).
fill_entered_at = _SLOTS["entered_at"].__set__
_fill_timeout = _SLOTS["timeout"].__set__


def timeout_of(edge: Transition | None, entered_at: str | None) -> Timeout | None:
    """The `RunRecord.timeout` of a run that entered its state at `entered_at`, where `edge`
    is the state's timed edge that falls due first (None: no edge waits there)."""
    if edge is None or edge.after is None or entered_at is None:
        return None
    return Timeout(edge.event, due_at(entered_at, edge.after))


def entered(record: RunRecord, at: str, edge: Transition | None) -> RunRecord:
    """`record`, just built by a handler whose event moved it to another state at `at`,
    with the time its timed edges count from and the first of them to fall due (`edge`).

    Only for a record nobody else holds yet: it is filled in place.
    """
    fill_entered_at(record, at)
    if edge is not None:
        _fill_timeout(record, timeout_of(edge, at))
    elif record.timeout is not None:  # most states time out nowhere: most records have none
        _fill_timeout(record, None)
    return record


# -- actions ----------------------------------------------------------------------------------


@makes(Action)
def new_action(
    *, action_id: str, tool: str, arguments: Mapping[str, Any], status: str, attempts: int,
    idempotency_key: str | None, result: Any, error: ErrorInfo | None, cost: float | None,
    approver: str | None, reason: str | None, expires_at: str | None,
    emit: ProposedEvent | None, emitted: int | None, refusal: Refusal | None,
) -> Action: ...  # fmt: skip


@evolves(Action)
def action_approved(
    a: Action, /, *, status: str, approver: str | None, reason: str | None
) -> Action: ...


@evolves(Action)
def action_rejected(
    a: Action, /, *, status: str, approver: str | None, reason: str | None
) -> Action: ...


@evolves(Action)
def action_requested(a: Action, /, *, status: str, idempotency_key: str | None) -> Action: ...


@evolves(Action)
def action_started(
    a: Action, /, *, status: str, attempts: int, error: ErrorInfo | None
) -> Action: ...


@evolves(Action)
def action_succeeded(
    a: Action, /, *, status: str, result: Any, cost: float | None, emit: ProposedEvent | None
) -> Action: ...


@evolves(Action)
def action_emitted(a: Action, /, *, emitted: int | None) -> Action: ...


@evolves(Action)
def action_emit_refused(a: Action, /, *, refusal: Refusal | None) -> Action: ...


@evolves(Action)
def action_failed(a: Action, /, *, status: str, error: ErrorInfo | None) -> Action: ...


@evolves(Action)
def action_unknown(a: Action, /, *, status: str, reason: str | None) -> Action: ...


@evolves(Action)
def action_pending(a: Action, /, *, status: str, expires_at: str | None) -> Action: ...


@evolves(Action)
def action_asked_again(
    a: Action, /, *, status: str, expires_at: str | None, approver: str | None
) -> Action: ...


# -- usage ------------------------------------------------------------------------------------


@makes(UsageTotals)
def new_usage(*, input_tokens: int, output_tokens: int, cost: float) -> UsageTotals: ...
