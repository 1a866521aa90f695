"""Key records and anchors: the invariants, by property, and a store from before key records.

- A key id names its key and nothing else (16 hex digits, distinct keys distinct ids, not a
  plain hash of the key); a handle may use a store exactly when their records are the same.
- A re-key, along any path of keys, leaves every run's events as they were and every chain,
  snapshot and head under the new key.
- Under a key, a stream refuses the first row whose stored hash is not its link.
- An anchor never moves back; a log is reported short exactly when it is shorter than its
  anchor, and rewritten exactly when the anchored event's hash is another.
"""

from __future__ import annotations

import hashlib
import pickle
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm import SQLiteEventStore, StoreOptions
from agentfsm.errors import ConcurrencyConflictError, CorruptLogError, IntegrityKeyError
from agentfsm.events import dump_event
from agentfsm.events.models import Event
from agentfsm.reducers.reduce import replay
from agentfsm.stores import (
    EventStore,
    MemoryEventStore,
    MemoryStorage,
    RunInfo,
    StoredEvent,
    StoredSnapshot,
)
from agentfsm.stores._append import PreparedAppend
from agentfsm.stores._checks import conflict
from agentfsm.stores._integrity import UNKEYED, Integrity, key_id
from agentfsm.stores._keys import key_refusal, rekeying, rekeying_keys
from agentfsm.stores.anchor import AnchoredHead, FileAnchor, anchor_problem
from agentfsm.stores.rekey import REKEY_TRIES, rekey
from agentfsm.testing import StoreConformance, legal_runs, scripted_run
from tests._cli_helpers import run_script, waiting_events
from tests.test_cli_keys import KEY, keyed

keys = st.binary(min_size=16, max_size=40)
maybe_keys = st.none() | keys


class TestKeyIds:
    @given(keys, keys)
    def test_a_key_id_names_its_key(self, one: bytes, other: bytes) -> None:
        """16 lower-case hex digits, the same for the same key, another for another key, and
        not a prefix of the key's plain SHA-256 (which would let a short key be searched)."""
        found = key_id(one)
        assert len(found) == 16
        assert set(found) <= set("0123456789abcdef")
        assert key_id(one) == found
        assert not hashlib.sha256(one).hexdigest().startswith(found)
        if one != other:
            assert key_id(other) != found

    @given(maybe_keys, maybe_keys)
    def test_a_handle_may_use_a_store_exactly_under_the_same_record(
        self, store_key: bytes | None, handle_key: bytes | None
    ) -> None:
        """No refusal when the records are equal; a refusal naming both otherwise; a store
        being re-keyed refuses every handle, whichever key."""
        store, handle = Integrity(store_key), Integrity(handle_key)
        refused = key_refusal(store.record, handle)
        assert (refused is None) == (store.record == handle.record)
        if refused is not None:
            assert (refused.store_key, refused.handle_key) == (store.record, handle.record)
        moving = rekeying(store.record, handle.record)
        assert rekeying_keys(moving) == (store.record, handle.record)
        assert key_refusal(moving, handle) is not None
        assert rekeying_keys(store.record) is None


class TestRekeyPaths:
    @settings(max_examples=25, deadline=None)
    @given(
        st.integers(min_value=1, max_value=4).flatmap(
            lambda n: st.tuples(*[legal_runs(run_id=f"r{i}", max_events=14) for i in range(n)])
        ),
        st.lists(maybe_keys, min_size=1, max_size=3),
        st.integers(min_value=1, max_value=5),
    )
    def test_any_path_of_keys_keeps_the_events_and_moves_every_seal(
        self, logs: tuple[list[Event], ...], path: list[bytes | None], every: int
    ) -> None:
        """Unkeyed, then each key of `path` in turn (a step to the key already held is
        skipped): each run streams the same lines, loads as its replay, and verifies under
        the key it was last moved to, its snapshot (one every `every` events) included."""
        storage = MemoryStorage()
        first = MemoryEventStore(storage, options=StoreOptions(snapshot_every=every))
        for events in logs:
            first.append(events[0].run_id, events, 0)
        current: bytes | None = None
        for new in path:
            if Integrity(new).record == Integrity(current).record:
                continue
            old_handle = MemoryEventStore(storage, options=StoreOptions(integrity_key=current))
            assert rekey(old_handle, new).rewritten == len(logs)
            current = new
        reader = MemoryEventStore(storage, options=StoreOptions(integrity_key=current))
        for events in logs:
            run_id = events[0].run_id
            assert reader.verify(run_id).ok
            assert [dump_event(e) for e in reader.events(run_id)] == list(map(dump_event, events))
            assert reader.load(run_id).dumps() == replay(events).dumps()


