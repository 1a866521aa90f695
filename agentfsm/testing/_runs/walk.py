"""`legal_runs`: whole legal logs of one run, walked through a table one event at a time.

At each step the walk builds the well-formed events that could come next from the current
run record (the next model call, a result for each action in flight, a decision for each
pending approval, ...), keeps the ones the reducer accepts, and lets Hypothesis choose. The
reducer is the judge, so the same strategy serves the default table and any table derived
from it.

Every edge is reached by design, not by luck: the first choice of an example is a walk (0)
or one of the plain logs that take each edge by the shortest way (see `plans`), and
Hypothesis draws each of those once, among the first examples. The walks are steered
towards edges they have not taken (see `steering`), so rare edges also come up in varied
company.

Shrinking is part of the design: whether to go on is drawn at each step (stopping is the
simplest choice, so logs shrink towards `min_events`), candidates are offered in a fixed
"simplest first" order, and the free fields (results, usage, reasons) shrink to `None` or
to small values. A failing plain log shrinks to the shortest one that fails. A failing
property is reported with a short log that reads like a plain run.

Example:
    >>> from hypothesis import given
    >>> from agentfsm.reducers import DEFAULT_REDUCER
    >>> @given(legal_runs())
    ... def test_replay_accepts(events):
    ...     DEFAULT_REDUCER.replay(events)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
from hypothesis import note, reject
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from agentfsm.events.codec import dump_event, parse_event
from agentfsm.events.models import Event
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable
from agentfsm.names import DecisionKind
from agentfsm.names import EventType as E
from agentfsm.record import RunRecord
from agentfsm.testing._runs.candidates import FEATURES, Clock, Next, accepted, fresh_ids, try_next
from agentfsm.testing._runs.coverage import EdgeKey, taken_edge
from agentfsm.testing._runs.sampling import simplest
from agentfsm.testing._runs.steering import BUDGET, STEER, draw_goal, follow, route_to, steered_step
from agentfsm.testing._runs.tools import ToolsLike
from agentfsm.testing._runs.values import Calls, as_strategy, clocks, free_fields, run_ids
from agentfsm.testing._runs.walkspec import TableLike, Walk, make_walk, weight

__all__ = [
    "FEATURES", "TableLike", "dress_run", "legal_runs", "walk_skeleton", "widen_calls",
    "with_table_ref",
]  # fmt: skip

#: When ending a run, how much each event type moves it towards the end (lower first):
#: settle what is in flight, decide what waits, then let the model give its final answer.
_ENDING_RANK: dict[str, int] = {
    E.TOOL_COMPLETED: 0,
    E.APPROVAL_REJECTED: 1,
    E.TOOL_REQUESTED: 2,
    E.RUN_RESUMED: 3,
    E.MODEL_COMPLETED: 4,
    E.MODEL_STARTED: 5,
    E.TOOL_STARTED: 6,
    E.APPROVAL_ACCEPTED: 7,
    E.TOOL_FAILED: 8,
    E.TOOL_OUTCOME_UNKNOWN: 9,
}
_ABRUPT = (E.RUN_FAILED, E.RUN_TERMINATED)

#: Whether the walk goes on: 0 stops it (the simplest choice, so shrinking shortens logs);
#: otherwise it goes on 31 times in 32.
_GO_ON = st.integers(0, 31)
#: Which candidate of the chosen kind, and how many tool calls a decision makes.
_PICK = st.integers(0, 255)
_CALLS = st.integers(0, 7)


#: How `_finish` ends a run: (gracefully?, which ending).
_ENDING = st.tuples(st.booleans(), st.integers(0, 255))


@attrs.frozen
class _Run:
    run_id: str
    clock: Clock
    events: tuple[Event, ...]
    record: RunRecord


def walk_skeleton(
    draw: st.DrawFn,
    walk: Walk,
    run_id: st.SearchStrategy[str],
    min_events: int,
    max_events: int,
    finished: bool | None,
    steer: bool = True,
) -> _Run:
    """A legal log with only the structural fields: which events, in which order.

    With `steer`, the walk pursues goal edges (see `steering`); without,
    it picks each step by weight alone (as `illegal_steps` wants: steered prefixes end in
    terminal states too often, where no rule can be broken).

    Each step is the same few choices (go on?, which kind, which candidate, how many
    calls), kinds are named by a stable place (see `walkspec.KINDS`), and the free fields are drawn
    afterwards (`dress_run`): so the shrinker can delete whole steps without garbling the
    choices of the steps after them.
    """
    table = walk.table
    rid = draw(run_id)
    clock = draw(clocks())
    record = walk.reducer.initial(rid)
    log: list[Event] = []
    taken: set[EdgeKey] = set()
    goal = draw_goal(draw, walk, record.status, taken) if steer else None
    budget = BUDGET
    route = route_to(walk, goal)
    while len(log) < max_events and not table.is_terminal(record.status):
        if draw(_GO_ON) == 0 and len(log) >= min_events:
            break
        may_end = finished is not False and len(log) + 1 >= min_events
        asked = any(e.type == "run.cancel_requested" for e in log)
        chosen = follow(walk, record, clock, route.pop(0), may_end) if route else None
        if chosen is None:
            route = []  # off the route (a feature is off, or the run may not end yet)
        if chosen is None and goal is not None and draw(STEER) != 0:
            chosen = steered_step(draw, walk, record, clock, goal, may_end, asked)
        if chosen is None:
            groups = _Groups(walk, record, clock, asked, may_end)
            if not groups.any():
                break  # nothing worth doing is possible: the walk is over
            group = groups.of(_draw_kind(draw, walk, groups))
            chosen = group[draw(_PICK) % len(group)]
            chosen = widen_calls(walk, record, chosen, 1 + draw(_CALLS) % walk.max_calls)
        edge = taken_edge(table, record, chosen.event)
        if edge is not None:
            taken.add(edge.key)
        log.append(chosen.event)
        record = chosen.record
        budget -= 1
        if steer and (goal is None or goal.key in taken or budget <= 0):
            goal, budget = draw_goal(draw, walk, record.status, taken), BUDGET
    if finished and not table.is_terminal(record.status):
        graceful, which = draw(_ENDING)
        record = _finish(walk, clock, record, log, graceful, which)
    if len(log) < min_events:
        reject()  # the walk got stuck early: rare, and only with few features enabled
    return _Run(rid, clock, tuple(log), record)


class _Groups:
    """The accepted candidates of each kind in one state, built when first asked for.

    Events that end the run are candidates only if `may_end`. The walk asks for
    cancellation at most once: asking again is legal but adds nothing.
    """

    def __init__(
        self, walk: Walk, record: RunRecord, clock: Clock, cancelled: bool, may_end: bool
    ) -> None:
        self._walk, self._record, self._clock, self._may_end = walk, record, clock, may_end
        self._cancelled = cancelled
        self._groups: dict[str, list[Next]] = {}

    def of(self, kind: str) -> list[Next]:
        if kind not in self._groups:
            self._groups[kind] = self._build(kind)
        return self._groups[kind]

    def has(self, kind: str) -> bool:
        return bool(self.of(kind))

    def any(self) -> bool:
        return any(self.has(k) for k in self._walk.kinds)

    def _build(self, kind: str) -> list[Next]:
        event_type, _, direct = kind.partition(" ")
        if event_type == E.RUN_CANCEL_REQUESTED and self._cancelled:
            return []
        walk, record = self._walk, self._record
        at = self._clock.next(record)
        return [
            n
            for n in accepted(walk.reducer, record, at, walk.features, (event_type,), walk.tools)
            if ("direct_requests" in n.candidate.needs) == bool(direct)
            and (self._may_end or not walk.table.is_terminal(n.record.status))
        ]


def _draw_kind(draw: st.DrawFn, walk: Walk, groups: _Groups) -> str:
    """A kind of event possible in the state, by weight.

    Like Hypothesis' own filtered `sampled_from`: a few draws from all kinds (each names a
    kind by its place, which keeps steps stable under shrinking), then one weighted draw
    among the possible kinds, so a state where little is possible stays cheap.
    """
    for _ in range(3):
        kind = draw(walk.kind_strategy)
        if groups.has(kind):
            return kind
    possible = [k for k in walk.kinds if groups.has(k)]
    ticket = draw(st.integers(0, sum(weight(k) for k in possible) - 1))
    for kind in possible:
        ticket -= weight(kind)
        if ticket < 0:
            return kind
    raise AssertionError("unreachable: the ticket is below the total weight")


def widen_calls(walk: Walk, record: RunRecord, chosen: Next, calls: int) -> Next:
    """A tool-call decision with `calls` calls instead of one, if the reducer agrees."""
    fields = chosen.candidate.fields
    if calls == 1 or not fields.get("tool_calls"):
        return chosen
    ids = fresh_ids(record, calls)
    cand = attrs.evolve(
        chosen.candidate,
        fields={**fields, "tool_calls": [{**fields["tool_calls"][0], "action_id": i} for i in ids]},
    )
    event = cand.event(record, chosen.event.occurred_at, events=walk.table.event_types)
    after = try_next(walk.reducer, record, event)
    return Next(cand, event, after) if isinstance(after, RunRecord) else chosen


def _finish(
    walk: Walk, clock: Clock, record: RunRecord, log: list[Event], graceful: bool, which: int
) -> RunRecord:
    """Append events until the run is in a terminal state, by the shortest route in sight.

    An abrupt ending takes any ending at hand, a failure or a guard's termination
    included; a graceful one settles what is in flight and ends without `run.failed` or
    `run.terminated` (e.g. by completing), unless the table or the features leave no other
    way. `which` picks among the endings available at the last step.
    """
    table = walk.table
    for _ in range(12 + 4 * len(record.actions)):
        options = [
            n
            for n in walk.options(record, clock)
            if "direct_requests" not in n.candidate.needs
            and n.candidate.fields.get("decision", DecisionKind.FINAL) == DecisionKind.FINAL
        ]
        if graceful and any(n.candidate.type not in _ABRUPT for n in options):
            options = [n for n in options if n.candidate.type not in _ABRUPT]
        ending = [n for n in options if table.is_terminal(n.record.status)]
        if ending:
            nxt = ending[which % len(ending)]
        elif options:
            distance = walk.graceful_distance if graceful else walk.distance
            far = len(table.states) + 1
            nxt = min(
                options,
                key=lambda n: (
                    distance.get(n.record.status, far),
                    _ENDING_RANK.get(n.candidate.type, 99),
                ),
            )
        else:
            break
        log.append(nxt.event)
        record = nxt.record
        if table.is_terminal(record.status):
            return record
    return reject()  # no way to a terminal state with the enabled features


def dress_run(draw: st.DrawFn, walk: Walk, run: _Run) -> _Run:
    """The skeleton with its free fields drawn: results, usage, reasons, the calls' tools.

    A payload strategy (given, or a table's own type's) is drawn over the free fields. Each
    dressed event is kept only if the reducer accepts it and it takes the plain event's edge
    (a condition may read a free field, and the walk chose that edge); otherwise the plain
    event stays.
    """
    calls: Calls = {}
    table = walk.table
    record = walk.reducer.initial(run.run_id)
    out: list[Event] = []
    for plain in run.events:
        base = {k: v for k, v in plain.model_dump(exclude_none=True).items() if k not in _ENVELOPE}
        fields = free_fields(draw, plain.type, base, calls)
        if plain.type == "tool.completed" and "result" not in base:
            # A tool told its results (`results=`) returns one of them, not any JSON.
            examples = walk.tools.results_of(record.actions[base["action_id"]].tool)
            if examples:
                fields["result"] = draw(st.sampled_from(examples))
        if plain.type in walk.drawn and "emitted_by" not in base:
            # A proposed event is the very one proposed: its fields are not drawn again.
            fields.update(draw(walk.drawn[plain.type]))
        plain_after = try_next(walk.reducer, record, plain)
        if not isinstance(plain_after, RunRecord):
            return run  # cannot happen for a skeleton the walk built: keep it as it is
        want = taken_edge(table, record, plain)
        try:
            event = parse_event(
                {**fields, "type": plain.type, **{k: getattr(plain, k) for k in _ENVELOPE}},
                events=table.event_types,
            )
        except ValueError:
            event = plain  # a given payload strategy drew what the model refuses
        after = try_next(walk.reducer, record, event)
        if isinstance(after, RunRecord) and taken_edge(table, record, event) == want:
            out.append(event)
            record = after
        else:
            out.append(plain)
            record = plain_after
    return _Run(run.run_id, run.clock, tuple(out), record)


#: Envelope fields a dressed event keeps from the plain one.
_ENVELOPE = ("run_id", "sequence", "occurred_at")


def _note_log(events: list[Event], table: TransitionTable) -> None:
    """Show a failing example as the JSON Lines log it is, its `run.started` naming its table
    (`with_table_ref`), so `agentfsm validate FILE` checks it against that table or says it
    does not know it, never against the default one."""
    # Drawn outside a test (e.g. by `find`) there is nobody to show it to.
    named = any(e.type == "run.started" for e in events)
    # A log without `run.started` has nowhere to name its table: say which one it is.
    how = "reads it back" if named else f"reads it back with --table naming '{table.name}'"
    with contextlib.suppress(InvalidArgument):
        note(
            f"legal_runs log of table '{table.name}' (JSON Lines; `agentfsm validate FILE` "
            f"{how}):\n" + "\n".join(dump_event(e) for e in with_table_ref(events, table))
        )


def with_table_ref(events: Iterable[Event], table: TransitionTable) -> list[Event]:
    """`events` with each `run.started` that names no table naming `table` (`table.ref`,
    as `agentfsm export --table` records it), so the log says what it is to be checked by."""
    ref = table.ref
    return [
        e.model_copy(update={"table": ref})
        if e.type == "run.started" and getattr(e, "table", None) is None
        else e
        for e in events
    ]


def _plan_run_id(run_id: str | st.SearchStrategy[str] | None) -> str:
    """The run id of the plans: the given one, else the simplest the strategy draws."""
    if isinstance(run_id, str):
        return run_id
    # `run_0` is what `run_ids()` shrinks to; asking Hypothesis for it would cost a search.
    return "run_0" if run_id is None else str(simplest(run_id))


def legal_runs(
    table: TableLike = DEFAULT_TABLE,
    *,
    run_id: str | st.SearchStrategy[str] | None = None,
    min_events: int = 1,
    max_events: int = 30,
    features: Iterable[str] | None = None,
    finished: bool | None = None,
    max_calls: int = 3,
    payloads: Mapping[str, st.SearchStrategy[dict[str, Any]]] | None = None,
    fields: Mapping[str, st.SearchStrategy[Any]] | None = None,
    tools: ToolsLike | None = None,
    results: Mapping[str, st.SearchStrategy[Any]] | None = None,
) -> st.SearchStrategy[list[Event]]:
    """Whole event logs of one run that `Reducer(table).replay` accepts.

    Logs have contiguous sequences from 1, one run id, timestamps one second apart (in a
    drawn UTC offset; an event on a timed edge comes when the edge falls due, and the events
    after it a second apart from it), action ids that the ledger knows (`act_1`, `act_2`,
    ...), batches of several tool calls, approvals accepted and rejected, retries after
    retryable failures, outcomes unknown, pauses, handoffs, cancellations with late results,
    and endings by completion, failure, cancellation or a guard's termination.

    Args:
        table: the transition table, or a `Reducer` (to use its table and its checks).
        run_id: a fixed run id or a strategy of them (default: `run_0`, `run_1`, ...).
        min_events: the fewest events the walk takes (at least 1).
        max_events: the most events the walk takes; when the run is then ended (see
            `finished`), the few events that settle and end it come on top.
        features: which of `FEATURES` may appear (default: all). Turning one off removes
            the events that *start* it; e.g. without `"approvals"` no `approval.requested`.
        finished: `True`: every log ends in a terminal state; `False`: none does;
            `None`: either.
        max_calls: the most tool calls in one model decision (with the `batches` feature).
        payloads: a payload strategy per event type (the type's own fields, no envelope):
            for the table's own types it replaces the one built from the model's
            annotations; for a built-in type it is drawn over the free fields.
        fields: a strategy per field name, for the table's own types whose payloads are
            built from annotations, e.g. `{"priority": st.sampled_from(["normal", "urgent"])}`
            so a condition on `priority` can hold.

    Among the first examples come plain logs, one per edge: the shortest log (of at least
    `min_events` events, at most `max_events`, ended if `finished`) that takes the edge,
    built from fixed payloads and examples of the payload strategies given, each drawn
    exactly once. So every
    edge such a log can take is taken, each condition branch that a value of the given
    strategies meets included, within a few dozen examples more than the table has edges
    (give `max_examples` about three times the number of edges). The other examples are walks,
    steered towards edges they have not taken yet. Check it with `assert_edge_coverage`.
    A failing example is noted as its JSON Lines log.
    """
    if min_events < 1:
        raise ValueError(f"min_events must be at least 1, got {min_events}")
    if max_events < min_events:
        raise ValueError(f"max_events ({max_events}) is less than min_events ({min_events})")
    if max_calls < 1:
        raise ValueError(f"max_calls must be at least 1, got {max_calls}")
    walk = make_walk(table, features, max_calls, payloads, fields, tools, results)
    runs = as_strategy(run_id, run_ids())

    @st.composite
    def logs(draw: st.DrawFn) -> list[Event]:
        plans = walk.plans.logs(_plan_run_id(run_id), min_events, max_events, finished)
        # 0 walks; k is the k-th plan, and nothing more is drawn (see `plans`).
        which = draw(st.integers(0, len(plans)))
        if which:
            out = list(plans[which - 1])
        else:
            skeleton = walk_skeleton(draw, walk, runs, min_events, max_events, finished)
            out = list(dress_run(draw, walk, skeleton).events)
        _note_log(out, walk.table)
        return out

    return logs()
