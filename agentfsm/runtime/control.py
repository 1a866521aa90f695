"""Steering a run from anywhere: approve, reject, cancel, pause, resume, submit, migrate,
and fork (a new run that starts from another's first events).

Each function appends one event through the store, from any thread, process or machine that
can reach it, and returns the run's record after it. None of them drives the run: the
process running it notices at its next append (the store's optimistic concurrency tells it
someone else wrote), and a `Worker` picks up runs that became runnable.

What a driven run expects from outside goes in while a driver holds its lease: `approve`,
`reject`, `cancel` (and `resume`, which only a paused run takes, and no driver drives).
What would change the run under its driver (`pause`, `append_event`, `migrate`) is refused
while a live driver holds it, with `RunHeldError` naming the holder, or waits `wait=`
seconds for it to let go.

If another process appends at the same moment, the function reloads and tries again as long
as its event is still legal; an event the run's lifecycle refuses raises the reducer's
`LifecycleError` (e.g. approving a call that is not waiting for approval; one already
decided is an `AlreadyDecidedError` naming that decision), with nothing written. The `a*`
variants do the same over an `AsyncEventStore`: every verb is one generator of store ops
(`_steering.py`), which a sync or an async performer runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import islice
from typing import Any

from agentfsm.errors import (
    EventFormatError,
    ForkError,
    MigrationError,
    RunNotFoundError,
)
from agentfsm.events import models as m
from agentfsm.events.codec import parse_event
from agentfsm.events.models import Event, Limits
from agentfsm.fsm.diff import diff_tables
from agentfsm.fsm.table import TransitionTable
from agentfsm.guards.limits import DEFAULT_MAX_CALLS_PER_DECISION, DEFAULT_MAX_TURNS, with_caps
from agentfsm.names import ActionStatus, StateKind
from agentfsm.record import RunRecord
from agentfsm.runtime._steering import (
    Clock,
    Steps,
    Want,
    decide,
    now,
    run_async,
    run_sync,
    steer,
)
from agentfsm.runtime._writer import Spec, built
from agentfsm.stores._checks import check_run_id
from agentfsm.stores.base import AsyncEventStore, EventStore

__all__ = [
    "aapprove",
    "acancel",
    "apause",
    "append_event",
    "approve",
    "areject",
    "aresume",
    "asubmit",
    "cancel",
    "fork",
    "migrate",
    "pause",
    "reject",
    "resume",
    "submit",
]


def _bound(record: RunRecord, action_id: str, digest: str | None) -> str | None:
    """The digest a decision carries: the one the approver reviewed, else the call's own."""
    if digest is not None:
        return digest
    action = record.actions.get(action_id)
    return action.arguments_digest if action is not None else None


# Each verb's whole decision (which event, whether a live driver refuses it, how a refusal
# is explained) is one function returning its steps; the sync verb and its `a*` twin differ
# only in the performer (`run_sync`, `run_async`), so the twins cannot drift apart.


def _deciding(
    decision: type[m.ApprovalAccepted | m.ApprovalRejected],
    run_id: str,
    action_id: str,
    approver: str | None,
    reason: str | None,
    digest: str | None,
    clock: Clock,
) -> Steps:
    """`approve`'s and `reject`'s steps: the decision, bound to the call's digest."""

    def what(record: RunRecord) -> Want:
        fields = {"action_id": action_id, "approver": approver, "reason": reason}
        return Spec(decision, {**fields, "arguments_digest": _bound(record, action_id, digest)})

    return decide(run_id, action_id, what, clock)


def _cancelling(
    table: TransitionTable,
    run_id: str,
    reason: str | None,
    requested_by: str | None,
    clock: Clock,
) -> Steps:
    def what(record: RunRecord) -> Want:
        # Asking twice is one request: the first reason stands (wherever the table settles
        # a cancel, whatever the state is called).
        if table.settles_cancel(record.status):
            return None
        return Spec(m.RunCancelRequested, {"reason": reason, "requested_by": requested_by})

    return steer(run_id, what, clock)


def _pausing(run_id: str, reason: str, wait: float | None, clock: Clock) -> Steps:
    def what(_record: RunRecord) -> Want:
        return Spec(m.RunPaused, {"reason": reason})

    # Refused under a live driver: its model's answer would be lost under it.
    return steer(run_id, what, clock, unless_held=True, wait=wait)


