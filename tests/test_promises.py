"""A table's promises to stop a run hold along every edge's shortest log."""

from __future__ import annotations

import pytest

from agentfsm.fsm import DEFAULT_TABLE, Condition, Transition
from agentfsm.testing import assert_table_keeps_its_promises, edge_covering_paths, stop_problems
from examples.lifecycles.ticket import TICKET_TABLE


@pytest.mark.parametrize("table", [DEFAULT_TABLE, TICKET_TABLE], ids=lambda t: t.name)
def test_shipped_tables_keep_their_promises(table: object) -> None:
    """From every state any edge's log reaches, each declared stop is accepted."""
    assert_table_keeps_its_promises(table, edge_covering_paths(table))  # type: ignore[arg-type]


def test_a_stop_a_condition_takes_away_is_named() -> None:
    """`paused` declares `run.terminated` but only when a condition holds that never does:
    the broken promise is named with the state, the stop and the reason."""
    never = Condition("the moon is blue", lambda record, event: False)
    table = DEFAULT_TABLE.derive(
        name="stubborn",
        remove=[("paused", "run.terminated", "terminated")],
        add=[Transition("paused", "run.terminated", "terminated", never)],
    )
    problems = [p for log in edge_covering_paths(table) for p in stop_problems(table, log)]
    assert problems
    assert problems[0].startswith(
        "'paused' declares 'run.terminated', but after sequence 2 ('run.paused') it is refused: "
    )
    with pytest.raises(AssertionError) as info:
        assert_table_keeps_its_promises(table, edge_covering_paths(table))
    assert str(info.value).splitlines()[0] == (
        "table 'stubborn' does not keep 1 promise(s) to stop a run:"
    )
