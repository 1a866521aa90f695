"""The agentfsm pytest plugin: fixtures for the table under test.

Registered through the `pytest11` entry point, so installing agentfsm makes the fixtures
available to every pytest session. It needs neither Hypothesis nor anything beyond agentfsm
and pytest, so it loads for projects that installed agentfsm without the `testing` extra.

Fixtures:
    agent_run_table: the table under test (the default table; override this fixture in your
        `conftest.py` to test yours).
    agent_run_reducer: a `Reducer` for `agent_run_table`.

The assertions are not here but in `agentfsm.testing` (`assert_legal_log(events, table)`
folds a log and fails with the offending event and the path so far), one import for any test
runner.
"""

from __future__ import annotations

import pytest

from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable
from agentfsm.reducers.reduce import Reducer

__all__ = ["agent_run_reducer", "agent_run_table"]


@pytest.fixture
def agent_run_table() -> TransitionTable:
    """The transition table under test: the default one unless a conftest overrides this."""
    return DEFAULT_TABLE


@pytest.fixture
def agent_run_reducer(agent_run_table: TransitionTable) -> Reducer:
    """A reducer for `agent_run_table`."""
    return Reducer(agent_run_table)
