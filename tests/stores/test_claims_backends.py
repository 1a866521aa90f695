"""A worker's claim on every lease store (issue 32): first come, first served, a due timer
before the queue, and no lease row kept for a run that ended — on memory, SQLite and
PostgreSQL alike (the SQLite-only measures are in test_claims.py)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import attrs
import pytest

from agentfsm import Agent, Decision, Runner, SQLiteEventStore
from agentfsm.runtime import Worker, submit
from agentfsm.stores import EventStore, MemoryEventStore
from agentfsm.stores._process import this_process
from agentfsm.stores.leases import SQLiteLeases
from agentfsm.stores.memory import MemoryLeases


class _Clock:
    """Event times a second apart, so the order runs became runnable is known."""

    def __init__(self, start: datetime | None = None) -> None:
        self.at = (start or datetime(2026, 1, 1, tzinfo=UTC)) - timedelta(seconds=1)

    def __call__(self) -> datetime:
        self.at += timedelta(seconds=1)
        return self.at


@attrs.define
class Backend:
    """One store and how to open its worker leases and count its lease rows."""

    name: str
    store: EventStore
    open_leases: Callable[[], Any]
    lease_rows: Callable[[], int]


def _memory() -> Iterator[Backend]:
    store = MemoryEventStore()
    yield Backend(
        "memory", store, lambda: MemoryLeases(store), lambda: len(store.storage.leases.leases)
    )


def _sqlite(tmp_path: Path) -> Iterator[Backend]:
    with SQLiteEventStore(tmp_path / "runs.db", synchronous="NORMAL") as store:

        def rows() -> int:
            with sqlite3.connect(store.path) as conn:
                (count,) = conn.execute("SELECT count(*) FROM agentfsm_leases").fetchone()
            conn.close()
            return int(count)

        yield Backend("sqlite", store, lambda: SQLiteLeases(store.path), rows)


def _postgres(dsn: str, prefix: str) -> Iterator[Backend]:
    import psycopg

    from agentfsm.stores.postgres import PostgresEventStore
    from agentfsm.stores.postgres_leases import PostgresLeases

    with PostgresEventStore(dsn, table_prefix=prefix, migrate=True) as store:

        def rows() -> int:
            with psycopg.connect(dsn) as conn:
                found = conn.execute(f"SELECT count(*) FROM {prefix}leases").fetchone()  # type: ignore[arg-type]
            assert found is not None
            return int(found[0])

        yield Backend("postgres", store, lambda: PostgresLeases(dsn, table_prefix=prefix), rows)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "memory":
        yield from _memory()
    elif request.param == "sqlite":
        yield from _sqlite(tmp_path)
    else:
        pytest.importorskip("psycopg", reason="needs the postgres extra")
        dsn = request.getfixturevalue("postgres_dsn")
        yield from _postgres(dsn, request.getfixturevalue("pg_prefix"))


@pytest.fixture
def leases(backend: Backend) -> Iterator[Any]:
    opened = backend.open_leases()
    yield opened
    close = getattr(opened, "close", None)
    if close is not None:
        close()


def _answer() -> Agent:
    return Agent("a", lambda ctx: Decision.answer("done"), [])


class TestFirstComeFirstServed:
    """Runs are claimed in the order they became runnable, not in the order of their ids."""

    def test_ids_that_do_not_grow_are_claimed_in_arrival_order(
        self, backend: Backend, leases: Any
    ) -> None:
        """Submitted as `zeta`, `mid`, `alpha`: claimed as `zeta`, `mid`, `alpha`."""
        clock = _Clock()
        for run_id in ("zeta", "mid", "alpha"):
            submit(backend.store, run_id, "work", clock=clock)
        assert [leases.claim(f"w{i}", 30) for i in range(4)] == ["zeta", "mid", "alpha", None]

    def test_times_with_other_offsets_compare_as_moments(
        self, backend: Backend, leases: Any
    ) -> None:
        """A run submitted at 10:00+02:00 (08:00 UTC) is served before one at 09:00 UTC,
        though its text sorts after (and its id too)."""
        plus_two = _Clock(datetime(2026, 1, 1, 10, tzinfo=timezone(timedelta(hours=2))))
        at_nine = _Clock(datetime(2026, 1, 1, 9, tzinfo=UTC))
        submit(backend.store, "a-later", "work", clock=at_nine)
        submit(backend.store, "z-earlier", "work", clock=plus_two)
        assert leases.claim("w", 30) == "z-earlier"

    def test_a_run_keeps_its_place_while_appended_to_in_its_status(
        self, backend: Backend, leases: Any
    ) -> None:
        """`first` gets an event that leaves it `running` (a handoff) after `second`
        arrived: it is still served first, as it became runnable first; `third`, moved to
        another runnable status after both (a cancel request), goes to the end."""
        from agentfsm.runtime import cancel
        from agentfsm.runtime.control import append_event

        clock = _Clock()
        for run_id in ("third", "first", "second"):
            submit(backend.store, run_id, "work", clock=clock)
        cancel(backend.store, "third", clock=clock)
        append_event(backend.store, "first", "handoff", {"to_agent": "b"}, clock=clock)
        assert backend.store.run_info("first").status == "running"
        assert [leases.claim("w", 30) for _ in range(3)] == ["first", "second", "third"]

    def test_a_due_wake_up_comes_before_the_queue(self, backend: Backend, leases: Any) -> None:
        """`b` released with a wake-up already due is claimed before `a` and `c`, which
        waited in the queue (a before c: arrival order)."""
        clock = _Clock()
        for run_id in ("a", "b", "c"):
            submit(backend.store, run_id, "work", clock=clock)
        assert [leases.claim("w1", 30), leases.claim("w2", 30)] == ["a", "b"]
        leases.release("b", "w2", wake_at=time.time() - 5)
        leases.release("a", "w1")
        assert [leases.claim("w", 30) for _ in range(4)] == ["b", "a", "c", None]


class TestEndedRunsLeaveNoLeaseRow:
    """A run that ends gives its lease row up; the rows are those of runs still to drive."""

    def test_a_worker_leaves_no_row_for_the_runs_it_finished(
        self, backend: Backend, leases: Any
    ) -> None:
        """Three runs drained to their end by a Worker: the leases table is empty."""
        for run_id in ("a", "b", "c"):
            submit(backend.store, run_id, "work")
        results = Worker(Runner(backend.store, _answer()), leases, worker_id="w").drain()
        assert [r.status for r in results] == ["completed"] * 3
        assert backend.lease_rows() == 0

    def test_a_runner_leaves_no_row_for_a_run_it_finished(self, backend: Backend) -> None:
        """A Runner's own lease (take, then free) of a run it drove to the end is gone."""
        Runner(backend.store, _answer()).run("r1", "work")
        assert backend.lease_rows() == 0

    def test_a_waiting_run_keeps_its_row(self, backend: Backend, leases: Any) -> None:
        """A run released still runnable (its hold) keeps the row that holds it back."""
        submit(backend.store, "r1", "work")
        assert leases.claim("w", 30) == "r1"
        leases.release("r1", "w", retry_after=60)
        assert leases.claim("w", 30) is None
        assert backend.lease_rows() == 1


