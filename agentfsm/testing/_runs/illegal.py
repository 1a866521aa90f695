"""`illegal_steps`: a legal prefix and one well-formed event the reducer refuses after it."""

from __future__ import annotations

from collections.abc import Iterable

import attrs
from hypothesis import reject
from hypothesis import strategies as st

from agentfsm.errors import (
    IllegalTransitionError,
    LifecycleError,
    RunMismatchError,
    SequenceError,
)
from agentfsm.events.models import Event
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.testing._runs.candidates import (
    Candidate,
    event_order,
    plausible,
    rule_breaking,
    try_next,
)
from agentfsm.testing._runs.values import as_strategy, run_ids
from agentfsm.testing._runs.walk import dress_run, walk_skeleton
from agentfsm.testing._runs.walkspec import TableLike, make_walk

__all__ = ["ILLEGAL_KINDS", "IllegalStep", "illegal_kind", "illegal_steps", "refused_events"]

#: The kinds of illegal step `illegal_steps` can produce.
#: `table`: the table has no edge for the event in the reached state;
#: `rule`: the table has an edge but a condition or a ledger rule refuses the event;
#: `envelope`: a wrong sequence number or run id.
ILLEGAL_KINDS = frozenset({"table", "rule", "envelope"})


@attrs.frozen(eq=False)
class IllegalStep:
    """A legal prefix and one well-formed event that the reducer refuses after it.

    Attributes:
        prefix: the legal events before the illegal one (possibly none).
        event: the refused event, numbered as the next event of the run.
        record: the record the prefix folds to (the run's initial record if it is empty).
        error: what the reducer raised for `event`.
        kind: one of `ILLEGAL_KINDS`.
    """

    prefix: tuple[Event, ...]
    event: Event
    record: RunRecord
    error: LifecycleError
    kind: str

    @property
    def events(self) -> list[Event]:
        """The prefix followed by the illegal event: a whole log that must be refused."""
        return [*self.prefix, self.event]


def illegal_kind(error: LifecycleError) -> str:
    """Classify a refusal as one of `ILLEGAL_KINDS`."""
    if isinstance(error, SequenceError | RunMismatchError):
        return "envelope"
    if isinstance(error, IllegalTransitionError) and not error.failed_conditions:
        return "table"
    return "rule"


def illegal_steps(
    table: TableLike = DEFAULT_TABLE,
    *,
    run_id: str | st.SearchStrategy[str] | None = None,
    max_prefix: int = 20,
    features: Iterable[str] | None = None,
    kinds: Iterable[str] = ("table", "rule"),
) -> st.SearchStrategy[IllegalStep]:
    """A legal prefix plus one well-formed event that the reducer refuses in the reached state.

    Use it to check that *your* code refuses what the table forbids: events the table has
    no edge for (`table`), and events it has an edge for but a condition or a ledger rule
    refuses — an unknown action id, a changed call, an attempt out of order, a result for
    an action not in flight (`rule`). Add `"envelope"` to `kinds` for sequence gaps,
    repeats and foreign run ids.

    Args:
        table: the transition table, or a `Reducer`.
        run_id: a fixed run id or a strategy of them.
        max_prefix: the most events in the legal prefix.
        features: which of `FEATURES` the prefix may show.
        kinds: which of `ILLEGAL_KINDS` to produce.
    """
    wanted = frozenset(kinds)
    unknown = sorted(wanted - ILLEGAL_KINDS)
    if unknown or not wanted:
        raise ValueError(f"kinds must be a non-empty subset of {sorted(ILLEGAL_KINDS)}")
    walk = make_walk(table, features, 3)
    runs = as_strategy(run_id, run_ids())

    @st.composite
    def step(draw: st.DrawFn) -> IllegalStep:
        run = dress_run(
            draw, walk, walk_skeleton(draw, walk, runs, 0, max_prefix, None, steer=False)
        )
        options = refused_events(walk.reducer, run.record, run.clock.next(run.record), wanted)
        if not options:
            reject()  # nothing of the wanted kinds is refused here (possible in odd tables)
        by_kind: dict[str, list[tuple[Event, LifecycleError]]] = {}
        for option in options:
            by_kind.setdefault(illegal_kind(option[1]), []).append(option)
        kind = draw(st.sampled_from(sorted(by_kind)))
        event, error = draw(st.sampled_from(by_kind[kind]))
        return IllegalStep(run.events, event, run.record, error, kind)

    return step()


def refused_events(
    reducer: Reducer, record: RunRecord, occurred_at: str, kinds: frozenset[str]
) -> list[tuple[Event, LifecycleError]]:
    """Every candidate event the reducer refuses with an error of one of `kinds`."""
    seen: set[str] = set()
    out: list[tuple[Event, LifecycleError]] = []
    vocabulary = reducer.table.event_types
    for t in event_order(reducer.table):
        cands: list[Candidate] = plausible(record, t, vocabulary) + rule_breaking(record, t)
        for cand in cands:
            event = cand.event(record, occurred_at, events=reducer.table.event_types)
            variants = [event]
            if "envelope" in kinds:
                variants += _envelope_variants(event, record)
            for ev in variants:
                key = ev.model_dump_json()
                if key in seen:
                    continue
                seen.add(key)
                result = try_next(reducer, record, ev)
                if isinstance(result, LifecycleError) and illegal_kind(result) in kinds:
                    out.append((ev, result))
    return out


def _envelope_variants(event: Event, record: RunRecord) -> list[Event]:
    gap = event.model_copy(update={"sequence": record.version + 2})
    other = event.model_copy(update={"run_id": record.run_id + "_other"})
    out = [gap, other]
    if record.version:
        out.append(event.model_copy(update={"sequence": record.version}))
    return out
