"""One key per store: the attacks on a keyed store through the command line, as an attacker
runs them (the real `agentfsm` in a process, the SQLite file edited with `sqlite3`).

Before a store recorded its key, `agentfsm approve` from a shell without the key appended
a keyless link to a keyed store (exit 0, "approved"), and every keyed handle refused the
run from then on; `export` with the key exported a forged row with exit 0.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import sqlite3
from pathlib import Path

from agentfsm import SQLiteEventStore, StoreOptions
from agentfsm.events import LogBuilder, canonical_json, dump_event, event_to_dict
from agentfsm.stores import chain_hash
from tests._cli_helpers import run_script, waiting_events

KEY = b"a test key of thirty-two bytes!!"
OTHER_KEY = b"another key, also thirty-two by!"


def key_id(key: bytes) -> str:
    """The key id a store records, computed here from its definition."""
    return hmac.new(key, b"agentfsm integrity key id", hashlib.sha256).hexdigest()[:16]


def keyed(key: bytes | None) -> dict[str, str]:
    """The environment of a shell with `key` (none: the variable empty)."""
    return {"AGENTFSM_INTEGRITY_KEY": key.decode() if key else ""}


def waiting_store(path: Path, key: bytes | None) -> Path:
    """Run `r1` waiting for approval of call `a1`, in a store under `key`."""
    with SQLiteEventStore(path, options=StoreOptions(integrity_key=key)) as store:
        store.append("r1", waiting_events("r1"), 0)
    return path


class TestOneKeyPerStore:
    """A handle whose key is not the store's is refused before it writes anything."""

    def test_a_keyless_approve_of_a_keyed_store_is_refused(self, tmp_path: Path) -> None:
        """The reported attack: exit 2 naming the key the store expects, nothing appended;
        the same approval with the key then goes through and the run verifies."""
        path = waiting_store(tmp_path / "runs.db", KEY)
        result = run_script("approve", "r1", "a1", "--store", str(path), env=keyed(None))
        assert (result.returncode, result.stdout, result.stderr) == (
            2,
            "",
            f"agentfsm approve: error: SQLite file '{path}': the store is keyed with key id "
            f"'{key_id(KEY)}', but this handle has no key: give it the store's key "
            "(AGENTFSM_INTEGRITY_KEY or StoreOptions(integrity_key=...))\n",
        )
        with SQLiteEventStore(path, options=StoreOptions(integrity_key=KEY)) as store:
            assert store.run_info("r1").version == 4
        approved = run_script("approve", "r1", "a1", "--store", str(path), env=keyed(KEY))
        assert (approved.returncode, approved.stdout.splitlines()[-1]) == (
            0,
            "run r1: running (version 5)",
        )
        with SQLiteEventStore(path, options=StoreOptions(integrity_key=KEY)) as store:
            assert store.verify("r1").ok

    def test_another_key_is_refused_naming_both(self, tmp_path: Path) -> None:
        """A handle with a wrong key: exit 2 naming the store's key id and its own."""
        path = waiting_store(tmp_path / "runs.db", KEY)
        result = run_script("approve", "r1", "a1", "--store", str(path), env=keyed(OTHER_KEY))
        assert (result.returncode, result.stderr) == (
            2,
            f"agentfsm approve: error: SQLite file '{path}': the store is keyed with key id "
            f"'{key_id(KEY)}', but this handle's key has id '{key_id(OTHER_KEY)}': give it "
            "the store's key (AGENTFSM_INTEGRITY_KEY or StoreOptions(integrity_key=...))\n",
        )

    def test_a_keyed_approve_of_a_keyless_store_is_refused(self, tmp_path: Path) -> None:
        """The other way round: a key the store was never written under is refused too."""
        path = waiting_store(tmp_path / "runs.db", None)
        result = run_script("approve", "r1", "a1", "--store", str(path), env=keyed(KEY))
        assert (result.returncode, result.stderr) == (
            2,
            f"agentfsm approve: error: SQLite file '{path}': the store is unkeyed, but this "
            f"handle has a key (key id '{key_id(KEY)}'): open it without one, or add the key "
            "with `agentfsm rekey`\n",
        )
        with SQLiteEventStore(path) as store:
            assert (store.run_info("r1").version, store.verify("r1").ok) == (4, True)


