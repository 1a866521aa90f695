"""`agentfsm verify`: every run of a store checked, a page at a time, and with `--anchor`
compared with the heads a file keeps (written on the first run, compared on every later one).

The docs told users to run `verify` on a schedule; there was no such command.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from agentfsm import SQLiteEventStore, StoreOptions
from agentfsm.cli import _store
from agentfsm.events import LogBuilder, parse_event
from agentfsm.fsm import registry
from agentfsm.reducers import Reducer, replay
from agentfsm.runtime import approve
from agentfsm.stores import RunInfo
from agentfsm.stores.anchor import AnchoredHead, FileAnchor
from agentfsm.testing import scripted_run
from examples.lifecycles.ticket import TICKET_TABLE
from tests._cli_helpers import run_main, run_script, waiting_events
from tests.stores.conftest import SQLiteTamper
from tests.test_cli_keys import KEY, key_id, keyed

BAD_LINK = (
    "the hash does not match: this event or its stored hash was changed (or the store was "
    "written under another integrity key, or none)"
)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Runs `r1` (6 events) and `r2` (4, waiting for approval)."""
    path = tmp_path / "runs.db"
    with SQLiteEventStore(path) as opened:
        opened.append("r1", scripted_run("r1", 1), 0)
        opened.append("r2", waiting_events("r2"), 0)
    return path


def _heads(path: Path) -> list[AnchoredHead]:
    anchor = FileAnchor(path)
    try:
        return anchor.heads()
    finally:
        anchor.close()


class TestChecks:
    def test_a_clean_store(self, capsys: pytest.CaptureFixture[str], store: Path) -> None:
        """Exit 0 and one line of totals."""
        assert run_main(capsys, "verify", "--store", str(store)) == (
            0,
            "ok: 2 runs, 10 events, every hash chain intact\n",
            "",
        )

    def test_each_finding_is_a_line_and_exit_1(
        self, capsys: pytest.CaptureFixture[str], store: Path
    ) -> None:
        """A changed row is named by run and sequence; the other run is still checked."""
        SQLiteTamper(store).set_event_hash("r1", 3, "0" * 64)
        assert run_main(capsys, "verify", "--store", str(store)) == (
            1,
            f"run 'r1', sequence 3: {BAD_LINK}\n1 of 2 runs has findings\n",
            "",
        )

    def test_json_has_the_documented_shape(
        self, capsys: pytest.CaptureFixture[str], store: Path
    ) -> None:
        """One object: the anchor, the findings, then the counts."""
        SQLiteTamper(store).set_event_hash("r1", 3, "0" * 64)
        with SQLiteEventStore(store) as opened:
            head = opened.verify("r1").head_hash
        code, out, err = run_main(capsys, "verify", "--store", str(store), "--json")
        assert (code, err) == (1, "")
        assert out == (
            '{"anchor": null, "findings": [\n'
            + json.dumps(
                {
                    "checked": 2,
                    "head_hash": head,
                    "problem": BAD_LINK,
                    "run_id": "r1",
                    "sequence": 3,
                },
                sort_keys=True,
                ensure_ascii=False,
            )
            + '\n], "events": 6, "ok": false, "recorded": 0, "runs": 2}\n'
        )
        assert run_main(capsys, "verify", "--store", str(store), "--format", "json")[1] == out

    def test_one_run(self, capsys: pytest.CaptureFixture[str], store: Path) -> None:
        """`--run-id` checks that run alone; an unknown one is a usage error."""
        assert run_main(capsys, "verify", "--store", str(store), "--run-id", "r2") == (
            0,
            "ok: 1 run, 4 events, every hash chain intact\n",
            "",
        )
        assert run_main(capsys, "verify", "--store", str(store), "--run-id", "r9") == (
            2,
            "",
            "agentfsm verify: run 'r9' is not in the store; start it by appending "
            "'run.started' with expected_version 0\n",
        )

    def test_a_run_under_a_registered_table_is_checked_under_it(
        self, capsys: pytest.CaptureFixture[str], store: Path
    ) -> None:
        """Each run with its own table: found in the registry by the digest its log names."""
        log = LogBuilder("t-1", events=TICKET_TABLE.event_types)
        log.add("run.started", objective="refund", table=TICKET_TABLE.ref.model_dump())
        log.add("ticket.escalated", escalated_to="ann")
        with SQLiteEventStore(store, options=StoreOptions(reducer=Reducer(TICKET_TABLE))) as opened:
            opened.append("t-1", log.events, 0)
        code, out, _ = run_main(capsys, "verify", "--store", str(store))
        assert (code, out.splitlines()[-1]) == (1, "1 of 3 runs has findings")
        registry.register(TICKET_TABLE)
        assert run_main(capsys, "verify", "--store", str(store)) == (
            0,
            "ok: 3 runs, 12 events, every hash chain intact\n",
            "",
        )

    def test_a_keyed_store_needs_its_key(self, tmp_path: Path) -> None:
        """Verified with the key: ok; without it the command cannot check (exit 2)."""
        path = tmp_path / "runs.db"
        with SQLiteEventStore(path, options=StoreOptions(integrity_key=KEY)) as opened:
            opened.append("r1", scripted_run("r1", 1), 0)
        assert run_script("verify", "--store", str(path), env=keyed(KEY)).returncode == 0
        refused = run_script("verify", "--store", str(path), env=keyed(None))
        assert (refused.returncode, refused.stderr) == (
            2,
            f"agentfsm verify: error: SQLite file '{path}': the store is keyed with key id "
            f"'{key_id(KEY)}', but this handle has no key: give it the store's key "
            "(AGENTFSM_INTEGRITY_KEY or StoreOptions(integrity_key=...))\n",
        )


