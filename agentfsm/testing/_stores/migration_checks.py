"""The stores' contract for a run migrated to a new version of its table (`run.migrated`).

Mixed into `StoreConformance` and `AsyncStoreConformance`: the store of the old version
records the migration and then refuses the run; the new version's store loads it (from
snapshots taken before and after), appends what only the new version allows, verifies it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from agentfsm.errors import TableMismatchError
from agentfsm.events.builder import LogBuilder
from agentfsm.events.codec import make_event
from agentfsm.events.models import Event
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import Transition
from agentfsm.reducers.reduce import Reducer
from agentfsm.stores.base import AsyncEventStore, EventStore, StoreOptions

__all__ = ["AsyncMigrationChecks", "MigrationChecks", "migration_events"]

MakeAsyncStore = Callable[[StoreOptions], Awaitable[AsyncEventStore]]


#: Two versions of the default lifecycle for the migration checks: the second lets a run
#: that waits for approval be paused.
MIGRATION_V1 = DEFAULT_TABLE
MIGRATION_V2 = DEFAULT_TABLE.derive(add=[Transition("waiting_approval", "run.paused", "paused")])


def migration_events(run_id: str) -> tuple[list[Event], Event, Event]:
    """A run of `MIGRATION_V1` waiting for approval (version 4), its `run.migrated` to
    `MIGRATION_V2` (5), and a `run.paused` only the second version allows there (6)."""
    log = LogBuilder(run_id)
    log.add("run.started", table=MIGRATION_V1.ref.model_dump())
    log.add("model.started")
    call = {"action_id": "a1", "tool": "refund", "arguments": {"amount": 5}}
    log.add("model.completed", decision="tool_calls", tool_calls=[call])
    log.add("approval.requested", **call)
    log.add(
        "run.migrated",
        from_table=MIGRATION_V1.ref.model_dump(),
        to_table=MIGRATION_V2.ref.model_dump(),
        by="ann",
        reason="the approver is away; v2 can pause the run",
    )
    log.add("run.paused", reason="the approver is away")
    *waiting, migrated, paused = log.events
    return waiting, migrated, paused


class MigrationChecks:
    """A migrated run, through a store of each version (sync stores)."""

    def test_a_migrated_run_belongs_to_the_new_version(
        self, open_store: Callable[..., EventStore]
    ) -> None:
        """Migrated through a store of the old version, a run is no longer that store's to
        load or verify; a store of the new version loads it (from snapshots taken before
        and after the migration), appends what only the new version allows, and verifies
        it. An ordinary event for a run still under the old version is refused there."""
        old_reducer = Reducer(MIGRATION_V1, tables=[MIGRATION_V2])
        new_reducer = Reducer(MIGRATION_V2, tables=[MIGRATION_V1])
        waiting, migrated, paused = migration_events("r1")
        old = open_store(snapshot_every=2, reducer=old_reducer)
        old.append("r1", waiting, 0)
        after = old.append("r1", [migrated], 4)
        assert (after.status, after.table, after.migrated_from, after.migrated_at) == (
            "waiting_approval", MIGRATION_V2.ref, MIGRATION_V1.ref, 5,
        )  # fmt: skip
        with pytest.raises(TableMismatchError) as refused:
            old.load("r1")
        assert (refused.value.started_under, refused.value.sequence) == (
            f"'{MIGRATION_V2.name}' ({MIGRATION_V2.digest})", 5,
        )  # fmt: skip
        new = open_store(snapshot_every=2, reducer=new_reducer)
        assert new.load("r1") == after
        assert new.append("r1", [paused], 5).status == "paused"
        full = new_reducer.replay([*waiting, migrated, paused])
        fresh = open_store(snapshot_every=2, reducer=new_reducer)
        assert fresh.load("r1").dumps() == full.dumps()
        assert fresh.verify("r1").ok
        report = old.verify("r1")
        assert (report.ok, report.sequence) == (False, 6)
        still_old, _, _ = migration_events("r2")
        old.append("r2", still_old, 0)
        cancel = make_event(
            "run.cancel_requested", run_id="r2", sequence=5, occurred_at=paused.occurred_at
        )
        with pytest.raises(TableMismatchError) as mismatch:
            new.append("r2", [cancel], 4)  # legal under the old version, but not this store's
        assert mismatch.value.started_under == f"'{MIGRATION_V1.name}' ({MIGRATION_V1.digest})"
        assert new.run_info("r2").version == 4


class AsyncMigrationChecks:
    """A migrated run, through a store of each version (async stores)."""

    def test_a_migrated_run_belongs_to_the_new_version(self, make_store: MakeAsyncStore) -> None:
        """As in the sync contract: the old version's store records the migration and then
        refuses the run; the new version's store loads it and appends to it."""
        old_options = StoreOptions(
            snapshot_every=2, reducer=Reducer(MIGRATION_V1, tables=[MIGRATION_V2])
        )
        new_reducer = Reducer(MIGRATION_V2, tables=[MIGRATION_V1])
        waiting, migrated, paused = migration_events("r1")

        async def scenario() -> None:
            async with await make_store(old_options) as old:
                await old.append("r1", waiting, 0)
                after = await old.append("r1", [migrated], 4)
                with pytest.raises(TableMismatchError):
                    await old.load("r1")
            async with await make_store(StoreOptions(snapshot_every=2, reducer=new_reducer)) as new:
                assert await new.load("r1") == after
                assert (await new.append("r1", [paused], 5)).status == "paused"
                full = new_reducer.replay([*waiting, migrated, paused])
                assert (await new.load("r1")).dumps() == full.dumps()
                assert (await new.verify("r1")).ok

        asyncio.run(scenario())
