"""Two to four drivers race on one run with slow tools: the lease lets one drive at a time.

A property test, on real threads and real processes over SQLite, and real threads over
PostgreSQL: drivers start together and each resumes the run until it has ended (refused
while another holds it, or waiting for it with `wait=`). Whatever the timing, every tool
result that happened is recorded as that call's result, no call acts twice, nothing is
declared `outcome_unknown` (no driver died), and the run completes exactly once with a log
that verifies and validates.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm.errors import RunHeldError
from agentfsm.runtime import Decision, ProposedCall, ScriptedModel, Tool, ToolContext, submit
from agentfsm.stores import EventStore, SQLiteEventStore

from .helpers import DurableLedger, runner_for, types, validate

# Hypothesis runs many examples in one test call, so one `pg_prefix`; examples can share a
# seed, drivers and calls (a replayed or shrunk one always does), and a second `submit` of
# `r1` into tables that hold it is refused. Each example gets tables of its own.
_examples = itertools.count()

ENDED = frozenset({"completed", "failed", "cancelled", "terminated"})


@st.composite
def races(draw: st.DrawFn) -> dict[str, Any]:
    """How many drivers, how many calls the run makes, how slow they are, how each waits."""
    drivers = draw(st.integers(2, 4))
    return {
        "drivers": drivers,
        "calls": draw(st.integers(1, 3)),
        "delay": draw(st.sampled_from([0.0, 0.005, 0.02, 0.05])),
        "waits": draw(st.lists(st.sampled_from([None, 2.0]), min_size=drivers, max_size=drivers)),
        "seed": draw(st.integers(0, 2**16)),
    }


def _script(calls: int) -> ScriptedModel:
    steps: list[Any] = [
        Decision.call_tools(ProposedCall("act", {"n": n})) for n in range(1, calls + 1)
    ]
    steps.append(lambda ctx: Decision.answer(f"acted {calls} times"))
    return ScriptedModel(steps, by_turn=True)


def _drive(
    open_store: Callable[[], EventStore],
    act: Callable[[ToolContext], Any],
    race: dict[str, Any],
    i: int,
    start: Callable[[], None],
) -> None:
    """One driver: resume the run until it has ended, refused (or waiting) meanwhile."""
    rng = random.Random(race["seed"] * 10 + i)
    store = open_store()
    runner = runner_for(store, _script(race["calls"]), [Tool("act", act)])
    start()
    try:
        while store.run_info("r1").status not in ENDED:
            try:
                runner.drive("r1", wait=race["waits"][i])
            except RunHeldError:
                time.sleep(rng.uniform(0, 0.01))
    finally:
        store.close()


def _check(store: EventStore, race: dict[str, Any], acted: dict[str, int]) -> None:
    record = store.load("r1")
    assert record.status == "completed"
    kinds = types(store, "r1")
    assert kinds.count("run.completed") == 1
    assert "tool.outcome_unknown" not in kinds
    assert sorted(acted) == [f"r1:t{n}.1" for n in range(1, race["calls"] + 1)]
    assert set(acted.values()) == {1}  # no call acted twice
    for key in acted:  # every result that happened is that call's recorded result
        action = record.actions[key.split(":", 1)[1]]
        assert (action.status, action.result) == ("succeeded", f"done {key}")
    assert store.verify("r1").ok
    assert validate(store, ["r1"]).ok


def _threads(open_store: Callable[[], EventStore], race: dict[str, Any]) -> dict[str, int]:
    acted: dict[str, int] = {}
    lock = threading.Lock()

    def act(ctx: ToolContext) -> Any:
        time.sleep(race["delay"])
        with lock:
            acted[ctx.idempotency_key] = acted.get(ctx.idempotency_key, 0) + 1
        return f"done {ctx.idempotency_key}"

    barrier = threading.Barrier(race["drivers"])
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            _drive(open_store, act, race, i, barrier.wait)
        except BaseException as exc:  # noqa: BLE001  (reported by the test below)
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(race["drivers"])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    return acted


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(race=races())
def test_racing_threads_on_sqlite(tmp_path_factory: pytest.TempPathFactory, race: Any) -> None:
    """Drivers on threads of one process, each with its own SQLite handle."""
    path = tmp_path_factory.mktemp("race") / "runs.db"
    with SQLiteEventStore(path) as store:
        submit(store, "r1", "act")
        acted = _threads(lambda: SQLiteEventStore(path), race)
        _check(store, race, acted)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(race=races())
def test_racing_threads_on_postgres(postgres_dsn: str, pg_prefix: str, race: Any) -> None:
    """The same on PostgreSQL (fresh tables per example)."""
    from agentfsm.stores.postgres import PostgresEventStore

    prefix = f"{pg_prefix}{next(_examples)}_"
    with PostgresEventStore(postgres_dsn, table_prefix=prefix, migrate=True) as store:
        submit(store, "r1", "act")
        acted = _threads(lambda: PostgresEventStore(postgres_dsn, table_prefix=prefix), race)
        _check(store, race, acted)


def _process(path: str, ledger: str, race: dict[str, Any], i: int, go: Any) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    effects = DurableLedger(ledger)

    def act(ctx: ToolContext) -> Any:
        time.sleep(race["delay"])
        effects.act(ctx, honour_key=False)
        return f"done {ctx.idempotency_key}"

    _drive(lambda: SQLiteEventStore(path), act, race, i, go.wait)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(race=races())
def test_racing_processes_on_sqlite(tmp_path_factory: pytest.TempPathFactory, race: Any) -> None:
    """Drivers in processes of their own (forked), the effects in a ledger file."""
    folder = tmp_path_factory.mktemp("race")
    path, ledger = str(folder / "runs.db"), str(folder / "ledger.db")
    DurableLedger(ledger)
    with SQLiteEventStore(path) as store:
        submit(store, "r1", "act")
        ctx = multiprocessing.get_context("fork")
        go = ctx.Event()
        procs = [
            ctx.Process(target=_process, args=(path, ledger, race, i, go))
            for i in range(race["drivers"])
        ]
        for proc in procs:
            proc.start()
        go.set()
        for proc in procs:
            proc.join(60)
            assert proc.exitcode == 0
        rows = DurableLedger(ledger).rows()
        _check(store, race, {key: effects for key, (_, effects, _) in rows.items()})
