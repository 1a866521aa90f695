"""The steering verbs' one loop, as a generator of store ops, and its two performers.

Every verb of `agentfsm.runtime.control` is a generator (`steer`, `decide`) that yields what
it needs of the store: load a run, append an event after the version it was built on, list
the runs waiting below a prefix, ask who holds the run's lease (`unheld`), sleep.
`run_sync` performs those ops on an `EventStore`, `run_async` on an `AsyncEventStore`; the
deciding is written once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator, Sequence
from datetime import UTC, datetime
from typing import Any

import attrs

from agentfsm.errors import (
    ActionError,
    AlreadyDecidedError,
    ConcurrencyConflictError,
    LifecycleError,
    RunHeldError,
    StoreError,
)
from agentfsm.events.models import ApprovalAccepted, ApprovalRejected, ApprovalRequested, Event
from agentfsm.fsm.table import TransitionTable
from agentfsm.names import ActionStatus
from agentfsm.record import RunRecord
from agentfsm.runtime._writer import Spec, built
from agentfsm.stores.base import AsyncEventStore, EventStore
from agentfsm.stores.lease import Holder, Patience
from agentfsm.stores.runs import RunInfo

__all__ = [
    "Clock",
    "Steps",
    "Want",
    "decide",
    "now",
    "run_async",
    "run_sync",
    "steer",
    "unheld",
]

Clock = Callable[[], datetime]
_TRIES = 20
#: How many waiting subagent runs a refused decision looks through for the call.
_SCAN = 1000
#: The event a verb appends (its spec), or None for "nothing to do".
Want = Spec | None
_Decision = ApprovalAccepted | ApprovalRejected


def now() -> datetime:
    return datetime.now(UTC)


@attrs.frozen
class _Load:
    run_id: str


@attrs.frozen
class _Put:
    """Append `event` after the version it was built on; sent the record after it, `_CONFLICT`
    after a lost race, or the store's `LifecycleError` (a value, so `_decide` can explain it)."""

    event: Event


@attrs.frozen
class _Waiting:
    """The runs below `prefix` that wait for approval."""

    prefix: str


@attrs.frozen
class _Holder:
    """Who holds the run's lease (`EventStore.holder`): a live holder, or None."""

    run_id: str


@attrs.frozen
class _Sleep:
    seconds: float


@attrs.frozen
class _Decided:
    """The decision on call `action_id` that stands in the run's log (see `_Standing`)."""

    run_id: str
    action_id: str


@attrs.define
class _Standing:
    """Reads a run's log for the decision on one call that stands: the last
    `approval.accepted` or `approval.rejected` naming it, with no `approval.requested` of it
    after (a call asked again waits anew). Fed event by event, so the log is never held."""

    action_id: str
    decision: _Decision | None = None

    def see(self, event: Event) -> None:
        if isinstance(event, ApprovalAccepted | ApprovalRejected):
            if event.action_id == self.action_id:
                self.decision = event
        elif isinstance(event, ApprovalRequested) and event.action_id == self.action_id:
            self.decision = None


_CONFLICT: Any = object()
_Op = _Load | _Put | _Waiting | _Decided | _Holder | _Sleep
Steps = Generator[_Op, Any, RunRecord]


def unheld(run_id: str, wait: float | None) -> Generator[_Op, Any, None]:
    """Return once no live driver holds the run (waiting up to `wait` seconds for it).

    For the verbs that would change a run under its driver (a pause, a lifecycle's own
    event, a migration). Checked before their append: a driver that takes the run in the
    instant between finds the change when it first appends, before it runs anything.

    Raises:
        RunHeldError: a live driver holds it (still, after `wait` seconds).
    """
    patience = Patience(wait)
    while True:
        holder: Holder | None = yield _Holder(run_id)
        if holder is None:
            return
        delay = patience.next()
        if delay is None:
            raise RunHeldError(run_id, holder, waited=wait)
        yield _Sleep(delay)


def steer(
    run_id: str,
    what: Callable[[RunRecord], Want],
    clock: Clock,
    *,
    unless_held: bool = False,
    wait: float | None = None,
) -> Steps:
    """Load, decide, append; again after a lost race. The one loop every verb runs.

    With `unless_held`, refused while a live driver holds the run (see `unheld`).
    """
    if unless_held:
        yield from unheld(run_id, wait)
    for _ in range(_TRIES):
        record: RunRecord = yield _Load(run_id)
        want = what(record)
        if want is None:
            return record
        got = yield _Put(built(want, record, clock().isoformat()))
        if isinstance(got, LifecycleError):
            raise got  # the run's lifecycle refused it: nothing was written
        if got is not _CONFLICT:
            appended: RunRecord = got
            return appended
    raise StoreError(f"run '{run_id}': {_TRIES} tries in a row lost a race")