class TestKeyedStreams:
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.integers(min_value=1, max_value=11), st.integers(min_value=0, max_value=11))
    def test_the_first_bad_link_is_refused_from_any_start(self, bad: int, after: int) -> None:
        """One row's hash replaced: a stream from before it fails there, one from the row
        itself fails at the next (it links to the replaced hash), one from later is fine."""
        storage = MemoryStorage()
        events = scripted_run("r1", 2)
        MemoryEventStore(storage, options=StoreOptions(integrity_key=KEY)).append("r1", events, 0)
        log = storage.events["r1"]
        log[bad - 1] = type(log[bad - 1])(bad, log[bad - 1].type, log[bad - 1].data, "0" * 64)
        reader = MemoryEventStore(storage, options=StoreOptions(integrity_key=KEY))
        fails_at = bad if after < bad else bad + 1 if after == bad and bad < 11 else None
        if fails_at is None:
            assert len(list(reader.events("r1", after=after))) == 11 - after
        else:
            with pytest.raises(CorruptLogError) as info:
                list(reader.events("r1", after=after))
            assert info.value.sequence == fails_at


runs_ids = st.sampled_from(["a", "b", "c"])


class TestAnchors:
    @settings(max_examples=40, deadline=None)
    @given(st.lists(st.tuples(runs_ids, st.integers(min_value=1, max_value=9)), max_size=25))
    def test_a_file_anchor_never_moves_back(
        self, tmp_path_factory: pytest.TempPathFactory, puts: list[tuple[str, int]]
    ) -> None:
        """Whatever order heads arrive in, each run's kept head has the highest version put,
        and of several puts of it the last."""
        anchor = FileAnchor(tmp_path_factory.mktemp("anchor") / "heads.db", synchronous="NORMAL")
        try:
            for n, (run_id, version) in enumerate(puts):
                anchor.put([AnchoredHead(run_id, version, f"h{n}", UNKEYED)])
            for run_id in "abc":
                mine = [(v, n) for n, (r, v) in enumerate(puts) if r == run_id]
                kept = anchor.get(run_id)
                if not mine:
                    assert kept is None
                else:
                    top = max(v for v, _ in mine)
                    last = max(n for v, n in mine if v == top)
                    assert kept == AnchoredHead(run_id, top, f"h{last}", UNKEYED)
            assert [h.run_id for h in anchor.heads()] == sorted({r for r, _ in puts})
        finally:
            anchor.close()

    @given(
        st.integers(min_value=1, max_value=50),
        st.integers(min_value=0, max_value=60),
        st.booleans(),
        st.booleans(),
    )
    def test_a_log_is_short_or_rewritten_exactly_when_it_is(
        self, anchored: int, version: int, same_hash: bool, same_key: bool
    ) -> None:
        """Truncation is reported exactly when the log ends before the anchored version; a
        rewrite exactly when, under the same key, the hash at the anchored version differs."""
        head = AnchoredHead("r1", anchored, "h", UNKEYED)
        at = None if version < anchored else ("h" if same_hash else "other")
        found = anchor_problem(head, version, at, UNKEYED if same_key else "hmac-sha256:x")
        if version < anchored:
            assert found is not None
            assert found[0] == version + 1
        elif same_key and not same_hash:
            assert found == (
                anchored,
                f"the event at sequence {anchored} is not the one the anchor records: the log "
                "was rewritten",
            )
        else:
            assert found is None

    def test_a_file_anchor_pickles_as_its_path(self, tmp_path: Path) -> None:
        """A store factory that goes to another process takes the file, not its connection."""
        anchor = FileAnchor(tmp_path / "heads.db")
        anchor.put([AnchoredHead("r1", 1, "h", UNKEYED)])
        copy = pickle.loads(pickle.dumps(anchor))
        assert (copy.path, copy.get("r1")) == (anchor.path, AnchoredHead("r1", 1, "h", UNKEYED))
        anchor.close()
        copy.close()

    def test_an_anchor_option_takes_a_path(self, tmp_path: Path) -> None:
        """`StoreOptions(anchor=PATH)` is a `FileAnchor` there; anything else is refused."""
        assert repr(StoreOptions(anchor=tmp_path / "a.db").anchor) == (
            f"FileAnchor('{tmp_path / 'a.db'}')"
        )
        with pytest.raises(TypeError, match=r"^an anchor is an object with put\(\) and get\(\)"):
            StoreOptions(anchor=42)  # type: ignore[arg-type]


