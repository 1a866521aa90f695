"""Stores side by side, in one run: our appends and loads vs. the raw drivers and LangGraph.

    make bench-stores            # or: .venv/bin/python benchmarks/bench_stores.py [--rounds N]

What is measured (every figure is the median over rounds that interleave the contenders,
so a noisy disk slows them alike):

- append throughput, events/s, at 1, 10 and 100 events per commit: our SQLite and
  PostgreSQL stores (validation, hashing, runs row, snapshots every 1,000 events) next to
  the floor: raw `sqlite3` / `psycopg` inserts of the very same rows into the same table
  layout with the same durability (SQLite WAL + synchronous=FULL; PostgreSQL with fsync
  and synchronous_commit on). Target: our time per event within 1.25x of the floor.
- per persisted step: one of our appends of one event, next to LangGraph's SqliteSaver /
  PostgresSaver saving one step (`put_writes` of the step's write + `put` of a checkpoint
  holding the same event). Target: at least 3x LangGraph's steps/s.
- `load` latency of a 10,001-event run, with a snapshot every 1,000 events and without.

A throwaway PostgreSQL server is started for the run (PostgreSQL's default durability).
`--fast-disk` takes the disk out of the picture for everyone alike (SQLite
synchronous=NORMAL, PostgreSQL fsync=off), which shows the CPU cost of each contender.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentfsm.events import event_to_dict
from agentfsm.stores import SQLiteEventStore, StoreOptions
from agentfsm.stores.postgres import PostgresEventStore
from agentfsm.testing import scripted_run
from agentfsm.testing.fixtures.postgres_server import postgres_server
from benchmarks.raw import batches, rows_of, sqlite_raw_conn
from benchmarks.raw import raw_sqlite as raw_sqlite_rows

EVENTS_PER_ROUND = {1: 200, 10: 1000, 100: 4000}
LG_STEPS = 200
LOAD_EVENTS_TURNS = 2000  # 1 + 5 * 2000 = 10,001 events


# -- contenders: each returns seconds for one round ------------------------------------------


def ours(store: Any, run_id: str, n: int, size: int) -> float:
    events = scripted_run(run_id, n // 5)[:n]
    parts = batches(events, size)
    version = 0
    t = time.perf_counter()
    for part in parts:
        version = store.append(run_id, part, version).version
    return time.perf_counter() - t


def raw_sqlite(conn: sqlite3.Connection, run_id: str, n: int, size: int) -> float:
    return raw_sqlite_rows(conn, rows_of(scripted_run(run_id, n // 5)[:n]), size)


def raw_postgres(conn: psycopg.Connection[Any], run_id: str, n: int, size: int) -> float:
    parts = batches(rows_of(scripted_run(run_id, n // 5)[:n]), size)
    sql = "INSERT INTO raw_events (run_id, sequence, type, data, hash) VALUES (%s, %s, %s, %s, %s)"
    t = time.perf_counter()
    with conn.cursor() as cur:
        for part in parts:
            if len(part) == 1:
                cur.execute(sql, part[0])
            else:
                cur.executemany(sql, part)
            conn.commit()
    return time.perf_counter() - t


def langgraph_steps(saver: Any, thread: str, steps: int) -> float:
    from langgraph.checkpoint.base import empty_checkpoint

    payloads = [event_to_dict(e) for e in scripted_run(thread, steps // 5 + 1)[:steps]]
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    t = time.perf_counter()
    for i, payload in enumerate(payloads, start=1):
        checkpoint = {
            **checkpoint,
            "id": str(uuid.uuid4()),
            "channel_values": {"event": payload, "step": i},
            "channel_versions": {"event": i, "step": i},
        }
        if "checkpoint_id" in config["configurable"]:
            saver.put_writes(config, [("event", payload)], str(uuid.uuid4()))
        config = saver.put(config, checkpoint, {"source": "loop", "step": i}, {"event": i})
    return time.perf_counter() - t


# -- the run ------------------------------------------------------------------------------------


def median_rate(times: list[float], n: int) -> float:
    return n / statistics.median(times)


def postgres_raw_conn(dsn: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS raw_events (run_id text NOT NULL, sequence bigint NOT NULL, "
        "type text NOT NULL, data text NOT NULL, hash text NOT NULL, "
        "PRIMARY KEY (run_id, sequence))"
    )
    conn.commit()
    return conn


def load_latency(open_store: Callable[[StoreOptions], Any], rounds: int) -> dict[str, float]:
    events = scripted_run("load", LOAD_EVENTS_TURNS)
    out = {}
    for label, every in (("with snapshots", 1000), ("without snapshots", None)):
        run_id = f"load-{every}"
        events = scripted_run(run_id, LOAD_EVENTS_TURNS)
        writer = open_store(StoreOptions(snapshot_every=every))
        for i, part in enumerate(batches(events, 100)):
            writer.append(run_id, part, i * 100)
        writer.close()
        reader = open_store(StoreOptions(cache_size=0))
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            reader.load(run_id)
            times.append(time.perf_counter() - t)
        reader.close()
        out[label] = statistics.median(times)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per figure")
    parser.add_argument(
        "--fast-disk",
        action="store_true",
        help="no fsync for anyone: SQLite synchronous=NORMAL, PostgreSQL fsync=off",
    )
    args = parser.parse_args()
    rounds: int = args.rounds
    sync = "NORMAL" if args.fast_disk else "FULL"

    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.sqlite import SqliteSaver

    with tempfile.TemporaryDirectory() as tmp, postgres_server(durable=not args.fast_disk) as pg:
        root = Path(tmp)
        sq_store = SQLiteEventStore(root / "ours.db", synchronous=sync)  # type: ignore[arg-type]
        sq_raw = sqlite_raw_conn(root / "raw.db", sync)
        pg_store = PostgresEventStore(pg.dsn, migrate=True)
        pg_raw = postgres_raw_conn(pg.dsn)
        lg_sqlite_conn = sqlite3.connect(root / "langgraph.db", check_same_thread=False)
        lg_sqlite = SqliteSaver(lg_sqlite_conn)
        lg_sqlite.setup()
        lg_sqlite_conn.execute(f"PRAGMA synchronous={sync}")
        lg_pg_conn = psycopg.connect(pg.dsn, autocommit=True, prepare_threshold=0)
        lg_pg = PostgresSaver(lg_pg_conn)  # type: ignore[arg-type]
        lg_pg.setup()

        appends: list[tuple[str, int, float, float]] = []
        steps: list[tuple[str, float, float]] = []
        for backend, store, raw, floor in (
            ("SQLite", sq_store, sq_raw, raw_sqlite),
            ("PostgreSQL", pg_store, pg_raw, raw_postgres),
        ):
            for size, n in EVENTS_PER_ROUND.items():
                ours_t: list[float] = []
                raw_t: list[float] = []
                for r in range(rounds):
                    run_id = f"{backend}-{size}-{r}"
                    ours_t.append(ours(store, run_id, n, size))
                    raw_t.append(floor(raw, run_id, n, size))  # type: ignore[operator]
                appends.append((backend, size, median_rate(ours_t, n), median_rate(raw_t, n)))
            saver = lg_sqlite if backend == "SQLite" else lg_pg
            ours_t, lg_t = [], []
            for r in range(rounds):
                ours_t.append(ours(store, f"{backend}-step-{r}", LG_STEPS, 1))
                lg_t.append(langgraph_steps(saver, f"{backend}-lg-{r}", LG_STEPS))
            steps.append((backend, median_rate(ours_t, LG_STEPS), median_rate(lg_t, LG_STEPS)))

        loads = {
            "SQLite": load_latency(lambda o: SQLiteEventStore(root / "load.db", options=o), rounds),
            "PostgreSQL": load_latency(lambda o: PostgresEventStore(pg.dsn, options=o), rounds),
        }
        for closeable in (sq_store, sq_raw, pg_store, pg_raw, lg_sqlite_conn, lg_pg_conn):
            closeable.close()

    disk = "no fsync (--fast-disk)" if args.fast_disk else "fsync at every commit"
    print(f"\nAppend throughput (events/s, median of {rounds} interleaved rounds; {disk})\n")
    print("| backend | events/commit | agentfsm | raw driver (floor) | ratio (target <= 1.25) |")
    print("|---|---:|---:|---:|---:|")
    for backend, size, ours_rate, raw_rate in appends:
        ratio = raw_rate / ours_rate
        mark = "ok" if ratio <= 1.25 else "MISSED"
        print(f"| {backend} | {size} | {ours_rate:,.0f} | {raw_rate:,.0f} | {ratio:.2f}x {mark} |")
    print("\nPer persisted step: one agentfsm append of one event vs. one LangGraph step\n")
    print("| backend | agentfsm appends/s | LangGraph steps/s | speed-up (target >= 3) |")
    print("|---|---:|---:|---:|")
    for backend, ours_rate, lg_rate in steps:
        ratio = ours_rate / lg_rate
        mark = "ok" if ratio >= 3 else "MISSED"
        print(f"| {backend} | {ours_rate:,.0f} | {lg_rate:,.0f} | {ratio:.2f}x {mark} |")
    print("\nload() of a 10,001-event run (median)\n")
    print("| backend | with a snapshot every 1,000 events | without snapshots |")
    print("|---|---:|---:|")
    for backend, figures in loads.items():
        with_s, without = figures.values()
        print(f"| {backend} | {with_s * 1e3:.1f} ms | {without * 1e3:.1f} ms |")


if __name__ == "__main__":
    main()
