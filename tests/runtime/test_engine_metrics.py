"""The engine's OpenTelemetry metrics, read with the SDK's `InMemoryMetricReader`: runs
driven as jobs on a real PostgreSQL are counted from what they stored; the queue's depth and
age, wake-up latency, timer lateness and lease takeovers are what happened."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import psycopg
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from agentfsm.adapters.otel_metrics import EngineMetrics, RunMetrics
from agentfsm.events import LogBuilder
from agentfsm.runtime import submit
from agentfsm.runtime.procrastinate import ProcrastinateEngine
from tests.runtime import _pq_app


def _points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Instrument name -> its data points (the last collection)."""
    data = reader.get_metrics_data()
    found: dict[str, list[Any]] = {}
    if data is None:
        return found
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found[metric.name] = list(metric.data.data_points)
    return found


def _sums(points: list[Any]) -> dict[tuple[tuple[str, Any], ...], float]:
    return {tuple(sorted(p.attributes.items())): p.value for p in points}


def test_run_metrics_count_a_logs_runs_turns_and_calls() -> None:
    reader = InMemoryMetricReader()
    metrics = RunMetrics(MeterProvider(metric_readers=[reader]).get_meter("agentfsm"))
    log = LogBuilder("r1")
    log.add("run.started", agent="support")
    log.add("model.started")
    log.add("model.completed", decision="tool_calls",
            tool_calls=[{"action_id": "a1", "tool": "search", "arguments": {}}])  # fmt: skip
    log.add("tool.requested", action_id="a1", tool="search", arguments={})
    log.add("tool.started", action_id="a1")
    log.add("tool.failed", action_id="a1", error={"kind": "timeout", "message": "slow"})
    log.add("model.started")
    log.add("run.terminated", stop_reason="max_turns", detail="2 of 2 turns used")
    metrics.feed_all(log.events)
    points = _points(reader)
    assert _sums(points["agentfsm.runs.started"]) == {(): 1}
    assert _sums(points["agentfsm.runs.ended"]) == {(("status", "terminated"),): 1}
    assert _sums(points["agentfsm.turns"]) == {(): 2}
    assert _sums(points["agentfsm.tool_calls"]) == {(("outcome", "failed"), ("tool", "search")): 1}


def test_the_engine_records_its_runs_queue_wakeups_and_timers(pq_dsn: str, tmp_path: Path) -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("agentfsm")
    metrics = EngineMetrics(meter, pq_dsn)
    engine = ProcrastinateEngine(
        pq_dsn,
        _pq_app.runner_factory(str(tmp_path / "ledger.db")),
        settings=_pq_app.settings("agentfsm"),
        metrics=metrics,
    )
    engine.migrate()
    with engine.store() as store:
        for i in range(3):
            submit(store, f"p{i}", "plain")
        submit(store, "f1", "flaky")  # its quote's retry waits 1 s: a timer
    points = _points(reader)
    assert _sums(points["agentfsm.jobs.depth"]) == {(("queue", "agentfsm"), ("state", "queued")): 4}
    (oldest,) = points["agentfsm.jobs.oldest_age"]
    assert oldest.value >= 0
    serve = engine.aserve(wait=False, install_signal_handlers=False)
    asyncio.run(serve)
    points = _points(reader)
    assert _sums(points["agentfsm.jobs.depth"]) == {
        (("queue", "agentfsm"), ("state", "scheduled")): 1
    }
    time.sleep(1.2)  # the retry's timer comes due
    asyncio.run(engine.aserve(wait=False, install_signal_handlers=False))
    asyncio.run(engine.aserve(wait=False, install_signal_handlers=False))  # the advance it queued
    with engine.store() as store:
        assert {store.load(r).status for r in ("p0", "p1", "p2", "f1")} == {"completed"}
    points = _points(reader)
    assert _sums(points["agentfsm.runs.started"]) == {(): 4}
    assert _sums(points["agentfsm.runs.ended"]) == {(("status", "completed"),): 4}
    # plain: 3 turns (two calls, an answer); flaky: 2 (a call retried once, an answer).
    assert _sums(points["agentfsm.turns"]) == {(): 3 * 3 + 2}
    assert _sums(points["agentfsm.tool_calls"]) == {
        (("outcome", "completed"), ("tool", "get_order")): 3,
        (("outcome", "completed"), ("tool", "create_ticket")): 3,
        (("outcome", "failed"), ("tool", "get_quote")): 1,
        (("outcome", "completed"), ("tool", "get_quote")): 1,
    }
    (latency,) = points["agentfsm.wakeup.latency"]
    assert latency.count == 5  # four submitted runs, and the advance the timer queued
    assert 0 <= latency.min <= latency.max < 30
    (lateness,) = points["agentfsm.timer.lateness"]
    assert lateness.count == 1
    assert dict(lateness.attributes) == {"queue": "agentfsm", "kind": "wake"}
    assert 0 <= lateness.max < 30
    assert "agentfsm.lease.takeovers" not in points  # nobody died
    # A job moved off a silent worker is a takeover.
    with engine.store() as store:
        submit(store, "p9", "plain")
    with psycopg.connect(pq_dsn, autocommit=True) as conn:
        dead = conn.execute(
            "INSERT INTO procrastinate_workers (last_heartbeat) "
            "VALUES (now() - interval '1 hour') RETURNING id"
        ).fetchone()
        assert dead is not None
        conn.execute(
            "UPDATE procrastinate_jobs SET status = 'doing', worker_id = %s WHERE lock = 'p9' "
            "AND status = 'todo'",
            (dead[0],),
        )
    assert engine.recover() == ["p9"]
    points = _points(reader)
    assert _sums(points["agentfsm.lease.takeovers"]) == {(("reason", "stalled_worker"),): 1}
