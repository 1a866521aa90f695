"""The agentfsm pytest plugin: fixtures for testing code against a transition table.

pytest loads it through the `pytest11` entry point once agentfsm is installed. It needs
neither Hypothesis nor anything else beyond agentfsm and pytest.

Fixtures:
    agent_run_table: the table under test (the default table; override the fixture in your
        `conftest.py` to test yours).
    agent_run_reducer: a `Reducer` for `agent_run_table`.
    assert_legal_log: `assert_legal_log(events, table=None)`, bound to `agent_run_reducer`;
        returns the folded record or fails showing the offending event and the path so far.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import pytest

from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable
from agentfsm.reducers.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.testing import assertions

__all__ = ["LegalLogAssertion", "agent_run_reducer", "agent_run_table", "assert_legal_log"]


class LegalLogAssertion(Protocol):
    """The type of the `assert_legal_log` fixture."""

    def __call__(
        self,
        events: Iterable[assertions.LogItem],
        table: TransitionTable | Reducer | None = None,
    ) -> RunRecord: ...


@pytest.fixture
def agent_run_table() -> TransitionTable:
    """The transition table under test: the default one unless a conftest overrides this."""
    return DEFAULT_TABLE


@pytest.fixture
def agent_run_reducer(agent_run_table: TransitionTable) -> Reducer:
    """A reducer for `agent_run_table`."""
    return Reducer(agent_run_table)


@pytest.fixture
def assert_legal_log(agent_run_reducer: Reducer) -> LegalLogAssertion:
    """Assert a log is legal under `agent_run_table` (or the `table` given); return its record."""

    def check(
        events: Iterable[assertions.LogItem], table: TransitionTable | Reducer | None = None
    ) -> RunRecord:
        __tracebackhide__ = True  # pytest shows the caller's line, not this helper's
        return assertions.assert_legal_log(events, agent_run_reducer if table is None else table)

    return check
