"""Connections a Procrastinate engine worker holds, and how many it opens while it serves.

    .venv/bin/python benchmarks/engine_connections.py

One worker process per `--concurrency` value (1 and 4) on a throwaway PostgreSQL server:
it drains 40 runs (three turns each), then serves idle for `--idle` seconds. Printed: the
sessions it holds on the database once busy (`pg_stat_activity`, less this process's
own), and the sessions opened on
the server while it served idle (`pg_stat_database.sessions`: its recovery passes, its
polls), per second; and the commits on the database while it drained, per turn (the
store's, Procrastinate's, and the polls', as `pg_stat_database.xact_commit` counts them).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import attrs
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentfsm.runtime import submit
from agentfsm.runtime.procrastinate import ProcrastinateEngine
from agentfsm.testing.fixtures.postgres_server import postgres_server
from benchmarks.bench_engine import SETTINGS, _database, _procs, _quiet, _runner, _stop
from benchmarks.bench_fairness import _worker


def _held(conn: psycopg.Connection[object]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchone()
    return int(row[0]) if row else 0


def _commits(conn: psycopg.Connection[object]) -> int:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    return int(row[0]) if row else 0


def _sessions(conn: psycopg.Connection[object]) -> int:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    return int(row[0]) if row else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=10.0)
    args = parser.parse_args()
    _quiet()
    print("| concurrency | sessions held | sessions opened / s, idle | commits per turn |")
    print("| ---: | ---: | ---: | ---: |")
    with postgres_server() as server:
        for concurrency in (1, 4):
            settings = attrs.evolve(SETTINGS, concurrency=concurrency)
            with _database(server.dsn, f"conns_{concurrency}") as dsn:
                engine = ProcrastinateEngine(dsn, _runner, settings=settings)
                engine.migrate()
                with engine.store() as store:
                    for i in range(40):
                        submit(store, f"r{i}", "go")
                    with psycopg.connect(dsn, autocommit=True) as probe:
                        ours = _held(probe)  # this process's store, before the worker
                        commits = _commits(probe)
                    procs = _procs(_worker, [(dsn, settings)])
                    try:
                        while len(store.runs("completed")) < 40:
                            time.sleep(0.2)
                        with psycopg.connect(dsn, autocommit=True) as probe:
                            per_turn = (_commits(probe) - commits) / (40 * 3)
                        time.sleep(2 * settings.recover_every)
                        with psycopg.connect(dsn, autocommit=True) as probe:
                            held = _held(probe) - ours
                            before = _sessions(probe)
                            time.sleep(args.idle)
                            opened = _sessions(probe) - before
                    finally:
                        _stop(procs)
            print(f"| {concurrency} | {held} | {opened / args.idle:.2f} | {per_turn:.1f} |")


if __name__ == "__main__":
    main()
