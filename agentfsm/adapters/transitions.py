"""Compile a table into a `transitions.Machine`, for teams whose code already uses one.

The table stays the source of truth; the machine is generated from it and never edited by
hand. It is built the strict way: `auto_transitions=False` (no `to_<state>` shortcuts that
bypass the table), invalid triggers raise `MachineError`, terminal states are `final`, and
each edge's condition becomes a `conditions` callable. Triggers are the event type names
(`"tool.completed"`); fire them with `model.trigger(event_type, record, event)` — the record
before the event and the event are what the conditions read, exactly as in our reducer.

What the machine does not know: the action ledger (unknown or reused action ids, changed
approved calls, sequences) and the limit guards. Those live in `agentfsm.Reducer`; use the
machine for the state alone, or keep folding records with the reducer beside it.
"""

from __future__ import annotations

from typing import Any

from transitions import Machine, State

from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import Condition, TransitionTable

__all__ = ["to_machine"]


def _condition(condition: Condition) -> Any:
    # transitions calls conditions with the trigger's arguments; ours take (record, event).
    # It also compares a condition's result with `== True`, where our `step` goes by
    # truthiness: a predicate returning a non-empty mapping would pass ours and fail theirs
    # (found by the differential test), so the result is made a bool here.
    def check(record: Any = None, event: Any = None, *_: Any, **__: Any) -> bool:
        return bool(condition.predicate(record, event))

    check.__name__ = condition.name.replace(" ", "_")
    return check


def to_machine(
    table: TransitionTable = DEFAULT_TABLE,
    model: Any = "self",
    *,
    initial: str | None = None,
    **options: Any,
) -> Machine:
    """A `transitions.Machine` with exactly the table's states and edges.

    Args:
        table: the table to compile (the default agent-run table unless given).
        model: the object the machine drives (its `state` attribute and `trigger` method);
            by default the machine itself. An existing model keeps its own callbacks.
        initial: the state to start in (the table's initial state by default).
        options: passed on to `Machine` (e.g. `after_state_change`), except the three the
            adapter owns: `auto_transitions`, `ignore_invalid_triggers`, `states`.

    Raises:
        ValueError: `initial` is not a state of the table, or an owned option is given.
    """
    owned = {"auto_transitions", "ignore_invalid_triggers", "states", "transitions"} & set(options)
    if owned:
        raise ValueError(f"to_machine sets {', '.join(sorted(owned))} itself: the table decides")
    start = initial or table.initial
    if start not in table.state_names:
        raise ValueError(f"initial state '{start}' is not declared by table '{table.name}'")
    states = [State(s.name, final=s.terminal) for s in table.states]
    edges = [
        {
            "trigger": t.event,
            "source": t.source,
            "dest": t.target,
            "conditions": [_condition(t.condition)] if t.condition else [],
        }
        for t in table.transitions
    ]
    return Machine(
        model=model,
        states=states,
        transitions=edges,
        initial=start,
        auto_transitions=False,
        ignore_invalid_triggers=False,
        **options,
    )
