"""AsyncWorker: one event loop drives several leased runs at once, each run finished once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from agentfsm.runtime import (
    Agent,
    AsyncRunner,
    AsyncWorker,
    Decision,
    ProposedCall,
    ScriptedModel,
    Tool,
    ToolContext,
    Worker,
    submit,
)
from agentfsm.runtime import Runner as SyncRunner
from agentfsm.stores import MemoryEventStore, SQLiteEventStore, ThreadedAsyncEventStore
from agentfsm.stores.leases import MemoryLeases, SQLiteLeases
from agentfsm.stores.memory import MemoryLeaseTable

from .helpers import Calls, order_tools, turn_order_script, types, validate


def _async_runner(store: Any, tools: list[Tool], model: Any = None) -> AsyncRunner:
    model = model if model is not None else turn_order_script()
    return AsyncRunner(ThreadedAsyncEventStore(store), Agent("support", model, tools))


def test_an_async_worker_drains_runs_on_sqlite_each_once(tmp_path: Path) -> None:
    """30 runs, 8 at a time, on the embedded store: every run completes, every effect once."""
    store, calls = SQLiteEventStore(tmp_path / "runs.db"), Calls()
    run_ids = [f"r{i:02}" for i in range(30)]
    for run_id in run_ids:
        submit(store, run_id, "open a ticket")
    worker = AsyncWorker(
        _async_runner(store, order_tools(calls)),
        SQLiteLeases(tmp_path / "runs.db"),
        worker_id="w1",
        concurrency=8,
    )
    with capture_logs():
        results = asyncio.run(worker.drain())
    assert sorted((r.run_id, r.status) for r in results) == [(r, "completed") for r in run_ids]
    assert sorted(calls.effects.values()) == [1] * 60  # get_order + create_ticket per run
    assert validate(store, run_ids).ok


def test_runs_are_driven_concurrently_up_to_the_limit() -> None:
    """Three runs whose tool waits for all three to be in it: only concurrent driving ends."""
    store = MemoryEventStore()
    waiting: list[str] = []
    all_in = asyncio.Event()
    peak = 0

    async def gather(ctx: ToolContext) -> str:
        nonlocal peak
        waiting.append(ctx.run_id)
        peak = max(peak, len(waiting))
        if len(waiting) == 3:
            all_in.set()
        await asyncio.wait_for(all_in.wait(), 5)  # sequential driving fails here, not hangs
        return "together"

    model = ScriptedModel(
        [Decision.call_tools(ProposedCall("gather")), Decision.answer("done")], by_turn=True
    )
    for i in range(3):
        submit(store, f"r{i}")
    worker = AsyncWorker(
        _async_runner(store, [Tool("gather", gather, side_effects=False)], model),
        MemoryLeases(store),
        worker_id="w1",
        concurrency=3,
    )
    with capture_logs():
        results = asyncio.run(worker.drain())
    assert sorted(r.status for r in results) == ["completed"] * 3
    assert peak == 3


def test_max_runs_bounds_what_one_drain_claims() -> None:
    """`max_runs=2` of five submitted: two are driven, three stay runnable for others."""
    store, calls = MemoryEventStore(), Calls()
    for i in range(5):
        submit(store, f"r{i}", "open a ticket")
    worker = AsyncWorker(
        _async_runner(store, order_tools(calls)), MemoryLeases(store), worker_id="w1", concurrency=4
    )
    with capture_logs():
        results = asyncio.run(worker.drain(max_runs=2))
    assert sorted(r.run_id for r in results) == ["r0", "r1"]
    assert [store.load(f"r{i}").status for i in range(2, 5)] == ["running"] * 3


def test_async_and_sync_workers_share_one_store(tmp_path: Path) -> None:
    """An AsyncWorker and a sync Worker on the same leases: each run finished by exactly one."""
    db = tmp_path / "runs.db"
    store, calls = SQLiteEventStore(db), Calls()
    run_ids = [f"r{i:02}" for i in range(12)]
    for run_id in run_ids:
        submit(store, run_id, "open a ticket")
    # Each worker opens its own handles, as separate processes would.
    aworker = AsyncWorker(
        _async_runner(SQLiteEventStore(db), order_tools(calls)),
        SQLiteLeases(db),
        worker_id="a",
        concurrency=4,
    )
    sync_store = SQLiteEventStore(db)
    sync_runner = SyncRunner(sync_store, Agent("support", turn_order_script(), order_tools(calls)))
    sworker = Worker(sync_runner, SQLiteLeases(db), worker_id="s")

    async def both() -> list[Any]:
        sync_side = asyncio.to_thread(sworker.drain)
        async_side, sync_results = await asyncio.gather(aworker.drain(), sync_side)
        return [*async_side, *sync_results]

    with capture_logs():
        results = asyncio.run(both())
    assert sorted(r.run_id for r in results) == run_ids
    assert sorted(calls.effects.values()) == [1] * 24
    assert validate(store, run_ids).ok


def test_an_async_worker_that_lost_its_lease_stops_driving() -> None:
    """It stalled past its ttl and another worker claimed the run: it stops, superseded,
    before its next write (the model's late decision is not appended)."""
    store = MemoryEventStore()
    submit(store, "r1")
    table = MemoryLeaseTable()
    now = [0.0]

    def stall(ctx: Any) -> Decision:
        now[0] += 100  # the model call takes longer than the lease
        assert MemoryLeases(store, table, clock=lambda: now[0]).claim("w2", 30) == "r1"
        return Decision.call_tools(ProposedCall("get_order", {"order_id": "O-1"}))

    runner = _async_runner(store, order_tools(Calls()), ScriptedModel([stall]))
    leases = MemoryLeases(store, table, clock=lambda: now[0])
    worker = AsyncWorker(runner, leases, worker_id="w1", ttl=30, clock=lambda: now[0])
    with capture_logs() as logs:
        result = asyncio.run(worker.run_once())
    assert result is not None
    assert (result.superseded, result.status) == (True, "running")
    assert types(store, "r1") == ["run.started", "model.started"]
    assert {"worker_id": "w1", "run_id": "r1", "event": "worker.lease_lost"}.items() <= next(
        entry for entry in logs if entry["event"] == "worker.lease_lost"
    ).items()


def test_a_concurrency_below_one_is_refused() -> None:
    """`concurrency=0` could never drive a run: said when the worker is built."""
    store = MemoryEventStore()
    with pytest.raises(ValueError, match=r"^concurrency must be at least 1, got 0$"):
        AsyncWorker(_async_runner(store, []), MemoryLeases(store), worker_id="w", concurrency=0)
