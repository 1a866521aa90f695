"""Steering `legal_runs` walks towards edges a log has not taken yet.

Every edge a log can take is reached by the plain logs of `plans`, drawn once each; the
steering is for variety: it makes rare edges (an edge behind a condition, a custom event
in one state) come up again in walks, after other events, with drawn payloads. A walk that
picks each next event by weight reaches the everyday edges over and over and a rare one
almost never (an edge with a condition on an event field was reached in 0 of 300 examples).
So each walk draws a *goal*: one of the edges some log can take (`Walk.plans.paths`; an
edge behind a condition that never holds would waste a goal's whole budget). The first goal
is reached by following the shortest log from a run's start that takes it; later goals are
edges the log has not taken yet, and most steps then move towards the goal's source state
(fewest table edges away) and, once there, take the goal edge itself, trying the fixed and
the drawn payloads of the event until one's fold takes that edge (a condition on a field is
met by the value that satisfies it). When the goal is taken, or after `BUDGET` steps
without it, the log draws another goal among the edges it has not taken.

Goals are drawn from the example's own choices, never from what earlier examples covered:
Hypothesis replays and shrinks an example from its choices alone, and a generator that read
shared state would give another log on replay (a flaky failure).
"""

from __future__ import annotations

import functools
from collections import deque
from typing import Any

from hypothesis import strategies as st

from agentfsm.fsm.table import Transition, TransitionTable
from agentfsm.record import RunRecord
from agentfsm.testing._runs.candidates import Candidate, Clock, Next, times_for, try_next
from agentfsm.testing._runs.coverage import EdgeKey, taken_edge
from agentfsm.testing._runs.walkspec import Walk

__all__ = [
    "BUDGET", "distances_to", "draw_goal", "follow", "route_to", "steered_step",
]  # fmt: skip

#: Steps a goal gets before the walk gives up on it and draws another.
BUDGET = 12
#: Whether a step is steered: 0 walks freely (so shrinking tends to the free walk, whose
#: logs read plainest); otherwise (three times in four) the step moves towards the goal.
STEER = st.integers(0, 3)
_PICK = st.integers(0, 255)
#: Payloads drawn per custom event type in a steered step, besides its fixed variants.
_DRAWS = 3


@functools.lru_cache(maxsize=256)
def distances_to(table: TransitionTable, state: str) -> dict[str, int]:
    """Fewest table edges from each state to `state` (states that cannot reach it are absent)."""
    preds: dict[str, set[str]] = {s: set() for s in table.state_names}
    for t in table.transitions:
        preds[t.target].add(t.source)
    distance = {state: 0}
    queue = deque([state])
    while queue:
        here = queue.popleft()
        for p in preds[here]:
            if p not in distance:
                distance[p] = distance[here] + 1
                queue.append(p)
    return distance


def draw_goal(draw: st.DrawFn, walk: Walk, state: str, taken: set[EdgeKey]) -> Transition | None:
    """An edge not taken yet whose source `state` can reach, or None when none is left.

    Only edges some log can take are goals (those the edge-covering search found): a
    condition that never holds would waste a goal's whole budget in every log.
    """
    table, reachable = walk.table, walk.plans.paths
    open_ = [
        e
        for e in table.transitions
        if e.key in reachable and e.key not in taken and state in distances_to(table, e.source)
    ]
    if not open_:
        return None
    # A bounded integer is drawn near uniformly; `% len` of a wide one would favour the
    # first edges (Hypothesis draws small numbers more often), and rare goals would starve.
    return open_[draw(st.integers(0, len(open_) - 1))]


def _drawn(draw: st.DrawFn, walk: Walk, record: RunRecord, at: str) -> list[Next]:
    """Events of the table's own types built from drawn payloads, where the reducer takes them."""
    out: list[Next] = []
    vocabulary = walk.table.event_types
    for t in walk.table.allowed(record.status):
        strategy = walk.drawn.get(t)
        if strategy is None or t not in vocabulary.custom:
            continue
        times = times_for(walk.table, record, t, at)
        for _ in range(_DRAWS):
            cand = Candidate(t, draw(strategy))
            for when in times:
                try:
                    event = cand.event(record, when, events=vocabulary)
                except ValueError:
                    break  # a user's strategy drew a value the model refuses: skip it
                after = try_next(walk.reducer, record, event)
                if isinstance(after, RunRecord):
                    out.append(Next(cand, event, after))
    return out


def route_to(walk: Walk, goal: Transition | None) -> list[Candidate]:
    """The events of the shortest log from a run's start that takes `goal` (see `plans`)."""
    if goal is None:
        return []
    return [n.candidate for n in walk.plans.paths.get(goal.key, ())]


def follow(
    walk: Walk, record: RunRecord, clock: Clock, cand: Candidate, may_end: bool
) -> Next | None:
    """`cand` as the next event, if the reducer, the features and `may_end` allow it."""
    if not cand.needs <= walk.features:
        return None
    table = walk.table
    for at in times_for(table, record, cand.type, clock.next(record)):
        event = cand.event(record, at, events=table.event_types)
        after = try_next(walk.reducer, record, event)
        if isinstance(after, RunRecord):
            if not may_end and table.is_terminal(after.status):
                return None
            return Next(cand, event, after)
    return None


def steered_step(
    draw: st.DrawFn,
    walk: Walk,
    record: RunRecord,
    clock: Clock,
    goal: Transition,
    may_end: bool,
    asked_cancel: bool,
) -> Next | None:
    """The goal edge if it can be taken now, else a step towards its source; None if stuck."""
    table = walk.table
    at = clock.next(record)
    options = walk.options(record, clock) + _drawn(draw, walk, record, at)
    if not may_end:
        options = [n for n in options if not table.is_terminal(n.record.status)]
    if record.status == goal.source:
        for n in options:
            edge = taken_edge(table, record, n.event)
            if edge is not None and edge.key == goal.key:
                return n
    if asked_cancel:
        # Asking again is legal but adds nothing, unless it is the goal (taken above).
        options = [n for n in options if n.candidate.type != "run.cancel_requested"]
    distance = distances_to(table, goal.source)
    near: list[Any] = [n for n in options if n.record.status in distance]
    if not near:
        return None
    best = min(distance[n.record.status] for n in near)
    near = [n for n in near if distance[n.record.status] == best]
    chosen: Next = near[draw(_PICK) % len(near)]
    return chosen
