"""The run record, the pure reducer, replay and snapshots."""

from agentfsm.reducers.record import Action, RunRecord, UsageTotals
from agentfsm.reducers.reduce import DEFAULT_REDUCER, Reducer, call_digest, reduce, replay
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
