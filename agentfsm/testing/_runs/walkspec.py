"""What a `legal_runs` walk needs, worked out once when the strategy is built.

The table's reducer, the enabled features, how often each kind of event is picked, the
payload strategies of the table's own event types, how far each state is from an end, and
the shortest log to each edge (`plans`). `walk` (the walk itself), `steering` (goals) and
`stateful` (the rule-based machine) all read a `Walk`; none of them builds one another way.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
from hypothesis import strategies as st

from agentfsm.fsm.table import TransitionTable
from agentfsm.names import EventType as E
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.testing._runs.candidates import EVENT_ORDER, FEATURES, Clock, Next, accepted
from agentfsm.testing._runs.custom import payload_strategy
from agentfsm.testing._runs.plans import PlanBook
from agentfsm.testing._runs.tools import Tools, ToolsLike, tool_set

__all__ = ["KINDS", "WEIGHT", "TableLike", "Walk", "make_walk", "resolve", "weight"]

TableLike = TransitionTable | Reducer

#: Events a feature *starts*. With the feature off, no candidate of the type is offered
#: (follow-ups such as `run.resumed` or `approval.accepted` stay on, or a run could be stuck).
_INITIATED_BY: dict[str, str] = {
    E.HANDOFF: "handoffs",
    E.RUN_PAUSED: "pauses",
    E.RUN_CANCEL_REQUESTED: "cancellation",
    E.RUN_FAILED: "run_failures",
    E.RUN_TERMINATED: "terminations",
    E.APPROVAL_REQUESTED: "approvals",
    E.TOOL_FAILED: "tool_failures",
    E.TOOL_OUTCOME_UNKNOWN: "outcome_unknown",
}

#: How often the walk picks each kind of event when several are possible (default 32). The
#: everyday path (model calls, tool calls, results, completing after a final answer) comes
#: up more often than the detours; failures, terminations and cancellations, which end the
#: interesting part of a run, come up rarely.
WEIGHT: dict[str, int] = {
    E.MODEL_STARTED: 128,
    E.MODEL_COMPLETED: 128,
    E.TOOL_REQUESTED: 96,
    E.TOOL_STARTED: 96,
    E.TOOL_COMPLETED: 96,
    E.RUN_RESUMED: 96,
    E.RUN_COMPLETED: 96,
    E.RUN_CANCELLED: 96,
    E.APPROVAL_ACCEPTED: 64,
    E.APPROVAL_REQUESTED: 48,
    E.APPROVAL_REJECTED: 48,
    E.TOOL_FAILED: 48,
    E.HANDOFF: 24,
    E.RUN_PAUSED: 16,
    E.RUN_CANCEL_REQUESTED: 4,
    E.RUN_FAILED: 2,
    E.RUN_TERMINATED: 2,
    E.TOOL_REQUESTED + " (direct)": 16,
    E.APPROVAL_REQUESTED + " (direct)": 16,
}


def weight(kind: str) -> int:
    """How often `kind` is picked, relative to the others (`WEIGHT`, else 32)."""
    return WEIGHT.get(kind, 32)


#: Every kind of event the walk can choose, each repeated by its weight. A kind is drawn by
#: its place in this list, retried while the kind is not possible in the state: Hypothesis records
#: the place, so when the shrinker deletes a step the later steps keep meaning what they
#: meant (this is how its stateful testing chooses rules under preconditions). Calls the
#: model never proposed (direct requests) are a kind of their own.
KINDS: tuple[str, ...] = (
    *EVENT_ORDER,
    E.TOOL_REQUESTED + " (direct)",
    E.APPROVAL_REQUESTED + " (direct)",
)


@attrs.frozen(eq=False)
class Walk:
    """What one `legal_runs` strategy needs, computed once when the strategy is built."""

    reducer: Reducer
    features: frozenset[str]
    max_calls: int
    distance: Mapping[str, int]  # fewest edges from each state to a terminal one
    graceful_distance: Mapping[str, int]  # the same without run.failed / run.terminated
    #: Payload strategies by event type: the table's own types (given or from their
    #: annotations) and the built-in types you gave one for.
    drawn: Mapping[str, st.SearchStrategy[dict[str, Any]]]
    kinds: tuple[str, ...]
    kind_strategy: st.SearchStrategy[str]
    #: The shortest log to each edge, and the plain logs `legal_runs` draws from them.
    plans: PlanBook
    #: The agent's tools: the names calls use, their results, the events they propose.
    tools: Tools

    @property
    def table(self) -> TransitionTable:
        return self.reducer.table

    def options(self, record: RunRecord, clock: Clock) -> list[Next]:
        return accepted(self.reducer, record, clock.next(record), self.features, tools=self.tools)


def _distances(table: TransitionTable, features: frozenset[str]) -> dict[str, int]:
    """Fewest edges from each state to a terminal state, using only enabled event types."""
    off = {t for t, feature in _INITIATED_BY.items() if feature not in features}
    preds: dict[str, set[str]] = {s: set() for s in table.state_names}
    for t in table.transitions:
        if t.event not in off:
            preds[t.target].add(t.source)
    distance = dict.fromkeys(table.terminal_states, 0)
    queue = deque(table.terminal_states)
    while queue:
        state = queue.popleft()
        for p in preds[state]:
            if p not in distance:
                distance[p] = distance[state] + 1
                queue.append(p)
    return distance


def resolve(table: TableLike) -> Reducer:
    """The reducer a table is folded with (a `Reducer` is its own)."""
    return table if isinstance(table, Reducer) else Reducer(table)


def make_walk(
    table: TableLike,
    features: Iterable[str] | None,
    max_calls: int,
    payloads: Mapping[str, st.SearchStrategy[dict[str, Any]]] | None = None,
    fields: Mapping[str, st.SearchStrategy[Any]] | None = None,
    tools: ToolsLike | None = None,
    results: Mapping[str, st.SearchStrategy[Any]] | None = None,
) -> Walk:
    """A `Walk` over `table`, checking the features, tools and payload strategies given."""
    reducer = resolve(table)
    vocabulary = reducer.table.event_types
    known_tools = tool_set(tools, results, vocabulary)
    given = dict(payloads or {})
    unknown_types = sorted(t for t in given if t not in vocabulary)
    if unknown_types:
        raise ValueError(
            f"payloads for unknown event types {unknown_types}; "
            f"table '{reducer.table.name}' has {list(vocabulary.names)}"
        )
    drawn = {
        t: given[t] if t in given else payload_strategy(vocabulary.classes[t], fields)
        for t in vocabulary.custom
    }
    drawn.update(given)
    # The table's own types are kinds too, with the default weight.
    kinds = (*KINDS, *vocabulary.custom)
    enabled = FEATURES if features is None else frozenset(features)
    unknown = sorted(enabled - FEATURES)
    if unknown:
        raise ValueError(f"unknown features {unknown}; known: {sorted(FEATURES)}")
    graceful = enabled - {"run_failures", "terminations"}
    return Walk(
        reducer,
        enabled,
        max_calls if "batches" in enabled else 1,
        _distances(reducer.table, enabled),
        _distances(reducer.table, graceful),
        drawn,
        kinds,
        st.sampled_from([k for k in kinds for _ in range(weight(k))]),
        PlanBook(reducer, enabled, given, fields or {}, known_tools),
        known_tools,
    )
