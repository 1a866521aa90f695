"""What a Runner needs of a table in each state: the moves it makes there by the state's kind.

The runtime decides by kind (`StateKind`), never by name, so what it appends in a state is
fixed by the state's kind: a table that declares a state `paused` but has no `run.resumed`
out of it leaves a paused run that no Runner can take on. `runner_needs(table, state)` is
that list, in one place, for whatever checks a table against the runtime: a migration that
would take a move away (`TableDiff.stranded`), a static check of a table (`check-table`,
`runner_problems`), a Runner refusing a table it could not drive.

- the initial state: `run.started`;
- where a cancel settles (`run.cancelled` leaves it), whatever its kind: a late result
  (`tool.completed`), `tool.failed` / `tool.outcome_unknown` for calls that cannot finish,
  then `run.cancelled`; and `run.failed`;
- `active`: a turn (`model.started`, `model.completed`), the answer's acceptance
  (`run.completed`) or a failure (`run.failed`);
- `in_flight`: a call's start and its outcome (`tool.started`, `tool.completed`,
  `tool.failed`, `tool.outcome_unknown`), and `run.failed`;
- `paused`: `run.resumed` (`Runner.drive` resumes);
- `waiting`, terminal: nothing (a person moves a waiting run on; an ended one stays).

These are the moves of every run of that kind; what only some runs need (`tool.requested`
for an agent with tools, `approval.requested` for a policy that asks, `handoff`, a model
answer that comes back after a cancel) is left out, so a table for agents without tools or
approvals needs none of it. Where a table has no edge for such a move, the Runner fails the
run there (`run.failed`, kind `stranded`): which is why `run.failed` is a need wherever the
Runner appends more than the one move of a paused or initial state.

A table is still a valid declaration without them (it also checks logs that others write: an
SDK adapter's, a foreign system's); `runner_problems` is what `check-table` reports as errors
and what `Runner(...)` refuses, before any run is written.

A timeout (`Transition(after=...)`) is a move the Runner makes too, when a run has stood
where it waits long enough: only in a `waiting` or `paused` state, where a run stands until
someone moves it on. In a state the Runner drives it would never be there to wait, so a
timed edge out of one is a problem of its own.
"""

from __future__ import annotations

import attrs

from agentfsm.errors import quote_list
from agentfsm.fsm._timeouts import duration_words
from agentfsm.fsm.table import TransitionTable
from agentfsm.names import EventType, StateKind

__all__ = ["RunnerNeeds", "runner_needs", "runner_problems", "unmet_needs"]


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
        E.TOOL_STARTED, E.TOOL_COMPLETED, E.TOOL_FAILED, E.TOOL_OUTCOME_UNKNOWN, E.RUN_FAILED
    ),
    StateKind.PAUSED: _names(E.RUN_RESUMED),
    StateKind.WAITING: (),
}
_SETTLING = _names(
    E.TOOL_COMPLETED, E.TOOL_FAILED, E.TOOL_OUTCOME_UNKNOWN, E.RUN_CANCELLED, E.RUN_FAILED
)
#: The kinds whose state a Runner drives (a state of one that has none of its kind's moves
#: is one that something outside moves on: a `waiting` state).
_DRIVEN = frozenset({StateKind.ACTIVE, StateKind.IN_FLIGHT, StateKind.PAUSED})
#: The kinds of state a run stands in until someone moves it on: the ones that can time out.
_STANDING = frozenset({StateKind.WAITING, StateKind.PAUSED})


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


def runner_problems(table: TransitionTable) -> tuple[str, ...]:
    """Every state of `table` in which no Runner can drive a run, one sentence each, in
    declaration order (empty when a Runner can go on everywhere).

    A state that has none of the moves of its kind (`failed` aside: every state may end) is
    one that a person or an outside event moves on, declared without saying so: the sentence
    says to declare it `kind='waiting'`.
    """
    problems: list[str] = []
    for state in table.state_names:
        missing = unmet_needs(table, state)
        if not missing:
            problems += _timeout_problems(table, state)
            continue
        needs = runner_needs(table, state)
        kind = table.kind(state)
        own = [e for e in needs.moves if e != E.RUN_FAILED]
        outside = (
            kind in _DRIVEN
            and state != table.initial
            and not table.settles_cancel(state)
            and all(e in missing for e in own)
        )
        it = "it" if len(missing) == 1 else "them"
        default = ", and a State declared without a kind is 'active'" if kind == "active" else ""
        sentence = (
            f"state '{state}' has no {quote_list(missing)} (a Runner needs {it} "
            f"{needs.where}{default if outside else ''}): no Runner can drive a run there; "
        )
        if outside:
            sentence += "if a person or an outside event moves it on, declare it kind='waiting'"
        else:
            sentence += f"add {'an edge on it' if len(missing) == 1 else 'edges on them'}"
        problems.append(sentence)
        problems += _timeout_problems(table, state)
    return tuple(problems)


def _timeout_problems(table: TransitionTable, state: str) -> list[str]:
    """Why the Runner cannot time a run out in `state` (see the module docstring)."""
    timed = table.timeouts(state)
    kind = table.kind(state)
    if not timed or (kind in _STANDING and not table.settles_cancel(state)):
        return []
    waits = ", ".join(f"'{t.event}' after {duration_words(t.after)}" for t in timed if t.after)
    where = "a cancel settles there" if table.settles_cancel(state) else f"it is '{kind}'"
    return [
        f"state '{state}' times out ({waits}), but {where}: a Runner drives a run there "
        "without waiting, so no timeout falls due; only a 'waiting' or 'paused' state times "
        "out (declare its kind)"
    ]
