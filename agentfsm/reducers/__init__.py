"""The run record, the pure reducer, replay, snapshots and audits."""

from agentfsm.record import Action, RunRecord, UsageTotals, call_digest
from agentfsm.reducers.audit import AuditFinding, Auditor, AuditProblem, AuditReport, audit
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
    "RunRecord",
    "Snapshot",
    "UsageTotals",
    "audit",
    "call_digest",
    "reduce",
    "replay",
]
