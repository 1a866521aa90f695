"""The run record, the pure reducer, replay and snapshots."""

from agentfsm.reducers.record import Action, RunRecord, UsageTotals, call_digest
from agentfsm.reducers.reduce import DEFAULT_REDUCER, Reducer, reduce, replay
from agentfsm.reducers.snapshot import Snapshot

__all__ = [
    "DEFAULT_REDUCER",
    "Action",
    "Reducer",
    "RunRecord",
    "Snapshot",
    "UsageTotals",
    "call_digest",
    "reduce",
    "replay",
]