class TestAStoreFromBeforeKeyRecords:
    """A keyed SQLite file written by the previous release (schema 3, no key record): the
    first handle records its key only if the first run's first link is under it."""

    def _old(self, path: Path) -> Path:
        with SQLiteEventStore(path, options=StoreOptions(integrity_key=KEY)) as store:
            store.append("r1", waiting_events("r1"), 0)
        with sqlite3.connect(path) as conn:
            conn.execute("DELETE FROM agentfsm_meta WHERE key = 'integrity'")
            conn.execute("UPDATE agentfsm_meta SET value = '3' WHERE key = 'schema_version'")
        conn.close()
        return path

    def test_a_keyless_approve_cannot_adopt_it(self, tmp_path: Path) -> None:
        """The attack on an upgraded deployment: refused, exit 2; with the key it goes on,
        and the file records the key and the current schema (5)."""
        path = self._old(tmp_path / "runs.db")
        refused = run_script("approve", "r1", "a1", "--store", str(path), env=keyed(None))
        assert (refused.returncode, refused.stderr) == (
            2,
            f"agentfsm approve: error: SQLite file '{path}': the store records no key yet, and "
            "its run 'r1' was not written without one (it was written under a key, or "
            "changed): give it the store's key (AGENTFSM_INTEGRITY_KEY or "
            "StoreOptions(integrity_key=...))\n",
        )
        approved = run_script("approve", "r1", "a1", "--store", str(path), env=keyed(KEY))
        assert approved.returncode == 0
        with sqlite3.connect(path) as conn:
            meta = conn.execute("SELECT key, value FROM agentfsm_meta ORDER BY key").fetchall()
        conn.close()
        assert meta == [("integrity", Integrity(KEY).record), ("schema_version", "6")]


class WrittenBehindTheRecord(SQLiteEventStore):
    """A store whose run `victim` is moved, before each of its rewrites, by a writer that
    does not check the key record (an older agentfsm): its version goes up by one."""

    victim = "r1"

    def _rewrite_run(self, run_id: str, version: int, *args: Any) -> bool:
        if run_id == self.victim:
            moved = sqlite3.connect(self.path)
            with moved:
                moved.execute(
                    "UPDATE agentfsm_runs SET version = version + 1 WHERE run_id = ?", (run_id,)
                )
            moved.close()
        return super()._rewrite_run(run_id, version, *args)