class TestMemoryConstantTime:
    """The memory claim reads the head of each runnable status's queue, never the backlog."""

    def test_a_claim_runs_as_many_lines_at_100_as_at_10000_runnable(self) -> None:
        """Python line events in one claim (counted by a trace function, so deterministic):
        the same with 10,000 runs waiting as with 100 (it was one per runnable run: every
        run listed and sorted by id)."""
        import sys

        store = MemoryEventStore()
        leases = MemoryLeases(store)

        def lines() -> int:
            counted = [0]

            def trace(frame: Any, event: str, arg: Any) -> Any:
                counted[0] += 1
                return trace

            sys.settrace(trace)
            try:
                claimed = leases.claim("w", 30)
            finally:
                sys.settrace(None)
            assert claimed is not None
            return counted[0]

        clock = _Clock()
        for i in range(102):
            submit(store, f"r{i:05d}", "work", clock=clock)
        lines()  # the first claim also caches this process's identity
        few = lines()
        for i in range(102, 10_003):
            submit(store, f"r{i:05d}", "work", clock=clock)
        many = lines()  # it steps over the two runs held: a few lines each
        assert many <= few * 1.5, (few, many)

    def test_a_due_timer_is_found_in_as_many_lines_at_100_as_at_10000_timers_set(self) -> None:
        """The run whose wake-up fell due first is the head of a heap of timers, not the
        minimum of a scan of every lease row (it was one per run with a lease row: 10,000
        runs waiting on timers made every claim read 10,000 rows under the lock)."""
        import sys

        store = MemoryEventStore()
        leases = MemoryLeases(store)
        now = leases.clock()

        def lines() -> tuple[int, str | None]:
            counted = [0]

            def trace(frame: Any, event: str, arg: Any) -> Any:
                counted[0] += 1
                return trace

            sys.settrace(trace)
            try:
                claimed = leases.claim("w", 30)
            finally:
                sys.settrace(None)
            return counted[0], claimed

        def waiting(first: int, last: int) -> None:
            # Runs a worker let go until a time far ahead: each keeps a lease row and a timer.
            for i in range(first, last):
                submit(store, f"t{i:05d}", "work")
                assert leases.take(f"t{i:05d}", "w0", this_process(), 30)[0]
                leases.release(f"t{i:05d}", "w0", retry_after=3600, wake_at=now + 3600)

        def due(run_id: str) -> None:
            submit(store, run_id, "work")
            assert leases.take(run_id, "w0", this_process(), 30)[0]
            leases.release(run_id, "w0", retry_after=3600, wake_at=now - 1)

        waiting(0, 100)
        due("due-1")
        lines()  # the first claim also caches this process's identity
        due("due-2")
        few, claimed = lines()
        assert claimed == "due-2"
        waiting(100, 10_000)
        due("due-3")
        many, claimed = lines()
        assert claimed == "due-3"
        assert many <= few * 1.5, (few, many)


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _plan_nodes(child)


