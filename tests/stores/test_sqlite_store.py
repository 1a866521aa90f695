"""What only the SQLite store does: its file, its pragmas, damage to the file."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agentfsm.errors import (
    CorruptLogError,
    StoreError,
    StoreInconsistentError,
)
from agentfsm.events.codec import make_event
from agentfsm.reducers import replay
from agentfsm.stores import Attachment, SQLiteEventStore, StoreOptions
from agentfsm.testing import scripted_run
from agentfsm.testing._stores.scripted import tool_turn

# The schema of agentfsm before attachments (schema version 1), as it created it.
_SCHEMA_1 = """
CREATE TABLE agentfsm_meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE agentfsm_runs (run_id TEXT PRIMARY KEY, status TEXT NOT NULL,
    version INTEGER NOT NULL, updated_at TEXT) WITHOUT ROWID;
CREATE INDEX agentfsm_runs_by_status ON agentfsm_runs (status, run_id);
CREATE TABLE agentfsm_events (run_id TEXT NOT NULL, sequence INTEGER NOT NULL,
    type TEXT NOT NULL, data TEXT NOT NULL, hash TEXT NOT NULL,
    PRIMARY KEY (run_id, sequence)) WITHOUT ROWID;
CREATE TABLE agentfsm_snapshots (run_id TEXT PRIMARY KEY, sequence INTEGER NOT NULL,
    event_hash TEXT NOT NULL, data TEXT NOT NULL);