def _resuming(table: TransitionTable, run_id: str, clock: Clock) -> Steps:
    def what(record: RunRecord) -> Want:
        # A run that is going (its model's side, or calls in flight) needs no resuming.
        if table.kind(record.status) in _GOING:
            return None
        return Spec(m.RunResumed, {})

    return steer(run_id, what, clock)


#: The kinds of the states where a run is going already (`resume` leaves it be).
_GOING = frozenset({StateKind.ACTIVE, StateKind.IN_FLIGHT})


def _migrate(
    old: TransitionTable, new: TransitionTable, by: str, reason: str
) -> Callable[[RunRecord], Want]:
    diff = diff_tables(old, new)

    def what(record: RunRecord) -> Want:
        problems = diff.cannot_migrate(record.status)
        if problems:
            raise MigrationError(
                run_id=record.run_id, sequence=record.version + 1, state=record.status,
                from_table=_named(old), to_table=_named(new), problems=problems,
            )  # fmt: skip
        fields = {"from_table": old.ref, "to_table": new.ref, "by": by, "reason": reason}
        return Spec(m.RunMigrated, fields)

    return what


def _named(table: TransitionTable) -> str:
    return f"'{table.name}' ({table.digest})"


def _migrating(store: EventStore, to: TransitionTable) -> TransitionTable:
    """The table the store's runs are under, once it is clear the store can record a move
    from it to `to`."""
    reducer = store.reducer
    if reducer.table_of(to.ref) is None:
        raise ValueError(
            f"the store's reducer cannot find table {_named(to)} to check the migration "
            "against: open the store with `Reducer(OLD, tables=[NEW])`, or `register()` the "
            "new table"
        )
    return reducer.table


def approve(
    store: EventStore,
    run_id: str,
    action_id: str,
    approver: str | None = None,
    *,
    digest: str | None = None,
    reason: str | None = None,
    clock: Clock = now,
) -> RunRecord:
    """Approve the exact call `action_id` is waiting with (`approval.accepted`).

    The decision carries the call's digest (`Action.arguments_digest`), so it can approve
    nothing else. Pass the `digest` of the call the approver reviewed to pin it: if the call
    waiting is not that one, nothing is approved.

    Raises:
        AlreadyDecidedError: someone already approved or rejected the call; the error says
            who, when and why.
        ActionError: the action is not waiting for approval, its approval expired, or it is
            not the call `digest` names.
        RunNotFoundError: no such run.
    """
    steps = _deciding(m.ApprovalAccepted, run_id, action_id, approver, reason, digest, clock)
    return run_sync(store, steps)


def reject(
    store: EventStore,
    run_id: str,
    action_id: str,
    approver: str | None = None,
    reason: str | None = None,
    *,
    digest: str | None = None,
    clock: Clock = now,
) -> RunRecord:
    """Refuse the call (`approval.rejected`); the model sees the reason as its result.

    Bound to the call's digest like `approve` (pin it with `digest`).

    Raises:
        AlreadyDecidedError: someone already approved or rejected the call; the error says
            who, when and why.
        ActionError: the action is not waiting for approval, or it is not the call `digest`
            names.
        RunNotFoundError: no such run.
    """
    steps = _deciding(m.ApprovalRejected, run_id, action_id, approver, reason, digest, clock)
    return run_sync(store, steps)


def cancel(
    store: EventStore,
    run_id: str,
    *,
    reason: str | None = None,
    requested_by: str | None = None,
    clock: Clock = now,
) -> RunRecord:
    """Ask for the run to stop (`run.cancel_requested`); a no-op if already asked.

    The process driving it stops starting work at its next step, settles calls in flight
    and appends `run.cancelled`; a run nobody drives is settled by the next `Runner.drive` or
    `Worker`.

    Raises:
        IllegalTransitionError: the run already ended.
        RunNotFoundError: no such run.
    """
    return run_sync(store, _cancelling(store.reducer.table, run_id, reason, requested_by, clock))


def pause(
    store: EventStore,
    run_id: str,
    reason: str,
    *,
    wait: float | None = None,
    clock: Clock = now,
) -> RunRecord:
    """Pause a run between steps (`run.paused`): waiting for input or a callback.

    Refused while a live driver holds the run (its model's answer would be lost under it),
    unless `wait` seconds are given for it to let go.

    Raises:
        LifecycleError: the run is not `running` between steps (a call or the model is in
            flight, or it waits for approval).
        RunHeldError: a live driver holds the run (still, after `wait` seconds).
        RunNotFoundError: no such run.
    """
    return run_sync(store, _pausing(run_id, reason, wait, clock))


