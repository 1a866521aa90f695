"""Edge coverage: which edges of a table (source, event, target, condition) logs took.

Green property tests say nothing about the edges they never reached. Fold every generated
log into an `EdgeCoverage` and check it at the end::

    coverage = EdgeCoverage(MY_TABLE)

    @given(legal_runs(MY_TABLE))
    def test_my_service(events):
        coverage.record(events)
        ...

    def test_every_edge_was_taken():      # runs after the property in file order
        coverage.check(min=1.0)

or in one call, `assert_edge_coverage(MY_TABLE, legal_runs(MY_TABLE), min=1.0)`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agentfsm.events.models import Event
from agentfsm.fsm.table import Transition, TransitionTable
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.testing._runs.custom import variants

__all__ = ["EdgeCoverage", "EdgeKey", "assert_edge_coverage", "edge_name", "taken_edge"]

#: An edge's identity, `Transition.key`: (source, event type, target, condition name or None).
EdgeKey = tuple[str, str, str, str | None]


def taken_edge(table: TransitionTable, before: RunRecord, event: Event) -> Transition | None:
    """The edge `event` takes from `before`: the first of its (state, type) whose condition holds.

    The reducer tries a (state, event) pair's edges in declared order with the record before
    the event as context; this asks the same question. None when no edge applies.
    """
    for edge in table.edges(before.status, event.type):
        if edge.condition is None or edge.condition.predicate(before, event):
            return edge
    return None


def edge_name(edge: Transition) -> str:
    """`source --event--> target` with the condition in brackets, e.g. `[urgent]`, or a
    timeout's wait, e.g. `after 7 d`."""
    if edge.after is not None and edge.condition is not None:
        when = f" {edge.condition.name}"
    else:
        when = f" [{edge.condition.name}]" if edge.condition else ""
    return f"{edge.source} --{edge.event}--> {edge.target}{when}"


