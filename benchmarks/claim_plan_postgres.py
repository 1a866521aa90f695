"""What one PostgreSQL claim reads as the backlog grows: the rows of the runs table its plan
reads (EXPLAIN ANALYZE of the claim statement itself, so deterministic, not a timing) and
its execution time, with 100 / 1,000 / 10,000 runnable runs waiting, for this agentfsm's
claim beside the claim it replaced (ORDER BY run_id over every runnable run, issue 32).

    .venv/bin/python benchmarks/claim_plan_postgres.py [--backlogs 100,1000,10000]

A PostgreSQL server of its own (agentfsm.testing.fixtures.postgres_server). For each backlog, fresh
tables: a third as many runs again that ended (the oldest, lowest ids: they came first),
then the runnable ones, a second apart, rows as an append writes them. Each claim is rolled
back, so both claims read the same queue.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import psycopg

from agentfsm.stores._process import this_process
from agentfsm.stores.leases import RUNNABLE_STATUSES
from agentfsm.stores.postgres import PostgresEventStore
from agentfsm.stores.postgres_leases import PostgresLeases
from agentfsm.testing.fixtures.postgres_server import postgres_server

#: The claim before issue 32 (agentfsm 2026-12-01), on the same tables.
_BEFORE = (
    "WITH candidate AS (SELECT r.run_id FROM {p}runs r LEFT JOIN {p}leases l "
    "ON l.run_id = r.run_id WHERE strpos(r.run_id, '/') = 0 AND ("
    "(r.status = ANY(%(statuses)s) AND (l.run_id IS NULL OR l.expires_at <= now())) "
    "OR ((l.wake_at <= now() OR l.resume_at <= now()) AND (l.worker_id IS NULL OR "
    "l.expires_at <= now()))) ORDER BY r.run_id LIMIT 1 FOR UPDATE OF r SKIP LOCKED) "
    "INSERT INTO {p}leases (run_id, worker_id, expires_at) "
    "SELECT run_id, %(worker)s, now() + make_interval(secs => %(ttl)s) FROM candidate "
    "ON CONFLICT (run_id) DO UPDATE SET worker_id = EXCLUDED.worker_id, "
    "expires_at = EXCLUDED.expires_at WHERE {p}leases.expires_at <= now() RETURNING run_id"
)


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


def _measure(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any], runs: str) -> str:
    with conn.transaction(force_rollback=True):
        row = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params).fetchone()  # type: ignore[arg-type]
    assert row is not None
    plan = row[0][0]
    on_runs = [n for n in _nodes(plan["Plan"]) if n.get("Relation Name") == runs]
    read = sum(int(n["Actual Rows"]) * int(n["Actual Loops"]) for n in on_runs)
    kinds = "+".join(sorted({n["Node Type"] for n in on_runs}))
    return f"{read:>6} rows ({kinds}) {plan['Execution Time']:7.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backlogs", default="100,1000,10000")
    args = parser.parse_args()
    backlogs = [int(b) for b in args.backlogs.split(",")]
    with postgres_server() as server:
        dsn = server.dsn
        before_params = {"statuses": list(RUNNABLE_STATUSES), "worker": "w", "ttl": 30}
        conn = psycopg.connect(dsn, autocommit=True)
        print(f"{'runnable':>9} | {'this claim: runs rows read':<42} | before (ORDER BY run_id)")
        for i, backlog in enumerate(backlogs):
            p = f"bench{i}_"
            PostgresEventStore(dsn, table_prefix=p, migrate=True).close()
            leases = PostgresLeases(dsn, table_prefix=p)
            params = {**leases._sql.statuses, **leases._sql.params("", "w", this_process(), 30)}
            ended = backlog // 3
            conn.execute(
                f"INSERT INTO {p}runs (run_id, status, version, updated_at, status_at) "  # type: ignore[arg-type]  # noqa: S608
                "SELECT 'r' || lpad(i::text, 7, '0'), CASE WHEN i < %s THEN 'completed' "
                "ELSE 'running' END, 1, '', timestamptz '2026-01-01' + make_interval(secs => i) "
                "FROM generate_series(0, %s - 1) AS i",
                (ended, ended + backlog),
            )
            conn.execute(f"ANALYZE {p}runs")  # type: ignore[arg-type]
            now = _measure(conn, leases._sql.claim, params, f"{p}runs")
            before = _measure(conn, _BEFORE.format(p=p), before_params, f"{p}runs")
            leases.close()
            print(f"{backlog:>9} | {now:<42} | {before}")
        conn.close()


if __name__ == "__main__":
    main()
