"""How a store verifies a run: every row, the runs row and the snapshot, checked in order.

Unlike a load, which stops trusting at the first bad row by raising, a verify names the
first problem in a `VerifyReport`, so an operator reads where a log went wrong.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from agentfsm.errors import LifecycleError, TableMismatchError
from agentfsm.events._canonical import canonical_text
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.reducers.snapshot import Snapshot
from agentfsm.stores._integrity import PLAIN, Integrity
from agentfsm.stores._load import BAD_LINK, TABLE_EVENTS, check_row, distrust
from agentfsm.stores.rows import GENESIS_HASH, StoredEvent, StoredSnapshot, VerifyReport
from agentfsm.stores.runs import RunInfo

__all__ = ["VERIFY_TRIES", "verify_rows"]

#: How often `verify` re-reads a run that was appended to while it was being checked.
VERIFY_TRIES = 5


def verify_rows(
    reducer: Reducer,
    run_id: str,
    rows: Iterable[StoredEvent],
    info: RunInfo | None,
    *,
    snapshot: StoredSnapshot | None = None,
    integrity: Integrity = PLAIN,
) -> VerifyReport:
    """Check every stored row of a run, then the runs row and the snapshot against them.

    The log must be contiguous from 1, each line an event of this run, the hash chain
    intact, the lifecycle legal; the runs row (`info`) must say where the log ends, with
    the folded status and time; and the snapshot, if any, must be sealed and hold the
    record the events it covers fold into. Stops at the first problem.
    """
    record = reducer.initial(run_id)
    types = reducer.table.event_types
    previous = GENESIS_HASH
    checked = 0
    covered: RunRecord | None = None
    covered_hash = ""

    def broken(sequence: int | None, problem: str) -> VerifyReport:
        return VerifyReport(run_id, False, checked, previous, sequence, problem)

    for row in rows:
        expected = checked + 1
        if row.sequence != expected:
            return broken(expected, f"the log has no event at sequence {expected}")
        try:
            # Linked inside: a line may spell a lone surrogate, which no UTF-8 text holds.
            link = integrity.link(previous, canonical_text(row.data))
        except (ValueError, TypeError, RecursionError) as exc:
            return broken(row.sequence, f"the stored line is not JSON ({exc})")
        if link != row.hash:
            return broken(row.sequence, BAD_LINK)
        event = check_row(run_id, row, types)
        if isinstance(event, str):
            return broken(row.sequence, event)
        try:
            record = reducer.reduce(record, event)
        except LifecycleError as exc:
            return broken(row.sequence, f"the event breaks the run's lifecycle: {exc}")
        previous = row.hash
        checked += 1
        if snapshot is not None and checked == snapshot.sequence:
            covered, covered_hash = record, row.hash
        if row.type in TABLE_EVENTS:
            types = reducer.event_types_for(record)
    try:
        reducer.check_run_table(
            record
        )  # a run under another table is not this store's to vouch for
    except TableMismatchError as exc:
        return broken(exc.sequence, f"the event breaks the run's lifecycle: {exc}")
    if info is not None and info.version != checked:
        return broken(
            min(info.version, checked) + 1,
            f"store inconsistent: the runs table says version {info.version} but the log "
            f"ends at {checked}",
        )
    if info is not None and (info.status, info.updated_at) != (record.status, record.updated_at):
        return broken(
            None,
            f"store inconsistent: the runs table says '{info.status}' at {info.updated_at}, "
            f"but the log folds to '{record.status}' at {record.updated_at}",
        )
    if snapshot is not None:
        problem = _snapshot_problem(run_id, snapshot, covered, covered_hash, integrity)
        if problem is not None:
            return broken(snapshot.sequence, problem)
    return VerifyReport(run_id, True, checked, previous)


def _snapshot_problem(
    run_id: str,
    stored: StoredSnapshot,
    covered: RunRecord | None,
    covered_hash: str,
    integrity: Integrity,
) -> str | None:
    """What is wrong with the snapshot, checked against the fold of the events it covers."""
    if covered is None:
        return f"the snapshot covers sequence {stored.sequence}, which the log does not hold"
    row = StoredEvent(stored.sequence, "", "", covered_hash)
    reason = distrust(run_id, stored, row, integrity)
    # One written before digests existed is never trusted by a load, so it is no risk;
    # its content is still checked below.
    if reason is not None and stored.digest:
        return f"the snapshot is not to be trusted: {reason}"
    try:
        snapshot = Snapshot.loads(stored.data)
    except (ValueError, TypeError, KeyError) as exc:
        return f"the snapshot does not read back ({exc})"
    if snapshot.run_id != run_id or snapshot.sequence != stored.sequence:
        return f"the snapshot is of run '{snapshot.run_id}', sequence {snapshot.sequence}"
    if snapshot.record != covered:
        differ = [
            f.name
            for f in attrs.fields(RunRecord)
            if getattr(snapshot.record, f.name) != getattr(covered, f.name)
        ]
        return (
            "the snapshot does not hold what the events it covers fold into (it differs in "
            f"{', '.join(differ)}): it was changed, or taken under another table"
        )
    return None
