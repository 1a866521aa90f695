"""Deterministic logs that cover every edge of a table, like `@xstate/graph`'s shortest paths.

`edge_covering_paths(table)` searches breadth first from a run's initial record, applying
every candidate event the reducer accepts (the fixed payloads of the table's own types
included, and examples of the payload strategies you give), and keeps, for each edge, the
first (so shortest) log that takes it. Each log then goes on to a terminal state by the
shortest way that avoids `run.failed` and `run.terminated` when there is one. Use them as
plain examples::

    @pytest.mark.parametrize("events", edge_covering_paths(MY_TABLE), ids=edge_ids(MY_TABLE))
    def test_my_service_follows(events): ...

Records are compared by what decides what may follow (state, open model call, the ledger's
action statuses, the custom fields), so the search ends; `max_depth` bounds it too.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from hypothesis import strategies as st

from agentfsm.events.models import Envelope, Event
from agentfsm.events.vocabulary import EventTypes
from agentfsm.fsm.table import TransitionTable
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.testing._runs.candidates import (
    FEATURES,
    Candidate,
    Clock,
    Next,
    accepted,
    plausible,
    times_for,
    try_next,
)
from agentfsm.testing._runs.coverage import EdgeKey, edge_name, taken_edge
from agentfsm.testing._runs.custom import payload_strategy
from agentfsm.testing._runs.sampling import samples
from agentfsm.testing._runs.tools import DEFAULT_TOOLS, Tools, ToolsLike, tool_set

__all__ = [
    "covering_candidates", "edge_covering_paths", "edge_ids", "payload_examples",
    "shortest_paths", "to_the_end", "with_run_id",
]  # fmt: skip

_Path = tuple[Next, ...]
_ABRUPT = frozenset({"run.failed", "run.terminated"})
#: The most actions a searched record may hold: more add no edge in any table we know.
_MAX_ACTIONS = 3
#: The most calls in one batch of a searched record: two show every batch edge (one call
#: settled, one not), and a third multiplied the records to search by about ten.
_MAX_BATCH = 2
#: The search gives up this many events past the last length that took a new edge: an edge
#: behind a condition no generated value meets (a field no strategy was given for) would
#: otherwise keep it going to `max_depth`, through tens of thousands of records (minutes).
#: No table we know has a new edge that far past the previous one: a tool's result or a
#: proposal shows its edge within a few events.
_IDLE_LEVELS = 4
#: The searched logs' times: one second apart from the epoch (a timeout jumps ahead).
_CLOCK = Clock()


def _key(record: RunRecord) -> tuple[Any, ...]:
    # Which tool a call is of, what the tools returned and what the calls and the decision
    # proposed are part of it: a table's conditions may read them. Calls of batches before
    # the current one count only in number (no later event names them, and `_MAX_ACTIONS`
    # counts them): keyed in full, they multiplied the records of a table with a few
    # custom fields past what the search could expand within its depth.
    actions = tuple(
        sorted(
            (
                a.status,
                a.tool,
                a.attempts > 0,
                bool(a.error and a.error.retryable),
                repr(a.emit) if a.emit_pending else "",
            )
            for aid in record.batch
            if (a := record.actions[aid])
        )
    )
    custom = tuple(sorted((k, _shape(v)) for k, v in record.custom.items()))
    facts = tuple(sorted((k, _shape(v)) for k, v in record.facts.items()))
    decided = repr(record.decided_emit) if record.decided_emit is not None else None
    return (
        record.status, record.model_call_open, actions, len(record.actions), custom, facts,
        decided,
    )  # fmt: skip


def _shape(value: Any) -> str:
    """`value` as the search tells records apart: a list by the distinct items in it.

    A fold that appends (notes piling up) would otherwise make a new record of every event
    on a self-loop, and the search would never end before `max_depth`: a log of the same
    note three times reaches no edge that one note does not.
    """
    if isinstance(value, list | tuple):
        return "[" + ",".join(sorted({_shape(v) for v in value})) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k!r}:{_shape(v)}" for k, v in sorted(value.items())) + "}"
    return repr(value)


#: Examples of payloads by event type, tried besides the fixed ones.
Extra = Mapping[str, Iterable[dict[str, Any]]]


def _expand(
    reducer: Reducer,
    record: RunRecord,
    extra: Extra,
    features: frozenset[str],
    tools: Tools = DEFAULT_TOOLS,
) -> list[Next]:
    at = _CLOCK.next(record)
    options = accepted(reducer, record, at, features, tools=tools)
    vocabulary = reducer.table.event_types
    for t in reducer.table.allowed(record.status):
        times = times_for(reducer.table, record, t, at)
        for cand in _with_examples(record, t, extra.get(t, ()), vocabulary, tools, features):
            for when in times:
                try:
                    event = cand.event(record, when, events=vocabulary)
                except ValueError:
                    break  # an example the model refuses
                after = try_next(reducer, record, event)
                if isinstance(after, RunRecord):
                    options.append(Next(cand, event, after))
    return [
        n
        for n in options
        if len(n.record.actions) <= _MAX_ACTIONS and len(n.record.batch) <= _MAX_BATCH
    ]


def _with_examples(
    record: RunRecord,
    event_type: str,
    examples: Iterable[dict[str, Any]],
    vocabulary: EventTypes,
    tools: Tools,
    features: frozenset[str],
) -> list[Candidate]:
    """Candidates built from payload examples: a table's own type's as they are; a
    built-in type's over each plausible candidate (the example's fields win, but for the
    ones that tie the event to the ledger: which action, which attempt, which decision and
    calls stay the candidate's).
    """
    examples = list(examples)
    if not examples:
        return []
    if event_type in vocabulary.custom:
        return [Candidate(event_type, payload) for payload in examples]
    out: list[Candidate] = []
    for cand in plausible(record, event_type, vocabulary, tools):
        if not cand.needs <= features:
            continue
        kept = {k: v for k, v in cand.fields.items() if k in _LEDGER_FIELDS}
        out += [Candidate(event_type, {**cand.fields, **p, **kept}, cand.needs) for p in examples]
    return out


#: A built-in event's fields that tie it to the run's ledger: a payload example never
#: replaces them (see `_with_examples`).
_LEDGER_FIELDS = frozenset({"action_id", "attempt", "decision", "tool_calls", "emitted_by"})


def _search(
    reducer: Reducer,
    start: RunRecord,
    extra: Extra,
    max_depth: int,
    visit: Callable[[RunRecord, Next, _Path], bool],
    allow: Callable[[Next], bool] = lambda n: True,
    features: frozenset[str] = FEATURES,
    min_length: int = 1,
    tools: Tools = DEFAULT_TOOLS,
) -> None:
    """Breadth first from `start`; `visit(before, step, path)` returns True to stop.

    A record is expanded once, or with `min_length` once per length below `min_length - 1`
    it is reached at: so that paths long enough are found too (a record first reached in
    two events may be the one to reach in five when a log must have six).
    """
    cap = min_length - 1
    queue: deque[tuple[RunRecord, _Path]] = deque([(start, ())])
    seen = {(_key(start), 0)}
    while queue:
        record, path = queue.popleft()
        if len(path) >= max_depth:
            continue
        for n in _expand(reducer, record, extra, features, tools):
            if not allow(n):
                continue
            if visit(record, n, (*path, n)):
                return
            key = (_key(n.record), min(len(path) + 1, cap))
            if key not in seen and not reducer.table.is_terminal(n.record.status):
                seen.add(key)
                queue.append((n.record, (*path, n)))


def covering_candidates(
    reducer: Reducer,
    extra: Extra | None = None,
    max_depth: int = 16,
    features: frozenset[str] = FEATURES,
    min_length: int = 1,
    tools: Tools = DEFAULT_TOOLS,
) -> dict[EdgeKey, _Path]:
    """For each edge reachable within `max_depth` events, the shortest path that takes it.

    Only candidates whose features are all in `features` are tried, and only paths of at
    least `min_length` events are kept.
    """
    found: dict[EdgeKey, _Path] = {}
    table = reducer.table
    # Stop once every edge is found that the table's graph lets come this late: an edge
    # out of `created` is only ever the first event, and with `min_length` above 1 the
    # search would otherwise go on to `max_depth` looking for it.
    late = _states_at_or_after(table, min_length - 1)
    wanted = sum(1 for e in table.transitions if e.source in late)

    last_new = [min_length]  # the length of the latest path that took a new edge

    def visit(before: RunRecord, step: Next, path: _Path) -> bool:
        edge = taken_edge(table, before, step.event)
        if edge is not None and edge.key not in found and len(path) >= min_length:
            found[edge.key] = path
            last_new[0] = len(path)
        return len(found) >= wanted or len(path) > last_new[0] + _IDLE_LEVELS

    start = reducer.initial("run_1")
    _search(
        reducer, start, extra or {}, max_depth, visit,
        features=features, min_length=min_length, tools=tools,
    )  # fmt: skip
    return found


def _states_at_or_after(table: TransitionTable, steps: int) -> set[str]:
    """The states a walk along the table's edges can be in after `steps` edges or more."""
    succ: dict[str, set[str]] = {s: set() for s in table.state_names}
    for t in table.transitions:
        succ[t.source].add(t.target)
    level = {table.initial}
    for _ in range(steps):
        level = {t for s in level for t in succ[s]}
    out: set[str] = set()
    seen: set[frozenset[str]] = set()
    while frozenset(level) not in seen:  # the levels repeat within a few rounds
        seen.add(frozenset(level))
        out |= level
        level = {t for s in level for t in succ[s]}
    return out


