"""The path a recorded run took through a table, for drawing on top of its diagram.

The path is computed by the real reducer, event by event, so the picture shows what the
library itself decides: each applied event becomes a `Step` (from, event, to, and which
condition chose the target). When the reducer refuses an event, or a line of the log is not
an event, the path stops there and the refusal is kept, so the diagram shows how far the run
got and what broke it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import attrs

from agentfsm.diagrams._model import DiagramModel, EdgeLabel
from agentfsm.errors import AgentFSMError, EventFormatError, LifecycleError, RunNotInLogError
from agentfsm.events._lines import is_blank, lines_of
from agentfsm.events.codec import parse_event
from agentfsm.events.models import EmitRefused, Event
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer

__all__ = [
    "OnStep",
    "Overlay",
    "Refusal",
    "Step",
    "Trajectory",
    "caused_by",
    "chosen_condition",
    "fold_trajectory",
    "format_sequences",
    "sequenced",
    "trajectory_from_events",
    "trajectory_from_jsonl",
]


@attrs.frozen
class Step:
    """One applied event: the move it made.

    Attributes:
        sequence: the event's sequence number (its place in the traversal order).
        event: the event type.
        source: the state before.
        target: the state after.
        condition: the name of the condition that chose `target`, if the edge has one.
        caused_by: what proposed the event, for one a call or a decision caused
            (`call 't1.1' (request_documents)`, `turn 3`); for an `emit.refused`, the call
            whose event it refuses and why.
    """

    sequence: int
    event: str
    source: str
    target: str
    condition: str | None
    caused_by: str | None = None


@attrs.frozen
class Refusal:
    """Where a recorded run stopped making sense: the event that was refused.

    Attributes:
        state: the state the run was in.
        message: the error's message.
        sequence: the refused event's sequence, when known.
        event: the refused event's type, when known (None for a line that is not an event).
        line: the log line, when the path was read from JSON Lines.
    """

    state: str
    message: str
    sequence: int | None = None
    event: str | None = None
    line: int | None = None

    @property
    def title(self) -> str:
        """A short headline: `refused: tool.completed (seq 9)`, `refused: line 12`."""
        what = self.event if self.event is not None else f"line {self.line}"
        where = f" (seq {self.sequence})" if self.sequence is not None else ""
        return f"refused: {what}{where}"


@attrs.frozen
class Trajectory:
    """A run's path: its steps, where it ended, and why.

    Attributes:
        run_id: the run.
        initial: the state the run started in.
        steps: the applied events, in order.
        final_state: the state after the last applied event.
        terminal: whether `final_state` is terminal.
        stop_reason: the guard's reason, for a terminated run.
        stop_detail: the guard's sentence, for a terminated run.
        error: `kind: message` of `run.failed`, for a failed run.
        cancel_reason: the reason given with `run.cancel_requested`, if any.
        pause_reason: why the run is paused, while it is.
        refusal: the refused event, when the log broke the lifecycle; the path stops before it.
    """

    run_id: str
    initial: str
    steps: tuple[Step, ...]
    final_state: str
    terminal: bool
    stop_reason: str | None = None
    stop_detail: str | None = None
    error: str | None = None
    cancel_reason: str | None = None
    pause_reason: str | None = None
    refusal: Refusal | None = None

    @property
    def visited(self) -> tuple[str, ...]:
        """The states the run was in, in order of first visit (the initial state first)."""
        seen = dict.fromkeys((self.initial, *(step.target for step in self.steps)))
        seen.setdefault(self.final_state)
        return tuple(seen)

    def sequences(self, source: str, event: str, target: str) -> tuple[int, ...]:
        """The sequences at which the run moved `source --event--> target`, in order."""
        return tuple(
            s.sequence
            for s in self.steps
            if s.source == source and s.event == event and s.target == target
        )

    def summary(self) -> tuple[str, ...]:
        """Lines saying where and why the run ended, for a note beside the final state."""
        ended = "ended" if self.terminal else "stopped"
        lines = [f"run '{self.run_id}' {ended} in '{self.final_state}'"]
        if self.stop_reason is not None:
            detail = f" ({self.stop_detail})" if self.stop_detail else ""
            lines.append(f"stop_reason: {self.stop_reason}{detail}")
        if self.error is not None:
            lines.append(f"error: {self.error}")
        if self.cancel_reason is not None:
            lines.append(f"cancel reason: {self.cancel_reason}")
        if self.pause_reason is not None:
            lines.append(f"paused: {self.pause_reason}")
        if self.refusal is not None:
            lines.append(f"{self.refusal.title}: {self.refusal.message}")
        return tuple(lines)


def trajectory_from_events(
    events: Iterable[Event], table: TransitionTable = DEFAULT_TABLE
) -> Trajectory:
    """Replay one run's events through `table` and record the path.

    Args:
        events: the run's events, in order (all of one run).
        table: the table the run was recorded under.

    Raises:
        RunNotInLogError: `events` is empty.
    """
    return _walk(list(events), table, Reducer(table), None)


def trajectory_from_jsonl(
    lines: Iterable[str | bytes],
    table: TransitionTable = DEFAULT_TABLE,
    *,
    run_id: str | None = None,
) -> Trajectory:
    """Read a JSON Lines log and record the path of one of its runs.

    A line that is not a valid event stops the path there (as a `Refusal` naming the line),
    unless it clearly belongs to another run.

    Args:
        lines: the log's lines, or an open file (read one bounded line at a time).
        table: the table the run was recorded under.
        run_id: the run to draw; may be left out when the log holds only one run.

    Raises:
        RunNotInLogError: `run_id` is not in the log, or it was left out and the log holds
            no run or several.
        EventFormatError: not one line of the log is an event (the first line's problem),
            or a line of a file is too long or not UTF-8.
    """
    # One pass. The runs are a dict (an ordered set): a list's `in` made a log of many runs
    # quadratic. Only the drawn run's lines are kept (without a run id, the first run's):
    # its events, up to a line that is not an event and may be its own.
    runs: dict[str, None] = {}
    wanted = run_id
    kept: list[Event | EventFormatError] = []
    ended = False  # such a line surely ended the kept run: nothing after it is drawn
    first_problem: EventFormatError | None = None
    for number, raw in enumerate(lines_of(lines), start=1):
        if is_blank(raw):
            continue
        try:
            event = parse_event(raw, line=number, events=table.event_types)
        except EventFormatError as exc:
            first_problem = first_problem or exc
            if not ended and (exc.run_id is None or exc.run_id == wanted or wanted is None):
                kept.append(exc)
                ended = exc.run_id is None or exc.run_id == wanted
            continue
        runs.setdefault(event.run_id)
        if wanted is None:
            wanted = event.run_id
        if event.run_id == wanted and not ended:
            kept.append(event)
    if not runs and first_problem is not None:
        # Not one line is an event: the first complaint says more than "no runs".
        raise first_problem
    if run_id is None:
        if len(runs) != 1:
            raise RunNotInLogError(None, list(runs))
        run_id = next(iter(runs))
    elif run_id not in runs:
        raise RunNotInLogError(run_id, list(runs))

    events: list[Event] = []
    bad_line: EventFormatError | None = None
    for item in kept:
        if not isinstance(item, EventFormatError):
            events.append(item)
        elif item.run_id in (None, run_id):  # (one kept before the first event may not be)
            bad_line = item
            break
    return _walk(events, table, Reducer(table), bad_line)


def _walk(
    events: list[Event],
    table: TransitionTable,
    reducer: Reducer,
    bad_line: EventFormatError | None,
) -> Trajectory:
    if not events:
        if bad_line is None:
            raise RunNotInLogError(None, [])
        # The very first line of the run is unreadable: the run never left its start.
        record = reducer.initial(bad_line.run_id or "?")
        return _ended(record, table, (), _unreadable(record.status, bad_line))
    return fold_trajectory(events[0].run_id, events, table, reducer, bad_line=bad_line)[0]


#: Told each step as it is folded: the step, the record before and after, and the event.
OnStep = Callable[[Step, RunRecord, RunRecord, Event], None]


def fold_trajectory(
    run_id: str,
    events: Iterable[Event],
    table: TransitionTable,
    reducer: Reducer,
    *,
    bad_line: EventFormatError | None = None,
    on_step: OnStep | None = None,
    since: tuple[Trajectory, RunRecord] | None = None,
) -> tuple[Trajectory, RunRecord]:
    """A run's path, folding its `events` up to the first one the reducer refuses, and its
    record there. `on_step` hears every step (what a page or report keeps besides the path);
    `bad_line` is an unreadable line of the run after its last event, shown as its end.
    `since`: the path and record of the run's events before `events` (a path this function
    made, without a refusal), which the new steps go on from: a longer log is folded only
    where it grew.
    """
    record = reducer.initial(run_id)
    steps: list[Step] = []
    if since is not None:
        if since[0].refusal is not None:
            raise ValueError("a path that ended at a refusal cannot be gone on from")
        steps, record = list(since[0].steps), since[1]
    for event in events:
        before = record
        try:
            record = reducer.reduce(before, event)
        except AgentFSMError as exc:
            # A lifecycle error's reason leaves out the run/state/event the picture shows.
            message = exc.reason if isinstance(exc, LifecycleError) else str(exc)
            refused = Refusal(before.status, message, event.sequence, event.type)
            return _ended(before, table, tuple(steps), refused), before
        step = Step(
            event.sequence, event.type, before.status, record.status,
            chosen_condition(table, before, event), caused_by(before, event),
        )  # fmt: skip
        steps.append(step)
        if on_step is not None:
            on_step(step, before, record, event)
    refusal = None if bad_line is None else _unreadable(record.status, bad_line)
    return _ended(record, table, tuple(steps), refusal), record


def caused_by(before: RunRecord, event: Any) -> str | None:
    """What proposed `event` (see `Step.caused_by`), read from the record before it."""
    if isinstance(event, EmitRefused):
        action = before.actions.get(event.action_id)
        tool = f" ({action.tool})" if action is not None else ""
        return f"call '{event.action_id}'{tool}: {event.refusal.kind}"
    by = getattr(event, "emitted_by", None)
    if by is None:
        return None
    if by.action_id is None:
        return str(by)
    action = before.actions.get(by.action_id)
    return f"{by} ({action.tool})" if action is not None else str(by)


def chosen_condition(table: TransitionTable, before: RunRecord, event: Any) -> str | None:
    """The name of the condition that picked the edge (conditions are pure: safe to re-ask)."""
    for t in table.edges(before.status, event.type):
        if t.condition is None:
            return None
        if t.condition(before, event):
            return t.condition.name
    return None


def _unreadable(state: str, exc: EventFormatError) -> Refusal:
    return Refusal(state, str(exc), exc.sequence, None, exc.line)


def _ended(
    record: RunRecord, table: TransitionTable, steps: tuple[Step, ...], refusal: Refusal | None
) -> Trajectory:
    error = f"{record.error.kind}: {record.error.message}" if record.error else None
    return Trajectory(
        run_id=record.run_id,
        initial=table.initial,
        steps=steps,
        final_state=record.status,
        terminal=table.is_terminal(record.status),
        stop_reason=record.stop_reason,
        stop_detail=record.stop_detail,
        error=error,
        cancel_reason=record.cancel_reason,
        pause_reason=record.pause_reason,
        refusal=refusal,
    )


def sequenced(text: str, sequences: tuple[int, ...]) -> str:
    """An edge label with the path's traversal order after it, as every renderer shows it."""
    return f"{text} ({format_sequences(sequences)})" if sequences else text