class TestARekeyRacingAWriterThatSkipsTheRecord:
    """The re-key writes a run only at the version it read: a writer it cannot stop is a
    conflict, never a run half under each key."""

    def _store(self, path: Path, victim: str) -> WrittenBehindTheRecord:
        filled = SQLiteEventStore(path)
        for run_id in ("r0", "r1"):
            filled.append(run_id, scripted_run(run_id, 1), 0)
        filled.close()
        store = WrittenBehindTheRecord(path)
        store.victim = victim
        return store

    def test_on_the_first_run_the_store_is_left_as_it_was(self, tmp_path: Path) -> None:
        """Nothing rewritten: the record is put back, the store works under its old key."""
        store = self._store(tmp_path / "runs.db", "r0")
        with pytest.raises(ConcurrencyConflictError) as info:
            rekey(store, KEY)
        assert (str(info.value), info.value.__notes__) == (
            f"run 'r0': expected version {6 + REKEY_TRIES - 1}, but the store is at version "
            f"{6 + REKEY_TRIES}; reload the run and try again",
            ["nothing was re-keyed: the store is as it was"],
        )
        store.close()
        with SQLiteEventStore(tmp_path / "runs.db") as after:
            assert after.verify("r1").ok

    def test_later_the_store_stays_refused_until_the_rekey_is_run_again(
        self, tmp_path: Path
    ) -> None:
        """A run already rewritten: the store stays half re-keyed, which every handle is
        refused; the re-key run again (the writer stopped) finishes it."""
        store = self._store(tmp_path / "runs.db", "r1")
        with pytest.raises(ConcurrencyConflictError) as info:
            rekey(store, KEY)
        assert info.value.__notes__ == [
            "the store stays half re-keyed, and no handle may use it: stop the writer, then "
            "run the re-key again with the same keys"
        ]
        store.close()
        for key in (None, KEY):
            with (
                SQLiteEventStore(
                    tmp_path / "runs.db", options=StoreOptions(integrity_key=key)
                ) as s,
                pytest.raises(IntegrityKeyError),
            ):
                s.runs()
        with SQLiteEventStore(tmp_path / "runs.db") as again:  # the writer stopped
            report = rekey(again, KEY)
        assert (report.rewritten, report.done) == (1, 1)
        with SQLiteEventStore(tmp_path / "runs.db", options=StoreOptions(integrity_key=KEY)) as s:
            assert s.verify("r0").ok
            assert s.verify("r1").problem == (
                "store inconsistent: the runs table says version 11 but the log ends at 6"
            )


class RowsInADict(EventStore):
    """A backend written before key records existed: the five required methods over a
    shared dict, no meta. Its store records no key; everything else works."""

    def __init__(self, tables: dict[str, Any], options: StoreOptions) -> None:
        super().__init__(options)
        self.tables = tables
        self._open_key_check()  # a no-op: the backend keeps no meta

    def _read_run(self, run_id: str) -> RunInfo | None:
        return self.tables["runs"].get(run_id)

    def _read_rows(self, run_id: str, after: int) -> Iterator[StoredEvent]:
        return iter([r for r in self.tables["events"].get(run_id, []) if r.sequence > after])

    def _read_snapshot(self, run_id: str) -> StoredSnapshot | None:
        return self.tables["snapshots"].get(run_id)

    def _write(self, prepared: PreparedAppend) -> None:
        current = self.tables["runs"].get(prepared.run_id)
        actual = current.version if current is not None else 0
        if actual != prepared.expected_version:
            raise conflict(prepared.run_id, prepared.expected_version, actual)
        self.tables["events"].setdefault(prepared.run_id, []).extend(prepared.rows)
        self.tables["runs"][prepared.run_id] = prepared.info
        if prepared.snapshot is not None:
            self.tables["snapshots"][prepared.run_id] = prepared.snapshot

    def _list_runs(
        self, statuses: tuple[str, ...] | None, limit: int | None, after: str | None
    ) -> list[RunInfo]:
        infos = sorted(self.tables["runs"].values(), key=lambda info: info.run_id)
        return [
            i
            for i in infos
            if (statuses is None or i.status in statuses) and (after is None or i.run_id > after)
        ][:limit]


class TestABackendWithoutMeta(StoreConformance):
    """The conformance suite on a backend without meta: the key record checks are skipped,
    saying so, and every other check (anchors included) passes."""

    @pytest.fixture
    def make_store(self) -> Callable[[StoreOptions], EventStore]:
        tables: dict[str, Any] = {"runs": {}, "events": {}, "snapshots": {}}
        return lambda options: RowsInADict(tables, options)
