"""Queues per tenant and priorities on the Procrastinate engine (a real PostgreSQL).

- A run's `Route` (queue, priority) is chosen when it is submitted, recorded with its
  `run.started`, and kept by every later job: approvals from the command line and from a
  plain steering store, timers (an approval's expiry, a retry's backoff), subagents, time
  slices, the recovery pass's copies and `agentfsm jobs --retry`.
- A noisy tenant: tenant A submits 200 runs, then tenant B 10. On one worker serving both
  queues at one priority, B waits behind A's backlog (queues alone are not fairness on a
  shared worker: Procrastinate takes by priority, then age, across queues). With B's own
  worker, or B's higher priority, B's runs all end while most of A's backlog is still
  queued. Ordered by the `run.completed` timestamps of the logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest

from agentfsm.cli import main
from agentfsm.errors import ConcurrencyConflictError, LifecycleError
from agentfsm.events.models import parse_timestamp
from agentfsm.record import RunRecord
from agentfsm.runtime import approve, submit
from agentfsm.runtime.procrastinate import (
    ADVANCE,
    ProcrastinateEngine,
    Route,
    SchemaBehindError,
    Waker,
    recovery_lock_key,
    submit_routed,
)
from agentfsm.stores.postgres import PostgresEventStore
from tests.runtime import _pq_app
from tests.test_docs_blocks import _first_block_after

B = Route("tenant-b", priority=7)
ENDED = {"completed", "failed", "cancelled", "terminated"}


@pytest.fixture
def engine(pq_dsn: str, tmp_path: Path) -> ProcrastinateEngine:
    engine = _pq_app.engine(pq_dsn, "agentfsm", str(tmp_path / "ledger.db"))
    engine.migrate()
    return engine


def _drain(engine: ProcrastinateEngine, *queues: str) -> None:
    """One worker in this process, serving `queues`, until they hold nothing due."""
    asyncio.run(engine.aserve(wait=False, install_signal_handlers=False, queues=list(queues)))


def _jobs(dsn: str) -> list[tuple[Any, ...]]:
    """(task, run, status, queue, priority) of every job, oldest first (`delete_jobs` is
    `never` in these tests)."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT task_name, args->>'run_id', status::text, queue_name, priority "
            "FROM procrastinate_jobs ORDER BY id"
        ).fetchall()


