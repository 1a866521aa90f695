"""`agentfsm rekey`: a store moved to a new key (or given one, or stripped of it), whole or
resumable, never half-used: the real command in a process, killed with SIGKILL mid-way.

There was no way to change a store's key: every process had to keep the one it was
created with, forever.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentfsm import SQLiteEventStore, StoreOptions
from agentfsm.errors import IntegrityKeyError
from agentfsm.events._canonical import canonical_text
from agentfsm.stores._integrity import Integrity
from agentfsm.testing import scripted_run
from agentfsm.testing._stores.scripted import tool_turn
from tests._cli_helpers import AGENTFSM, run_script
from tests.stores.conftest import SQLiteTamper
from tests.test_cli_keys import KEY, OTHER_KEY, key_id

NEW_ENV = "AGENTFSM_NEW_INTEGRITY_KEY"


def keys(old: bytes | None, new: bytes | None) -> dict[str, str]:
    """The environment of a re-key from `old` to `new` (None: empty)."""
    return {
        "AGENTFSM_INTEGRITY_KEY": old.decode() if old else "",
        NEW_ENV: new.decode() if new else "",
    }


def filled(path: Path, key: bytes | None, runs: int = 2, *, snapshot_every: int = 4) -> Path:
    """A SQLite store under `key` with `runs` runs of one tool turn (6 events) each."""
    options = StoreOptions(integrity_key=key, snapshot_every=snapshot_every)
    with SQLiteEventStore(path, options=options) as store:
        for i in range(runs):
            store.append(f"r{i:05d}", scripted_run(f"r{i:05d}", 1), 0)
    return path


def verified(spec: str, key: bytes | None) -> subprocess.CompletedProcess[str]:
    return run_script("verify", "--store", spec, env=keys(key, None))


class TestRekey:
    def test_a_key_is_added_changed_and_removed(self, tmp_path: Path) -> None:
        """Each step says what it did; the store then takes the new key and refuses the old."""
        path = str(filled(tmp_path / "runs.db", None))
        steps: list[tuple[bytes | None, bytes | None, str]] = [
            (None, KEY, f"no key to key id '{key_id(KEY)}'"),
            (KEY, OTHER_KEY, f"key id '{key_id(KEY)}' to key id '{key_id(OTHER_KEY)}'"),
            (OTHER_KEY, None, f"key id '{key_id(OTHER_KEY)}' to no key"),
        ]
        for old, new, moved in steps:
            result = run_script("rekey", "--store", path, env=keys(old, new))
            assert (result.returncode, result.stdout, result.stderr) == (
                0,
                f"re-keyed 2 runs from {moved}\n",
                "",
            )
            assert verified(path, new).stdout == "ok: 2 runs, 12 events, every hash chain intact\n"
            assert verified(path, old).returncode == 2

    def test_nothing_to_do_is_a_usage_error(self, tmp_path: Path) -> None:
        """No key on either side, the store's own key again, or a new key too short: exit 2,
        nothing changed."""
        path = str(filled(tmp_path / "runs.db", KEY))
        cases = [
            (
                keys(None, None),
                "agentfsm rekey: nothing to do: set AGENTFSM_NEW_INTEGRITY_KEY to the new key "
                "(and AGENTFSM_INTEGRITY_KEY to the store's key, if it has one)\n",
            ),
            (
                keys(KEY, KEY),
                f"agentfsm rekey: the store is under key id '{key_id(KEY)}' already: nothing "
                "to re-key\n",
            ),
            (
                {**keys(KEY, None), NEW_ENV: "short"},
                "agentfsm rekey: AGENTFSM_NEW_INTEGRITY_KEY must be at least 16 bytes, got 5\n",
            ),
        ]
        for env, stderr in cases:
            result = run_script("rekey", "--store", path, env=env)
            assert (result.returncode, result.stdout, result.stderr) == (2, "", stderr)
        assert verified(path, KEY).returncode == 0

    def test_the_wrong_old_key_is_refused(self, tmp_path: Path) -> None:
        """The old key must be the store's: the handle is refused as it opens."""
        path = filled(tmp_path / "runs.db", KEY)
        result = run_script("rekey", "--store", str(path), env=keys(OTHER_KEY, None))
        assert (result.returncode, result.stderr) == (
            2,
            f"agentfsm rekey: error: SQLite file '{path}': the store is keyed with key id "
            f"'{key_id(KEY)}', but this handle's key has id '{key_id(OTHER_KEY)}': give it "
            "the store's key (AGENTFSM_INTEGRITY_KEY or StoreOptions(integrity_key=...))\n",
        )

    def test_a_forged_row_is_not_re_signed(self, tmp_path: Path) -> None:
        """A row edited without the key: exit 1 naming it, and the store is as it was (still
        usable with its key, the forged row still reported)."""
        path = filled(tmp_path / "runs.db", KEY)
        SQLiteTamper(path).set_event_hash("r00001", 5, "0" * 64)
        result = run_script("rekey", "--store", str(path), env=keys(KEY, OTHER_KEY))
        assert (result.returncode, result.stdout, result.stderr) == (
            1,
            "",
            "agentfsm rekey: refused: run 'r00001', sequence 5: the hash does not match: this "
            "event or its stored hash was changed (or the store was written under another "
            "integrity key, or none); nothing was re-keyed: the store is as it was\n",
        )
        after = verified(str(path), KEY)
        assert (after.returncode, after.stdout.splitlines()[-1]) == (1, "1 of 2 runs has findings")