INSERT INTO agentfsm_meta VALUES ('schema_version', '1');
"""


def _fill(path: Path, runs: int = 40) -> None:
    with SQLiteEventStore(path) as store:
        for i in range(runs):
            store.append(f"run-{i:02d}", scripted_run(f"run-{i:02d}", 8), 0)


class TestFile:
    """The file the store keeps."""

    def test_the_file_is_in_wal_mode(self, tmp_path: Path) -> None:
        """A new file is switched to WAL, which other connections see."""
        SQLiteEventStore(tmp_path / "runs.db").close()
        with sqlite3.connect(tmp_path / "runs.db") as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        conn.close()

    def test_synchronous_must_be_full_or_normal(self, tmp_path: Path) -> None:
        """Only the two durability settings the docs discuss are accepted."""
        with pytest.raises(
            ValueError, match=r"^synchronous must be 'FULL' or 'NORMAL', got 'OFF'$"
        ):
            SQLiteEventStore(tmp_path / "runs.db", synchronous="OFF")  # type: ignore[arg-type]

    def test_normal_durability_stores_the_same(self, tmp_path: Path) -> None:
        """`synchronous="NORMAL"` changes when data reaches the disk, not what is stored."""
        events = scripted_run("r1", 2)
        with SQLiteEventStore(tmp_path / "runs.db", synchronous="NORMAL") as store:
            store.append("r1", events, 0)
        with SQLiteEventStore(tmp_path / "runs.db") as store:
            assert store.load("r1").dumps() == replay(events).dumps()

    def test_table_prefix_must_be_an_identifier(self, tmp_path: Path) -> None:
        """The prefix is spliced into SQL, so anything but a plain identifier is refused."""
        with pytest.raises(ValueError, match=r"^table_prefix must be a plain SQL identifier"):
            SQLiteEventStore(tmp_path / "runs.db", table_prefix="x; DROP TABLE y; --")

    def test_prefixes_keep_stores_apart_in_one_file(self, tmp_path: Path) -> None:
        """Two prefixes in one file are two independent stores."""
        with (
            SQLiteEventStore(tmp_path / "runs.db", table_prefix="a_") as a,
            SQLiteEventStore(tmp_path / "runs.db", table_prefix="b_") as b,
        ):
            a.append("r1", scripted_run("r1", 1), 0)
            b.append("r1", scripted_run("r1", 0), 0)
            assert (a.run_info("r1").version, b.run_info("r1").version) == (6, 1)

    def test_a_newer_schema_is_refused(self, tmp_path: Path) -> None:
        """A file written by a newer agentfsm is not misread."""
        SQLiteEventStore(tmp_path / "runs.db").close()
        with sqlite3.connect(tmp_path / "runs.db") as conn:
            conn.execute("UPDATE agentfsm_meta SET value = '7' WHERE key = 'schema_version'")
        conn.close()
        with pytest.raises(StoreError) as info:
            SQLiteEventStore(tmp_path / "runs.db")
        assert str(info.value) == (
            f"SQLite file '{tmp_path / 'runs.db'}' has schema version 7; this agentfsm reads "
            "version 6: upgrade agentfsm"
        )

    def test_a_version_1_file_gains_the_attachments_table(self, tmp_path: Path) -> None:
        """A file with the first schema opens, keeps its runs, gains attachments, snapshot
        digests and a key record (the opening handle's, whose key its first link is under);
        its old snapshot, which has no digest, is replayed past until rewritten."""
        events = scripted_run("r1", 2)
        source, path = tmp_path / "source.db", tmp_path / "runs.db"
        with SQLiteEventStore(source, options=StoreOptions(snapshot_every=4)) as store:
            store.append("r1", events, 0)
        with sqlite3.connect(path) as conn:
            conn.executescript(_SCHEMA_1)
            conn.execute("ATTACH DATABASE ? AS source", (str(source),))
            conn.execute(
                "INSERT INTO agentfsm_runs "
                "SELECT run_id, status, version, updated_at FROM source.agentfsm_runs"
            )
            conn.execute("INSERT INTO agentfsm_events SELECT * FROM source.agentfsm_events")
            conn.execute(
                "INSERT INTO agentfsm_snapshots "
                "SELECT run_id, sequence, event_hash, data FROM source.agentfsm_snapshots"
            )
        conn.close()
        with SQLiteEventStore(path) as store, capture_logs() as logs:
            assert store.load("r1").dumps() == replay(events).dumps()
            assert store.verify("r1").ok
            store.put_attachment("r1", "state", b"\x00saved", version=11)
        assert [log["reason"] for log in logs] == [
            "it has no digest (written by an older agentfsm)"
        ]
        with SQLiteEventStore(path) as store:
            assert store.attachment("r1", "state") == Attachment("r1", "state", b"\x00saved", 11)
        with sqlite3.connect(path) as conn:
            meta = conn.execute("SELECT key, value FROM agentfsm_meta ORDER BY key").fetchall()
            snapshots = conn.execute("SELECT run_id, sequence FROM agentfsm_snapshots").fetchall()
        conn.close()
        assert (meta, snapshots) == (
            [("integrity", "unkeyed"), ("schema_version", "6")],
            [("r1", 11)],
        )

    def test_a_version_5_file_numbers_its_runs_by_their_first_event(self, tmp_path: Path) -> None:
        """Version 6 adds runs.created: a version-5 file (without it) has its runs numbered
        by their first event's time, which is what it kept of when each began (`zeta`,
        written first but begun later, is the newer), and a run made after the upgrade is
        the newest of all."""
        path = tmp_path / "runs.db"
        times = {"zeta": "2026-01-01T00:00:10+00:00", "alpha": "2026-01-01T00:00:00+00:00"}
        with SQLiteEventStore(path) as store:
            for run_id, at in times.items():
                store.append(run_id, [make_event("run.started", run_id=run_id, sequence=1,
                                                 occurred_at=at)], 0)  # fmt: skip
        with sqlite3.connect(path) as conn:  # what version 5 wrote
            conn.execute("DROP INDEX agentfsm_runs_by_created")
            conn.execute("DROP INDEX agentfsm_runs_by_status_created")
            conn.execute("ALTER TABLE agentfsm_runs DROP COLUMN created")
            conn.execute("UPDATE agentfsm_meta SET value = '5' WHERE key = 'schema_version'")
        conn.close()
        with SQLiteEventStore(path) as store:
            assert [r.run_id for r in store.runs(order="newest")] == ["zeta", "alpha"]
            store.append("beta", scripted_run("beta", 0), 0)
            assert [r.run_id for r in store.runs(order="newest")] == ["beta", "zeta", "alpha"]
        with sqlite3.connect(path) as conn:
            numbers = conn.execute(
                "SELECT run_id, created FROM agentfsm_runs ORDER BY created"
            ).fetchall()
            version = conn.execute(
                "SELECT value FROM agentfsm_meta WHERE key = 'schema_version'"
            ).fetchone()
        conn.close()
        assert (numbers, version) == ([("alpha", 1), ("zeta", 2), ("beta", 3)], ("6",))

    def test_a_page_of_runs_costs_the_same_on_20_times_the_runs(self, tmp_path: Path) -> None:
        """A page by creation (of every run or of some statuses, deep in the list or not),
        a page by status and a bounded count each take about as many SQLite steps over
        20,000 runs as over 1,000: index ranges, never a scan or a sort of every run."""
        store = SQLiteEventStore(tmp_path / "runs.db")

        def grow(to: int) -> None:  # runs rows only: listing reads nothing else
            store._conn.execute(
                "WITH RECURSIVE n(i) AS (SELECT coalesce(max(created), 0) + 1 FROM agentfsm_runs "
                "UNION ALL SELECT i + 1 FROM n WHERE i < ?) INSERT INTO agentfsm_runs "
                "(run_id, status, version, updated_at, created) SELECT printf('r%06d', i), "
                "CASE i % 3 WHEN 0 THEN 'running' WHEN 1 THEN 'completed' ELSE 'failed' END, "
                "1, '', i FROM n",
                (to,),
            )

        def steps(read: Callable[[], object]) -> int:
            counted = [0]

            def tick() -> int:
                counted[0] += 1
                return 0

            store._conn.set_progress_handler(tick, 1)
            try:
                read()
            finally:
                store._conn.set_progress_handler(None, 1)
            return counted[0]

        some = ["completed", "running"]
        reads = {
            "newest": lambda: store.runs(order="newest", limit=50, after="r000900"),
            "newest of some": lambda: store.runs(some, order="newest", limit=50),
            "oldest of some": lambda: store.runs(some, order="oldest", limit=50, after="r000500"),
            "by status": lambda: store.runs(some, order="status", limit=50, after="r000501"),
            "count": lambda: store.count_runs("running", exact_up_to=200),
        }
        try:
            grow(1000)
            few = {name: steps(read) for name, read in reads.items()}
            grow(20_000)
            many = {name: steps(read) for name, read in reads.items()}
        finally:
            store.close()
        grew = {name for name in reads if many[name] > 2 * few[name]}
        assert grew == set(), (few, many)

    def test_a_row_written_behind_the_store_cannot_fork_the_run(self, tmp_path: Path) -> None:
        """An event inserted without moving the runs row: the next append says the store is
        inconsistent (never a race to retry), and writes nothing."""
        with SQLiteEventStore(tmp_path / "runs.db") as store:
            store.append("r1", scripted_run("r1", 0), 0)
            with sqlite3.connect(tmp_path / "runs.db") as conn:
                conn.execute(
                    "INSERT INTO agentfsm_events VALUES ('r1', 2, 'model.started', '{}', '')"
                )
            conn.close()
            with pytest.raises(StoreInconsistentError) as info:
                store.append("r1", tool_turn("r1", 2, "a"), 1)
            assert str(info.value) == (
                "run 'r1': store inconsistent: the runs table says version 1, but the log goes "
                "on to sequence 2; it was changed outside agentfsm (see `verify`)"
            )
            assert store.run_info("r1").version == 1


class TestDamage:
    """Damage to the file is reported, never read as a different run."""

    def test_a_damaged_page_names_the_run_and_spares_the_others(self, tmp_path: Path) -> None:
        """Garbage over one page fails the runs stored there, by name; the rest load."""
        path = tmp_path / "runs.db"
        _fill(path)
        data = bytearray(path.read_bytes())
        page = data.find(b'"run_id":"run-20","sequence":30') // 4096
        data[page * 4096 : page * 4096 + 8] = b"\xff" * 8
        path.write_bytes(bytes(data))
        damaged: dict[str, CorruptLogError] = {}
        with SQLiteEventStore(path) as store:
            for i in range(40):
                run_id = f"run-{i:02d}"
                try:
                    record = store.load(run_id)
                except CorruptLogError as exc:
                    damaged[run_id] = exc
                    continue
                assert record.dumps() == replay(scripted_run(run_id, 8)).dumps()
            assert len(store.runs()) == 40
        for run_id, exc in damaged.items():
            at = "" if exc.sequence is None else f", sequence {exc.sequence}"
            assert exc.run_id == run_id
            assert str(exc).startswith(
                f"run '{run_id}'{at}: the SQLite file '{path}' is damaged where this run is "
                "stored ("
            )
        assert "run-20" in damaged
        assert 1 <= len(damaged) <= 3

    def test_a_truncated_file_is_refused_and_left_as_it_is(self, tmp_path: Path) -> None:
        """A file cut short cannot be opened; the error names it, and the file is untouched."""
        path = tmp_path / "runs.db"
        _fill(path)
        size = path.stat().st_size
        with path.open("r+b") as f:
            f.truncate(size // 2 // 4096 * 4096)
        before = path.read_bytes()
        with pytest.raises(StoreError) as info:
            SQLiteEventStore(path)
        assert str(info.value) == (
            f"SQLite file '{path}' cannot be used: database disk image is malformed"
        )
        assert path.read_bytes() == before

    def test_a_file_that_is_not_a_database_is_refused(self, tmp_path: Path) -> None:
        """Some other file at the path is reported, not overwritten."""
        path = tmp_path / "runs.db"
        path.write_text("these are my notes, not a database\n" * 200)
        with pytest.raises(StoreError) as info:
            SQLiteEventStore(path)
        assert str(info.value) == f"SQLite file '{path}' cannot be used: file is not a database"
        assert path.read_text().startswith("these are my notes")
