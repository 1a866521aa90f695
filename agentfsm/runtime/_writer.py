"""The only way the Runner changes a run: append events through the store, then act.

A `Writer` holds the Runner's view of one run (its record at some version). `append(specs)`
stamps the next sequences and the injected clock's time, checks the batch against the table
and the Runner's guards (with the clock's `now` and the shared budget of a subagent tree),
and appends it with `expected_version` = the version it holds. So every fact is durable
before the code that depends on it runs.

When another process appended first (`ConcurrencyConflictError`), the writer reads the new
events and folds them in:

- control events (`run.cancel_requested`, approvals' decisions, pause/resume, a stop) are
  how other processes steer a run: the batch is re-stamped on top and appended if it is
  still legal (a tool's result is still recorded after a cancel), and if it is not, the
  writer raises `StateChanged` so the Runner re-decides from the new record;
- driving events (a model or tool event, an approval request, an event a call or a
  decision proposed) mean another worker is driving the run: `RunSupersededError`, and this
  Runner stops instead of forking the work.

A writer driving under a lease (`lease`) checks it before every append: a lost lease (its
heartbeat refused, or not through for its ttl) raises `LeaseLostError` and nothing is sent.

A batch may take the next step's opening event along (`then`: a `tool.started` with the
decision that requested the call, a `model.started` with the result the model will see):
one append instead of two. The ride-along is checked like the batch, and left out, never
refused, when it does not pass, or when the batch must be re-stamped after another
process's events (the step it opens was decided from a record that is no longer the run's).

An event that records spending past a budget (a model call's usage, a tool's cost: see
`Reducer.overrun`) is appended, since the call happened, but nothing of the batch after it:
the append then raises the `OverrunError` (a `GuardRejectedError`), so the caller stops the
run right there with `run.terminated` as for any guard's refusal. A `model.completed` without
usage on a run under a budget is stopped the same way (`agentfsm.runtime._metering`): its
limit could not be checked.

Every applied event is logged as `transition.applied` (run_id, sequence, event, from_state,
to_state, and `guard_verdict="passed"` on guarded edges); a refusal as `guard.rejected`.

What a writer appends is said as specs (`Spec`): an event's class and its own fields, the
envelope (run, sequence, time) left to the writer, which stamps it when it appends. The specs
the Runner and the SDK adapters both write are built here, in one place (`requested`,
`declined`, `refused`, ...). The writers of a subagent tree share one `BudgetTree`: each
charges its run's spending to it after every append, and checks its batches against the
tree's totals.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Generator, Sequence
from datetime import datetime
from typing import Any, Protocol

import attrs

from agentfsm._log import get_logger, info_enabled, log_applied, log_guard_rejected
from agentfsm.errors import (
    ConcurrencyConflictError,
    GuardRejectedError,
    LeaseLostError,
    LifecycleError,
    OverrunError,
    RunSupersededError,
    StoreError,
)
from agentfsm.events import models as m
from agentfsm.events._canonical import call_digest
from agentfsm.events.models import Event, Proposal, ProposedEvent, Refusal
from agentfsm.guards.base import GuardContext
from agentfsm.guards.budget import SharedBudget
from agentfsm.names import DecisionKind, EventType
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.runtime._metering import missing_usage
from agentfsm.stores._append import hands_fold
from agentfsm.stores.base import AsyncEventStore, EventStore
from agentfsm.stores.lease import HeldLease
from agentfsm.stores.rows import Folded

__all__ = [
    "AsyncWriter",
    "BudgetTree",
    "RunWriter",
    "Spec",
    "StateChanged",
    "Then",
    "Writer",
    "approval_asked",
    "built",
    "call_started",
    "declined",
    "emit_refused",
    "largest_call",
    "proposal",
    "refused",
    "refused_decision",
    "requested",
    "terminated",
]

# -- what a writer appends: specs -----------------------------------------------------------


@attrs.define  # not frozen: a turn builds several, and a frozen one costs twice as much
class Spec:
    """One event to append: its model and its own fields; the writer stamps the envelope.

    Attributes:
        cls: the event's model (a built-in one, or a lifecycle's own `CustomEvent`).
        fields: its own fields (a field that is None is left out).
        event: the event already built, and so validated, as the next of the record it
            follows (`built`): the writer takes it, restamped with its own sequence and
            time, instead of validating the same fields again.
    """

    cls: type[Any]
    fields: dict[str, Any]
    event: Event | None = None


def built(spec: Spec, record: RunRecord, at: str) -> Event:
    """`spec`'s event, built (and so validated) as the next event of `record` at `at`, and
    kept on the spec (`Spec.event`) for the writer to take."""
    event: Event = spec.cls(
        run_id=record.run_id,
        sequence=record.version + 1,
        occurred_at=at,
        **{k: v for k, v in spec.fields.items() if v is not None},
    )
    spec.event = event
    return event


#: What may ride along with a batch (`Writer.append`'s `then`): given the record after the
#: batch and the append's `now`, the specs of the step that would come next, or none.
Then = Callable[[RunRecord, datetime], Sequence[Spec]]


# The specs the Runner and the SDK adapters both write, built in one place.
def requested(action_id: str, tool: str, arguments: Any) -> Spec:
    """`tool.requested` for a call."""
    return Spec(m.ToolRequested, {"action_id": action_id, "tool": tool, "arguments": arguments})


def call_started(action_id: str, tool: str, arguments: Any) -> list[Spec]:
    """`tool.requested` + `tool.started`: a call that is about to run, as an SDK reports it."""
    return [requested(action_id, tool, arguments), Spec(m.ToolStarted, {"action_id": action_id})]


def approval_asked(
    action_id: str, tool: str, arguments: Any, expires_at: str | None = None
) -> Spec:
    """`approval.requested` for a call (valid until `expires_at`, if given)."""
    fields = {"action_id": action_id, "tool": tool, "arguments": arguments}
    return Spec(m.ApprovalRequested, {**fields, "expires_at": expires_at})


def declined(action_id: str, tool: str, arguments: Any, approver: str, reason: str) -> list[Spec]:
    """A call that will not run, recorded as asked and rejected by `approver` (a policy, an SDK)."""
    rejected = {
        "action_id": action_id,
        "approver": approver,
        "reason": reason,
        "arguments_digest": call_digest(tool, arguments),
    }
    return [approval_asked(action_id, tool, arguments), Spec(m.ApprovalRejected, rejected)]


def refused(spec: Spec, error: GuardRejectedError) -> Spec | None:
    """`model.completed` recording the decision `spec` records as refused by `error`'s guard,
    or None when `error` is no refusal of it (another event's, or a budget overrun).

    What the refused decision proposed is summed up (`Proposal`), never kept: an answer of
    1,000 calls is recorded in a few hundred bytes. Its usage and text stay (the call
    happened: budgets count it). The refusal's message is the guard's sentence.
    """
    if spec.cls is not m.ModelCompleted:
        return None
    if spec.fields["decision"] == DecisionKind.REFUSED:
        return None  # refused as a refusal: nothing is left to take back
    if error.event != EventType.MODEL_COMPLETED or isinstance(error, OverrunError):
        return None
    why = Refusal.of(error.guard, error.detail, proposal(spec.fields))
    return refused_decision(spec.fields, why)


def proposal(fields: dict[str, Any]) -> Proposal:
    """What the decision of `model.completed` fields proposed, summed up (`Proposal`)."""
    calls = fields.get("tool_calls") or ()
    emit = fields.get("emit")
    event = emit.type if isinstance(emit, ProposedEvent) else None
    return Proposal.of(fields["decision"], [call["tool"] for call in calls], event)


def refused_decision(fields: dict[str, Any], refusal: Refusal) -> Spec:
    """`model.completed` recording the decision of `fields` as refused, for `refusal`: the
    one way any refused decision is recorded (a guard's refusal, or the table's refusal of
    the event it proposed). Its usage and text stay: the call happened."""
    return Spec(
        m.ModelCompleted,
        {
            "decision": DecisionKind.REFUSED,
            "output": fields.get("output"),
            "usage": fields.get("usage"),
            "refusal": refusal,
        },
    )


def emit_refused(action_id: str, refusal: Refusal) -> Spec:
    """`emit.refused` for the event call `action_id` proposed (or tried to)."""
    return Spec(m.EmitRefused, {"action_id": action_id, "refusal": refusal})


def terminated(error: GuardRejectedError) -> Spec:
    """`run.terminated` recording the stop a guard's refusal calls for."""
    return Spec(m.RunTerminated, {"stop_reason": error.stop_reason, "detail": error.detail})


# -- the budget the writers of a subagent tree share ----------------------------------------


class BudgetTree:
    """The shared budget of a root run and its subagent runs, updated as they append.

    `SharedBudget` is an immutable value; this holder is what the writers of one tree share
    (they may run on several threads), each replacing it with its run's latest charge.

    Args:
        budget: the root's limits (and any children already known).
    """

    def __init__(self, budget: SharedBudget) -> None:
        self._budget = budget
        self._lock = threading.Lock()

    @property
    def current(self) -> SharedBudget:
        """The budget as of the last append of any run of the tree."""
        return self._budget

    def charge(self, record: RunRecord) -> None:
        """Record `record`'s spending as its run's share."""
        with self._lock:
            if self._budget.covers(record.run_id):
                self._budget = self._budget.charge(record)

    def spawn(self, child: str, *, parent: str) -> None:
        """Add `child` to the tree under `parent` (no-op when it is already there)."""
        with self._lock:
            if not self._budget.covers(child):
                self._budget = self._budget.spawn(child, parent=parent)


# -- the writers ----------------------------------------------------------------------------


E = EventType
#: Events only the process driving a run appends. Seeing one from someone else means the
#: run has another driver.
DRIVING = frozenset(
    {
        E.RUN_STARTED,
        E.MODEL_STARTED,
        E.MODEL_COMPLETED,
        E.MODEL_FAILED,
        E.HANDOFF,
        E.TOOL_REQUESTED,
        E.TOOL_STARTED,
        E.TOOL_COMPLETED,
        E.TOOL_FAILED,
        E.TOOL_OUTCOME_UNKNOWN,
        E.APPROVAL_REQUESTED,
        E.RUN_COMPLETED,
        E.RUN_CANCELLED,
        E.EMIT_REFUSED,
        E.USAGE_REPORTED,
    }
)


class StateChanged(Exception):  # noqa: N818  (a signal to re-decide, not a failure)
    """Another process changed the run and the pending batch no longer applies: re-decide."""

    def __init__(self, record: RunRecord) -> None:
        super().__init__(f"run '{record.run_id}' changed (now '{record.status}')")
        self.record = record


class RunWriter(Protocol):
    """A run's writer as the drive core sees it (`Writer` and `AsyncWriter` are both one).

    The core decides from the writer's record and leaves what it decides in it (the calls
    it is to make, the lease it drives under); appending is its shell's, which holds the
    writer's own class (`Append`, `Largest` and `Batch` carry it back to the shell).
    """

    run_id: str
    record: RunRecord
    budget: BudgetTree | None
    #: Calls whose `tool.started` rode along with the batch that requested them.
    fresh: set[str]
    #: How many events rode along with the last append (`then`).
    rode: int
    lease: HeldLease | None

    @property
    def known_largest(self) -> tuple[int, float] | None:
        """The largest model call so far, if known without reading the log."""

    def begin_step(self) -> None:
        """Mark the record the next step is decided from."""

    def check_lease(self) -> None:
        """Refuse to go on once the run's lease is lost."""

    def applied(self, before: RunRecord, events: list[Event], after: list[RunRecord]) -> None:
        """Log what a store appended directly, as after an append of the writer's."""


@attrs.define  # not frozen: built on every append, and a frozen one costs twice as much
class _Put:
    """A batch ready for the store: the record it follows, its events, the records after
    each (under the Runner's reducer), and the overrun to raise once it is appended."""

    record: RunRecord
    events: list[Event]
    after: list[RunRecord]
    over: OverrunError | None
    #: How many events at the end of `events` rode along (`then`).
    tail: int = 0


class _Base:
    """What the sync and async writers share: stamping, checking, logging, catching up."""

    def __init__(
        self,
        record: RunRecord,
        *,
        reducer: Reducer,
        store_reducer: Reducer,
        clock: Callable[[], datetime],
        logger: Any,
        budget: BudgetTree | None,
        max_conflicts: int,
    ) -> None:
        self.record = record
        self.run_id = record.run_id
        self.reducer = reducer
        self.budget = budget
        self._store_reducer = store_reducer
        self._clock = clock
        # Bound once per writer: a lazy proxy would build a new logger on every call.
        base = logger if logger is not None else get_logger()
        self._log = base.bind(run_id=record.run_id)
        self._max_conflicts = max_conflicts
        self._guarded = reducer.guards.events
        # Set by a subclass that knows its store: whether it is handed our fold (see `_fold`).
        self._hands_fold = False
        self._epoch = 0
        self._step_epoch = 0
        #: Calls whose `tool.started` rode along with the batch that requested them: the
        #: driver calls them next without appending it again (and only then).
        self.fresh: set[str] = set()
        #: How many events rode along with the last append (`then`).
        self.rode = 0
        #: The lease the run is driven under, checked before every append (None: unleased).
        self.lease: HeldLease | None = None
        # The largest model call's tokens and cost so far (the default reservation): known
        # from the start for a new run, read from the log once for a run that had turns.
        self._largest: tuple[int, float] | None = (0, 0.0) if record.turn == 0 else None

    def begin_step(self) -> None:
        """Mark the record the Runner is deciding from (see `StateChanged`)."""
        self._step_epoch = self._epoch

    @property
    def changed_since_step(self) -> bool:
        """Another process's events were folded in since `begin_step`."""
        return self._epoch != self._step_epoch

    @property
    def known_largest(self) -> tuple[int, float] | None:
        """`largest_call()` if it is known without reading the log, else None."""
        return self._largest

    def now(self) -> datetime:
        """The injected clock's reading."""
        return self._clock()

    def _build(self, specs: Sequence[Spec], record: RunRecord, at: str) -> list[Event]:
        events: list[Event] = []
        sequence = record.version
        for spec in specs:
            sequence += 1
            built = spec.event
            if built is not None and built.run_id == self.run_id and m.is_timestamp(at):
                # The only fields that may differ are the writer's: the next sequence, and
                # the time, checked as every event's is (the clock is the caller's; one that
                # fails is built in full below, to be refused as for any other event).
                event = built
                if event.sequence != sequence or event.occurred_at != at:
                    event = event.model_copy(update={"sequence": sequence, "occurred_at": at})
            else:
                event = spec.cls(
                    run_id=self.run_id,
                    sequence=sequence,
                    occurred_at=at,
                    **{k: v for k, v in spec.fields.items() if v is not None},
                )
            events.append(event)
        return events

    def _check(
        self, record: RunRecord, events: list[Event], now: datetime, quiet: bool = False
    ) -> tuple[list[Event], list[RunRecord], OverrunError | None]:
        """The events to append and the records after each, under the Runner's reducer.

        Raises the reducer's refusals. An event that overran a budget ends the batch: it and
        the events before it are returned, with the `OverrunError` to raise once they are
        appended (the caller must not act on the rest of the batch).
        """
        ctx = GuardContext(now, budget=self.budget.current) if self.budget is not None else None
        out = []
        reducer = self.reducer
        reduce = reducer.reduce
        for i, event in enumerate(events):
            try:
                new = reduce(record, event, ctx)
            except GuardRejectedError as exc:
                if not quiet:
                    log_guard_rejected(self._log, event, record.status, exc)
                raise
            except LifecycleError:
                if self.changed_since_step:
                    raise StateChanged(self.record) from None
                raise
            out.append(new)
            over = reducer.overrun(record, event, new, ctx)
            if over is None and isinstance(event, m.ModelCompleted):
                # No usage under a budget: the limit cannot be checked, so the run stops.
                unmetered = missing_usage(record, event, ctx, reducer.guards.guards)
                over = unmetered.overrun(record, event) if unmetered is not None else None
            if over is not None:
                return events[: i + 1], out, over
            record = new
        return events, out, None

    def _overran(self, over: OverrunError) -> OverrunError:
        self._log.warning(
            "budget.overrun",
            sequence=over.sequence,
            event_type=over.event,
            guard=over.guard,
            stop_reason=over.stop_reason,
            detail=over.detail,
        )
        return over

    def applied(self, before: RunRecord, events: list[Event], after: list[RunRecord]) -> None:
        """Log (and charge to the budget tree) `events`, appended after `before` and leading
        to `after`: what the writer does after each of its appends, for the one a store
        made directly (a run's `run.started`)."""
        log = self._log
        if info_enabled(log):  # asked once per append: no per-event work when filtered out
            previous = before.status
            guarded = self._guarded
            for event, record in zip(events, after, strict=True):
                log_applied(log, event, previous, record.status, guarded=event.type in guarded)
                previous = record.status
        if self._largest is not None:
            for event in events:
                if isinstance(event, m.ModelCompleted):
                    self._largest = largest_call(self._largest, event)
        if self.budget is not None:
            self.budget.charge(after[-1])

    def _fold_foreign(self, events: list[Event]) -> None:
        record = self.record
        for event in events:
            # An event a call or a decision proposed (`emitted_by`) is a driver's too.
            if event.type in DRIVING or getattr(event, "emitted_by", None) is not None:
                raise RunSupersededError(
                    run_id=self.run_id, sequence=event.sequence, event=event.type
                )
            before = record.status
            record = self._store_reducer.reduce(record, event)
            log_applied(self._log, event, before, record.status, source="another process")
        if events:
            self._epoch += 1
            self.record = record
            if self.budget is not None:
                self.budget.charge(record)

    def _prepare(self, specs: Sequence[Spec], then: Then | None = None) -> _Put:
        """The batch to append on the writer's record: stamped, and checked by our reducer.

        With `_settle`, the whole append but the store call: `_attempts` is the loop both
        writers run, `_prepare`, the store's append (a lost race: `catch_up` and again),
        `_settle`.
        `then`'s specs ride along when they pass (see the module docstring).
        """
        record = self.record
        now = self._clock()
        at = now.isoformat()
        events = self._build(specs, record, at)
        events, after, over = self._check(record, events, now)
        if then is None or over is not None or self.changed_since_step:
            return _Put(record, events, after, over)
        last = after[-1] if after else record
        tail = then(last, now)
        if not tail:
            return _Put(record, events, after, over)
        try:
            more, more_after, over = self._check(last, self._build(tail, last, at), now, True)
        except (GuardRejectedError, LifecycleError, StateChanged):
            over = more = None
        if more is None or over is not None:
            # Refused, or it would stop the run: it goes its own way, as the next step.
            return _Put(record, events, after, None)
        return _Put(record, events + more, after + more_after, None, len(more))

    def _attempts(
        self, specs: Sequence[Spec], then: Then | None
    ) -> Generator[_Put, RunRecord | LifecycleError | None, RunRecord]:
        """The append loop without its I/O, one for both writers.

        It yields each batch to append and is sent the store's answer: the record after it,
        the store's refusal, or None for a lost race (the shell has caught up, so the next
        `_prepare` stamps the batch on top of the other process's events).
        """
        for _ in range(self._max_conflicts):
            put = self._prepare(specs, then)
            then = None
            self.check_lease()
            answer = yield put
            if answer is None:
                continue
            if isinstance(answer, LifecycleError) and put.tail:
                continue  # the store's own reducer refused the ride-along: without it
            return self._settle(put, answer)
        raise self._give_up()

    def _fold(self, put: _Put) -> dict[str, Folded]:
        """The store's `folded=`: our fold of the batch, so the store need not fold it again
        (it still judges each event: `Reducer.admit`). Empty for a store that does not take
        one (a subclass's `append` that may not pass it on, a third-party store)."""
        if not self._hands_fold:
            return {}
        return {"folded": Folded(self.reducer, put.record, tuple(put.events), tuple(put.after))}

    def _settle(self, put: _Put, got: RunRecord | LifecycleError) -> RunRecord:
        """Take the store's answer to `put`: the record after it, or its refusal."""
        if isinstance(got, LifecycleError):
            # The store's own reducer refused what ours accepted (its guards differ).
            if self.changed_since_step:
                raise StateChanged(self.record) from None
            raise got
        self.record = got
        self.rode = put.tail
        self.applied(put.record, put.events, put.after)
        if put.over is not None:
            raise self._overran(put.over)
        return got

    def check_lease(self) -> None:
        """Refuse to write once the run's lease is lost (see the module docstring).

        Raises:
            LeaseLostError: the lease is lost.
        """
        lease = self.lease
        if lease is not None and lease.lost:
            raise LeaseLostError(run_id=self.run_id, worker_id=lease.holder)

    def _give_up(self) -> StoreError:
        return StoreError(
            f"run '{self.run_id}': {self._max_conflicts} appends in a row lost a race; "
            "is something appending to it in a loop?"
        )


def largest_call(largest: tuple[int, float], event: Event) -> tuple[int, float]:
    """`largest` (tokens, cost) after seeing `event`: each the max over the model calls."""
    usage = event.usage if isinstance(event, m.ModelCompleted) else None
    if usage is None:
        return largest
    tokens = usage.input_tokens + usage.output_tokens
    return max(largest[0], tokens), max(largest[1], usage.cost)


class Writer(_Base):
    """Appends a run's events through a sync `EventStore` (see the module docstring).

    Args:
        store: the store.
        record: the run's record the writer starts from (loaded, or the initial one).
        reducer: checks batches before they are appended (the Runner's guards).
        clock: stamps `occurred_at` and is the guards' `now`.
        logger: a structlog logger (by default `agentfsm._log.get_logger()`: see there).
        budget: the shared budget of a subagent tree the run belongs to.
        max_conflicts: lost races in a row before giving up.
    """

    def __init__(
        self,
        store: EventStore,
        record: RunRecord,
        *,
        reducer: Reducer,
        clock: Callable[[], datetime],
        logger: Any = None,
        budget: BudgetTree | None = None,
        max_conflicts: int = 20,
    ) -> None:
        super().__init__(
            record,
            reducer=reducer,
            store_reducer=store.reducer,
            clock=clock,
            logger=logger,
            budget=budget,
            max_conflicts=max_conflicts,
        )
        self.store = store
        self._hands_fold = hands_fold(store)

    def append(self, specs: Sequence[Spec], then: Then | None = None) -> RunRecord:
        """Append a batch atomically and return the record after it.

        `then` may add the next step's opening events to the batch (see the module
        docstring): on the first try only, and only if they pass.

        Raises:
            GuardRejectedError: a guard refused an event (nothing was written).
            OverrunError: an event overran a budget: the batch up to it was written, not
                the rest; stop the run.
            StateChanged: another process changed the run and the batch no longer applies.
            RunSupersededError: another process is driving the run.
            LifecycleError: the batch is illegal on the record the Runner decided from.
            LeaseLostError: the run's lease is lost (nothing was sent).
        """
        attempts = self._attempts(specs, then)
        put = next(attempts)
        while True:
            answer: RunRecord | LifecycleError | None
            try:
                answer = self.store.append(
                    self.run_id, put.events, put.record.version, **self._fold(put)
                )
            except ConcurrencyConflictError:
                self.catch_up()
                answer = None
            except LifecycleError as exc:
                answer = exc
            try:
                put = attempts.send(answer)
            except StopIteration as done:
                record: RunRecord = done.value
                return record

    def catch_up(self) -> RunRecord:
        """Fold in what other processes appended since the writer's version."""
        events = list(self.store.events(self.run_id, after=self.record.version))
        self._fold_foreign(events)
        return self.record

    def largest_call(self) -> tuple[int, float]:
        """The most tokens and the most cost any one model call of the run has used so far."""
        if self._largest is None:
            largest = (0, 0.0)
            for event in self.store.events(self.run_id):
                largest = largest_call(largest, event)
            self._largest = largest
        return self._largest


class AsyncWriter(_Base):
    """The same as `Writer`, over an `AsyncEventStore`."""

    def __init__(
        self,
        store: AsyncEventStore,
        record: RunRecord,
        *,
        reducer: Reducer,
        store_reducer: Reducer,
        clock: Callable[[], datetime],
        logger: Any = None,
        budget: BudgetTree | None = None,
        max_conflicts: int = 20,
    ) -> None:
        super().__init__(
            record,
            reducer=reducer,
            store_reducer=store_reducer,
            clock=clock,
            logger=logger,
            budget=budget,
            max_conflicts=max_conflicts,
        )
        self.store = store
        self._hands_fold = hands_fold(store)
        # Concurrent calls of one batch append through one writer, one batch at a time.
        self._lock = asyncio.Lock()

    async def append(self, specs: Sequence[Spec], then: Then | None = None) -> RunRecord:
        """Append a batch atomically (see `Writer.append`); concurrent callers queue."""
        async with self._lock:
            return await self._append(specs, then)

    async def _append(self, specs: Sequence[Spec], then: Then | None) -> RunRecord:
        attempts = self._attempts(specs, then)
        put = next(attempts)
        while True:
            answer: RunRecord | LifecycleError | None
            try:
                answer = await self.store.append(
                    self.run_id, put.events, put.record.version, **self._fold(put)
                )
            except ConcurrencyConflictError:
                await self.catch_up()
                answer = None
            except LifecycleError as exc:
                answer = exc
            try:
                put = attempts.send(answer)
            except StopIteration as done:
                record: RunRecord = done.value
                return record

    async def catch_up(self) -> RunRecord:
        """Fold in what other processes appended since the writer's version."""
        events = [e async for e in self.store.events(self.run_id, after=self.record.version)]
        self._fold_foreign(events)
        return self.record

    async def largest_call(self) -> tuple[int, float]:
        """The most tokens and the most cost any one model call of the run has used so far."""
        if self._largest is None:
            largest = (0, 0.0)
            async for event in self.store.events(self.run_id):
                largest = largest_call(largest, event)
            self._largest = largest
        return self._largest

    async def poll(self) -> bool:
        """Whether another process appended since the writer's version (then folded in)."""
        async with self._lock:
            info = await self.store.run_info(self.run_id)
            if info.version == self.record.version:
                return False
            await self.catch_up()
            return True