def _first_links(path: Path, new: Integrity) -> dict[str, str]:
    """Each run's first link under `new`: what its first row holds once it is re-keyed."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT run_id, data FROM agentfsm_events WHERE sequence = 1"
        ).fetchall()
    conn.close()
    return {run_id: new.link("", canonical_text(data)) for run_id, data in rows}


def _done(path: Path, links: dict[str, str]) -> int:
    with sqlite3.connect(path, timeout=30) as conn:
        rows = conn.execute(
            "SELECT run_id, hash FROM agentfsm_events WHERE sequence = 1"
        ).fetchall()
    conn.close()
    return sum(links[run_id] == link for run_id, link in rows)


class TestKilledMidWay:
    """SIGKILL the re-key while it rewrites a store of many runs; run it again."""

    RUNS = 1500

    def test_a_killed_rekey_is_resumed_and_the_store_unusable_meanwhile(
        self, tmp_path: Path
    ) -> None:
        """Killed after some runs: every handle is refused under either key (not silently
        half-read), the second run finishes the rest, and every run verifies under the new
        key."""
        path = filled(tmp_path / "runs.db", None, self.RUNS, snapshot_every=3)
        links = _first_links(path, Integrity(KEY))
        rekeying = subprocess.Popen(
            [str(AGENTFSM), "rekey", "--store", str(path)],
            env={**os.environ, **keys(None, KEY)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            while (done := _done(path, links)) < 50 and time.monotonic() < deadline:
                time.sleep(0.005)
            os.kill(rekeying.pid, signal.SIGKILL)
        finally:
            rekeying.wait()
        killed_at = _done(path, links)
        assert 50 <= killed_at < self.RUNS, f"the re-key was not killed mid-way ({done})"
        rekeying_message = (
            "the store is being re-keyed from no key to key id "
            f"'{key_id(KEY)}': no handle may use it until `agentfsm rekey` finishes (run it "
            "again with the same keys to resume it)\n"
        )
        for key in (None, KEY):
            refused = verified(str(path), key)
            assert (refused.returncode, refused.stderr) == (
                2,
                f"agentfsm verify: error: {rekeying_message}",
            )
        resumed = run_script("rekey", "--store", str(path), env=keys(None, KEY))
        rewritten = self.RUNS - killed_at
        assert (resumed.returncode, resumed.stdout, resumed.stderr) == (
            0,
            f"re-keyed {rewritten:,} runs from no key to key id '{key_id(KEY)}' "
            f"({killed_at:,} were done already)\n",
            "",
        )
        assert verified(str(path), KEY).stdout == (
            f"ok: {self.RUNS:,} runs, {6 * self.RUNS:,} events, every hash chain intact\n"
        )


def _opened(spec: str, key: bytes) -> Any:
    options = StoreOptions(integrity_key=key)
    if spec.startswith("postgresql://"):
        from agentfsm.stores.postgres import PostgresEventStore

        return PostgresEventStore(spec, options=options)
    return SQLiteEventStore(spec, options=options)


def _appender(spec: str, key: bytes, run_id: str, stop: Any, ready: Any, results: Any) -> None:
    """A writer that keeps appending turns to its run under `key` until told to stop (it
    says when its first append is in), and counts how its appends ended."""
    store = _opened(spec, key)
    counts = {"ok": 0, "refused": 0}
    version = store.load(run_id).version
    turn = 0
    while not stop.is_set():
        turn += 1
        try:
            batch = tool_turn(run_id, version + 1, f"w{turn}")
            version = store.append(run_id, batch, version).version
        except IntegrityKeyError:
            counts["refused"] += 1
            time.sleep(0.01)
        else:
            counts["ok"] += 1
            if counts["ok"] == 1:
                ready.put(run_id)
    store.close()
    results.put(counts)


def race_a_rekey(spec: str, runs: int) -> None:
    """Three processes appending under the old key while `agentfsm rekey` moves the store
    at `spec` (holding `runs` runs) to the new one: each append is stored before the re-key
    or refused (`IntegrityKeyError`); afterwards every run verifies under the new key, so
    none holds a link of the old."""
    context = multiprocessing.get_context("forkserver")
    stop, ready, results = context.Event(), context.Queue(), context.Queue()
    writers = [
        context.Process(target=_appender, args=(spec, KEY, f"r{i:05d}", stop, ready, results))
        for i in range(3)
    ]
    for writer in writers:
        writer.start()
    for _ in writers:
        ready.get(timeout=60)
    result = run_script("rekey", "--store", spec, env=keys(KEY, OTHER_KEY))
    time.sleep(0.3)
    stop.set()
    counts = [results.get(timeout=60) for _ in writers]
    for writer in writers:
        writer.join(timeout=60)
    assert (result.returncode, result.stderr) == (0, "")
    assert all(c["ok"] > 0 and c["refused"] > 0 for c in counts), counts
    check = verified(spec, OTHER_KEY)
    assert (check.returncode, check.stdout.split(",")[0]) == (0, f"ok: {runs} runs")


class TestWritersDuringARekey:
    def test_writers_are_refused_never_mixed_in(self, tmp_path: Path) -> None:
        """SQLite: the re-key's record change waits for the write lock, so no append in
        flight reads the old record after it."""
        race_a_rekey(str(filled(tmp_path / "runs.db", KEY, 300)), 300)


_databases = itertools.count()


@pytest.fixture
def fresh_database(postgres_dsn: str) -> Iterator[str]:
    """A database of its own, so the command's default table names are this test's."""
    name = f"rekey_{os.getpid()}_{next(_databases)}"
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")  # type: ignore[arg-type]
        admin.execute(f"CREATE DATABASE {name}")  # type: ignore[arg-type]
    try:
        yield psycopg.conninfo.make_conninfo(postgres_dsn, dbname=name)
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")  # type: ignore[arg-type]


class TestPostgres:
    def test_writers_are_refused_never_mixed_in(self, fresh_database: str) -> None:
        """PostgreSQL: the record change waits for every append in flight, and an append
        queued behind it reads the new record."""
        from agentfsm.stores.postgres import PostgresEventStore

        spec = _url(fresh_database)
        with PostgresEventStore(spec, migrate=True, options=StoreOptions(integrity_key=KEY)) as s:
            for i in range(200):
                s.append(f"r{i:05d}", scripted_run(f"r{i:05d}", 1), 0)
        race_a_rekey(spec, 200)

    def test_a_killed_rekey_is_resumed(self, fresh_database: str) -> None:
        """The same on PostgreSQL: killed mid-way, refused meanwhile, resumed to the end."""
        from agentfsm.stores.postgres import PostgresEventStore

        runs = 600
        dsn = fresh_database
        with PostgresEventStore(dsn, migrate=True, options=StoreOptions(integrity_key=KEY)) as s:
            for i in range(runs):
                s.append(f"r{i:05d}", scripted_run(f"r{i:05d}", 1), 0)
        new = Integrity(OTHER_KEY)
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(
                "SELECT run_id, data FROM agentfsm_events WHERE sequence = 1"
            ).fetchall()
        links = {run_id: new.link("", canonical_text(data)) for run_id, data in rows}

        def done() -> int:
            with psycopg.connect(dsn) as conn:
                found = conn.execute(
                    "SELECT run_id, hash FROM agentfsm_events WHERE sequence = 1"
                ).fetchall()
            return sum(links[run_id] == link for run_id, link in found)

        spec = _url(dsn)
        rekeying = subprocess.Popen(
            [str(AGENTFSM), "rekey", "--store", spec],
            env={**os.environ, **keys(KEY, OTHER_KEY)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            while done() < 30 and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(rekeying.pid, signal.SIGKILL)
        finally:
            rekeying.wait()
        killed_at = done()
        assert 30 <= killed_at < runs
        assert verified(spec, OTHER_KEY).returncode == 2
        resumed = run_script("rekey", "--store", spec, env=keys(KEY, OTHER_KEY))
        assert (resumed.returncode, resumed.stdout) == (
            0,
            f"re-keyed {runs - killed_at:,} runs from key id '{key_id(KEY)}' to key id "
            f"'{key_id(OTHER_KEY)}' ({killed_at:,} were done already)\n",
        )
        assert verified(spec, OTHER_KEY).stdout == (
            f"ok: {runs:,} runs, {6 * runs:,} events, every hash chain intact\n"
        )


def _url(conninfo: str) -> str:
    """A libpq key=value string as the postgresql:// URL the command takes."""
    parts = psycopg.conninfo.conninfo_to_dict(conninfo)
    host, port = parts.get("host", "localhost"), parts.get("port", "5432")
    user = parts.get("user", "")
    auth = f"{user}@" if user else ""
    query = f"?host={host}" if str(host).startswith("/") else ""
    where = "" if query else f"{host}:{port}"
    return f"postgresql://{auth}{where}/{parts['dbname']}{query}"
