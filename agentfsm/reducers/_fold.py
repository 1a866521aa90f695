"""One streaming fold over a log of interleaved runs: what `validate` and `audit` share.

Both read events in file order, runs interleaved, and stop each run at its first problem.
`InterleavedFold.feed` applies one event to its run and says what happened (a `Step`); the
callers only turn steps into their own findings.

Memory is bounded by the runs still live, not by the file: a live run keeps its whole record;
a run that ended keeps a stub (status, version, stop reason), since any later event for it is
illegal whatever it says, and its sequence and terminal state are all a refusal names; a run
stopped at its first problem keeps the same stub, and its later events are skipped (they
would only cascade). `keep_records` keeps whole records instead, for a replay of every run.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import attrs

from agentfsm.errors import LifecycleError, OverrunError, TableMismatchError
from agentfsm.events.models import Event
from agentfsm.events.vocabulary import EventTypes
from agentfsm.guards.base import GuardContext
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer

__all__ = ["InterleavedFold", "Step"]


@attrs.frozen
class Step:
    """What one event did to its run.

    Attributes:
        before: the run's record before the event.
        after: the record after it, or None when the reducer refused it.
        problem: the refusal, or the `OverrunError` of an accepted event that spent past a
            budget (either way the run stops here); None for an event accepted within
            every budget.
    """

    before: RunRecord
    after: RunRecord | None
    problem: LifecycleError | None

    @property
    def accepted(self) -> bool:
        """The reducer applied the event (an overrun is applied too)."""
        return self.after is not None


class InterleavedFold:
    """Folds interleaved runs one event at a time; see the module docstring.

    Args:
        reducer: the table and guards to fold under.
        keep_records: keep every run's whole record (memory then grows with every run).
    """

    __slots__ = ("_keep", "_reducer", "_runs", "_stopped", "_terminal", "elsewhere")

    def __init__(self, reducer: Reducer, *, keep_records: bool = False) -> None:
        self._reducer = reducer
        self._keep = keep_records
        self._terminal = reducer.table.terminal_states
        # One entry per run, in order of first appearance (a dict keeps it): the live record,
        # or the stub of an ended or stopped run.
        self._runs: dict[str, RunRecord] = {}
        self._stopped: set[str] = set()
        #: The live runs under another table than the reducer's (before their migration to
        #: it): their lines are read with that table's event types (`event_types`).
        self.elsewhere: set[str] = set()

    @property
    def records(self) -> Mapping[str, RunRecord]:
        """Every run seen, in order of first appearance: its record, or an ended run's stub."""
        return self._runs

    def feed(self, event: Event, ctx: GuardContext | None = None) -> Step | None:
        """Apply one event to its run; None when the run already stopped (event skipped)."""
        rid = event.run_id
        if rid in self._stopped:
            return None
        reducer = self._reducer
        before = self._runs.get(rid)
        if before is None:
            before = reducer.initial(rid)
        try:
            after = reducer.reduce(before, event, ctx)
        except LifecycleError as err:
            self._stop(rid, before)
            return Step(before, None, err)
        over: OverrunError | None = reducer.overrun(before, event, after, ctx)
        if after.table is not before.table:
            if reducer.is_own(after):
                self.elsewhere.discard(rid)
            else:
                self.elsewhere.add(rid)
        if over is not None:  # applied (the usage is a fact), and the run's first problem
            self._stop(rid, after)
        elif after.status in self._terminal and not self._keep:
            self._runs[rid] = _stub(after)
        else:
            self._runs[rid] = after
        return Step(before, after, over)

    def event_types(self, run_id: str) -> EventTypes:
        """The event types run `run_id`'s next line is read with: those of the table it is
        under (the reducer's, unless it is before its migration to it)."""
        record = self._runs.get(run_id)
        if record is None:
            return self._reducer.table.event_types
        return self._reducer.event_types_for(record)

    def mismatches(self) -> Iterator[TableMismatchError]:
        """At the end of the log: why each run that did not stop is not the reducer's to
        fold (it never came under its table)."""
        for rid, record in self._runs.items():
            if rid in self._stopped or self._reducer.is_own(record):
                continue
            try:
                self._reducer.check_run_table(record)
            except TableMismatchError as err:
                yield err

    def _stop(self, rid: str, record: RunRecord) -> None:
        self._stopped.add(rid)
        self._runs[rid] = record if self._keep else _stub(record)


def _stub(record: RunRecord) -> RunRecord:
    """What a run that ended or stopped keeps: enough to judge and summarise it, no ledger."""
    return RunRecord(
        record.run_id, status=record.status, version=record.version, stop_reason=record.stop_reason,
        table=record.table, migrated_from=record.migrated_from, migrated_at=record.migrated_at,
    )  # fmt: skip