def resume(store: EventStore, run_id: str, *, clock: Clock = now) -> RunRecord:
    """Resume a paused run (`run.resumed`); a no-op if it is already running.

    The other half of `pause`: this only makes the run runnable, and `Runner.drive(run_id)`
    or a `Worker` then drives it.

    Raises:
        IllegalTransitionError: the run is neither paused nor running.
        RunNotFoundError: no such run.
    """
    return run_sync(store, _resuming(store.reducer.table, run_id, clock))


#: The envelope fields `append_event` stamps itself, each with what it stamps, in wire order.
#: Fields a caller may not give, and who sets them.
_STAMPED = {
    "run_id": "the append (the run it appends to)",
    "sequence": "the append (the run's next sequence)",
    "type": "the append (the event type it is given)",
    "occurred_at": "the append (its time)",
    # A person's event is nobody's proposal: only the runtime names what proposed one.
    "emitted_by": "the runtime (what proposed the event)",
}
#: Event types a verb of their own writes: `run.forked` vouches that the events before it are
#: another run's, which only `fork`, copying them, can say; `run.started` opens a run, one way
#: per job (`submit` for a worker to drive, `Runner.run` to drive it here).
_OWN_VERB = {
    "run.forked": "agentfsm.runtime.control.fork (agentfsm fork)",
    "run.started": "agentfsm.runtime.control.submit (or Runner.run, which drives it too)",
}


def append_event(
    store: EventStore,
    run_id: str,
    event_type: str,
    fields: Mapping[str, Any] | None = None,
    /,
    *,
    wait: float | None = None,
    clock: Clock = now,
    **more: Any,
) -> RunRecord:
    """Append one event of the run's table, given its type and fields.

    The steering verb for a lifecycle's own events (`ticket.escalated`, `ticket.handed_back`).
    The fields are `fields` and `more` together (as `dict(fields, **more)`): a mapping holds
    any name, `clock` too, where keywords are the verb's own.

    Validated like any event (against the table's own types, then its lifecycle), and
    retried after a lost race like every steering verb. The envelope is the verb's to
    stamp: `run_id`, `sequence`, `type` and `occurred_at` given as fields are refused by
    name (`event_id` is the caller's to give), and so is `emitted_by`, which only the
    runtime sets on an event a call or a decision proposed. Refused while a live driver
    holds the run, unless `wait` seconds are given for it to let go.

    Raises:
        EventFormatError: the table has no such event type, a field is wrong, or it is one
            the verb stamps itself; or the type is one another verb writes (`run.forked`:
            `fork`, whose copied events it vouches for; `run.started`: `submit`, or
            `Runner.run`).
        LifecycleError: the run's lifecycle refuses it now (nothing was written).
        RunHeldError: a live driver holds the run (still, after `wait` seconds).
        RunNotFoundError: no such run.
    """
    given = {**(fields or {}), **more}
    stamped = [
        f"field '{name}' is set by {what}; leave it out"
        for name, what in _STAMPED.items()
        if name in given
    ]
    if stamped:
        raise EventFormatError(stamped, run_id=run_id)
    if event_type in _OWN_VERB:
        raise EventFormatError(
            [f"'{event_type}' is written by {_OWN_VERB[event_type]}, not appended"],
            run_id=run_id,
        )
    types = store.reducer.table.event_types
    # Checked once before any I/O, with the parser's own messages (the sequence is not known
    # yet: the error names the run only).
    try:
        parse_event(
            {**given, "type": event_type, "run_id": run_id, "sequence": 1,
             "occurred_at": clock().isoformat()},
            events=types,
        )  # fmt: skip
    except EventFormatError as exc:
        raise EventFormatError(exc.problems, run_id=run_id) from None
    cls = types.classes[event_type]
    steps = steer(run_id, lambda _record: Spec(cls, given), clock, unless_held=True, wait=wait)
    return run_sync(store, steps)


