"""The floor every store benchmark compares with: the same rows, inserted by the raw driver.

`rows_of` builds exactly the rows our stores write (line, chain hash); `sqlite_raw_conn`
opens an SQLite file with the same journal and table layout; `raw_sqlite` inserts rows in
batches of `size` per commit and returns the seconds it took.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from agentfsm.events import canonical_json, dump_event, event_to_dict
from agentfsm.events.models import Event
from agentfsm.stores import GENESIS_HASH, chain_hash

__all__ = ["batches", "raw_sqlite", "rows_of", "sqlite_raw_conn"]


def rows_of(events: list[Event]) -> list[tuple[str, int, str, str, str]]:
    """The exact rows our store writes for `events` (what the raw floor inserts)."""
    rows = []
    previous = GENESIS_HASH
    for e in events:
        previous = chain_hash(previous, canonical_json(event_to_dict(e)))
        rows.append((e.run_id, e.sequence, e.type, dump_event(e), previous))
    return rows


def batches(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def sqlite_raw_conn(path: Path, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS raw_events (run_id TEXT NOT NULL, sequence INTEGER NOT NULL, "
        "type TEXT NOT NULL, data TEXT NOT NULL, hash TEXT NOT NULL, "
        "PRIMARY KEY (run_id, sequence)) WITHOUT ROWID"
    )
    return conn


def raw_sqlite(conn: sqlite3.Connection, rows: list[Any], size: int) -> float:
    """Seconds to insert `rows`, `size` per transaction."""
    parts = batches(rows, size)
    sql = "INSERT INTO raw_events (run_id, sequence, type, data, hash) VALUES (?, ?, ?, ?, ?)"
    t = time.perf_counter()
    for part in parts:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(sql, part)
        conn.execute("COMMIT")
    return time.perf_counter() - t