@functools.lru_cache(maxsize=64)
def shortest_paths(
    reducer: Reducer,
    features: frozenset[str] = FEATURES,
    min_length: int = 1,
    max_depth: int = 16,
    tools: Tools = DEFAULT_TOOLS,
) -> dict[EdgeKey, _Path]:
    """`covering_candidates` with the fixed payloads only, cached per reducer and settings."""
    # Cached: `legal_runs` follows these, and the search costs a few hundred folds, too
    # much to repeat per example.
    return covering_candidates(reducer, None, max_depth, features, min_length, tools)


def _first_ending(
    reducer: Reducer,
    record: RunRecord,
    extra: Extra,
    max_depth: int,
    allow: Callable[[Next], bool],
    features: frozenset[str],
    tools: Tools,
) -> _Path:
    found: list[_Path] = []

    def visit(before: RunRecord, step: Next, path: _Path) -> bool:
        if reducer.table.is_terminal(step.record.status):
            found.append(path)
            return True
        return False

    _search(reducer, record, extra, max_depth, visit, allow, features, tools=tools)
    return found[0] if found else ()


def to_the_end(
    reducer: Reducer,
    record: RunRecord,
    extra: Extra,
    max_depth: int = 24,
    features: frozenset[str] = FEATURES,
    tools: Tools = DEFAULT_TOOLS,
) -> _Path:
    """The shortest way on to a terminal state, gracefully if possible; () if none."""
    for allow in (lambda n: n.candidate.type not in _ABRUPT, lambda n: True):
        best = _first_ending(reducer, record, extra, max_depth, allow, features, tools)
        if best:
            return best
    return ()