class TestPostgresConstantTime:
    """The PostgreSQL claim reads the head of an index, never the whole backlog: the rows
    its plan reads from the runs table (EXPLAIN ANALYZE of the claim statement itself) are
    as few with 10,000 runs waiting as with 100 (it was every runnable run, sorted by id)."""

    def test_a_claim_reads_as_many_runs_rows_at_100_as_at_10000_runnable(
        self, postgres_dsn: str, pg_prefix: str
    ) -> None:
        pytest.importorskip("psycopg", reason="needs the postgres extra")
        import psycopg

        from agentfsm.stores.postgres import PostgresEventStore
        from agentfsm.stores.postgres_leases import PostgresLeases

        PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True).close()
        runs = f"{pg_prefix}runs"
        leases = PostgresLeases(postgres_dsn, table_prefix=pg_prefix)

        def fill(start: int, stop: int) -> None:
            # Rows as an append writes them (the claim reads the runs table only), queued a
            # second apart; the first third ended (the oldest, lowest ids: they came first),
            # which the claim must not read either.
            with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                conn.execute(
                    f"INSERT INTO {runs} (run_id, status, version, updated_at, status_at) "  # type: ignore[arg-type]
                    "SELECT 'r' || lpad(i::text, 6, '0'), CASE WHEN i < %s THEN "
                    "'completed' ELSE 'running' END, 1, '', "
                    "timestamptz '2026-01-01' + make_interval(secs => i) "
                    "FROM generate_series(%s, %s - 1) AS i",
                    (start + (stop - start) // 3, start, stop),
                )
                conn.execute(f"ANALYZE {runs}")  # type: ignore[arg-type]

        def runs_rows_read() -> tuple[int, list[str]]:
            params = {**leases._sql.statuses, **leases._sql.params("", "w", this_process(), 30)}
            found = leases._conn.execute(
                f"EXPLAIN (ANALYZE, FORMAT JSON) {leases._sql.claim}",  # type: ignore[arg-type]
                params,
            ).fetchone()
            assert found is not None
            nodes = list(_plan_nodes(found[0][0]["Plan"]))
            on_runs = [n for n in nodes if n.get("Relation Name") == runs]
            read = sum(int(n["Actual Rows"]) * int(n["Actual Loops"]) for n in on_runs)
            return read, sorted({n["Node Type"] for n in on_runs})

        try:
            fill(0, 150)  # 100 runnable
            few, _ = runs_rows_read()
            fill(150, 15_000)  # 10,000 runnable in all
            many, kinds = runs_rows_read()
        finally:
            leases.close()
        assert kinds == ["Index Scan"], kinds  # no Seq Scan, no Bitmap over every match
        assert many <= max(few, 3), (few, many)


class TestRacingClaims:
    """Claims racing on one queue each take a different run, and together take them all:
    locking the head of each queue (`SKIP LOCKED`) loses no run and gives none twice."""

    def test_four_claimers_share_sixty_runs_each_once(self, backend: Backend) -> None:
        import threading

        clock = _Clock()
        for i in range(60):
            submit(backend.store, f"r{i:03d}", "work", clock=clock)
        taken: list[list[str]] = [[] for _ in range(4)]
        start = threading.Barrier(4)

        def claimer(i: int) -> None:
            leases = backend.open_leases()
            try:
                start.wait()
                while (run_id := leases.claim(f"w{i}", 60)) is not None:
                    taken[i].append(run_id)
            finally:
                getattr(leases, "close", lambda: None)()

        threads = [threading.Thread(target=claimer, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        every = [run_id for mine in taken for run_id in mine]
        assert sorted(every) == [f"r{i:03d}" for i in range(60)]
        for mine in taken:  # each claimer served in arrival order
            assert mine == sorted(mine)
