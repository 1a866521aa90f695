"""The declaration of a lifecycle: states, transitions, the table, the default table, and
the static checks of a table. Nothing here runs a run; guards live in `agentfsm.guards`."""

from agentfsm.fsm.check import TableReport, check_table, transition_matrix
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import Condition, State, Transition, TransitionTable

__all__ = [
    "DEFAULT_TABLE",
    "Condition",
    "State",
    "TableReport",
    "Transition",
    "TransitionTable",
    "check_table",
    "transition_matrix",
]