def payload_examples(
    table: TransitionTable,
    payloads: Mapping[str, st.SearchStrategy[dict[str, Any]]] | None,
    fields: Mapping[str, st.SearchStrategy[Any]] | None,
    count: int,
) -> dict[str, tuple[dict[str, Any], ...]]:
    """`count` examples of each payload strategy given, or built from `fields` for the
    table's own types, by event type (none without `payloads` or `fields`)."""
    vocabulary = table.event_types
    strategies = dict(payloads or {})
    if fields:
        for t in vocabulary.custom:
            field_items = tuple(sorted(fields.items()))
            strategies.setdefault(t, _payload_strategy(vocabulary.classes[t], field_items))
    return {t: _distinct(samples(s, count)) for t, s in sorted(strategies.items())}


def _distinct(payloads: Iterable[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """The payloads without repeats (`st.just(...)` draws one value ten times): each is
    tried on every record the search expands."""
    out: list[dict[str, Any]] = []
    for p in payloads:
        if p not in out:
            out.append(p)
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _payload_strategy(
    cls: type[Envelope], fields: tuple[tuple[str, st.SearchStrategy[Any]], ...]
) -> st.SearchStrategy[dict[str, Any]]:
    # One strategy object per (model, fields): `samples` caches by strategy object, so a
    # new one per call would be drawn again every time.
    return payload_strategy(cls, dict(fields))


def edge_covering_paths(
    table: TransitionTable | Reducer,
    *,
    payloads: Mapping[str, st.SearchStrategy[dict[str, Any]]] | None = None,
    fields: Mapping[str, st.SearchStrategy[Any]] | None = None,
    run_id: str = "run_1",
    max_depth: int = 16,
    samples_per_type: int = 10,
    tools: ToolsLike | None = None,
    results: Mapping[str, st.SearchStrategy[Any]] | None = None,
) -> list[list[Event]]:
    """One legal log per edge of `table`, in the table's edge order: the shortest that takes
    the edge, then on to a terminal state if it can.

    Edges no log reaches within `max_depth` events (an unreachable state, a condition that
    never holds) have no log; `EdgeCoverage(table)` over the result names them. It may be
    called from inside a `@given` test: the payload examples are drawn outside it.

    Args:
        table: the transition table, or a `Reducer`.
        payloads: payload strategies per event type; `samples_per_type` examples of each
            are tried besides the fixed payloads (see `legal_runs`).
        fields: strategies per field name of the table's own event types.
        run_id: the run id of every log.
        max_depth: the most events before the edge.
        samples_per_type: how many examples of each payload strategy are tried.
        tools: the agent's tools, as `legal_runs(tools=...)` takes them.
        results: example results per tool name, as `legal_runs(results=...)`.
    """
    reducer = table if isinstance(table, Reducer) else Reducer(table)
    known = tool_set(tools, results, reducer.table.event_types)
    extra = payload_examples(reducer.table, payloads, fields, samples_per_type)
    found = (
        covering_candidates(reducer, extra, max_depth, tools=known)
        if extra
        else shortest_paths(reducer, max_depth=max_depth, tools=known)
    )
    logs: list[list[Event]] = []
    for edge in reducer.table.transitions:
        path = found.get(edge.key)
        if path is None:
            continue
        end = path[-1].record
        rest = (
            ()
            if reducer.table.is_terminal(end.status)
            else to_the_end(reducer, end, extra, tools=known)
        )
        logs.append(with_run_id([n.event for n in (*path, *rest)], run_id))
    return logs


def with_run_id(events: Iterable[Event], run_id: str) -> list[Event]:
    """The events with `run_id` as their run id (the search folds them as `run_1`)."""
    return [e.model_copy(update={"run_id": run_id}) for e in events]


def edge_ids(table: TransitionTable | Reducer, **options: Any) -> list[str]:
    """Test ids for `edge_covering_paths(table, **options)`: each log's goal edge, by name."""
    reducer = table if isinstance(table, Reducer) else Reducer(table)
    known = tool_set(options.get("tools"), options.get("results"), reducer.table.event_types)
    extra = payload_examples(
        reducer.table,
        options.get("payloads"),
        options.get("fields"),
        options.get("samples_per_type", 10),
    )
    found = (
        covering_candidates(reducer, extra, tools=known)
        if extra
        else shortest_paths(reducer, tools=known)
    )
    return [edge_name(e) for e in reducer.table.transitions if e.key in found]