class TestPaging:
    def test_runs_are_listed_a_page_at_a_time(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A store of more runs than a page is verified whole, never listed at once."""
        path = tmp_path / "runs.db"
        with SQLiteEventStore(path, options=StoreOptions(snapshot_every=None)) as opened:
            for i in range(2 * _store.PAGE + 1):
                opened.append(f"r{i:05d}", scripted_run(f"r{i:05d}", 0), 0)
        limits: list[int | None] = []
        listing = SQLiteEventStore._list_runs

        def recorded(
            self: SQLiteEventStore,
            statuses: tuple[str, ...] | None,
            limit: int | None,
            after: str | None,
        ) -> list[RunInfo]:
            limits.append(limit)
            return listing(self, statuses, limit, after)

        monkeypatch.setattr(SQLiteEventStore, "_list_runs", recorded)
        assert run_main(capsys, "verify", "--store", str(path)) == (
            0,
            "ok: 1,001 runs, 1,001 events, every hash chain intact\n",
            "",
        )
        assert limits == [_store.PAGE] * 4  # three pages, and the empty one that ends them


def _cut(path: Path, run_id: str, keep: int) -> None:
    """Delete the rows of `run_id` after `keep`, and set its runs row to what the rows left
    fold to (the attacker knows the format)."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT data FROM agentfsm_events WHERE run_id = ? AND sequence <= ? ORDER BY sequence",
            (run_id, keep),
        ).fetchall()
        record = replay([parse_event(data) for (data,) in rows])
        conn.execute(
            "DELETE FROM agentfsm_events WHERE run_id = ? AND sequence > ?", (run_id, keep)
        )
        conn.execute(
            "UPDATE agentfsm_runs SET version = ?, status = ?, updated_at = ? WHERE run_id = ?",
            (keep, record.status, record.updated_at, run_id),
        )
    conn.close()