def forge_approval(path: Path) -> None:
    """What someone without the key does: append `approval.accepted` to `r1` with sqlite3,
    its link computed the only way they can (plain SHA-256), the runs row moved to match."""
    forged = LogBuilder("r1", start=5)
    forged.add("approval.accepted", action_id="a1", approver="mallory")
    event = forged.events[0]
    with sqlite3.connect(path) as conn:
        (previous,) = conn.execute(
            "SELECT hash FROM agentfsm_events WHERE run_id = 'r1' AND sequence = 4"
        ).fetchone()
        link = chain_hash(previous, canonical_json(event_to_dict(event)))
        conn.execute(
            "INSERT INTO agentfsm_events VALUES ('r1', 5, 'approval.accepted', ?, ?)",
            (dump_event(event), link),
        )
        conn.execute(
            "UPDATE agentfsm_runs SET version = 5, status = 'running', updated_at = ? "
            "WHERE run_id = 'r1'",
            (event.occurred_at,),
        )
    conn.close()


BAD_LINK = (
    "the hash does not match: this event or its stored hash was changed (or the store was "
    "written under another integrity key, or none)"
)


class TestReadersCheckLinks:
    """`export` and `replay --store` check every link they read in a keyed store, as a load
    does: a forged row is exit 1 naming the run and sequence, and nothing is half-written."""

    def test_export_refuses_a_forged_row(self, tmp_path: Path) -> None:
        """The reported attack: exit 1, the output file is not written."""
        path = waiting_store(tmp_path / "runs.db", KEY)
        forge_approval(path)
        out = tmp_path / "out.jsonl"
        result = run_script("export", "--store", str(path), "-o", str(out), env=keyed(KEY))
        assert (result.returncode, result.stdout, result.stderr) == (
            1,
            "",
            f"agentfsm export: error: run 'r1', sequence 5: {BAD_LINK}; '{out}' was not written\n",
        )
        assert not out.exists()

    def test_export_to_standard_output_says_it_is_incomplete(self, tmp_path: Path) -> None:
        """On standard output the good events are out already; stderr says the rest is cut."""
        path = waiting_store(tmp_path / "runs.db", KEY)
        forge_approval(path)
        result = run_script("export", "--store", str(path), env=keyed(KEY))
        assert (result.returncode, len(result.stdout.splitlines()), result.stderr) == (
            1,
            4,
            f"agentfsm export: error: run 'r1', sequence 5: {BAD_LINK}; the output is incomplete\n",
        )

    def test_replay_from_the_store_refuses_a_forged_row(self, tmp_path: Path) -> None:
        """`replay --store` folds the store's runs; a forged row is exit 1, nothing printed."""
        path = waiting_store(tmp_path / "runs.db", KEY)
        forge_approval(path)
        result = run_script("replay", "--store", str(path), "--format", "json", env=keyed(KEY))
        assert (result.returncode, result.stdout, result.stderr) == (
            1,
            "",
            f"agentfsm replay: error: run 'r1', sequence 5: {BAD_LINK}\n",
        )

    def test_replay_from_the_store_folds_its_runs(self, tmp_path: Path) -> None:
        """Without damage, `replay --store` prints what `replay` of its export prints."""
        path = waiting_store(tmp_path / "runs.db", KEY)
        exported = run_script("export", "--store", str(path), env=keyed(KEY))
        log = tmp_path / "runs.jsonl"
        log.write_text(exported.stdout)
        from_store = run_script("replay", "--store", str(path), "--format", "json", env=keyed(KEY))
        from_file = run_script("replay", str(log), "--format", "json", env=keyed(KEY))
        assert (from_store.returncode, from_store.stderr) == (0, "")
        assert json.loads(from_store.stdout) == json.loads(from_file.stdout)
        assert json.loads(from_store.stdout)[0]["status"] == "waiting_approval"
