"""agentfsm: a strictly validated lifecycle for AI-agent runs.

One transition table declares every state and every legal move; every fact is an event in
an append-only log; a pure reducer folds the log into a run record. Anything the table does
not allow is refused with an error that says what would have been legal.

The top level is small on purpose: the names a first run needs (the table, the reducer, the
event log, the built-in guards, the Runner, the three stores, the steering verbs and the base
errors). Everything else lives in its namespace: `agentfsm.events` (every event model, the
wire format), `agentfsm.guards`, `agentfsm.stores` (PostgreSQL in `agentfsm.stores.postgres`),
`agentfsm.runtime`, `agentfsm.diagrams`, `agentfsm.errors`, `agentfsm.fsm`,
`agentfsm.reducers`, `agentfsm.names` and `agentfsm.testing`.

Names load on first use (PEP 562), so `import agentfsm` costs next to nothing and a program
that only folds logs never imports the runtime, the diagrams or `sqlite3`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Type checkers and IDEs read these; at run time `__getattr__` below resolves the same
    # names from `_LAZY` (a test keeps the two in step).
    from agentfsm.errors import AgentFSMError as AgentFSMError
    from agentfsm.errors import EventFormatError as EventFormatError
    from agentfsm.errors import GuardRejectedError as GuardRejectedError
    from agentfsm.errors import IllegalTransitionError as IllegalTransitionError
    from agentfsm.errors import LifecycleError as LifecycleError
    from agentfsm.errors import StoreError as StoreError
    from agentfsm.events import Event as Event
    from agentfsm.events import LogBuilder as LogBuilder
    from agentfsm.events import dump_event as dump_event
    from agentfsm.events import parse_event as parse_event
    from agentfsm.events import read_events as read_events
    from agentfsm.fsm import DEFAULT_TABLE as DEFAULT_TABLE
    from agentfsm.fsm import Condition as Condition
    from agentfsm.fsm import State as State
    from agentfsm.fsm import Transition as Transition
    from agentfsm.fsm import TransitionTable as TransitionTable
    from agentfsm.guards import Budget as Budget
    from agentfsm.guards import Deadline as Deadline
    from agentfsm.guards import LoopDetector as LoopDetector
    from agentfsm.guards import MaxTurns as MaxTurns
    from agentfsm.reducers import Reducer as Reducer
    from agentfsm.reducers import RunRecord as RunRecord
    from agentfsm.reducers import reduce as reduce
    from agentfsm.reducers import replay as replay
    from agentfsm.runtime import Agent as Agent
    from agentfsm.runtime import AsyncRunner as AsyncRunner
    from agentfsm.runtime import Decision as Decision
    from agentfsm.runtime import Emit as Emit
    from agentfsm.runtime import ProposedCall as ProposedCall
    from agentfsm.runtime import Runner as Runner
    from agentfsm.runtime import RunResult as RunResult
    from agentfsm.runtime import ScriptedModel as ScriptedModel
    from agentfsm.runtime import Tool as Tool
    from agentfsm.runtime import approve as approve
    from agentfsm.runtime import cancel as cancel
    from agentfsm.runtime import pause as pause
    from agentfsm.runtime import reject as reject
    from agentfsm.runtime import resume as resume
    from agentfsm.runtime import submit as submit
    from agentfsm.stores import MemoryEventStore as MemoryEventStore
    from agentfsm.stores import SQLiteEventStore as SQLiteEventStore
    from agentfsm.stores import StoreOptions as StoreOptions

__version__ = "0.1.0"

#: Exported name -> the public namespace it is loaded from. The namespace, not the private
#: module that defines it: those move (the runtime is being rewritten); the namespaces do not.
_LAZY: dict[str, str] = {
    # The declaration: a table of states and transitions.
    "DEFAULT_TABLE": "agentfsm.fsm",
    "Condition": "agentfsm.fsm",
    "State": "agentfsm.fsm",
    "Transition": "agentfsm.fsm",
    "TransitionTable": "agentfsm.fsm",
    # Folding a log into a record.
    "Reducer": "agentfsm.reducers",
    "RunRecord": "agentfsm.reducers",
    "reduce": "agentfsm.reducers",
    "replay": "agentfsm.reducers",
    # The log itself.
    "Event": "agentfsm.events",
    "LogBuilder": "agentfsm.events",
    "dump_event": "agentfsm.events",
    "parse_event": "agentfsm.events",
    "read_events": "agentfsm.events",
    # The built-in limits.
    "Budget": "agentfsm.guards",
    "Deadline": "agentfsm.guards",
    "LoopDetector": "agentfsm.guards",
    "MaxTurns": "agentfsm.guards",
    # Running an agent.
    "Agent": "agentfsm.runtime",
    "AsyncRunner": "agentfsm.runtime",
    "Decision": "agentfsm.runtime",
    "Emit": "agentfsm.runtime",
    "ProposedCall": "agentfsm.runtime",
    "RunResult": "agentfsm.runtime",
    "Runner": "agentfsm.runtime",
    "ScriptedModel": "agentfsm.runtime",
    "Tool": "agentfsm.runtime",
    # Steering a run from anywhere.
    "approve": "agentfsm.runtime",
    "cancel": "agentfsm.runtime",
    "pause": "agentfsm.runtime",
    "reject": "agentfsm.runtime",
    "resume": "agentfsm.runtime",
    "submit": "agentfsm.runtime",
    # Where the log lives.
    "MemoryEventStore": "agentfsm.stores",
    "SQLiteEventStore": "agentfsm.stores",
    "StoreOptions": "agentfsm.stores",
    # The errors worth catching by name; the rest of the tree is in `agentfsm.errors`.
    "AgentFSMError": "agentfsm.errors",
    "EventFormatError": "agentfsm.errors",
    "GuardRejectedError": "agentfsm.errors",
    "IllegalTransitionError": "agentfsm.errors",
    "LifecycleError": "agentfsm.errors",
    "StoreError": "agentfsm.errors",
}

__all__ = [
    "DEFAULT_TABLE",
    "Agent",
    "AgentFSMError",
    "AsyncRunner",
    "Budget",
    "Condition",
    "Deadline",
    "Decision",
    "Emit",
    "Event",
    "EventFormatError",
    "GuardRejectedError",
    "IllegalTransitionError",
    "LifecycleError",
    "LogBuilder",
    "LoopDetector",
    "MaxTurns",
    "MemoryEventStore",
    "ProposedCall",
    "Reducer",
    "RunRecord",
    "RunResult",
    "Runner",
    "SQLiteEventStore",
    "ScriptedModel",
    "State",
    "StoreError",
    "StoreOptions",
    "Tool",
    "Transition",
    "TransitionTable",
    "approve",
    "cancel",
    "dump_event",
    "parse_event",
    "pause",
    "read_events",
    "reduce",
    "reject",
    "replay",
    "resume",
    "submit",
]

# Hidden from type checkers: with a visible `__getattr__`, mypy would accept
# `from agentfsm import anything` (typed as its return type) instead of reporting a name that
# is not exported.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        """Load an exported name from its namespace on first use, then keep it here."""
        try:
            module = _LAZY[name]
        except KeyError:
            raise AttributeError(f"module 'agentfsm' has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), name)
        # Cached as a module global, so `__getattr__` runs once per name.
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The module's own attributes and every exported name, loaded or not."""
    return sorted(set(globals()) | set(__all__))