def migrate(
    store: EventStore,
    run_id: str,
    *,
    to: TransitionTable,
    by: str,
    reason: str,
    wait: float | None = None,
    clock: Clock = now,
) -> RunRecord:
    """Move a run in flight to another version of its table (`run.migrated`).

    Open `store` with the table the run is under now, whose reducer can find `to` (given
    as `Reducer(OLD, tables=[NEW])`, or registered). The run keeps its state, ledger and
    everything it recorded; every later event is checked against `to`, and the run is
    loaded with it from then on (a store of `to` that can find the old version).

    Refused, with nothing written, when the run's state is not in `to` or is of another
    kind there (`TableDiff.cannot_migrate`), as `agentfsm check-table NEW --against OLD`
    would list it; moves that changed are what a migration is for. Refused while a live
    driver holds the run (it would find its table changed under a call in flight), unless
    `wait` seconds are given for it to let go.

    Raises:
        MigrationError: the run's state is not in `to`, is of another kind there, or the
            run names no table.
        RunHeldError: a live driver holds the run (still, after `wait` seconds).
        IllegalTransitionError: the run has ended.
        TableMismatchError: the store is not opened with the run's table.
        EventFormatError: `by` or `reason` is empty.
        ValueError: the store's reducer cannot find `to`.
        RunNotFoundError: no such run.
    """
    old = _migrating(store, to)
    # Who and why are checked before any I/O, with the parser's own messages.
    try:
        parse_event(
            {"type": "run.migrated", "run_id": run_id, "sequence": 1,
             "occurred_at": "2026-01-01T00:00:00Z", "from_table": old.ref.model_dump(),
             "to_table": to.ref.model_dump(), "by": by, "reason": reason},
        )  # fmt: skip
    except EventFormatError as exc:
        raise EventFormatError(exc.problems, run_id=run_id) from None
    steps = steer(run_id, _migrate(old, to, by, reason), clock, unless_held=True, wait=wait)
    return run_sync(store, steps)


def fork(
    store: EventStore,
    run_id: str,
    *,
    at: int,
    as_run: str,
    by: str | None = None,
    reason: str | None = None,
    clock: Clock = now,
) -> RunRecord:
    """Start run `as_run` from run `run_id`'s first `at` events, to drive it on another way.

    The new run holds those events, re-addressed to it (types, payloads and times as they
    were), then a `run.forked` naming the source, the sequence and who forked it and why; its
    record is the source's record at `at` with `forked_from`/`forked_at` set. Append to it
    what should happen differently (`append_event`, `approve`, a `migrate` to another
    version of the table) and drive it with a Runner or a Worker like any run. The source is
    only read: its log, its lease and its record stay as they are. A fork can be forked.

    What the fork inherits is the source's: its `run.started` limits (a deadline that has
    passed stops it at its first guarded event) and the time its state was entered (a
    timeout counts from then). Its calls are its own: their idempotency keys name the fork
    (`as_run:action_id`), so a call the source had requested but not started at `at` is
    made again, for the fork, when the fork is driven.

    Raises:
        ForkError: the run has ended at `at`, or a call was in flight there (started, no
            outcome yet: the fork could never learn it), naming where a fork can be taken.
        ValueError: `at` is not a sequence of the run, `as_run` is `run_id`, or a run
            `as_run` exists already.
        RunNotFoundError: no run `run_id`.
        ConcurrencyConflictError: a run `as_run` was made meanwhile, by another writer.
        EventFormatError: `by` or `reason` is empty.
        TableMismatchError: the store's reducer does not know the run's table.
    """
    check_run_id(as_run)
    if as_run == run_id:
        raise ValueError(f"a fork of run {run_id!r} needs another run id than its own")
    version = store.run_info(run_id).version
    if not 1 <= at <= version:
        raise ValueError(
            f"run {run_id!r} has {version} events: fork it at a sequence from 1 to {version}, "
            f"not {at}"
        )
    try:
        store.run_info(as_run)
    except RunNotFoundError:
        pass
    else:
        raise ValueError(f"run {as_run!r} exists already: a fork is a new run")
    reducer = store.reducer
    record = reducer.initial(as_run)
    copied: list[Event] = []
    for event in islice(store.events(run_id), at):
        moved = event.model_copy(update={"run_id": as_run})
        record = reducer.reduce(record, moved)
        copied.append(moved)
    _forkable(record, run_id, at, reducer.table)
    given = {"from_run": run_id, "from_sequence": at, "by": by, "reason": reason}
    stamped = {"type": "run.forked", "run_id": as_run, "sequence": at + 1,
               "occurred_at": clock().isoformat()}  # fmt: skip
    try:
        forked = parse_event({**stamped, **{k: v for k, v in given.items() if v is not None}})
    except EventFormatError as exc:
        raise EventFormatError(exc.problems, run_id=as_run) from None
    return store.append(as_run, [*copied, forked], 0)