class TestAnchor:
    def test_the_first_run_writes_and_a_later_one_compares(
        self, capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
    ) -> None:
        """The heads of intact runs are kept; a run cut since is a finding, and its head in
        the file stays where it was, so the next run reports it again."""
        anchor = tmp_path / "heads.db"
        argv = ("verify", "--store", str(store), "--anchor", str(anchor))
        assert run_main(capsys, *argv) == (
            0,
            f"ok: 2 runs, 10 events, every hash chain intact\nanchor '{anchor}': 2 runs recorded\n",
            "",
        )
        with SQLiteEventStore(store) as opened:
            r1 = opened.verify("r1").head_hash
            r2 = opened.verify("r2").head_hash
        assert _heads(anchor) == [
            AnchoredHead("r1", 6, r1, "unkeyed"),
            AnchoredHead("r2", 4, r2, "unkeyed"),
        ]
        _cut(store, "r1", 4)
        finding = (
            "run 'r1', sequence 5: the log ends at version 4, but the anchor records version "
            "6: events were removed from the store\n"
        )
        for _ in range(2):
            assert run_main(capsys, *argv) == (
                1,
                f"{finding}1 of 2 runs has findings\nanchor '{anchor}': 1 run recorded\n",
                "",
            )
        assert _heads(anchor)[0] == AnchoredHead("r1", 6, r1, "unkeyed")

    def test_a_run_removed_from_the_store_is_a_finding(
        self, capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
    ) -> None:
        """Its rows and its runs row deleted: the anchor still knows it, alone or in a pass."""
        anchor = tmp_path / "heads.db"
        argv = ("verify", "--store", str(store), "--anchor", str(anchor))
        assert run_main(capsys, *argv)[0] == 0
        with sqlite3.connect(store) as conn:
            conn.execute("DELETE FROM agentfsm_events WHERE run_id = 'r2'")
            conn.execute("DELETE FROM agentfsm_runs WHERE run_id = 'r2'")
        conn.close()
        finding = (
            "run 'r2', sequence 1: the store has no such run, but the anchor records version "
            "4: it was removed from the store\n"
        )
        assert run_main(capsys, *argv) == (
            1,
            f"{finding}1 of 2 runs has findings\nanchor '{anchor}': 1 run recorded\n",
            "",
        )
        assert run_main(capsys, *argv, "--run-id", "r2") == (
            1,
            f"{finding}1 of 1 run has findings\nanchor '{anchor}': 0 runs recorded\n",
            "",
        )

    def test_a_run_that_grew_is_recorded_at_its_new_head(
        self, capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
    ) -> None:
        """A run appended to since the last check still holds the anchored event: no
        finding, and its new head is kept."""
        anchor = tmp_path / "heads.db"
        argv = ("verify", "--store", str(store), "--anchor", str(anchor), "--run-id", "r2")
        assert run_main(capsys, *argv)[0] == 0
        with SQLiteEventStore(store) as opened:
            record = opened.load("r2")
            approve(opened, "r2", "a1", "ann")
            head = opened.verify("r2").head_hash
        assert record.version == 4
        assert run_main(capsys, *argv)[0] == 0
        assert _heads(anchor) == [AnchoredHead("r2", 5, head, "unkeyed")]

    def test_the_store_anchor_of_the_environment_is_the_default(
        self, store: Path, tmp_path: Path
    ) -> None:
        """`AGENTFSM_ANCHOR` names the file when `--anchor` is not given."""
        anchor = tmp_path / "heads.db"
        result = run_script("verify", "--store", str(store), env={"AGENTFSM_ANCHOR": str(anchor)})
        assert (result.returncode, result.stdout.splitlines()[-1]) == (
            0,
            f"anchor '{anchor}': 2 runs recorded",
        )
        assert [h.run_id for h in _heads(anchor)] == ["r1", "r2"]


class TestUsage:
    def test_the_anchor_is_not_the_store(
        self, capsys: pytest.CaptureFixture[str], store: Path
    ) -> None:
        """An anchor in the store's own file guards nothing: refused, exit 2."""
        assert run_main(capsys, "verify", "--store", str(store), "--anchor", str(store)) == (
            2,
            "",
            "agentfsm verify: --anchor must be another file than the store: an anchor is kept "
            "where whoever can write the store cannot\n",
        )

    def test_a_key_too_short_is_one_line(self, store: Path) -> None:
        """A short `AGENTFSM_INTEGRITY_KEY` is a usage error naming the rule, no traceback."""
        result = run_script(
            "verify", "--store", str(store), env={"AGENTFSM_INTEGRITY_KEY": "short"}
        )
        assert (result.returncode, result.stderr) == (
            2,
            "agentfsm verify: an integrity key must be at least 16 bytes, got 5 (set "
            "AGENTFSM_INTEGRITY_KEY or StoreOptions(integrity_key=...) to a longer secret)\n",
        )
