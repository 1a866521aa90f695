"""The run record, the pure reducer, replay, snapshots, audits, and two runs compared."""

from agentfsm.record import Action, RunRecord, UsageTotals, call_digest
from agentfsm.reducers.audit import AuditFinding, Auditor, AuditProblem, AuditReport, audit
from agentfsm.reducers.diff import RunDiff, RunSide, diff_runs
from agentfsm.reducers.reduce import DEFAULT_REDUCER, Reducer, reduce, replay
from agentfsm.reducers.snapshot import Snapshot

__all__ = [
    "DEFAULT_REDUCER",
    "Action",
    "AuditFinding",
    "AuditProblem",
    "AuditReport",
    "Auditor",
    "Reducer",
    "RunDiff",
    "RunRecord",
    "RunSide",
    "Snapshot",
    "UsageTotals",
    "audit",
    "call_digest",
    "diff_runs",
    "reduce",
    "replay",
]