def _forkable(record: RunRecord, run_id: str, at: int, table: TransitionTable) -> None:
    """Raise `ForkError` if a run whose record after `at` is `record` cannot go on from there."""
    state = record.status
    if state in table.terminal_states:
        raise ForkError(
            f"the run has ended there; fork it before the event that ended it (sequence "
            f"{at}) to try another way",
            run_id=run_id, sequence=at, state=state,
        )  # fmt: skip
    started = [a for a in record.in_flight if record.actions[a].status == ActionStatus.STARTED]
    if started:
        calls = ", ".join(f"'{a}'" for a in started)
        raise ForkError(
            f"call {calls} started and has no outcome yet there, which the fork could never "
            "learn; fork before its tool.started or after its outcome",
            run_id=run_id, sequence=at, state=state,
        )  # fmt: skip


def submit(
    store: EventStore,
    run_id: str,
    objective: str | None = None,
    *,
    agent: str | None = None,
    limits: Limits | None = None,
    clock: Clock = now,
) -> RunRecord:
    """Create a run (`run.started`) for a `Worker` to drive.

    The run is capped as a Runner caps the runs it starts, with the default caps
    (`DEFAULT_MAX_TURNS` turns, `DEFAULT_MAX_CALLS_PER_DECISION` calls per decision) unless
    `limits` sets them (a number, or None to lift one): whichever Runner drives it, its log
    says what it is under.

    Raises:
        ConcurrencyConflictError: a run with this id already exists.
    """
    event = _submitted(store.reducer.table, run_id, objective, agent, limits, clock)
    return store.append(run_id, [event], 0)


def _submitted(
    table: TransitionTable,
    run_id: str,
    objective: str | None,
    agent: str | None,
    limits: Limits | None,
    clock: Clock,
) -> Event:
    """The `run.started` of a submitted run (see `submit`)."""
    capped = with_caps(
        limits,
        max_turns=DEFAULT_MAX_TURNS,
        max_calls_per_decision=DEFAULT_MAX_CALLS_PER_DECISION,
    )
    fields = {"objective": objective, "agent": agent, "limits": capped, "table": table.ref}
    return built(Spec(m.RunStarted, fields), RunRecord(run_id=run_id), clock().isoformat())


async def aapprove(
    store: AsyncEventStore,
    run_id: str,
    action_id: str,
    approver: str | None = None,
    *,
    digest: str | None = None,
    reason: str | None = None,
    clock: Clock = now,
) -> RunRecord:
    """`approve` over an `AsyncEventStore`."""
    steps = _deciding(m.ApprovalAccepted, run_id, action_id, approver, reason, digest, clock)
    return await run_async(store, steps)


async def areject(
    store: AsyncEventStore,
    run_id: str,
    action_id: str,
    approver: str | None = None,
    reason: str | None = None,
    *,
    digest: str | None = None,
    clock: Clock = now,
) -> RunRecord:
    """`reject` over an `AsyncEventStore`."""
    steps = _deciding(m.ApprovalRejected, run_id, action_id, approver, reason, digest, clock)
    return await run_async(store, steps)


async def acancel(
    store: AsyncEventStore,
    run_id: str,
    *,
    reason: str | None = None,
    requested_by: str | None = None,
    clock: Clock = now,
) -> RunRecord:
    """`cancel` over an `AsyncEventStore`."""
    steps = _cancelling(store.reducer.table, run_id, reason, requested_by, clock)
    return await run_async(store, steps)


async def apause(
    store: AsyncEventStore,
    run_id: str,
    reason: str,
    *,
    wait: float | None = None,
    clock: Clock = now,
) -> RunRecord:
    """`pause` over an `AsyncEventStore`."""
    return await run_async(store, _pausing(run_id, reason, wait, clock))


async def aresume(store: AsyncEventStore, run_id: str, *, clock: Clock = now) -> RunRecord:
    """`resume` over an `AsyncEventStore`."""
    return await run_async(store, _resuming(store.reducer.table, run_id, clock))


async def asubmit(
    store: AsyncEventStore,
    run_id: str,
    objective: str | None = None,
    *,
    agent: str | None = None,
    limits: Limits | None = None,
    clock: Clock = now,
) -> RunRecord:
    """`submit` over an `AsyncEventStore`."""
    event = _submitted(store.reducer.table, run_id, objective, agent, limits, clock)
    return await store.append(run_id, [event], 0)
