"""What a Runner needs of a table in each state: the moves it makes there by the state's kind.

The runtime decides by kind (`StateKind`), never by name, so what it appends in a state is
fixed by the state's kind: a table that declares a state `paused` but has no `run.resumed`
out of it leaves a paused run that no Runner can take on. `runner_needs(table, state)` is
that list, in one place, for whatever checks a table against the runtime: a migration that
would take a move away (`TableDiff.stranded`), a static check of a table.

- the initial state: `run.started`;
- where a cancel settles (`run.cancelled` leaves it), whatever its kind: a late result
  (`tool.completed`), `tool.failed` / `tool.outcome_unknown` for calls that cannot finish,
  then `run.cancelled`;
- `active`: a turn (`model.started`, `model.completed`), the answer's acceptance
  (`run.completed`) or a failure (`run.failed`);
- `in_flight`: a call's start and its outcome (`tool.started`, `tool.completed`,
  `tool.failed`, `tool.outcome_unknown`);
- `paused`: `run.resumed` (`Runner.resume` un-pauses);
- `waiting`, terminal: nothing (a person moves a waiting run on; an ended one stays).

These are the moves of every run of that kind; what only some runs need (`tool.requested`
for an agent with tools, `approval.requested` for a policy that asks, `handoff`) is left
out, so a table for agents without tools or approvals needs none of it.
"""

from __future__ import annotations

import attrs

from agentfsm.fsm.table import TransitionTable
from agentfsm.names import EventType, StateKind

__all__ = ["RunnerNeeds", "runner_needs", "unmet_needs"]


@attrs.frozen
class RunnerNeeds:
    """The moves a Runner makes in one state, and why those.

    Attributes:
        moves: the event types it appends there, as the module docstring lists them.
        where: what makes them the ones, for sentences: `in every 'paused' state`, `where a
            cancel settles`, `in the initial state`.
    """

    moves: tuple[str, ...]
    where: str


E = EventType


def _names(*events: EventType) -> tuple[str, ...]:
    return tuple(e.value for e in events)


_BY_KIND: dict[str, tuple[str, ...]] = {
    StateKind.ACTIVE: _names(E.MODEL_STARTED, E.MODEL_COMPLETED, E.RUN_COMPLETED, E.RUN_FAILED),
    StateKind.IN_FLIGHT: _names(
        E.TOOL_STARTED, E.TOOL_COMPLETED, E.TOOL_FAILED, E.TOOL_OUTCOME_UNKNOWN
    ),
    StateKind.PAUSED: _names(E.RUN_RESUMED),
    StateKind.WAITING: (),
}
_SETTLING = _names(E.TOOL_COMPLETED, E.TOOL_FAILED, E.TOOL_OUTCOME_UNKNOWN, E.RUN_CANCELLED)


def runner_needs(table: TransitionTable, state: str) -> RunnerNeeds:
    """The moves a Runner makes in `state` of `table` (see the module docstring).

    Raises:
        KeyError: `table` declares no such state.
    """
    kind = table.kind(state)
    if kind == StateKind.TERMINAL:
        return RunnerNeeds((), "in a terminal state")
    if state == table.initial:
        return RunnerNeeds(_names(E.RUN_STARTED), "in the initial state")
    # Where a cancel settles the Runner settles it, whatever the state's kind (the planner
    # asks this before the kind).
    if table.settles_cancel(state):
        return RunnerNeeds(_SETTLING, "where a cancel settles")
    return RunnerNeeds(_BY_KIND[kind], f"in every '{kind}' state")


def unmet_needs(table: TransitionTable, state: str) -> tuple[str, ...]:
    """The moves a Runner needs in `state` that `table` does not allow there: a run in it
    (or one that comes to it) cannot go on under this table."""
    allowed = table.allowed(state)
    return tuple(e for e in runner_needs(table, state).moves if e not in allowed)
