"""A fork of a routed run is woken on its source's queue, at its source's priority.

`agentfsm fork` (and `agentfsm.runtime.control.fork`) start a new run from another run's
first events: the same work driven on another way, so the same tenant. Its `run.started`
append records the source's `Route` for it (a fork of the fork keeps it too), so a worker
serving the source's queue only drives it to its end. A fork of a run without a route is
in the engine's queue, like its source.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentfsm.cli import main
from agentfsm.runtime import control, submit
from agentfsm.runtime.procrastinate import (
    ADVANCE,
    ProcrastinateEngine,
    Route,
    Waker,
    submit_routed,
)
from agentfsm.stores.postgres import PostgresEventStore
from tests.runtime import _pq_app
from tests.runtime.test_cli_worker import url_of

B = Route("tenant-b", priority=7)


@pytest.fixture
def engine(pq_dsn: str, tmp_path: Path) -> ProcrastinateEngine:
    engine = _pq_app.engine(pq_dsn, "agentfsm", str(tmp_path / "ledger.db"))
    engine.migrate()
    return engine


def _drain(engine: ProcrastinateEngine, *queues: str) -> None:
    asyncio.run(engine.aserve(wait=False, install_signal_handlers=False, queues=list(queues)))


def _advances(dsn: str, run_id: str) -> list[tuple[Any, ...]]:
    """(queue, priority) of every advance of `run_id` (`delete_jobs` is `never` here)."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT queue_name, priority FROM procrastinate_jobs "
            "WHERE task_name = %s AND args->>'run_id' = %s ORDER BY id",
            (ADVANCE, run_id),
        ).fetchall()


def test_a_fork_of_a_routed_run_is_woken_on_its_sources_queue(
    engine: ProcrastinateEngine, pq_dsn: str
) -> None:
    """`agentfsm fork` from the command line (a steering process that knows nothing of
    routes), then a fork of the fork through the API on another steering store: each fork's
    advance is in tenant B's queue at priority 7, its route recorded, and a worker serving
    only that queue ends both."""
    with engine.store() as store:
        submit_routed(store, "b1", "plain", route=B)
    _drain(engine, B.queue)
    with engine.store() as store:
        assert store.run_info("b1").status == "completed"
    forked = main(["fork", "b1", "--at", "1", "--as", "b1-again", "--store", url_of(pq_dsn)])
    assert forked == 0
    steering = Waker("agentfsm").install(PostgresEventStore(pq_dsn))
    with steering:
        control.fork(steering, "b1-again", at=1, as_run="b1-third")
    assert _advances(pq_dsn, "b1-again") == [(B.queue, B.priority)]
    assert _advances(pq_dsn, "b1-third") == [(B.queue, B.priority)]
    with psycopg.connect(pq_dsn) as conn:
        routes = conn.execute(
            "SELECT run_id, queue, priority FROM agentfsm_routes ORDER BY run_id"
        ).fetchall()
    assert routes == [
        ("b1", "tenant-b", 7),
        ("b1-again", "tenant-b", 7),
        ("b1-third", "tenant-b", 7),
    ]
    _drain(engine, B.queue)
    with engine.store() as store:
        assert store.run_info("b1-again").status == "completed"
        assert store.run_info("b1-third").status == "completed"
    # Every job of the forks stayed in the source's queue.
    assert set(_advances(pq_dsn, "b1-again")) == {(B.queue, B.priority)}


def test_a_fork_of_a_run_without_a_route_stays_in_the_engines_queue(
    engine: ProcrastinateEngine, pq_dsn: str
) -> None:
    with engine.store() as store:
        submit(store, "a1", "plain")
        control.fork(store, "a1", at=1, as_run="a1-again")
    assert _advances(pq_dsn, "a1-again") == [("agentfsm", 0)]
    with psycopg.connect(pq_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM agentfsm_routes").fetchone() == (0,)