def format_sequences(sequences: tuple[int, ...]) -> str:
    """Traversal order for an edge label: `seq 2, 7` or `seq 2, 3, 4, …, 88 (15×)`.

    Sequence numbers, not step counts: they are what a reviewer looks up in the log.
    """
    shown = [str(s) for s in sequences]
    if len(shown) <= 5:
        return "seq " + ", ".join(shown)
    return f"seq {', '.join(shown[:3])}, …, {shown[-1]} ({len(shown)}×)"


@attrs.frozen
class Overlay:
    """What a renderer needs to draw a trajectory on a model.

    Attributes:
        trajectory: the run's path.
        label_sequences: for edge index `i` and label index `j`, the sequences at which the
            run took a move of that label (absent when it never did).
        extra: taken moves that the model draws only as part of an `any active state` edge,
            as `(source, label, target, sequences)`; renderers draw them as their own
            highlighted edges, so the path stays continuous.
        visited: the states the run was in (`Trajectory.visited`, read once: renderers ask
            state by state).
    """

    trajectory: Trajectory
    label_sequences: dict[tuple[int, int], tuple[int, ...]]
    extra: tuple[tuple[str, EdgeLabel, str, tuple[int, ...]], ...]
    visited: frozenset[str] = frozenset()

    @classmethod
    def build(cls, model: DiagramModel, trajectory: Trajectory) -> Overlay:
        """Match each step of `trajectory` to the edge and label of `model` that draws it."""
        where: dict[tuple[str | None, str, str], tuple[int, int]] = {}
        for i, edge in enumerate(model.edges):
            for j, label in enumerate(edge.labels):
                for event in label.events:
                    where.setdefault((edge.source, event, edge.target), (i, j))
        found: dict[tuple[int, int], list[int]] = {}
        extra: dict[tuple[str, EdgeLabel, str], list[int]] = {}
        for step in trajectory.steps:
            move = (step.source, step.event, step.target)
            if move in where:
                found.setdefault(where[move], []).append(step.sequence)
                continue
            family = where.get((None, step.event, step.target))
            if family is not None:
                label = model.edges[family[0]].labels[family[1]]
                single = EdgeLabel((step.event,), label.condition, label.guards, timed=label.timed)
            else:  # a step the model does not draw at all (the path came from another table)
                single = EdgeLabel((step.event,), step.condition, ())
            extra.setdefault((step.source, single, step.target), []).append(step.sequence)
        return cls(
            trajectory=trajectory,
            label_sequences={k: tuple(v) for k, v in found.items()},
            extra=tuple((s, lab, t, tuple(v)) for (s, lab, t), v in extra.items()),
            visited=frozenset(trajectory.visited),
        )

    def edge_taken(self, index: int) -> bool:
        """Whether the run took any move of edge `index`."""
        return any(i == index for i, _ in self.label_sequences)

    def state_visited(self, name: str) -> bool:
        """Whether the run was ever in state `name`."""
        return name in self.visited