def decide(run_id: str, action_id: str, what: Callable[[RunRecord], Want], clock: Clock) -> Steps:
    """Append a decision on call `action_id`.

    A refused decision on a call someone already decided raises `AlreadyDecidedError` naming
    that decision (read from the log: the record keeps who and why, not when); a call that
    waits in a subagent run instead is named in a note on the ledger's refusal.
    """
    try:
        return (yield from steer(run_id, what, clock))
    except LifecycleError as exc:
        record: RunRecord = yield _Load(run_id)
        action = record.actions.get(action_id)
        # Only a call past its approval can have a decision that stands: the log is read on
        # this refusal alone, and not for a call that never waited or waits again.
        if action is not None and action.status != ActionStatus.APPROVAL_PENDING:
            standing: _Decision | None = yield _Decided(run_id, action_id)
            if standing is not None:
                raise _already_decided(exc, standing) from exc
        if isinstance(exc, ActionError):
            yield from _note_subagent(exc, run_id, action_id)
        raise


def _already_decided(refused: LifecycleError, standing: _Decision) -> AlreadyDecidedError:
    return AlreadyDecidedError(
        action_id=standing.action_id,
        decision="approved" if isinstance(standing, ApprovalAccepted) else "rejected",
        decided_by=standing.approver, decided_at=standing.occurred_at,
        decided_sequence=standing.sequence, decided_reason=standing.reason,
        run_id=refused.run_id, sequence=refused.sequence, state=refused.state,
        event=refused.event,
    )  # fmt: skip


def _note_subagent(exc: ActionError, run_id: str, action_id: str) -> Generator[_Op, Any, None]:
    """Note on `exc` the subagent run of `run_id` where call `action_id` waits, if any."""
    waiting: Sequence[RunInfo] = yield _Waiting(f"{run_id}/")
    for info in waiting:
        if not info.run_id.startswith(f"{run_id}/"):
            continue
        below: RunRecord = yield _Load(info.run_id)
        if action_id in below.pending_approvals:
            exc.add_note(
                f"call '{action_id}' waits for a decision in subagent run '{info.run_id}' "
                f"of '{run_id}': decide it there"
            )
            return


def _deciding(table: TransitionTable) -> tuple[str, ...]:
    """The states of `table` where a call may wait for a decision (where an approval is
    taken), whatever they are called."""
    return tuple(s.name for s in table.states if "approval.accepted" in table.allowed(s.name))


def run_sync(store: EventStore, steps: Steps) -> RunRecord:
    """Perform a verb's store ops with a sync store."""
    got: Any = None
    while True:
        try:
            op = steps.send(got)
        except StopIteration as done:
            record: RunRecord = done.value
            return record
        if isinstance(op, _Load):
            got = store.load(op.run_id)
        elif isinstance(op, _Waiting):
            got = store.runs(_deciding(store.reducer.table), after=op.prefix, limit=_SCAN)
        elif isinstance(op, _Decided):
            standing = _Standing(op.action_id)
            for event in store.events(op.run_id):
                standing.see(event)
            got = standing.decision
        elif isinstance(op, _Holder):
            got = store.holder(op.run_id)
        elif isinstance(op, _Sleep):
            time.sleep(op.seconds)
            got = None
        else:
            try:
                got = store.append(op.event.run_id, [op.event], op.event.sequence - 1)
            except ConcurrencyConflictError:
                got = _CONFLICT
            except LifecycleError as exc:
                got = exc


async def run_async(store: AsyncEventStore, steps: Steps) -> RunRecord:
    """Perform a verb's store ops with an async store."""
    got: Any = None
    while True:
        try:
            op = steps.send(got)
        except StopIteration as done:
            record: RunRecord = done.value
            return record
        if isinstance(op, _Load):
            got = await store.load(op.run_id)
        elif isinstance(op, _Waiting):
            got = await store.runs(_deciding(store.reducer.table), after=op.prefix, limit=_SCAN)
        elif isinstance(op, _Decided):
            standing = _Standing(op.action_id)
            async for event in store.events(op.run_id):
                standing.see(event)
            got = standing.decision
        elif isinstance(op, _Holder):
            got = await store.holder(op.run_id)
        elif isinstance(op, _Sleep):
            await asyncio.sleep(op.seconds)
            got = None
        else:
            try:
                got = await store.append(op.event.run_id, [op.event], op.event.sequence - 1)
            except ConcurrencyConflictError:
                got = _CONFLICT
            except LifecycleError as exc:
                got = exc