class EdgeCoverage:
    """How often each edge of a table was taken by the logs recorded so far.

    Args:
        table: the table whose edges count, or a `Reducer` (its table; its guards judge).
    """

    def __init__(self, table: TransitionTable | Reducer) -> None:
        self.reducer = table if isinstance(table, Reducer) else Reducer(table)
        self.table = self.reducer.table
        #: Times each edge was taken, by `Transition.key`.
        self.counts: Counter[EdgeKey] = Counter()
        #: How many logs were recorded.
        self.logs = 0
        #: Times the logs stood in each state (the initial state counts once per log).
        self.visits: Counter[str] = Counter()
        #: Times each event type came in each state, by (state, event type).
        self.arrivals: Counter[tuple[str, str]] = Counter()

    def record(self, events: Iterable[Event]) -> None:
        """Fold one log (it must be legal) and count the edge of each event."""
        self.logs += 1
        record: RunRecord | None = None
        for event in events:
            if record is None:
                record = self.reducer.initial(event.run_id)
                self.visits[record.status] += 1
            edge = taken_edge(self.table, record, event)
            self.arrivals[(record.status, event.type)] += 1
            before = record.status
            record = self.reducer.reduce(record, event)
            if record.status != before:
                self.visits[record.status] += 1
            if edge is not None:
                self.counts[edge.key] += 1

    def why_missing(self, edge: Transition) -> str:
        """Why the logs never took `edge`, read from what they did instead.

        The source state was never reached; or the edge's event never came there (with a
        hint when the kit cannot make that event: a custom type with no plain payload, or
        one only a call or a decision causes); or it came, and the edge's condition never
        held when it did (an earlier edge of the pair won, or none did).
        """
        source, event = edge.source, edge.event
        if not self.visits[source]:
            into = [edge_name(e) for e in self.edges if e.target == source and e.source != source]
            shown = "; ".join(into[:3]) + (f"; {len(into) - 3} more" if len(into) > 3 else "")
            return f"'{source}' was never visited (no log took an edge into it: {shown})"
        came = self.arrivals[(source, event)]
        if not came:
            why = f"'{event}' never came in '{source}' (visited {self.visits[source]} times)"
            if edge.condition is not None and not any(
                e.condition is None for e in self.table.edges(source, event)
            ):
                # The reducer refuses the event there unless one of its conditions holds.
                why += ", and the table takes it there only if a condition such as "
                why += f"'{edge.condition.name}' holds"
            return why + self._event_hint(event)
        others = [
            f"{edge_name(e)} ({self.counts[e.key]})"
            for e in self.table.edges(source, event)
            if e.key != edge.key and self.counts[e.key]
        ]
        what = f"'{event}' came in '{source}' {came} times, but "
        if edge.condition is None:
            # An unconditioned edge after one that always held (or a timeout not yet due).
            return what + "an edge tried before it always applied: " + ", ".join(others)
        took = f" (taken instead: {', '.join(others)})" if others else ""
        return (
            what + f"condition '{edge.condition.name}' never held{took}; give the strategies "
            "values that meet it (fields=, payloads=, a tool's results=, tools=)"
        )

    def _event_hint(self, event: str) -> str:
        vocabulary = self.table.event_types
        if event not in vocabulary.custom:
            return ""
        if not variants(vocabulary.classes[event]):
            return (
                f": the kit has no plain payload of '{event}' (a field of a type with no "
                f"plain value); give legal_runs(payloads={{'{event}': ...}})"
            )
        return (
            f": if a tool's call or the model's decision causes it, give the agent's tools "
            f"(legal_runs(tools=...)), one of them declaring Tool(emits=['{event}'])"
        )

    @property
    def edges(self) -> tuple[Transition, ...]:
        """Every edge of the table, in declared order."""
        return self.table.transitions

    @property
    def taken(self) -> tuple[Transition, ...]:
        """The edges taken at least once, in declared order."""
        return tuple(e for e in self.edges if self.counts[e.key])

    @property
    def missing(self) -> tuple[Transition, ...]:
        """The edges never taken, in declared order."""
        return tuple(e for e in self.edges if not self.counts[e.key])

    @property
    def ratio(self) -> float:
        """The share of edges taken, from 0.0 to 1.0 (1.0 for a table without edges)."""
        return len(self.taken) / len(self.edges) if self.edges else 1.0

    def report(self) -> str:
        """A summary line, then each missing edge on its own line, with why (`why_missing`)."""
        lines = [
            f"table '{self.table.name}': {len(self.taken)} of {len(self.edges)} edges taken "
            f"({self.ratio:.0%}) by {self.logs} logs"
        ]
        lines += [f"  missing: {edge_name(e)}: {self.why_missing(e)}" for e in self.missing]
        return "\n".join(lines)

    def check(self, min: float = 1.0) -> None:  # `min=` reads best at call sites
        """Fail unless at least `min` of the edges were taken.

        Raises:
            AssertionError: with `report()`, naming every missing edge.
        """
        if self.ratio < min:
            raise AssertionError(f"edge coverage is below {min:.0%}\n{self.report()}")


def assert_edge_coverage(
    table: TransitionTable | Reducer,
    logs: st.SearchStrategy[list[Event]] | Iterable[Sequence[Event]],
    *,
    min: float = 1.0,  # the threshold's natural name at call sites
    max_examples: int = 200,
) -> EdgeCoverage:
    """Record `logs` (a strategy, drawn `max_examples` times, or logs) and check coverage.

    A strategy is drawn by a Hypothesis test of its own, derandomized and without an example
    database; call this from a plain test, not from inside `@given`. `legal_runs` draws one
    plain log per edge among its first examples, so `min=1.0` holds for every edge a log
    can take, whatever the seed or the modules imported (which change Hypothesis' draws),
    once `max_examples` leaves room: about three times the number of edges.

    Raises:
        AssertionError: the edges taken are fewer than `min`; the message names the others.
    """
    coverage = EdgeCoverage(table)
    if isinstance(logs, st.SearchStrategy):
        strategy = logs

        @settings(
            max_examples=max_examples,
            derandomize=True,  # the same logs on every run: a threshold must not flake
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(strategy)
        def collect(events: Any) -> None:
            coverage.record(events)

        collect()
    else:
        for log in logs:
            coverage.record(log)
    coverage.check(min)
    return coverage
