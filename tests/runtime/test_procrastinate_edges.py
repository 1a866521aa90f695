"""The Procrastinate engine at its edges: an attempt closed between a call's durable
`tool.started` and its tool (a partition that held back the reply to that write), and a
deadline only the Runner's guards know; and a recovery pass cut off inside its transaction
(its queue's lock must not stay held).

The cut is made exactly there: the store's `after_append` hook, in the transaction that
writes `tool.started`, closes the driving job on another connection and queues a fresh one,
as the recovery pass does for a worker that looked dead. The closed attempt must not call
its tool once the append returns; the fresh attempt finds the call in flight, not safe to
repeat, and records its outcome as unknown.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import attrs
import psycopg

from agentfsm.record import RunRecord
from agentfsm.runtime import submit
from agentfsm.runtime.procrastinate import ProcrastinateEngine, Waker, recovery_lock_key
from agentfsm.stores.postgres import PostgresEventStore
from tests.runtime import _pq_app
from tests.runtime.helpers import DurableLedger


class _ClosedWhileStarting:
    """An `after_append` that, the first time a batch writes `tool.started`, closes the job
    driving the run and queues a fresh copy, on another connection (the recovery pass)."""

    sets_timers = True

    def __init__(self, inner: Any, engine: CutEngine) -> None:
        self.inner = inner
        self.engine = engine

    def wants(self, record: RunRecord, types: tuple[str, ...]) -> bool:
        return "tool.started" in types or bool(self.inner.wants(record, types))

    def __call__(self, conn: Any, record: RunRecord, types: tuple[str, ...]) -> None:
        self.inner(conn, record, types)
        if "tool.started" not in types or self.engine.cut:
            return
        self.engine.cut = True
        with psycopg.connect(self.engine.conninfo, autocommit=True) as other, other.transaction():
            row = other.execute(
                "SELECT id, task_name, args, lock, queueing_lock FROM procrastinate_jobs "
                "WHERE status = 'doing' AND lock = %s",
                (record.run_id,),
            ).fetchone()
            assert row is not None
            other.execute("SELECT procrastinate_finish_job_v1(%s, 'failed', false)", (row[0],))
            waker: Waker = self.engine.waker
            waker._defer(
                other, row[1], row[2], lock=row[3], queueing_lock=row[4], route=waker.default
            )


class CutEngine(ProcrastinateEngine):
    cut = False

    def store(self) -> PostgresEventStore:
        store = super().store()
        store.after_append = _ClosedWhileStarting(store.after_append, self)
        return store


def test_an_attempt_closed_after_its_tool_started_does_not_call_the_tool(
    pq_dsn: str, tmp_path: Path
) -> None:
    """`send_email` (side effects, not idempotent): its `tool.started` commits, the attempt
    is closed meanwhile; the email is never sent, and the run records it as unknown."""
    ledger = str(tmp_path / "ledger.db")
    # Fenced between steps only once an hour: only the check before the call can stop it.
    settings = attrs.evolve(_pq_app.settings("agentfsm"), fence_every=3600.0)
    engine = CutEngine(pq_dsn, _pq_app.runner_factory(ledger), settings=settings)
    engine.migrate()
    with engine.store() as store:
        submit(store, "r1", "mail")
    asyncio.run(engine.aserve(wait=False, install_signal_handlers=False))
    assert engine.cut
    assert DurableLedger(ledger).rows() == {}
    with engine.store() as store:
        types = [e.type for e in store.events("r1")]
        assert store.load("r1").status == "completed"
    assert types.count("tool.started") == 1
    assert "tool.outcome_unknown" in types
    assert "tool.succeeded" not in types


def test_a_deadline_of_the_runners_guards_fires_with_no_other_event(
    pq_dsn: str, tmp_path: Path
) -> None:
    """A `Deadline` guard given to the Runner, not in the log: the advance that leaves the
    run waiting sets a timer for it, which terminates the run when due."""
    import time
    from datetime import UTC, datetime, timedelta

    from agentfsm.guards.limits import Deadline
    from agentfsm.runtime import Agent, Runner, RunnerConfig

    ledger = DurableLedger(str(tmp_path / "ledger.db"))
    at = datetime.now(UTC) + timedelta(seconds=1.0)

    def make(store: Any) -> Runner:
        agent = Agent("support", _pq_app._model, _pq_app.tools(ledger), _pq_app._policy)
        config = RunnerConfig(backoff=lambda n: 1.0)
        return Runner(store, agent, config=config, guards=[Deadline(at)])

    engine = ProcrastinateEngine(pq_dsn, make, settings=_pq_app.settings("agentfsm"))
    engine.migrate()
    with engine.store() as store:
        submit(store, "r1", "approve")
    asyncio.run(engine.aserve(wait=False, install_signal_handlers=False))
    with engine.store() as store:
        assert store.load("r1").status == "waiting_approval"
    with psycopg.connect(pq_dsn) as conn:
        scheduled = conn.execute(
            "SELECT scheduled_at FROM procrastinate_jobs WHERE status = 'todo' "
            "AND task_name = 'agentfsm.timer'"
        ).fetchall()
    assert [abs((row[0] - at).total_seconds()) < 0.05 for row in scheduled] == [True]
    time.sleep(max(0.0, (at - datetime.now(UTC)).total_seconds()) + 0.3)
    asyncio.run(engine.aserve(wait=False, install_signal_handlers=False))  # the timer
    asyncio.run(engine.aserve(wait=False, install_signal_handlers=False))  # its advance
    with engine.store() as store:
        record = store.load("r1")
    assert (record.status, record.stop_reason) == ("terminated", "deadline")


def test_a_recovery_pass_cut_off_in_its_transaction_lets_go_of_its_lock(
    pq_dsn: str, tmp_path: Path
) -> None:
    """A worker's recovery pass holds its queue's advisory lock for its transaction, and
    every other worker skips its own pass while the lock is held. A worker cut off by the
    network inside that transaction is, to the server, an idle session holding the lock,
    until TCP gives up (hours): no pass would run, no stalled job be recovered. The
    engine's recovery connection is ended by the server once idle in a transaction for
    `stalled_after` seconds (a worker silent that long counts as dead anyway), so the lock
    is free again about then."""
    engine = _pq_app.engine(pq_dsn, "agentfsm", str(tmp_path / "ledger.db"))
    engine.migrate()
    key = recovery_lock_key("agentfsm")
    engine._keep_recovery_conn()
    cut = engine._recovery
    assert cut is not None
    try:
        # The pass takes the lock, and its client goes no further (cut off).
        cut.execute("BEGIN")
        taken = cut.execute("SELECT pg_try_advisory_xact_lock(hashtext(%s))", (key,))
        assert taken.fetchone() == (True,)
        began = time.monotonic()
        limit = engine.settings.stalled_after + 5.0
        with psycopg.connect(pq_dsn, autocommit=True) as other:
            try_lock = "SELECT pg_try_advisory_lock(hashtext(%s))"
            assert other.execute(try_lock, (key,)).fetchone() == (False,)
            while other.execute(try_lock, (key,)).fetchone() != (True,):
                assert time.monotonic() - began < limit, "the cut-off pass still holds the lock"
                time.sleep(0.05)
            freed = time.monotonic() - began
        assert freed >= engine.settings.stalled_after - 0.1
    finally:
        engine._close_recovery()
