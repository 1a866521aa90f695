"""What a table promises about stopping a run, checked along real logs.

A table that declares `run.cancel_requested`, `run.failed` or `run.terminated` from a state
promises that a run there can be cancelled, failed or stopped by a guard. A condition, or
a ledger rule, can quietly break that promise for some runs. `stop_problems` walks a log
and, at every state it passes through, tries each stop the table declares from there on the
run's record; `assert_table_keeps_its_promises` fails naming each one refused. Feed it the
logs of `edge_covering_paths(table)` (every edge's shortest log) or of `legal_runs(table)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from agentfsm.errors import LifecycleError
from agentfsm.events.codec import parse_event
from agentfsm.events.models import Event
from agentfsm.fsm.table import TransitionTable
from agentfsm.reducers.reduce import Reducer

__all__ = ["STOPS", "assert_table_keeps_its_promises", "stop_problems"]

#: The stops a table may promise, with the fields a probe of each carries.
STOPS: dict[str, dict[str, Any]] = {
    "run.cancel_requested": {"reason": "probe"},
    "run.failed": {"error": {"kind": "probe", "message": "probe"}},
    "run.terminated": {"stop_reason": "probe"},
}


def stop_problems(table: TransitionTable | Reducer, events: Sequence[Event]) -> list[str]:
    """Each stop the table declares from a state the log passes through, but refuses there.

    The empty list when the table keeps its promises along this log.
    """
    reducer = table if isinstance(table, Reducer) else Reducer(table)
    allowed = reducer.table.allowed
    problems: list[str] = []
    record = reducer.initial(events[0].run_id) if events else None
    for event in events:
        assert record is not None
        record = reducer.reduce(record, event)
        for stop, fields in STOPS.items():
            if stop not in allowed(record.status):
                continue
            probe = parse_event(
                {
                    **fields,
                    "type": stop,
                    "run_id": record.run_id,
                    "sequence": record.version + 1,
                    "occurred_at": event.occurred_at,
                },
                events=reducer.table.event_types,
            )
            try:
                reducer.reduce(record, probe)
            except LifecycleError as exc:
                problems.append(
                    f"'{record.status}' declares '{stop}', but after sequence {record.version} "
                    f"('{event.type}') it is refused: {exc.reason}"
                )
    return problems


def assert_table_keeps_its_promises(
    table: TransitionTable | Reducer, logs: Iterable[Sequence[Event]]
) -> None:
    """Fail naming every declared stop a log reaches a state where it is refused, and every
    declared state no log visits (its promises went unchecked: a state the logs never reach
    is no evidence that it keeps them).

    Raises:
        AssertionError: one line per broken promise (the first of each kind per state),
            and one per state never visited.
    """
    __tracebackhide__ = True
    reducer = table if isinstance(table, Reducer) else Reducer(table)
    broken: dict[str, str] = {}
    visited: set[str] = set()
    for events in logs:
        visited.update(_states_of(reducer, events))
        for problem in stop_problems(reducer, events):
            broken.setdefault(problem.split(", but")[0], problem)
    unvisited = [s for s in reducer.table.state_names if s not in visited]
    name = reducer.table.name
    lines: list[str] = []
    if broken:
        lines.append(f"table '{name}' does not keep {len(broken)} promise(s) to stop a run:")
        lines += [f"  {p}" for p in broken.values()]
    if unvisited:
        lines.append(
            f"table '{name}': {len(unvisited)} declared state(s) no log visits, so their "
            "promises are unchecked (give logs that reach them, e.g. "
            "edge_covering_paths(table, tools=..., payloads=...)):"
        )
        lines += [f"  '{s}' was never visited" for s in unvisited]
    if lines:
        raise AssertionError("\n".join(lines))


def _states_of(reducer: Reducer, events: Sequence[Event]) -> set[str]:
    """Every state the log stands in, the initial one included."""
    if not events:
        return set()
    record = reducer.initial(events[0].run_id)
    states = {record.status}
    for event in events:
        record = reducer.reduce(record, event)
        states.add(record.status)
    return states
