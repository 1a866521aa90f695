"""The agentfsm pytest plugin: fixtures for the table, and a log assertion that explains itself.

Registered through the `pytest11` entry point, so installing agentfsm makes the fixtures
available; `assert_legal_log` can also be imported and called directly.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from agentfsm.events.models import Event
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.errors import LifecycleError
from agentfsm.fsm.table import TransitionTable
from agentfsm.reducers.record import RunRecord
from agentfsm.reducers.reduce import Reducer

__all__ = ["agent_run_reducer", "agent_run_table", "assert_legal_log"]


def assert_legal_log(events: Iterable[Event], table: TransitionTable = DEFAULT_TABLE) -> RunRecord:
    """Fold `events` under `table`; on a refusal, fail with the offending event and the path.

    Returns:
        The folded record, for further assertions.
    """
    reducer = Reducer(table)
    record: RunRecord | None = None
    path: list[str] = []
    for event in events:
        before = record or reducer.initial(event.run_id)
        try:
            record = reducer.reduce(before, event)
        except LifecycleError as err:
            shown = "\n".join(path[-12:]) or "  (no event applied)"
            more = f"  ... {len(path) - 12} earlier events\n" if len(path) > 12 else ""
            pytest.fail(
                f"illegal log: event {event.sequence} '{event.type}' was refused:\n  {err}\n"
                f"path so far:\n{more}{shown}",
                pytrace=False,
            )
        path.append(f"  {event.sequence:>4}  {event.type:<22} {before.status} -> {record.status}")
    if record is None:
        pytest.fail("illegal log: it has no events", pytrace=False)
    return record


@pytest.fixture
def agent_run_table() -> TransitionTable:
    """The default agent-run table (override this fixture to test your own)."""
    return DEFAULT_TABLE


@pytest.fixture
def agent_run_reducer(agent_run_table: TransitionTable) -> Reducer:
    """A reducer for `agent_run_table`."""
    return Reducer(agent_run_table)
