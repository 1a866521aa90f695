"""Fixtures for the store tests: row tamperers (the PostgreSQL server is in tests/conftest.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import attrs

from agentfsm.stores import MemoryStorage, RunInfo, StoredEvent, StoredSnapshot


@attrs.frozen
class MemoryTamper:
    """Edits a `MemoryStorage` behind the store's back."""

    storage: MemoryStorage

    def _replace(self, run_id: str, sequence: int, **changes: str) -> None:
        log = self.storage.events[run_id]
        i = next(i for i, row in enumerate(log) if row.sequence == sequence)
        log[i] = attrs.evolve(log[i], **changes)

    def set_event_data(self, run_id: str, sequence: int, data: str) -> None:
        self._replace(run_id, sequence, data=data)

    def set_event_hash(self, run_id: str, sequence: int, hash: str) -> None:
        self._replace(run_id, sequence, hash=hash)

    def delete_event(self, run_id: str, sequence: int) -> None:
        log = self.storage.events[run_id]
        log[:] = [row for row in log if row.sequence != sequence]

    def set_snapshot(self, run_id: str, snapshot: StoredSnapshot) -> None:
        self.storage.snapshots[run_id] = snapshot

    def set_runs_version(self, run_id: str, version: int) -> None:
        self.storage.runs[run_id] = attrs.evolve(self.storage.runs[run_id], version=version)

    def set_meta(self, key: str, value: str | None) -> None:
        if value is None:
            self.storage.meta.pop(key, None)
        else:
            self.storage.meta[key] = value

    def set_run(self, info: RunInfo) -> None:
        self.storage.runs[info.run_id] = info


@attrs.frozen
class SQLiteTamper:
    """Edits a store's SQLite file through a connection of its own."""

    path: Path
    prefix: str = "agentfsm_"

    def _run(self, sql: str, args: tuple[object, ...]) -> None:
        with sqlite3.connect(self.path) as conn:
            conn.execute(sql.replace("{p}", self.prefix), args)
        conn.close()

    def set_event_data(self, run_id: str, sequence: int, data: str) -> None:
        self._run(
            "UPDATE {p}events SET data = ? WHERE run_id = ? AND sequence = ?",
            (data, run_id, sequence),
        )

    def set_event_hash(self, run_id: str, sequence: int, hash: str) -> None:
        self._run(
            "UPDATE {p}events SET hash = ? WHERE run_id = ? AND sequence = ?",
            (hash, run_id, sequence),
        )

    def delete_event(self, run_id: str, sequence: int) -> None:
        self._run("DELETE FROM {p}events WHERE run_id = ? AND sequence = ?", (run_id, sequence))

    def set_snapshot(self, run_id: str, snapshot: StoredSnapshot) -> None:
        s = snapshot
        self._run(
            "INSERT OR REPLACE INTO {p}snapshots (run_id, sequence, event_hash, data, digest) "
            "VALUES (?, ?, ?, ?, ?)",
            (run_id, s.sequence, s.event_hash, s.data, s.digest),
        )

    def set_runs_version(self, run_id: str, version: int) -> None:
        self._run("UPDATE {p}runs SET version = ? WHERE run_id = ?", (version, run_id))

    def set_meta(self, key: str, value: str | None) -> None:
        if value is None:
            self._run("DELETE FROM {p}meta WHERE key = ?", (key,))
        else:
            self._run("INSERT OR REPLACE INTO {p}meta VALUES (?, ?)", (key, value))

    def set_run(self, info: RunInfo) -> None:
        self._run(
            "UPDATE {p}runs SET status = ?, version = ?, updated_at = ? WHERE run_id = ?",
            (info.status, info.version, info.updated_at, info.run_id),
        )


@attrs.frozen
class PostgresTamper:
    """Edits a store's PostgreSQL tables through a connection of its own."""

    dsn: str
    prefix: str

    def _run(self, sql: str, args: tuple[object, ...]) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.replace("{p}", self.prefix), args)  # type: ignore[arg-type]

    def set_event_data(self, run_id: str, sequence: int, data: str) -> None:
        self._run(
            "UPDATE {p}events SET data = %s WHERE run_id = %s AND sequence = %s",
            (data, run_id, sequence),
        )

    def set_event_hash(self, run_id: str, sequence: int, hash: str) -> None:
        self._run(
            "UPDATE {p}events SET hash = %s WHERE run_id = %s AND sequence = %s",
            (hash, run_id, sequence),
        )

    def delete_event(self, run_id: str, sequence: int) -> None:
        self._run("DELETE FROM {p}events WHERE run_id = %s AND sequence = %s", (run_id, sequence))

    def set_snapshot(self, run_id: str, snapshot: StoredSnapshot) -> None:
        s = snapshot
        self._run(
            "INSERT INTO {p}snapshots (run_id, sequence, event_hash, data, digest) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (run_id) DO UPDATE SET "
            "sequence = EXCLUDED.sequence, event_hash = EXCLUDED.event_hash, "
            "data = EXCLUDED.data, digest = EXCLUDED.digest",
            (run_id, s.sequence, s.event_hash, s.data, s.digest),
        )

    def set_runs_version(self, run_id: str, version: int) -> None:
        self._run("UPDATE {p}runs SET version = %s WHERE run_id = %s", (version, run_id))

    def set_meta(self, key: str, value: str | None) -> None:
        if value is None:
            self._run("DELETE FROM {p}meta WHERE key = %s", (key,))
        else:
            self._run(
                "INSERT INTO {p}meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE "
                "SET value = EXCLUDED.value",
                (key, value),
            )

    def set_run(self, info: RunInfo) -> None:
        self._run(
            "UPDATE {p}runs SET status = %s, version = %s, updated_at = %s WHERE run_id = %s",
            (info.status, info.version, info.updated_at, info.run_id),
        )


__all__ = ["MemoryTamper", "PostgresTamper", "SQLiteTamper", "StoredEvent"]
