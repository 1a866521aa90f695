"""Leases and Workers: N processes share the runs of one store, each run finished once."""

from __future__ import annotations

import logging
import multiprocessing
from pathlib import Path
from typing import Any

import structlog
from structlog.testing import capture_logs

from agentfsm.runtime import (
    ALLOW,
    Agent,
    Decision,
    ProposedCall,
    Runner,
    ScriptedModel,
    Worker,
    submit,
)
from agentfsm.runtime import cancel as cancel_run
from agentfsm.stores import EventStore, MemoryEventStore, SQLiteEventStore
from agentfsm.stores.leases import MemoryLeases, SQLiteLeases
from agentfsm.stores.memory import MemoryLeaseTable

from .helpers import (
    Calls,
    DurableLedger,
    ledger_order_tools,
    order_tools,
    runner_for,
    turn_order_script,
    types,
)

RUNS = 200
WORKERS = 4
ORDER_EVENTS = 14


class Clock:
    """Monotonic seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TestMemoryLeases:
    """The lease rules, on the memory backend."""

    def test_a_run_is_claimed_by_one_worker_until_its_lease_expires(self) -> None:
        """A second claim finds nothing; after the ttl, the run is claimable again."""
        store, clock = MemoryEventStore(), Clock()
        submit(store, "r1")
        leases = MemoryLeases(store, clock=clock)
        assert leases.claim("w1", 10) == "r1"
        assert leases.claim("w2", 10) is None
        clock.now = 10.0
        assert leases.claim("w2", 10) == "r1"
        assert not leases.renew("r1", "w1", 10)
        assert leases.renew("r1", "w2", 10)

    def test_only_runnable_top_level_runs_are_claimed(self) -> None:
        """Finished, waiting and subagent runs are never claimed."""
        store = MemoryEventStore()
        submit(store, "child/of-a-parent")
        submit(store, "done")
        runner_for(store, ScriptedModel([Decision.answer("x")]), []).drive("done")
        assert MemoryLeases(store).claim("w1", 10) is None

    def test_a_released_run_still_runnable_waits_retry_after(self) -> None:
        """`retry_after` keeps a released runnable run from being claimed at once."""
        store, clock = MemoryEventStore(), Clock()
        submit(store, "r1")
        leases = MemoryLeases(store, clock=clock)
        leases.claim("w1", 10)
        leases.release("r1", "w1", retry_after=5)
        assert leases.claim("w2", 10) is None
        clock.now = 5.0
        assert leases.claim("w2", 10) == "r1"


class TestWorker:
    """A Worker drives what it claims."""

    def test_a_worker_drains_the_submitted_runs(self) -> None:
        """Every submitted run is driven to the end, once."""
        store, calls = MemoryEventStore(), Calls()
        for i in range(3):
            submit(store, f"r{i}", "open a ticket")
        runner = Runner(store, Agent("support", turn_order_script(), order_tools(calls)))
        results = Worker(runner, MemoryLeases(store), worker_id="w1").drain()
        assert sorted((r.run_id, r.status) for r in results) == [
            ("r0", "completed"),
            ("r1", "completed"),
            ("r2", "completed"),
        ]
        assert sorted(calls.effects.values()) == [1] * 6

    def test_a_worker_that_lost_its_lease_stops_driving(self) -> None:
        """It stalled past its ttl (its heartbeat could not get through) and another worker
        claimed the run: it stops before its next write, so the model's late decision is
        not appended under the other worker."""
        store, clock = MemoryEventStore(), Clock()
        submit(store, "r1")
        table = MemoryLeaseTable()

        def stall(ctx: Any) -> Decision:
            clock.now += 100  # the model call takes longer than the lease
            assert MemoryLeases(store, table, clock=clock).claim("w2", 30) == "r1"
            return Decision.call_tools(ProposedCall("get_order", {"order_id": "O-1"}))

        runner = Runner(store, Agent("support", ScriptedModel([stall]), order_tools(Calls())))
        leases = MemoryLeases(store, table, clock=clock)
        worker = Worker(runner, leases, worker_id="w1", ttl=30, clock=clock)
        with capture_logs() as logs:
            result = worker.run_once()
        assert result is not None
        assert (result.superseded, result.status) == (True, "running")
        assert types(store, "r1") == ["run.started", "model.started"]
        assert logs[-1] == {
            "event": "worker.lease_lost",
            "log_level": "warning",
            "worker_id": "w1",
            "run_id": "r1",
        }
        assert table.leases["r1"].worker_id == "w2"

    def test_a_cancelled_run_is_settled_by_a_worker(self) -> None:
        """`cancel_requested` is runnable: a worker appends `run.cancelled`."""
        store = MemoryEventStore()
        submit(store, "r1")
        cancel_run(store, "r1")
        runner = runner_for(store, turn_order_script(), [])
        (result,) = Worker(runner, MemoryLeases(store), worker_id="w1").drain()
        assert result.status == "cancelled"


# -- many processes ---------------------------------------------------------------------------


def _store(kind: str, target: str, prefix: str) -> EventStore:
    if kind == "sqlite":
        return SQLiteEventStore(target, synchronous="NORMAL")
    from agentfsm.stores.postgres import PostgresEventStore

    return PostgresEventStore(target, table_prefix=prefix)


def _leases(kind: str, target: str, prefix: str) -> Any:
    if kind == "sqlite":
        return SQLiteLeases(target)
    from agentfsm.stores.postgres_leases import PostgresLeases

    return PostgresLeases(target, table_prefix=prefix)


def _worker_process(kind: str, target: str, prefix: str, ledger: str, worker_id: str) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    store, leases = _store(kind, target, prefix), _leases(kind, target, prefix)
    runner = Runner(
        store, Agent("support", turn_order_script(), ledger_order_tools(DurableLedger(ledger)))
    )
    Worker(runner, leases, worker_id=worker_id, ttl=120).drain()
    leases.close()
    store.close()


def _drain_with_processes(kind: str, target: str, prefix: str, tmp_path: Path) -> None:
    with _store(kind, target, prefix) as store:
        _submit_and_drain(kind, target, prefix, tmp_path, store)


def _submit_and_drain(
    kind: str, target: str, prefix: str, tmp_path: Path, store: EventStore
) -> None:
    for i in range(RUNS):
        submit(store, f"run-{i:03d}", "open a ticket")
    ledger = str(tmp_path / "ledger.db")
    DurableLedger(ledger)
    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(target=_worker_process, args=(kind, target, prefix, ledger, f"w{i}"))
        for i in range(WORKERS)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=300)
        assert proc.exitcode == 0
    infos = store.runs()
    assert len(infos) == RUNS
    for info in infos:
        assert (info.status, info.version) == ("completed", ORDER_EVENTS), info
        report = store.verify(info.run_id)
        assert report.ok, str(report)
        kinds = [e.type for e in store.events(info.run_id)]
        assert kinds.count("run.completed") == 1
        assert kinds.count("model.started") == 3
    rows = DurableLedger(ledger).rows()
    assert len(rows) == RUNS
    assert {(effects, calls) for _, effects, calls in rows.values()} == {(1, 1)}


def test_four_sqlite_worker_processes_drain_200_runs(tmp_path: Path) -> None:
    """Every run completes exactly once, its log verifies, each ticket is opened once."""
    _drain_with_processes("sqlite", str(tmp_path / "runs.db"), "agentfsm_", tmp_path)


def test_four_postgres_worker_processes_drain_200_runs(
    tmp_path: Path, postgres_dsn: str, pg_prefix: str
) -> None:
    """The same on PostgreSQL, with `FOR UPDATE SKIP LOCKED` leases."""
    from agentfsm.stores.postgres import PostgresEventStore

    PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True).close()
    _drain_with_processes("postgres", postgres_dsn, pg_prefix, tmp_path)


def test_serve_logs_a_run_that_raises_and_goes_on() -> None:
    """A policy bug in one run is logged; the worker serves the next run."""
    store = MemoryEventStore()
    submit(store, "r1")
    submit(store, "r2")

    def policy(action: Any, record: Any) -> Any:
        if record.run_id == "r1":
            raise RuntimeError("policy bug")
        return ALLOW

    model = ScriptedModel(
        [
            Decision.call_tools(ProposedCall("get_order", {"order_id": "O-1"})),
            Decision.answer("ok"),
        ],
        by_turn=True,
    )
    runner = Runner(store, Agent("support", model, order_tools(Calls()), policy))
    served: list[int] = []
    worker = Worker(runner, MemoryLeases(store), worker_id="w1", sleep=lambda s: served.append(1))
    with capture_logs() as logs:
        worker.serve(stop=lambda: len(served) >= 2)
    errors = [e for e in logs if e["event"] == "worker.run_error"]
    assert errors == [
        {
            "event": "worker.run_error",
            "log_level": "error",
            "worker_id": "w1",
            "error": "RuntimeError('policy bug')",
        }
    ]
    assert (store.load("r1").status, store.load("r2").status) == ("running", "completed")
