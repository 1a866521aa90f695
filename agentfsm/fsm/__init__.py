"""The declaration of a lifecycle: states, transitions, the table, the default table, and
the static checks of a table. Nothing here runs a run; guards live in `agentfsm.guards`."""

from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import Condition, State, Transition, TransitionTable
from agentfsm.fsm.verify import TableReport, transition_matrix, verify_table

__all__ = [
    "DEFAULT_TABLE",
    "Condition",
    "State",
    "TableReport",
    "Transition",
    "TransitionTable",
    "transition_matrix",
    "verify_table",
]