def _url(dsn: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    return f"postgresql://postgres@{info['host']}:{info['port']}/{info['dbname']}"


class TestRoutes:
    def test_a_routed_submit_queues_its_advance_in_the_runs_queue(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """The first advance is in the route's queue with its priority, and the route is
        recorded (in the engine's `routes` table) with `run.started`; a second submit of
        the same id is refused and changes neither."""
        with engine.store() as store:
            submit_routed(store, "b1", "plain", route=B)
            with pytest.raises(ConcurrencyConflictError):
                submit_routed(store, "b1", "plain", route=Route("elsewhere"))
            submit(store, "a1", "plain")  # no route: the engine's queue
        assert _jobs(pq_dsn) == [
            (ADVANCE, "b1", "todo", "tenant-b", 7),
            (ADVANCE, "a1", "todo", "agentfsm", 0),
        ]
        with psycopg.connect(pq_dsn) as conn:
            rows = conn.execute("SELECT run_id, queue, priority FROM agentfsm_routes").fetchall()
        assert rows == [("b1", "tenant-b", 7)]

    def test_every_later_job_of_a_routed_run_keeps_its_route(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """Runs of tenant B with approvals (decided by `agentfsm approve` and by a plain
        steering store with no router), an approval that expires (a timer), a retry's
        backoff (a timer), subagents (one asking a person in its own run), and a long run
        in time slices of 3 turns: a worker serving tenant B's queue only ends them all,
        and every job they ever had was in that queue at that priority."""
        sliced = ProcrastinateEngine(
            pq_dsn,
            engine.make_runner,
            settings=attrs.evolve(engine.settings, slice_turns=3, slice_seconds=None),
        )
        kinds = {
            "b-approve-cli": "approve",
            "b-approve-ui": "approve",
            "b-expire": "expire",
            "b-flaky": "flaky",
            "b-sub": "sub",
            "b-subask": "subask",
            "b-long": "long 8",
        }
        with sliced.store() as store:
            for run_id, kind in kinds.items():
                submit_routed(store, run_id, kind, route=B)
        # A steering process that knows nothing of routes: the database says where to go.
        steering = Waker("agentfsm").install(PostgresEventStore(pq_dsn))
        deadline = time.monotonic() + 60
        try:
            while True:
                _drain(sliced, B.queue)
                statuses = {r: steering.run_info(r).status for r in kinds}
                if set(statuses.values()) <= ENDED:
                    break
                assert time.monotonic() < deadline, statuses
                self._decide(steering, pq_dsn)
                time.sleep(0.1)  # the timers (expiry, backoff) are due in about a second
        finally:
            steering.close()
        with sliced.store() as store:
            assert {r: store.load(r).status for r in kinds} == dict.fromkeys(kinds, "completed")
            expired = store.load("b-expire")
            assert (expired.final_output or "").startswith("not opened")
            assert store.load("b-long").turn == 8
        jobs = _jobs(pq_dsn)
        assert {(j[3], j[4]) for j in jobs} == {(B.queue, B.priority)}, jobs
        tasks = [j[0] for j in jobs]
        assert tasks.count("agentfsm.timer") >= 2  # the expiry and the backoff at least
        assert [j[1] for j in jobs].count("b-long") >= 3  # its slices

    @staticmethod
    def _decide(steering: PostgresEventStore, dsn: str) -> None:
        """Approve what waits for a person: b-approve-cli by the command line, the others
        through the steering store (the expiring one is left to expire)."""
        for info in steering.runs("waiting_approval"):
            if info.run_id.startswith("b-expire"):
                continue
            for action in steering.load(info.run_id).pending_approvals:
                if info.run_id == "b-approve-cli":
                    url = _url(dsn)
                    args = ["approve", info.run_id, action, "--approver", "ann", "--store", url]
                    assert main(args) == 0
                    continue
                with contextlib.suppress(LifecycleError):  # decided meanwhile
                    approve(steering, info.run_id, action, approver="bob")

    def test_a_router_routes_runs_by_what_they_are(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """`router` sees the new run's record (id, objective, agent) and picks its route;
        None leaves it in the engine's queue; `submit_routed` overrides it for one run."""

        def by_tenant(record: RunRecord) -> Route | None:
            tenant, _, _ = record.run_id.partition(".")
            return Route(f"tenant-{tenant}", priority=1) if tenant in ("a", "b") else None

        routed = ProcrastinateEngine(pq_dsn, engine.make_runner, router=by_tenant)
        with routed.store() as store:
            submit(store, "a.1", "plain")
            submit(store, "b.1", "plain")
            submit(store, "c.1", "plain")
            submit_routed(store, "a.2", "plain", route=Route("tenant-a-urgent", priority=9))
        assert [(j[1], j[3], j[4]) for j in _jobs(pq_dsn)] == [
            ("a.1", "tenant-a", 1),
            ("b.1", "tenant-b", 1),
            ("c.1", "agentfsm", 0),
            ("a.2", "tenant-a-urgent", 9),
        ]

    def test_bad_routes_are_refused_with_what_was_wrong(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        with pytest.raises(ValueError, match=r"Route\.queue must be a name of 1 to 128"):
            Route("")
        with pytest.raises(ValueError, match=r"Route\.queue must be a name of 1 to 128"):
            Route("q" * 129)
        with pytest.raises(ValueError, match=r"Route\.priority must be a whole number"):
            Route("q", priority=2**31)
        with pytest.raises(ValueError, match=r"Route\.priority must be a whole number"):
            Route("q", priority=True)
        with (
            PostgresEventStore(pq_dsn) as plain,
            pytest.raises(ValueError, match="submit_routed needs a store whose appends"),
        ):
            submit_routed(plain, "r1", "plain", route=B)

        def wrong_router(record: RunRecord) -> Any:
            return "tenant-b"  # a queue's name, not a Route

        wrong = ProcrastinateEngine(pq_dsn, engine.make_runner, router=wrong_router)
        with wrong.store() as store:
            with pytest.raises(TypeError, match="router returned str for run 'r2'"):
                submit(store, "r2", "plain")
            assert store.runs() == []  # the append rolled back with its hook
        assert _jobs(pq_dsn) == []

    def test_a_database_set_up_before_routes(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """Without the `routes` table a worker refuses to start, naming `agentfsm setup`;
        unrouted runs are steered as before, a routed submit is refused (not silently sent
        to the engine's queue); after setup, routes work."""
        with psycopg.connect(pq_dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE agentfsm_routes")
        with pytest.raises(SchemaBehindError, match=r"no agentfsm_routes table .*agentfsm setup"):
            engine.check_schema()
        with engine.store() as store:
            submit(store, "r1", "plain")
            with pytest.raises(SchemaBehindError, match="cannot be routed to queue 'tenant-b'"):
                submit_routed(store, "b1", "plain", route=B)
            assert [i.run_id for i in store.runs()] == ["r1"]
            engine.migrate()
            engine.check_schema()
            submit_routed(store, "b1", "plain", route=B)
        assert [(j[1], j[3]) for j in _jobs(pq_dsn)] == [("r1", "agentfsm"), ("b1", "tenant-b")]

    def test_the_recovery_pass_covers_each_queue_and_keeps_the_route(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """A job of tenant B's on a dead worker is moved by a pass over B's queue (under
        B's own lock: a pass of the engine's queue under way elsewhere does not hold it
        back), and its copy keeps B's queue and priority; `agentfsm jobs --retry` of a
        failed job does too."""
        with engine.store() as store:
            submit_routed(store, "b1", "plain", route=B)
        with psycopg.connect(pq_dsn, autocommit=True) as conn:
            dead = conn.execute(
                "INSERT INTO procrastinate_workers (last_heartbeat) "
                "VALUES (now() - interval '1 hour') RETURNING id"
            ).fetchone()
            assert dead is not None
            conn.execute("UPDATE procrastinate_jobs SET status = 'doing', worker_id = %s", dead)
            assert engine.recover() == []  # the engine's queue alone: not B's job
            with psycopg.connect(pq_dsn, autocommit=True) as other:
                other.execute(
                    "SELECT pg_advisory_lock(hashtext(%s))", (recovery_lock_key("agentfsm"),)
                )
                assert engine.recover(["agentfsm", B.queue]) == ["b1"]
        assert [j[2:] for j in _jobs(pq_dsn)] == [
            ("failed", "tenant-b", 7),
            ("todo", "tenant-b", 7),
        ]
        with psycopg.connect(pq_dsn, autocommit=True) as conn:
            conn.execute("UPDATE procrastinate_jobs SET status = 'failed' WHERE status = 'todo'")
            newest = conn.execute("SELECT max(id) FROM procrastinate_jobs").fetchone()
            assert newest is not None
        url = _url(pq_dsn)
        assert main(["jobs", "--store", url, "--retry", str(newest[0])]) == 0
        assert _jobs(pq_dsn)[-1][2:] == ("todo", "tenant-b", 7)
        _drain(engine, B.queue)
        with engine.store() as store:
            assert store.load("b1").status == "completed"


# -- a noisy tenant -------------------------------------------------------------------


class Serving:
    """A worker serving `queues` in this process, on a thread with its own event loop."""

    def __init__(self, engine: ProcrastinateEngine, queues: list[str], name: str) -> None:
        self.engine = engine
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(queues, name), daemon=True)
        self.thread.start()
        assert self.ready.wait(30), "the worker did not start"

    def _run(self, queues: list[str], name: str) -> None:
        serving = self.engine.aserve(
            name=name, queues=queues, install_signal_handlers=False, on_ready=self.ready.set
        )
        self.loop.run_until_complete(serving)
        self.loop.close()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.engine.stop)
        self.thread.join(30)


A = Route("tenant-a")
NOISY, QUIET = 200, 10
#: case: (B's route, the workers' queues). One worker each, concurrency 1.
CASES = {
    "shared worker, one priority": (Route("tenant-b"), [["tenant-a", "tenant-b"]]),
    "a worker per tenant": (Route("tenant-b"), [["tenant-a"], ["tenant-b"]]),
    "shared worker, B's higher priority": (Route("tenant-b", 10), [["tenant-a", "tenant-b"]]),
}


def _completed_at(store: PostgresEventStore, run_id: str) -> datetime:
    last = list(store.events(run_id))[-1]
    assert last.type == "run.completed", (run_id, last.type)
    return parse_timestamp(last.occurred_at)


@pytest.mark.parametrize("case", list(CASES))
def test_a_noisy_tenant_does_not_hold_back_a_quiet_one(
    case: str, pq_dsn: str, tmp_path: Path
) -> None:
    """Tenant A submits 200 one-turn runs while the workers serve, then tenant B 10. A's
    backlog is what of A had not ended when B's first run was submitted. On a shared worker
    at one priority, B's runs end only after that backlog (first in, first out across
    queues); with a worker of its own, or a higher priority, all of B's runs end while at
    least half of it is still to come."""
    b_route, workers = CASES[case]
    ledger = str(tmp_path / "ledger.db")
    engines = [_pq_app.engine(pq_dsn, "agentfsm", ledger) for _ in workers]
    engines[0].migrate()
    a_runs = [f"a{i:03d}" for i in range(NOISY)]
    b_runs = [f"b{i:02d}" for i in range(QUIET)]
    serving = [
        Serving(e, q, f"w{i}") for i, (e, q) in enumerate(zip(engines, workers, strict=True))
    ]
    try:
        with engines[0].store() as store:
            for run_id in a_runs:
                submit_routed(store, run_id, "quick", route=A)
            for run_id in b_runs:
                submit_routed(store, run_id, "quick", route=b_route)
            deadline = time.monotonic() + 60
            while len(store.runs("completed")) < NOISY + QUIET:
                assert time.monotonic() < deadline, len(store.runs("completed"))
                time.sleep(0.05)
            done = {r: _completed_at(store, r) for r in a_runs + b_runs}
            started = {r: parse_timestamp(next(iter(store.events(r))).occurred_at) for r in b_runs}
    finally:
        for s in serving:
            s.stop()
    b_first, b_last = min(started.values()), max(done[r] for r in b_runs)
    backlog = sum(1 for r in a_runs if done[r] > b_first)
    assert backlog >= NOISY // 4, f"A's backlog was {backlog} runs when B came: no test"
    a_after = sum(1 for r in a_runs if done[r] > b_last)
    waits = [(done[r] - started[r]).total_seconds() for r in b_runs]
    a_span = (max(done[r] for r in a_runs) - min(done[r] for r in a_runs)).total_seconds()
    print(
        f"\n{case}: {a_after} of A's backlog of {backlog} ended after B's last; B's wait median "
        f"{statistics.median(waits):.2f} s, max {max(waits):.2f} s; A drained in {a_span:.2f} s"
    )
    if case == "shared worker, one priority":
        assert a_after <= 1  # B waited for the whole backlog (one A job may be in hand)
    else:
        assert a_after >= backlog // 2


def test_the_docs_tenant_example_routes_as_it_says(pq_dsn: str, tmp_path: Path) -> None:
    """docs/runtime.md's tenants example, run as it stands on the page."""
    (code,) = _first_block_after("docs/runtime.md", "### Tenants: queues and priorities")
    make_runner = _pq_app.runner_factory(str(tmp_path / "ledger.db"))
    exec(code, {"DSN": pq_dsn, "make_runner": make_runner})  # the page's own code
    assert _jobs(pq_dsn) == [
        (ADVANCE, "acme.r1", "todo", "tenant-acme", 0),
        (ADVANCE, "r2", "todo", "tenant-vip", 10),
    ]
