"""The edge-covering paths as examples of `legal_runs`: one plain log per edge, each drawn once.

A walk steered towards the edges it has not taken reaches rare ones often, not surely: which
ones it reaches in a given number of examples depends on what Hypothesis draws, and that
depends on the seed and even on the modules imported (Hypothesis mixes constants found in
them into its draws). So the guarantee does not come from the walk. It comes from how
Hypothesis keeps track of what it has tried: it never generates a choice sequence it has
already run to its end.

The first choice `legal_runs` draws is `which`: 0 walks (the simplest choice, so a failing
walk shrinks as a walk), and `k` returns the k-th log of the `PlanBook` and draws nothing
more. Once an example has taken `k`, there is nothing left to vary below it, so Hypothesis
never picks `k` again, and each new example is a plan not drawn yet or a walk. So every
plan comes up exactly once, in the first examples (a little more than one per edge; the
walks in between are few, as a new example picks among the plans left and the walk), and
the plans take every edge that a log can take. Plans are ordered shortest first, so a
failing plan shrinks to the shortest plan that fails.

Edges no log takes (a condition that never holds) have no plan; the walk's goals leave
them out too, so they cost nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

from agentfsm.events.codec import dump_event
from agentfsm.events.models import Event
from agentfsm.reducers.reduce import Reducer
from agentfsm.testing._runs.candidates import Next
from agentfsm.testing._runs.coverage import EdgeKey
from agentfsm.testing._runs.paths import (
    covering_candidates,
    payload_examples,
    shortest_paths,
    to_the_end,
    with_run_id,
)
from agentfsm.testing._runs.tools import DEFAULT_TOOLS, Tools

__all__ = ["PlanBook"]

#: How many examples of each given payload strategy the search tries.
_SAMPLES = 10
#: The most events before the edge, as in `edge_covering_paths`.
_DEPTH = 16


class PlanBook:
    """The shortest path to each edge a walk can take, and the plain logs built from them.

    Nothing is searched until first asked for: building a strategy stays cheap, and a
    strategy that is never drawn (or only by `illegal_steps`) never pays for the search.
    """

    def __init__(
        self,
        reducer: Reducer,
        features: frozenset[str],
        payloads: Mapping[str, st.SearchStrategy[dict[str, Any]]],
        fields: Mapping[str, st.SearchStrategy[Any]],
        tools: Tools = DEFAULT_TOOLS,
    ) -> None:
        self._tools = tools
        self._reducer = reducer
        self._features = features
        self._payloads = dict(payloads)
        self._fields = dict(fields)
        self._logs: dict[tuple[str, int, int, bool | None], tuple[tuple[Event, ...], ...]] = {}

    @functools.cached_property
    def extra(self) -> dict[str, tuple[dict[str, Any], ...]]:
        """Examples of the given payload strategies, by event type (see `paths`)."""
        return payload_examples(self._reducer.table, self._payloads, self._fields, _SAMPLES)

    @functools.cached_property
    def paths(self) -> Mapping[EdgeKey, tuple[Next, ...]]:
        """The shortest log (of `Next` steps) that takes each edge, for the edges it finds."""
        return self._paths(1)

    def logs(
        self, run_id: str, min_events: int, max_events: int, finished: bool | None
    ) -> tuple[tuple[Event, ...], ...]:
        """One log per edge that fits the settings of `legal_runs`, shortest first.

        A log is the shortest of at least `min_events` events that takes its edge last;
        with `finished=True` it goes on to a terminal state, gracefully if it can. An edge
        with no such log of at most `max_events` (or, with `finished=False`, an edge that
        ends the run) has no plan: the walk still steers towards it.
        """
        key = (run_id, min_events, max_events, finished)
        if key not in self._logs:
            self._logs[key] = self._build(*key)
        return self._logs[key]

    def _paths(self, min_length: int) -> Mapping[EdgeKey, tuple[Next, ...]]:
        if min_length == 1:
            depth = _DEPTH
        else:
            # Some edges have no log that long (one out of `created` is always the first
            # event), so the search would only stop at `_DEPTH`, a few seconds away. A log
            # padded to `min_length` is rarely much longer than the longest shortest one.
            depth = min(_DEPTH, min_length + max(map(len, self.paths.values()), default=0))
        if self.extra:
            return covering_candidates(
                self._reducer, self.extra, depth, self._features, min_length, self._tools
            )
        return shortest_paths(self._reducer, self._features, min_length, depth, self._tools)

    def _build(
        self, run_id: str, min_events: int, max_events: int, finished: bool | None
    ) -> tuple[tuple[Event, ...], ...]:
        table = self._reducer.table
        paths = self.paths if min_events == 1 else self._paths(min_events)
        out: dict[str, tuple[Event, ...]] = {}
        for edge in table.transitions:
            path = paths.get(edge.key)
            if path is None or len(path) > max_events:
                continue
            end = path[-1].record
            ended = table.is_terminal(end.status)
            if finished is False and ended:
                continue
            steps = [n.event for n in path]
            if finished and not ended:
                rest = to_the_end(
                    self._reducer, end, self.extra, features=self._features, tools=self._tools
                )
                if not rest:
                    continue  # no way on to an end with these features
                steps += [n.event for n in rest]
            log = tuple(with_run_id(steps, run_id))
            # Two edges' logs can be the same (a path and its ending may make another's).
            out.setdefault("\n".join(dump_event(e) for e in log), log)
        return tuple(sorted(out.values(), key=len))
